/* GroupQueryAttention's step in C (part of the _kernels library): an LLM layer's attention
 * over its KV cache, for one prompt or one decoded token, without numpy's temporaries.
 *
 * A job's unit is one (batch entry, KV head): it writes the step's K rows (rotated) and V
 * rows into the cache at past .. past + q_len, then attends with every query head of the
 * group (q_heads / kv_heads of them) at every position, reading the cache in place:
 *     scores = scale * q k^T (+ a key's bias: Attention's padding penalties; softcap:
 *     tanh(scores / softcap) * softcap),
 *     keys allowed: j < valid, and when causal j <= position (a local window: the window's
 *     latest keys), probabilities exp(s - max) / sum over the allowed keys (plus exp(sink -
 *     max) with a sink), y = probabilities v.
 * Rotary embedding (halves or interleaved pairs) is kernels/contrib_attention.py's _rotate
 * op for op (no fused multiply-add), so that the cache rows are its bits (and onnxruntime's);
 * the products and the softmax sum in another order than numpy's BLAS (1e-7 apart).
 *
 * Query rows go GQA_TILE at a time. A prompt's tile multiplies a transposed copy of the
 * unit's keys ([head][keys], made once per unit): a broadcast query value times 16 keys per
 * instruction, no horizontal sums. A decoded token (a tile of the group's heads) reads each
 * key row once for the tile, a dot product per row. The weighted sum of V adds each value row
 * into the tile's accumulators.
 *
 * exp is Cephes-style (public-domain coefficients, as rnn.c's): range reduction and a degree-5
 * polynomial, about 1 ulp.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

/* Query rows attended together (sharing each key's and value's loads). */
#define GQA_TILE 4
/* Tiles of at least this many rows transpose the keys first (a prompt). */
#define GQA_TRANSPOSE_ROWS 8

static int gqa_ok(const gqa_task *t) {
    int64_t cells, rows, units;
    if (t->batch < 0 || t->q_len < 1 || t->q_heads < 1 || t->kv_heads < 1 || t->head < 1)
        return 0;
    if (t->q_heads % t->kv_heads || t->head > 4096) return 0;
    if (t->q_hs < 0 || t->kv_hs < 0 || t->y_bs < 0 || t->y_ss < 0 || t->y_hs < 0) return 0;
    if (t->kb_bs < 0 || t->kb_hs < 0) return 0;
    if (t->capacity < 0 || t->n_keys < 0 || t->n_keys > t->capacity) return 0;
    if (t->positions && (t->rotary < 2 || t->rotary > t->head || t->rotary % 2 || !t->cos ||
                         !t->sin || t->max_position < 1))
        return 0;
    if (!onyx_mul(t->batch, t->kv_heads, &units) || !onyx_mul(units, t->capacity, &rows) ||
        !onyx_mul(rows, t->head, &cells) || !onyx_mul(t->batch, t->q_len, &rows) ||
        !onyx_mul(rows, t->q_heads * t->head, &cells))
        return 0;
    return t->q && t->k && t->v && t->k_cache && t->v_cache && t->y && t->past && t->valid;
}

/* Unit b's rows and positions lie inside the cache and the cos / sin tables. */
static int entry_ok(const gqa_task *t, int64_t b) {
    if (t->past[b] < 0 || t->past[b] > t->capacity - t->q_len) return 0;
    if (t->positions)
        for (int64_t s = 0; s < t->q_len; s++) {
            int64_t p = t->positions[b * t->q_len + s];
            if (p < 0 || p >= t->max_position) return 0;
        }
    return 1;
}

/* x's head row rotated by position pos into out (dims past the rotary ones copied). */
static NO_FMA void rotate_row(const gqa_task *t, const float *x, int64_t pos, float *out) {
    memcpy(out, x, sizeof(float) * (size_t)t->head);
    if (!t->positions) return;
    int64_t half = t->rotary / 2;
    const float *c = t->cos + pos * half, *s = t->sin + pos * half;
    if (t->interleaved) {
        for (int64_t i = 0; i < half; i++) {
            float x1 = x[2 * i], x2 = x[2 * i + 1];
            out[2 * i] = x1 * c[i] - x2 * s[i];
            out[2 * i + 1] = x2 * c[i] + x1 * s[i];
        }
    } else {
        for (int64_t i = 0; i < half; i++) {
            float x1 = x[i], x2 = x[half + i];
            out[i] = x1 * c[i] - x2 * s[i];
            out[half + i] = x2 * c[i] + x1 * s[i];
        }
    }
}

