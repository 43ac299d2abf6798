/* Tree ensembles and the other ai.onnx.ml kernels served a few rows at a time (part of the
 * _kernels library: SVMClassifier, LinearClassifier, BinsOneHot, Normalizer at the end): the
 * descent of every row through every tree,
 * and the sum of the leaves' weights, for ml/tree.py.
 *
 * The tables are ml/tree.py's _FastTables: every split made `x <= t` (thresholds adjusted,
 * children swapped), state s at index 2s, child[2s + outcome] the doubled next state, a leaf
 * looping onto itself; a NaN takes nan_outcome[2s] where given. numpy walked all rows and trees
 * one level at a time, four array passes per level. Here a row's walk is a chain of dependent
 * loads, so a tree walks ROWS rows at once: their chains are independent and overlap.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "onyx.h"

#define ROWS 8


#define DESCEND(name, T)                                                                     \
    static void name(const forest_task *t, int64_t begin, int64_t end) {                    \
        const T *x = t->x, *thr = t->threshold;                                              \
        for (int64_t r0 = begin; r0 < end; r0 += ROWS) {                                     \
            int n = end - r0 < ROWS ? (int)(end - r0) : ROWS;                                \
            for (int64_t tree = 0; tree < t->trees; tree++) {                                \
                int64_t s[ROWS];                                                             \
                for (int j = 0; j < n; j++) s[j] = t->roots[tree];                           \
                for (int64_t d = 0; d < t->depth; d++)                                       \
                    for (int j = 0; j < n; j++) {                                            \
                        T v = x[(r0 + j) * t->nf + t->feature[s[j]]];                        \
                        int64_t b = v <= thr[s[j]];                                          \
                        if (t->nan_outcome && v != v) b = t->nan_outcome[s[j]];              \
                        s[j] = t->child[s[j] + b];                                           \
                    }                                                                        \
                for (int j = 0; j < n; j++) t->states[(r0 + j) * t->trees + tree] = s[j] >> 1; \
            }                                                                                \
        }                                                                                    \
    }
DESCEND(descend_f32, float)
DESCEND(descend_f64, double)
#undef DESCEND

EXPORT int onyx_forest_descend_range(const void *p, int64_t begin, int64_t end) {
    const forest_task *t = p;
    if (t->nf < 0 || t->trees < 0 || t->depth < 0 || t->depth > 1 << 20) return ONYX_INVALID; /* (checks.h) */
    if (t->is_double)
        descend_f64(t, begin, end);
    else
        descend_f32(t, begin, end);
    return 0;
}

/* scores[r][c] = weights[states[r][0]][c] + weights[states[r][1]][c] + ..., added tree after
   tree in the weights' type: the order (and so the bits) of numpy's running sum. */

#define SUM(name, T)                                                                         \
    static void name(const forest_sum_task *t, int64_t begin, int64_t end) {                \
        const T *w = t->weights;                                                             \
        T *y = t->scores;                                                                    \
        int64_t C = t->targets;                                                              \
        for (int64_t r = begin; r < end; r++) {                                              \
            const int64_t *s = t->states + r * t->trees;                                     \
            T *acc = y + r * C;                                                              \
            for (int64_t c = 0; c < C; c++) acc[c] = w[s[0] * C + c];                        \
            for (int64_t tree = 1; tree < t->trees; tree++)                                  \
                for (int64_t c = 0; c < C; c++) acc[c] += w[s[tree] * C + c];                \
        }                                                                                    \
    }
SUM(sum_f32, float)
SUM(sum_f64, double)
#undef SUM

EXPORT int onyx_forest_sum_range(const void *p, int64_t begin, int64_t end) {
    const forest_sum_task *t = p;
    if (t->trees < 0 || t->targets < 0) return ONYX_INVALID; /* (checks.h) */
    if (t->is_double)
        sum_f64(t, begin, end);
    else
        sum_f32(t, begin, end);
    return 0;
}

/* descend then sum for a small batch on the calling thread, in one call (ForestSums). Blocks
   of ROWS rows walk each tree together (their chains of dependent loads overlap, and a tree's
   nodes stay in cache for the block); the last rows, fewer than ROWS, walk ROWS trees at once
   instead (one row has no other rows to overlap with). Either way each row's leaf weights are
   added tree after tree, forest_sum's order of additions (its bits), without the states in
   between. */

#define LEAF_ADD(W, acc, leaf, C, first)                                                     \
    if (first)                                                                               \
        for (int64_t c = 0; c < C; c++) acc[c] = leaf[c];                                    \
    else                                                                                     \
        for (int64_t c = 0; c < C; c++) acc[c] += leaf[c];

#define WALK(T, x_of, s, n)                                                                  \
    for (int64_t d = 0; d < t->depth; d++)                                                   \
        for (int j = 0; j < n; j++) {                                                        \
            T v = x_of[t->feature[s[j]]];                                                    \
            int64_t b = v <= thr[s[j]];                                                      \
            if (t->nan_outcome && v != v) b = t->nan_outcome[s[j]];                          \
            s[j] = t->child[s[j] + b];                                                       \
        }

