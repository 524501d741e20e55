/* tpudata.image._imgkernel: JPEG decode (whole image or a crop window) and the batch preprocessing
 * kernel (decode-crop -> TF resize -> flip -> normalise -> cast, written straight into a preallocated
 * batch), against the system libjpeg-turbo, with the GIL released.
 *
 * The pure numpy/Pillow path in tpudata/image/ is the reference; tests/image/ checks this kernel
 * against it and against TensorFlow's golden outputs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

/* The calling thread's object under `key` (made zeroed on its first use; the key's destructor
 * frees it when the thread ends), or NULL. `init` makes the key once (`*ok`: whether it could). */
static void *thread_object(pthread_once_t *once, void (*init)(void), const pthread_key_t *key, const int *ok,
                           size_t size) {
    pthread_once(once, init);
    if (!*ok) return NULL;
    void *p = pthread_getspecific(*key);
    if (p == NULL) {
        p = calloc(1, size);
        if (p != NULL && pthread_setspecific(*key, p) != 0) {
            free(p);
            p = NULL;
        }
    }
    return p;
}

/* *buf grown to at least `bytes` (*cap: its size in bytes; the contents are not kept), or NULL
 * without memory. */
static void *reserve(void **buf, size_t *cap, size_t bytes) {
    if (*cap < bytes) {
        free(*buf);
        *buf = malloc(bytes);
        *cap = *buf ? bytes : 0;
    }
    return *buf;
}

#include "_jpeg_huffman.c"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "_resize_simd.c"

/* ------------------------------------------------------------------------------------------ */
/* libjpeg error handling: longjmp out with the library's message.                            */

struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    int truncated;  /* the data ran out (the source's doing; see mem_src) */
    int finishing;  /* every row is out: reading on to EOI */
    int quiet_end;  /* the data ran out then: not an error (as in TensorFlow) */
    int past_header; /* jpeg_read_header returned: truncated image data, not a truncated header */
    int looping;     /* recover: the decoder kept asking for the same stale bytes (see src_fill) */
    char msg[JMSG_LENGTH_MAX];
};

