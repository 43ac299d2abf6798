/* onyx's float32 GEMV on AVX-512 (part of the _kernels library): the products of a few rows
 * of x with a weight matrix, y = act(alpha * x W' + beta * c + z), W' being W (K, N) or the
 * transpose of W (N, K).
 *
 * A classifier's Gemm or an SE block's 1x1 conv at batch 1 is one row against megabytes of
 * weights: the time is reading them. numpy's BLAS reads them on one thread where a session
 * keeps BLAS to one (session._pool_heavy), and a (1, K) @ (K, N) product in sgemm was 3-4x
 * slower than onnxruntime's. Here the columns (or rows) of W are split between the pool's
 * threads, and the epilogue (Gemm's C, FusedConv's residual and activation) is applied in
 * registers.
 *
 * Rows of x are taken 4 (or 2, or 1) at a time; with W (N, K) (a Gemm's transB, a conv's
 * weights), 4 rows of W at a time against them, up to 16 dot products in registers, each
 * reduced at the end; with W (K, N), 64 columns at a time, a broadcast of x[m][k] times
 * W[k][n .. n + 64].
 */
#include <stdint.h>

#include "onyx.h"


/* Columns of y per unit of the work split (cuts are in these units). */
#define GV_BLOCK 64
/* Rows of W (K, N) ahead of the one read that are prefetched (a strided read). */
#define GV_AHEAD 8

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#include "activation.h"

static AVX512 inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* y[m][n .. n + 16) (the lanes in mask) from their sums: alpha, c, z, the activation. */
static AVX512 inline void store(const gemv_f32 *t, int64_t m, int64_t n, __m512 v,
                                __mmask16 mask) {
    if (t->alpha != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(t->alpha));
    if (t->c) {
        __m512 c = _mm512_maskz_loadu_ps(mask, t->c + n);
        if (t->beta != 1.0f) c = _mm512_mul_ps(c, _mm512_set1_ps(t->beta));
        v = _mm512_add_ps(v, c);
    }
    if (t->z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, t->z + m * t->N + n));
    v = onyx_activate(v, t->act, t->act_alpha, t->act_beta);
    _mm512_mask_storeu_ps(t->y + m * t->N + n, mask, v);
}

#define INLINE static inline __attribute__((always_inline, target("avx512f")))

/* W (N, K): rows m0 .. m0 + MR of y against rows n0 .. n1 of W, 4 at a time (rows past the
   end repeat the last: computed, not stored). MR is a constant where this is inlined, so that
   the 4 * MR sums stay in registers. */
INLINE void rows_by_dots(const gemv_f32 *t, int64_t m0, int64_t n0, int64_t n1, const int MR) {
    int64_t K = t->K;
    const float *x[4];
    for (int i = 0; i < MR; i++) x[i] = t->x + (m0 + i) * K;
    for (int64_t n = n0; n < n1; n += 4) {
        int64_t nr = n1 - n < 4 ? n1 - n : 4;
        const float *w[4];
        for (int j = 0; j < 4; j++) w[j] = t->w + (n + (j < nr ? j : nr - 1)) * K;
        __m512 acc[4][4];
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 16) {
            __mmask16 mask = first_lanes(K - k);
            __m512 wv[4];
            for (int j = 0; j < 4; j++) {
                wv[j] = _mm512_maskz_loadu_ps(mask, w[j] + k);
                /* (the next 4 rows; a prefetch past the end does not fault) */
                _mm_prefetch((const char *)(w[j] + 4 * K + k), _MM_HINT_T0);
            }
            for (int i = 0; i < MR; i++) {
                __m512 xv = _mm512_maskz_loadu_ps(mask, x[i] + k);
                for (int j = 0; j < 4; j++) acc[i][j] = _mm512_fmadd_ps(wv[j], xv, acc[i][j]);
            }
        }
        for (int i = 0; i < MR; i++) {
            __m128 sums = _mm_setr_ps(
                _mm512_reduce_add_ps(acc[i][0]), _mm512_reduce_add_ps(acc[i][1]),
                _mm512_reduce_add_ps(acc[i][2]), _mm512_reduce_add_ps(acc[i][3]));
            store(t, m0 + i, n, _mm512_castps128_ps512(sums), first_lanes(nr));
        }
    }
}

