/* A float32 GEMM against a constant, packed B (part of the _kernels library): a transformer
 * encoder's projections, Y [M, N] = A [M, K] B [K, N], M of tens to thousands of rows.
 *
 * B is packed once per session into panels of 32 columns, k-major ([panels][K][32], zeros past
 * N), so that a panel's row k is two vectors. The register tile is 8 rows of A by one panel:
 * 16 accumulators, each k two vector loads of B and eight broadcasts of A (memory operands of
 * the multiply-adds), the sums in k order with fused multiply-adds (BLAS's order within a
 * block; 1e-7 relative apart from numpy's). A part of the work is a run of panels, every row
 * of A against each (the panel's K x 32 floats stay in L2 while the rows stream by).
 *
 * OpenBLAS's float GEMM on the development VM's AMD CPU runs its AVX2 kernels; this one is
 * AVX-512 (the portable loop elsewhere).
 *
 * An optional epilogue on each finished tile: a per-column bias added after the sums (numpy's
 * MatMul then Add, in the same order) and a ReLU, so that MatMul + Add [+ Relu] and Gemm's
 * bias are one pass over Y.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "onyx.h"

#define SG_NR 32 /* columns per panel: two 16-lane vectors */
#define SG_MR 8  /* rows of A per register tile */

static int sgemm_ok(const sgemm_task *t) {
    int64_t cells;
    if (t->M < 0 || t->K < 1 || t->N < 1 || t->lda < t->K || t->ldy < t->N) return 0;
    if (!onyx_mul(t->M, t->lda, &cells) || !onyx_mul(t->M, t->ldy, &cells)) return 0;
    if (!onyx_mul((t->N + SG_NR - 1) / SG_NR * SG_NR, t->K, &cells)) return 0;
    return t->a && t->packed && t->y;
}

/* Panels begin .. end, portable: the same sums (k order) per output. */
static void sgemm_portable(const sgemm_task *t, int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p++) {
        const float *b = t->packed + p * t->K * SG_NR;
        int64_t n0 = p * SG_NR, cols = t->N - n0 < SG_NR ? t->N - n0 : SG_NR;
        for (int64_t m = 0; m < t->M; m++) {
            float acc[SG_NR] = {0};
            const float *a = t->a + m * t->lda;
            for (int64_t k = 0; k < t->K; k++)
                for (int j = 0; j < SG_NR; j++) acc[j] = fmaf(a[k], b[k * SG_NR + j], acc[j]);
            float *y = t->y + m * t->ldy + n0;
            for (int64_t j = 0; j < cols; j++) {
                float v = t->bias ? acc[j] + t->bias[n0 + j] : acc[j];
                y[j] = t->relu && v < 0.0f ? 0.0f : v; /* (a NaN stays NaN, as Relu) */
            }
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_SGEMM_AVX512 1

/* R (<= SG_MR) rows from m0 against panel b (R a constant where inlined). */
static inline __attribute__((always_inline, target("avx512f"))) void
tile(const sgemm_task *t, const float *b, int64_t m0, const int R, int64_t n0, __mmask16 m_lo,
     __mmask16 m_hi) {
    __m512 acc[SG_MR][2];
    const float *a[SG_MR];
    for (int i = 0; i < R; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        a[i] = t->a + (m0 + i) * t->lda;
    }
    for (int64_t k = 0; k < t->K; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * SG_NR), b1 = _mm512_loadu_ps(b + k * SG_NR + 16);
        for (int i = 0; i < R; i++) {
            __m512 v = _mm512_set1_ps(a[i][k]);
            acc[i][0] = _mm512_fmadd_ps(v, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(v, b1, acc[i][1]);
        }
    }
    if (t->bias) {
        __m512 c0 = _mm512_maskz_loadu_ps(m_lo, t->bias + n0);
        __m512 c1 = _mm512_maskz_loadu_ps(m_hi, t->bias + n0 + 16);
        for (int i = 0; i < R; i++) {
            acc[i][0] = _mm512_add_ps(acc[i][0], c0);
            acc[i][1] = _mm512_add_ps(acc[i][1], c1);
        }
    }
    if (t->relu) {
        __m512 zero = _mm512_setzero_ps();
        for (int i = 0; i < R; i++) { /* (max_ps returns its second operand for a NaN: the
                                          sum, so that a NaN stays NaN, as Relu) */
            acc[i][0] = _mm512_max_ps(zero, acc[i][0]);
            acc[i][1] = _mm512_max_ps(zero, acc[i][1]);
        }
    }
    for (int i = 0; i < R; i++) {
        float *y = t->y + (m0 + i) * t->ldy + n0;
        _mm512_mask_storeu_ps(y, m_lo, acc[i][0]);
        _mm512_mask_storeu_ps(y + 16, m_hi, acc[i][1]);
    }
}

static __attribute__((target("avx512f"))) void sgemm_avx512(const sgemm_task *t, int64_t begin,
                                                            int64_t end) {
    for (int64_t p = begin; p < end; p++) {
        const float *b = t->packed + p * t->K * SG_NR;
        int64_t n0 = p * SG_NR, cols = t->N - n0 < SG_NR ? t->N - n0 : SG_NR;
        __mmask16 m_lo = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
        __mmask16 m_hi = cols >= 32 ? 0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
        int64_t m0 = 0;
        for (; m0 + SG_MR <= t->M; m0 += SG_MR) tile(t, b, m0, SG_MR, n0, m_lo, m_hi);
        switch (t->M - m0) {
        case 7: tile(t, b, m0, 7, n0, m_lo, m_hi); break;
        case 6: tile(t, b, m0, 6, n0, m_lo, m_hi); break;
        case 5: tile(t, b, m0, 5, n0, m_lo, m_hi); break;
        case 4: tile(t, b, m0, 4, n0, m_lo, m_hi); break;
        case 3: tile(t, b, m0, 3, n0, m_lo, m_hi); break;
        case 2: tile(t, b, m0, 2, n0, m_lo, m_hi); break;
        case 1: tile(t, b, m0, 1, n0, m_lo, m_hi); break;
        default: break;
        }
    }
}
#endif

/* Panels begin .. end of the output. */
EXPORT int onyx_sgemm_range(const void *p, int64_t begin, int64_t end) {
    const sgemm_task *t = p;
    int64_t panels = (t->N + SG_NR - 1) / SG_NR;
    if (!sgemm_ok(t) || begin < 0 || end > panels || begin > end) return ONYX_INVALID;
#ifdef HAVE_SGEMM_AVX512
    if (onyx_isa() & ONYX_ISA_AVX512) {
        sgemm_avx512(t, begin, end);
        return 0;
    }
#endif
    sgemm_portable(t, begin, end);
    return 0;
}

/* Columns per panel of the packed B. */
EXPORT int64_t onyx_sgemm_panel(void) { return SG_NR; }
