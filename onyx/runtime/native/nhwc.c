/* Channels-last (NHWC) float32 kernels for the optimizer's layout chains (optimizer/layout.py):
 * a MobileNet's convs, its squeeze-excite pooling and its activations run on tensors whose
 * channels are contiguous, with one reorder where a chain starts and one where it ends.
 *
 * In NCHW a depthwise conv vectorizes over pixels of one plane and has to transpose 16 planes
 * into lanes and back (depthwise.c): more time than its multiply-adds. In NHWC the channels are
 * the lanes already:
 * - depthwise: each output pixel is kh * kw vector multiply-adds of its input pixels' channel
 *   runs by the tap's 16 weights, eight pixels at a time (six where a row fills tiles of six
 *   better: 6 or 12 pixels);
 * - group-1 convs (pointwise 1x1 and k x k): a register tile of up to 6 pixels x 64 output
 *   channels (24 accumulators), each input value broadcast once against 4 weight vectors
 *   (weights packed once per session as [blocks of 16 outputs][kh][kw][C][16]). A pointwise
 *   conv's pixels are one run across rows, so a 7x7 plane is 8 full tiles and one pixel. The
 *   input may also be read NCHW (a chain's first conv, the stem, reads the model's image as
 *   it is: the broadcasts take any strides);
 * - the mean over pixels (GlobalAveragePool / ReduceMean over H, W): vectors of channels summed
 *   pixel by pixel.
 * Pixels whose window leaves the image (the borders) take a one-pixel tile that skips the
 * taps outside; rows skip their taps outside for every pixel at once. Bias and the activation
 * (activation.h) are applied in registers as the tile is stored.
 *
 * AVX-512 only: Python (native/nhwc.py) runs the numpy path elsewhere, and the optimizer
 * makes no chain where these kernels do not run.
 */
#include <stdint.h>
#include <stdlib.h>

#include "onyx.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "activation.h"

#define ALWAYS __attribute__((always_inline, target("avx512f")))
#define AVX512 __attribute__((target("avx512f")))

/* What a tap outside the image reads (a pointer to it replaces the tap's). */
static const float zeros[16] __attribute__((aligned(64)));

static inline ALWAYS __mmask16 lanes_left(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* ------------------------------------------------------------------- group-1 convolution */

/* A conv_tile's sums plus bias (and residual), activated, stored. */
static inline ALWAYS void tile_store(const nhwc_task *t, __m512 acc[12][4], const int np,
                                     const int nv, int64_t mg, float *y0, int64_t ys,
                                     const int act) {
    for (int v = 0; v < nv; v++) {
        int64_t m = mg * 64 + v * 16;
        __mmask16 k = lanes_left(t->M - m);
        __m512 bias = _mm512_loadu_ps(t->bias + m); /* (padded to the blocks) */
        for (int j = 0; j < np; j++) {
            __m512 r = _mm512_add_ps(acc[j][v], bias);
            if (t->z) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(k, t->z + (y0 - t->y) + j * ys + m));
            r = onyx_activate(r, act, t->alpha, t->beta);
            _mm512_mask_storeu_ps(y0 + j * ys + m, k, r);
        }
    }
}

/* Output pixels x0 + j * ps (j < np: along a row at the conv's stride, or, pointwise, one run)
   x output channel blocks of group mg (nv of them), for the taps (a, b) whose row ih0 + a * dh
   lies in the image (rows: all taps when flat) and, with check (a border pixel, np == 1), whose
   column iw0 + b * dw does. x0: the first pixel's input at tap (0, 0) (may lie outside the
   image: only taps inside are read). Weights: group mg's [taps][C][nv * 16]. */
