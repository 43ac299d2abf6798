/* Small CNN layers at serving sizes (part of the _kernels library): a direct float32 conv for
 * images of up to 128 x 128 pixels (with it, a 2x2 stride-2 ConvTranspose as a 1x1 conv whose
 * rows are stored interleaved) and a 2x2 stride-2 max pool, each called once per
 * node with a task made at set-up (small_cnn.py), so that a layer of a few microseconds'
 * work pays little besides it.
 *
 * The conv (unit stride, "same" width: OW == W, any top / bottom pads, dilation, kh x kw up
 * to 7x7; or narrower, OW < W, as after an explicit Pad node: the tiles then compute an
 * OH x W plane, and store_narrow drops its columns OW and on) computes y[m][p] = sum over (tap, c) of w[m][c][tap] * x[c][p + offset(tap)],
 * p = oh * W + ow a pixel of the output plane: with OW == W, tap (a, b)'s input for 16
 * consecutive output pixels is 16 consecutive floats of the input plane, from
 * p + (a * dh - top) * W + b * dw - left on, whichever rows they span. The lanes whose cell
 * lies in the padding (a row above or below the image, a column left or right of it: the
 * load then reads the neighbouring row's cell) are masked off: the load gives 0 there, and
 * does not fault. So nothing is packed or padded per call, and no lane is wasted on a
 * padded row's discarded pixels: an 8x8 image is four full vectors (conv_f32.c's wide
 * strips of its 10-wide padded rows computed 96 pixels for 64).
 *
 * Register tile: SC_MR output channels x nv (<= 3) vectors of 16 pixels, 24 accumulators;
 * per (tap, input channel) nv masked loads and SC_MR broadcast weights. The masks depend on
 * the strip and the tap only: the taps are the outer loop, the input channels the inner one,
 * so a tap's masks stay in mask registers. The weights are packed once per constant weight:
 * (panels, taps, C, SC_MR), zeros past M.
 *
 * A part is one tile (strip, panel); strips vary slowest, so one thread's consecutive parts
 * reuse a strip's masks and pixels. With several threads every part is its own run of the
 * pool's claims (pool.c), so threads that finish early take more.
 *
 * Channel vectors (cv = 1), for planes of a few hundred pixels (a 7x7 or 14x14 layer): a
 * plane of 49 pixels is 3.06 vectors of 16, so pixel vectors left a quarter of the lanes
 * idle there. The tile is then 16 output channels (one vector) x up to 16 pixels, each
 * pixel's value broadcast: y[m0 .. m0 + 16][p] = sum over k of w[k][m0 ..] * x[k][p], the
 * weights packed (panels, taps, C, 16). The pixels of a plane are cut into blocks of at most
 * 16, as even as they go (49 = 12 + 12 + 12 + 13), so no lane is idle but in the last panel
 * of an M not a multiple of 16. A 1x1 conv reads x in place (row k of the block is x[k]'s 16
 * pixels from p0); other kernels pack the block's (tap, channel) rows once (masked loads, as
 * the pixel tiles read them) into the thread's scratch, for all its panels. The sums, pixel
 * by pixel, are transposed in registers to channel rows and stored as the pixel tiles are.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "activation.h"
#include "onyx.h"

#define SC_MR 8
#define SC_NV 3
#define SC_TAPS 49

/* Pixels per strip and strips per image. */
static int64_t sc_pixels(const small_conv_f32 *t) { return t->OH * t->W; }
static int64_t sc_strips(const small_conv_f32 *t) {
    int64_t vectors = (sc_pixels(t) + 15) / 16;
    return (vectors + t->nv - 1) / t->nv;
}

/* Channel vectors: blocks of at most CV_NR pixels of an OH x OW output plane, block b from
   cv_first(t, b). */
#define CV_NR 16
static int64_t cv_pixels(const small_conv_f32 *t) { return t->OH * t->OW; }
static int64_t cv_blocks(const small_conv_f32 *t) { return (cv_pixels(t) + CV_NR - 1) / CV_NR; }
static int64_t cv_first(const small_conv_f32 *t, int64_t b) {
    return cv_pixels(t) * b / cv_blocks(t);
}
/* Whether a channel-vector task reads x in place (a 1x1 conv whose output is its input's
   plane): its blocks' rows are x's rows, nothing packed. */
