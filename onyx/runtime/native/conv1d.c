/* float32 1-D convolution, direct (part of the _kernels library): Conv and FusedConv on
 * (N, C, L) signals, any stride, dilation, padding and group, with the bias, FusedConv's
 * residual and activation applied as it stores.
 *
 *     y[n][m][p] = sum over the group's channels c and taps j of
 *                  w[m][c][j] * x[n][c][p * s + j * d - left]   (0 outside the signal)
 *
 * The conv is a small GEMM (rows: output channels, columns: output positions, depth: the
 * T = Cg * k (channel, tap) pairs) whose column operand is read straight from the signal;
 * no columns are packed. Two register tiles, Python picks one per layer (conv1d.py):
 *
 * - channel vectors (mode 0): a vector holds 16 output channels of one position; the
 *   weights are packed in panels of 16 channels, (group, panels, T, 16), and every position
 *   broadcasts its input value. Any stride and dilation reads in place. For few output
 *   positions and many channels: an STFT front-end's conv (258 channels, 5 frames).
 *   The tile's sums are stored transposed (channel rows of the output).
 * - position vectors (mode 1): a vector holds 16 consecutive output positions of one
 *   channel; the weights, in blocks of 8 rows (T, 8), are broadcast. A strided conv reads
 *   its signal split into s phases (phase r holds x[i * s + r]): tap j is then phase
 *   (j * d) % s at offset (j * d) / s, a unit-stride run. For long signals and few channels.
 *
 * A part of the work is one image's group's run of `chunk` output positions; it copies the
 * signal it reads (zero-padded, phase-split in mode 1) into its own buffer where it must.
 * The input may be strided (sn, sc, sl: a byte classifier's embedding transposed to
 * (N, C, L) is read as the view it is, not copied first).
 * The tiles are built for AVX-512, AVX2 + FMA and baseline x86-64 from one portable body
 * (GCC's vector extension), picked by onyx_isa() (so ONYX_NATIVE_ISA caps it as it does
 * every hand-written kernel); only the tile sizes differ.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activation.h"
#include "onyx.h"

/* --------------------------------------------------------------- after the conv (post) */

/* What a conv's output full (N, M, OL) becomes in one more pass (onyx_conv1d_f32_post):
   - C1_PAIR_MAX: MaxPool(kernel 2, stride 2) along the signal, out (N, M, OL / 2);
     max(a, b) is numpy's maximum (NaN where either is, b of two zeros), so the pool's bits;
   - C1_MAGNITUDE: an STFT's magnitude, out (N, bins, OL) = sqrt(re * re + im * im + eps)
     with re, im the rows re0 + c and im0 + c of full: each product, sum and root rounded
     as numpy's passes round them (these functions come before the file's fp-contract
     pragma: under -std=c99 GCC fuses nothing here; clang is told below). */
#define C1_PAIR_MAX 1
#define C1_MAGNITUDE 2

#if defined(__clang__)
#define C1_EXACT _Pragma("STDC FP_CONTRACT OFF")
#else
#define C1_EXACT
#endif

static void pair_max_rows(const float *full, int64_t rows, int64_t OL, float *out) {
    C1_EXACT
    int64_t half = OL / 2;
    for (int64_t r = 0; r < rows; r++) {
        const float *a = full + r * OL;
        float *o = out + r * half;
        for (int64_t i = 0; i < half; i++) {
            float u = a[2 * i], v = a[2 * i + 1];
            /* (numpy's maximum: a NaN wins, of two zeros the second, as max_ps) */
            o[i] = (u > v || u != u) ? u : v;
        }
    }
}

static void magnitude_rows(const float *re, const float *im, int64_t n, float eps, float *o) {
    C1_EXACT
    for (int64_t i = 0; i < n; i++) {
        float a = re[i] * re[i], b = im[i] * im[i];
        float v = a + b;
        v = v + eps;
        o[i] = sqrtf(v);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static __attribute__((target("avx512f"))) void pair_max_rows_avx512(const float *full,
                                                                     int64_t rows, int64_t OL,
                                                                     float *out) {
    C1_EXACT
    int64_t half = OL / 2;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30),
                  odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t r = 0; r < rows; r++) {
        const float *a = full + r * OL;
        float *o = out + r * half;
        int64_t i = 0;
        for (; i + 16 <= half; i += 16) {
            __m512 lo = _mm512_loadu_ps(a + 2 * i), hi = _mm512_loadu_ps(a + 2 * i + 16);
            __m512 u = _mm512_permutex2var_ps(lo, even, hi), v = _mm512_permutex2var_ps(lo, odd, hi);
            __mmask16 nan = _mm512_cmp_ps_mask(u, u, _CMP_UNORD_Q);
            /* (max_ps gives v where either is NaN: u's NaN put back) */
            _mm512_storeu_ps(o + i, _mm512_mask_mov_ps(_mm512_max_ps(u, v), nan, u));
        }
        pair_max_rows(a + 2 * i, 1, 2 * (half - i), o + i); /* (the row's last pairs) */
    }
}