static inline ALWAYS void conv_tile(const nhwc_task *t, const float *x0, int64_t ps, int64_t ih0,
                                    int64_t iw0, const int np, const int nv, int64_t mg,
                                    float *y0, int64_t ys, const int check, const int flat) {
    __m512 acc[12][4]; /* (12 pixels: one block of outputs, pointwise) */
    for (int j = 0; j < np; j++)
        for (int v = 0; v < nv; v++) acc[j][v] = _mm512_setzero_ps();
    const int64_t C = t->C, xs_c = t->xs_c, width = nv * 16;
    const float *wg = t->w + mg * 64 * t->kh * t->kw * C;
    for (int64_t a = 0; a < t->kh; a++) {
        if (!flat) {
            int64_t ih = ih0 + a * t->dh;
            if (ih < 0 || ih >= t->H) continue;
        }
        for (int64_t b = 0; b < t->kw; b++) {
            if (check) {
                int64_t iw = iw0 + b * t->dw;
                if (iw < 0 || iw >= t->W) continue;
            }
            const float *xp = x0 + a * t->dh * t->xs_h + b * t->dw * t->xs_w;
            const float *wt = wg + (a * t->kw + b) * C * width;
            for (int64_t c = 0; c < C; c++) {
                __m512 wv[4];
                for (int v = 0; v < nv; v++) wv[v] = _mm512_loadu_ps(wt + v * 16);
                wt += width;
                for (int j = 0; j < np; j++) {
                    __m512 xv = _mm512_set1_ps(xp[j * ps]);
                    for (int v = 0; v < nv; v++) acc[j][v] = _mm512_fmadd_ps(xv, wv[v], acc[j][v]);
                }
                xp += xs_c;
            }
        }
    }
    /* (the common activations as constants: the sums stay in registers, no branch a vector) */
    switch ((int)t->act) {
    case ACT_NONE: tile_store(t, acc, np, nv, mg, y0, ys, ACT_NONE); break;
    case ACT_RELU: tile_store(t, acc, np, nv, mg, y0, ys, ACT_RELU); break;
    case ACT_CLIP: tile_store(t, acc, np, nv, mg, y0, ys, ACT_CLIP); break;
    case ACT_HARDSWISH: tile_store(t, acc, np, nv, mg, y0, ys, ACT_HARDSWISH); break;
    default: tile_store(t, acc, np, nv, mg, y0, ys, (int)t->act); break;
    }
}

#define TILE_CASES(NV, FLAT)                                                                 \
    switch (np) {                                                                            \
    case 1: conv_tile(t, x0, ps, ih0, iw0, 1, NV, mg, y0, ys, 0, FLAT); break;              \
    case 2: conv_tile(t, x0, ps, ih0, iw0, 2, NV, mg, y0, ys, 0, FLAT); break;              \
    case 3: conv_tile(t, x0, ps, ih0, iw0, 3, NV, mg, y0, ys, 0, FLAT); break;              \
    case 4: conv_tile(t, x0, ps, ih0, iw0, 4, NV, mg, y0, ys, 0, FLAT); break;              \
    case 5: conv_tile(t, x0, ps, ih0, iw0, 5, NV, mg, y0, ys, 0, FLAT); break;              \
    default: conv_tile(t, x0, ps, ih0, iw0, 6, NV, mg, y0, ys, 0, FLAT); break;             \
    }

static AVX512 void tile_any(const nhwc_task *t, const float *x0, int64_t ps, int64_t ih0,
                            int64_t iw0, int np, int nv, int64_t mg, float *y0, int64_t ys,
                            int check, int flat) {
    if (check) { /* (np == 1) */
        switch (nv) {
        case 1: conv_tile(t, x0, ps, ih0, iw0, 1, 1, mg, y0, ys, 1, 0); break;
        case 2: conv_tile(t, x0, ps, ih0, iw0, 1, 2, mg, y0, ys, 1, 0); break;
        case 3: conv_tile(t, x0, ps, ih0, iw0, 1, 3, mg, y0, ys, 1, 0); break;
        default: conv_tile(t, x0, ps, ih0, iw0, 1, 4, mg, y0, ys, 1, 0); break;
        }
    } else if (flat) {
        switch (nv) {
        case 1: TILE_CASES(1, 1) break;
        case 2: TILE_CASES(2, 1) break;
        case 3: TILE_CASES(3, 1) break;
        default: TILE_CASES(4, 1) break;
        }
    } else {
        switch (nv) {
        case 1: TILE_CASES(1, 0) break;
        case 2: TILE_CASES(2, 0) break;
        case 3: TILE_CASES(3, 0) break;
        default: TILE_CASES(4, 0) break;
        }
    }
}

