/* A float32 3x3 unit-stride conv by Winograd's F(2x2, 3x3) on AVX-512 (part of the _kernels
 * library).
 *
 * A direct conv (conv_f32.c, small_cnn.c) runs at the multiply-add units' peak: only fewer
 * multiply-adds make it faster. F(2x2, 3x3) computes a 2x2 block of output pixels from the
 * 4x4 input patch under it with 16 products per (output, input) channel pair where the
 * direct conv takes 36: per input channel the patch d becomes V = B' d B (16 values, adds
 * only), per output channel the sums over input channels M[xi] = sum_c U[xi][m][c] V[xi][c]
 * (U = G g G', the weights' transform, made once per constant weight in Python), and the
 * 2x2 block is A' M A (adds only). Its constants (0, +-1, 1/2 in G) keep the rounding close
 * to the direct conv's (a few ulps more).
 *
 * The work is cut into equal blocks of up to WG_NT = 48 output blocks ("tiles", of all
 * images, row-major: a block may span tile rows and images), and a block is done whole on one thread
 * so that its transforms stay in L2: its V (16 x C x 48 floats) is made first, then per panel
 * of WG_MR output channels its 16 products (register tiles of 8 channels x 48 tiles, the
 * tiles in the lanes) into a buffer of 16 x 8 x 48 sums, which the output transform stores
 * with the bias, a residual and the activation. The lanes of a run of tiles in one tile row
 * read their patches' columns 2 apart: two pairs of loads and four even / odd permutes give
 * the four columns of 16 tiles.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

#define WG_MR 8  /* output channels per register tile */
#define WG_NT 48 /* tiles per block: three vectors of 16 */

/* Whether t's sizes are in range and agree: 2x2 tiles covering the output, every buffer's
   cells counted without overflow (the input is read only inside its planes: cells past them
   are the padding's zeros). */
static int winograd_ok(const winograd_f32 *t) {
    int64_t cells, sizes[9] = {t->N, t->C, t->H, t->W, t->M, t->OH, t->OW, t->TH, t->TW};
    return onyx_in(sizes, 9, 1, ONYX_MAX_EXTENT) && t->top >= 0 && t->left >= 0 &&
           t->top <= 2 && t->left <= 2 && t->TH == (t->OH + 1) / 2 &&
           t->TW == (t->OW + 1) / 2 && onyx_mul(t->N * t->C, t->H, &cells) &&
           onyx_mul(cells, t->W, &cells) && onyx_mul(t->N * t->M, t->OH, &cells) &&
           onyx_mul(cells, t->OW, &cells) && onyx_mul(t->N * t->TH, t->TW, &cells) &&
           onyx_mul(16 * t->C, t->M, &cells) && t->act >= 0 && t->act <= 7;
}

/* Blocks of WG_NT tiles over the batch: the parts of the range. */
static int64_t wg_blocks(const winograd_f32 *t) {
    return (t->N * t->TH * t->TW + WG_NT - 1) / WG_NT;
}

/* A run of a block's tiles in one tile row: lane j of the block, len tiles from tile column
   tj of tile row ti of image n. */
typedef struct {
    int64_t j, len, n, ti, tj;
} wg_run;