/* The keys query row (s) of entry b may attend: [*lo, *hi). */
static void key_range(const gqa_task *t, int64_t b, int64_t s, int64_t *lo, int64_t *hi) {
    int64_t pos = t->past[b] + s, end = t->valid[b] < t->n_keys ? t->valid[b] : t->n_keys;
    int64_t start = 0;
    if (t->causal) {
        end = end < pos + 1 ? end : pos + 1;
        if (t->window > 0 && pos - t->window + 1 > 0) start = pos - t->window + 1;
    }
    *lo = start, *hi = end > start ? end : start;
}

/* Scores [lo, hi) of a row (already scaled) to probabilities in place; the rest of the row's
   range is not read. Returns 1 / the sum's share that the row's y gets (0: no key). */
static float softmax_row(const gqa_task *t, float *sc, int64_t lo, int64_t hi, int64_t h,
                         float (*exp_sum)(float *, int64_t, float),
                         float (*row_max)(const float *, int64_t)) {
    if (t->softcap > 0)
        for (int64_t j = lo; j < hi; j++) sc[j] = tanhf(sc[j] / t->softcap) * t->softcap;
    float top = row_max(sc + lo, hi - lo);
    float sink = t->sink ? t->sink[h] : -INFINITY;
    if (sink > top) top = sink;
    if (!isfinite(top)) top = 0.0f;
    float total = exp_sum(sc + lo, hi - lo, top);
    if (t->sink) total += expf(sink - top);
    if (total == 0.0f) total = 1.0f;
    for (int64_t j = lo; j < hi; j++) sc[j] /= total;
    return total;
}

/* Attention's additive key penalties (padding masks) on a row's scores [lo, hi). */
static void add_key_bias(const gqa_task *t, int64_t b, int64_t h, float *sc, int64_t lo,
                         int64_t hi) {
    if (!t->key_bias) return;
    const float *bias = t->key_bias + b * t->kb_bs + h * t->kb_hs;
    for (int64_t j = lo; j < hi; j++) sc[j] += bias[j];
}

/* The largest of x[0 .. n) (-inf for none; NaNs passed over). */
static float max_portable(const float *x, int64_t n) {
    float top = -INFINITY;
    for (int64_t j = 0; j < n; j++) top = x[j] > top ? x[j] : top;
    return top;
}

static float exp_sum_portable(float *x, int64_t n, float top) {
    float total = 0.0f;
    for (int64_t j = 0; j < n; j++) total += x[j] = expf(x[j] - top);
    return total;
}

/* ------------------------------------------------------------------------------ portable */

/* One unit's query rows, a row at a time (no vector kernels: any head size). */
static void attend_portable(const gqa_task *t, int64_t b, int64_t kvh, const float *kc,
                            const float *vc, float *qrow, float *sc) {
    int64_t group = t->q_heads / t->kv_heads, D = t->head;
    for (int64_t r = 0; r < group * t->q_len; r++) {
        int64_t s = r / group, h = kvh * group + r % group, lo, hi;
        const float *qx = t->q + b * t->q_bs + s * t->q_ss + h * t->q_hs;
        rotate_row(t, qx, t->positions ? t->positions[b * t->q_len + s] : 0, qrow);
        key_range(t, b, s, &lo, &hi);
        for (int64_t j = lo; j < hi; j++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++) acc += qrow[d] * kc[j * D + d];
            sc[j] = acc * t->scale;
        }
        add_key_bias(t, b, h, sc, lo, hi);
        softmax_row(t, sc, lo, hi, h, exp_sum_portable, max_portable);
        float *y = t->y + b * t->y_bs + s * t->y_ss + h * t->y_hs;
        memset(y, 0, sizeof(float) * (size_t)D);
        for (int64_t j = lo; j < hi; j++)
            for (int64_t d = 0; d < D; d++) y[d] += sc[j] * vc[j * D + d];
    }
}

/* ------------------------------------------------------------------------------ AVX-512 */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include "activation.h"
#define HAVE_GQA_AVX512 1
#define AVX512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline, target("avx512f")))


/* max_portable's result, 16 lanes at a time (vmaxps returns its second operand, the
   running maximum, where x is NaN: NaNs passed over as there). */