/* The first and one-past-last output column whose windows lie inside the image. */
static void interior(const nhwc_task *t, int64_t *lo, int64_t *hi) {
    int64_t a = (t->left + t->sw - 1) / t->sw;
    int64_t last = t->W - 1 + t->left - (t->kw - 1) * t->dw; /* ow * sw <= last */
    int64_t b = last < 0 ? 0 : last / t->sw + 1;
    if (b > t->OW) b = t->OW;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* A group-1 conv with one block of outputs (up to 16: a MobileNet's stem, 3 -> 16 channels
   from the NCHW image) gives conv_tile too few sums to hide the multiply-add latency (6
   pixels) and a short channel loop per tap. Here a tile is NP = 12 pixels of a row of an NCHW
   input, a kw == KW, column stride SW, undilated window, taps and pixels unrolled: each
   input value is broadcast from memory (at a constant offset) into the multiply-add. The sums
   run over taps (a, b), then channels, as conv_tile's. check: some tap's column may leave the
   image (a tile at a border, or a row's last `count` pixels): those multiply-adds are masked
   off (the tap skipped, as conv_tile skips it). */
static inline ALWAYS void narrow_tile(const nhwc_task *t, const float *x0, int64_t ih0,
                                      int64_t iw0, float *y0, const int KW, const int SW,
                                      const int check, int count) {
    enum { NP = 12, SPAN = (NP - 1) * 2 + 3 };
    const int64_t C = t->C, xs_c = t->xs_c;
    __mmask16 cols[SPAN]; /* check: all lanes or none, as column i of the span lies inside */
    const float *at[SPAN];  /* (and where its value is read: a zero outside) */
    if (check)
        for (int i = 0; i < (NP - 1) * SW + KW; i++) {
            int inside = iw0 + i >= 0 && iw0 + i < t->W;
            cols[i] = inside ? 0xFFFF : 0;
            at[i] = inside ? x0 + i : zeros;
        }
    __m512 acc[NP];
#pragma GCC unroll 12
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t a = 0; a < t->kh; a++) {
        int64_t ih = ih0 + a * t->dh;
        if (ih < 0 || ih >= t->H) continue;
        const int64_t row = a * t->dh * t->xs_h;
        const float *xa = x0 + row;
#pragma GCC unroll 3
        for (int b = 0; b < KW; b++) {
            const float *wt = t->w + (a * KW + b) * C * 16;
            for (int64_t c = 0; c < C; c++, wt += 16) {
                const __m512 wv = _mm512_loadu_ps(wt);
                const int64_t plane = c * xs_c;
#pragma GCC unroll 12
                for (int j = 0; j < NP; j++) {
                    const int i = j * SW + b;
                    if (check) {
                        const float *p = at[i] == zeros ? zeros : at[i] + row + plane;
                        acc[j] = _mm512_mask3_fmadd_ps(_mm512_set1_ps(*p), wv, acc[j], cols[i]);
                    } else {
                        acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(xa[plane + i]), wv, acc[j]);
                    }
                }
            }
        }
    }
    const int64_t M = t->M;
    const __mmask16 k = lanes_left(M);
    const __m512 bias = _mm512_loadu_ps(t->bias);
#pragma GCC unroll 12
    for (int j = 0; j < NP; j++) {
        if (check && j >= count) break;
        __m512 r = _mm512_add_ps(acc[j], bias);
        if (t->z) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(k, t->z + (y0 - t->y) + j * M));
        r = onyx_activate(r, (int)t->act, t->alpha, t->beta);
        _mm512_mask_storeu_ps(y0 + j * M, k, r);
    }
}

/* Asks for input rows [ih, ih + count) of image n, every plane of an NCHW input, to be
   brought into the cache: a stem reads the model's image once, most often from memory, in
   short runs of several rows and planes at a time, too many streams for the hardware's
   prefetch to follow. */
