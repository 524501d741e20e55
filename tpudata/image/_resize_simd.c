/* tpudata.image._imgkernel: the bicubic resize's two passes in vector form, included by
 * _imgkernel.c. Every form computes each value with the same operations in the same order as
 * the plain C loops (products summed left to right, no FMA), so they give the same bits; the
 * tests run each form the CPU has against the plain one.
 *
 * - vertical4: 4 source rows (uint8) -> one row of floats. AVX2 converts 8 bytes a step straight
 *   from memory (vpmovzxbd): one shuffle per row and step.
 * - horizontal4: one row of floats -> the output row. The taps of an output value do not depend on
 *   the row, so a plan made once per image splits the output row into blocks of 16 values, or 8
 *   where blocks of 16 would read too far; where the 4 taps of a block's values lie within 32
 *   consecutive source values (blocks of 16: downscales up to about 1.5x and every upscale;
 *   blocks of 8: up to about 2.3x), AVX-512 loads those 32 values and picks each tap with one
 *   two-register permute (vpermt2ps). Other blocks, and CPUs without AVX-512, go pixel by pixel.
 */

/* An output position's 4 taps: source positions (clamped into the image) and weights; `in` - 1 is
 * the first tap's position before clamping (from -2 to limit + 1). */
typedef struct { int idx[4]; float w[4]; int in; } taps4;

/* the widest form in use: 0 plain C, 1 AVX2, 2 AVX-512F (set at load; _set_simd() for the tests) */
static int simd_level = 0;
static int simd_supported = 0;

static void simd_init(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    simd_supported = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("avx2") ? 1 : 0);
#endif
    simd_level = simd_supported;
}

/* Vertical 4-tap pass over n values: ((r0*w0 + r1*w1) + r2*w2) + r3*w3. */
#define VERTICAL4_ONE(i) ((float)r0[i] * a + (float)r1[i] * b + (float)r2[i] * c + (float)r3[i] * d)

static void vertical4_base(const unsigned char *restrict r0, const unsigned char *restrict r1,
                           const unsigned char *restrict r2, const unsigned char *restrict r3,
                           const float *wt, int n, float *restrict col) {
    float a = wt[0], b = wt[1], c = wt[2], d = wt[3];
    for (int i = 0; i < n; i++) col[i] = VERTICAL4_ONE(i);
}

/* Horizontal 4-tap pass of pixels x0 .. x1 - 1 of one row, pixel by pixel, pixel x at out + (x - x0) * 3:
 * ((c[i0]*w0 + c[i1]*w1) + c[i2]*w2) + c[i3]*w3 per channel, 4 lanes at a time where the taps are
 * contiguous (the 4th lane lands on the next pixel's first value: out needs one value to spare). */
static void horizontal4_base(const float *col, const taps4 *xt, int x0, int x1, float *out) {
    for (int x = x0; x < x1; x++, out += 3) {
        const taps4 *t = &xt[x];
#ifdef __SSE2__
        if (t->idx[1] == t->idx[0] + 1 && t->idx[2] == t->idx[0] + 2 && t->idx[3] == t->idx[0] + 3) {
            const float *q = col + t->idx[0] * 3;
            __m128 acc = _mm_mul_ps(_mm_loadu_ps(q), _mm_set1_ps(t->w[0]));
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(q + 3), _mm_set1_ps(t->w[1])));
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(q + 6), _mm_set1_ps(t->w[2])));
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(q + 9), _mm_set1_ps(t->w[3])));
            _mm_storeu_ps(out, acc);
            continue;
        }
#endif
        for (int ch = 0; ch < 3; ch++)
            out[ch] = col[t->idx[0] * 3 + ch] * t->w[0] + col[t->idx[1] * 3 + ch] * t->w[1] +
                      col[t->idx[2] * 3 + ch] * t->w[2] + col[t->idx[3] * 3 + ch] * t->w[3];
    }
}

/* The horizontal plan: the output row in blocks of `vals` values (16, else 8 where blocks of 16
 * would read too far; 0: no plan, pixel by pixel). The row of source values it reads (col) has
 * HPAD values before and after it, copies of the edge pixels (hpad_edges), so a tap clamped into
 * the image reads the same value at its unclamped position and the 4 taps of a value are always
 * 3 apart. A block reads HSPAN values from its base (counted from col - HPAD); its values' tap 0
 * are at base + idx, taps 1-3 at +3, +6, +9. */