static void on_error_exit(j_common_ptr cinfo) {
    struct err_mgr *e = (struct err_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

static void on_output_message(j_common_ptr cinfo) { (void)cinfo; }

#define ERRLEN 320

static void err_init(struct jpeg_decompress_struct *cinfo, struct err_mgr *jerr) {
    memset(cinfo, 0, sizeof(*cinfo));
    cinfo->err = jpeg_std_error(&jerr->pub);
    jerr->pub.error_exit = on_error_exit;
    jerr->pub.output_message = on_output_message;
    jerr->truncated = jerr->finishing = jerr->quiet_end = jerr->past_header = jerr->looping = 0;
    jerr->msg[0] = 0;
}

/* The message of a libjpeg error caught by setjmp. */
static void err_format(const struct err_mgr *jerr, char *err) {
    if (jerr->looping)
        snprintf(err, ERRLEN,
                 "corrupt JPEG data: with try_recover_truncated the decoder reads the same bytes over "
                 "and over (TensorFlow's decode_jpeg never returns on this file); decode it without "
                 "try_recover_truncated, or drop it");
    else if (jerr->truncated && !jerr->past_header)
        snprintf(err, ERRLEN, "truncated JPEG data: the file ends inside its headers (no image data)");
    else if (jerr->truncated)
        snprintf(err, ERRLEN,
                 "truncated JPEG data: premature end of data (the image is cut short or corrupt; "
                 "TensorFlow's decode_jpeg fails on it too; try_recover_truncated=True decodes what is "
                 "there, as TensorFlow's flag does)");
    else
        snprintf(err, ERRLEN, "invalid JPEG data: %s", jerr->msg);
}

/* A memory source that behaves as TensorFlow's (tensorflow/core/lib/jpeg/jpeg_handle.cc) rather
 * than libjpeg's jpeg_mem_src, which feeds a fake end-of-image marker whenever the data runs out, so
 * a truncated file decodes silently with its missing blocks gray.
 *
 * Without `recover`, running out of data is an error. TensorFlow's source raises one when the data
 * is used up, and suspends when the decoder's working copy of the position runs dry inside a block
 * or a marker (our fields, synced at the block's start, still say bytes are left); the decoder then
 * fails the image, except after the last scanline (jpeg_finish_decompress reading the markers up to
 * EOI gives up quietly on a suspension), so there that one case ends the decode without an error
 * too (err_mgr.finishing).
 *
 * With `recover` (TensorFlow's try_recover_truncated), as TensorFlow's source does: when the
 * decoder's working copy of the position runs dry inside a block (our fields still say what was left
 * at the block's start), carry on from those stale fields, so the block's bytes are read again; once
 * the data is truly used up, a fake EOI marker with a warning (the rest of the scan decodes gray),
 * and an error if the decoder asks again before reading any of that marker. */
typedef struct {
    struct jpeg_source_mgr pub;
    const JOCTET *data;
    int recover;
    const JOCTET *stale_at; /* recover: where the last stale fields pointed, and how often in a row */
    long stale_count;
} mem_src;

/* Stale fields handed back this often in a row at one position: the decoder is going round in a
 * loop that never ends (TensorFlow's source, which does the same, hangs there). A legitimate
 * re-read of a block's bytes asks a few times at most. */
#define STALE_LOOP_LIMIT 10000

static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};

static void src_init(j_decompress_ptr cinfo) { (void)cinfo; }

static void src_term(j_decompress_ptr cinfo) { (void)cinfo; }

static boolean src_fill(j_decompress_ptr cinfo) {
    mem_src *s = (mem_src *)cinfo->src;
    struct err_mgr *e = (struct err_mgr *)cinfo->err;
    if (s->pub.bytes_in_buffer == 0 && s->pub.next_input_byte == s->data) ERREXIT(cinfo, JERR_INPUT_EMPTY);
    if (s->recover) {
        if (s->pub.bytes_in_buffer != 0) { /* stale: TensorFlow's source does the same */
            s->stale_count = s->pub.next_input_byte == s->stale_at ? s->stale_count + 1 : 1;
            s->stale_at = s->pub.next_input_byte;
            if (s->stale_count > STALE_LOOP_LIMIT) {
                e->looping = 1;
                ERREXIT(cinfo, JERR_FILE_READ);
            }
            return TRUE;
        }
        if (s->pub.next_input_byte == fake_eoi) ERREXIT(cinfo, JERR_FILE_READ);
        WARNMS(cinfo, JWRN_JPEG_EOF);
        s->pub.next_input_byte = fake_eoi;
        s->pub.bytes_in_buffer = 2;
        return TRUE;
    }
    /* stale fields: TensorFlow's source suspends, harmless only while finishing (see above) */
    if (s->pub.bytes_in_buffer != 0 && e->finishing)
        e->quiet_end = 1;
    else
        e->truncated = 1;
    ERREXIT(cinfo, JERR_INPUT_EOF);
    return FALSE;
}

static void src_skip(j_decompress_ptr cinfo, long n) {
    mem_src *s = (mem_src *)cinfo->src;
    if (n <= 0) return;
    if ((unsigned long)n > s->pub.bytes_in_buffer) { /* past the end: as TensorFlow's source */
        s->pub.bytes_in_buffer = 0;
        (void)src_fill(cinfo);
        return;
    }
    s->pub.next_input_byte += n;
    s->pub.bytes_in_buffer -= (size_t)n;
}

static void src_set(j_decompress_ptr cinfo, mem_src *s, const unsigned char *data, size_t len, int recover) {
    memset(s, 0, sizeof(*s));
    s->data = data;
    s->pub.init_source = src_init;
    s->pub.fill_input_buffer = src_fill;
    s->pub.skip_input_data = src_skip;
    s->pub.resync_to_restart = jpeg_resync_to_restart;
    s->pub.term_source = src_term;
    s->pub.next_input_byte = data;
    s->pub.bytes_in_buffer = len;
    s->recover = recover;
    cinfo->src = &s->pub;
}

/* How to decode: TensorFlow's DecodeJpeg attributes, and the size limit. */
typedef struct {
    int channels, fast_dct, fancy;
    int recover;       /* try_recover_truncated */
    int64_t max_bytes; /* height * width * components of the whole image may not exceed it */
    int tf_crop;       /* columns as TensorFlow's DecodeAndCropJpeg decodes them (no widening, below) */
} decode_opts;

/* Decode rows [y, y+h) and columns [x, x+w) of a JPEG into out (row stride out_stride bytes) with
 * `channels` (1 or 3) channels, as TensorFlow's DecodeJpeg/DecodeAndCropJpeg do (fancy upsampling,
 * CMYK/YCCK converted to RGB with or without the Adobe inversion). Returns 0 or -1 with err set.
 * With flex != NULL, out and out_stride are ignored: the window goes into *flex (grown as needed,
 * *flex_cap bytes; the caller frees it) as libjpeg writes it, scanlines a little wider than the
 * window, without a copy; *region and *region_stride then give where its rows start.
 * The window is checked in 64-bit arithmetic (any int64 values may come in), and the image size
 * against o->max_bytes before libjpeg allocates anything for the image. */
static int decode_region(const unsigned char *data, size_t len, const decode_opts *o, int64_t y, int64_t x,
                         int64_t h, int64_t w, unsigned char *out, ptrdiff_t out_stride, unsigned char **flex,
                         size_t *flex_cap, const unsigned char **region, ptrdiff_t *region_stride, char *err) {
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    mem_src src;
    unsigned char *volatile row = NULL;
    const int channels = o->channels;
    err_init(&cinfo, &jerr);
    if (setjmp(jerr.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        free(row);
        if (jerr.quiet_end) return 0; /* every row was out: TensorFlow's decode succeeds too */
        err_format(&jerr, err);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    src_set(&cinfo, &src, data, len, o->recover);
    if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) {
        snprintf(err, ERRLEN, "invalid JPEG data: no image header");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jerr.past_header = 1;
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    if (cmyk)
        cinfo.out_color_space = JCS_CMYK;
    else
        cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.dct_method = o->fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = o->fancy ? TRUE : FALSE;
    cinfo.do_block_smoothing = TRUE;
    /* The size the header claims, before jpeg_start_decompress allocates for it (TensorFlow checks
     * the same product: height * width * components of the file). */
    jpeg_calc_output_dimensions(&cinfo);
    const int64_t H = (int64_t)cinfo.output_height, W = (int64_t)cinfo.output_width;
    const int64_t size = H * W * (int64_t)cinfo.num_components;
    if (size > o->max_bytes) {
        snprintf(err, ERRLEN,
                 "the JPEG header claims a %lldx%lld image with %d components (%lld bytes decoded), over "
                 "the limit of %lld bytes (tpudata.image.decode.MAX_DECODED_BYTES; TensorFlow's decode_jpeg "
                 "refuses 2**29 bytes and more)",
                 (long long)H, (long long)W, cinfo.num_components, (long long)size, (long long)o->max_bytes);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (y < 0 || x < 0 || h <= 0 || w <= 0 || y > H || x > W || h > H - y || w > W - x) {
        snprintf(err, ERRLEN, "crop window (y=%lld, x=%lld, h=%lld, w=%lld) is not inside the %lldx%lld image",
                 (long long)y, (long long)x, (long long)h, (long long)w, (long long)H, (long long)W);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_start_decompress(&cinfo);
    fast_huffman_install(&cinfo);
    /* Widen the decoded columns by one iMCU each side: libjpeg-turbo's fancy upsampler treats the
     * edge of a cropped scanline as the image edge (it differs from a full decode there, e.g. for
     * 4:2:2 and 4:2:0 files, and TensorFlow's DecodeAndCropJpeg shows that difference). With
     * o->tf_crop the window is cropped as TensorFlow crops it (jpeg_crop_scanline on the window
     * itself), edge values included. Every value is now within [0, W] (at most 65535): int
     * arithmetic from here on. */
    int margin = o->tf_crop ? 0 : cinfo.max_h_samp_factor * DCTSIZE;
    int xa = x - margin < 0 ? 0 : (int)(x - margin);
    int xb = x + w + margin > W ? (int)W : (int)(x + w + margin);
    JDIMENSION xoff = (JDIMENSION)xa, cw = (JDIMENSION)(xb - xa);
    if (xb - xa < W) jpeg_crop_scanline(&cinfo, &xoff, &cw);
    if (y > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
    int oc = cinfo.output_components;
    int shift = (int)x - (int)xoff;
    int direct = oc == channels && (flex != NULL || (shift == 0 && (int64_t)cinfo.output_width == w));
    if (flex != NULL) { /* direct: whole decoded scanlines; else (CMYK) the converted window */
        out_stride = direct ? (ptrdiff_t)cinfo.output_width * oc : (ptrdiff_t)w * channels;
        size_t need = (size_t)h * (size_t)out_stride;
        if (reserve((void **)flex, flex_cap, need) == NULL) {
            snprintf(err, ERRLEN, "out of memory");
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
        out = *flex + (direct ? (ptrdiff_t)shift * oc : 0);
        *region = out;
        *region_stride = out_stride;
    }
    if (!direct) {
        row = (unsigned char *)malloc((size_t)cinfo.output_width * oc + 16);
        if (row == NULL) {
            snprintf(err, ERRLEN, "out of memory");
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
    }
    const size_t row_bytes = (size_t)w * channels;
    for (int r = 0; r < (int)h; r++) {
        unsigned char *dst = out + (ptrdiff_t)r * out_stride;
        JSAMPROW rp = direct ? dst - (ptrdiff_t)shift * oc : row;
        if (jpeg_read_scanlines(&cinfo, &rp, 1) != 1) {
            /* Not reached with mem_src (it never suspends); kept for TensorFlow's semantics: with
             * try_recover_truncated the missing rows repeat the row above (black for the first). */
            if (!o->recover) {
                snprintf(err, ERRLEN, "truncated JPEG data: no data for row %lld", (long long)(y + r));
                jpeg_destroy_decompress(&cinfo);
                free(row);
                return -1;
            }
            for (; r < (int)h; r++) {
                unsigned char *d = out + (ptrdiff_t)r * out_stride;
                if (r == 0)
                    memset(d, 0, row_bytes);
                else
                    memcpy(d, d - out_stride, row_bytes);
            }
            break;
        }
        if (direct) continue;
        const unsigned char *src_row = row + (ptrdiff_t)shift * oc;
        if (oc == 4) {
            int adobe = cinfo.saw_Adobe_marker;
            for (int i = 0; i < (int)w; i++) {
                int c = src_row[4 * i], m = src_row[4 * i + 1], yy = src_row[4 * i + 2], k = src_row[4 * i + 3];
                int R, G, B;
                if (adobe) {
                    R = (k * c) / 255; G = (k * m) / 255; B = (k * yy) / 255;
                } else {
                    R = (255 - k) * (255 - c) / 255; G = (255 - k) * (255 - m) / 255;
                    B = (255 - k) * (255 - yy) / 255;
                }
                if (channels == 3) {
                    dst[3 * i] = (unsigned char)R; dst[3 * i + 1] = (unsigned char)G;
                    dst[3 * i + 2] = (unsigned char)B;
                } else {
                    dst[i] = (unsigned char)((R * 19595 + G * 38470 + B * 7471 + 32768) >> 16);
                }
            }
        } else {
            memcpy(dst, src_row, row_bytes);
        }
    }
    /* A window down to the last row (a whole decode): read on to the end of the image, as
     * TensorFlow's jpeg_finish_decompress does, so damage after the last scanline (a bogus marker,
     * a missing end) fails the image as it fails there. Above that, jpeg_destroy_decompress aborts:
     * rows below the window are never decoded (TensorFlow's crop skips them unread too). */
    if (cinfo.output_scanline == cinfo.output_height) {
        jerr.finishing = 1;
        jpeg_finish_decompress(&cinfo);
    }
    jpeg_destroy_decompress(&cinfo);
    free(row);
    return 0;
}

static int read_info(const unsigned char *data, size_t len, int *h, int *w, int *c, int *cs, char *err) {
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    mem_src src;
    err_init(&cinfo, &jerr);
    if (setjmp(jerr.jmp)) {
        err_format(&jerr, err);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    src_set(&cinfo, &src, data, len, 0);
    jpeg_read_header(&cinfo, TRUE);
    *h = (int)cinfo.image_height;
    *w = (int)cinfo.image_width;
    *c = cinfo.num_components;
    *cs = (int)cinfo.jpeg_color_space;
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* TensorFlow's resize kernels (resize_bicubic_op.cc, resize_bilinear_op.cc), float32 throughout,
 * same operation order. method: 0 TF1 bicubic (legacy grid, A=-0.75, index clamping),
 * 1 TF2 bicubic (half-pixel, Keys A=-0.5, out-of-image taps dropped and renormalised),
 * 2 TF1 bilinear (legacy grid), 3 TF2 bilinear (half-pixel). */

#define TABLE 1024
static float cubic_table[2][(TABLE + 1) * 2];

static void init_tables(void) {
    for (int t = 0; t < 2; t++) {
        double a = t == 0 ? -0.75 : -0.5;
        for (int i = 0; i <= TABLE; i++) {
            float xx = (float)(i * 1.0 / TABLE);
            cubic_table[t][i * 2] = (float)(((a + 2) * xx - (a + 3)) * xx * xx + 1);
            xx += 1.0f;
            cubic_table[t][i * 2 + 1] = (float)(((a * xx - 5 * a) * xx + 8 * a) * xx - 4 * a);
        }
    }
}

static inline int bound(int v, int limit) { return v < 0 ? 0 : (v > limit - 1 ? limit - 1 : v); }

static void cubic_taps(int half_pixel, float scale, int out, int limit, taps4 *t) {
    float in_f = half_pixel ? ((float)out + 0.5f) * scale - 0.5f : (float)out * scale;
    int in = (int)floorf(in_f);
    float delta = in_f - (float)in;
    int off = (int)lrintf(delta * TABLE);
    const float *tab = cubic_table[half_pixel ? 1 : 0];
    float w0 = tab[off * 2 + 1], w1 = tab[off * 2], w2 = tab[(TABLE - off) * 2],
          w3 = tab[(TABLE - off) * 2 + 1];
    int i0 = bound(in - 1, limit), i1 = bound(in, limit), i2 = bound(in + 1, limit), i3 = bound(in + 2, limit);
    if (half_pixel) {
        if (i0 != in - 1) w0 = 0.0f;
        if (i1 != in) w1 = 0.0f;
        if (i2 != in + 1) w2 = 0.0f;
        if (i3 != in + 2) w3 = 0.0f;
        float s = w0 + w1 + w2 + w3;
        if (fabsf(s) >= 1000.0f * 1.17549435e-38f) {
            float inv = 1.0f / s;
            w0 *= inv; w1 *= inv; w2 *= inv; w3 *= inv;
        }
    }
    t->in = in;
    t->idx[0] = i0; t->idx[1] = i1; t->idx[2] = i2; t->idx[3] = i3;
    t->w[0] = w0; t->w[1] = w1; t->w[2] = w2; t->w[3] = w3;
}

typedef struct { int lo, hi; float lerp; } taps2;

static void linear_taps(int half_pixel, float scale, int out, int limit, taps2 *t) {
    float in = half_pixel ? ((float)out + 0.5f) * scale - 0.5f : (float)out * scale;
    float in_f = floorf(in);
    int lo = (int)in_f, hi = (int)ceilf(in);
    t->lo = lo < 0 ? 0 : lo;
    t->hi = hi > limit - 1 ? limit - 1 : hi;
    t->lerp = in - in_f;
}

typedef struct {
    int out_h, out_w, method, out_dtype, normalize;
    float scale, mean[3], stddev[3];
    float *add, *mul; /* out_w * 3: mean and 1/stddev (0 and 1 without normalisation) per value */
} post_params;

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void reverse_pixels(float *v, int ow) {
    for (int a = 0, b = ow - 1; a < b; a++, b--)
        for (int c = 0; c < 3; c++) {
            float t = v[a * 3 + c];
            v[a * 3 + c] = v[b * 3 + c];
            v[b * 3 + c] = t;
        }
}

/* Scale, normalise, flip and cast one output row of 3-channel floats into dst. The normalisation
 * multiplies by 1/stddev (TensorFlow divides: at most an ulp apart). p->add / p->mul hold the
 * per-channel mean and 1/stddev repeated along the row, so the loop is a plain vector loop
 * (same operations per value as the per-channel form). */
static void emit_row(const post_params *p, float *v, int flip, void *dst_row) {
    int ow = p->out_w, n = ow * 3;
    const float scale = p->scale, *add = p->add, *mul = p->mul;
    if (p->out_dtype == 1) { /* float32: straight into the batch (no staging copy) */
        float *d = (float *)dst_row;
#ifdef __SSE2__
        if (((uintptr_t)d & 15) == 0) {
            /* non-temporal stores: the batch (tens of MB) is not read back here, so its cache
             * lines are written without being fetched first (half the memory traffic). A flip
             * reverses the pixels first (mean and 1/stddev repeat per pixel: the same values). */
            if (flip) reverse_pixels(v, ow);
            int i = 0;
            for (; i + 4 <= n; i += 4) {
                __m128 x = _mm_mul_ps(_mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(v + i), _mm_set1_ps(scale)),
                                                 _mm_loadu_ps(add + i)), _mm_loadu_ps(mul + i));
                _mm_stream_ps(d + i, x);
            }
            for (; i < n; i++) d[i] = (v[i] * scale - add[i]) * mul[i];
            return;
        }
#endif
        if (!flip) {
            for (int i = 0; i < n; i++) d[i] = (v[i] * scale - add[i]) * mul[i];
        } else {
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < 3; c++)
                    d[(ow - 1 - x) * 3 + c] = (v[x * 3 + c] * scale - add[x * 3 + c]) * mul[x * 3 + c];
        }
        return;
    }
    for (int i = 0; i < n; i++) v[i] = (v[i] * scale - add[i]) * mul[i];
    if (flip) reverse_pixels(v, ow);
    if (p->out_dtype == 0) {
        uint8_t *d = (uint8_t *)dst_row;
        int i = 0;
#ifdef __SSE2__
        /* clamp, round half to even (the default MXCSR mode, as lrintf), pack: 16 values a step */
        const __m128 lo = _mm_setzero_ps(), hi = _mm_set1_ps(255.0f);
        for (; i + 16 <= n; i += 16) {
            __m128i a = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_loadu_ps(v + i), lo), hi));
            __m128i b = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_loadu_ps(v + i + 4), lo), hi));
            __m128i c = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_loadu_ps(v + i + 8), lo), hi));
            __m128i e = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_loadu_ps(v + i + 12), lo), hi));
            _mm_storeu_si128((__m128i *)(d + i), _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, e)));
        }