static inline ALWAYS void prefetch_rows(const nhwc_task *t, int64_t n, int64_t ih,
                                        int64_t count) {
    for (int64_t h = ih; h < ih + count && h < t->H; h++) {
        if (h < 0) continue;
        for (int64_t c = 0; c < t->C; c++) {
            const char *p = (const char *)(t->x + n * t->xs_n + c * t->xs_c + h * t->xs_h);
            for (int64_t i = 0; i < t->W * 4; i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
        }
    }
}

/* Rows [begin, end) of a narrow conv, 12 pixels at a time. */
static inline ALWAYS void narrow_rows_of(const nhwc_task *t, int64_t begin, int64_t end,
                                         const int KW, const int SW) {
    enum { NP = 12 };
    int64_t lo, hi;
    interior(t, &lo, &hi);
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / t->OH, oh = r % t->OH;
        int64_t ih0 = oh * t->sh - t->top;
        const float *xr = t->x + n * t->xs_n + ih0 * t->xs_h; /* (row ih0: maybe outside) */
        float *yr = t->y + r * t->OW * t->M;
        prefetch_rows(t, n, ih0 + t->kh * t->dh, t->sh); /* (the next row's new input rows) */
        for (int64_t ow = 0; ow < t->OW; ow += NP) {
            int64_t iw0 = ow * SW - t->left;
            int count = (int)(t->OW - ow < NP ? t->OW - ow : NP);
            if (ow >= lo && ow + NP <= hi)
                narrow_tile(t, xr + iw0, ih0, iw0, yr + ow * t->M, KW, SW, 0, NP);
            else
                narrow_tile(t, xr + iw0, ih0, iw0, yr + ow * t->M, KW, SW, 1, count);
        }
    }
}

/* Whether narrow_rows serves the conv: up to 16 outputs from an input whose rows are
   contiguous (NCHW: the pixel offsets are constants), a 3-wide undilated window at column
   stride 1 or 2. */
static int narrow_ok(const nhwc_task *t) {
    return t->M <= 16 && t->xs_w == 1 && t->kw == 3 && t->dw == 1 && (t->sw == 1 || t->sw == 2);
}

static AVX512 void narrow_rows(const nhwc_task *t, int64_t begin, int64_t end) {
    if (t->sw == 2)
        narrow_rows_of(t, begin, end, 3, 2);
    else
        narrow_rows_of(t, begin, end, 3, 1);
}

/* Rows [begin, end) of the N * OH output rows. */
static AVX512 void conv_rows(const nhwc_task *t, int64_t begin, int64_t end) {
    const int64_t M = t->M, MB = (M + 15) / 16, ps = t->sw * t->xs_w;
    int64_t lo, hi;
    interior(t, &lo, &hi);
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / t->OH, oh = r % t->OH;
        float *yr = t->y + r * t->OW * M;
        int64_t ih0 = oh * t->sh - t->top;
        /* (the first pixel's tap (0, 0), possibly outside the image: offsets, never read) */
        const float *xr = t->x + n * t->xs_n + ih0 * t->xs_h;
        for (int64_t mb = 0; mb < MB; mb += 4) {
            int nv = (int)(MB - mb < 4 ? MB - mb : 4);
            int64_t ow = 0;
            while (ow < t->OW) {
                int border = ow < lo || ow >= hi;
                int np = border ? 1 : (int)(hi - ow < 6 ? hi - ow : 6);
                int64_t iw0 = ow * t->sw - t->left;
                tile_any(t, xr + iw0 * t->xs_w, ps, ih0, iw0, np, nv, mb / 4, yr + ow * M, M,
                         border, 0);
                ow += np;
            }
        }
    }
}

/* A pointwise tile of 12 pixels x one block of outputs (6 x 1 would leave the multiply-adds
   waiting on each other). */
static AVX512 void tile_wide(const nhwc_task *t, const float *x0, int64_t mg, float *y0) {
    conv_tile(t, x0, t->C, 0, 0, 12, 1, mg, y0, t->M, 0, 1);
}

/* Pointwise (1x1, unit strides, no padding, NHWC input): pixels [begin, end) of the N * OH * OW
   run, a GEMM [pixels, C] x [C, M]. */
static AVX512 void pointwise_run(const nhwc_task *t, int64_t begin, int64_t end) {
    const int64_t M = t->M, MB = (M + 15) / 16, C = t->C;
    for (int64_t mb = 0; mb < MB; mb += 4) {
        int nv = (int)(MB - mb < 4 ? MB - mb : 4);
        int64_t p = begin;
        if (nv == 1)
            for (; p + 12 <= end; p += 12) tile_wide(t, t->x + p * C, mb / 4, t->y + p * M);
        for (; p < end; p += 6) {
            int np = (int)(end - p < 6 ? end - p : 6);
            tile_any(t, t->x + p * C, C, 0, 0, np, nv, mb / 4, t->y + p * M, M, 0, 1);
        }
    }
}

/* With per-image input scales s (a squeeze-excite block's x * s read by the projection):
   sum_c x[c] s[c] w[c][m], each image's pixels against its weights scaled row by row (C * M
   products where the Mul it replaces made P * C). */
