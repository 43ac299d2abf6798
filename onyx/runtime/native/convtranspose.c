/* float32 ConvTranspose, 1-D (as height 1) and 2-D (part of the _kernels library).
 *
 * Output channel m (of group g) gets, from each input pixel (ih, iw) and kernel tap (a, b),
 *     y[ih * sh + a * dh - top][iw * sw + b * dw - left] += col[m, a, b][ih, iw],
 *     col[m, a, b][pixel] = sum over the group's input channels c of w[c][m][a][b] x[c][pixel]
 * plus the bias; outputs no tap reaches (output_padding, a larger output_shape) are the bias.
 *
 * The columns are a GEMM, rows (m, a, b) by the image's pixels over the group's channels,
 * computed a block of output channels at a time into a buffer (a register tile of CT_TR rows
 * by 16 pixels; weights packed by Python into panels of CT_TR rows, channel-major), then
 * scattered into the block's output planes, each tap's plane a run of row adds (strided by
 * sw). numpy's path made the same columns with one matmul, then one strided assignment or add
 * per tap, and spent most of a small layer's call in Python.
 *
 * The tile is built for AVX-512, AVX2 + FMA and baseline x86-64 from one portable body (GCC's
 * vector extension), picked by onyx_isa() (so ONYX_NATIVE_ISA caps it as it does every hand-
 * written kernel). A part of the work is one image's block of channels.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

/* The tile's multiply-adds fused where the CPU has FMA (a vector extension's a * b + c is
   otherwise two instructions under -std=c99). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT ON
#endif

#define CT_TR 6  /* rows (channel, tap) per register tile */
#define CT_V 16  /* pixels per register tile: one 16-float vector */

EXPORT void onyx_convt_f32_tile(int64_t *rows) { *rows = CT_TR; }

static int convt_sizes(const convt_f32 *t) {
    int64_t v[19] = {t->N,  t->C,  t->H,  t->W,   t->M,    t->OH,    t->OW,
                     t->kh, t->kw, t->sh, t->sw,  t->dh,   t->dw,    t->top,
                     t->left, t->group, t->chans, t->blocks, t->rows};
    int64_t cells, planes, taps, Mg;
    if (!onyx_in(v, 19, 0, ONYX_MAX_EXTENT)) return 0;
    if (t->kh < 1 || t->kw < 1 || t->sh < 1 || t->sw < 1 || t->dh < 1 || t->dw < 1) return 0;
    if (t->group < 1 || t->C % t->group || t->M % t->group || t->chans < 1) return 0;
    Mg = t->M / t->group;
    if (t->blocks != (Mg + t->chans - 1) / t->chans || !onyx_mul(t->kh, t->kw, &taps)) return 0;
    if (!onyx_mul(t->chans, taps, &cells) || t->rows < cells || t->rows % CT_TR) return 0;
    /* every buffer the kernel touches holds fewer than ONYX_MAX_ELEMENTS values */
    if (!onyx_mul(t->H, t->W + CT_V, &cells) || !onyx_mul(t->rows, cells, &cells)) return 0;
    if (!onyx_mul(t->C / t->group, cells, &cells)) return 0;
    if (!onyx_mul(t->N, t->C, &planes) || !onyx_mul(planes, t->H * t->W, &cells)) return 0;
    if (!onyx_mul(t->N, t->M, &planes) || !onyx_mul(planes, t->OH * t->OW, &cells)) return 0;
    if (!onyx_mul(t->group * t->blocks, t->rows, &cells) || !onyx_mul(cells, t->C, &cells))
        return 0;
    return t->x && t->w && t->y;
}

typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4)));

/* cols[r][p] = sum over c < K of w[r / CT_TR][c][r % CT_TR] * x[c][p] for r < rows and p < P
   (a multiple of CT_V), x in blocks of CT_V pixels of every channel ([P / CT_V][K][CT_V]:
   a block is read in order, and channels a power of two apart do not fight over L1 sets). */