static int cv_direct(const small_conv_f32 *t) {
    return t->kh * t->kw == 1 && t->top == 0 && t->left == 0 && t->OH == t->H &&
           t->OW == t->W && t->sh == 1 && t->sw == 1;
}

/* Parts (strip, panel) of all images: the range a task's entry runs; with channel vectors,
   (block, panel of 16 channels). */
static int64_t sc_parts(const small_conv_f32 *t) {
    if (t->cv) return t->N * cv_blocks(t) * ((t->M + CV_NR - 1) / CV_NR);
    return t->N * sc_strips(t) * ((t->M + SC_MR - 1) / SC_MR);
}

/* Whether t's sizes are in range and agree (small_cnn.py's limits, checked again), its
   input's and output's cells counted without overflow; up (store_upsampled) adds no residual
   and applies no activation. */
static int small_conv_ok(const small_conv_f32 *t) {
    int64_t Hp, Wp, cells, sizes[7] = {t->N, t->C, t->H, t->W, t->M, t->OH, t->OW};
    return onyx_in(sizes, 7, 1, ONYX_MAX_EXTENT) && onyx_mul(t->N * t->C, t->H, &cells) &&
           onyx_mul(cells, t->W, &cells) && onyx_mul(t->N * t->M, t->OH, &cells) &&
           onyx_mul(cells, t->OW, &cells) && t->kh * t->kw <= SC_TAPS && t->kh >= 1 &&
           t->kw >= 1 && t->nv >= 1 && t->nv <= SC_NV && t->OH * t->OW <= (1 << 20) &&
           t->H * t->W <= ((int64_t)1 << 30) && /* (a gather's int32 index in the plane) */
           /* (pixel tiles cover OH x W: strip_masks' rows are exact up to 2**20 pixels) */
           (t->cv || (t->OW <= t->W && t->sh == 1 && t->sw == 1 && sc_pixels(t) <= (1 << 20))) &&
           onyx_window_axis(t->H, t->OH, t->kh, t->sh, t->dh, t->top, &Hp) &&
           onyx_window_axis(t->W, t->OW, t->kw, t->sw, t->dw, t->left, &Wp) && t->act >= 0 &&
           t->act <= ACT_TANH &&
           (!t->up || (t->up == 1 && t->act == 0 && !t->z && t->kh == 1 && t->kw == 1 &&
                       t->top == 0 && t->left == 0 && t->OH == t->H && t->OW == t->W &&
                       t->W % 8 == 0 &&
                       t->M % 4 == 0)) &&
           (t->cv == 0 || (t->cv == 1 && !t->up));
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#include "activation.h" /* (again: its vector forms, now that immintrin.h is in) */

/* Whether the CPU runs AVX-512 and ONYX_NATIVE_ISA allows it (else the kernels refuse). */
static int have_avx512(void) { return (onyx_isa() & ONYX_ISA_AVX512) != 0; }

/* Lanes of the nv vectors of the strip from pixel p0 whose cell of each tap lies in the
   image (and whose pixel in the plane): masks[tap][h]. */
static AVX512 void strip_masks(const small_conv_f32 *t, int64_t p0, __mmask16 (*masks)[SC_NV]) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i H = _mm512_set1_epi32((int)t->H), W = _mm512_set1_epi32((int)t->W);
    const __m512i zero = _mm512_setzero_si512();
    int64_t P = sc_pixels(t), taps = t->kh * t->kw;
    for (int64_t h = 0; h < t->nv; h++) {
        __m512i pix = _mm512_add_epi32(_mm512_set1_epi32((int)(p0 + 16 * h)), iota);
        /* (pix + 0.5) / W is at least 0.5 / W from an integer, more than its rounding error
           for planes of up to 2**20 pixels: its floor is the row */
        __m512 q = _mm512_div_ps(_mm512_add_ps(_mm512_cvtepi32_ps(pix), _mm512_set1_ps(0.5f)),
                                 _mm512_set1_ps((float)t->W));
        __m512i oh = _mm512_cvttps_epi32(q);
        __m512i ow = _mm512_sub_epi32(pix, _mm512_mullo_epi32(oh, W));
        __mmask16 live = _mm512_cmplt_epi32_mask(pix, _mm512_set1_epi32((int)P));
        for (int64_t tap = 0; tap < taps; tap++) {
            int64_t a = tap / t->kw, b = tap % t->kw;
            __m512i ih = _mm512_add_epi32(oh, _mm512_set1_epi32((int)(a * t->dh - t->top)));
            __m512i iw = _mm512_add_epi32(ow, _mm512_set1_epi32((int)(b * t->dw - t->left)));
            __mmask16 in = _mm512_mask_cmpge_epi32_mask(live, ih, zero);
            in = _mm512_mask_cmplt_epi32_mask(in, ih, H);
            in = _mm512_mask_cmpge_epi32_mask(in, iw, zero);
            masks[tap][h] = _mm512_mask_cmplt_epi32_mask(in, iw, W);
        }
    }
    for (int64_t h = t->nv; h < SC_NV; h++)
        for (int64_t tap = 0; tap < taps; tap++) masks[tap][h] = 0;
}

