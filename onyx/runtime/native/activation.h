/* The activations the kernels apply as they store (conv_f32.c, gemv.c, depthwise.c) or as
   whole passes (elementwise.c): each written once, as one value (portable) and as 16 lanes
   (AVX-512, in the same operations: the same bits). Codes as native.CONV_ACTIVATIONS. */
#ifndef ONYX_ACTIVATION_H
#define ONYX_ACTIVATION_H

#include "onyx.h"

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_LEAKY = 2, ACT_CLIP = 3, ACT_HARDSWISH = 4, ACT_HARDSIGMOID = 5,
       ACT_SIGMOID = 6, ACT_TANH = 7 };

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
/* e^x in 16 lanes (a degree-6 polynomial after range reduction; used by rnn.c and
   attention.c, so their sigmoid, tanh and softmax agree bit for bit). */
static inline __attribute__((always_inline, target("avx512f"))) __m512 onyx_exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n ln 2, ln 2 in two parts so that n ln 2 is exact in the first */
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n); /* p 2^n, inf or 0 past the range */
}

/* The logistic sigmoid and tanh in 16 lanes (rnn.c's gates; FusedConv's Sigmoid and Tanh);
   tanh is Cephes-style: a polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) beyond. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 onyx_sigmoid512(__m512 x) { /* 1 / (1 + e^-x) */
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 y = _mm512_div_ps(one, _mm512_add_ps(one, onyx_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x); /* NaN stays */
}

static inline __attribute__((always_inline, target("avx512f"))) __m512 onyx_tanh512(__m512 x) {
    __m512 a = _mm512_abs_ps(x), z = _mm512_mul_ps(x, x), one = _mm512_set1_ps(1.0f);
    __m512 p = _mm512_set1_ps(-5.70498872745e-3f); /* |x| < 0.625: x + x^3 P(x^2) */
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __m512 e = onyx_exp512(_mm512_add_ps(a, a)); /* beyond: 1 - 2 / (e^2|x| + 1), x's sign */
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    big = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(big),
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))));
    __m512 y = _mm512_mask_mov_ps(big, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ),
                                  small);
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x); /* NaN stays */
}

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
    } else if (act == ACT_SIGMOID) {
        v = onyx_sigmoid512(v);
    } else if (act == ACT_TANH) {
        v = onyx_tanh512(v);
    }
    return v;
}

#endif
