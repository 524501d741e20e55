/* tpudata.image._imgkernel: a faster entropy decoder for baseline (sequential Huffman, 8-bit,
 * single-scan) JPEGs, put in place of libjpeg-turbo's own after jpeg_start_decompress. Included by
 * _imgkernel.c.
 *
 * It gives the coefficients libjpeg-turbo's decoder gives, bit for bit, on good and damaged data
 * alike; everything after it (dequantisation, IDCT, upsampling, colour conversion) is libjpeg's,
 * so the pixels are libjpeg's too. What makes it faster:
 * - the scan's entropy-coded bytes are unstuffed (FF 00 -> FF) once, segment by segment (the
 *   restart markers split them), into one buffer: the bit reader then loads 8 bytes at a time
 *   with no marker checks;
 * - one table lookup on the next 11 bits gives a coefficient's run, its value and the bits it
 *   used together whenever its code and extra bits fit in 11 bits (about 95% of the coefficients
 *   of a photo), and the bit buffer stays in registers for a whole MCU;
 * - the same lookup gives the next coefficient too (or the end of the block) where both fit in
 *   the 11 bits (about 60% of the lookups on q90 photos) and the first is not the block's last:
 *   the decoder waits on one table load per lookup, so fewer lookups is what makes it faster.
 *
 * libjpeg's behaviour it keeps (jdhuff.c, libjpeg-turbo 2.x): a code longer than 16 bits
 * decodes as 0; reading past the end of a segment reads zero bits, and the first time it does,
 * the segment is flagged (a JWRN_HIT_MARKER warning) and the rest of the segment's MCUs are left
 * zero; a restart resets the DC predictions and the flag; out-of-range zigzag positions of
 * damaged data land on coefficient 63; DC sums wrap as libjpeg's int arithmetic does.
 *
 * It takes over only where it can keep all of that without libjpeg's private state: the whole
 * scan's data must end in a marker inside the buffer (a truncated file stays with libjpeg and
 * with TensorFlow's source semantics, see mem_src), and with restart intervals every RSTn must
 * come in sequence, one per interval. Anything else (progressive, arithmetic, 12-bit, multi-scan,
 * odd restart markers) keeps libjpeg's decoder.
 */

#ifdef LIBJPEG_TURBO_VERSION
#define TPU_FAST_HUFFMAN 1
#if defined(__has_include) && !defined(TPU_NO_JPEGINT)
#if __has_include(<jpegint.h>)
#include <jpegint.h>
#define TPU_HAVE_JPEGINT 1
#endif
#endif
#ifndef TPU_HAVE_JPEGINT
/* jpegint.h is not installed everywhere (Debian ships it, libjpeg-turbo's own install does not):
 * the entropy decoder's interface as libjpeg declares it there, unchanged since libjpeg 6b */
struct jpeg_entropy_decoder {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};
#endif
#endif

#ifdef TPU_FAST_HUFFMAN

static int fast_huffman_enabled = 1; /* _set_fast_huffman(): the tests compare both decoders */
static long fast_huffman_scans = 0;  /* scans it took over (for the tests; counted atomically) */

#define FAST_BITS 11
/* a thread keeps its unstuffed-data buffers for the next image up to this size (a bigger file's
 * come from libjpeg's image pool and go with the image) */
#define FH_KEEP_BYTES ((size_t)4 << 20)

typedef struct {
    /* entry, low half: bits 0-4 bits used (0: longer code, or none: the slow path), bit 5 clear
     * (so the low 6 bits are the shift), bit 6 value included, bits 8-15 the symbol, bits 16-31
     * the value (int16). AC entries with bit 6 also give the coefficient that follows in the same
     * FAST_BITS bits where there is one: the low 6 bits are then the bits both use (the shift
     * goes straight from the loaded entry to the bit buffer: the decoder's critical path), and the
     * high half has bits 32-37 the bits of the first alone, bit 38 the second is the end of
     * block, bits 40-44 its position after the first's (1 + its run; 0 without one), bits 48-63
     * its value (the first's without one: stored twice, the same). DC tables keep the low half
     * only (half the cache). */
    union {
        uint64_t ac[1 << FAST_BITS];
        uint32_t dc[1 << FAST_BITS];
    } fast;
    int32_t maxcode[18]; /* largest code of each length, -1 without; [17] a sentinel */
    int32_t valoffset[18];
    uint8_t huffval[256];
} fh_table;

