/* One-pass elementwise kernels (part of the _kernels library; Python: elementwise.py):
 * HardSwish, erf / GELU, HardSigmoid, byte lookups, QLinearAdd / QLinearMul, QuantizeLinear
 * and DequantizeLinear, each to the numpy kernel's bits; the byte kernels also on AVX-512.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "onyx.h"
#include "activation.h"

/* HardSwish, y = x * clamp(x / 6 + 1/2, 0, 1), in one pass (numpy makes four). */
EXPORT CLONES void onyx_hardswish_f32(const float *restrict x, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = onyx_hardswish(x[i]);
}

/* y[i] = table[x[i]]: any elementwise function of a byte tensor, tabulated (the graph
   optimizer's lookup tables). An int8 x indexes by its bit pattern (table[128..255] hold the
   values for -128..-1); entries are `size` bytes (1, 2, 4 or 8). */
#define LOOKUP(T)                                                                           \
    {                                                                                        \
        const T *t = table;                                                                  \
        T *out = y;                                                                          \
        for (int64_t i = 0; i < n; i++) out[i] = t[x[i]];                                    \
        return;                                                                              \
    }
EXPORT void onyx_lookup8(const uint8_t *restrict x, const void *restrict table, int64_t size,
                         void *restrict y, int64_t n) {
    switch (size) {
    case 1: LOOKUP(uint8_t)
    case 2: LOOKUP(uint16_t)
    case 4: LOOKUP(uint32_t)
    default: LOOKUP(uint64_t)
    }
}
#undef LOOKUP

/* QLinearAdd / QLinearMul of two byte tensors of one type, in onyx's numpy order of float32
   operations to the bit (kernels/contrib.py): add, ((a - za) ka) + ((b - zb) kb); mul,
   ((a - za) (b - zb)) k; then + zy, rounded half to even and clamped. Over a run of n values
   b either advances with a (bstep 1) or stays on one value (bstep 0: a channel's scale).
   No contraction into fused multiply-adds: numpy rounds every product. */


#define QBINARY(name, T)                                                                     \
    static inline NO_FMA void name(const T *x, const T *z, int64_t bstep, int64_t n,         \
                                   const qbinary *p, uint8_t *restrict y) {                  \
        float za = p->za, zb = p->zb, ka = p->ka, kb = p->kb, zy = p->zy;                     \
        float lo = (float)p->lo, hi = (float)p->hi;                                          \
        if (p->multiply)                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                \
                float v = rintf((((float)x[i] - za) * ((float)z[i * bstep] - zb)) * ka + zy); \
                y[i] = (uint8_t)(int32_t)(v < lo ? lo : v > hi ? hi : v);                    \
            }                                                                                \
        else                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                \
                float v =                                                                    \
                    rintf((((float)x[i] - za) * ka + ((float)z[i * bstep] - zb) * kb) + zy); \
                y[i] = (uint8_t)(int32_t)(v < lo ? lo : v > hi ? hi : v);                    \
            }                                                                                \
    }
QBINARY(qbinary_u8, uint8_t)
QBINARY(qbinary_s8, int8_t)
#undef QBINARY

/* QuantizeLinear of float32 to 8 bits per tensor, as the numpy kernel (quantize.py): x / s
   rounded half to even, clamped to [lo - zp, hi - zp], plus zp. */
#define QUANTIZE(name, T)                                                                    \
    static inline void name(const float *x, float s, float lo, float hi, float zp, int64_t n, \
                            T *restrict y) {                                                 \
        for (int64_t i = 0; i < n; i++) {                                                    \
            float q = rintf(x[i] / s);                                                       \
            q = q < lo ? lo : q > hi ? hi : q;                                               \
            y[i] = (T)(int32_t)(q + zp);                                                     \
        }                                                                                    \
    }
QUANTIZE(quantize_u8, uint8_t)
QUANTIZE(quantize_s8, int8_t)
#undef QUANTIZE

EXPORT CLONES void onyx_quantize_f32(const float *x, float scale, int32_t zero_point,
                                     int is_signed, int64_t n, uint8_t *y) {
    float zp = (float)zero_point;
    if (is_signed)
        quantize_s8(x, scale, -128.0f - zp, 127.0f - zp, zp, n, (int8_t *)y);
    else
        quantize_u8(x, scale, 0.0f - zp, 255.0f - zp, zp, n, y);
}