#endif
        for (; i < n; i++) {
            float r = v[i] < 0.0f ? 0.0f : (v[i] > 255.0f ? 255.0f : v[i]);
            d[i] = (uint8_t)lrintf(r);
        }
    } else {
        uint16_t *d = (uint16_t *)dst_row;
        int i = 0;
#ifdef __SSE2__
        /* to_bf16 four lanes at a time: round to nearest even, NaN kept quiet */
        const __m128i one = _mm_set1_epi32(1), bias = _mm_set1_epi32(0x7fff), quiet = _mm_set1_epi32(0x400000);
        for (; i + 8 <= n; i += 8) {
            __m128i r[2];
            for (int h = 0; h < 2; h++) {
                __m128 f = _mm_loadu_ps(v + i + 4 * h);
                __m128i u = _mm_castps_si128(f);
                __m128i rounded = _mm_add_epi32(_mm_add_epi32(u, bias), _mm_and_si128(_mm_srli_epi32(u, 16), one));
                __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(f, f));
                __m128i x = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(u, quiet)), _mm_andnot_si128(nan, rounded));
                r[h] = _mm_srai_epi32(x, 16); /* sign-extended high half: packs_epi32 keeps it exactly */
            }
            _mm_storeu_si128((__m128i *)(d + i), _mm_packs_epi32(r[0], r[1]));
        }