static __attribute__((target("avx512f"))) void magnitude_rows_avx512(const float *re,
                                                                      const float *im, int64_t n,
                                                                      float eps, float *o) {
    C1_EXACT
    const __m512 e = _mm512_set1_ps(eps);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 r = _mm512_loadu_ps(re + i), m = _mm512_loadu_ps(im + i);
        __m512 v = _mm512_add_ps(_mm512_mul_ps(r, r), _mm512_mul_ps(m, m));
        _mm512_storeu_ps(o + i, _mm512_sqrt_ps(_mm512_add_ps(v, e)));
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_maskz_loadu_ps(k, re + i), m = _mm512_maskz_loadu_ps(k, im + i);
        __m512 v = _mm512_add_ps(_mm512_mul_ps(r, r), _mm512_mul_ps(m, m));
        _mm512_mask_storeu_ps(o + i, k, _mm512_sqrt_ps(_mm512_add_ps(v, e)));
    }
}

static __attribute__((target("avx2"))) void magnitude_rows_avx2(const float *re,
                                                                 const float *im, int64_t n,
                                                                 float eps, float *o) {
    C1_EXACT
    const __m256 e = _mm256_set1_ps(eps);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_loadu_ps(re + i), m = _mm256_loadu_ps(im + i);
        __m256 v = _mm256_add_ps(_mm256_mul_ps(r, r), _mm256_mul_ps(m, m));
        _mm256_storeu_ps(o + i, _mm256_sqrt_ps(_mm256_add_ps(v, e)));
    }
    magnitude_rows(re + i, im + i, n - i, eps, o + i);
}
#endif

/* Whether a post pass of `kind` fits the conv's output (N, M, OL) and sel (C1_MAGNITUDE:
   bins, re0, im0). */
static int post_ok(int64_t N, int64_t M, int64_t OL, int64_t kind, const int64_t *sel) {
    int64_t v[3] = {N, M, OL}, cells;
    if (!onyx_in(v, 3, 1, ONYX_MAX_EXTENT) || !onyx_mul(N, M, &cells) ||
        !onyx_mul(cells, OL, &cells) || cells > ONYX_MAX_ELEMENTS)
        return 0;
    if (kind == C1_PAIR_MAX) return OL >= 2;
    if (kind != C1_MAGNITUDE || !sel) return 0;
    int64_t bins = sel[0], re0 = sel[1], im0 = sel[2];
    return bins >= 1 && re0 >= 0 && im0 >= 0 && bins <= M - re0 && bins <= M - im0;
}

/* The post pass of `kind` from full (N, M, OL) into out (post_ok checked). */
static void post_pass(int64_t N, int64_t M, int64_t OL, int64_t kind, const int64_t *sel,
                      float eps, const float *full, float *out) {
    int isa = onyx_isa();
    (void)isa;
    if (kind == C1_PAIR_MAX) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (isa & ONYX_ISA_AVX512) {
            pair_max_rows_avx512(full, N * M, OL, out);
            return;
        }
#endif
        pair_max_rows(full, N * M, OL, out);
        return;
    }
    void (*rows)(const float *, const float *, int64_t, float, float *) = magnitude_rows;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (isa & ONYX_ISA_AVX512)
        rows = magnitude_rows_avx512;
    else if (__builtin_cpu_supports("avx2"))
        rows = magnitude_rows_avx2;
#endif
    int64_t bins = sel[0], re0 = sel[1], im0 = sel[2];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < bins; c++)
            rows(full + (n * M + re0 + c) * OL, full + (n * M + im0 + c) * OL, OL, eps,
                 out + (n * bins + c) * OL);
}