static AVX512 float max_avx512(const float *x, int64_t n) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        top = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + j), top);
    }
    return _mm512_reduce_max_ps(top);
}

/* x[j] = exp(x[j] - top), returning their sum (-inf scores give 0). */
static AVX512 float exp_sum_avx512(float *x, int64_t n, float top) {
    __m512 acc = _mm512_setzero_ps(), t = _mm512_set1_ps(top);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 e = onyx_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), t));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(x + j, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Scores of the tile's rows q [rows][D] against keys [k0, k1), a dot product per key and row
   (each key row read once for the tile); rows a constant where inlined (registers). */
INLINE void scores_dot_rows(const float *q, const int rows, const float *kc, int64_t D,
                            int64_t k0, int64_t k1, float scale, float *sc, int64_t ld) {
    for (int64_t j = k0; j < k1; j++) {
        const float *kj = kc + j * D;
        __m512 acc[GQA_TILE];
        for (int i = 0; i < rows; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            __m512 kv = _mm512_loadu_ps(kj + d);
            for (int i = 0; i < rows; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * D + d), kv, acc[i]);
        }
        for (int i = 0; i < rows; i++) sc[i * ld + j] = _mm512_reduce_add_ps(acc[i]) * scale;
    }
}

static AVX512 void scores_dot(const float *q, int rows, const float *kc, int64_t D, int64_t k0,
                              int64_t k1, float scale, float *sc, int64_t ld) {
    switch (rows) {
    case 1: scores_dot_rows(q, 1, kc, D, k0, k1, scale, sc, ld); break;
    case 2: scores_dot_rows(q, 2, kc, D, k0, k1, scale, sc, ld); break;
    case 3: scores_dot_rows(q, 3, kc, D, k0, k1, scale, sc, ld); break;
    default: scores_dot_rows(q, GQA_TILE, kc, D, k0, k1, scale, sc, ld); break;
    }
}

/* The same for all GQA_TILE rows from the transposed keys kt [D][ld_t] (keys [k0, k1), k0 a
   multiple of 16; kt zero-padded to ld_t, a multiple of 16 past the keys): a broadcast query
   value times 16 keys, two blocks of 16 keys at a time while they last (8 accumulators keep
   both FMA pipes busy where 4 wait on each other's latency). Each score sums over d in the
   same order either way. */
static AVX512 void scores_transposed(const float *q, const float *kt, int64_t ld_t, int64_t D,
                                     int64_t k0, int64_t k1, float scale, float *sc,
                                     int64_t ld) {
    __m512 s = _mm512_set1_ps(scale);
    int64_t j = k0;
    for (; j + 16 < k1; j += 32) {
        __mmask16 m = k1 - j >= 32 ? 0xffff : (__mmask16)((1u << (k1 - j - 16)) - 1);
        __m512 a0[GQA_TILE], a1[GQA_TILE];
        for (int i = 0; i < GQA_TILE; i++) a0[i] = a1[i] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d++) {
            __m512 kv0 = _mm512_loadu_ps(kt + d * ld_t + j);
            __m512 kv1 = _mm512_loadu_ps(kt + d * ld_t + j + 16);
            for (int i = 0; i < GQA_TILE; i++) {
                __m512 qv = _mm512_set1_ps(q[i * D + d]);
                a0[i] = _mm512_fmadd_ps(qv, kv0, a0[i]);
                a1[i] = _mm512_fmadd_ps(qv, kv1, a1[i]);
            }
        }
        for (int i = 0; i < GQA_TILE; i++) {
            _mm512_storeu_ps(sc + i * ld + j, _mm512_mul_ps(a0[i], s));
            _mm512_mask_storeu_ps(sc + i * ld + j + 16, m, _mm512_mul_ps(a1[i], s));
        }
    }
    for (; j < k1; j += 16) {
        __mmask16 m = k1 - j >= 16 ? 0xffff : (__mmask16)((1u << (k1 - j)) - 1);
        __m512 acc[GQA_TILE];
        for (int i = 0; i < GQA_TILE; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d++) {
            __m512 kv = _mm512_loadu_ps(kt + d * ld_t + j);
            for (int i = 0; i < GQA_TILE; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i * D + d]), kv, acc[i]);
        }
        for (int i = 0; i < GQA_TILE; i++)
            _mm512_mask_storeu_ps(sc + i * ld + j, m, _mm512_mul_ps(acc[i], s));
    }
}