/* A tile's sums (sums[i]: channel m0 + i's nv vectors) + bias (+ the residual), activated,
   into y: apart from the tile's loop, whose accumulators then stay in registers (with the
   activation's code inlined there, GCC kept them in memory). */
static AVX512 void store_upsampled(const small_conv_f32 *t, float (*sums)[SC_NV * 16],
                                   int64_t p0, int64_t n, int64_t m0, int nv);

static AVX512 void store_narrow(const small_conv_f32 *t, float (*sums)[SC_NV * 16],
                                int64_t p0, int64_t n, int64_t m0, int nv);

static AVX512 __attribute__((noinline)) void store_tile(const small_conv_f32 *t,
                                                        float (*sums)[SC_NV * 16], int64_t p0,
                                                        int64_t n, int64_t m0, int nv) {
    if (t->up) {
        store_upsampled(t, sums, p0, n, m0, nv);
        return;
    }
    if (t->OW < t->W) {
        store_narrow(t, sums, p0, n, m0, nv);
        return;
    }
    int64_t P = sc_pixels(t), rows = t->M - m0 < SC_MR ? t->M - m0 : SC_MR;
    for (int64_t i = 0; i < rows; i++) {
        int64_t at = (n * t->M + m0 + i) * P + p0;
        __m512 bias = _mm512_set1_ps(t->bias ? t->bias[m0 + i] : 0.0f);
        for (int h = 0; h < nv; h++) {
            int64_t left = P - p0 - 16 * h;
            __mmask16 live = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            __m512 s = _mm512_add_ps(_mm512_load_ps(sums[i] + 16 * h), bias);
            if (t->z) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(live, t->z + at + 16 * h));
            _mm512_mask_storeu_ps(t->y + at + 16 * h, live,
                                  onyx_activate(s, (int)t->act, t->alpha, t->beta));
        }
    }
}

/* A narrow tile's sums (OW < W: the tile's pixels are those of an OH x W plane, columns OW
   and on computed and dropped here) + bias (+ the residual), activated, into y's OH x OW
   planes. A vector's kept lanes (column < OW) are consecutive cells of y's plane, from its
   first kept lane's on, whichever rows they span: each is compressed in its register and
   stored from there (and its residual loaded from there, expanded): compress and expand
   with a memory operand were microcoded and slow on some CPUs. */
