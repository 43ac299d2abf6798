/* The activations the kernels apply as they store (conv_f32.c, gemv.c, depthwise.c) or as
   whole passes (elementwise.c): each written once, as one value (portable) and as 16 lanes
   (AVX-512, in the same operations: the same bits). Codes as native.CONV_ACTIVATIONS. */
#ifndef ONYX_ACTIVATION_H
#define ONYX_ACTIVATION_H

#include "onyx.h"

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_LEAKY = 2, ACT_CLIP = 3, ACT_HARDSWISH = 4, ACT_HARDSIGMOID = 5 };

/* HardSwish: v * clip(v / 6 + 1/2, 0, 1). */
static inline float onyx_hardswish(float v) {
    float t = v / 6.0f + 0.5f;
    t = t < 0.0f ? 0.0f : t;
    t = t > 1.0f ? 1.0f : t;
    return v * t;
}

/* HardSigmoid: clip(v * alpha + beta, 0, 1), no fused multiply-add (numpy's two passes),
   a NaN stays a NaN (numpy's clip). */
static inline NO_FMA float onyx_hard_sigmoid(float v, float alpha, float beta) {
    float u = v * alpha + beta;
    return u < 0.0f ? 0.0f : (u > 1.0f ? 1.0f : u);
}

#endif

/* The 16-lane forms, where immintrin.h is included (an x86-64 section). */
#if (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H)) && !defined(ONYX_ACTIVATION_VECTORS)
#define ONYX_ACTIVATION_VECTORS
/* alpha: LeakyRelu's slope, Clip's min or HardSigmoid's alpha; beta: Clip's max or
   HardSigmoid's beta. Ordered comparisons keep a NaN a NaN, as numpy's clip does. */
static inline __attribute__((always_inline, target("avx512f"))) __m512
onyx_activate(__m512 v, int act, float alpha, float beta) {
    __m512 zero = _mm512_setzero_ps();
    if (act == ACT_RELU) {
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
    } else if (act == ACT_LEAKY) {
        v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(alpha));
    } else if (act == ACT_CLIP) {
        __m512 lo = _mm512_set1_ps(alpha), hi = _mm512_set1_ps(beta);
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
    } else if (act == ACT_HARDSWISH) {
        __m512 one = _mm512_set1_ps(1.0f);
        __m512 s = _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
        s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, zero, _CMP_LT_OQ), zero);
        s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, one, _CMP_GT_OQ), one);
        v = _mm512_mul_ps(v, s);
    } else if (act == ACT_HARDSIGMOID) {
        v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(alpha)), _mm512_set1_ps(beta));
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_set1_ps(1.0f), _CMP_GT_OQ),
                               _mm512_set1_ps(1.0f));
    }
    return v;
}

#endif