/* y_i = sum over j in [k0, k1) of p_i[j] v_j for the tile's rows (p 0 outside a row's keys),
   nv vectors of 16 columns from d0; rows and nv constants where inlined. */
INLINE void weighted_pass(const float *sc, int64_t ld, const int rows, int64_t k0, int64_t k1,
                          const float *vc, int64_t D, int64_t d0, const int nv, float **y) {
    __m512 acc[GQA_TILE][4];
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < nv; c++) acc[i][c] = _mm512_setzero_ps();
    for (int64_t j = k0; j < k1; j++) {
        const float *vj = vc + j * D + d0;
        __m512 v[4];
        for (int c = 0; c < nv; c++) v[c] = _mm512_loadu_ps(vj + 16 * c);
        for (int i = 0; i < rows; i++) {
            __m512 p = _mm512_set1_ps(sc[i * ld + j]);
            for (int c = 0; c < nv; c++) acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < nv; c++) _mm512_storeu_ps(y[i] + d0 + 16 * c, acc[i][c]);
}

#define WEIGHTED_NV(ROWS)                                                                    \
    for (int64_t d0 = 0; d0 < D; d0 += 64) {                                                 \
        int nv = D - d0 >= 64 ? 4 : (int)((D - d0) / 16);                                     \
        if (nv == 4) weighted_pass(sc, ld, ROWS, k0, k1, vc, D, d0, 4, y);                     \
        else if (nv == 3) weighted_pass(sc, ld, ROWS, k0, k1, vc, D, d0, 3, y);                \
        else if (nv == 2) weighted_pass(sc, ld, ROWS, k0, k1, vc, D, d0, 2, y);                \
        else weighted_pass(sc, ld, ROWS, k0, k1, vc, D, d0, 1, y);                             \
    }

static AVX512 void weighted_values(const float *sc, int64_t ld, int rows, int64_t k0,
                                   int64_t k1, const float *vc, int64_t D, float **y) {
    switch (rows) {
    case 1: WEIGHTED_NV(1) break;
    case 2: WEIGHTED_NV(2) break;
    case 3: WEIGHTED_NV(3) break;
    default: WEIGHTED_NV(GQA_TILE) break;
    }
}
#undef WEIGHTED_NV

/* One unit's query rows, GQA_TILE at a time; kt: the transposed keys (prompts) or NULL. */
static AVX512 void attend_avx512(const gqa_task *t, int64_t b, int64_t kvh, const float *kc,
                                 const float *vc, const float *kt, int64_t ld_t, float *qbuf,
                                 float *sc, int64_t ld) {
    int64_t group = t->q_heads / t->kv_heads, D = t->head, rows_all = group * t->q_len;
    for (int64_t r0 = 0; r0 < rows_all; r0 += GQA_TILE) {
        int rows = rows_all - r0 < GQA_TILE ? (int)(rows_all - r0) : GQA_TILE;
        int64_t lo[GQA_TILE], hi[GQA_TILE], heads[GQA_TILE], k0 = INT64_MAX, k1 = 0;
        float *y[GQA_TILE];
        memset(qbuf, 0, sizeof(float) * (size_t)(GQA_TILE * D)); /* (padding rows: zeros) */
        for (int i = 0; i < rows; i++) {
            int64_t r = r0 + i, s = r / group, h = kvh * group + r % group;
            const float *qx = t->q + b * t->q_bs + s * t->q_ss + h * t->q_hs;
            rotate_row(t, qx, t->positions ? t->positions[b * t->q_len + s] : 0, qbuf + i * D);
            key_range(t, b, s, &lo[i], &hi[i]);
            heads[i] = h;
            y[i] = t->y + b * t->y_bs + s * t->y_ss + h * t->y_hs;
            if (lo[i] < hi[i]) k0 = lo[i] < k0 ? lo[i] : k0, k1 = hi[i] > k1 ? hi[i] : k1;
        }
        if (k0 >= k1) k0 = k1 = 0;
        if (kt && k0 < k1)
            scores_transposed(qbuf, kt, ld_t, D, k0 & ~(int64_t)15, k1, t->scale, sc, ld);
        else if (k0 < k1)
            scores_dot(qbuf, rows, kc, D, k0, k1, t->scale, sc, ld);
        for (int i = 0; i < rows; i++) { /* probabilities, 0 outside the row's keys */
            float *row = sc + i * ld;
            add_key_bias(t, b, heads[i], row, lo[i], hi[i]);
            softmax_row(t, row, lo[i], hi[i], heads[i], exp_sum_avx512, max_avx512);
            for (int64_t j = k0; j < lo[i] && j < k1; j++) row[j] = 0.0f;
            for (int64_t j = hi[i] > k0 ? hi[i] : k0; j < k1; j++) row[j] = 0.0f;
        }
        weighted_values(sc, ld, rows, k0, k1, vc, D, y);
    }
}