static AVX512 void store_narrow(const small_conv_f32 *t, float (*sums)[SC_NV * 16],
                                int64_t p0, int64_t n, int64_t m0, int nv) {
    int64_t P = sc_pixels(t), OP = t->OH * t->OW, rows = t->M - m0 < SC_MR ? t->M - m0 : SC_MR;
    __mmask16 keep[SC_NV] = {0}, packed[SC_NV]; /* the lanes kept; as many from lane 0 */
    int64_t first[SC_NV] = {0};
    for (int h = 0; h < nv; h++) {
        int64_t q = p0 + 16 * h, col = q % t->W, at = -1;
        for (int j = 0; j < 16 && q + j < P; j++, col = col + 1 == t->W ? 0 : col + 1)
            if (col < t->OW) {
                if (at < 0) at = (q + j) / t->W * t->OW + col;
                keep[h] |= (__mmask16)(1u << j);
            }
        first[h] = at < 0 ? 0 : at;
        packed[h] = (__mmask16)((1u << __builtin_popcount(keep[h])) - 1);
    }
    for (int64_t i = 0; i < rows; i++) {
        int64_t plane = (n * t->M + m0 + i) * OP;
        __m512 bias = _mm512_set1_ps(t->bias ? t->bias[m0 + i] : 0.0f);
        for (int h = 0; h < nv; h++) {
            if (!keep[h]) continue;
            __m512 s = _mm512_add_ps(_mm512_load_ps(sums[i] + 16 * h), bias);
            if (t->z)
                s = _mm512_add_ps(s, _mm512_maskz_expand_ps(
                                         keep[h], _mm512_maskz_loadu_ps(packed[h],
                                                                        t->z + plane + first[h])));
            s = onyx_activate(s, (int)t->act, t->alpha, t->beta);
            _mm512_mask_storeu_ps(t->y + plane + first[h], packed[h],
                                  _mm512_maskz_compress_ps(keep[h], s));
        }
    }
}

/* A ConvTranspose tile's sums (rows (m, a, b) of the 1x1 conv over input pixels) + bias
   into y's cells (2 h + a, 2 w + b): rows b = 0 and 1 interleaved, 8 input pixels (one input
   row's: W % 8 == 0) making 16 consecutive floats of output row 2 h + a. */
static AVX512 void store_upsampled(const small_conv_f32 *t, float (*sums)[SC_NV * 16],
                                   int64_t p0, int64_t n, int64_t m0, int nv) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    int64_t P = sc_pixels(t), OW = 2 * t->W, OH = 2 * t->H, channels = t->M / 4;
    for (int64_t i = 0; i < SC_MR && m0 + i < t->M; i += 2) {
        int64_t row = m0 + i, m = row / 4, a = row / 2 % 2;
        __m512 bias = _mm512_set1_ps(t->bias ? t->bias[row] : 0.0f);
        float *plane = t->y + (n * channels + m) * OH * OW + a * OW;
        for (int h = 0; h < nv; h++) {
            __m512 even = _mm512_add_ps(_mm512_load_ps(sums[i] + 16 * h), bias);
            __m512 odd = _mm512_add_ps(_mm512_load_ps(sums[i + 1] + 16 * h), bias);
            for (int half = 0; half < 2; half++) {
                int64_t q = p0 + 16 * h + 8 * half; /* its first input pixel */
                if (q >= P) break;
                __m512 v = _mm512_permutex2var_ps(even, half ? hi : lo, odd);
                _mm512_storeu_ps(plane + q / t->W * 2 * OW + q % t->W * 2, v);
            }
        }
    }
}

/* One tile: channels m0 .. m0 + SC_MR (of image n's output) at the nv vectors from pixel
   p0; xn: image n's input; w: the panel's packed weights. */
static AVX512 inline __attribute__((always_inline)) void
tile(const small_conv_f32 *t, const float *restrict xn, const float *restrict w,
     const int64_t *off, __mmask16 (*masks)[SC_NV], int64_t p0, int64_t n, int64_t m0,
     const int nv) {
    __m512 c[SC_MR][SC_NV], v[SC_NV];
    for (int i = 0; i < SC_MR; i++)
        for (int h = 0; h < nv; h++) c[i][h] = _mm512_setzero_ps();
    int64_t C = t->C, plane = t->H * t->W, taps = t->kh * t->kw;
    /* one loop over (tap, channel), the tap's masks and row moved on where its channels end
       (nested loops had GCC keep the accumulators in memory) */
    int64_t tap = -1, left = 0;
    __mmask16 k0 = 0, k1 = 0, k2 = 0;
    const float *from = xn, *a = w;
    for (int64_t k = 0; k < taps * C; k++, left--, from += plane, a += SC_MR) {
        while (!left) { /* the next tap (one wholly in the padding for this strip: skipped) */
            if (++tap == taps) goto done;
            k0 = masks[tap][0], k1 = masks[tap][1], k2 = masks[tap][2];
            from = xn + off[tap] + p0, a = w + tap * C * SC_MR;
            left = (k0 | k1 | k2) ? C : 0;
            k += left ? 0 : C;
        }
        v[0] = _mm512_maskz_loadu_ps(k0, from);
        if (nv > 1) v[1] = _mm512_maskz_loadu_ps(k1, from + 16);
        if (nv > 2) v[2] = _mm512_maskz_loadu_ps(k2, from + 32);
        for (int i = 0; i < SC_MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            for (int h = 0; h < nv; h++) c[i][h] = _mm512_fmadd_ps(ai, v[h], c[i][h]);
        }
    }
done:;
    float sums[SC_MR][SC_NV * 16] __attribute__((aligned(64)));
    for (int i = 0; i < SC_MR; i++)
        for (int h = 0; h < nv; h++) _mm512_store_ps(sums[i] + 16 * h, c[i][h]);
    store_tile(t, sums, p0, n, m0, nv);
}