#define SCORES(name, T, W)                                                                   \
    static void name(const forest_task *t, const forest_sum_task *u, const T *x,            \
                     int64_t rows, int64_t nf, W *y) {                                       \
        const T *thr = t->threshold;                                                         \
        const W *w = u->weights;                                                             \
        int64_t C = u->targets, blocked = rows / ROWS * ROWS;                                \
        for (int64_t r0 = 0; r0 < blocked; r0 += ROWS)                                       \
            for (int64_t tree = 0; tree < t->trees; tree++) {                                \
                int64_t s[ROWS];                                                             \
                for (int j = 0; j < ROWS; j++) s[j] = t->roots[tree];                        \
                WALK(T, (x + (r0 + j) * nf), s, ROWS)                                         \
                for (int j = 0; j < ROWS; j++) {                                             \
                    W *acc = y + (r0 + j) * C;                                               \
                    const W *leaf = w + (s[j] >> 1) * C;                                     \
                    LEAF_ADD(W, acc, leaf, C, tree == 0)                                     \
                }                                                                            \
            }                                                                                \
        for (int64_t r = blocked; r < rows; r++) {                                           \
            const T *xr = x + r * nf;                                                        \
            W *acc = y + r * C;                                                              \
            for (int64_t t0 = 0; t0 < t->trees; t0 += ROWS) {                                \
                int n = t->trees - t0 < ROWS ? (int)(t->trees - t0) : ROWS;                  \
                int64_t s[ROWS];                                                             \
                for (int j = 0; j < n; j++) s[j] = t->roots[t0 + j];                         \
                if (n == ROWS) { /* (a whole group: its chains unrolled, kept in registers) */ \
                    WALK(T, xr, s, ROWS)                                                     \
                } else {                                                                     \
                    WALK(T, xr, s, n)                                                        \
                }                                                                            \
                for (int j = 0; j < n; j++) {                                                \
                    const W *leaf = w + (s[j] >> 1) * C;                                     \
                    LEAF_ADD(W, acc, leaf, C, t0 + j == 0)                                   \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }
SCORES(scores_f32_f32, float, float)
SCORES(scores_f32_f64, float, double)
SCORES(scores_f64_f32, double, float)
SCORES(scores_f64_f64, double, double)
#undef SCORES
#undef WALK
#undef LEAF_ADD

EXPORT int onyx_forest_scores(const void *descend, const void *sum, const void *x, int64_t rows,
                              int64_t nf, void *scores) {
    const forest_task *t = descend;
    const forest_sum_task *u = sum;
    if (rows < 0 || nf < 0 || t->trees < 1 || u->trees != t->trees || t->depth < 0 ||
        t->depth > 1 << 20 || u->targets < 0)
        return ONYX_INVALID; /* (checks.h) */
    if (t->is_double && u->is_double)
        scores_f64_f64(t, u, x, rows, nf, scores);
    else if (t->is_double)
        scores_f64_f32(t, u, x, rows, nf, scores);
    else if (u->is_double)
        scores_f32_f64(t, u, x, rows, nf, scores);
    else
        scores_f32_f32(t, u, x, rows, nf, scores);
    return 0;
}

/* The index of the highest of one row y [C] of type T: numpy's argmax, the first of equal
   ones, the first NaN where there is one. A classifier's best class (float32 scores) and
   onyx_argmax_small's rows (float32 or float64) are one loop. */
#define BEST(name, T)                                                                        \
    static int64_t name(const T *y, int64_t C) {                                             \
        int64_t top = 0;                                                                     \
        for (int64_t c = 0; c < C; c++) {                                                    \
            if (y[c] != y[c]) return c;                                                      \
            if (y[c] > y[top]) top = c;                                                      \
        }                                                                                    \
        return top;                                                                          \
    }
BEST(classify_best, float)
BEST(best_f64, double)

/* Softmax over each row of float32 y [rows][C] in place: rows.c's Softmax rows (numpy's
   steps; the Softmax op's bits), which reads each value before it writes it. */
int onyx_softmax_rows_f32_range(const void *p, int64_t begin, int64_t end); /* rows.c */
static void classify_softmax(float *y, int64_t rows, int64_t C) {
    softmax_rows task = {.x = y, .y = y, .size = C};
    onyx_softmax_rows_f32_range(&task, 0, rows);
}

/* onyx_forest_scores then each row's best class and the softmax of float32 scores [rows][C] (ml/tree.py's
   predict where every tree votes for every class), base [nbase] added first. */
EXPORT int onyx_forest_classify(const void *descend, const void *sum, const void *x,
                                int64_t rows, int64_t nf, float *scores, const float *base,
                                int64_t nbase, int64_t transform, int64_t *best) {
    const forest_sum_task *u = sum;
    int64_t C = u->targets;
    if (u->is_double || nbase < 0 || nbase > C || transform < 0 || transform > 1 || C < 1)
        return ONYX_INVALID; /* (checks.h) */
    int status = onyx_forest_scores(descend, sum, x, rows, nf, scores);
    if (status) return status;
    for (int64_t r = 0; r < rows; r++) {
        float *y = scores + r * C;
        for (int64_t c = 0; c < nbase; c++) y[c] += base[c];
        best[r] = classify_best(y, C);
    }
    if (transform == 1) classify_softmax(scores, rows, C);
    return 0;
}

/* LinearClassifier of several classes on float32 rows x [rows][nf] (ml/linear.py's bound
   call): scores = x W + b (W [nf][C], each sum in feature order; BLAS's products sum in
   another: values agree to rounding), then the best class and the softmax. b may be NULL.
   The sums of a row run in local accumulators, C known at compile time up to 8 (scores in
   memory would chain each addition through a store and a load). */
#define LINEAR_ROWS(name, CC)                                                                \
    static void name(const float *x, int64_t rows, int64_t nf, const float *w, float *y,    \
                     int64_t C) {                                                            \
        for (int64_t r = 0; r < rows; r++) {                                                 \
            const float *xr = x + r * nf;                                                    \
            float acc[CC];                                                                   \
            for (int64_t c = 0; c < (CC); c++) acc[c] = 0.0f;                                \
            for (int64_t f = 0; f < nf; f++)                                                 \
                for (int64_t c = 0; c < (CC); c++) acc[c] += xr[f] * w[f * (CC) + c];        \
            for (int64_t c = 0; c < (CC); c++) y[r * (CC) + c] = acc[c];                     \
        }                                                                                    \
    }
LINEAR_ROWS(linear_rows_2, 2)
LINEAR_ROWS(linear_rows_3, 3)
LINEAR_ROWS(linear_rows_4, 4)
LINEAR_ROWS(linear_rows_5, 5)
LINEAR_ROWS(linear_rows_6, 6)
LINEAR_ROWS(linear_rows_7, 7)
LINEAR_ROWS(linear_rows_8, 8)
LINEAR_ROWS(linear_rows_any, C)
#undef LINEAR_ROWS

EXPORT int onyx_linear_classify(const float *x, int64_t rows, int64_t nf, const float *w,
                                const float *b, int64_t C, int64_t transform, float *scores,
                                int64_t *best) {
    if (rows < 0 || nf < 0 || C < 1 || transform < 0 || transform > 1) return ONYX_INVALID;
    static void (*const sized[9])(const float *, int64_t, int64_t, const float *, float *,
                                  int64_t) = {0, 0, linear_rows_2, linear_rows_3, linear_rows_4,
                                              linear_rows_5, linear_rows_6, linear_rows_7,
                                              linear_rows_8};
    (C <= 8 && sized[C] ? sized[C] : linear_rows_any)(x, rows, nf, w, scores, C);
    for (int64_t r = 0; r < rows; r++) {
        float *y = scores + r * C;
        if (b)
            for (int64_t c = 0; c < C; c++) y[c] += b[c];
        best[r] = classify_best(y, C);
    }
    if (transform == 1) classify_softmax(scores, rows, C);
    return 0;
}

/* libsvm's multiclass_probability (Wu, Lin & Weng 2004, method 2) for each of n rows of
   pairwise probabilities r [n][k][k]: p [n][k]. Its loops, and so its order of operations:
   every sum a sequential double sum (the bits of libsvm's and of svm.py's numpy oracle).
   q [k * k] and qp [k]: the caller's work space. */
EXPORT int onyx_svm_coupling(const double *r_all, double *p_all, int64_t n, int64_t k, double *Q,
                             double *Qp) {
#pragma STDC FP_CONTRACT OFF
    if (n < 0 || k < 1) return ONYX_INVALID; /* (checks.h) */
    int64_t max_iter = k > 100 ? k : 100;
    double eps = 0.005 / (double)k;
    for (int64_t row = 0; row < n; row++) {
        const double *r = r_all + row * k * k;
        double *p = p_all + row * k;
        for (int64_t t = 0; t < k; t++) {
            p[t] = 1.0 / (double)k;
            Q[t * k + t] = 0;
            for (int64_t j = 0; j < t; j++) {
                Q[t * k + t] += r[j * k + t] * r[j * k + t];
                Q[t * k + j] = Q[j * k + t];
            }
            for (int64_t j = t + 1; j < k; j++) {
                Q[t * k + t] += r[j * k + t] * r[j * k + t];
                Q[t * k + j] = -r[j * k + t] * r[t * k + j];
            }
        }
        for (int64_t iter = 0; iter < max_iter; iter++) {
            double pQp = 0;
            for (int64_t t = 0; t < k; t++) {
                Qp[t] = 0;
                for (int64_t j = 0; j < k; j++) Qp[t] += Q[t * k + j] * p[j];
                pQp += p[t] * Qp[t];
            }
            double max_error = 0;
            for (int64_t t = 0; t < k; t++) {
                double error = fabs(Qp[t] - pQp);
                if (error > max_error) max_error = error;
            }
            if (max_error < eps) break;
            for (int64_t t = 0; t < k; t++) {
                double diff = (-Qp[t] + pQp) / Q[t * k + t];
                p[t] += diff;
                pQp = (pQp + diff * (diff * Q[t * k + t] + 2 * Qp[t])) / (1 + diff) / (1 + diff);
                for (int64_t j = 0; j < k; j++) {
                    Qp[j] = (Qp[j] + diff * Q[t * k + j]) / (1 + diff);
                    p[j] /= (1 + diff);
                }
            }
        }
    }
    return 0;
}

/* onyx_svm_coupling of rows of the pairs' probabilities pairwise [n][pairs], pair q being
   classes first[q] < second[q]: each row's r [k][k] built here (r[i][j] = P, r[j][i] = 1 - P,
   zeros elsewhere, as svm.py builds it) in work [k * k], then Q [k * k] and Qp [k] as there. */
EXPORT int onyx_svm_coupling_pairs(const double *pairwise, const int64_t *first,
                                   const int64_t *second, int64_t n, int64_t pairs, int64_t k,
                                   double *p_all, double *work, double *Q, double *Qp) {
    if (n < 0 || k < 1 || pairs < 0 || pairs > k * k) return ONYX_INVALID; /* (checks.h) */
    for (int64_t q = 0; q < pairs; q++)
        if (first[q] < 0 || first[q] >= k || second[q] < 0 || second[q] >= k) return ONYX_INVALID;
    for (int64_t row = 0; row < n; row++) {
        for (int64_t i = 0; i < k * k; i++) work[i] = 0.0;
        const double *pr = pairwise + row * pairs;
        for (int64_t q = 0; q < pairs; q++) {
            work[first[q] * k + second[q]] = pr[q];
            work[second[q] * k + first[q]] = 1.0 - pr[q];
        }
        int status = onyx_svm_coupling(work, p_all + row * k, 1, k, Q, Qp);
        if (status) return status;
    }
    return 0;
}


/* ------------------------------------------------------------------ SVMClassifier, a few rows */

/* SVMClassifier's one-vs-one path for a few rows (ml/svm.py's _Classifier; in double): the
   kernel of the row and every support vector, each pair's decision sum_v K w + rho, the
   votes (a positive decision votes for class i, any other, NaN too, for j), and with prob_a
   Platt's pairwise probabilities clipped to [1e-7, 1 - 1e-7] coupled as libsvm couples them.
   numpy's matrix products sum in BLAS's order: here each sum runs in index order, so values
   agree to rounding. The RBF kernel sums the squared differences (x - v)^2, as libsvm does:
   an infinite feature gives an infinite distance (kernel 0), not the expansion's inf - inf.

   The vectors are stored transposed, [nf][n_vectors], so that the kernel's loop over the
   vectors runs in vector lanes (each vector's sum still adds its features in order).
   best [rows]: the class with the most votes (the first of a tie); out [rows][k] the
   probabilities (prob_a given) or [rows][pairs] the decisions. work: n_vectors + pairs + k
   + 2 k k + k doubles. */
/* K[m] = exp(scale K[m]) for every m, in loops the compiler runs in vector lanes (libm's exp
   is a call per value: most of a row's time). exp(x) = 2^n exp(r), n = round(x / ln 2),
   |r| <= ln(2) / 2 in two parts of ln 2 (exact n ln2_hi), exp(r) by its Taylor series to
   r^13 (truncation under 2e-17 relative: within a few ulp of libm's). x < -708.39 gives 0
   (libm: a subnormal under 1e-307), x > 709.78 infinity, NaN stays NaN. */
#define SVM_EXP(name, attributes)                                                            \
    static attributes void name(double *K, int64_t M, double scale) {                        \
        const double magic = 0x1.8p52, log2e = 1.4426950408889634, ln2_hi = 0x1.62e42fefap-1, \
                     ln2_lo = 0x1.cf79abc9e3b3ap-40;                                          \
        for (int64_t m = 0; m < M; m++) {                                                    \
            double x = scale * K[m];                                                         \
            double c = x < -708.39 ? -708.39 : (x > 709.78 ? 709.78 : x);                    \
            double t = c * log2e + magic, n = t - magic;                                     \
            double r = (c - n * ln2_hi) - n * ln2_lo;                                        \
            double p = 1.0 / 6227020800.0;                                                   \
            p = p * r + 1.0 / 479001600.0;                                                   \
            p = p * r + 1.0 / 39916800.0;                                                    \
            p = p * r + 1.0 / 3628800.0;                                                     \
            p = p * r + 1.0 / 362880.0;                                                      \
            p = p * r + 1.0 / 40320.0;                                                       \
            p = p * r + 1.0 / 5040.0;                                                        \
            p = p * r + 1.0 / 720.0;                                                         \
            p = p * r + 1.0 / 120.0;                                                         \
            p = p * r + 1.0 / 24.0;                                                          \
            p = p * r + 1.0 / 6.0;                                                           \
            p = p * r + 0.5;                                                                 \
            p = p * r + 1.0;                                                                 \
            p = p * r + 1.0;                                                                 \
            int64_t bits, e;                                                                 \
            memcpy(&bits, &t, 8);                                                            \
            e = (bits - 0x4338000000000000LL + 1023) << 52;                                  \
            double two_n;                                                                    \
            memcpy(&two_n, &e, 8);                                                           \
            double y = p * two_n;                                                            \
            y = x < -708.39 ? 0.0 : (x > 709.78 ? INFINITY : y);                             \
            K[m] = x != x ? x : y;                                                           \
        }                                                                                    \
    }
SVM_EXP(svm_exp_portable, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
SVM_EXP(svm_exp_avx512, __attribute__((target("avx512f"))))
#endif
#undef SVM_EXP

static void svm_exp(double *K, int64_t M, double scale) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (onyx_isa() & ONYX_ISA_AVX512) {
        svm_exp_avx512(K, M, scale);
        return;
    }
#endif
    svm_exp_portable(K, M, scale);
}

/* The sums of a row's kernel: K[m] = sum_f (x_f - v_mf)^2 (RBF) or sum_f x_f v_mf, each
   vector's features added in order, the vectors in vector lanes. */
#define SVM_SUMS(name, attributes)                                                           \
    static attributes void name(const svm_task *t, const double *x, double *K) {             \
        int64_t M = t->n_vectors;                                                            \
        const double *vt = t->vectors;                                                       \
        for (int64_t m = 0; m < M; m++) K[m] = 0.0;                                          \
        for (int64_t f = 0; f < t->nf; f++) {                                                \
            double xf = x[f];                                                                \
            const double *v = vt + f * M;                                                    \
            if (t->kernel == 2)                                                              \
                for (int64_t m = 0; m < M; m++) K[m] += (xf - v[m]) * (xf - v[m]);           \
            else                                                                             \
                for (int64_t m = 0; m < M; m++) K[m] += xf * v[m];                           \
        }                                                                                    \
    }

/* dec[q] = sum_m K[m] w[q][m] (weights transposed, [pairs][vectors]) in 8 running sums
   (lanes) added together at the end: BLAS's products sum in blocks too. */
#define SVM_DECISIONS(name, attributes)                                                      \
    static attributes void name(const svm_task *t, const double *K, double *dec) {           \
        int64_t M = t->n_vectors, blocked = M / 8 * 8;                                       \
        for (int64_t q = 0; q < t->pairs; q++) {                                             \
            const double *w = t->weights + q * M;                                            \
            double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                        \
            for (int64_t m = 0; m < blocked; m += 8)                                         \
                for (int j = 0; j < 8; j++) acc[j] += K[m + j] * w[m + j];                   \
            double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +                           \
                         ((acc[4] + acc[5]) + (acc[6] + acc[7]));                            \
            for (int64_t m = blocked; m < M; m++) sum += K[m] * w[m];                        \
            dec[q] = sum;                                                                    \
        }                                                                                    \
    }
SVM_SUMS(svm_sums_portable, )
SVM_DECISIONS(svm_decisions_portable, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
SVM_SUMS(svm_sums_avx512, __attribute__((target("avx512f"))))
SVM_DECISIONS(svm_decisions_avx512, __attribute__((target("avx512f"))))
#define SVM_ISA(name, ...)                                                                   \
    if (onyx_isa() & ONYX_ISA_AVX512)                                                        \
        name##_avx512(__VA_ARGS__);                                                          \
    else                                                                                     \
        name##_portable(__VA_ARGS__);
#else
#define SVM_ISA(name, ...) name##_portable(__VA_ARGS__);
#endif
#undef SVM_SUMS
#undef SVM_DECISIONS

static void svm_kernel_row(const svm_task *t, const double *x, double *K) {
    int64_t M = t->n_vectors;
    SVM_ISA(svm_sums, t, x, K)
    if (t->kernel == 2)
        svm_exp(K, M, -t->gamma);
    else if (t->kernel == 1)
        for (int64_t m = 0; m < M; m++) K[m] = pow(t->gamma * K[m] + t->coef0, (double)t->degree);
    else if (t->kernel == 3)
        for (int64_t m = 0; m < M; m++) K[m] = tanh(t->gamma * K[m] + t->coef0);
}

EXPORT int onyx_svm_classify(const void *task, const double *x, int64_t rows, int64_t *best,
                             double *out, double *work) {
    const svm_task *t = task;
    int64_t M = t->n_vectors, P = t->pairs, k = t->k;
    if (rows < 0 || M < 0 || t->nf < 0 || P < 0 || k < 1 || P > k * k || t->kernel < 0 ||
        t->kernel > 3)
        return ONYX_INVALID; /* (checks.h) */
    for (int64_t q = 0; q < P; q++)
        if (t->first[q] < 0 || t->first[q] >= k || t->second[q] < 0 || t->second[q] >= k)
            return ONYX_INVALID;
    double *K = work, *dec = K + M, *votes = dec + P, *r = votes + k, *Q = r + k * k;
    double *Qp = Q + k * k;
    for (int64_t row = 0; row < rows; row++) {
        svm_kernel_row(t, x + row * t->nf, K);
        SVM_ISA(svm_decisions, t, K, dec)
        for (int64_t c = 0; c < k; c++) votes[c] = 0.0;
        for (int64_t q = 0; q < P; q++) {
            dec[q] += t->rho[q];
            votes[dec[q] > 0 ? t->first[q] : t->second[q]] += 1.0;
        }
        int64_t top = 0;
        for (int64_t c = 1; c < k; c++)
            if (votes[c] > votes[top]) top = c;
        best[row] = top;
        if (!t->prob_a) {
            for (int64_t q = 0; q < P; q++) out[row * P + q] = dec[q];
            continue;
        }
        for (int64_t i = 0; i < k * k; i++) r[i] = 0.0;
        for (int64_t q = 0; q < P; q++) {
            /* (numpy's maximum and minimum: a NaN stays NaN) */
            double p = 1.0 / (1.0 + exp(dec[q] * t->prob_a[q] + t->prob_b[q]));
            p = p < 1e-7 ? 1e-7 : p;
            p = p > 1 - 1e-7 ? 1 - 1e-7 : p;
            r[t->first[q] * k + t->second[q]] = p;
            r[t->second[q] * k + t->first[q]] = 1.0 - p;
        }
        int status = onyx_svm_coupling(r, out + row * k, 1, k, Q, Qp);
        if (status) return status;
    }
    return 0;
}

/* ------------------------------------------------------------------ BinsOneHot */

/* ml/preprocess.py's BinsOneHot in its one-buffer layout: for each row r and feature j, the
   bin b of cols[r][j] against edges[j][0..k-1], out[r][j (k + 1) + b] = 1 (the rest 0). b is
   the chain's ArgMax over [x < e_0, ..., x < e_{k-1}, v] (v = ones[r]: 1 for a finite x, NaN
   for an infinite one), numpy's rules: the first maximum, a NaN the maximum. */
#define BINS(name, T)                                                                        \
    static void name(const T *cols, const T *edges, const float *ones, int64_t rows,         \
                     int64_t n, int64_t k, float *out) {                                     \
        for (int64_t r = 0; r < rows; r++) {                                                 \
            float v = ones[r];                                                               \
            float *o = out + r * n * (k + 1);                                                \
            for (int64_t i = 0; i < n * (k + 1); i++) o[i] = 0.0f;                           \
            for (int64_t j = 0; j < n; j++) {                                                \
                T x = cols[r * n + j];                                                       \
                int64_t first = -1, b;                                                       \
                for (int64_t e = 0; e < k; e++)                                              \
                    if (x < edges[j * k + e]) {                                              \
                        first = e;                                                           \
                        break;                                                               \
                    }                                                                        \
                if (v != v || v > 1.0f)                                                      \
                    b = k;                                                                   \
                else if (first >= 0)                                                         \
                    b = first;                                                               \
                else                                                                         \
                    b = v > 0.0f ? k : 0;                                                    \
                o[j * (k + 1) + b] = 1.0f;                                                   \
            }                                                                                \
        }                                                                                    \
    }
BINS(bins_f32, float)
BINS(bins_f64, double)
#undef BINS

EXPORT int onyx_bins_one_hot(const void *cols, const void *edges, const float *ones,
                             int64_t rows, int64_t n, int64_t k, int64_t is_double, float *out) {
    if (rows < 0 || n < 0 || k < 0) return ONYX_INVALID; /* (checks.h) */
    if (is_double)
        bins_f64(cols, edges, ones, rows, n, k, out);
    else
        bins_f32(cols, edges, ones, rows, n, k, out);
    return 0;
}

/* ------------------------------------------------------------------ Normalizer */

/* numpy's float32 sum of n <= 128 terms (its pairwise_sum): fewer than 8 added left to right;
   else 8 running sums of every 8th term, combined ((0+1)+(2+3))+((4+5)+(6+7)), then the
   remaining terms in order. The same additions: its bits. */
static float numpy_sum_f32(const float *v, int64_t n) {
    if (n < 8) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += v[i];
        return s;
    }
    float r[8];
    for (int j = 0; j < 8; j++) r[j] = v[j];
    int64_t i;
    for (i = 8; i < n - (n % 8); i += 8)
        for (int j = 0; j < 8; j++) r[j] += v[i + j];
    float s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) s += v[i];
    return s;
}

/* Normalizer on float32 rows x [rows][C] (C <= 128) into y: each row divided by its MAX
   (norm 0; a NaN propagates), L1 (1) or L2 (2) norm, summed as numpy sums (its bits); a row
   whose divisor is 0 stays as it is (the spec's Y == X). work [C] floats. */
EXPORT int onyx_normalize_rows(const float *x, int64_t rows, int64_t C, int64_t norm, float *y,
                               float *work) {
    if (rows < 0 || C < 1 || C > 128 || norm < 0 || norm > 2) return ONYX_INVALID;
    for (int64_t r = 0; r < rows; r++) {
        const float *v = x + r * C;
        float d;
        if (norm == 0) {
            d = v[0];
            for (int64_t c = 1; c < C && d == d; c++)
                if (v[c] > d || v[c] != v[c]) d = v[c];
        } else {
            for (int64_t c = 0; c < C; c++) work[c] = norm == 1 ? fabsf(v[c]) : v[c] * v[c];
            d = numpy_sum_f32(work, C);
            if (norm == 2) d = sqrtf(d);
        }
        for (int64_t c = 0; c < C; c++) y[r * C + c] = d != 0.0f ? v[c] / d : v[c];
    }
    return 0;
}

/* ------------------------------------------------------------------ small calls */

/* An ml kernel's call on at most max_rows rows (trees.py's SmallCall): Python passes the
   kernel's ml_call (its kept tables, and the calling thread's own outputs), x's bytes and the
   row count, three arguments that ctypes passes without converting them (the ten of the
   kernels' own entry points, converted one by one, cost more than the kernel at one row). */

static int small_rows_ok(const ml_call *c, int rows) { return rows >= 0 && rows <= c->max_rows; }

/* ml/_common.py's logistic of float32 v: 1 / (1 + exp(-|v|)), mirrored below 0. */
static float logistic_f32(float v) {
    float e = 1.0f / (1.0f + expf(-fabsf(v)));
    return v < 0 ? 1.0f - e : e;
}

/* A two-class classifier whose trees all vote for class 0 alone (skl2onnx's binary forests:
   float32 weights, one target), ml/tree.py's _binary for that case: s the row's sum plus
   base (n of them, at most 1), its best class s > 0.5 (weights all >= 0: BINARY_PROBS and
   BINARY_LOGISTIC) or s > 0, its scores [1 - s, s], [1 - l(s), l(s)], [l(-s), l(s)] or
   [-s, s] (l: the logistic). */
enum { BINARY_PROBS = 2, BINARY_LOGISTIC, BINARY_BOTH_LOGISTIC, BINARY_SIGNED };

static int forest_binary(const ml_call *c, const void *x, int rows) {
    float *sums = c->work, *y = c->out;
    int status = onyx_forest_scores(c->task, c->task2, x, rows, c->nf, sums);
    if (status) return status;
    for (int64_t r = 0; r < rows; r++) {
        float s = sums[r];
        if (c->n) s = s + ((const float *)c->consts)[0];
        int positive = c->mode == BINARY_PROBS || c->mode == BINARY_LOGISTIC;
        c->best[r] = s > (positive ? 0.5f : 0.0f);
        float p = c->mode == BINARY_LOGISTIC ? logistic_f32(s) : s;
        y[2 * r] = c->mode == BINARY_BOTH_LOGISTIC ? logistic_f32(-s)
                   : c->mode == BINARY_SIGNED      ? -s
                                                   : 1.0f - p;
        y[2 * r + 1] = c->mode == BINARY_BOTH_LOGISTIC ? logistic_f32(s) : p;
    }
    return 0;
}

/* TreeEnsemble: mode -1 the scores (onyx_forest_scores), 0 / 1 onyx_forest_classify's
   NONE / SOFTMAX with n base values, 2 to 5 forest_binary's (work: rows floats). */
EXPORT int onyx_forest_small(const void *call, const void *x, int rows) {
    const ml_call *c = call;
    if (!small_rows_ok(c, rows) || c->mode > BINARY_SIGNED || (c->mode >= 2 && c->n > 1))
        return ONYX_INVALID; /* (checks.h) */
    if (c->mode < 0) return onyx_forest_scores(c->task, c->task2, x, rows, c->nf, c->out);
    if (c->mode >= 2) return forest_binary(c, x, rows);
    return onyx_forest_classify(c->task, c->task2, x, rows, c->nf, c->out, c->consts, c->n,
                                c->mode, c->best);
}

/* SVMClassifier: x float32 (mode 1, widened into the work space first) or float64. */
EXPORT int onyx_svm_small(const void *call, const void *x, int rows) {
    const ml_call *c = call;
    if (!small_rows_ok(c, rows) || c->nf < 0) return ONYX_INVALID; /* (checks.h) */
    double *work = c->work;
    const double *x64 = x;
    if (c->mode == 1) {
        const float *x32 = x;
        for (int64_t i = 0; i < rows * c->nf; i++) work[i] = (double)x32[i];
        x64 = work;
        work += c->max_rows * c->nf;
    }
    return onyx_svm_classify(c->task, x64, rows, c->best, c->out, work);
}

/* LinearClassifier: weights task [nf][n], intercepts task2 (or null), mode its transform. */
EXPORT int onyx_linear_small(const void *call, const void *x, int rows) {
    const ml_call *c = call;
    if (!small_rows_ok(c, rows)) return ONYX_INVALID; /* (checks.h) */
    return onyx_linear_classify(x, rows, c->nf, c->task, c->task2, c->n, c->mode, c->out,
                                c->best);
}

/* Normalizer: n columns, mode its norm. */
EXPORT int onyx_normalize_small(const void *call, const void *x, int rows) {
    const ml_call *c = call;
    if (!small_rows_ok(c, rows)) return ONYX_INVALID; /* (checks.h) */
    return onyx_normalize_rows(x, rows, c->n, c->mode, c->out, c->work);
}

/* LinearChain: task the chain's linear_chain (proj's rows zero-padded to a multiple of
   CHAIN_BLOCK columns), n classes, mode LinearClassifier's transform (0 NONE, 1 SOFTMAX;
   2 NONE, 3 LOGISTIC of one set of weights and two labels: scores [rows][2]; 4 LOGISTIC
   of each score), work
   [CHAIN_ROWS (nf + k + 1) + n] floats. CHAIN_ROWS rows at a time: Scaler's (x - offset) * scale,
   then x - sub, then the product with proj (each sum in feature order), LinearClassifier
   (onyx_linear_classify) and the Normalizer (onyx_normalize_rows), in float32 as the
   separate kernels compute. */
#define CHAIN_BLOCK 16
#define CHAIN_ROWS 16

/* z [rows][k] = v [rows][nf] proj [nf][kp]: CHAIN_BLOCK columns of four rows at once in
   vectors of local sums (GCC's vector extension: four independent chains of additions, each
   product and sum rounded as written). */
typedef float chain_block __attribute__((vector_size(4 * CHAIN_BLOCK)));

static void chain_store(const chain_block *a, float *z, int64_t m) {
    float out[CHAIN_BLOCK];
    memcpy(out, a, sizeof out);
    for (int64_t j = 0; j < m; j++) z[j] = out[j];
}

static CLONES NO_FMA void chain_project(const float *v, int64_t rows, int64_t nf,
                                        const float *proj, int64_t k, int64_t kp, float *z) {
    for (int64_t j0 = 0; j0 < kp; j0 += CHAIN_BLOCK) {
        int64_t m = k - j0 < CHAIN_BLOCK ? k - j0 : CHAIN_BLOCK, r = 0;
        for (; r + 4 <= rows; r += 4) {
            chain_block a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, p;
            const float *v0 = v + r * nf;
            for (int64_t f = 0; f < nf; f++) {
                memcpy(&p, proj + f * kp + j0, sizeof p);
                a0 += v0[f] * p;
                a1 += v0[nf + f] * p;
                a2 += v0[2 * nf + f] * p;
                a3 += v0[3 * nf + f] * p;
            }
            chain_store(&a0, z + r * k + j0, m);
            chain_store(&a1, z + (r + 1) * k + j0, m);
            chain_store(&a2, z + (r + 2) * k + j0, m);
            chain_store(&a3, z + (r + 3) * k + j0, m);
        }
        for (; r < rows; r++) {
            chain_block a0 = {0}, p;
            for (int64_t f = 0; f < nf; f++) {
                memcpy(&p, proj + f * kp + j0, sizeof p);
                a0 += v[r * nf + f] * p;
            }
            chain_store(&a0, z + r * k + j0, m);
        }
    }
}

/* v [rows][nf] = x after the Scaler and the Sub (where present). */
static CLONES NO_FMA void chain_prepare(const linear_chain *t, const float *x, int64_t rows,
                                        int64_t nf, float *v) {
    for (int64_t i = 0; i < rows * nf; i++) v[i] = x[i];
    if (t->offset)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t f = 0; f < nf; f++)
                v[r * nf + f] = (v[r * nf + f] - t->offset[f]) * t->scale[f];
    if (t->sub)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t f = 0; f < nf; f++) v[r * nf + f] = v[r * nf + f] - t->sub[f];
}