#endif
        for (; i < n; i++) d[i] = to_bf16(v[i]);
    }
}

/* Resize an (h, w, 3) uint8 image (rows `stride` bytes apart) to (out_h, out_w, 3) and emit it
 * into dst. */
static void resize_emit(const post_params *p, const unsigned char *img, ptrdiff_t stride, int h, int w,
                        int flip, void *dst, float *work, taps4 *xt4, taps2 *xt2, hplan *plan) {
    int oh = p->out_h, ow = p->out_w;
    size_t item = p->out_dtype == 0 ? 1 : (p->out_dtype == 1 ? 4 : 2);
    size_t drow = (size_t)ow * 3 * item;
    float *col = work + HPAD; /* w*3 floats, HPAD more each side (+HSPAN readable): vertical pass */
    float *orow = col + (size_t)w * 3 + HPAD + HSPAN; /* ow*3 (+1) floats: output row, then 2 x ow*3 for bilinear */
    int half = p->method == 1 || p->method == 3;
    float hs = (float)h / (float)oh, ws = (float)w / (float)ow;
    if (p->method <= 1) {
        for (int x = 0; x < ow; x++) cubic_taps(half, ws, x, w, &xt4[x]);
        hplan_build(xt4, ow, w, plan);
        for (int y = 0; y < oh; y++) {
            taps4 yt;
            cubic_taps(half, hs, y, h, &yt);
            const unsigned char *r0 = img + yt.idx[0] * stride, *r1 = img + yt.idx[1] * stride,
                                *r2 = img + yt.idx[2] * stride, *r3 = img + yt.idx[3] * stride;
            vertical4(r0, r1, r2, r3, yt.w, w * 3, col);
            if (plan->vals) hpad_edges(col, w);
            horizontal4(col, plan, xt4, ow, orow);
            emit_row(p, orow, flip, (char *)dst + (size_t)y * drow);
        }
    } else {
        float *top = orow + (size_t)ow * 3 + 4, *bot = top + (size_t)ow * 3;
        for (int x = 0; x < ow; x++) linear_taps(half, ws, x, w, &xt2[x]);
        for (int y = 0; y < oh; y++) {
            taps2 yt;
            linear_taps(half, hs, y, h, &yt);
            const unsigned char *rt = img + yt.lo * stride, *rb = img + yt.hi * stride;
            for (int x = 0; x < ow; x++) {
                const taps2 *t = &xt2[x];
                for (int ch = 0; ch < 3; ch++) {
                    float tl = rt[t->lo * 3 + ch], tr = rt[t->hi * 3 + ch];
                    float bl = rb[t->lo * 3 + ch], br = rb[t->hi * 3 + ch];
                    top[x * 3 + ch] = tl + (tr - tl) * t->lerp;
                    bot[x * 3 + ch] = bl + (br - bl) * t->lerp;
                }
            }
            for (int i = 0; i < ow * 3; i++) orow[i] = top[i] + (bot[i] - top[i]) * yt.lerp;
            emit_row(p, orow, flip, (char *)dst + (size_t)y * drow);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The batch job: one image per task, workers take the next index from a shared counter.        */

typedef struct {
    post_params p;
    decode_opts o; /* channels 3 */
    int n;
    const unsigned char **data;
    size_t *lens;
    const int32_t *crops; /* n x 4: y, x, h, w */
    const uint8_t *flips;
    char *out;
    size_t out_item_bytes;
    int next;
    char (*errs)[ERRLEN];
    int *failed;
} batch_job;

/* The decoded window and the resize's rows: what a thread keeps from one batch call to the next,
 * up to KEEP_BUF_BYTES each (freed when the thread ends). A per-element map calls the kernel once
 * per image: buffers freed after each call go back to glibc, which hands the top of a thread's
 * heap back to the kernel, so every call would fault the pages in and zero them again. */
#define KEEP_BUF_BYTES ((size_t)16 << 20)
typedef struct {
    unsigned char *img;
    size_t img_cap; /* bytes */
    float *work;
    size_t work_cap; /* bytes */
} kept_bufs;

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static int kept_key_ok = 0;

static void kept_free(void *p) {
    kept_bufs *k = (kept_bufs *)p;
    if (k == NULL) return;
    free(k->img);
    free(k->work);
    free(k);
}

static void kept_key_init(void) { kept_key_ok = pthread_key_create(&kept_key, kept_free) == 0; }

/* The calling thread's kept buffers, or NULL. */
static kept_bufs *kept_get(void) {
    return (kept_bufs *)thread_object(&kept_once, kept_key_init, &kept_key, &kept_key_ok, sizeof(kept_bufs));
}

static void *batch_worker(void *arg) {
    batch_job *j = (batch_job *)arg;
    kept_bufs *kept = kept_get();
    unsigned char *img = kept ? kept->img : NULL;
    size_t img_cap = kept ? kept->img_cap : 0;
    float *work = kept ? kept->work : NULL;
    size_t work_cap = kept ? kept->work_cap : 0;
    if (kept) memset(kept, 0, sizeof(*kept)); /* this call's now */
    int ow = j->p.out_w;
    taps4 *xt4 = (taps4 *)malloc(sizeof(taps4) * (size_t)ow);
    taps2 *xt2 = (taps2 *)malloc(sizeof(taps2) * (size_t)ow);
    hplan plan_, *plan = &plan_;
    int plan_ok = hplan_alloc(plan, ow) == 0;
    for (;;) {
        int i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        int32_t cr[4]; /* a private copy: the window checked is the window used */
        memcpy(cr, j->crops + 4 * (size_t)i, sizeof(cr));
        decode_opts o = j->o;
        o.tf_crop = (j->flips[i] >> 1) & 1; /* flips bit 1: TensorFlow's DecodeAndCropJpeg columns */
        const unsigned char *region = NULL;
        ptrdiff_t stride = 0;
        if (!xt4 || !xt2 || !plan_ok) {
            snprintf(j->errs[i], ERRLEN, "out of memory");
            j->failed[i] = 1;
            continue;
        }
        /* the window is checked inside the image there, before anything is sized by it */
        if (decode_region(j->data[i], j->lens[i], &o, cr[0], cr[1], cr[2], cr[3], NULL, 0, &img, &img_cap,
                          &region, &stride, j->errs[i]) != 0) {
            j->failed[i] = 1;
            continue;
        }
        int h = cr[2], w = cr[3];
        size_t wneed = (size_t)w * 3 + 2 * HPAD + HSPAN + (size_t)ow * 3 * 3 + 32;
        if (reserve((void **)&work, &work_cap, wneed * sizeof(float)) == NULL) {
            snprintf(j->errs[i], ERRLEN, "out of memory");
            j->failed[i] = 1;
            continue;
        }
        resize_emit(&j->p, region, stride, h, w, j->flips[i] & 1, j->out + j->out_item_bytes * (size_t)i, work,
                    xt4, xt2, plan);
    }
#ifdef __SSE2__
    _mm_sfence(); /* the non-temporal stores of emit_row are globally visible before the join */
#endif
    if (kept && img_cap <= KEEP_BUF_BYTES) {
        kept->img = img;
        kept->img_cap = img_cap;
    } else {
        free(img);
    }
    if (kept && work_cap <= KEEP_BUF_BYTES) {
        kept->work = work;
        kept->work_cap = work_cap;
    } else {
        free(work);
    }
    free(xt4);
    if (plan_ok) free(plan->base);
    free(xt2);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Python bindings                                                                            */

static PyObject *py_jpeg_info(PyObject *self, PyObject *args) {
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
    int h, w, c, cs, rc;
    char err[ERRLEN];
    Py_BEGIN_ALLOW_THREADS
    rc = read_info((const unsigned char *)b.buf, (size_t)b.len, &h, &w, &c, &cs, err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return Py_BuildValue("(iiii)", h, w, c, cs);
}

#define DEFAULT_MAX_BYTES (((int64_t)1 << 29) - 1) /* TensorFlow's: it refuses 2**29 and more */

static PyObject *py_decode_into(PyObject *self, PyObject *args) {
    Py_buffer b, o;
    int channels, fast, fancy, recover = 0, tf_crop = 0;
    long long y, x, h, w, max_bytes = DEFAULT_MAX_BYTES;
    if (!PyArg_ParseTuple(args, "y*w*iiiLLLL|iLp", &b, &o, &channels, &fast, &fancy, &y, &x, &h, &w, &recover,
                          &max_bytes, &tf_crop))
        return NULL;
    char err[ERRLEN];
    int rc = -1;
    long long need;
    if (channels != 1 && channels != 3) {
        snprintf(err, ERRLEN, "channels must be 1 or 3, got %d", channels);
    } else if (h <= 0 || w <= 0 || __builtin_mul_overflow(h, w, &need) ||
               __builtin_mul_overflow(need, (long long)channels, &need) || o.len < need) {
        snprintf(err, ERRLEN, "output buffer of %zd bytes is too small for %lldx%lldx%d", o.len, h, w, channels);
    } else {
        decode_opts opts = {channels, fast, fancy, recover, max_bytes, tf_crop};
        Py_BEGIN_ALLOW_THREADS
        rc = decode_region((const unsigned char *)b.buf, (size_t)b.len, &opts, y, x, h, w, (unsigned char *)o.buf,
                           (ptrdiff_t)w * channels, NULL, NULL, NULL, NULL, err);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&b);
    PyBuffer_Release(&o);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The images of a batch: a sequence of bytes-like objects, or a zero-copy column given as the tuple
 * (buffers, buf_idx or None, offsets, lengths) (int32 buf_idx, int64 offsets/lengths): image i is
 * buffers[buf_idx[i]][offsets[i]:offsets[i] + lengths[i]]. Fills data/lens (n entries); the
 * buffers stay exported until images_release. */
typedef struct {
    PyObject *fast;
    Py_buffer *bufs;
    Py_ssize_t nbufs;
    Py_buffer idx, off, len;
    int col;
    Py_ssize_t n;
    const unsigned char **data;
    size_t *lens;
} images_t;

static void images_release(images_t *im) {
    for (Py_ssize_t i = 0; i < im->nbufs; i++) PyBuffer_Release(&im->bufs[i]);
    free(im->bufs);
    if (im->col) {
        if (im->idx.obj) PyBuffer_Release(&im->idx);
        if (im->off.obj) PyBuffer_Release(&im->off);
        if (im->len.obj) PyBuffer_Release(&im->len);
    }
    free((void *)im->data);
    free(im->lens);
    Py_XDECREF(im->fast);
    memset(im, 0, sizeof(*im));
}

static int images_collect(PyObject *images, images_t *im) {
    memset(im, 0, sizeof(*im));
    if (PyTuple_Check(images) && PyTuple_GET_SIZE(images) == 4) {
        PyObject *bl = PyTuple_GET_ITEM(images, 0), *bi = PyTuple_GET_ITEM(images, 1);
        im->col = 1;
        im->fast = PySequence_Fast(bl, "buffers must be a sequence of bytes-like objects");
        if (!im->fast) return -1;
        Py_ssize_t nb = PySequence_Fast_GET_SIZE(im->fast);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(images, 2), &im->off, PyBUF_C_CONTIGUOUS) < 0) return -1;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(images, 3), &im->len, PyBUF_C_CONTIGUOUS) < 0) return -1;
        im->n = im->off.len / 8;
        if (im->len.len != im->off.len || im->off.len % 8) {
            PyErr_SetString(PyExc_ValueError, "offsets and lengths must be int64 arrays of one length");
            return -1;
        }
        if (bi != Py_None) {
            if (PyObject_GetBuffer(bi, &im->idx, PyBUF_C_CONTIGUOUS) < 0) return -1;
            if (im->idx.len != im->n * 4) {
                PyErr_SetString(PyExc_ValueError, "buf_idx must be an int32 array with one entry per image");
                return -1;
            }
        } else if (nb != 1) {
            PyErr_SetString(PyExc_ValueError, "buf_idx None needs exactly one buffer");
            return -1;
        }
        im->bufs = (Py_buffer *)calloc((size_t)(nb ? nb : 1), sizeof(Py_buffer));
        im->data = (const unsigned char **)calloc((size_t)(im->n ? im->n : 1), sizeof(char *));
        im->lens = (size_t *)calloc((size_t)(im->n ? im->n : 1), sizeof(size_t));
        if (!im->bufs || !im->data || !im->lens) {
            PyErr_NoMemory();
            return -1;
        }
        for (; im->nbufs < nb; im->nbufs++)
            if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(im->fast, im->nbufs), &im->bufs[im->nbufs],
                                   PyBUF_SIMPLE) < 0)
                return -1;
        const int64_t *off = (const int64_t *)im->off.buf, *len = (const int64_t *)im->len.buf;
        const int32_t *idx = bi != Py_None ? (const int32_t *)im->idx.buf : NULL;
        for (Py_ssize_t i = 0; i < im->n; i++) {
            int32_t b = idx ? idx[i] : 0;
            if (b < 0 || b >= nb || off[i] < 0 || len[i] < 0 || off[i] > (int64_t)im->bufs[b].len ||
                len[i] > (int64_t)im->bufs[b].len - off[i]) {
                PyErr_Format(PyExc_ValueError, "image %zd lies outside its buffer", i);
                return -1;
            }
            im->data[i] = (const unsigned char *)im->bufs[b].buf + off[i];
            im->lens[i] = (size_t)len[i];
        }
        return 0;
    }
    im->fast = PySequence_Fast(images, "images must be a sequence of bytes-like objects");
    if (!im->fast) return -1;
    im->n = PySequence_Fast_GET_SIZE(im->fast);
    im->bufs = (Py_buffer *)calloc((size_t)(im->n ? im->n : 1), sizeof(Py_buffer));
    im->data = (const unsigned char **)calloc((size_t)(im->n ? im->n : 1), sizeof(char *));
    im->lens = (size_t *)calloc((size_t)(im->n ? im->n : 1), sizeof(size_t));
    if (!im->bufs || !im->data || !im->lens) {
        PyErr_NoMemory();
        return -1;
    }
    for (; im->nbufs < im->n; im->nbufs++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(im->fast, im->nbufs), &im->bufs[im->nbufs], PyBUF_SIMPLE) < 0)
            return -1;
        im->data[im->nbufs] = (const unsigned char *)im->bufs[im->nbufs].buf;
        im->lens[im->nbufs] = (size_t)im->bufs[im->nbufs].len;
    }
    return 0;
}