#define INSTANCE(n)                                                                           \
    static AVX512 void tile##n(const small_conv_f32 *t, const float *xn, const float *w,      \
                               const int64_t *off, __mmask16 (*masks)[SC_NV], int64_t p0,     \
                               int64_t img, int64_t m0) {                                      \
        tile(t, xn, w, off, masks, p0, img, m0, n);                                           \
    }
INSTANCE(1)
INSTANCE(2)
INSTANCE(3)
#undef INSTANCE

/* ------------------------------------------------- channel vectors (cv = 1), see the top */

/* r[j]: 16 output channels of pixel j of a block of pn pixels: sums of K rows, row k's pixel
   values b[k * bs + j] broadcast, its weights w[16 k ..]. */
static AVX512 inline __attribute__((always_inline)) void
cv_tile(const float *restrict b, int64_t bs, const float *restrict w, int64_t K, __m512 *r,
        const int pn) {
    __m512 c[CV_NR];
#pragma GCC unroll 16
    for (int j = 0; j < pn; j++) c[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++, b += bs, w += 16) {
        __m512 wk = _mm512_loadu_ps(w);
#pragma GCC unroll 16
        for (int j = 0; j < pn; j++) c[j] = _mm512_fmadd_ps(_mm512_set1_ps(b[j]), wk, c[j]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < pn; j++) r[j] = c[j];
}

typedef void (*cv_tile_fn)(const float *, int64_t, const float *, int64_t, __m512 *);
#define CV_INSTANCE(n)                                                                        \
    static AVX512 void cv_tile##n(const float *b, int64_t bs, const float *w, int64_t K,      \
                                  __m512 *r) {                                                \
        cv_tile(b, bs, w, K, r, n);                                                           \
    }
CV_INSTANCE(1) CV_INSTANCE(2) CV_INSTANCE(3) CV_INSTANCE(4) CV_INSTANCE(5) CV_INSTANCE(6)
CV_INSTANCE(7) CV_INSTANCE(8) CV_INSTANCE(9) CV_INSTANCE(10) CV_INSTANCE(11) CV_INSTANCE(12)
CV_INSTANCE(13) CV_INSTANCE(14) CV_INSTANCE(15) CV_INSTANCE(16)
#undef CV_INSTANCE
static const cv_tile_fn cv_tiles[CV_NR + 1] = {
    0, cv_tile1, cv_tile2, cv_tile3, cv_tile4, cv_tile5, cv_tile6, cv_tile7, cv_tile8,
    cv_tile9, cv_tile10, cv_tile11, cv_tile12, cv_tile13, cv_tile14, cv_tile15, cv_tile16};

/* The 16 x 16 transpose of r (rows: pixels; columns: channels) in registers: after it, r[i]
   holds channel i's 16 pixels. */
static AVX512 void transpose16(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) { /* (a0 b0 a1 b1 | ...), (a2 b2 a3 b3 | ...) per 128 bits */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4 i + q]: rows 4 i .. 4 i + 3 of column 4 L + q */
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int q = 0; q < 4; q++) { /* the 128-bit lanes L of the four row groups together */
        __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
        r[q] = _mm512_shuffle_f32x4(v0, v2, 0x88);      /* column q (L = 0) */
        r[8 + q] = _mm512_shuffle_f32x4(v0, v2, 0xDD);  /* column 8 + q (L = 2) */
        r[4 + q] = _mm512_shuffle_f32x4(v1, v3, 0x88);  /* column 4 + q (L = 1) */
        r[12 + q] = _mm512_shuffle_f32x4(v1, v3, 0xDD); /* column 12 + q (L = 3) */
    }
}