static AVX512 int pointwise_pixels(const nhwc_task *t, int64_t begin, int64_t end) {
    if (!t->s) {
        pointwise_run(t, begin, end);
        return 0;
    }
    const int64_t C = t->C, MB = (t->M + 15) / 16, P = t->OH * t->OW;
    float *scaled = malloc((size_t)(MB * 16 * C) * sizeof(float));
    if (!scaled) return ONYX_NOMEM;
    nhwc_task local = *t;
    local.w = scaled;
    while (begin < end) {
        int64_t n = begin / P, stop = (n + 1) * P < end ? (n + 1) * P : end;
        const float *s = t->s + n * C;
        for (int64_t g = 0; g < MB; g += 4) { /* group g / 4: [C][width] */
            int64_t width = (MB - g < 4 ? MB - g : 4) * 16;
            const float *src = t->w + g * 16 * C;
            float *dst = scaled + g * 16 * C;
            for (int64_t c = 0; c < C; c++) {
                __m512 sc = _mm512_set1_ps(s[c]);
                for (int64_t i = 0; i < width; i += 16)
                    _mm512_storeu_ps(dst + c * width + i,
                                     _mm512_mul_ps(_mm512_loadu_ps(src + c * width + i), sc));
            }
        }
        pointwise_run(&local, begin, stop);
        begin = stop;
    }
    free(scaled);
    return 0;
}

/* ------------------------------------------------------------------- depthwise convolution */

/* Up to 8 output pixels (along a row; `count` of them stored) of the channel block at c
   (lanes k), from input column iw0; xr: the input at row ih0's pixel iw0, channel c. Taps
   whose column leaves the image load zeros (a masked load reads nothing there), so a border
   tile keeps its 8 independent sums (one pixel at a time waited on each multiply-add). */
static inline ALWAYS void dw_tile(const nhwc_task *t, const float *xr, int64_t ih0, int64_t iw0,
                                  float *y, int64_t c, __mmask16 k, int count) {
    enum { NP = 8 };
    const int64_t C = t->C, Mp = (C + 15) / 16 * 16, sw = t->sw, kw = t->kw, W = t->W;
    const int64_t step = sw * C, row = t->dh * t->xs_h, col = t->dw * C;
    __m512 acc[NP];
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    const float *wa = t->w + c;
    for (int64_t a = 0; a < t->kh; a++, xr += row, wa += kw * Mp) {
        int64_t ih = ih0 + a * t->dh;
        if (ih < 0 || ih >= t->H) continue;
        const float *xp = xr;
        for (int64_t b = 0; b < kw; b++, xp += col) {
            __m512 wv = _mm512_loadu_ps(wa + b * Mp);
            int64_t iw = iw0 + b * t->dw;
            for (int j = 0; j < NP; j++) {
                int64_t at = iw + j * sw;
                __mmask16 kj = (at >= 0 && at < W) ? k : 0;
                acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(kj, xp + j * step), wv, acc[j]);
            }
        }
    }
    __m512 bias = _mm512_loadu_ps(t->bias + c);
    const float *z = t->z ? t->z + (y - t->y) : 0;
    for (int j = 0; j < NP; j++) {
        if (j >= count) break;
        __m512 r = _mm512_add_ps(acc[j], bias);
        if (z) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(k, z + j * C));
        r = onyx_activate(r, (int)t->act, t->alpha, t->beta);
        _mm512_mask_storeu_ps(y + j * C, k, r);
    }
}

/* dw_tile for a kw == KW, column stride SW, undilated window and NP (8 or 6) pixels, its loops
   over taps and pixels unrolled: the NP sums stay in registers (indexed by a loop variable they lived in memory, a
   store and a load on every multiply-add's path). Each input vector of a row is loaded once
   for every tap and pixel it serves. masked: the channel block is the last, partial one (lanes k); check: some
   tap's column may leave the image (a tile at a border, or a row's last `count` pixels): which
   columns do is looked up once per tile, and those read a vector of zeros (a masked load
   that reads nothing was several times slower there). */
