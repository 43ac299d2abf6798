/* LSTM and GRU on AVX-512 (part of the _kernels library): the recurrence of the common LSTM
 * (sigmoid, tanh, tanh; no peepholes, no clip, no coupled input-forget gate, every sequence
 * whole) and of PyTorch's GRU (the same, linear_before_reset) in C, a step per pool job.
 *
 * kernels/rnn.py computes the input projections of every step up front, one GEMM on the pool
 * (a 1x1 conv, conv_f32.c), and hands them over as that GEMM's output, xs [dirs, gates, H,
 * steps, batch] (a projection's 16 columns are gathered, P = steps x batch apart). BLAS ran
 * it before: OpenBLAS's idle threads spin for milliseconds after a call, and the recurrence
 * that followed ran at half speed on the core they took. For a few steps at batch 1 (steps x
 * batch <= 8) it hands over the inputs instead and the recurrence projects them first (the
 * GEMM's tiles would idle, and a second call from Python costs more than the product).
 *
 * The recurrent weights come in blocks of 16 output columns, each block's gates one contiguous
 * run that a part streams through. Each step, parts of 16 output columns (per direction)
 * compute their columns of all gates, h_prev . RT (4 batch rows x 4 gates = 16 accumulators,
 * a broadcast of h per row), add the projections and update the cell for those columns:
 *     i, o, f = sigmoid(.), c~ = tanh(.), C = f C_prev + i c~, H = o tanh(C).
 * A reverse direction's step k is time step steps - 1 - k; every H (and C) is stored at its
 * time step. numpy needs a dozen calls a step around a small GEMM that BLAS repacks.
 *
 * exp and tanh are Cephes-style (public-domain coefficients): range reduction and a degree-5
 * polynomial for exp (about 1 ulp), an odd polynomial for |x| < 0.625 and 1 - 2 / (e^2|x| + 1)
 * beyond for tanh; onnxruntime's own rational approximations are no closer.
 */
#include <stdint.h>
#include <stdlib.h>

#include "onyx.h"



typedef struct { /* one step's job */
    const recurrence *t;
    int64_t k; /* the step */
} recurrence_step;

typedef struct { /* direction d's part of step k */
    const float *x;       /* gate 0's projection of column 0, row 0 at this time step */
    int64_t row;          /* (projected by rnn.c: rows [batch, dirs * gates * H]) a row's */
    const float *h, *c;   /* the previous [batch, H] states */
    float *y, *cy;        /* this time step's */
} direction_step;