/* A channel-vector tile's sums r (pixel j's channels m0 ..) + bias (+ the residual),
   activated, into y's rows m0 .. m0 + 16 (those below M) at pixels p0 .. p0 + pn. */
static AVX512 __attribute__((noinline)) void cv_store(const small_conv_f32 *t, __m512 *r,
                                                      int64_t n, int64_t m0, int64_t p0,
                                                      int pn) {
    for (int j = pn; j < CV_NR; j++) r[j] = _mm512_setzero_ps();
    transpose16(r);
    __mmask16 live = (__mmask16)((1u << pn) - 1);
    int64_t P = cv_pixels(t), rows = t->M - m0 < CV_NR ? t->M - m0 : CV_NR;
    for (int64_t i = 0; i < rows; i++) {
        int64_t at = (n * t->M + m0 + i) * P + p0;
        __m512 s = _mm512_add_ps(r[i], _mm512_set1_ps(t->bias ? t->bias[m0 + i] : 0.0f));
        if (t->z) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(live, t->z + at));
        _mm512_mask_storeu_ps(t->y + at, live, onyx_activate(s, (int)t->act, t->alpha, t->beta));
    }
}

/* The (tap, channel) rows of a block of pixels p0 .. p0 + 16 (those past P: zeros) of image
   xn, for any stride (gathers): buf[(tap * C + c) * 16 + j]. */
static AVX512 void cv_gather(const small_conv_f32 *t, const float *xn, int64_t p0, float *buf) {
    int64_t taps = t->kh * t->kw, C = t->C, plane = t->H * t->W, P = cv_pixels(t);
    for (int64_t tap = 0; tap < taps; tap++) {
        int64_t a = tap / t->kw, b = tap % t->kw;
        int32_t at[CV_NR];
        __mmask16 in = 0;
        for (int j = 0; j < CV_NR; j++) {
            int64_t p = p0 + j, ih = p / t->OW * t->sh + a * t->dh - t->top;
            int64_t iw = p % t->OW * t->sw + b * t->dw - t->left;
            int ok = p < P && ih >= 0 && ih < t->H && iw >= 0 && iw < t->W;
            at[j] = ok ? (int32_t)(ih * t->W + iw) : 0;
            in |= (__mmask16)(ok << j);
        }
        float *row = buf + tap * C * CV_NR;
        __m512i index = _mm512_loadu_si512(at);
        for (int64_t c = 0; c < C; c++)
            _mm512_store_ps(row + c * CV_NR, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in,
                                                                      index, xn + c * plane, 4));
    }
}

/* Parts begin <= q < end of a channel-vector task, q = block * panels + panel (blocks of all
   images in order): a block's rows are packed (where not read in place) once per run of
   its parts: by masked loads where the output is as wide as the input at unit stride (a
   tap's 16 pixels are then consecutive in the plane), else by gathers. */