static inline ALWAYS void dw_tile_fixed(const nhwc_task *t, const float *xr, int64_t ih0,
                                        int64_t iw0, float *y, int64_t c, __mmask16 k,
                                        const int masked, const int KW, const int SW,
                                        const int NP, const int check, int count) {
    enum { SPAN = (8 - 1) * 2 + 5 }; /* (NP <= 8) */
    const int64_t C = t->C, Mp = (C + 15) / 16 * 16, row = t->dh * t->xs_h;
    __mmask16 cols[SPAN]; /* check: the lanes read at each column of the tile's span */
    if (check)
        for (int i = 0; i < (NP - 1) * SW + KW; i++)
            cols[i] = iw0 + i >= 0 && iw0 + i < t->W ? k : 0;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    const float *wa = t->w + c;
    for (int64_t a = 0; a < t->kh; a++, xr += row, wa += KW * Mp) {
        int64_t ih = ih0 + a * t->dh;
        if (ih < 0 || ih >= t->H) continue;
        __m512 wv[5];
#pragma GCC unroll 5
        for (int b = 0; b < KW; b++) wv[b] = _mm512_loadu_ps(wa + b * Mp);
        const float *xp = xr;
#pragma GCC unroll 19
        for (int i = 0; i < (NP - 1) * SW + KW; i++, xp += C) {
            const float *at = check && !cols[i] ? zeros : xp;
            __m512 xv = masked ? _mm512_maskz_loadu_ps(k, at) : _mm512_loadu_ps(at);
#pragma GCC unroll 5
            for (int b = 0; b < KW; b++) {
                int j = i - b; /* (tap b of pixel j / SW) */
                if (j >= 0 && j % SW == 0 && j / SW < NP)
                    acc[j / SW] = _mm512_fmadd_ps(xv, wv[b], acc[j / SW]);
            }
        }
    }
    __m512 bias = _mm512_loadu_ps(t->bias + c);
    const float *z = t->z ? t->z + (y - t->y) : 0;
#pragma GCC unroll 8
    for (int j = 0; j < NP; j++) {
        if (check && j >= count) break;
        __m512 r = _mm512_add_ps(acc[j], bias);
        if (z) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(k, z + j * C));
        r = onyx_activate(r, (int)t->act, t->alpha, t->beta);
        if (masked || check)
            _mm512_mask_storeu_ps(y + j * C, k, r);
        else
            _mm512_storeu_ps(y + j * C, r);
    }
}

/* Output pixels [ow, ow + count) (count <= NP) of every channel block, the tile at column
   iw0 of row ih0 (xr: its input, channel 0); inside: no tap leaves the image (count == NP). */
static inline ALWAYS void dw_tiles_fixed(const nhwc_task *t, const float *xr, int64_t ih0,
                                         int64_t iw0, float *y, int inside, int count,
                                         const int KW, const int SW, const int NP) {
    const int64_t C = t->C;
    const __mmask16 k = lanes_left(C % 16);
    int64_t c = 0;
    if (inside) {
        for (; c + 16 <= C; c += 16)
            dw_tile_fixed(t, xr + c, ih0, iw0, y + c, c, 0xFFFF, 0, KW, SW, NP, 0, NP);
        if (c < C) dw_tile_fixed(t, xr + c, ih0, iw0, y + c, c, k, 1, KW, SW, NP, 0, NP);
    } else {
        for (; c + 16 <= C; c += 16)
            dw_tile_fixed(t, xr + c, ih0, iw0, y + c, c, 0xFFFF, 0, KW, SW, NP, 1, count);
        if (c < C) dw_tile_fixed(t, xr + c, ih0, iw0, y + c, c, k, 1, KW, SW, NP, 1, count);
    }
}

/* Rows [begin, end) of the N * OH output rows for one window shape (KW, SW: constants, or 0
   for any: dw_tile), NP pixels at a time (8; dw_tile 8 always), each tile through every
   channel block before the next (its input span stays in L1 for all of them). */
static inline ALWAYS void dw_rows_of(const nhwc_task *t, int64_t begin, int64_t end,
                                     const int KW, const int SW, const int NP) {
    const int64_t C = t->C, OW = t->OW;
    int64_t lo, hi;
    interior(t, &lo, &hi);
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / t->OH, oh = r % t->OH;
        int64_t ih0 = oh * t->sh - t->top;
        const float *xr = t->x + n * t->xs_n + ih0 * t->xs_h; /* (row ih0: maybe outside) */
        float *yr = t->y + r * OW * C;
        for (int64_t ow = 0; ow < OW; ow += NP) {
            int64_t iw0 = ow * t->sw - t->left;
            int count = (int)(OW - ow < NP ? OW - ow : NP);
            int inside = ow >= lo && ow + NP <= hi;
            const float *x0 = xr + iw0 * C;
            float *y = yr + ow * C;
            if (KW) {
                dw_tiles_fixed(t, x0, ih0, iw0, y, inside, count, KW, SW, NP);
                continue;
            }
            int64_t c = 0;
            for (; c + 16 <= C; c += 16) dw_tile(t, x0 + c, ih0, iw0, y + c, c, 0xFFFF, count);
            if (c < C) dw_tile(t, x0 + c, ih0, iw0, y + c, c, lanes_left(C - c), count);
        }
    }
}