#define HSPAN 32
#define HPAD 6
typedef struct {
    int vals, blocks;
    int32_t *base; /* per block; -1: the block goes pixel by pixel */
    int32_t *idx;  /* per block, vals values */
    float *w;      /* per block, 4 x vals weights */
} hplan;

/* The plan's memory for an ow-pixel output row (one block, so free(pl->base) frees it). */
static int hplan_alloc(hplan *pl, int ow) {
    size_t lanes = (size_t)ow * 3 + 16, blocks = lanes / 8 + 1;
    pl->vals = pl->blocks = 0;
    pl->base = (int32_t *)malloc(blocks * sizeof(int32_t) + lanes * 5 * 4);
    if (pl->base == NULL) return -1;
    pl->idx = pl->base + blocks;
    pl->w = (float *)(pl->idx + lanes);
    return 0;
}

/* Copy the edge pixels of a row of w pixels (3 values each) into its HPAD values each side. */
static inline void hpad_edges(float *col, int w) {
    for (int k = 1; k <= HPAD / 3; k++) {
        memcpy(col - 3 * k, col, 3 * sizeof(float));
        memcpy(col + (size_t)(w - 1 + k) * 3, col + (size_t)(w - 1) * 3, 3 * sizeof(float));
    }
}

/* Block bi of `vals` values of a row planned from w source pixels; returns whether its taps lie
 * within HSPAN values (and within the padding). */
static int hplan_block(const taps4 *xt, int n, int w, int vals, int bi, hplan *pl) {
    int32_t *idx = pl->idx + (size_t)bi * vals;
    float *wt = pl->w + (size_t)bi * vals * 4;
    int lo = INT32_MAX, hi = -1, ok = 1;
    for (int l = 0; l < vals; l++) {
        int j = bi * vals + l < n ? bi * vals + l : n - 1; /* lanes past the row: its last value */
        const taps4 *t = &xt[j / 3];
        for (int k = 0; k < 4; k++) { /* the padded position holds the clamped tap's pixel */
            int at = t->in - 1 + k;
            ok &= at >= -HPAD / 3 && at < w + HPAD / 3 && (at < 0 ? 0 : (at >= w ? w - 1 : at)) == t->idx[k];
        }
        int s = (t->in - 1) * 3 + j % 3 + HPAD;
        lo = s < lo ? s : lo;
        hi = s + 9 > hi ? s + 9 : hi;
        idx[l] = s;
        for (int k = 0; k < 4; k++) wt[k * vals + l] = t->w[k];
    }
    pl->base[bi] = ok && hi - lo < HSPAN ? lo : -1;
    if (pl->base[bi] < 0) return 0;
    for (int l = 0; l < vals; l++) idx[l] -= lo;
    return 1;
}

