/* Kernels over the rows of a tensor (part of the _kernels library) that a classifier's head
 * runs: global average pooling, the mean of each row of an (N * C, H * W) tensor, float32 or
 * 8-bit quantized (com.microsoft QLinearGlobalAveragePool), and softmax over each row. (The
 * normalizations over rows are norms.c's: a small CNN's first run imported their Python
 * module to pool and take its softmax, a third of a millisecond.)
 *
 * MobileNet's squeeze-excite blocks pool images of 7x7 to 56x56 pixels over 16 to 576
 * channels, ten times a run. numpy walks such short rows with a cost per row (and the
 * quantized pooling with several passes); here a row is one pass.
 *
 * The pooled means are onnxruntime's to the bit (its CPU kernels are the tie-breaker where
 * the spec leaves the order of a sum open):
 * - float: four running sums over the row's groups of four values, added (s0 + s2) +
 *   (s1 + s3), the remaining 0-3 values added one by one, the total divided by the count;
 * - 8-bit: the exact integer sum, (sum - count * x_zp) as float32 times one multiplier
 *   x_scale / (y_scale * count), rounded half to even, clamped, plus y_zp.
 */
#include <math.h>
#include <stdint.h>

#include "onyx.h"

/* ------------------------------------------------------------------ global average pooling */


/* Rows taken together: independent sums, so that the additions of one row do not wait on
   each other's latency. */
#define ROWS 4

static inline float row_total(const float *row, int64_t size, const float s[4]) {
    float total = (s[0] + s[2]) + (s[1] + s[3]);
    for (int64_t i = size & ~(int64_t)3; i < size; i++) total += row[i];
    return total;
}

EXPORT CLONES int onyx_mean_rows_f32_range(const void *p, int64_t begin, int64_t end) {
    const global_pool *t = p;
    if (t->size < 0) return ONYX_INVALID; /* (checks.h) */
    const float *x = t->x;
    float *y = t->y;
    int64_t size = t->size, groups = size / 4;
    float count = (float)size;
    int64_t r = begin;
    for (; r + ROWS <= end; r += ROWS) {
        float s[ROWS][4] = {{0}};
        for (int64_t g = 0; g < groups; g++)
            for (int k = 0; k < ROWS; k++)
                for (int j = 0; j < 4; j++) s[k][j] += x[(r + k) * size + 4 * g + j];
        for (int k = 0; k < ROWS; k++) y[r + k] = row_total(x + (r + k) * size, size, s[k]) / count;
    }
    for (; r < end; r++) {
        float s[4] = {0};
        for (int64_t g = 0; g < groups; g++)
            for (int j = 0; j < 4; j++) s[j] += x[r * size + 4 * g + j];
        y[r] = row_total(x + r * size, size, s) / count;
    }
    return 0;
}

#define QGAP(name, T)                                                                        \
    static inline void name(const global_pool *t, int64_t begin, int64_t end) {             \
        const T *x = t->x;                                                                   \
        T *y = t->y;                                                                         \
        int64_t size = t->size;                                                              \
        float lo = t->is_signed ? -128.0f : 0.0f, hi = lo + 255.0f, zp = (float)t->y_zp;     \
        int64_t bias = -(int64_t)t->x_zp * size;                                             \
        for (int64_t r = begin; r < end; r++) {                                              \
            int32_t sum = 0;                                                                 \
            for (int64_t i = 0; i < size; i++) sum += x[r * size + i];                       \
            float v = rintf((float)(sum + bias) * t->scale);                             \
            v = v < lo - zp ? lo - zp : v > hi - zp ? hi - zp : v;                           \
            y[r] = (T)(int32_t)(v + zp);                                                     \
        }                                                                                    \
    }
QGAP(qmean_rows_u8, uint8_t)
QGAP(qmean_rows_s8, int8_t)
#undef QGAP

EXPORT CLONES int onyx_qmean_rows_range(const void *p, int64_t begin, int64_t end) {
    const global_pool *t = p;
    if (t->size < 0) return ONYX_INVALID; /* (checks.h) */
    if (t->is_signed)
        qmean_rows_s8(t, begin, end);
    else
        qmean_rows_u8(t, begin, end);
    return 0;
}

/* The same pooling of channels-last bytes (images, size, columns): a quantized CNN's NHWC
   chain ends in its pooling (kernels/qlinear_pool.py), whose rows were its channels, a
   transposed copy of the whole tensor first (most of the pooling's time). Each column's exact
   integer sum, CHUNK columns at a time (the running sums in L1, a pixel's bytes read in
   order), then the rows' requantization above, to the same bits. */