/* erf(scale x), or GELU's x (0.5 + 0.5 erf(scale x)) with gelu, of float32 x in the
   operations and order of the numpy kernel (elementwise.erf32: u clipped to +-4, Horner's
   rule for P and Q, u P / Q clipped to +-1, each a float32 operation and none fused), so the
   same bits in one pass where numpy makes 25. */
static inline NO_FMA float erf_of(float v, const erf_task *e) {
    float u = v * e->scale;
    u = u < -4.0f ? -4.0f : (u > 4.0f ? 4.0f : u); /* (NaN stays NaN) */
    float t = u * u, p = t * e->p[6], q = t * e->q[5];
    for (int k = 5; k >= 1; k--) p = (p + e->p[k]) * t;
    for (int k = 4; k >= 1; k--) q = (q + e->q[k]) * t;
    p = p + e->p[0];
    q = q + e->q[0];
    float s = p / q * u;
    s = s < -1.0f ? -1.0f : (s > 1.0f ? 1.0f : s);
    return e->gelu ? v * (s * 0.5f + 0.5f) : s;
}

/* 16 values at a time through a local block: y may be x. */
EXPORT CLONES NO_FMA void onyx_erf_f32(const float *x, float *y, int64_t n, const erf_task *e) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float r[16];
        for (int j = 0; j < 16; j++) r[j] = erf_of(x[i + j], e);
        for (int j = 0; j < 16; j++) y[i + j] = r[j];
    }
    for (; i < n; i++) y[i] = erf_of(x[i], e);
}

/* BiasGelu's rows: x + bias (one float32 addition, as numpy's) then erf_of, the same bits as
   the add and the erf pass one after the other, in one pass. */
static CLONES NO_FMA void bias_erf_rows(const erf_task *t, int64_t begin, int64_t end) {
    int64_t w = t->width;
    for (int64_t r = begin; r < end; r++) {
        const float *x = t->x + r * w;
        float *y = t->y + r * w;
        int64_t i = 0;
        for (; i + 16 <= w; i += 16) {
            float r16[16];
            for (int j = 0; j < 16; j++) r16[j] = erf_of(x[i + j] + t->bias[i + j], t);
            for (int j = 0; j < 16; j++) y[i + j] = r16[j];
        }
        for (; i < w; i++) y[i] = erf_of(x[i] + t->bias[i], t);
    }
}

EXPORT int onyx_erf_range(const void *p, int64_t begin, int64_t end) {
    const erf_task *t = p;
    if (t->bias) { /* (the range counts rows) */
        if (t->width < 0) return ONYX_INVALID;
        bias_erf_rows(t, begin, end);
        return 0;
    }
    onyx_erf_f32(t->x + begin, t->y + begin, end - begin, t);
    return 0;
}


/* HardSigmoid, y = clamp(x * alpha + beta, 0, 1), each step a float32 operation and none fused
   (the numpy kernel's bits; NaN stays NaN), in one pass where numpy makes three. */
EXPORT CLONES NO_FMA int onyx_hard_sigmoid_range(const void *p, int64_t begin, int64_t end) {
    const hard_sigmoid_task *t = p;
    const float *x = t->x;
    float *y = t->y, a = t->alpha, b = t->beta;
    for (int64_t i = begin; i < end; i++) y[i] = onyx_hard_sigmoid(x[i], a, b);
    return 0;
}

/* x * HardSigmoid(x) (HardSigmoidMul: PyTorch's exported hardswish), the two nodes' steps
   rounded as they round, so the unfused graph's bits, in one pass where there were two. */
EXPORT CLONES NO_FMA int onyx_hard_sigmoid_mul_range(const void *p, int64_t begin, int64_t end) {
    const hard_sigmoid_task *t = p;
    const float *x = t->x;
    float *y = t->y, a = t->alpha, b = t->beta;
    for (int64_t i = begin; i < end; i++) y[i] = x[i] * onyx_hard_sigmoid(x[i], a, b);
    return 0;
}