/* jpeg_info_batch(images, out) -> list of (index, message) failures; out: int32 (n, 4) rows of
 * (height, width, components, colorspace), read from the headers without the GIL. */
static PyObject *py_jpeg_info_batch(PyObject *self, PyObject *args) {
    PyObject *images;
    Py_buffer o;
    if (!PyArg_ParseTuple(args, "Ow*", &images, &o)) return NULL;
    images_t im;
    PyObject *result = NULL;
    char (*errs)[ERRLEN] = NULL;
    int *failed = NULL;
    if (images_collect(images, &im) < 0) goto done;
    if (o.len < im.n * 16) {
        PyErr_SetString(PyExc_ValueError, "out must be int32 (n, 4)");
        goto done;
    }
    errs = calloc((size_t)(im.n ? im.n : 1), ERRLEN);
    failed = (int *)calloc((size_t)(im.n ? im.n : 1), sizeof(int));
    if (!errs || !failed) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t *out = (int32_t *)o.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < im.n; i++) {
        int h = 0, w = 0, c = 0, cs = 0;
        if (read_info(im.data[i], im.lens[i], &h, &w, &c, &cs, errs[i]) != 0) failed[i] = 1;
        out[4 * i] = h; out[4 * i + 1] = w; out[4 * i + 2] = c; out[4 * i + 3] = cs;
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < im.n; i++) {
        if (!failed[i]) continue;
        PyObject *item = Py_BuildValue("(ns)", i, errs[i]);
        if (!item || PyList_Append(result, item) < 0) Py_CLEAR(result);
        Py_XDECREF(item);
    }