EXPORT int onyx_linear_chain_small(const void *call, const void *x, int rows) {
    const ml_call *c = call;
    const linear_chain *t = c->task;
    int64_t nf = c->nf, k = t->proj ? t->k : nf, C = c->n;
    int64_t kp = (k + CHAIN_BLOCK - 1) / CHAIN_BLOCK * CHAIN_BLOCK; /* proj's row stride */
    if (!small_rows_ok(c, rows) || nf < 1 || k < 1 || C < 1 || t->norm < -1 || t->norm > 2 ||
        (t->norm >= 0 && C > 128) || c->mode < 0 || c->mode > 4 || ((c->mode == 2 || c->mode == 3) && C != 1))
        return ONYX_INVALID; /* (checks.h) */
    float *v = c->work, *z = v + CHAIN_ROWS * nf, *tmp = z + CHAIN_ROWS * k;
    for (int64_t r0 = 0; r0 < rows; r0 += CHAIN_ROWS) {
        int64_t n = rows - r0 < CHAIN_ROWS ? rows - r0 : CHAIN_ROWS;
        const float *xr = (const float *)x + r0 * nf;
        chain_prepare(t, xr, n, nf, v);
        const float *in = v;
        if (t->proj) {
            chain_project(v, n, nf, t->proj, k, kp, z);
            in = z;
        }
        if (c->mode == 2 || c->mode == 3) { /* one set of weights, two labels: [1 - p, p] */
            int status = onyx_linear_classify(in, n, k, t->weights, t->bias, 1, 0, tmp, c->best + r0);
            if (status) return status;
            float *y = (float *)c->out + r0 * 2;
            for (int64_t r = 0; r < n; r++) {
                float sc = tmp[r], p = c->mode == 3 ? logistic_f32(sc) : sc;
                c->best[r0 + r] = sc > 0.0f;
                y[2 * r] = 1.0f - p;
                y[2 * r + 1] = p;
            }
            continue;
        }
        float *y = (float *)c->out + r0 * C;
        int status = onyx_linear_classify(in, n, k, t->weights, t->bias, C, c->mode == 1, y,
                                          c->best + r0);
        if (c->mode == 4)
            for (int64_t i = 0; i < n * C; i++) y[i] = logistic_f32(y[i]);
        if (!status && t->norm >= 0) status = onyx_normalize_rows(y, n, C, t->norm, y, tmp);
        if (status) return status;
    }
    return 0;
}