/* The tiles' multiply-adds fused where the CPU has FMA (a vector extension's a * b + c is
   otherwise two instructions under -std=c99). After the includes: HardSigmoid keeps its
   unfused form (activation.h's onyx_hard_sigmoid). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT ON
#endif

#define C1_V 16    /* floats per vector: a panel's channels, a run of positions */
#define C1_TPOS 32 /* most positions a tile of either mode computes */
#define C1_TROWS 8 /* most output channels a position-vector tile computes */

typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4)));
typedef int32_t ivec __attribute__((vector_size(64)));

#define INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------ sizes */

/* Whether the task's sizes are in range and every buffer it names fits (checks.h): nothing
   is read or written otherwise. */
static int conv1d_sizes(const conv1d_f32 *t) {
    int64_t v[15] = {t->N, t->C,    t->L, t->M,     t->OL,    t->k,  t->s,  t->d,
                     t->left, t->group, t->chunk, t->mode, t->sn, t->sc, t->sl};
    int64_t extent, cells, T, panels, last;
    if (!onyx_in(v, 15, 0, ONYX_MAX_EXTENT) || !t->x || !t->w || !t->y) return 0;
    if (t->mode > 1 || t->C < 1 || t->M < 1 || t->group < 1 || t->C % t->group ||
        t->M % t->group || t->chunk < 1)
        return 0; /* (then parts N * group * chunks <= N * M * OL, checked below) */
    if (t->act < ACT_NONE || t->act > ACT_HARDSIGMOID) return 0;
    if (!onyx_mul(t->C / t->group, t->k, &T)) return 0;
    panels = (t->M / t->group + C1_V - 1) / C1_V;
    /* the weights, the input and output, and a part's buffer (phases of a chunk's window) */
    if (!onyx_mul(t->group, t->mode ? t->M / t->group : panels * C1_V, &cells) ||
        !onyx_mul(cells, T, &cells))
        return 0;
    /* the input's last element: (N - 1) sn + (C - 1) sc + (L - 1) sl */
    if (!onyx_mul(t->N - (t->N > 0), t->sn, &last) || !onyx_mul(t->C - 1, t->sc, &cells) ||
        !onyx_mul(t->L - (t->L > 0), t->sl, &extent) || last + cells + extent > ONYX_MAX_ELEMENTS)
        return 0;
    if (!onyx_window_axis(t->L, t->OL, t->k, t->s, t->d, t->left, &extent)) return 0;
    if (!onyx_mul(t->N, t->M, &cells) || !onyx_mul(cells, t->OL, &cells)) return 0;
    if (!onyx_mul(t->chunk + C1_TPOS + 1, t->s, &cells) ||
        !onyx_mul(cells + extent, t->C, &cells))
        return 0;
    return 1;
}

/* --------------------------------------------------------------------------- epilogue */

/* y[j] = activation(acc[j * stride] + b + z[j]) for j < n (z may be null). */
INLINE void finish(float *y, const float *acc, int64_t stride, const float *z, int64_t n,
                   float b, const conv1d_f32 *t) {
    if (z)
        for (int64_t j = 0; j < n; j++) y[j] = acc[j * stride] + b + z[j];
    else
        for (int64_t j = 0; j < n; j++) y[j] = acc[j * stride] + b;
    const float lo = t->alpha, hi = t->beta;
    switch (t->act) { /* (ordered comparisons: a NaN stays a NaN, as numpy's passes) */
    case ACT_RELU:
        for (int64_t j = 0; j < n; j++) y[j] = y[j] < 0.0f ? 0.0f : y[j];
        break;
    case ACT_LEAKY:
        for (int64_t j = 0; j < n; j++) y[j] = y[j] < 0.0f ? y[j] * lo : y[j];
        break;
    case ACT_CLIP:
        for (int64_t j = 0; j < n; j++) {
            float v = y[j] < lo ? lo : y[j];
            y[j] = v > hi ? hi : v;
        }
        break;
    case ACT_HARDSWISH:
        for (int64_t j = 0; j < n; j++) y[j] = onyx_hardswish(y[j]);
        break;
    case ACT_HARDSIGMOID:
        for (int64_t j = 0; j < n; j++) y[j] = onyx_hard_sigmoid(y[j], lo, hi);
        break;
    default:
        break;
    }
}

/* a where m is set, else b (vectors) */
#define C1_SELECT(m, a, b) ((vec)(((ivec)(a) & (m)) | ((ivec)(b) & ~(m))))

/* The activation of 16 values in place, as finish's (not HardSigmoid: finish's unfused
   form). */