done:
    free(errs);
    free(failed);
    images_release(&im);
    PyBuffer_Release(&o);
    return result;
}

/* preprocess_batch(images, out, crops, flips, out_h, out_w, method, out_dtype, scale, mean, stddev,
 *                  normalize, fast_dct, fancy, num_threads[, recover, max_bytes]) -> list of (index, message)
 * failures; images as in images_collect; flips[i] bit 0: flip image i, bit 1: decode its window as
 * TensorFlow's DecodeAndCropJpeg does (decode_opts.tf_crop); recover: try_recover_truncated;
 * max_bytes: the size limit of decode_region */
static PyObject *py_preprocess_batch(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_buffer o, cb, fb;
    batch_job j;
    images_t im;
    memset(&j, 0, sizeof(j));
    memset(&im, 0, sizeof(im));
    int num_threads;
    long long max_bytes = DEFAULT_MAX_BYTES;
    j.o.channels = 3;
    if (!PyArg_ParseTuple(args, "Ow*y*y*iiiif(fff)(fff)iiii|iL", &seq, &o, &cb, &fb, &j.p.out_h, &j.p.out_w,
                          &j.p.method, &j.p.out_dtype, &j.p.scale, &j.p.mean[0], &j.p.mean[1], &j.p.mean[2],
                          &j.p.stddev[0], &j.p.stddev[1], &j.p.stddev[2], &j.p.normalize, &j.o.fast_dct,
                          &j.o.fancy, &num_threads, &j.o.recover, &max_bytes))
        return NULL;
    j.o.max_bytes = max_bytes;
    PyObject *result = NULL;
    if (images_collect(seq, &im) < 0) goto done;
    Py_ssize_t n = im.n;
    /* out_w * 9 floats of work per row and int loops over out_w * 3 values: sizes up to 2**24 */
    if (j.p.out_h <= 0 || j.p.out_w <= 0 || j.p.out_h > (1 << 24) || j.p.out_w > (1 << 24) || j.p.method < 0 ||
        j.p.method > 3 || j.p.out_dtype < 0 || j.p.out_dtype > 2 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad output size, method, dtype or image count");
        goto done;
    }
    j.n = (int)n;
    size_t item = j.p.out_dtype == 0 ? 1 : (j.p.out_dtype == 1 ? 4 : 2), total;
    j.out_item_bytes = (size_t)j.p.out_h * (size_t)j.p.out_w * 3 * item; /* < 2**53 */
    if (__builtin_mul_overflow(j.out_item_bytes, (size_t)n, &total) || (size_t)o.len < total) {
        PyErr_Format(PyExc_ValueError, "output buffer of %zd bytes is too small for %zd images of %zu bytes",
                     o.len, n, j.out_item_bytes);
        goto done;
    }
    if (cb.len / 16 < n || fb.len < n) {
        PyErr_SetString(PyExc_ValueError, "crops must be int32 (n, 4) and flips uint8 (n,)");
        goto done;
    }
    j.p.add = (float *)malloc(sizeof(float) * 6 * (size_t)j.p.out_w);
    if (!j.p.add) {
        PyErr_NoMemory();
        goto done;
    }
    j.p.mul = j.p.add + 3 * (size_t)j.p.out_w;
    for (int x = 0; x < j.p.out_w; x++)
        for (int c = 0; c < 3; c++) {
            j.p.add[3 * x + c] = j.p.normalize ? j.p.mean[c] : 0.0f;
            j.p.mul[3 * x + c] = j.p.normalize ? 1.0f / j.p.stddev[c] : 1.0f;
        }
    j.data = im.data;
    j.lens = im.lens;
    j.errs = calloc((size_t)(n ? n : 1), ERRLEN);
    j.failed = (int *)calloc((size_t)(n ? n : 1), sizeof(int));
    if (!j.errs || !j.failed) {
        PyErr_NoMemory();
        goto done;
    }
    j.crops = (const int32_t *)cb.buf;
    j.flips = (const uint8_t *)fb.buf;
    j.out = (char *)o.buf;
    if (num_threads < 1) num_threads = 1;
    if (num_threads > n) num_threads = (int)(n ? n : 1);
    Py_BEGIN_ALLOW_THREADS
    if (num_threads == 1) {
        batch_worker(&j);
    } else {
        pthread_t *th = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)num_threads);
        int started = 0;
        for (int t = 0; th && t < num_threads - 1; t++)
            if (pthread_create(&th[started], NULL, batch_worker, &j) == 0) started++;
        batch_worker(&j);
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
        free(th);
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < n; i++) {
        if (!j.failed[i]) continue;
        PyObject *item_ = Py_BuildValue("(ns)", i, j.errs[i]);
        if (!item_ || PyList_Append(result, item_) < 0) Py_CLEAR(result);
        Py_XDECREF(item_);
    }