/* The runs (at most 16 tiles each, so that a run is one vector) of tiles q0 .. q1. */
static int wg_runs(const winograd_f32 *t, int64_t q0, int64_t q1, wg_run *r) {
    int count = 0;
    for (int64_t q = q0; q < q1;) {
        int64_t tj = q % t->TW, row = q / t->TW, ti = row % t->TH, n = row / t->TH;
        int64_t len = t->TW - tj < q1 - q ? t->TW - tj : q1 - q;
        len = len < 16 ? len : 16;
        r[count++] = (wg_run){q - q0, len, n, ti, tj};
        q += len;
    }
    return count;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define INLINE inline __attribute__((always_inline))
#include "activation.h"

static AVX512 INLINE __mmask16 wg_lanes(int64_t lo, int64_t hi) { /* lanes lo <= l < hi */
    lo = lo < 0 ? 0 : lo, hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}

/* 32 values of row from column `first` on, zeros outside 0 .. W (and for a null row). */
static AVX512 INLINE void wg_load32(const float *row, int64_t first, int64_t W, __m512 *a,
                                    __m512 *b) {
    if (!row) {
        *a = *b = _mm512_setzero_ps();
    } else if (first >= 0 && first + 32 <= W) {
        *a = _mm512_loadu_ps(row + first), *b = _mm512_loadu_ps(row + first + 16);
    } else { /* (lanes outside the row are never read) */
        *a = _mm512_maskz_loadu_ps(wg_lanes(-first, W - first), row + first);
        *b = _mm512_maskz_loadu_ps(wg_lanes(-first - 16, W - first - 16), row + first + 16);
    }
}

/* V of a run's tiles for input channel c into V (rows of WG_NT lanes, one per xi, C apart). */
static AVX512 void input_transform(const winograd_f32 *t, const wg_run *u, int64_t c,
                                   float *V) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const float *plane = t->x + (u->n * t->C + c) * t->H * t->W;
    int64_t first = 2 * u->tj - t->left; /* the patch's first column for lane 0 */
    __m512 d[4][4];
    for (int r = 0; r < 4; r++) {
        int64_t ih = 2 * u->ti - t->top + r;
        const float *row = ih >= 0 && ih < t->H ? plane + ih * t->W : 0;
        __m512 a, b;
        wg_load32(row, first, t->W, &a, &b);
        d[r][0] = _mm512_permutex2var_ps(a, even, b);
        d[r][1] = _mm512_permutex2var_ps(a, odd, b);
        wg_load32(row, first + 2, t->W, &a, &b);
        d[r][2] = _mm512_permutex2var_ps(a, even, b);
        d[r][3] = _mm512_permutex2var_ps(a, odd, b);
    }
    __m512 e[4][4]; /* B' d: rows */
    for (int s = 0; s < 4; s++) {
        e[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
        e[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
        e[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
        e[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
    }
    __mmask16 live = wg_lanes(0, u->len);
    int64_t step = t->C * WG_NT; /* (from xi to xi + 1) */
    float *to = V + c * WG_NT + u->j;
    for (int r = 0; r < 4; r++) { /* (B' d) B: columns */
        float *at = to + r * 4 * step;
        _mm512_mask_storeu_ps(at, live, _mm512_sub_ps(e[r][0], e[r][2]));
        _mm512_mask_storeu_ps(at + step, live, _mm512_add_ps(e[r][1], e[r][2]));
        _mm512_mask_storeu_ps(at + 2 * step, live, _mm512_sub_ps(e[r][2], e[r][1]));
        _mm512_mask_storeu_ps(at + 3 * step, live, _mm512_sub_ps(e[r][1], e[r][3]));
    }
}

/* sums (WG_MR x 16 nv) = U (C x WG_MR) . V (C x WG_NT lanes), into S (rows of WG_NT). */
static AVX512 INLINE void product(const float *restrict U, const float *restrict V, int64_t C,
                                  float *restrict S, const int nv) {
    __m512 c[WG_MR][3];
    for (int i = 0; i < WG_MR; i++)
        for (int h = 0; h < nv; h++) c[i][h] = _mm512_setzero_ps();
    for (int64_t k = 0; k < C; k++) {
        __m512 v[3];
        for (int h = 0; h < nv; h++) v[h] = _mm512_loadu_ps(V + k * WG_NT + h * 16);
        const float *a = U + k * WG_MR;
        for (int i = 0; i < WG_MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            for (int h = 0; h < nv; h++) c[i][h] = _mm512_fmadd_ps(ai, v[h], c[i][h]);
        }
    }
    for (int i = 0; i < WG_MR; i++)
        for (int h = 0; h < nv; h++) _mm512_storeu_ps(S + i * WG_NT + h * 16, c[i][h]);
}

static AVX512 void product1(const float *U, const float *V, int64_t C, float *S) {
    product(U, V, C, S, 1);
}
static AVX512 void product2(const float *U, const float *V, int64_t C, float *S) {
    product(U, V, C, S, 2);
}
static AVX512 void product3(const float *U, const float *V, int64_t C, float *S) {
    product(U, V, C, S, 3);
}

/* v + bias (+ the residual at z's lanes), activated, into y's lanes `live`. */
static AVX512 INLINE void wg_store(const winograd_f32 *t, float *y, const float *z, __m512 v,
                                   __m512 bias, __mmask16 live) {
    v = _mm512_add_ps(v, bias);
    if (z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, z));
    _mm512_mask_storeu_ps(y, live, onyx_activate(v, t->act, t->alpha, t->beta));
}

/* The 2x2 outputs of a run's tiles for output channel m from its sums (S: per xi, rows of
   WG_MR x WG_NT; row i the channel's). */
static AVX512 void output_transform(const winograd_f32 *t, const wg_run *u, int64_t m,
                                    const float *S, int64_t i) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    __m512 s[4][4], f[2][4];
    for (int xi = 0; xi < 16; xi++)
        s[xi / 4][xi % 4] = _mm512_loadu_ps(S + (xi * WG_MR + i) * WG_NT + u->j);
    for (int c = 0; c < 4; c++) { /* A' s: rows */
        f[0][c] = _mm512_add_ps(_mm512_add_ps(s[0][c], s[1][c]), s[2][c]);
        f[1][c] = _mm512_sub_ps(_mm512_sub_ps(s[1][c], s[2][c]), s[3][c]);
    }
    __m512 bias = _mm512_set1_ps(t->bias ? t->bias[m] : 0.0f);
    int64_t ow = 2 * u->tj, width = t->OW - ow < 2 * u->len ? t->OW - ow : 2 * u->len;
    for (int a = 0; a < 2; a++) {
        int64_t oh = 2 * u->ti + a;
        if (oh >= t->OH) break;
        __m512 y0 = _mm512_add_ps(_mm512_add_ps(f[a][0], f[a][1]), f[a][2]); /* (A' s) A */
        __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(f[a][1], f[a][2]), f[a][3]);
        int64_t at = ((u->n * t->M + m) * t->OH + oh) * t->OW + ow;
        const float *z = t->z ? t->z + at : 0;
        wg_store(t, t->y + at, z, _mm512_permutex2var_ps(y0, lo, y1), bias,
                 wg_lanes(0, width));
        if (width > 16)
            wg_store(t, t->y + at + 16, z ? z + 16 : 0, _mm512_permutex2var_ps(y0, hi, y1),
                     bias, wg_lanes(0, width - 16));
    }
}

/* Channels ahead whose rows are fetched: a run's rows of each plane (a few lines, a plane
   apart) are too short a stream for the hardware's prefetchers, and the transforms' loads
   waited on L3 or memory for most of their time. */
#define WG_AHEAD 2

/* The lines of [p, p + floats) into the cache (for writing where write). */
static AVX512 INLINE void fetch_span(const float *p, int64_t floats, int write) {
    const char *from = (const char *)p, *to = (const char *)(p + floats);
    for (const char *a = (const char *)((uintptr_t)from & ~(uintptr_t)63); a < to; a += 64) {
        if (write)
            __builtin_prefetch(a, 1, 3);
        else
            _mm_prefetch(a, _MM_HINT_T0);
    }
}

/* A run's patch rows of input channel c. */
static AVX512 void fetch_patches(const winograd_f32 *t, const wg_run *u, int64_t c) {
    const float *plane = t->x + (u->n * t->C + c) * t->H * t->W;
    int64_t lo = 2 * u->tj - t->left, hi = lo + 2 * u->len + 2;
    lo = lo < 0 ? 0 : lo, hi = hi < t->W ? hi : t->W;
    for (int r = 0; r < 4; r++) {
        int64_t ih = 2 * u->ti - t->top + r;
        if (ih >= 0 && ih < t->H && hi > lo) fetch_span(plane + ih * t->W + lo, hi - lo, 0);
    }
}

/* A run's output rows of channel m, and their residual's. */
static AVX512 void fetch_outputs(const winograd_f32 *t, const wg_run *u, int64_t m) {
    int64_t ow = 2 * u->tj, width = t->OW - ow < 2 * u->len ? t->OW - ow : 2 * u->len;
    for (int a = 0; a < 2 && 2 * u->ti + a < t->OH; a++) {
        int64_t at = ((u->n * t->M + m) * t->OH + 2 * u->ti + a) * t->OW + ow;
        fetch_span(t->y + at, width, 1);
        if (t->z) fetch_span(t->z + at, width, 0);
    }
}

/* This thread's buffers (onyx_scratch: kept between calls, freed when the thread exits),
   `floats` floats, 64-byte aligned; null when out of memory. */
static float *wg_scratch(int64_t floats) {
    return onyx_scratch(SCRATCH_WINOGRAD, (size_t)floats * sizeof(float), 0);
}

/* Blocks begin <= q < end of WG_NT tiles. */
EXPORT AVX512 int onyx_winograd_f32_range(const void *p, int64_t begin, int64_t end) {
    const winograd_f32 *t = p;
    if (!(onyx_isa() & ONYX_ISA_AVX512) || !winograd_ok(t) || begin < 0 ||
        end > wg_blocks(t) || !t->x || !t->w || !t->y)
        return ONYX_INVALID;
    /* (blocks of equal tiles: 49 are two blocks of 25 and 24, not 48 and 1, whose pass over
       every weight would serve a lone tile) */
    int64_t panels = (t->M + WG_MR - 1) / WG_MR, tiles = t->N * t->TH * t->TW;
    int64_t blocks = wg_blocks(t);
    if (tiles > INT64_MAX / (blocks + 1)) /* (q * tiles below, for q up to blocks + 1) */
        return ONYX_INVALID;
    float *V = wg_scratch(16 * t->C * WG_NT + 16 * WG_MR * WG_NT + 16); /* (+16: a run's
                                                                       last row's vector) */
    if (!V) return ONYX_NOMEM;
    float *S = V + 16 * t->C * WG_NT;
    wg_run r[WG_NT], next[WG_NT];
    for (int64_t q = begin; q < end; q++) {
        int64_t q0 = q * tiles / blocks, q1 = (q + 1) * tiles / blocks;
        int runs = wg_runs(t, q0, q1, r);
        /* (the next block's patches are fetched during this one's products: the transforms
           alone have too little work to hide their loads' waits on L3 or memory) */
        int ahead = q + 1 < end ? wg_runs(t, q1, (q + 2) * tiles / blocks, next) : 0;
        for (int64_t c = 0; c < t->C; c++)
            for (int k = 0; k < runs; k++) {
                if (q == begin && c + WG_AHEAD < t->C) fetch_patches(t, r + k, c + WG_AHEAD);
                input_transform(t, r + k, c, V);
            }
        int nv = (int)((q1 - q0 + 15) / 16);
        void (*fn)(const float *, const float *, int64_t, float *) =
            nv == 3 ? product3 : nv == 2 ? product2 : product1;
        for (int64_t pn = 0; pn < panels; pn++) {
            /* (this panel's outputs and residual, used after its products) */
            for (int64_t i = 0; i < WG_MR && pn * WG_MR + i < t->M; i++)
                for (int k = 0; k < runs; k++) fetch_outputs(t, r + k, pn * WG_MR + i);
            for (int64_t c = pn * t->C / panels; c < (pn + 1) * t->C / panels; c++)
                for (int k = 0; k < ahead; k++) fetch_patches(t, next + k, c);
            for (int xi = 0; xi < 16; xi++)
                fn(t->w + (xi * panels + pn) * t->C * WG_MR, V + xi * t->C * WG_NT, t->C,
                   S + xi * WG_MR * WG_NT);
            for (int64_t i = 0; i < WG_MR && pn * WG_MR + i < t->M; i++)
                for (int k = 0; k < runs; k++) output_transform(t, r + k, pn * WG_MR + i, S, i);
        }
    }
    return 0;
}
#else
EXPORT int onyx_winograd_f32_range(const void *p, int64_t begin, int64_t end) {
    (void)p, (void)begin, (void)end;
    return ONYX_INVALID;
}
#endif

/* The tile's sizes (output channels per panel, tiles per block), for Python's packing. */
EXPORT void onyx_winograd_f32_shape(int64_t *mr_nt) { mr_nt[0] = WG_MR, mr_nt[1] = WG_NT; }