static AVX512 int cv_range(const small_conv_f32 *t, int64_t begin, int64_t end) {
    int64_t taps = t->kh * t->kw, C = t->C, K = taps * C, plane = t->H * t->W;
    int64_t blocks = cv_blocks(t), panels = (t->M + CV_NR - 1) / CV_NR, off[SC_TAPS];
    int same = t->OW == t->W && t->sh == 1 && t->sw == 1;
    int direct = cv_direct(t);
    float *buf = 0;
    if (!direct && !(buf = onyx_scratch(SCRATCH_SMALL_CONV, (size_t)K * CV_NR * 4, 0)))
        return ONYX_NOMEM;
    __mmask16 masks[SC_TAPS][SC_NV];
    small_conv_f32 one = *t;
    one.nv = 1; /* (strip_masks of one vector: the block's 16 pixels from p0) */
    for (int64_t tap = 0; tap < taps; tap++)
        off[tap] = (tap / t->kw * t->dh - t->top) * t->W + tap % t->kw * t->dw - t->left;
    int64_t have = -1;
    for (int64_t q = begin; q < end; q++) {
        int64_t s = q / panels, pn = q % panels, n = s / blocks, bk = s % blocks;
        int64_t p0 = cv_first(t, bk), count = cv_first(t, bk + 1) - p0;
        const float *xn = t->x + n * C * plane;
        if (!same && s != have) {
            cv_gather(t, xn, p0, buf);
            have = s;
        } else if (!direct && s != have) {
            strip_masks(&one, p0, masks);
            for (int64_t tap = 0; tap < taps; tap++)
                for (int64_t c = 0; c < C; c++)
                    _mm512_store_ps(buf + (tap * C + c) * CV_NR,
                                    _mm512_maskz_loadu_ps(masks[tap][0],
                                                          xn + c * plane + off[tap] + p0));
            have = s;
        }
        __m512 r[CV_NR];
        cv_tiles[count](direct ? xn + p0 : buf, direct ? plane : CV_NR,
                        t->w + pn * K * CV_NR, K, r);
        cv_store(t, r, n, pn * CV_NR, p0, (int)count);
    }
    return 0;
}

/* Parts begin <= q < end, q = strip * panels + panel (strips of all images in order). */
EXPORT AVX512 int onyx_small_conv_f32_range(const void *p, int64_t begin, int64_t end) {
    const small_conv_f32 *t = p;
    if (!have_avx512() || !small_conv_ok(t) || begin < 0 || begin > end || end > sc_parts(t))
        return ONYX_INVALID;
    if (t->cv) return cv_range(t, begin, end);
    int64_t taps = t->kh * t->kw, per = sc_strips(t), panels = (t->M + SC_MR - 1) / SC_MR;
    int64_t P = sc_pixels(t), off[SC_TAPS], have = -1;
    __mmask16 masks[SC_TAPS][SC_NV];
    for (int64_t tap = 0; tap < taps; tap++)
        off[tap] = (tap / t->kw * t->dh - t->top) * t->W + tap % t->kw * t->dw - t->left;
    for (int64_t q = begin; q < end; q++) {
        int64_t s = q / panels, pn = q % panels, n = s / per, p0 = s % per * t->nv * 16;
        if (s != have) strip_masks(t, p0, masks), have = s;
        int64_t vectors = (P - p0 + 15) / 16;
        const float *xn = t->x + n * t->C * t->H * t->W;
        const float *w = t->w + pn * taps * t->C * SC_MR;
        if (vectors >= 3 && t->nv >= 3)
            tile3(t, xn, w, off, masks, p0, n, pn * SC_MR);
        else if (vectors >= 2 && t->nv >= 2)
            tile2(t, xn, w, off, masks, p0, n, pn * SC_MR);
        else
            tile1(t, xn, w, off, masks, p0, n, pn * SC_MR);
    }
    return 0;
}

/* ------------------------------------------------------------- 2x2 stride-2 max pool */

/* max(a, b), a NaN where either is one (numpy's maximum). */
static AVX512 inline __m512 nan_max(__m512 a, __m512 b) {
    return _mm512_mask_add_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b);
}

/* Planes begin .. end of a 2x2 stride-2 max pool without padding: (planes, H, W) to
   (planes, OH, OW), OH = H / 2 and OW = W / 2 (floor: a last odd row or column unread). Each
   output row: the max of two input rows, then of each pair of columns (the even and the odd
   lanes of two vectors). */
static AVX512 void max2x2_planes(const float *x, float *y, int64_t H, int64_t W, int64_t begin,
                                 int64_t end) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int64_t OH = H / 2, OW = W / 2;
    for (int64_t pl = begin; pl < end; pl++)
        for (int64_t oh = 0; oh < OH; oh++) {
            const float *r0 = x + (pl * H + 2 * oh) * W, *r1 = r0 + W;
            float *out = y + (pl * OH + oh) * OW;
            for (int64_t ow = 0; ow < OW; ow += 16) {
                int64_t n = OW - ow < 16 ? OW - ow : 16; /* outputs: 2n inputs a row */
                __mmask16 lo = n >= 8 ? 0xFFFF : (__mmask16)((1u << (2 * n)) - 1);
                __mmask16 hi = n <= 8 ? 0 : (__mmask16)((1u << (2 * n - 16)) - 1);
                __m512 a = nan_max(_mm512_maskz_loadu_ps(lo, r0 + 2 * ow),
                                   _mm512_maskz_loadu_ps(lo, r1 + 2 * ow));
                __m512 b = nan_max(_mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16),
                                   _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16));
                __m512 m = nan_max(_mm512_permutex2var_ps(a, even, b),
                                   _mm512_permutex2var_ps(a, odd, b));
                _mm512_mask_storeu_ps(out + ow, n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1), m);
            }
        }
}