INLINE void activate(vec_u *p, const conv1d_f32 *t) {
    const vec zero = {0}, one = zero + 1.0f, lo = zero + t->alpha, hi = zero + t->beta;
    vec v = *p, u;
    switch (t->act) {
    case ACT_RELU:
        v = C1_SELECT(v < zero, zero, v);
        break;
    case ACT_LEAKY:
        v = C1_SELECT(v < zero, v * t->alpha, v);
        break;
    case ACT_CLIP:
        v = C1_SELECT(v < lo, lo, v);
        v = C1_SELECT(v > hi, hi, v);
        break;
    case ACT_HARDSWISH:
        u = v / 6.0f + 0.5f;
        u = C1_SELECT(u < zero, zero, u);
        v = v * C1_SELECT(u > one, one, u);
        break;
    default:
        break;
    }
    *p = v;
}

/* --------------------------------------------------------------------------------- tiles */

/* Channel vectors: out[p][q][:] = sum over t < T of w[p * T * 16 + t * 16 + :] *
   x[tap[t] + pos[q]], for np panels of 16 channels and tp positions. */
INLINE void channel_tile(const float *w, int64_t T, const float *x, const int64_t *tap,
                         const int64_t *pos, const int np, const int tp, float *out) {
    vec a[2][12];
#pragma GCC unroll 2
    for (int p = 0; p < np; p++)
#pragma GCC unroll 12
        for (int q = 0; q < tp; q++) a[p][q] = (vec){0};
    const float *w1 = w + T * C1_V;
    for (int64_t i = 0; i < T; i++) {
        const float *xt = x + tap[i];
        vec w0v = *(const vec_u *)(w + i * C1_V), w1v = w0v;
        if (np > 1) w1v = *(const vec_u *)(w1 + i * C1_V);
#pragma GCC unroll 12
        for (int q = 0; q < tp; q++) {
            float v = xt[pos[q]];
            a[0][q] += w0v * v;
            if (np > 1) a[1][q] += w1v * v;
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < np; p++)
#pragma GCC unroll 12
        for (int q = 0; q < tp; q++) *(vec_u *)(out + (p * 12 + q) * C1_V) = a[p][q];
}

/* Position vectors: out[i][v * 16 + :] = sum over t < T of w[t * rb + i] *
   x[tap[t] + v * 16 + :], for r rows (output channels) and tv vectors of positions. */
INLINE void position_tile(const float *w, int64_t rb, int64_t T, const float *x,
                          const int64_t *tap, const int r, const int tv, float *out) {
    vec a[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < r; i++)
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) a[i][v] = (vec){0};
    for (int64_t t = 0; t < T; t++, w += rb) {
        const float *xt = x + tap[t];
        vec x0 = *(const vec_u *)xt, x1 = x0;
        if (tv > 1) x1 = *(const vec_u *)(xt + C1_V);
#pragma GCC unroll 8
        for (int i = 0; i < r; i++) {
            a[i][0] += w[i] * x0;
            if (tv > 1) a[i][1] += w[i] * x1;
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < r; i++)
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) *(vec_u *)(out + i * C1_TPOS + v * C1_V) = a[i][v];
}

/* ------------------------------------------------------------------------------- parts */

/* A part's geometry: image n's group g, output positions [p0, p1). */
typedef struct {
    int64_t n, g, p0, p1;
} part;

/* The window of input a part reads, [a0, a0 + span) along the signal. */
INLINE int64_t window_start(const conv1d_f32 *t, const part *q) {
    return q->p0 * t->s - t->left;
}

/* The signal of the part's channels, zero outside [0, L): its rows `stride` apart in buf,
   or in place (rows L apart) where the window lies inside the signal. Returns the first
   window value of channel 0. */
