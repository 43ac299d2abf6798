/* Normalizations over the rows of a tensor (part of the _kernels library): layer
 * normalization over the last axis, instance / group normalization (statistics per row of
 * (rows, channels, spatial), sums in double, a scale and bias per channel), and inference
 * BatchNormalization (a per-channel affine map).
 *
 * A transformer normalizes 128 rows of 256 values a dozen times. numpy walks such short rows
 * with a cost per row (and the layer norm with several passes); here a row is one pass.
 */
#include <math.h>
#include <stdint.h>

#include "onyx.h"

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