done:
    free(j.p.add);
    free(j.errs);
    free(j.failed);
    images_release(&im);
    PyBuffer_Release(&o);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&fb);
    return result;
}

/* _set_fast_huffman(flag) -> previous: use the fast entropy decoder (_jpeg_huffman.c) where it
 * applies (the default) or libjpeg's throughout; _fast_huffman_scans() -> the scans it decoded
 * so far. For the tests that compare the two decoders. */
static PyObject *py_set_fast_huffman(PyObject *self, PyObject *args) {
    int flag;
    (void)self;
    if (!PyArg_ParseTuple(args, "p", &flag)) return NULL;
    int before = fast_huffman_enabled;
#ifdef TPU_FAST_HUFFMAN
    fast_huffman_enabled = flag;
#else
    (void)flag;
#endif
    return PyBool_FromLong(before);
}

static PyObject *py_kept_bytes(PyObject *self, PyObject *args) {
    kept_bufs *k = kept_get();
    return PyLong_FromSize_t(k ? k->img_cap + k->work_cap : 0);
}

static PyObject *py_set_simd(PyObject *self, PyObject *args) {
    int level;
    if (!PyArg_ParseTuple(args, "i", &level)) return NULL;
    int prev = simd_level;
    simd_level = level < 0 ? 0 : (level > simd_supported ? simd_supported : level);
    return Py_BuildValue("(ii)", prev, simd_level);
}