/* W (K, N): rows m0 .. m0 + MR of y, columns n0 .. n1, 64 at a time. */
INLINE void rows_by_columns(const gemv_f32 *t, int64_t m0, int64_t n0, int64_t n1,
                            const int MR) {
    int64_t K = t->K, N = t->N;
    const float *x[4];
    for (int i = 0; i < MR; i++) x[i] = t->x + (m0 + i) * K;
    for (int64_t n = n0; n < n1; n += 64) {
        __mmask16 mask[4];
        for (int v = 0; v < 4; v++) mask[v] = first_lanes(n1 - n - 16 * v);
        __m512 acc[4][4];
        for (int i = 0; i < MR; i++)
            for (int v = 0; v < 4; v++) acc[i][v] = _mm512_setzero_ps();
        const float *w = t->w + n;
        for (int64_t k = 0; k < K; k++, w += N) {
            __m512 wv[4];
            for (int v = 0; v < 4; v++) {
                wv[v] = _mm512_maskz_loadu_ps(mask[v], w + 16 * v);
                _mm_prefetch((const char *)(w + GV_AHEAD * N + 16 * v), _MM_HINT_T0);
            }
            for (int i = 0; i < MR; i++) {
                __m512 xk = _mm512_set1_ps(x[i][k]);
                for (int v = 0; v < 4; v++) acc[i][v] = _mm512_fmadd_ps(xk, wv[v], acc[i][v]);
            }
        }
        for (int i = 0; i < MR; i++)
            for (int v = 0; v < 4; v++)
                if (mask[v]) store(t, m0 + i, n + 16 * v, acc[i][v], mask[v]);
    }
}

/* Rows m0 .. m0 + MR of y, columns n0 .. n1. */
static AVX512 void rows(const gemv_f32 *t, int64_t m0, int64_t n0, int64_t n1, const int MR) {
    if (t->trans) {
        if (MR == 4) rows_by_dots(t, m0, n0, n1, 4);
        else if (MR == 2) rows_by_dots(t, m0, n0, n1, 2);
        else rows_by_dots(t, m0, n0, n1, 1);
    } else {
        if (MR == 4) rows_by_columns(t, m0, n0, n1, 4);
        else if (MR == 2) rows_by_columns(t, m0, n0, n1, 2);
        else rows_by_columns(t, m0, n0, n1, 1);
    }
}

/* Columns begin * GV_BLOCK .. end * GV_BLOCK of y, every row (a part of a pool job). */
EXPORT AVX512 int onyx_gemv_f32_range(const void *p, int64_t begin, int64_t end) {
    const gemv_f32 *t = p;
    if (t->M < 0 || t->K < 0 || t->N < 0 || (t->trans != 0 && t->trans != 1)) return ONYX_INVALID; /* (checks.h) */
    int64_t n0 = begin * GV_BLOCK, n1 = end * GV_BLOCK < t->N ? end * GV_BLOCK : t->N;
    int64_t m0 = 0;
    for (; m0 + 4 <= t->M; m0 += 4) rows(t, m0, n0, n1, 4);
    for (; m0 + 2 <= t->M; m0 += 2) rows(t, m0, n0, n1, 2);
    if (m0 < t->M) rows(t, m0, n0, n1, 1);
    return 0;
}
#define HAVE_GEMV_F32 1
#endif

/* Columns per unit of the work split, or 0 where the kernel is not built (no AVX-512). */
EXPORT int64_t onyx_gemv_f32_block(void) {
#ifdef HAVE_GEMV_F32
    return GV_BLOCK;
#else
    return 0;
#endif
}