/* Whether a row of OW pixels takes tiles of 6: fewer tiles' slots left empty than with 8 (12
   and 6 pixels, a MobileNet's last rows, filled 75% by tiles of 8, each a border tile). */
static int six_wide(int64_t OW) { return (OW + 5) / 6 * 6 < (OW + 7) / 8 * 8; }

static AVX512 void dw_rows(const nhwc_task *t, int64_t begin, int64_t end) {
    int fixed = t->dw == 1 && (t->kw == 3 || t->kw == 5) && (t->sw == 1 || t->sw == 2);
    int shape = fixed ? (int)(t->kw * 2 + t->sw) * (six_wide(t->OW) ? -1 : 1) : 0;
    switch (shape) {
    case 7: dw_rows_of(t, begin, end, 3, 1, 8); break;
    case 8: dw_rows_of(t, begin, end, 3, 2, 8); break;
    case 11: dw_rows_of(t, begin, end, 5, 1, 8); break;
    case 12: dw_rows_of(t, begin, end, 5, 2, 8); break;
    case -7: dw_rows_of(t, begin, end, 3, 1, 6); break;
    case -8: dw_rows_of(t, begin, end, 3, 2, 6); break;
    case -11: dw_rows_of(t, begin, end, 5, 1, 6); break;
    case -12: dw_rows_of(t, begin, end, 5, 2, 6); break;
    default: dw_rows_of(t, begin, end, 0, 0, 8); break;
    }
}

/* ------------------------------------------------------------------------- pixel means */

/* Images [begin, end): y[n][c] = (sum over the H * W pixels of x[n][p][c]) / (H * W). */
static AVX512 void mean_images(const nhwc_task *t, int64_t begin, int64_t end) {
    const int64_t C = t->C, P = t->H * t->W;
    const float inv = 1.0f / (float)P;
    for (int64_t n = begin; n < end; n++) {
        const float *x = t->x + n * P * C;
        for (int64_t c = 0; c < C; c += 64) {
            __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                           _mm512_setzero_ps()};
            __mmask16 k[4];
            for (int v = 0; v < 4; v++) k[v] = c + v * 16 < C ? lanes_left(C - c - v * 16) : 0;
            for (int64_t p = 0; p < P; p++)
                for (int v = 0; v < 4; v++)
                    s[v] = _mm512_add_ps(s[v], _mm512_maskz_loadu_ps(k[v], x + p * C + c + v * 16));
            for (int v = 0; v < 4; v++)
                _mm512_mask_storeu_ps(t->y + n * C + c + v * 16, k[v],
                                      _mm512_mul_ps(s[v], _mm512_set1_ps(inv)));
        }
    }
}

static int have_avx512(void) { return (onyx_isa() & ONYX_ISA_AVX512) != 0; }

#else
static int have_avx512(void) { return 0; }
#endif

/* ----------------------------------------------------------------------- entry point */

static int task_ok(const nhwc_task *t) {
    int64_t Hp, Wp, counts[4] = {t->N, t->C, t->M, t->OH};
    return onyx_in(counts, 4, 1, ONYX_MAX_EXTENT) && t->kind >= 0 && t->kind <= 3 &&
           onyx_window_axis(t->H, t->OH, t->kh, t->sh, t->dh, t->top, &Hp) &&
           onyx_window_axis(t->W, t->OW, t->kw, t->sw, t->dw, t->left, &Wp) && t->act >= 0 &&
           t->act <= ACT_HARDSIGMOID && t->top >= 0 && t->left >= 0 && t->x && t->y &&
           (!t->s || t->kind == NHWC_POINTWISE);
}