EXPORT AVX512 int onyx_max2x2_f32_range(const void *p, int64_t begin, int64_t end) {
    const small_conv_f32 *t = p; /* x, y; C: planes, H, W */
    int64_t cells;
    if (!have_avx512() || begin < 0 || begin > end || end > t->C || t->H < 2 || t->W < 2 ||
        t->H > ONYX_MAX_EXTENT || t->W > ONYX_MAX_EXTENT || !onyx_mul(t->C, t->H * t->W, &cells))
        return ONYX_INVALID;
    max2x2_planes(t->x, t->y, t->H, t->W, begin, end);
    return 0;
}

/* The kernels' entries: the set-up's task with this call's arrays, on up to `threads`
   threads (a part each, claimed as threads come free), or on the calling thread alone. */
static int run_task(range_fn fn, const small_conv_f32 *setup, const float *x, float *y,
                    const float *bias, const float *z, int64_t parts, int64_t threads,
                    int64_t run) {
    small_conv_f32 t = *setup;
    t.x = x, t.y = y, t.bias = bias ? bias : setup->bias, t.z = z;
    if (threads <= 1 || parts <= 1) return fn(&t, 0, parts);
    /* claims of about `run` parts each (even runs; at most 4096 of them) */
    int64_t claims = (parts + run - 1) / run, cuts[4097];
    claims = claims > 4096 ? 4096 : claims;
    for (int64_t i = 0; i <= claims; i++) cuts[i] = parts * i / claims;
    return onyx_parallel(fn, &t, cuts, claims, threads);
}

/* Parts a claim of a channel-vector task takes: one where x is read in place (claims as
   threads come free even out the work best); else a block's panels (its rows packed once a
   claim, not once a part), halved while that leaves the threads fewer than 8 claims each
   (13 blocks of a 14x14 plane split 7 : 6 on two threads), down to 2 (a pack per two tiles
   is a few percent of their work). */
static int64_t cv_run(const small_conv_f32 *t, int64_t threads) {
    int64_t run = cv_direct(t) ? 1 : (t->M + CV_NR - 1) / CV_NR;
    while (run > 2 && sc_parts(t) / run < 8 * threads) run = (run + 1) / 2;
    return run;
}

EXPORT int onyx_small_conv_f32(const small_conv_f32 *setup, const float *x, float *y,
                               const float *bias, const float *z, int64_t threads) {
    if (!small_conv_ok(setup)) return ONYX_INVALID;
    int64_t run = setup->cv ? cv_run(setup, threads) : 1;
    return run_task(onyx_small_conv_f32_range, setup, x, y, bias, z, sc_parts(setup), threads,
                    run);
}

EXPORT int onyx_max2x2_f32(const small_conv_f32 *setup, const float *x, float *y,
                           int64_t threads) {
    return run_task(onyx_max2x2_f32_range, setup, x, y, 0, 0, setup->C, threads, 1);
}

EXPORT int onyx_small_cnn_avx512(void) { return 1; }

#else /* no AVX-512 build: small_cnn.py sees the kernels absent */

EXPORT int onyx_small_conv_f32(const small_conv_f32 *setup, const float *x, float *y,
                               const float *bias, const float *z, int64_t threads) {
    (void)setup, (void)x, (void)y, (void)bias, (void)z, (void)threads;
    return ONYX_INVALID;
}
EXPORT int onyx_max2x2_f32(const small_conv_f32 *setup, const float *x, float *y,
                           int64_t threads) {
    (void)setup, (void)x, (void)y, (void)threads;
    return ONYX_INVALID;
}
EXPORT int onyx_small_cnn_avx512(void) { return 0; }

#endif