static inline direction_step at_step(const recurrence *t, int64_t k, int64_t d, int64_t G) {
    int64_t reverse = (t->reverse >> d) & 1, time = reverse ? t->steps - 1 - k : k;
    int64_t prev = reverse ? time + 1 : time - 1, state = t->batch * t->H;
    int64_t now = (time * t->dirs + d) * state, before = (prev * t->dirs + d) * state;
    direction_step s = {t->xs + d * G * t->H * t->steps * t->batch + time * t->batch, 0,
                        k ? t->ys + before : t->h0 + d * state, 0, t->ys + now, 0};
    if (t->x || t->n_in < 0) /* projected as rows (by rnn.c, or a GEMM: n_in < 0) */
        s.row = t->dirs * G * t->H, s.x = t->xs + time * t->batch * s.row + d * G * t->H;
    if (t->cs) s.c = k ? t->cs + before : t->c0 + d * state, s.cy = t->cs + now;
    return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include "activation.h"
#define AVX512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline, target("avx512f")))


INLINE __m512 sigmoid512(__m512 x) { return onyx_sigmoid512(x); }

INLINE __m512 tanh512(__m512 x) { return onyx_tanh512(x); }

/* Rows b0 .. b0 + rows (<= 4) of direction d, columns n .. n + 16: the G gates' sums. */
INLINE void gate_sums(const recurrence *t, const float *h, int64_t d, int64_t b0, int rows,
                      int64_t n, __m512 acc[4][4], const int G) {
    int64_t H = t->H;
    for (int g = 0; g < G; g++)
        for (int r = 0; r < 4; r++) acc[g][r] = _mm512_setzero_ps();
    const float *rt = t->rt + (d * H + n) * H * G; /* (d, n / 16) block: H x G x 16 */
    h += b0 * H;
    if (rows == 1) { /* batch 1: each gate's sum in 4 chains (k mod 4; H is a multiple of 16)
                        summed at the end, as one row's G chains wait on the FMA's latency */
        for (int64_t k = 0; k < H; k += 4)
            for (int j = 0; j < 4; j++) {
                __m512 hv = _mm512_set1_ps(h[k + j]);
                for (int g = 0; g < G; g++)
                    acc[g][j] = _mm512_fmadd_ps(hv, _mm512_loadu_ps(rt + ((k + j) * G + g) * 16),
                                                acc[g][j]);
            }
        for (int g = 0; g < G; g++)
            acc[g][0] = _mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][1]),
                                      _mm512_add_ps(acc[g][2], acc[g][3]));
        return;
    }
    for (int64_t k = 0; k < H; k++) {
        __m512 w[4];
        for (int g = 0; g < G; g++) w[g] = _mm512_loadu_ps(rt + (k * G + g) * 16);
        for (int r = 0; r < 4; r++) {
            if (r >= rows) break;
            __m512 hv = _mm512_set1_ps(h[r * H + k]);
            for (int g = 0; g < G; g++) acc[g][r] = _mm512_fmadd_ps(hv, w[g], acc[g][r]);
        }
    }
}

/* Gate g's projections of row b, columns n .. n + 16: a run of the rows rnn.c projected
   itself, or gathered from the conv's output (apart by steps x batch: `apart`). */
INLINE __m512 projection(const recurrence *t, const direction_step *s, int g, int64_t b,
                         int64_t n, __m512i apart) {
    if (s->row) return _mm512_loadu_ps(s->x + b * s->row + g * t->H + n);
    return _mm512_i32gather_ps(apart, s->x + (g * t->H + n) * t->steps * t->batch + b, 4);
}

INLINE __m512i columns_apart(const recurrence *t) {
    __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(t->steps * t->batch)));
}

/* Parts q = (direction, block of 16 columns); H is a multiple of 16. */
EXPORT AVX512 int onyx_lstm_step_range(const void *p, int64_t begin, int64_t end) {
    const recurrence_step *job = p;
    const recurrence *t = job->t;
    int64_t H = t->H, blocks = H / 16;
    __m512i apart = columns_apart(t);
    for (int64_t q = begin; q < end; q++) {
        int64_t d = q / blocks, n = (q % blocks) * 16;
        direction_step s = at_step(t, job->k, d, 4);
        for (int64_t b0 = 0; b0 < t->batch; b0 += 4) {
            int rows = t->batch - b0 < 4 ? (int)(t->batch - b0) : 4;
            __m512 acc[4][4];
            gate_sums(t, s.h, d, b0, rows, n, acc, 4);
            for (int r = 0; r < rows; r++) {
                int64_t b = b0 + r, at = b * H + n;
                __m512 i = sigmoid512(_mm512_add_ps(acc[0][r], projection(t, &s, 0, b, n, apart)));
                __m512 o = sigmoid512(_mm512_add_ps(acc[1][r], projection(t, &s, 1, b, n, apart)));
                __m512 f = sigmoid512(_mm512_add_ps(acc[2][r], projection(t, &s, 2, b, n, apart)));
                __m512 c = tanh512(_mm512_add_ps(acc[3][r], projection(t, &s, 3, b, n, apart)));
                __m512 cy = _mm512_add_ps(_mm512_mul_ps(f, _mm512_loadu_ps(s.c + at)),
                                          _mm512_mul_ps(c, i));
                _mm512_storeu_ps(s.cy + at, cy);
                _mm512_storeu_ps(s.y + at, _mm512_mul_ps(tanh512(cy), o));
            }
        }
    }
    return 0;
}