#define CHUNK 256
#define QGAP_COLUMNS(name, T)                                                               \
    static inline void name(const global_pool *t, int64_t begin, int64_t end) {             \
        const T *x = t->x;                                                                   \
        T *y = t->y;                                                                         \
        int64_t size = t->size, C = t->columns;                                              \
        float lo = t->is_signed ? -128.0f : 0.0f, hi = lo + 255.0f, zp = (float)t->y_zp;     \
        int64_t bias = -(int64_t)t->x_zp * size;                                             \
        int32_t sums[CHUNK];                                                                 \
        for (int64_t n = begin; n < end; n++)                                                \
            for (int64_t c0 = 0; c0 < C; c0 += CHUNK) {                                      \
                int64_t w = C - c0 < CHUNK ? C - c0 : CHUNK;                                 \
                for (int64_t j = 0; j < w; j++) sums[j] = 0;                                 \
                for (int64_t i = 0; i < size; i++) {                                         \
                    const T *px = x + (n * size + i) * C + c0;                               \
                    for (int64_t j = 0; j < w; j++) sums[j] += px[j];                        \
                }                                                                            \
                for (int64_t j = 0; j < w; j++) {                                            \
                    float v = rintf((float)(sums[j] + bias) * t->scale);                     \
                    v = v < lo - zp ? lo - zp : v > hi - zp ? hi - zp : v;                   \
                    y[n * C + c0 + j] = (T)(int32_t)(v + zp);                                \
                }                                                                            \
            }                                                                                \
    }
QGAP_COLUMNS(qmean_columns_u8, uint8_t)
QGAP_COLUMNS(qmean_columns_s8, int8_t)
#undef QGAP_COLUMNS

/* Parts: images. The sizes are checked here too: a column's sum of `size` bytes stays within
   int32 (as the rows' does), and the tensor's cells are counted without overflow. */
EXPORT CLONES int onyx_qmean_columns_range(const void *p, int64_t begin, int64_t end) {
    const global_pool *t = p;
    int64_t cells;
    if (t->size < 0 || t->size > INT32_MAX / 255 || t->columns < 1 || begin < 0 || begin > end ||
        !onyx_mul(end, t->size, &cells) || !onyx_mul(cells, t->columns, &cells))
        return ONYX_INVALID; /* (checks.h) */
    if (t->is_signed)
        qmean_columns_s8(t, begin, end);
    else
        qmean_columns_u8(t, begin, end);
    return 0;
}

/* ------------------------------------------------------------------ softmax */


/* Softmax over each row: exp(x - max) / their sum (numpy's order of steps; the sum and exp
   in another order and precision, 1e-7 relative apart). A row holding a NaN, or whose max
   is infinite, is all NaN, as numpy's x - max gives. */
static void softmax_row_portable(const float *x, float *y, int64_t n) {
    float top = -INFINITY, total = 0.0f;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bad |= isnan(x[i]);
        top = x[i] > top ? x[i] : top;
    }
    if (bad || isinf(top)) {
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    for (int64_t i = 0; i < n; i++) total += y[i] = expf(x[i] - top);
    for (int64_t i = 0; i < n; i++) y[i] /= total;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "activation.h"
#define HAVE_SOFTMAX_AVX512 1

static __attribute__((target("avx512f"))) void softmax_row_avx512(const float *x, float *y,
                                                                  int64_t n) {
    __m512 top = _mm512_set1_ps(-INFINITY), acc = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mask_loadu_ps(top, m, x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        top = _mm512_max_ps(top, v);
    }
    float t = _mm512_reduce_max_ps(top);
    if (nan || isinf(t)) {
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    top = _mm512_set1_ps(t);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = onyx_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), top));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(y + i, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    __m512 total = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, y + i), total));
    }
}
#endif

EXPORT int onyx_softmax_rows_f32_range(const void *p, int64_t begin, int64_t end) {
    const softmax_rows *t = p;
    if (t->size < 1) return ONYX_INVALID; /* (checks.h) */
    int64_t n = t->size;
#ifdef HAVE_SOFTMAX_AVX512
    if (onyx_isa() & ONYX_ISA_AVX512) {
        for (int64_t r = begin; r < end; r++) softmax_row_avx512(t->x + r * n, t->y + r * n, n);
        return 0;
    }
#endif
    for (int64_t r = begin; r < end; r++) softmax_row_portable(t->x + r * n, t->y + r * n, n);
    return 0;
}