typedef struct {
    struct jpeg_entropy_decoder pub;
    fh_table tables[2][NUM_HUFF_TBLS]; /* [0] DC, [1] AC */
    const fh_table *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
    int member[D_MAX_BLOCKS_IN_MCU];
    int blocks;
    int last_dc[MAX_COMPS_IN_SCAN];
    /* the unstuffed data: segment s is data[seg[s] .. seg[s + 1]) */
    unsigned char *data;
    size_t *seg;
    int nseg, cur;
    unsigned int interval, mcu;
    /* the bit reader: buf holds `bits` bits at its top; pos is the offset of the next byte to
     * load in the current segment, which is read as its `len` bytes followed by zeros (what
     * libjpeg reads past the end) */
    uint64_t buf;
    int bits;
    size_t pos, len;
    const unsigned char *seg_data;
    JCOEF dummy[DCTSIZE2];
} fh_decoder;

/* zigzag -> natural order, with 16 extra entries of 63 for damaged data (as libjpeg's table) */
static const int fh_natural[DCTSIZE2 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

static inline int fh_extend(int x, int s) { return x < (1 << (s - 1)) ? x - (1 << s) + 1 : x; }

/* Build the decoding tables of one Huffman table (already checked by libjpeg's start pass). */
static void fh_build(const JHUFF_TBL *h, int is_ac, fh_table *t) {
    int count = 0, code = 0, k = 0;
    memset(&t->fast, 0, sizeof(t->fast));
    memcpy(t->huffval, h->huffval, sizeof(t->huffval));
    for (int l = 1; l <= 16; l++) {
        int n = h->bits[l];
        if (n) {
            t->valoffset[l] = count - code;
            t->maxcode[l] = code + n - 1;
            for (int i = 0; i < n; i++, k++) {
                int c = code + i;
                if (l > FAST_BITS) continue;
                int sym = h->huffval[k & 255];
                int s = sym & 15;
                int fill = FAST_BITS - l;
                for (int f = 0; f < (1 << fill); f++) {
                    int idx = (c << fill) | f;
                    uint32_t e = (uint32_t)l | ((uint32_t)sym << 8);
                    if ((!is_ac || s) && l + s <= FAST_BITS) { /* the value fits too */
                        int v = 0;
                        if (s) v = fh_extend((idx >> (fill - s)) & ((1 << s) - 1), s);
                        e = (uint32_t)(l + s) | 64u | ((uint32_t)sym << 8) | ((uint32_t)(uint16_t)(int16_t)v << 16);
                    }
                    if (is_ac)
                        t->fast.ac[idx] = e;
                    else
                        t->fast.dc[idx] = e;
                }
            }
            count += n;
            code += n;
        } else {
            t->maxcode[l] = -1;
            t->valoffset[l] = 0;
        }
        code <<= 1;
    }
    t->maxcode[17] = 0x7fffffff;
    t->valoffset[17] = 0;
    if (!is_ac) return;
    uint32_t one[1 << FAST_BITS]; /* the entries of one coefficient each, before pairing */
    for (int idx = 0; idx < (1 << FAST_BITS); idx++) one[idx] = (uint32_t)t->fast.ac[idx];
    for (int idx = 0; idx < (1 << FAST_BITS); idx++) { /* the pairs */
        uint32_t e1 = one[idx];
        if (!(e1 & 64)) continue;
        int l1 = (int)(e1 & 31), rem = FAST_BITS - l1;
        uint64_t hi = (uint64_t)l1 | ((uint64_t)(e1 >> 16) << 16); /* the first alone */
        int both = l1;
        if (rem > 0) {
            uint32_t e2 = one[(idx << l1) & ((1 << FAST_BITS) - 1)];
            int l2 = (int)(e2 & 31);
            if ((e2 & 64) && l2 <= rem) { /* a coefficient, value included */
                hi = (uint64_t)l1 | ((uint64_t)(1 + ((e2 >> 12) & 15)) << 8) | ((uint64_t)(e2 >> 16) << 16);
                both = l1 + l2;
            } else if (!(e2 & 64) && l2 && l2 <= rem && ((e2 >> 8) & 255) == 0) { /* end of block */
                hi = (uint64_t)l1 | 64u | ((uint64_t)(e1 >> 16) << 16);
                both = l1 + l2;
            }
        }
        t->fast.ac[idx] = (uint64_t)((e1 & ~63u) | (uint32_t)both) | (hi << 32);
    }
}

static inline uint64_t fh_load(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* The bit reader's working copy, in registers while a block is decoded. */
typedef struct {
    uint64_t buf;
    int bits;
    size_t pos, safe, len; /* safe: loads of 8 bytes from below it stay inside the segment */
    const unsigned char *data;
} fh_bits;

#define FH_INLINE static inline __attribute__((always_inline))

/* The 8 bytes at pos of the segment's bytes-then-zeros. */
static uint64_t fh_load_edge(const fh_bits *b) {
    unsigned char tmp[8] = {0};
    if (b->pos < b->len) memcpy(tmp, b->data + b->pos, b->len - b->pos < 8 ? b->len - b->pos : 8);
    return fh_load(tmp);
}

FH_INLINE void fh_refill(fh_bits *b) {
    uint64_t v = b->pos < b->safe ? fh_load(b->data + b->pos) : fh_load_edge(b);
    b->buf |= v >> b->bits;
    b->pos += (size_t)((63 - b->bits) >> 3);
    b->bits |= 56;
}

FH_INLINE void fh_drop(fh_bits *b, int n) {
    b->buf <<= n;
    b->bits -= n;
}

FH_INLINE int fh_getbits(fh_bits *b, int s) {
    int r = (int)(b->buf >> (64 - s));
    fh_drop(b, s);
    return r;
}

/* A code longer than FAST_BITS (or none): bit by bit from FAST_BITS + 1, as libjpeg's
 * jpeg_huff_decode; 17 bits and symbol 0 for garbage. Needs 17 bits in the buffer. */
FH_INLINE int fh_slow(j_decompress_ptr cinfo, fh_bits *b, const fh_table *t) {
    int l = FAST_BITS + 1;
    int32_t code = (int32_t)(b->buf >> (64 - l));
    while (l <= 16 && code > t->maxcode[l]) {
        l++;
        code = (int32_t)(b->buf >> (64 - l));
    }
    if (l > 16) {
        fh_drop(b, 17);
        WARNMS(cinfo, JWRN_HUFF_BAD_CODE);
        return 0;
    }
    fh_drop(b, l);
    return t->huffval[(code + t->valoffset[l]) & 255];
}

/* The symbol of a table entry that does not include the value. */
FH_INLINE int fh_symbol(j_decompress_ptr cinfo, fh_bits *b, const fh_table *t, uint32_t e) {
    if (e & 31) {
        fh_drop(b, (int)(e & 31));
        return (int)((e >> 8) & 255);
    }
    return fh_slow(cinfo, b, t);
}

/* An AC symbol whose entry e does not include the value: a coefficient (returns 1, *k at its
 * position), 16 zeros (1, *k 15 on) or the end of the block (0). */
FH_INLINE int fh_ac_slow(j_decompress_ptr cinfo, fh_bits *b, const fh_table *ac, uint32_t e, int *k,
                         JCOEF *block) {
    int sym = fh_symbol(cinfo, b, ac, e);
    int r = sym >> 4, s = sym & 15;
    if (s) {
        *k += r;
        block[fh_natural[*k]] = (JCOEF)fh_extend(fh_getbits(b, s), s);
        return 1;
    }
    if (r != 15) return 0;
    *k += 15;
    return 1;
}

/* One block: the DC difference (its sum with the prediction stored at [0]) and the AC run. */
FH_INLINE void fh_block(j_decompress_ptr cinfo, fh_bits *b, const fh_table *dc, const fh_table *ac,
                        int *last_dc, JCOEF *block) {
    if (b->bits < 32) fh_refill(b);
    uint32_t e = dc->fast.dc[b->buf >> (64 - FAST_BITS)];
    int diff;
    if (e & 64) {
        fh_drop(b, (int)(e & 63));
        diff = (int16_t)(e >> 16);
    } else {
        int s = fh_symbol(cinfo, b, dc, e);
        diff = s ? fh_extend(fh_getbits(b, s), s) : 0;
    }
    int dcv = (int)((unsigned int)diff + (unsigned int)*last_dc);
    *last_dc = dcv;
    block[0] = (JCOEF)dcv;
    int k = 1;
    while (k < DCTSIZE2) {
        /* the lookup needs only the top FAST_BITS bits: it goes first, and the refill (bits
         * below those) is off the path from one lookup to the next */
        if (__builtin_expect(b->bits < FAST_BITS, 0)) fh_refill(b);
        uint64_t p = ac->fast.ac[b->buf >> (64 - FAST_BITS)];
        if (b->bits < 32) fh_refill(b);
        if (p & 64) { /* a coefficient, its value included, and maybe the next one */
            k += (int)(p >> 12) & 15;
            if (k >= DCTSIZE2 - 1) { /* the block's last coefficient: the bits after it are not the block's */
                fh_drop(b, (int)(p >> 32) & 63);
                block[fh_natural[k]] = (JCOEF)(int16_t)(p >> 16);
                return;
            }
            fh_drop(b, (int)(p & 63));
            block[fh_natural[k]] = (JCOEF)(int16_t)(p >> 16);
            if (p & ((uint64_t)64 << 32)) return; /* then the end of block */
            k += (int)(p >> 40) & 31;
            block[fh_natural[k]] = (JCOEF)(int16_t)(p >> 48);
            k++;
            continue;
        }
        if (!fh_ac_slow(cinfo, b, ac, (uint32_t)p, &k, block)) return;
        k++;
    }
}

/* Start reading segment s (a restart): empty bit buffer, from the segment's first byte. */
static void fh_start_segment(fh_decoder *d, int s) {
    d->cur = s;
    d->buf = 0;
    d->bits = 0;
    d->seg_data = d->data + d->seg[s];
    d->len = d->seg[s + 1] - d->seg[s];
    d->pos = 0;
    for (int ci = 0; ci < MAX_COMPS_IN_SCAN; ci++) d->last_dc[ci] = 0;
    d->pub.insufficient_data = FALSE;
}

/* Built twice where the compiler can: with BMI2 (one-cycle variable shifts, on the decoder's
 * critical path), picked at load time where the CPU has it, and without. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("bmi2", "default")))
#endif
static boolean fh_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    fh_decoder *d = (fh_decoder *)cinfo->entropy;
    if (d->interval && d->mcu && d->mcu % d->interval == 0) fh_start_segment(d, d->cur + 1);
    d->mcu++;
    if (d->pub.insufficient_data) return TRUE; /* the MCU stays zero, as in libjpeg */
    fh_bits b = {d->buf, d->bits, d->pos, d->len >= 8 ? d->len - 8 + 1 : 0, d->len, d->seg_data};
    for (int blkn = 0; blkn < d->blocks; blkn++)
        fh_block(cinfo, &b, d->dc[blkn], d->ac[blkn], &d->last_dc[d->member[blkn]],
                 MCU_data ? (JCOEF *)MCU_data[blkn] : d->dummy);
    d->buf = b.buf;
    d->bits = b.bits;
    d->pos = b.pos;
    if (d->pos * 8 - (size_t)d->bits > d->len * 8) { /* zero bits were read past the end */
        WARNMS(cinfo, JWRN_HIT_MARKER);
        d->pub.insufficient_data = TRUE;
    }
    return TRUE;
}

static void fh_start_pass(j_decompress_ptr cinfo) {
    /* a later scan (not expected: single-scan files only) */
    ERREXIT(cinfo, JERR_NOT_COMPILED);
}

/* Unstuff the scan's entropy-coded data from `p` (up to `end`) into d->data, one segment per
 * restart interval. Returns the position of the marker that ends the scan, or NULL where the
 * data has no such marker or the restart markers are not one per interval in sequence. */
static const unsigned char *fh_unstuff(fh_decoder *d, const unsigned char *p, const unsigned char *end) {
    unsigned char *out = d->data;
    int s = 0;
    d->seg[0] = 0;
    for (;;) {
        const unsigned char *q = memchr(p, 0xFF, (size_t)(end - p));
        if (q == NULL) return NULL; /* no marker: truncated */
        memcpy(out, p, (size_t)(q - p));
        out += q - p;
        const unsigned char *m = q + 1;
        while (m < end && *m == 0xFF) m++; /* fill bytes */
        if (m >= end) return NULL;
        int c = *m;
        p = m + 1;
        if (c == 0) { /* FF 00: an FF data byte */
            *out++ = 0xFF;
            continue;
        }
        d->seg[++s] = (size_t)(out - d->data);
        if (c >= JPEG_RST0 && c <= JPEG_RST0 + 7) {
            if (!d->interval || s >= d->nseg || c != JPEG_RST0 + ((s - 1) & 7)) return NULL;
            continue;
        }
        return s == d->nseg ? q : NULL;
    }
}

/* What a thread keeps from one image to the next: the decoder with its tables (rebuilt only when
 * an image's Huffman tables differ from the last ones, so a dataset of files with the same tables
 * builds them once per thread) and the unstuffed-data buffers. */
typedef struct fh_scratch {
    fh_decoder dec;
    unsigned char key[2][NUM_HUFF_TBLS][17 + 256]; /* the JHUFF_TBL each table was built from */
    int have[2][NUM_HUFF_TBLS];
    unsigned char *data;
    size_t data_cap; /* bytes */
    size_t *seg;
    size_t seg_cap; /* bytes */
} fh_scratch;

static void fh_scratch_free(void *p) {
    fh_scratch *f = (fh_scratch *)p;
    if (f == NULL) return;
    free(f->data);
    free(f->seg);
    free(f);
}

/* The calling thread's scratch (made on first use, freed when the thread ends), or NULL. */
static pthread_key_t fh_key;
static pthread_once_t fh_once = PTHREAD_ONCE_INIT;
static int fh_key_ok = 0;

static void fh_key_init(void) { fh_key_ok = pthread_key_create(&fh_key, fh_scratch_free) == 0; }

static fh_scratch *fh_thread_scratch(void) { /* thread_object (and reserve below): _imgkernel.c's */
    return (fh_scratch *)thread_object(&fh_once, fh_key_init, &fh_key, &fh_key_ok, sizeof(fh_scratch));
}

static const fh_table *fh_table_for(fh_scratch *f, const JHUFF_TBL *h, int is_ac, int n) {
    unsigned char key[17 + 256];
    memcpy(key, h->bits, 17);
    memcpy(key + 17, h->huffval, 256);
    fh_table *t = &f->dec.tables[is_ac][n];
    if (!f->have[is_ac][n] || memcmp(key, f->key[is_ac][n], sizeof(key)) != 0) {
        fh_build(h, is_ac, t);
        memcpy(f->key[is_ac][n], key, sizeof(key));
        f->have[is_ac][n] = 1;
    }
    return t;
}

/* Put the fast decoder in place of libjpeg's for this decompression where it applies (see the
 * top); returns whether it did. Call right after jpeg_start_decompress. Its tables and buffers
 * are the calling thread's (kept for the next image). */
static int fast_huffman_install(j_decompress_ptr cinfo) {
    if (!fast_huffman_enabled || cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8)
        return 0;
    /* one scan holds every component (libjpeg's has_multiple_scans is false) */
    if (cinfo->comps_in_scan != cinfo->num_components || cinfo->unread_marker != 0) return 0;
    if (cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 || cinfo->Ah != 0 || cinfo->Al != 0) return 0;
    if (cinfo->blocks_in_MCU < 1 || cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU) return 0;
    if (cinfo->output_scanline != 0 || cinfo->src == NULL) return 0;
    for (int b = 0; b < cinfo->blocks_in_MCU; b++) {
        jpeg_component_info *comp = cinfo->cur_comp_info[cinfo->MCU_membership[b]];
        int dcn = comp->dc_tbl_no, acn = comp->ac_tbl_no;
        if (dcn < 0 || dcn >= NUM_HUFF_TBLS || acn < 0 || acn >= NUM_HUFF_TBLS) return 0;
        if (cinfo->dc_huff_tbl_ptrs[dcn] == NULL || cinfo->ac_huff_tbl_ptrs[acn] == NULL) return 0;
    }
    fh_scratch *f = fh_thread_scratch();
    if (f == NULL) return 0;
    unsigned int total = cinfo->MCUs_per_row * cinfo->MCU_rows_in_scan, interval = cinfo->restart_interval;
    int nseg = interval ? (int)((total + interval - 1) / interval) : 1;
    struct jpeg_source_mgr *src = cinfo->src;
    size_t need = src->bytes_in_buffer + 16, seg_need = sizeof(size_t) * ((size_t)nseg + 1);
    unsigned char *data;
    size_t *seg;
    if (need + seg_need > FH_KEEP_BYTES) { /* a big file: buffers for this image only */
        data = (unsigned char *)(*cinfo->mem->alloc_large)((j_common_ptr)cinfo, JPOOL_IMAGE, need);
        seg = (size_t *)(*cinfo->mem->alloc_large)((j_common_ptr)cinfo, JPOOL_IMAGE, seg_need);
    } else {
        data = (unsigned char *)reserve((void **)&f->data, &f->data_cap, need);
        seg = (size_t *)reserve((void **)&f->seg, &f->seg_cap, seg_need);
        if (data == NULL || seg == NULL) return 0; /* out of memory: libjpeg's decoder */
    }
    fh_decoder *d = &f->dec;
    memset(&d->pub, 0, sizeof(d->pub));
    d->blocks = cinfo->blocks_in_MCU;
    d->interval = interval;
    d->nseg = nseg;
    d->mcu = 0;
    d->data = data;
    d->seg = seg;
    const unsigned char *p = src->next_input_byte, *end = p + src->bytes_in_buffer;
    const unsigned char *marker = fh_unstuff(d, p, end);
    if (marker == NULL) return 0;
    for (int b = 0; b < d->blocks; b++) {
        int ci = cinfo->MCU_membership[b];
        jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        d->dc[b] = fh_table_for(f, cinfo->dc_huff_tbl_ptrs[comp->dc_tbl_no], 0, comp->dc_tbl_no);
        d->ac[b] = fh_table_for(f, cinfo->ac_huff_tbl_ptrs[comp->ac_tbl_no], 1, comp->ac_tbl_no);
        d->member[b] = ci;
    }
    /* the scan is ours: libjpeg reads on from its closing marker once the rows are out */
    src->bytes_in_buffer -= (size_t)(marker - p);
    src->next_input_byte = marker;
    d->pub.start_pass = fh_start_pass;
    d->pub.decode_mcu = fh_decode_mcu;
    d->pub.insufficient_data = FALSE;
    fh_start_segment(d, 0);
    cinfo->entropy = &d->pub;
    __atomic_fetch_add(&fast_huffman_scans, 1, __ATOMIC_RELAXED);
    return 1;
}

#else /* no jpegint.h or not libjpeg-turbo: libjpeg's decoder throughout */

static int fast_huffman_enabled = 0;
static long fast_huffman_scans = 0;
static int fast_huffman_install(j_decompress_ptr cinfo) {
    (void)cinfo;
    return 0;
}

#endif