static inline __attribute__((always_inline)) void products_body(const float *w, const float *x,
                                                                int64_t K, int64_t P,
                                                                int64_t rows, float *cols,
                                                                const int twin) {
    /* (pixels outer: a block of pixels of every channel stays in L1 for all the rows) */
    int64_t p = 0;
    /* twin (AVX-512's 32 registers; AVX2's 16 would spill): two blocks at once, 12 sums in
       flight and each weight loaded once for two vectors */
    for (; twin && p + 2 * CT_V <= P; p += 2 * CT_V)
        for (int64_t r = 0; r < rows; r += CT_TR) {
            vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0};
            vec b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0}, b4 = {0}, b5 = {0};
            const float *xp = x + p * K, *xq = xp + CT_V * K, *wp = w + r * K;
            for (int64_t c = 0; c < K; c++, xp += CT_V, xq += CT_V, wp += CT_TR) {
                vec v = *(const vec_u *)xp, u = *(const vec_u *)xq;
                float w0 = wp[0], w1 = wp[1], w2 = wp[2], w3 = wp[3], w4 = wp[4], w5 = wp[5];
                a0 += w0 * v, a1 += w1 * v, a2 += w2 * v, a3 += w3 * v, a4 += w4 * v;
                a5 += w5 * v, b0 += w0 * u, b1 += w1 * u, b2 += w2 * u, b3 += w3 * u;
                b4 += w4 * u, b5 += w5 * u;
            }
            float *out = cols + r * P + p;
            *(vec_u *)out = a0, *(vec_u *)(out + P) = a1, *(vec_u *)(out + 2 * P) = a2;
            *(vec_u *)(out + 3 * P) = a3, *(vec_u *)(out + 4 * P) = a4;
            *(vec_u *)(out + 5 * P) = a5;
            out += CT_V;
            *(vec_u *)out = b0, *(vec_u *)(out + P) = b1, *(vec_u *)(out + 2 * P) = b2;
            *(vec_u *)(out + 3 * P) = b3, *(vec_u *)(out + 4 * P) = b4;
            *(vec_u *)(out + 5 * P) = b5;
        }
    for (; p < P; p += CT_V)
        for (int64_t r = 0; r < rows; r += CT_TR) {
            vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0};
            const float *xp = x + p * K, *wp = w + r * K;
            for (int64_t c = 0; c < K; c++, xp += CT_V, wp += CT_TR) {
                vec v = *(const vec_u *)xp;
                a0 += wp[0] * v, a1 += wp[1] * v, a2 += wp[2] * v;
                a3 += wp[3] * v, a4 += wp[4] * v, a5 += wp[5] * v;
            }
            float *out = cols + r * P + p;
            *(vec_u *)out = a0, *(vec_u *)(out + P) = a1, *(vec_u *)(out + 2 * P) = a2;
            *(vec_u *)(out + 3 * P) = a3, *(vec_u *)(out + 4 * P) = a4;
            *(vec_u *)(out + 5 * P) = a5;
        }
}

typedef void (*products_fn)(const float *, const float *, int64_t, int64_t, int64_t, float *);