static const float *channel_rows(const conv1d_f32 *t, const part *q, float *buf,
                                 int64_t *stride) {
    int64_t Cg = t->C / t->group, a0 = window_start(t, q);
    int64_t span = (q->p1 - q->p0 - 1) * t->s + (t->k - 1) * t->d + 1;
    const float *x = t->x + q->n * t->sn + q->g * Cg * t->sc;
    if (t->sl == 1 && a0 >= 0 && a0 + span <= t->L) {
        *stride = t->sc;
        return x + a0;
    }
    int64_t lo = a0 < 0 ? -a0 : 0, hi = t->L - a0 < span ? t->L - a0 : span;
    for (int64_t c = 0; c < Cg; c++) {
        float *row = buf + c * span;
        const float *src = x + c * t->sc + a0 * t->sl;
        memset(row, 0, (size_t)span * sizeof(float));
        if (t->sl == 1 && hi > lo)
            memcpy(row + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
        else
            for (int64_t i = lo; i < hi; i++) row[i] = src[i * t->sl];
    }
    *stride = span;
    return buf;
}

/* channel_tile for n <= tp positions: the tile of n's width (an STFT's 5 frames: no
   multiply-adds on copies of the last one). */
INLINE void channel_tile_n(const float *w, int64_t T, const float *x, const int64_t *tap,
                           const int64_t *pos, const int np, const int tp, int64_t n,
                           float *out) {
    switch (n < tp ? n : tp) {
#define C1_WIDTH(k)                                                                          \
    case k:                                                                                  \
        if (k < tp) {                                                                        \
            channel_tile(w, T, x, tap, pos, np, k < tp ? k : 1, out);                        \
            return;                                                                          \
        }                                                                                    \
        break;
        C1_WIDTH(1) C1_WIDTH(2) C1_WIDTH(3) C1_WIDTH(4) C1_WIDTH(5) C1_WIDTH(6) C1_WIDTH(7)
#undef C1_WIDTH
    default:
        break;
    }
    channel_tile(w, T, x, tap, pos, np, tp, out);
}

/* A channel tile's n positions of panel p (its sums out[q][:] for q < n) into the output
   from position o: bias and activation on vectors, then stored transposed (channel rows). */
INLINE void channel_store(const conv1d_f32 *t, const part *q, int64_t p, int64_t o, int64_t n,
                          float *out) {
    int64_t Mg = t->M / t->group, c0 = p * C1_V, valid = Mg - c0 < C1_V ? Mg - c0 : C1_V;
    int64_t first = q->g * Mg + c0, at = (q->n * t->M + first) * t->OL + o;
    if (t->z || t->act == ACT_HARDSIGMOID) { /* (FusedConv's rarer forms: value by value) */
        for (int64_t m = 0; m < valid; m++)
            finish(t->y + at + m * t->OL, out + m, C1_V, t->z ? t->z + at + m * t->OL : 0, n,
                   t->bias ? t->bias[first + m] : 0.0f, t);
        return;
    }
    vec b = {0};
    if (t->bias)
        for (int64_t m = 0; m < valid; m++) b[m] = t->bias[first + m];
    for (int64_t e = 0; e < n; e++) {
        vec_u *v = (vec_u *)(out + e * C1_V);
        *v += b;
        activate(v, t);
    }
    for (int64_t m = 0; m < valid; m++) {
        float *row = t->y + at + m * t->OL;
        for (int64_t e = 0; e < n; e++) row[e] = out[e * C1_V + m];
    }
}

/* Mode 0 on part q with tiles of np_main panels (1 or 2) by tp positions (at most 12). */
INLINE void channel_part(const conv1d_f32 *t, const part *q, float *buf, int64_t *tap,
                         float *out, const int np_main, const int tp) {
    int64_t Cg = t->C / t->group, Mg = t->M / t->group, T = Cg * t->k, rs;
    int64_t panels = (Mg + C1_V - 1) / C1_V;
    const float *x = channel_rows(t, q, buf, &rs);
    for (int64_t c = 0, i = 0; c < Cg; c++)
        for (int64_t j = 0; j < t->k; j++) tap[i++] = c * rs + j * t->d;
    const float *wg = t->w + q->g * panels * T * C1_V;
    for (int64_t p = 0; p < panels; p += np_main) {
        int np = panels - p < np_main ? 1 : np_main;
        for (int64_t o = q->p0; o < q->p1; o += tp) {
            int64_t n = q->p1 - o < tp ? q->p1 - o : tp, pos[12];
            for (int e = 0; e < tp; e++) pos[e] = ((o - q->p0) + (e < n ? e : n - 1)) * t->s;
            if (np == 2)
                channel_tile_n(wg + p * T * C1_V, T, x, tap, pos, 2, tp, n, out);
            else
                channel_tile_n(wg + p * T * C1_V, T, x, tap, pos, 1, tp, n, out);
            for (int pp = 0; pp < np; pp++) channel_store(t, q, p + pp, o, n, out + pp * 12 * C1_V);
        }
    }
}

/* The part's signal in s phases: buf[c][r][i] = x[a0 + i * s + r] (0 outside the signal)
   for i < Lq. */
static void phases(const conv1d_f32 *t, const part *q, int64_t Lq, float *buf) {
    int64_t Cg = t->C / t->group, a0 = window_start(t, q), s = t->s, sl = t->sl;
    const float *x = t->x + q->n * t->sn + q->g * Cg * t->sc;
    /* phase r's values inside the signal: first[r] <= i < last[r] (0 <= a0 + i s + r < L) */
    int64_t lo = Lq, hi = 0;
    for (int64_t r = 0; r < s; r++) {
        int64_t first = a0 + r >= 0 ? 0 : (-(a0 + r) + s - 1) / s;
        int64_t last = t->L - a0 - r <= 0 ? 0 : (t->L - a0 - r + s - 1) / s;
        first = first < Lq ? first : Lq;
        last = last < Lq ? (last > first ? last : first) : Lq;
        for (int64_t c = 0; c < Cg; c++) {
            float *row = buf + (c * s + r) * Lq;
            memset(row, 0, (size_t)first * sizeof(float));
            memset(row + last, 0, (size_t)(Lq - last) * sizeof(float));
            if (sl != 1) continue;
            const float *src = x + c * t->sc + a0 + r;
            if (s == 1)
                memcpy(row + first, src + first, (size_t)(last - first) * sizeof(float));
            else
                for (int64_t i = first; i < last; i++) row[i] = src[i * s];
        }
        lo = first < lo ? first : lo;
        hi = last > hi ? last : hi;
    }
    if (sl == 1) return;
    /* A strided signal (channels last: a transposed view) in blocks of 16 positions: the
       lines of a block's positions stay in L1 while every channel's values are picked. */
    for (int64_t i0 = lo; i0 < hi; i0 += 16)
        for (int64_t r = 0; r < s; r++) {
            int64_t first = a0 + r >= 0 ? 0 : (-(a0 + r) + s - 1) / s;
            int64_t last = t->L - a0 - r <= 0 ? 0 : (t->L - a0 - r + s - 1) / s;
            int64_t b0 = i0 > first ? i0 : first, b1 = i0 + 16 < last ? i0 + 16 : last;
            b1 = b1 < Lq ? b1 : Lq;
            for (int64_t c = 0; c < Cg; c++) {
                float *row = buf + (c * s + r) * Lq;
                const float *src = x + c * t->sc + (a0 + r) * sl;
                for (int64_t i = b0; i < b1; i++) row[i] = src[i * s * sl];
            }
        }
}

/* A position tile's whole rows (r rows of tv vectors, out[i][:]) into the output rows of
   channels ch.. (y: the first's, OL apart), with bias and activation on vectors. */
INLINE void position_store(const conv1d_f32 *t, int64_t ch, const int r, const int tv,
                           float *out, float *y) {
#pragma GCC unroll 8
    for (int i = 0; i < r; i++) {
        float b = t->bias ? t->bias[ch + i] : 0.0f;
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) {
            vec_u *a = (vec_u *)(out + i * C1_TPOS + v * C1_V);
            *a += b;
            activate(a, t);
            *(vec_u *)(y + i * t->OL + v * C1_V) = *a;
        }
    }
}

