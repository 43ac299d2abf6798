/* Tree ensembles (part of the _kernels library): the descent of every row through every tree,
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
                WALK(T, xr, s, n)                                                            \
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