static PyObject *py_fast_huffman_scans(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(__atomic_load_n(&fast_huffman_scans, __ATOMIC_RELAXED));
}

static PyMethodDef methods[] = {
    {"_set_fast_huffman", py_set_fast_huffman, METH_VARARGS,
     "_set_fast_huffman(flag) -> previous setting (tests: compare with libjpeg's own entropy decoder)"},
    {"_kept_bytes", py_kept_bytes, METH_NOARGS,
     "_kept_bytes() -> bytes of buffers the calling thread keeps for its next batch call (tests)"},
    {"_set_simd", py_set_simd, METH_VARARGS,
     "_set_simd(level) -> (previous, now): the resize's vector forms, 0 plain C, 1 AVX2, 2 AVX-512 (tests)"},
    {"_fast_huffman_scans", py_fast_huffman_scans, METH_NOARGS, "_fast_huffman_scans() -> scans decoded by it"},
    {"jpeg_info", py_jpeg_info, METH_VARARGS, "jpeg_info(data) -> (height, width, components, colorspace)"},
    {"decode_into", py_decode_into, METH_VARARGS,
     "decode_into(data, out, channels, fast_dct, fancy, y, x, h, w[, recover, max_bytes, tf_crop]): decode a "
     "window into out (tf_crop: its edge columns as TensorFlow's DecodeAndCropJpeg gives them)"},
    {"jpeg_info_batch", py_jpeg_info_batch, METH_VARARGS,
     "jpeg_info_batch(images, out): header info of every image into out (int32 (n, 4)); failures"},
    {"preprocess_batch", py_preprocess_batch, METH_VARARGS,
     "decode-crop-resize-flip-normalise-cast a list of JPEGs into a preallocated batch"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_imgkernel", NULL, -1, methods};

PyMODINIT_FUNC PyInit__imgkernel(void) {
    init_tables();
    simd_init();
    PyObject *m = PyModule_Create(&moduledef);
    if (m) PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION", JPEG_LIB_VERSION);
    if (m) PyModule_AddObject(m, "DEFAULT_MAX_BYTES", PyLong_FromLongLong(DEFAULT_MAX_BYTES));
    return m;
}