/* ------------------------------------------------------- argmax and sorted search, small */

/* Small inputs' numpy argmax and searchsorted, called keeping the GIL (native/trees.py's
   argmax_rows, sorted_position): numpy lets the GIL go in both at every call, whatever the
   size, and in a small scikit-learn model's run each release woke a thread waiting for the
   GIL (docs/reliability.md, "Runs that keep the GIL"). */

/* Each row's index of its greatest value of x [rows][cols] (float32, or float64 when
   is_double) into out [rows]: numpy's argmax, the first of equal ones, the first NaN where a
   row has one. Its arguments packed into one C int, shape = rows << 13 | cols << 1 |
   is_double (rows and cols < 4096): ctypes converts each argument at every call, and three
   as they are cost a few-row call less than numpy's whole argmax. */
EXPORT int onyx_argmax_small(const void *x, int shape, int64_t *out) {
    int64_t rows = shape >> 13, cols = (shape >> 1) & 4095;
    if (shape < 0 || cols < 1) return ONYX_INVALID; /* (checks.h) */
    for (int64_t r = 0; r < rows; r++)
        out[r] = shape & 1 ? best_f64((const double *)x + r * cols, cols)
                           : classify_best((const float *)x + r * cols, cols);
    return 0;
}

/* numpy's order of two code-point strings of widths na, nb (UCS4, padded with zeros) */
static int ucs4_less(const uint32_t *a, int64_t na, const uint32_t *b, int64_t nb) {
    int64_t n = na < nb ? na : nb;
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i];
    for (int64_t i = n; i < nb; i++)
        if (b[i]) return 1; /* (a is b's prefix, b goes on) */
    return 0;
}

