/* Kernels over the rows of a tensor (part of the _kernels library): global average pooling,
 * the mean of each row of an (N * C, H * W) tensor, float32 or 8-bit quantized (com.microsoft
 * QLinearGlobalAveragePool), layer normalization over the last axis, and instance / group
 * normalization (statistics per row of (rows, channels, spatial), sums in double, a scale
 * and bias per channel), and inference BatchNormalization (a per-channel affine map).
 *
 * MobileNet's squeeze-excite blocks pool images of 7x7 to 56x56 pixels over 16 to 576
 * channels, ten times a run; a transformer normalizes 128 rows of 256 values a dozen times.
 * numpy walks such short rows with a cost per row (and the quantized pooling and the layer
 * norm with several passes each); here a row is one pass.
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

/* ------------------------------------------------------------------ layer normalization */


/* Each row: its mean, then the mean of the squared deviations from it (two passes over a row
   in L1, as numpy's kernel computes them), y = (x - mean) * inv_std * scale + bias. */
EXPORT CLONES int onyx_layer_norm_f32_range(const void *p, int64_t begin, int64_t end) {
    const layer_norm *t = p;
    if (t->size < 0) return ONYX_INVALID; /* (checks.h) */
    int64_t n = t->size;
    if (t->skip && !t->sum) return ONYX_INVALID;
    for (int64_t r = begin; r < end; r++) {
        const float *x = t->x + r * n;
        float *y = t->y + r * n;
        float s[16] = {0}, q[16] = {0}, sum = 0, squares = 0;
        int64_t i = 0;
        if (t->skip) { /* (x + skip, then + add: numpy's two float32 additions, in order) */
            float *total = t->sum + r * n;
            const float *skip = t->skip + r * n;
            for (i = 0; i < n; i++) total[i] = x[i] + skip[i];
            if (t->add)
                for (i = 0; i < n; i++) total[i] += t->add[i];
            x = total, i = 0;
        }
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) s[j] += x[i + j];
        for (int j = 0; j < 16; j++) sum += s[j];
        for (; i < n; i++) sum += x[i];
        float mean = sum / (float)n;
        for (i = 0; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) q[j] += (x[i + j] - mean) * (x[i + j] - mean);
        for (int j = 0; j < 16; j++) squares += q[j];
        for (; i < n; i++) squares += (x[i] - mean) * (x[i] - mean);
        float inv = 1.0f / sqrtf(squares / (float)n + t->epsilon);
        if (t->bias)
            for (i = 0; i < n; i++) y[i] = (x[i] - mean) * inv * t->scale[i] + t->bias[i];
        else
            for (i = 0; i < n; i++) y[i] = (x[i] - mean) * inv * t->scale[i];
        t->mean[r] = mean, t->inv_std[r] = inv;
    }
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

/* ------------------------------------------------------------------ instance / group norm */


/* A row's sum of f(x[i]), in double: an instance's rows are long (a U-Net's 131072 values),
   where float32 running sums would drift from numpy's pairwise ones. */
#define ROW_SUM(name, EXPR)                                                                  \
    static inline double name(const float *x, int64_t n, float mean) {                      \
        double s[8] = {0}, total = 0;                                                        \
        int64_t i = 0;                                                                       \
        (void)mean;                                                                          \
        for (; i + 8 <= n; i += 8)                                                           \
            for (int j = 0; j < 8; j++) {                                                    \
                float v = x[i + j];                                                          \
                s[j] += (double)(EXPR);                                                      \
            }                                                                                \
        for (int j = 0; j < 8; j++) total += s[j];                                           \
        for (; i < n; i++) {                                                                 \
            float v = x[i];                                                                  \
            total += (double)(EXPR);                                                         \
        }                                                                                    \
        return total;                                                                        \
    }
ROW_SUM(row_sum, v)
ROW_SUM(row_squares, (v - mean) * (v - mean))
#undef ROW_SUM

/* Each row: mean, the mean of the squared deviations from it, then per channel
   y = (x - mean) * (inv_std * scale) + bias, as normalization._normalize_rows computes it
   (InstanceNormalization: a row per instance; GroupNormalization: per group). */
EXPORT CLONES int onyx_norm_rows_f32_range(const void *p, int64_t begin, int64_t end) {
    const norm_rows *t = p;
    if (!onyx_mul(t->channels, t->spatial, &(int64_t){0})) return ONYX_INVALID; /* (checks.h) */
    int64_t K = t->channels, S = t->spatial, n = K * S;
    for (int64_t r = begin; r < end; r++) {
        const float *x = t->x + r * n;
        float *y = t->y + r * n;
        float mean = (float)(row_sum(x, n, 0.0f) / (double)n);
        float var = (float)(row_squares(x, n, mean) / (double)n);
        float inv = 1.0f / sqrtf(var + t->epsilon);
        for (int64_t k = 0; k < K; k++) {
            float a = inv * t->scale[r * K + k], b = t->bias[r * K + k];
            const float *xk = x + k * S;
            float *yk = y + k * S;
            for (int64_t i = 0; i < S; i++) yk[i] = (xk[i] - mean) * a + b;
        }
    }
    return 0;
}

/* ---------------------------------------------------- batch normalization (inference mode) */


/* y = (x - mean) * mult + bias per (image, channel) row, each step rounded as numpy's three
   passes round it (no fused multiply-add): one pass where numpy makes three and two
   temporaries. */
EXPORT CLONES NO_FMA int onyx_batch_norm_f32_range(const void *p, int64_t begin, int64_t end) {
    const batch_norm *t = p;
    if (t->channels < 1 || t->size < 0) return ONYX_INVALID; /* (checks.h) */
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r % t->channels;
        float m = t->mean[c], a = t->mult[c], b = t->bias[c];
        const float *x = t->x + r * t->size;
        float *y = t->y + r * t->size;
        for (int64_t i = 0; i < t->size; i++) y[i] = (x[i] - m) * a + b;
    }
    return 0;
}

/* batch_norm's rows, then Relu as np.clip(y, 0, inf) gives it (a NaN or -0.0 stays): the
   optimizer's BatchNormRelu (DenseNet's pre-activation after each Concat) in one pass where
   the pair made two and a temporary. */
EXPORT CLONES NO_FMA int onyx_batch_norm_relu_f32_range(const void *p, int64_t begin,
                                                        int64_t end) {
    const batch_norm *t = p;
    if (t->channels < 1 || t->size < 0) return ONYX_INVALID; /* (checks.h) */
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r % t->channels;
        float m = t->mean[c], a = t->mult[c], b = t->bias[c];
        const float *x = t->x + r * t->size;
        float *y = t->y + r * t->size;
        for (int64_t i = 0; i < t->size; i++) {
            float v = (x[i] - m) * a + b;
            y[i] = v < 0.0f ? 0.0f : v;
        }
    }
    return 0;
}