EXPORT CLONES NO_FMA void onyx_qbinary(const void *a, const void *b, int64_t bstep, int64_t n,
                                       const qbinary *p, uint8_t *y) {
    if (p->is_signed)
        qbinary_s8(a, b, bstep, n, p, y);
    else
        qbinary_u8(a, b, bstep, n, p, y);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* QLinearAdd / QLinearMul and QuantizeLinear 16 values per step, in the operations and order
   of the portable loops above (the same bits; max(lo, v) keeps a NaN as their comparisons
   do). The compiler vectorizes those with 8-lane vectors and a slow rounding. */
#define BW __attribute__((target("avx512f,avx512bw,avx512vl")))

static BW inline __m512 bytes_ps(const void *p, int is_signed, __mmask16 k) {
    __m128i b = _mm_maskz_loadu_epi8(k, p);
    return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}

/* clamp(v, lo, hi) + zp (v integral), truncated to int32 as the portable casts, to bytes */
static BW inline void store_bytes(void *p, __m512 v, __m512 lo, __m512 hi, __m512 zp,
                                  __mmask16 k) {
    v = _mm512_add_ps(_mm512_min_ps(hi, _mm512_max_ps(lo, v)), zp);
    _mm_mask_storeu_epi8(p, k, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

static BW inline __mmask16 head16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

#define RINT(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static BW void qbinary_avx512(const void *a, const void *b, int64_t bstep, int64_t n,
                              const qbinary *p, uint8_t *y) {
    const uint8_t *x = a, *z = b;
    int s = p->is_signed;
    __m512 za = _mm512_set1_ps(p->za), zb = _mm512_set1_ps(p->zb), ka = _mm512_set1_ps(p->ka);
    __m512 kb = _mm512_set1_ps(p->kb), zy = _mm512_set1_ps(p->zy), zero = _mm512_setzero_ps();
    __m512 lo = _mm512_set1_ps((float)p->lo), hi = _mm512_set1_ps((float)p->hi);
    __m512 one = _mm512_sub_ps(_mm512_set1_ps(s ? (float)*(const int8_t *)z : (float)*z), zb);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = head16(n - i);
        __m512 va = _mm512_sub_ps(bytes_ps(x + i, s, k), za);
        __m512 vb = bstep ? _mm512_sub_ps(bytes_ps(z + i, s, k), zb) : one;
        __m512 v = p->multiply ? _mm512_mul_ps(_mm512_mul_ps(va, vb), ka)
                               : _mm512_add_ps(_mm512_mul_ps(va, ka), _mm512_mul_ps(vb, kb));
        store_bytes(y + i, RINT(_mm512_add_ps(v, zy)), lo, hi, zero, k);
    }
}

static BW void quantize_avx512(const float *x, float scale, int32_t zero_point, int is_signed,
                               int64_t n, uint8_t *y) {
    float zp = (float)zero_point, lo = is_signed ? -128.0f : 0.0f;
    __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
    __m512 l = _mm512_set1_ps(lo - zp), h = _mm512_set1_ps(lo + 255.0f - zp);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = head16(n - i);
        __m512 q = RINT(_mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), s));
        store_bytes(y + i, q, l, h, z, k);
    }
}
#undef RINT

/* onyx_lookup8 for one-byte entries, 64 bytes per step: the 256-byte table sits in four
   registers, two vpermi2b pick from each half by the low 7 bits and the top bit chooses. */
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
EXPORT VBMI void onyx_lookup8_vbmi(const uint8_t *restrict x, const void *restrict table,
                                   int64_t size, void *restrict y, int64_t n) {
    if (size != 1) {
        onyx_lookup8(x, table, size, y, n);
        return;
    }
    const uint8_t *t = table;
    uint8_t *out = y;
    __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 k = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        __m512i v = _mm512_maskz_loadu_epi8(k, x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
        _mm512_mask_storeu_epi8(out + i, k, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
    }
}
#endif

/* Per-channel byte lookups (ai.onyx ChannelTableLookup): x as (outer, channels, inner),
   channel c's 256 entries at table + c * 256 * size (bit-pattern order); fn is onyx_lookup8
   or its VBMI form, run over each channel's contiguous run. */
/* Channels on the last axis (inner 1: a bias per column of a GEMM's result): a lookup per
   byte, each in its own channel's run (a call of fn per byte cost 15x this). */
#define CHANNEL_ROWS(T)                                                                      \
    {                                                                                        \
        const T *t = table;                                                                  \
        T *out = y;                                                                          \
        for (int64_t o = 0; o < outer; o++, x += channels, out += channels)                  \
            for (int64_t c = 0; c < channels; c++) out[c] = t[c * 256 + x[c]];               \
        return;                                                                              \
    }

EXPORT void onyx_lookup8_channels(lookup_fn fn, const uint8_t *x, const void *table, int64_t size,
                                  void *y, int64_t outer, int64_t channels, int64_t inner) {
    if (inner == 1) switch (size) {
        case 1: CHANNEL_ROWS(uint8_t)
        case 2: CHANNEL_ROWS(uint16_t)
        case 4: CHANNEL_ROWS(uint32_t)
        default: CHANNEL_ROWS(uint64_t)
        }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            int64_t at = (o * channels + c) * inner;
            fn(x + at, (const char *)table + c * 256 * size, size, (char *)y + at * size, inner);
        }
}