static void products_base(const float *w, const float *x, int64_t K, int64_t P, int64_t rows,
                          float *cols) {
    products_body(w, x, K, P, rows, cols, 0);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static __attribute__((target("avx512f,fma"))) void
products_avx512(const float *w, const float *x, int64_t K, int64_t P, int64_t rows, float *cols) {
    products_body(w, x, K, P, rows, cols, 1);
}

static __attribute__((target("avx2,fma"))) void
products_avx2(const float *w, const float *x, int64_t K, int64_t P, int64_t rows, float *cols) {
    products_body(w, x, K, P, rows, cols, 0);
}
#endif

static products_fn products_for_cpu(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (onyx_isa() & ONYX_ISA_AVX512) return products_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return products_avx2;
#endif
    return products_base;
}

/* Output plane y (OH x OW) of one channel: the bias, plus each tap's plane of columns (its
   rows P apart from cols, tap (a, b) at row a * kw + b). */
static void scatter(const convt_f32 *t, const float *cols, int64_t P, float bias, float *y) {
    for (int64_t i = 0; i < t->OH * t->OW; i++) y[i] = bias;
    for (int64_t a = 0; a < t->kh; a++)
        for (int64_t b = 0; b < t->kw; b++) {
            const float *col = cols + (a * t->kw + b) * P;
            int64_t off = b * t->dw - t->left; /* ow = iw * sw + off */
            int64_t lo = off >= 0 ? 0 : (-off + t->sw - 1) / t->sw;
            int64_t hi = t->OW - 1 - off < 0 ? 0 : (t->OW - 1 - off) / t->sw + 1;
            if (hi > t->W) hi = t->W;
            for (int64_t ih = 0; ih < t->H; ih++) {
                int64_t oh = ih * t->sh + a * t->dh - t->top;
                if (oh < 0 || oh >= t->OH) continue;
                float *row = y + oh * t->OW;
                const float *src = col + ih * t->W;
                if (t->sw == 1)
                    for (int64_t iw = lo; iw < hi; iw++) row[iw + off] += src[iw];
                else
                    for (int64_t iw = lo; iw < hi; iw++) row[iw * t->sw + off] += src[iw];
            }
        }
}

/* scatter's where the taps tile the output (kh = sh, kw = sw, no dilation: a U-Net's 2x2
   stride-2 upsampling), each output one tap's value: written once, row by row (a stride-2
   row interleaves two taps' rows), not a bias pass and one strided add pass per tap. */
static void scatter_tiled(const convt_f32 *t, const float *cols, int64_t P, float bias,
                          float *y) {
    int64_t FH = t->H * t->sh, FW = t->W * t->sw;
    int64_t valid = FW - t->left < t->OW ? FW - t->left : t->OW;
    if (valid < 0) valid = 0;
    for (int64_t oh = 0; oh < t->OH; oh++) {
        float *row = y + oh * t->OW;
        int64_t fh = oh + t->top, ow = 0;
        if (fh < FH) {
            const float *src = cols + fh % t->sh * t->kw * P + fh / t->sh * t->W;
            if (t->sw == 2 && t->left == 0) {
                const float *odd = src + P;
                for (int64_t iw = 0; iw < valid / 2; iw++) {
                    row[2 * iw] = bias + src[iw];
                    row[2 * iw + 1] = bias + odd[iw];
                }
                ow = valid / 2 * 2;
            }
            for (; ow < valid; ow++) {
                int64_t fw = ow + t->left;
                row[ow] = bias + src[fw % t->sw * P + fw / t->sw];
            }
        }
        for (; ow < t->OW; ow++) row[ow] = bias;
    }
}

/* Parts p0 <= p < p1: p = (n * group + g) * blocks + block. */
EXPORT int onyx_convt_f32_range(const void *p, int64_t p0, int64_t p1) {
    const convt_f32 *t = p;
    if (!convt_sizes(t) || p0 < 0 || p1 > t->N * t->group * t->blocks) return ONYX_INVALID;
    int64_t Cg = t->C / t->group, Mg = t->M / t->group, taps = t->kh * t->kw;
    int64_t pixels = t->H * t->W, P = (pixels + CT_V - 1) / CT_V * CT_V;
    float *cols = malloc(sizeof(float) * (size_t)(t->rows * P + Cg * P));
    if (!cols) return ONYX_NOMEM;
    float *xcopy = cols + t->rows * P;
    products_fn products = products_for_cpu();
    int tiled = t->kh == t->sh && t->kw == t->sw && t->dh == 1 && t->dw == 1;
    int64_t last_image = -1;
    for (int64_t i = p0; i < p1; i++) {
        int64_t block = i % t->blocks, image = i / t->blocks, g = image % t->group;
        const float *x = t->x + image * Cg * pixels; /* (image = n * group + g) */
        if (image != last_image) { /* the image in blocks of pixels (zeros past its end) */
            for (int64_t c = 0; c < Cg; c++)
                for (int64_t p = 0; p < P; p += CT_V) {
                    float *to = xcopy + p * Cg + c * CT_V;
                    int64_t n = pixels - p < CT_V ? pixels - p : CT_V;
                    memcpy(to, x + c * pixels + p, sizeof(float) * (size_t)n);
                    for (int64_t i = n; i < CT_V; i++) to[i] = 0.0f;
                }
            last_image = image;
        }
        products(t->w + (g * t->blocks + block) * t->rows * Cg, xcopy, Cg, P, t->rows, cols);
        int64_t m0 = block * t->chans, m1 = m0 + t->chans < Mg ? m0 + t->chans : Mg;
        for (int64_t m = m0; m < m1; m++) {
            int64_t channel = g * Mg + m, n = image / t->group;
            (tiled ? scatter_tiled : scatter)(t, cols + (m - m0) * taps * P, P,
                                              t->bias ? t->bias[channel] : 0.0f,
                                              t->y + (n * t->M + channel) * t->OH * t->OW);
        }
    }
    free(cols);
    return 0;
}