/* Whether [begin, end) lies in a task's work: its output rows (conv, depthwise), pixels
   (pointwise) or images (mean); the kernels run the range as given, unclamped. */
static int range_ok(const nhwc_task *t, int64_t begin, int64_t end) {
    int64_t work = t->N;
    if (t->kind != NHWC_MEAN && !onyx_mul(t->N, t->OH, &work)) return 0;
    if (t->kind == NHWC_POINTWISE && !onyx_mul(work, t->OW, &work)) return 0;
    return begin >= 0 && begin <= end && end <= work;
}

/* Parts [begin, end) of a task: output rows (conv, depthwise), pixels (pointwise) or images
   (mean), as task->kind says. */
EXPORT int onyx_nhwc_range(const void *p, int64_t begin, int64_t end) {
    /* (each thread reads its own copy: the kernels read the task's fields in their loops, and
       onyx_nhwc_call's lies on the caller's stack, in lines the caller writes as it runs) */
    const nhwc_task local = *(const nhwc_task *)p, *t = &local;
    if (!have_avx512() || !task_ok(t) || !range_ok(t, begin, end)) return ONYX_INVALID;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    switch (t->kind) {
    case NHWC_CONV: narrow_ok(t) ? narrow_rows(t, begin, end) : conv_rows(t, begin, end); break;
    case NHWC_POINTWISE: return pointwise_pixels(t, begin, end);
    case NHWC_DEPTHWISE: dw_rows(t, begin, end); break;
    default: mean_images(t, begin, end); break;
    }
#endif
    return 0;
}

/* One call of a set-up's task (nhwc.py): a copy of `task` with the call's pointers, on up to
   `threads` threads. (From Python, filling a copy of the struct field by field cost more than
   a small layer's multiply-adds.) */
EXPORT int onyx_nhwc_call(const nhwc_task *task, const float *x, float *y, const float *s,
                          const float *z, const int64_t *cuts, int64_t parts, int64_t threads) {
    if (!task) return ONYX_INVALID;
    nhwc_task t = *task;
    t.x = x, t.y = y, t.s = s, t.z = z;
    return onyx_parallel(onyx_nhwc_range, &t, cuts, parts, threads);
}

/* Whether the kernels run here (AVX-512, as onyx_isa allows). */
EXPORT int onyx_nhwc_available(void) { return have_avx512(); }

/* A conv's weights w (M, C, kh, kw), C-contiguous, packed as the kernels read them into
   `packed` (M rounded up to blocks of 16: Mp floats a tap and input channel): a group-1
   conv's as groups of 64 output channels (the last one of the blocks left), each
   [kh][kw][C][its channels]; a depthwise conv's (C 1) as [kh][kw][Mp]; zeros past M. The
   bias (M floats, or NULL: zeros) padded to Mp into `b`. (numpy's padding, transposes and
   copies cost a session's first run tens of microseconds a layer.) */
EXPORT int onyx_nhwc_pack(const float *w, const float *bias, int64_t M, int64_t C, int64_t kh,
                          int64_t kw, int64_t depthwise, float *packed, float *b) {
    int64_t dims[4] = {M, C, kh, kw}, taps, size, Mp;
    if (!w || !packed || !b || !onyx_in(dims, 4, 1, ONYX_MAX_EXTENT) || (depthwise && C != 1))
        return ONYX_INVALID;
    Mp = (M + 15) / 16 * 16;
    if (!onyx_mul(kh, kw, &taps) || !onyx_mul(taps, C, &size) || !onyx_mul(size, Mp, &size))
        return ONYX_INVALID;
    for (int64_t m = 0; m < Mp; m++) b[m] = bias && m < M ? bias[m] : 0.0f;
    for (int64_t m0 = 0; m0 < Mp; m0 += 64) {
        /* (a depthwise conv's one group is all Mp channels wide: its C is 1) */
        const int64_t width = depthwise ? Mp : (Mp - m0 < 64 ? Mp - m0 : 64);
        float *g = packed + m0 * taps * C;
        for (int64_t t = 0; t < taps; t++)
            for (int64_t c = 0; c < C; c++) {
                float *row = g + (t * C + c) * width;
                for (int64_t k = 0; k < width; k++) {
                    const int64_t m = m0 + k;
                    row[k] = m < M ? w[(m * C + c) * taps + t] : 0.0f;
                }
            }
        if (depthwise) break;
    }
    return 0;
}