/* Plan the horizontal pass for the taps xt of an ow-pixel output row (where simd_level is 2). */
static void hplan_build(const taps4 *xt, int ow, int w, hplan *pl) {
    pl->vals = 0;
    if (simd_level < 2) return;
    int n = ow * 3;
    for (int vals = 16; vals >= 8; vals /= 2) {
        int blocks = (n + vals - 1) / vals, bad = 0;
        for (int bi = 0; bi < blocks; bi++) bad += !hplan_block(xt, n, w, vals, bi, pl);
        if (bad <= blocks / 16) { /* a few blocks pixel by pixel at most */
            pl->vals = vals;
            pl->blocks = blocks;
            return;
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void vertical4_avx2(
    const unsigned char *restrict r0, const unsigned char *restrict r1, const unsigned char *restrict r2,
    const unsigned char *restrict r3, const float *wt, int n, float *restrict col) {
    float a = wt[0], b = wt[1], c = wt[2], d = wt[3];
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), vc = _mm256_set1_ps(c), vd = _mm256_set1_ps(d);
#define LOAD8(r) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((r) + i))))
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 s = _mm256_add_ps(_mm256_mul_ps(LOAD8(r0), va), _mm256_mul_ps(LOAD8(r1), vb));
        s = _mm256_add_ps(s, _mm256_mul_ps(LOAD8(r2), vc));
        s = _mm256_add_ps(s, _mm256_mul_ps(LOAD8(r3), vd));
        _mm256_storeu_ps(col + i, s);
    }
#undef LOAD8
    for (; i < n; i++) col[i] = VERTICAL4_ONE(i);
}

/* One block pixel by pixel (its values only). */
static void horizontal4_block_base(const float *col, const taps4 *xt, int j0, int left, float *orow) {
    float tmp[16 + 8]; /* at most 7 pixels, and one value to spare */
    int x0 = j0 / 3, x1 = (j0 + left + 2) / 3;
    horizontal4_base(col, xt, x0, x1, tmp);
    memcpy(orow + j0, tmp + (j0 - x0 * 3), (size_t)left * sizeof(float));
}

/* The planned blocks; col has its edges padded (hpad_edges) and is readable HSPAN values past them. */
__attribute__((target("avx512f"))) static void horizontal4_avx512(const float *col, const hplan *pl,
                                                                  const taps4 *xt, int ow, float *orow) {
    const int n = ow * 3, vals = pl->vals;
    const __m512i three = _mm512_set1_epi32(3), six = _mm512_set1_epi32(6), nine = _mm512_set1_epi32(9);
    for (int bi = 0; bi < pl->blocks; bi++) {
        int j0 = bi * vals, left = n - j0 < vals ? n - j0 : vals, base = pl->base[bi];
        if (base < 0) {
            horizontal4_block_base(col, xt, j0, left, orow);
            continue;
        }
        const int32_t *idx = pl->idx + (size_t)bi * vals;
        const float *w = pl->w + (size_t)bi * vals * 4;
        const __m512 lo = _mm512_loadu_ps(col - HPAD + base), hi = _mm512_loadu_ps(col - HPAD + base + 16);
        if (vals == 16) {
            __m512i i0 = _mm512_loadu_si512(idx);
            __m512 s = _mm512_add_ps(_mm512_mul_ps(_mm512_permutex2var_ps(lo, i0, hi), _mm512_loadu_ps(w)),
                                     _mm512_mul_ps(_mm512_permutex2var_ps(lo, _mm512_add_epi32(i0, three), hi),
                                                   _mm512_loadu_ps(w + 16)));
            s = _mm512_add_ps(
                s, _mm512_mul_ps(_mm512_permutex2var_ps(lo, _mm512_add_epi32(i0, six), hi), _mm512_loadu_ps(w + 32)));
            s = _mm512_add_ps(
                s, _mm512_mul_ps(_mm512_permutex2var_ps(lo, _mm512_add_epi32(i0, nine), hi), _mm512_loadu_ps(w + 48)));
            if (left == 16)
                _mm512_storeu_ps(orow + j0, s);
            else
                _mm512_mask_storeu_ps(orow + j0, (__mmask16)((1u << left) - 1), s);
        } else { /* 8 values: the upper lanes' results are not used */
            __m512i i0 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)idx));
#define TAP8(i) _mm512_castps512_ps256(_mm512_permutex2var_ps(lo, i, hi))
            __m256 s = _mm256_add_ps(_mm256_mul_ps(TAP8(i0), _mm256_loadu_ps(w)),
                                     _mm256_mul_ps(TAP8(_mm512_add_epi32(i0, three)), _mm256_loadu_ps(w + 8)));
            s = _mm256_add_ps(s, _mm256_mul_ps(TAP8(_mm512_add_epi32(i0, six)), _mm256_loadu_ps(w + 16)));
            s = _mm256_add_ps(s, _mm256_mul_ps(TAP8(_mm512_add_epi32(i0, nine)), _mm256_loadu_ps(w + 24)));
#undef TAP8
            if (left == 8)
                _mm256_storeu_ps(orow + j0, s);
            else
                _mm512_mask_storeu_ps(orow + j0, (__mmask16)((1u << left) - 1), _mm512_castps256_ps512(s));
        }
    }
}
#endif

static void vertical4(const unsigned char *r0, const unsigned char *r1, const unsigned char *r2,
                      const unsigned char *r3, const float *wt, int n, float *col) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (simd_level >= 1) {
        vertical4_avx2(r0, r1, r2, r3, wt, n, col);
        return;
    }
#endif
    vertical4_base(r0, r1, r2, r3, wt, n, col);
}

/* col as horizontal4_avx512 needs it where pl has a plan. */
static void horizontal4(const float *col, const hplan *pl, const taps4 *xt, int ow, float *orow) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (pl->vals) {
        horizontal4_avx512(col, pl, xt, ow, orow);
        return;
    }
#endif
    (void)pl;
    horizontal4_base(col, xt, 0, ow, orow);
}