/* GRU's step (linear_before_reset: PyTorch's): z, r = sigmoid(.), n = tanh(x_n + r (h . R_n +
   Rb_n)), H = n + z (H_prev - n), as kernels/rnn.py orders it. Parts as the LSTM's. */
EXPORT AVX512 int onyx_gru_step_range(const void *p, int64_t begin, int64_t end) {
    const recurrence_step *job = p;
    const recurrence *t = job->t;
    int64_t H = t->H, blocks = H / 16;
    __m512i apart = columns_apart(t);
    for (int64_t q = begin; q < end; q++) {
        int64_t d = q / blocks, n = (q % blocks) * 16;
        direction_step s = at_step(t, job->k, d, 3);
        __m512 rb = _mm512_loadu_ps(t->rbh + d * H + n);
        for (int64_t b0 = 0; b0 < t->batch; b0 += 4) {
            int rows = t->batch - b0 < 4 ? (int)(t->batch - b0) : 4;
            __m512 acc[4][4];
            gate_sums(t, s.h, d, b0, rows, n, acc, 3);
            for (int r = 0; r < rows; r++) {
                int64_t b = b0 + r, at = b * H + n;
                __m512 z = sigmoid512(_mm512_add_ps(acc[0][r], projection(t, &s, 0, b, n, apart)));
                __m512 rg = sigmoid512(_mm512_add_ps(acc[1][r], projection(t, &s, 1, b, n, apart)));
                __m512 c = _mm512_mul_ps(_mm512_add_ps(acc[2][r], rb), rg);
                c = tanh512(_mm512_add_ps(c, projection(t, &s, 2, b, n, apart)));
                __m512 h = _mm512_loadu_ps(s.h + at);
                _mm512_storeu_ps(s.y + at, _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(h, c), z), c));
            }
        }
    }
    return 0;
}

/* xs = x . w + bias, [steps * batch, dirs * gates * H], when the caller hands over x rather
   than the projections (a few steps at batch 1: one native call instead of two, and no
   transposes in Python). w is [n_in, dirs * gates * H]: 16 projections of an input row per
   vector (H is a multiple of 16), an input value broadcast per weight row, stored as rows
   (a step then loads its projections; AMD's scatters and gathers are microcoded). */
AVX512 static void project(const recurrence *t, int64_t G) {
    int64_t M = t->dirs * G * t->H, P = t->steps * t->batch, K = t->n_in;
    for (int64_t m = 0; m < M; m += 16) {
        __m512 bias = _mm512_loadu_ps(t->bias + m);
        for (int64_t p0 = 0; p0 < P; p0 += 8) { /* 8 rows at once: independent sums */
            int rows = P - p0 < 8 ? (int)(P - p0) : 8;
            const float *x0 = t->x + p0 * K;
            __m512 acc[8];
            for (int r = 0; r < 8; r++) acc[r] = bias;
            for (int64_t k = 0; k < K; k++) {
                __m512 wv = _mm512_loadu_ps(t->w + k * M + m);
                for (int r = 0; r < 8; r++)
                    if (r < rows) acc[r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[r * K + k]), acc[r]);
            }
            for (int r = 0; r < rows; r++) _mm512_storeu_ps(t->xs + (p0 + r) * M + m, acc[r]);
        }
    }
}

/* Every step, each a pool job (its parts split at cuts[0 .. ranges]): a step reads the one
   before (H, and C for the LSTM). */
static int steps(const recurrence *t, range_fn step, const int64_t *cuts, int64_t ranges,
                 int64_t threads, int64_t G) {
    if (t->x) project(t, G);
    for (int64_t k = 0; k < t->steps; k++) {
        recurrence_step s = {t, k};
        int status = onyx_parallel(step, &s, cuts, ranges, threads);
        if (status) return status;
    }
    return 0;
}