/* Mode 1 on part q with tiles of r_main rows by tv vectors (r_main <= 8 divides 8, tv <= 2):
   the weights in blocks of 8 rows (the last one fewer), each (T, rows). */
INLINE void position_part(const conv1d_f32 *t, const part *q, float *buf, int64_t *tap,
                          float *out, const int r_main, const int tv) {
    int64_t Cg = t->C / t->group, Mg = t->M / t->group, T = Cg * t->k, s = t->s;
    int64_t width = tv * C1_V, npos = q->p1 - q->p0, a0 = window_start(t, q);
    int64_t Lq = (npos + width - 1) / width * width + ((t->k - 1) * t->d) / s, rs = s * Lq;
    const float *x = buf;
    if (s == 1 && t->sl == 1 && a0 >= 0 && a0 + Lq <= t->L) { /* (reads inside the signal) */
        x = t->x + q->n * t->sn + q->g * Cg * t->sc + a0;
        rs = t->sc;
    } else {
        phases(t, q, Lq, buf);
    }
    for (int64_t c = 0, i = 0; c < Cg; c++)
        for (int64_t j = 0; j < t->k; j++)
            tap[i++] = c * rs + (j * t->d) % s * Lq + (j * t->d) / s;
    const float *wg = t->w + q->g * Mg * T;
    for (int64_t m0 = 0; m0 < Mg; m0 += C1_TROWS) { /* a block of rows, packed (T, rb) */
        int64_t rb = Mg - m0 < C1_TROWS ? Mg - m0 : C1_TROWS;
        for (int64_t i0 = 0; i0 < rb;) {
            int r = rb - i0 >= r_main ? r_main : 1;
            for (int64_t o = 0; o < npos; o += width) {
                int64_t n = npos - o < width ? npos - o : width;
                const float *wr = wg + m0 * T + i0;
                if (tv > 1 && n <= C1_V) { /* (a last run of at most 16: one vector) */
                    if (r == r_main)
                        position_tile(wr, rb, T, x + o, tap, r_main, 1, out);
                    else
                        position_tile(wr, rb, T, x + o, tap, 1, 1, out);
                } else if (r == r_main) {
                    position_tile(wr, rb, T, x + o, tap, r_main, tv, out);
                } else {
                    position_tile(wr, rb, T, x + o, tap, 1, tv, out);
                }
                int64_t ch = q->g * Mg + m0 + i0, at = (q->n * t->M + ch) * t->OL + q->p0 + o;
                if (n == width && !t->z && t->act != ACT_HARDSIGMOID) {
                    if (r == r_main)
                        position_store(t, ch, r_main, tv, out, t->y + at);
                    else
                        position_store(t, ch, 1, tv, out, t->y + at);
                    continue;
                }
                for (int i = 0; i < r; i++, at += t->OL)
                    finish(t->y + at, out + i * C1_TPOS, 1, t->z ? t->z + at : 0, n,
                           t->bias ? t->bias[ch + i] : 0.0f, t);
            }
            i0 += r;
        }
    }
}