/* key i < value v in searchsorted's order (kind 0 float32, 1 float64: NaN after every
   number; 2 int64; 3 UCS4 strings of widths wk, wx) */
static int key_less(const void *keys, int64_t i, const void *x, int64_t j, int64_t kind,
                    int64_t wk, int64_t wx) {
    switch (kind) {
    case 0: {
        float a = ((const float *)keys)[i], b = ((const float *)x)[j];
        return a < b || (b != b && a == a);
    }
    case 1: {
        double a = ((const double *)keys)[i], b = ((const double *)x)[j];
        return a < b || (b != b && a == a);
    }
    case 2:
        return ((const int64_t *)keys)[i] < ((const int64_t *)x)[j];
    default:
        return ucs4_less((const uint32_t *)keys + i * wk, wk, (const uint32_t *)x + j * wx, wx);
    }
}

/* np.searchsorted(keys, x) (side left) of x [n] in the sorted keys [nkeys]: out[j] = the
   count of keys before x[j]. Packed as onyx_argmax_small's: keys_spec = nkeys | kind << 13 |
   wk << 15, x_spec = n | wx << 13 (nkeys, n < 8192; kind: key_less's; wk, wx: the strings'
   widths in code points). */
EXPORT int onyx_search_small(const void *keys, int keys_spec, const void *x, int x_spec,
                             int64_t *out) {
    int64_t nkeys = keys_spec & 8191, kind = (keys_spec >> 13) & 3, wk = keys_spec >> 15;
    int64_t n = x_spec & 8191, wx = x_spec >> 13;
    if (keys_spec < 0 || x_spec < 0 || (kind == 3 && (wk < 1 || wx < 1))) return ONYX_INVALID;
    for (int64_t j = 0; j < n; j++) {
        int64_t lo = 0, hi = nkeys;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (key_less(keys, mid, x, j, kind, wk, wx))
                lo = mid + 1;
            else
                hi = mid;
        }
        out[j] = lo;
    }
    return 0;
}