EXPORT int onyx_lookup_range(const void *p, int64_t begin, int64_t end) {
    const lookup_task *t = p;
    if (t->size != 1 && t->size != 2 && t->size != 4 && t->size != 8) return ONYX_INVALID; /* (checks.h) */
    t->fn(t->x + begin, t->table, t->size, t->y + begin * t->size, end - begin);
    return 0;
}

/* b broadcast over a: a seen as (outer, mid, inner), b as (outer, 1, inner) with its outer
   index cycling over bn / inner (b as large as a: mid 1, inner n; a bias along the last
   axis: inner its length; a mask [B, H, 1, S] over attention scores [B, H, S, S]: mid S; a
   channel's scale [C, 1, 1] over [N, C, H, W]: inner 1, mid H * W). */

/* Whether the AVX-512 elementwise byte kernels run here. */
static int byte_vectors(void) { return (onyx_isa() & ONYX_ISA_AVX512BW) != 0; }

typedef void (*qbinary_fn)(const void *, const void *, int64_t, int64_t, const qbinary *,
                           uint8_t *);

EXPORT int onyx_qbinary_range(const void *p, int64_t begin, int64_t end) {
    const qbinary_task *t = p;
    qbinary_fn run = onyx_qbinary;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (byte_vectors()) run = qbinary_avx512;
#endif
    /* runs along one row of b (inner > 1), or over one value of b (inner 1) */
    int64_t step = t->inner > 1 ? t->inner : t->mid;
    for (int64_t r = begin; r < end;) {
        int64_t stop = (r / step + 1) * step;
        stop = stop < end ? stop : end;
        int64_t row = r / t->inner, at = (row / t->mid * t->inner) % t->bn + r % t->inner;
        run(t->a + r, t->b + at, t->inner > 1, stop - r, t->p, t->y + r);
        r = stop;
    }
    return 0;
}


EXPORT int onyx_quantize_range(const void *p, int64_t begin, int64_t end) {
    const quantize_task *t = p;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (byte_vectors()) {
        quantize_avx512(t->x + begin, t->scale, t->zero_point, t->is_signed, end - begin,
                        t->y + begin);
        return 0;
    }
#endif
    onyx_quantize_f32(t->x + begin, t->scale, t->zero_point, t->is_signed, end - begin,
                      t->y + begin);
    return 0;
}

/* DequantizeLinear of 8-bit x per tensor to float32 in one pass: (x - zero point), exact in
   float32, times the scale, one rounding (the numpy kernel's three passes, to the bit). The
   task is quantize_task's, x and y in the other roles. */

EXPORT CLONES int onyx_dequantize_range(const void *p, int64_t begin, int64_t end) {
    const dequantize_task *t = p;
    float scale = t->scale, *y = t->y;
    int32_t zp = t->zero_point;
    if (t->is_signed) {
        const int8_t *x = t->x;
        for (int64_t i = begin; i < end; i++) y[i] = (float)(x[i] - zp) * scale;
    } else {
        const uint8_t *x = t->x;
        for (int64_t i = begin; i < end; i++) y[i] = (float)(x[i] - zp) * scale;
    }
    return 0;
}


EXPORT int onyx_hardswish_range(const void *p, int64_t begin, int64_t end) {
    const unary_task *t = p;
    onyx_hardswish_f32(t->x + begin, t->y + begin, end - begin);
    return 0;
}
