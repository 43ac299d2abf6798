/* Bilinear Resize of float32 planes on AVX-512 (part of the _kernels library).
 *
 * The formula is onnxruntime's, as kernels/resample.py's numpy path computes it (see there):
 * per axis, taps lo / hi and weights w_lo / w_hi (Python makes the tables), and
 *     y = (wy_lo wx_lo) X[lo, lo] + (wy_lo wx_hi) X[lo, hi] + (wy_hi wx_lo) X[hi, lo]
 *         + (wy_hi wx_hi) X[hi, hi]
 * each weight product rounded to float32, the terms summed left to right, no fused
 * multiply-add: the same bits as the numpy path. Per plane, the columns X[:, lo] and X[:, hi]
 * of every output column are gathered first (16 per instruction), then each output row is
 * four vector products of whole rows of them, where numpy makes ten passes over the
 * output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

static AVX512 inline __mmask16 first(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/* cols[h * OW + j] = plane[h * W + taps[j]] for every input row h. */
static AVX512 void gather_columns(const float *plane, const bilinear *t, const int32_t *taps,
                                  float *cols) {
    for (int64_t j = 0; j < t->OW; j += 16) {
        __mmask16 m = first(t->OW - j);
        __m512i at = _mm512_maskz_loadu_epi32(m, taps + j);
        for (int64_t h = 0; h < t->H; h++)
            _mm512_mask_storeu_ps(cols + h * t->OW + j, m,
                                  _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at,
                                                           plane + h * t->W, 4));
    }
}

/* Planes p0 <= p < p1; -1: out of memory. */
EXPORT AVX512 int onyx_bilinear_f32_range(const void *p, int64_t p0, int64_t p1) {
    const bilinear *t = p;
    int64_t sizes[4] = {t->H, t->W, t->OH, t->OW}, columns;
    if (!onyx_in(sizes, 4, 0, ONYX_MAX_EXTENT) || !onyx_mul(2 * t->H, t->OW, &columns))
        return ONYX_INVALID;
    float *lo = malloc((size_t)(2 * t->H * t->OW) * sizeof(float)), *hi = lo + t->H * t->OW;
    if (!lo) return ONYX_NOMEM;
    for (int64_t n = p0; n < p1; n++) {
        const float *plane = t->x + n * t->H * t->W;
        gather_columns(plane, t, t->x_lo, lo);
        gather_columns(plane, t, t->x_hi, hi);
        for (int64_t i = 0; i < t->OH; i++) {
            const float *a = lo + t->y_lo[i] * t->OW, *b = hi + t->y_lo[i] * t->OW;
            const float *c = lo + t->y_hi[i] * t->OW, *d = hi + t->y_hi[i] * t->OW;
            __m512 ylo = _mm512_set1_ps(t->wy_lo[i]), yhi = _mm512_set1_ps(t->wy_hi[i]);
            float *out = t->y + (n * t->OH + i) * t->OW;
            for (int64_t j = 0; j < t->OW; j += 16) {
                __mmask16 m = first(t->OW - j);
                __m512 xlo = _mm512_maskz_loadu_ps(m, t->wx_lo + j);
                __m512 xhi = _mm512_maskz_loadu_ps(m, t->wx_hi + j);
                __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_mul_ps(ylo, xlo));
                v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, b + j),
                                                   _mm512_mul_ps(ylo, xhi)));
                v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, c + j),
                                                   _mm512_mul_ps(yhi, xlo)));
                v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, d + j),
                                                   _mm512_mul_ps(yhi, xhi)));
                _mm512_mask_storeu_ps(out + j, m, v);
            }
        }
    }
    free(lo);
    return 0;
}

/* Nearest upsampling by whole factors of 4-byte planes (n, H, W) -> (n, H kh, W kw): each
   input row widened once (kw = 2: an interleaving permute per 16 values), then copied to its
   kh output rows. */

EXPORT AVX512 int onyx_repeat2d_u32_range(const void *p, int64_t p0, int64_t p1) {
    const repeat2d *t = p;
    if (t->H < 0 || t->W < 0 || t->kh < 1 || t->kw < 1) return ONYX_INVALID; /* (checks.h) */
    int64_t OW = t->W * t->kw;
    __m512i lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (int64_t n = p0; n < p1; n++)
        for (int64_t i = 0; i < t->H; i++) {
            const uint32_t *src = t->x + (n * t->H + i) * t->W;
            uint32_t *dst = t->y + (n * t->H + i) * t->kh * OW;
            int64_t j = 0;
            if (t->kw == 2)
                for (; j + 16 <= t->W; j += 16) {
                    __m512i v = _mm512_loadu_si512((const void *)(src + j));
                    _mm512_storeu_si512((void *)(dst + 2 * j), _mm512_permutexvar_epi32(lo, v));
                    _mm512_storeu_si512((void *)(dst + 2 * j + 16), _mm512_permutexvar_epi32(hi, v));
                }
            for (; j < t->W; j++)
                for (int64_t b = 0; b < t->kw; b++) dst[j * t->kw + b] = src[j];
            for (int64_t a = 1; a < t->kh; a++) memcpy(dst + a * OW, dst, (size_t)OW * 4);
        }
    return 0;
}
#endif