/* kt [D][ld_t] = the first n keys of kc [n][D] transposed (zeros past n): 16 keys' values of
   one dim a gather (the scalar copy was a fifth of a short prompt's attention). */
static AVX512 void transpose_keys(const float *kc, int64_t n, int64_t D, float *kt,
                                  int64_t ld_t) {
    for (int64_t d = 0; d < D; d++)
        for (int64_t j = n; j < ld_t; j++) kt[d * ld_t + j] = 0.0f;
    const __m512i step = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)D)); /* (D <= 4096: gqa_ok) */
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __mmask16 m = n - j0 >= 16 ? 0xffff : (__mmask16)((1u << (n - j0)) - 1);
        const float *rows = kc + j0 * D;
        for (int64_t d = 0; d < D; d++)
            _mm512_mask_storeu_ps(
                kt + d * ld_t + j0, m,
                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, rows + d, 4));
    }
}
#endif

/* ------------------------------------------------------------------------------ entry */

/* Units begin .. end: (batch entry, KV head) pairs, b * kv_heads + kvh. */
EXPORT int onyx_gqa_range(const void *p, int64_t begin, int64_t end) {
    const gqa_task *t = p;
    if (!gqa_ok(t) || begin < 0 || end > t->batch * t->kv_heads || begin > end)
        return ONYX_INVALID;
    for (int64_t u = begin; u < end; u++)
        if (!entry_ok(t, u / t->kv_heads)) return ONYX_INVALID;
    int64_t D = t->head, ld = (t->n_keys + 15) / 16 * 16 + 16;
    int64_t group = t->q_heads / t->kv_heads;
    int transpose = group * t->q_len >= GQA_TRANSPOSE_ROWS;
    float *qbuf = malloc(sizeof(float) * (size_t)(GQA_TILE * D));
    float *sc = malloc(sizeof(float) * (size_t)(GQA_TILE * ld));
    float *kt = transpose ? malloc(sizeof(float) * (size_t)(D * ld)) : NULL;
    int status = !qbuf || !sc || (transpose && !kt) ? ONYX_NOMEM : 0;
    for (int64_t u = begin; !status && u < end; u++) {
        int64_t b = u / t->kv_heads, kvh = u % t->kv_heads;
        float *kc = t->k_cache + u * t->capacity * D, *vc = t->v_cache + u * t->capacity * D;
        for (int64_t s = 0; s < t->q_len; s++) { /* the step's rows into the cache */
            int64_t row = t->past[b] + s;
            const float *kx = t->k + b * t->kv_bs + s * t->kv_ss + kvh * t->kv_hs;
            const float *vx = t->v + b * t->kv_bs + s * t->kv_ss + kvh * t->kv_hs;
            /* (rows already in place: Attention's 4-D keys and values serve as the cache) */
            if (kx != kc + row * D)
                rotate_row(t, kx, t->positions ? t->positions[b * t->q_len + s] : 0,
                           kc + row * D);
            if (vx != vc + row * D) memcpy(vc + row * D, vx, sizeof(float) * (size_t)D);
        }
#ifdef HAVE_GQA_AVX512
        if ((onyx_isa() & ONYX_ISA_AVX512) && D % 16 == 0) {
            int64_t keys = 0, lo, hi;
            for (int64_t s = 0; transpose && s < t->q_len; s++) {
                key_range(t, b, s, &lo, &hi);
                keys = hi > keys ? hi : keys;
            }
            if (transpose) transpose_keys(kc, keys, D, kt, ld);
            attend_avx512(t, b, kvh, kc, vc, transpose ? kt : NULL, ld, qbuf, sc, ld);
            continue;
        }
#endif
        attend_portable(t, b, kvh, kc, vc, qbuf, sc);
    }
    free(qbuf), free(sc), free(kt);
    return status;
}