/* Whether the recurrence's sizes are in range: 1 or 2 directions, H a multiple of 16, the
   32-bit gathers' strides (steps x batch) in an int32. */
static int recurrence_ok(const recurrence *t) {
    int64_t sizes[2] = {t->steps, t->batch};
    if (t->x && (t->n_in <= 0 || t->n_in > ONYX_MAX_EXTENT || !t->w || !t->bias)) return 0;
    return onyx_in(sizes, 2, 0, (int64_t)1 << 25) && t->steps * t->batch < (int64_t)1 << 25 &&
           (t->dirs == 1 || t->dirs == 2) && t->H > 0 && t->H % 16 == 0 &&
           t->H <= ONYX_MAX_EXTENT;
}

EXPORT int onyx_lstm(const recurrence *t, const int64_t *cuts, int64_t ranges, int64_t threads) {
    if (!recurrence_ok(t)) return ONYX_INVALID;
    return steps(t, onyx_lstm_step_range, cuts, ranges, threads, 4);
}

/* Y_h (and Y_c, where yc): the state after each direction's last step, from t's ys (cs). */
static void last_states(const recurrence *t, float *yh, float *yc) {
    int64_t state = t->batch * t->H;
    for (int64_t d = 0; d < t->dirs; d++) {
        int64_t last = (t->reverse >> d) & 1 ? 0 : t->steps - 1, at = (last * t->dirs + d) * state;
        for (int64_t i = 0; i < state; i++) {
            yh[d * state + i] = t->ys[at + i];
            if (yc) yc[d * state + i] = t->cs[at + i];
        }
    }
}

/* The LSTM of a kept task (kernels/rnn.py's LstmRecurrence: rnn.c projects x) in one call:
   x, the initial states (null: the task's) and out, [6 steps + 2, dirs, batch, H]: every
   step's H, then C, then the last step's H and C (Y_h, Y_c), then room for the projections. */
EXPORT int onyx_lstm_run(const recurrence *task, const float *x, const float *h0,
                         const float *c0, float *out, const int64_t *cuts, int64_t ranges,
                         int64_t threads) {
    recurrence t = *task;
    int64_t state = t.dirs * t.batch * t.H;
    t.x = x, t.ys = out, t.cs = out + t.steps * state, t.xs = out + (2 * t.steps + 2) * state;
    if (h0) t.h0 = h0;
    if (c0) t.c0 = c0;
    if (!t.x || !recurrence_ok(&t) || t.steps < 1) return ONYX_INVALID;
    int status = steps(&t, onyx_lstm_step_range, cuts, ranges, threads, 4);
    if (status) return status;
    last_states(&t, out + 2 * t.steps * state, out + (2 * t.steps + 1) * state);
    return 0;
}

/* onyx_lstm_run's GRU: out is [4 steps + 1, dirs, batch, H]: every step's H, then the last
   step's H (Y_h), then room for the projections; the task holds rbh. */
EXPORT int onyx_gru_run(const recurrence *task, const float *x, const float *h0, float *out,
                        const int64_t *cuts, int64_t ranges, int64_t threads) {
    recurrence t = *task;
    int64_t state = t.dirs * t.batch * t.H;
    t.x = x, t.ys = out, t.cs = 0, t.c0 = 0, t.xs = out + (t.steps + 1) * state;
    if (h0) t.h0 = h0;
    if (!t.x || !t.rbh || !recurrence_ok(&t) || t.steps < 1) return ONYX_INVALID;
    int status = steps(&t, onyx_gru_step_range, cuts, ranges, threads, 3);
    if (status) return status;
    last_states(&t, out + t.steps * state, 0);
    return 0;
}

EXPORT int onyx_gru(const recurrence *t, const int64_t *cuts, int64_t ranges, int64_t threads) {
    if (!recurrence_ok(t)) return ONYX_INVALID;
    return steps(t, onyx_gru_step_range, cuts, ranges, threads, 3);
}
#endif