/* This thread's buffers of a part: the signal window (`floats` floats) and the taps (`taps`
   offsets), carved from this thread's scratch block (onyx_scratch: kept between calls, freed
   when the thread exits). A malloc and free per call were an mmap and
   munmap past glibc's 128 KiB threshold: page faults on every call, and on two threads the
   second one's helped nothing (its faults and the unmap's TLB shootdowns serialized them).
   Returns 0 when out of memory. */
static int part_buffers(size_t floats, size_t taps, float **buf, int64_t **tap) {
    size_t head = (floats * sizeof(float) + 63) / 64 * 64, total = head + taps * sizeof(int64_t);
    char *at = onyx_scratch(SCRATCH_CONV1D_PART, total, 0);
    if (!at) return 0;
    *buf = (float *)at, *tap = (int64_t *)(at + head);
    return 1;
}

/* Parts [begin, end) with the given tiles (the buffers: this thread's, part_buffers). */
INLINE int conv1d_parts(const conv1d_f32 *t, int64_t begin, int64_t end, const int np_main,
                        const int tp, const int r_main, const int tv) {
    int64_t chunks = (t->OL + t->chunk - 1) / t->chunk, T = t->C / t->group * t->k;
    int64_t reach = (t->chunk + C1_TPOS) * t->s + (t->k - 1) * t->d + 1;
    if (begin < 0 || end > t->N * t->group * chunks) return ONYX_INVALID;
    /* (reach + s <= (chunk + C1_TPOS + 1) * s + extent: conv1d_sizes bounds it) */
    float *buf, out[2 * 12 * C1_V > C1_TROWS * C1_TPOS ? 2 * 12 * C1_V : C1_TROWS * C1_TPOS];
    int64_t *tap;
    if (!part_buffers((size_t)(reach + t->s) * (size_t)(t->C / t->group), (size_t)T, &buf, &tap))
        return ONYX_NOMEM;
    for (int64_t i = begin; i < end; i++) {
        part q = {i / (t->group * chunks), i / chunks % t->group, i % chunks * t->chunk, 0};
        q.p1 = q.p0 + t->chunk < t->OL ? q.p0 + t->chunk : t->OL;
        if (t->mode == 0)
            channel_part(t, &q, buf, tap, out, np_main, tp);
        else
            position_part(t, &q, buf, tap, out, r_main, tv);
    }
    return 0;
}

typedef int (*parts_fn)(const conv1d_f32 *, int64_t, int64_t);