/* ------------------------------------------------------------------- RMS normalization */

/* Rows begin .. end: v = x + skip + bias (stored as sum when asked), inv = 1 / sqrt(mean(v^2)
   + epsilon), y = v * inv * gamma, each product rounded as contrib_norm.py's numpy passes
   (the mean's sum in another order: 1e-7 apart). */
EXPORT CLONES NO_FMA int onyx_rms_range(const void *p, int64_t begin, int64_t end) {
    const rms_task *t = p;
    if (t->size < 1 || !t->x || !t->gamma || !t->y || !t->inv || (t->skip && !t->sum))
        return ONYX_INVALID;
    int64_t n = t->size;
    float per = (float)(1.0 / (double)n);
    for (int64_t r = begin; r < end; r++) {
        const float *x = t->x + r * n, *v = x;
        float *y = t->y + r * n;
        if (t->skip) {
            float *sum = t->sum + r * n;
            const float *s = t->skip + r * n;
            for (int64_t i = 0; i < n; i++) sum[i] = x[i] + s[i];
            if (t->bias)
                for (int64_t i = 0; i < n; i++) sum[i] = sum[i] + t->bias[i];
            v = sum;
        }
        float q[16] = {0}, ms = 0.0f;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) q[j] += v[i + j] * v[i + j];
        for (int j = 0; j < 16; j++) ms += q[j];
        for (; i < n; i++) ms += v[i] * v[i];
        ms = ms * per + t->epsilon;
        float inv = 1.0f / sqrtf(ms);
        for (i = 0; i < n; i++) y[i] = (v[i] * inv) * t->gamma[i];
        t->inv[r] = inv;
    }
    return 0;
}

/* ----------------------------------------------------------------------- rotary (halves) */

/* Rows begin .. end: y = x * cos + concat(-x2, x1) * sin, x1 and x2 the row's halves and cos,
   sin the rows r % period of their tables: each product and sum rounded as the exported
   Mul, Neg, Concat, Mul, Add chain's (x1 c - x2 s is x1 c + (-x2) s exactly). */
EXPORT CLONES NO_FMA int onyx_rotary_range(const void *p, int64_t begin, int64_t end) {
    const rotary_task *t = p;
    if (t->size < 2 || t->size % 2 || t->period < 1 || !t->x || !t->y || !t->cos || !t->sin)
        return ONYX_INVALID;
    int64_t n = t->size, h = n / 2;
    for (int64_t r = begin; r < end; r++) {
        const float *x = t->x + r * n;
        const float *c = t->cos + (r % t->period) * n, *s = t->sin + (r % t->period) * n;
        float *y = t->y + r * n;
        for (int64_t i = 0; i < h; i++) y[i] = x[i] * c[i] - x[h + i] * s[i];
        for (int64_t i = h; i < n; i++) y[i] = x[i] * c[i] + x[i - h] * s[i];
    }
    return 0;
}

/* ------------------------------------------------------------------------ SiLU (gated) */

#ifdef HAVE_GQA_AVX512
static AVX512 void silu_avx512(const silu_task *t, int64_t begin, int64_t end) {
    __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = begin; i < end; i += 16) {
        __mmask16 m = end - i >= 16 ? 0xffff : (__mmask16)((1u << (end - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, t->g + i);
        __m512 e = onyx_exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 y = _mm512_div_ps(g, _mm512_add_ps(one, e));
        if (t->u) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, t->u + i));
        _mm512_mask_storeu_ps(t->y + i, m, y);
    }
}
#endif

/* Elements begin .. end: y = g / (1 + e^-g) [* u] (e^-g overflowing to inf gives -0). */
EXPORT int onyx_silu_range(const void *p, int64_t begin, int64_t end) {
    const silu_task *t = p;
    if (!t->g || !t->y || begin < 0 || begin > end) return ONYX_INVALID;
#ifdef HAVE_GQA_AVX512
    if (onyx_isa() & ONYX_ISA_AVX512) {
        silu_avx512(t, begin, end);
        return 0;
    }
#endif
    for (int64_t i = begin; i < end; i++) {
        float y = t->g[i] / (1.0f + expf(-t->g[i]));
        t->y[i] = t->u ? y * t->u[i] : y;
    }
    return 0;
}