static int parts_base(const conv1d_f32 *t, int64_t begin, int64_t end) {
    return conv1d_parts(t, begin, end, 1, 2, 2, 1);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* 16 zmm sums a tile (32 registers) */
static __attribute__((target("avx512f,fma"))) int parts_avx512(const conv1d_f32 *t,
                                                               int64_t begin, int64_t end) {
    return conv1d_parts(t, begin, end, 2, 8, 8, 2);
}

/* 12 ymm sums a channel tile, 8 a position tile (16 registers) */
static __attribute__((target("avx2,fma"))) int parts_avx2(const conv1d_f32 *t, int64_t begin,
                                                          int64_t end) {
    return conv1d_parts(t, begin, end, 1, 6, 4, 1);
}
#endif

static parts_fn parts_for_cpu(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (onyx_isa() & ONYX_ISA_AVX512) return parts_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return parts_avx2;
#endif
    return parts_base;
}

/* Parts [begin, end) of the task (a pool job's range). */
EXPORT int onyx_conv1d_f32_range(const void *p, int64_t begin, int64_t end) {
    const conv1d_f32 *t = p;
    if (!conv1d_sizes(t)) return ONYX_INVALID;
    return parts_for_cpu()(t, begin, end);
}

/* The whole task on the calling thread, on x (its strides xs[3] where not null), y, bias
   and z given here (the task's own are ignored): a small layer's call, without a pool
   job's set-up or a copy of its task. */
EXPORT int onyx_conv1d_f32(const void *p, const float *x, const int64_t *xs, float *y,
                           const float *bias, const float *z) {
    conv1d_f32 t = *(const conv1d_f32 *)p;
    t.x = x, t.y = y, t.bias = bias, t.z = z;
    if (xs) t.sn = xs[0], t.sc = xs[1], t.sl = xs[2];
    if (!conv1d_sizes(&t)) return ONYX_INVALID;
    return parts_for_cpu()(&t, 0, t.N * t.group * ((t.OL + t.chunk - 1) / t.chunk));
}

/* Floats of a conv's output a thread keeps between calls at most (a larger one is allocated
   for its call: a batch of clips would hold megabytes a thread). */
#define C1_KEPT_FULL (1 << 20)

/* This thread's buffer of `floats` floats (at most C1_KEPT_FULL) for a conv's output before
   its post pass (this thread's scratch, as part_buffers'), or null. */
static float *full_buffer(int64_t floats) {
    return onyx_scratch(SCRATCH_CONV1D_FULL, (size_t)floats * sizeof(float), 0);
}

/* onyx_conv1d_f32 into this thread's buffer, then the post pass of `kind` (C1_PAIR_MAX,
   C1_MAGNITUDE: sel and eps) into out: a 1-D conv and the MaxPool or magnitude after it in
   one call, their bits, without the conv's output array. The residual z is not taken. */
EXPORT int onyx_conv1d_f32_post(const void *p, const float *x, const int64_t *xs,
                                const float *bias, int64_t kind, const int64_t *sel, float eps,
                                float *out) {
    conv1d_f32 t = *(const conv1d_f32 *)p;
    if (!out || !post_ok(t.N, t.M, t.OL, kind, sel)) return ONYX_INVALID;
    int64_t floats = t.N * t.M * t.OL; /* (post_ok: in range) */
    float *own = floats > C1_KEPT_FULL ? malloc((size_t)floats * sizeof(float)) : 0;
    float *full = floats > C1_KEPT_FULL ? own : full_buffer(floats);
    if (!full) return ONYX_NOMEM;
    t.x = x, t.y = full, t.bias = bias, t.z = 0;
    if (xs) t.sn = xs[0], t.sc = xs[1], t.sl = xs[2];
    int status = ONYX_INVALID;
    if (conv1d_sizes(&t)) {
        status = parts_for_cpu()(&t, 0, t.N * t.group * ((t.OL + t.chunk - 1) / t.chunk));
        if (!status) post_pass(t.N, t.M, t.OL, kind, sel, eps, full, out);
    }
    free(own);
    return status;
}

/* The post pass alone, on the output full (N, M, OL) of the task's conv run on the pool. */
EXPORT int onyx_conv1d_post(const void *p, const float *full, int64_t kind, const int64_t *sel,
                            float eps, float *out) {
    const conv1d_f32 *t = p;
    if (!full || !out || !post_ok(t->N, t->M, t->OL, kind, sel)) return ONYX_INVALID;
    post_pass(t->N, t->M, t->OL, kind, sel, eps, full, out);
    return 0;
}
