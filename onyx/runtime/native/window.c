/* 2-D max and average pooling of float32 NCHW planes (part of the _kernels library).
 *
 * numpy pools a window's offsets one whole-tensor pass at a time (some twenty passes for a
 * 3x3 average pool). Here a plane is padded
 * once into a buffer that stays in cache, and each output row is computed 16 outputs at a time
 * with the window's offsets added in registers (AVX-512; elsewhere as passes over the row).
 *
 * The values are pool.py's to the bit, as it computes them on its padded copy: padding is 0
 * for the average (no sum changes but for the sign of a zero, which the final + 0 settles, as
 * onnxruntime's sum from zero) and -inf for the max.
 * - Average, by_columns (AveragePool 7-18 with a last stride of 1 or 2, onnxruntime's MLAS
 *   kernel): each kernel column summed down its rows, then the columns left to right; else
 *   row-major over the kernel offsets. Then + 0, divided by the count: the window's cells in
 *   the image, or with count_include_pad those inside the explicit pads (not the cells ceil
 *   mode adds beyond them).
 * - Max: the first offset's value, then numpy's maximum with each other one (a NaN stays);
 *   on AVX-512 separably, rows then columns, read in place (max_row): the same values, a
 *   NaN where the window has one, though a tie of -0 and +0 may keep the other zero.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"


/* floor(a / b) for b > 0. */
static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

/* How many of a window's k offsets (input o * s - begin + j * d, j < k) fall in [from, to):
   counted, not looped over (k is an attribute, bounded only by the padded extent). */
static int64_t inside(int64_t o, int64_t s, int64_t begin, int64_t d, int64_t k, int64_t from,
                      int64_t to) {
    int64_t base = o * s - begin;
    int64_t first = -floor_div(base - from, d);    /* ceil((from - base) / d) */
    int64_t end = -floor_div(base - to, d);        /* ceil((to - base) / d) */
    first = first > 0 ? first : 0;
    end = end < k ? end : k;
    return end > first ? end - first : 0;
}

/* The plane x padded into P (Hp x Wp): row r, column c of P is x's (r - top, c - left); rows
   copied whole, only the border filled. */
static inline __attribute__((always_inline)) void
pad_plane(const pool2d *t, const float *x, float *P, int64_t Hp, int64_t Wp, float fill) {
    int64_t left = t->left < Wp ? t->left : Wp;
    int64_t n = Wp - left < t->W ? Wp - left : t->W; /* x's columns that P holds */
    for (int64_t r = 0; r < Hp; r++) {
        float *row = P + r * Wp;
        int64_t ih = r - t->top;
        if (ih < 0 || ih >= t->H) {
            for (int64_t c = 0; c < Wp; c++) row[c] = fill;
            continue;
        }
        for (int64_t c = 0; c < left; c++) row[c] = fill;
        memcpy(row + left, x + ih * t->W, (size_t)(n > 0 ? n : 0) * sizeof(float));
        for (int64_t c = left + (n > 0 ? n : 0); c < Wp; c++) row[c] = fill;
    }
}

/* acc[ow] op= P's row at column ow * sw + shift, for every output ow. */
#define ROW_PASS(name, expr)                                                                 \
    static inline void name(float *restrict acc, const float *restrict row, int64_t OW,      \
                            int64_t sw) {                                                    \
        if (sw == 1)                                                                         \
            for (int64_t ow = 0; ow < OW; ow++) {                                            \
                float a = acc[ow], v = row[ow];                                              \
                acc[ow] = expr;                                                              \
            }                                                                                \
        else                                                                                 \
            for (int64_t ow = 0; ow < OW; ow++) {                                            \
                float a = acc[ow], v = row[ow * sw];                                         \
                acc[ow] = expr;                                                              \
            }                                                                                \
    }
ROW_PASS(row_add, a + v)
ROW_PASS(row_max, (a == a && (v > a || v != v)) ? v : a) /* numpy's maximum: NaN wins */
#undef ROW_PASS

static inline void row_copy(float *restrict acc, const float *restrict row, int64_t OW,
                            int64_t sw) {
    for (int64_t ow = 0; ow < OW; ow++) acc[ow] = row[ow * sw];
}

/* One output row (its window's top row of P at ``top``) as whole-row passes, the portable
   path; rows x count_w[ow]: how many cells of output ow's window count. */
static inline __attribute__((always_inline)) void
pool_row_passes(const pool2d *t, const float *top, int64_t Wp, float *out, float *acc,
                float *column, const float *count_w, float rows) {
    if (!t->average || !t->by_columns) { /* row-major over the offsets */
        for (int64_t ky = 0; ky < t->kh; ky++)
            for (int64_t kx = 0; kx < t->kw; kx++) {
                const float *row = top + ky * t->dh * Wp + kx * t->dw;
                if (ky == 0 && kx == 0)
                    row_copy(acc, row, t->OW, t->sw);
                else if (t->average)
                    row_add(acc, row, t->OW, t->sw);
                else
                    row_max(acc, row, t->OW, t->sw);
            }
    } else { /* each kernel column down its rows, then the columns left to right */
        for (int64_t kx = 0; kx < t->kw; kx++) {
            float *sums = kx == 0 ? acc : column;
            for (int64_t ky = 0; ky < t->kh; ky++) {
                const float *row = top + ky * t->dh * Wp + kx * t->dw;
                if (ky == 0)
                    row_copy(sums, row, t->OW, t->sw);
                else
                    row_add(sums, row, t->OW, t->sw);
            }
            if (kx > 0) row_add(acc, column, t->OW, 1);
        }
    }
    if (!t->average) {
        for (int64_t ow = 0; ow < t->OW; ow++) out[ow] = acc[ow];
        return;
    }
    for (int64_t ow = 0; ow < t->OW; ow++) out[ow] = (acc[ow] + 0.0f) / (rows * count_w[ow]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define HAVE_POOL_AVX512 1

static AVX512 inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* The n (<= 16) values row[0], row[sw], ... of one offset for 16 outputs. */
static AVX512 inline __m512 taps16(const float *row, int64_t sw, int64_t n) {
    if (sw == 1) return _mm512_maskz_loadu_ps(first_lanes(n), row);
    if (sw == 2) { /* two loads and the even lanes */
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                              4, 2, 0);
        __m512 a = _mm512_maskz_loadu_ps(first_lanes(2 * n - 1), row);
        __m512 b = _mm512_maskz_loadu_ps(first_lanes(2 * n - 17), row + 16);
        return _mm512_permutex2var_ps(a, even, b);
    }
    __m512i at = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)sw));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), first_lanes(n), at, row, 4);
}

/* The first n of 16 window results acc to out: an average's sums + 0, divided by their
   counts (rows times count_w's columns). */
static AVX512 inline __attribute__((always_inline)) void
store_outputs(float *out, int64_t n, __m512 acc, const float *count_w, float rows,
              const int average) {
    __mmask16 live = first_lanes(n);
    if (average) {
        __m512 count = _mm512_mul_ps(_mm512_set1_ps(rows), _mm512_maskz_loadu_ps(live, count_w));
        acc = _mm512_div_ps(_mm512_add_ps(acc, _mm512_setzero_ps()), count);
    }
    _mm512_mask_storeu_ps(out, live, acc);
}

/* One output row, 16 outputs at a time with the window's offsets added (or maxed) in
   registers: the same operations per output, in the same order, as pool_row_passes. */
static AVX512 inline __attribute__((always_inline)) void
pool_row(const pool2d *t, const float *top, int64_t Wp, float *out, const float *count_w,
         float rows, const int64_t kh, const int64_t kw, const int64_t sw, const int average,
         const int by_columns) {
    int64_t dh = t->dh * Wp, dw = t->dw, OW = t->OW;
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        int64_t n = OW - ow0 < 16 ? OW - ow0 : 16;
        const float *base = top + ow0 * sw;
        __m512 acc = _mm512_setzero_ps();
        if (average && by_columns) {
            for (int64_t kx = 0; kx < kw; kx++) {
                __m512 c = taps16(base + kx * dw, sw, n);
                for (int64_t ky = 1; ky < kh; ky++)
                    c = _mm512_add_ps(c, taps16(base + ky * dh + kx * dw, sw, n));
                acc = kx == 0 ? c : _mm512_add_ps(acc, c);
            }
        } else {
            for (int64_t ky = 0; ky < kh; ky++)
                for (int64_t kx = 0; kx < kw; kx++) {
                    __m512 v = taps16(base + ky * dh + kx * dw, sw, n);
                    if (ky == 0 && kx == 0) {
                        acc = v;
                    } else if (average) {
                        acc = _mm512_add_ps(acc, v);
                    } else { /* numpy's maximum: v where acc is a number and v > acc or NaN */
                        __mmask16 number = _mm512_cmp_ps_mask(acc, acc, _CMP_EQ_OQ);
                        __mmask16 take = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) |
                                         _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                        acc = _mm512_mask_mov_ps(acc, number & take, v);
                    }
                }
        }
        store_outputs(out + ow0, n, acc, count_w + ow0, rows, average);
    }
}

/* max(a, b) where both are numbers, else a NaN (a + b): a window with a NaN pools to NaN
   whatever the order of its cells (their zeros' signs aside, the values are the order's). */
static AVX512 inline __m512 nan_max(__m512 a, __m512 b) {
    return _mm512_mask_add_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b);
}

/* Whether the n floats at x hold a NaN: a max pool of a plane without one takes the plain
   vector max (one instruction where nan_max is three). */
static AVX512 int has_nan(const float *x, int64_t n) {
    __mmask16 seen = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) /* (an unordered compare: a NaN on either side) */
        seen |= _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16),
                                   _CMP_UNORD_Q);
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(first_lanes(n - i), x + i);
        seen |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    return seen != 0;
}

/* nan_max where the plane may hold a NaN, else the plain max (the same values: a tie of -0
   and +0 may keep either zero, as the separable order already may). */
static AVX512 inline __m512 window_max(__m512 a, __m512 b, const int nan) {
    return nan ? nan_max(a, b) : _mm512_max_ps(a, b);
}

/* Output row oh of a max pool of plane x, separably: the window's kh rows maxed column by
   column into vrow (every column the row's windows read, each once, in whole vectors), then
   each output's kw columns of vrow; where pool_row read the kh x kw offsets of every window,
   each a strided load and a NaN-aware compare. The rows are read in place: cells in the
   padding are -inf (lanes outside the row, rows outside the plane skipped), as on the padded
   copy, which a max pool does not make. nan: whether the plane holds a NaN. */
static AVX512 inline __attribute__((always_inline)) void
max_row(const pool2d *t, const float *x, int64_t oh, float *out, float *vrow, const int64_t kh,
        const int64_t kw, const int64_t sw, const int nan) {
    int64_t OW = t->OW, cols = (OW - 1) * sw + (kw - 1) * t->dw + 1;
    const __m512 low = _mm512_set1_ps(-INFINITY);
    for (int64_t c = 0; c < cols; c += 16) {
        int64_t ic = c - t->left; /* the input column of lane 0 */
        __mmask16 in = first_lanes(t->W - ic) & (__mmask16)(ic >= 0 ? 0xFFFF : 0xFFFF << -ic);
        if (ic < -16) in = 0;
        __m512 v = low;
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t ih = oh * t->sh - t->top + ky * t->dh;
            if (ih < 0 || ih >= t->H) continue;
            v = window_max(v, _mm512_mask_loadu_ps(low, in, x + ih * t->W + ic), nan);
        }
        _mm512_storeu_ps(vrow + c, v); /* (vrow has a vector's slack) */
    }
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        int64_t n = OW - ow0 < 16 ? OW - ow0 : 16;
        const float *base = vrow + ow0 * sw;
        __m512 acc = taps16(base, sw, n);
        for (int64_t kx = 1; kx < kw; kx++)
            acc = window_max(acc, taps16(base + kx * t->dw, sw, n), nan);
        _mm512_mask_storeu_ps(out + ow0, first_lanes(n), acc);
    }
}

static AVX512 void max_row_avx512(const pool2d *t, const float *x, int64_t oh, float *out,
                                  float *vrow, int nan) {
#define CASE(K, S)                                                                           \
    if (t->kh == K && t->kw == K && t->sw == S)                                              \
        return nan ? max_row(t, x, oh, out, vrow, K, K, S, 1)                                \
                   : max_row(t, x, oh, out, vrow, K, K, S, 0);
    CASE(2, 2) CASE(3, 2) CASE(2, 1) CASE(3, 1)
#undef CASE
    if (nan) return max_row(t, x, oh, out, vrow, t->kh, t->kw, t->sw, 1);
    max_row(t, x, oh, out, vrow, t->kh, t->kw, t->sw, 0);
}

/* Each output row's window rows inside the plane: how many (spans[2 oh]) and the first
   (spans[2 oh + 1]; every dh-th row on). The others are padding, which adds 0 to a sum (no
   sum changes but for the sign of a zero, which the average's final + 0 settles) and never
   wins a max (-inf): skipped. The same for every plane: worked out once a call. */
static void window_rows(const pool2d *t, int64_t *spans) {
    for (int64_t oh = 0; oh < t->OH; oh++) {
        int64_t base = oh * t->sh - t->top;
        int64_t skip = base < 0 ? (-base + t->dh - 1) / t->dh : 0; /* (rows above the plane) */
        if (t->dh == 1) { /* (the usual: no divisions) */
            int64_t from = base < 0 ? 0 : base, to = base + t->kh < t->H ? base + t->kh : t->H;
            spans[2 * oh] = to > from ? to - from : 0;
        } else
            spans[2 * oh] = inside(oh, t->sh, t->top, t->dh, t->kh, 0, t->H);
        spans[2 * oh + 1] = base + skip * t->dh;
    }
}

/* The geometry the separable rows read (pool2d's, copied into locals: the compiler reloaded
   t's fields after every store, which may alias them). */
typedef struct {
    int64_t W, left, OW, step; /* step: floats from one window row to the next (dh rows) */
} row_shape;

/* Column block c (16 columns from padded column c) of an output row's nr window rows
   (window_rows'), reduced down: the cells of each column summed (average, in pool_row's
   order) or maxed (nan: window_max's); lanes outside the row give 0 to a sum and -inf to a
   max. Read in place by masked loads. */
static AVX512 inline __attribute__((always_inline)) __m512
column_block(const float *rows, const int64_t nr, int64_t c, row_shape s, const int average,
             const int nan) {
    int64_t ic = c - s.left; /* the input column of lane 0 */
    __mmask16 in = first_lanes(s.W - ic) & (__mmask16)~first_lanes(-ic);
    const __m512 fill = average ? _mm512_setzero_ps() : _mm512_set1_ps(-INFINITY);
    if (nr == 0) return fill;
    __m512 v = _mm512_mask_loadu_ps(fill, in, rows + ic);
    for (int64_t i = 1; i < nr; i++) {
        __m512 cell = _mm512_mask_loadu_ps(fill, in, rows + i * s.step + ic);
        v = average ? _mm512_add_ps(v, cell) : window_max(v, cell, nan);
    }
    return v;
}

/* An output row of a pool with unit column stride and dilation (kw <= 16), separably and in
   registers: each block of 16 columns reduced down its window rows once (column_block), and
   output ow's kw columns taken from two adjacent blocks by a lane shuffle; where max_row
   stored the column maxima and read them back at unaligned offsets (a stalled store
   forwarding each) and pool_row read every window cell. The average's column sums are added
   left to right, then + 0 and divided by the count: pool_row's by_columns operations in its
   order, so its bits. */
static AVX512 inline __attribute__((always_inline)) void
row_s1(const float *rows, const int64_t nr, row_shape s, float *out, const float *count_w,
       float count_h, const int64_t kw, const int average, const int nan) {
    __m512i shift[16]; /* lanes kx .. kx + 15 of (lo, hi) */
    for (int64_t kx = 1; kx < kw; kx++)
        shift[kx] = _mm512_add_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((int)kx));
    __m512 lo = column_block(rows, nr, 0, s, average, nan);
    for (int64_t ow0 = 0; ow0 < s.OW; ow0 += 16) {
        int64_t n = s.OW - ow0 < 16 ? s.OW - ow0 : 16;
        __m512 hi = kw > 1 ? column_block(rows, nr, ow0 + 16, s, average, nan) : lo;
        __m512 acc = lo;
        for (int64_t kx = 1; kx < kw; kx++) {
            __m512 tap = _mm512_permutex2var_ps(lo, shift[kx], hi);
            acc = average ? _mm512_add_ps(acc, tap) : window_max(acc, tap, nan);
        }
        store_outputs(out + ow0, n, acc, count_w + ow0, count_h, average);
        lo = kw > 1 ? hi : column_block(rows, nr, ow0 + 16, s, average, nan);
    }
}

/* An output row of a pool with unit strides and dilations whose windows' columns all fit one
   vector (OW + kw - 1 <= 16: a 7x7 or 14x14 plane, padded): row_s1 with its one column block
   and the fill for the next (row_s1 reduced a second block of cells wholly past the row, and
   set up its loop and shifts, for every row of such planes). */
static AVX512 inline __attribute__((always_inline)) void
row_narrow(const float *rows, const int64_t nr, row_shape s, float *out,
           const float *count_w, float count_h, const int64_t kw, const int average,
           const int nan) {
    const __m512 fill = average ? _mm512_setzero_ps() : _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 column = column_block(rows, nr, 0, s, average, nan), acc = column;
    for (int64_t kx = 1; kx < kw; kx++) {
        __m512i at = _mm512_add_epi32(lane, _mm512_set1_epi32((int)kx));
        __m512 tap = _mm512_permutex2var_ps(column, at, fill);
        acc = average ? _mm512_add_ps(acc, tap) : window_max(acc, tap, nan);
    }
    store_outputs(out, s.OW, acc, count_w, count_h, average);
}

static AVX512 int narrow_fits(const pool2d *t) {
    return t->sh == 1 && t->sw == 1 && t->dh == 1 && t->dw == 1 && t->OW + t->kw - 1 <= 16 &&
           (!t->average || t->by_columns);
}

/* An output row of a pool with column stride 2 and a window 2 or 3 columns wide (unit
   dilation), as row_s1: 16 outputs read columns 2 ow + kx of three adjacent blocks (the third
   the next 16 outputs' first), each tap one lane shuffle of the first two (the third column's
   last lane broadcast from the third block). pool_row's order and bits for the average. */
static AVX512 inline __attribute__((always_inline)) void
row_s2(const float *rows, const int64_t nr, row_shape s, float *out, const float *count_w,
       float count_h, const int64_t kw, const int average, const int nan) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
    __m512 a = column_block(rows, nr, 0, s, average, nan);
    for (int64_t ow0 = 0; ow0 < s.OW; ow0 += 16) {
        int64_t n = s.OW - ow0 < 16 ? s.OW - ow0 : 16;
        __m512 b = column_block(rows, nr, 2 * ow0 + 16, s, average, nan);
        __m512 c = column_block(rows, nr, 2 * ow0 + 32, s, average, nan);
        __m512 acc = _mm512_permutex2var_ps(a, even, b);
        __m512 tap = _mm512_permutex2var_ps(a, _mm512_add_epi32(even, one), b);
        acc = average ? _mm512_add_ps(acc, tap) : window_max(acc, tap, nan);
        if (kw == 3) { /* (lane 15's index wraps to a's lane 0: replaced by c's) */
            tap = _mm512_permutex2var_ps(a, _mm512_add_epi32(even, two), b);
            tap = _mm512_mask_broadcastss_ps(tap, (__mmask16)0x8000, _mm512_castps512_ps128(c));
            acc = average ? _mm512_add_ps(acc, tap) : window_max(acc, tap, nan);
        }
        store_outputs(out + ow0, n, acc, count_w + ow0, count_h, average);
        a = c;
    }
}

/* Every output row of a plane by ROW (row_s1, row_s2 or row_narrow), then return. The mode
   (average, NaN-aware max, max) and the window's sizes are constants where they are, and so
   is the row count of a window wholly inside the plane (the usual row), so that each call of
   ROW is specialised and its column loads unrolled. */
#define PLANE_ROWS(ROW, KH, KW, AVG, NAN)                                                    \
    {                                                                                        \
        for (int64_t oh = 0; oh < t->OH; oh++) {                                             \
            int64_t nr = spans[2 * oh];                                                      \
            const float *rows = x + spans[2 * oh + 1] * s.W;                                 \
            float *out = y + oh * s.OW;                                                      \
            if (nr == KH)                                                                    \
                ROW(rows, KH, s, out, count_w, count_h[oh], KW, AVG, NAN);            \
            else                                                                             \
                ROW(rows, nr, s, out, count_w, count_h[oh], KW, AVG, NAN);            \
        }                                                                                    \
        return;                                                                              \
    }
#define PLANE_MODES(ROW, KH, KW)                                                             \
    {                                                                                        \
        if (t->average) PLANE_ROWS(ROW, KH, KW, 1, 0)                                        \
        if (nan) PLANE_ROWS(ROW, KH, KW, 0, 1)                                               \
        PLANE_ROWS(ROW, KH, KW, 0, 0)                                                        \
    }
#define PLANE_SQUARE(ROW, K)                                                                 \
    if (t->kh == K && t->kw == K) PLANE_MODES(ROW, K, K)
#define PLANE_ARGS                                                                           \
    const pool2d *t, const float *x, float *y, const float *count_w, const float *count_h,   \
        const int64_t *spans, int nan

/* row_s1 for every output row of a plane, the usual windows' sizes as constants. */
static AVX512 void plane_s1_avx512(PLANE_ARGS) {
    row_shape s = {t->W, t->left, t->OW, t->dh * t->W};
    PLANE_SQUARE(row_s1, 3)
    PLANE_SQUARE(row_s1, 2)
    PLANE_MODES(row_s1, t->kh, t->kw)
}

/* row_s2 for every output row of a plane (kw 2 or 3). */
static AVX512 void plane_s2_avx512(PLANE_ARGS) {
    row_shape s = {t->W, t->left, t->OW, t->dh * t->W};
    PLANE_SQUARE(row_s2, 3)
    PLANE_SQUARE(row_s2, 2)
    if (t->kw == 3) PLANE_MODES(row_s2, t->kh, 3)
    PLANE_MODES(row_s2, t->kh, 2)
}

/* row_narrow for every output row of a plane (narrow_fits). */
static AVX512 void plane_narrow_avx512(PLANE_ARGS) {
    row_shape s = {t->W, t->left, t->OW, t->dh * t->W};
    PLANE_SQUARE(row_narrow, 3)
    PLANE_SQUARE(row_narrow, 2)
    PLANE_MODES(row_narrow, t->kh, t->kw)
}
#undef PLANE_ARGS
#undef PLANE_SQUARE
#undef PLANE_MODES
#undef PLANE_ROWS

/* A 2x2 stride-2 max pool whose windows lie inside the plane (a U-Net's down step): 16
   outputs from two rows of 32 cells, maxed row against row, then even lanes against odd; on
   small planes the general stride-2 path's column blocks cost more than the pooling. nan:
   whether the plane holds a NaN (window_max). */
static AVX512 int max_2x2_fits(const pool2d *t) {
    return t->kh == 2 && t->kw == 2 && t->sh == 2 && t->sw == 2 && t->dh == 1 && t->dw == 1 &&
           t->top == 0 && t->left == 0 && 2 * t->OH <= t->H && 2 * t->OW <= t->W;
}

static AVX512 void max_2x2_plane(const pool2d *t, const float *x, float *y, const int nan) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t oh = 0; oh < t->OH; oh++) {
        const float *r0 = x + 2 * oh * t->W, *r1 = r0 + t->W;
        float *out = y + oh * t->OW;
        for (int64_t ow0 = 0; ow0 < t->OW; ow0 += 16) {
            int64_t n = t->OW - ow0 < 16 ? t->OW - ow0 : 16;
            __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16);
            __m512 a = window_max(_mm512_maskz_loadu_ps(lo, r0 + 2 * ow0),
                                  _mm512_maskz_loadu_ps(lo, r1 + 2 * ow0), nan);
            __m512 b = window_max(_mm512_maskz_loadu_ps(hi, r0 + 2 * ow0 + 16),
                                  _mm512_maskz_loadu_ps(hi, r1 + 2 * ow0 + 16), nan);
            __m512 v = window_max(_mm512_permutex2var_ps(a, even, b),
                                  _mm512_permutex2var_ps(a, odd, b), nan);
            _mm512_mask_storeu_ps(out + ow0, first_lanes(n), v);
        }
    }
}


/* A 3x3 stride-2 max pool from the plane's first row and column (SqueezeNet's and
   Inception's down steps; with ceil mode or end pads the last window may overhang the
   plane by a row and a column, which are padding: -inf). Two output rows a pass, the window
   row they share read once; each output row separably: column blocks at 2 ow0, + 16 and
   + 32 maxed down their window rows, then the even lanes, the odd lanes and the even lanes
   one on (the last from the third block) maxed across. The general stride-2 path reads every
   block through masks shifted for a left pad and goes a row at a time. nan: whether the
   plane holds a NaN (window_max). */
static AVX512 int max_3x3_s2_fits(const pool2d *t) {
    return t->kh == 3 && t->kw == 3 && t->sh == 2 && t->sw == 2 && t->dh == 1 && t->dw == 1 &&
           t->top == 0 && t->left == 0 && t->OH > 0 && t->OW > 0 && 2 * t->OH <= t->H &&
           2 * t->OW <= t->W;
}

/* Column block c of NR (2 or 3) window rows from r (row stride W), maxed down: lanes past
   the row's `live` columns are -inf. */
static AVX512 inline __attribute__((always_inline)) __m512
rows_max(const float *r, int64_t W, int64_t c, __mmask16 live, const int64_t nr, const int nan) {
    const __m512 low = _mm512_set1_ps(-INFINITY);
    __m512 v = _mm512_mask_loadu_ps(low, live, r + c);
    for (int64_t i = 1; i < nr; i++)
        v = window_max(v, _mm512_mask_loadu_ps(low, live, r + i * W + c), nan);
    return v;
}

/* 16 outputs from the column maxima a (columns 2 ow0 ..), b (+ 16) and d (+ 32). */
static AVX512 inline __attribute__((always_inline)) __m512
across_s2(__m512 a, __m512 b, __m512 d, const int nan) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i next = _mm512_add_epi32(even, _mm512_set1_epi32(2));
    __m512 acc = window_max(_mm512_permutex2var_ps(a, even, b),
                            _mm512_permutex2var_ps(a, odd, b), nan);
    __m512 tap = _mm512_permutex2var_ps(a, next, b); /* (lane 15 wrapped to a's lane 0) */
    tap = _mm512_mask_broadcastss_ps(tap, (__mmask16)0x8000, _mm512_castps512_ps128(d));
    return window_max(acc, tap, nan);
}

/* Output rows `out` and `out + OW` from the five window rows at r (the third shared). */
static AVX512 inline __attribute__((always_inline)) void
max_3x3_s2_rows2(const float *r, int64_t W, int64_t OW, float *out, const int nan) {
    int64_t cols = 2 * OW + 1 < W ? 2 * OW + 1 : W;
    __m512 a0, a1, b0, b1, d0, d1;
#define BLOCKS(c, top, bottom)                                                               \
    {                                                                                        \
        __mmask16 live = first_lanes(cols - (c));                                            \
        __m512 mid = rows_max(r + 2 * W, W, c, live, 1, nan);                                \
        top = window_max(rows_max(r, W, c, live, 2, nan), mid, nan);                         \
        bottom = window_max(mid, rows_max(r + 3 * W, W, c, live, 2, nan), nan);              \
    }
    BLOCKS(0, a0, a1)
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        int64_t n = OW - ow0 < 16 ? OW - ow0 : 16, c = 2 * ow0;
        BLOCKS(c + 16, b0, b1)
        if (n == 16) {
            BLOCKS(c + 32, d0, d1)
        } else { /* (only lane 15, not stored, reads the third block: a narrow plane's rows
                    skip a third of their loads) */
            d0 = d1 = _mm512_set1_ps(-INFINITY);
        }
        _mm512_mask_storeu_ps(out + ow0, first_lanes(n), across_s2(a0, b0, d0, nan));
        _mm512_mask_storeu_ps(out + OW + ow0, first_lanes(n), across_s2(a1, b1, d1, nan));
        a0 = d0, a1 = d1;
    }
#undef BLOCKS
}

static AVX512 inline __attribute__((always_inline)) void
max_3x3_s2_rows(const pool2d *t, const float *x, float *y, const int nan) {
    int64_t W = t->W, OW = t->OW, oh = 0;
    row_shape s = {W, 0, OW, W};
    for (; oh + 2 <= t->OH && 2 * oh + 4 < t->H; oh += 2) /* (five rows in the plane) */
        max_3x3_s2_rows2(x + 2 * oh * W, W, OW, y + oh * OW, nan);
    for (; oh < t->OH; oh++) { /* (the last one or two: the general stride-2 row's) */
        const float *r = x + 2 * oh * W;
        float *out = y + oh * OW; /* (also row_s2's count_w, which a max does not read) */
        if (2 * oh + 2 < t->H)
            row_s2(r, 3, s, out, out, 0.0f, 3, 0, nan);
        else /* (the third row is padding) */
            row_s2(r, 2, s, out, out, 0.0f, 3, 0, nan);
    }
}

static AVX512 void max_3x3_s2_plane(const pool2d *t, const float *x, float *y, const int nan) {
    if (nan)
        max_3x3_s2_rows(t, x, y, 1);
    else
        max_3x3_s2_rows(t, x, y, 0);
}


/* The usual windows (2x2 and 3x3, strides 1 and 2) with their sizes as constants: the
   compiler unrolls the offsets and keeps every address in registers. */
static AVX512 void pool_row_avx512(const pool2d *t, const float *top, int64_t Wp, float *out,
                                   const float *count_w, float rows) {
#define CASE(K, S, AVG, COLS)                                                                \
    if (t->kh == K && t->kw == K && t->sw == S && t->average == AVG && t->by_columns == COLS) \
        return pool_row(t, top, Wp, out, count_w, rows, K, K, S, AVG, COLS);
#define CASES(K, S) CASE(K, S, 1, 0) CASE(K, S, 1, 1) /* (a max pool: max_row) */
    CASES(2, 1) CASES(2, 2) CASES(3, 1) CASES(3, 2)
#undef CASES
#undef CASE
    pool_row(t, top, Wp, out, count_w, rows, t->kh, t->kw, t->sw, (int)t->average,
             (int)t->by_columns);
}
#endif

/* The padded plane (Hp x Wp, plane elements) when t's sizes are in range: every window of
   the output lies in it, and it holds the input's rows from `top` and columns from `left`. */
static int pool2d_ok(const pool2d *t, int64_t *Hp, int64_t *Wp, int64_t *plane) {
    int64_t pads[4] = {t->top, t->left, t->bottom, t->right};
    return onyx_window_axis(t->H, t->OH, t->kh, t->sh, t->dh, t->top, Hp) &&
           onyx_window_axis(t->W, t->OW, t->kw, t->sw, t->dw, t->left, Wp) &&
           onyx_in(pads, 4, 0, ONYX_MAX_EXTENT) && onyx_mul(*Hp, *Wp, plane);
}

EXPORT CLONES int onyx_pool2d_f32_range(const void *p, int64_t begin, int64_t end) {
    const pool2d *t = p;
    int64_t Hp, Wp, plane, buffer;
    if (!pool2d_ok(t, &Hp, &Wp, &plane) || begin < 0) return ONYX_INVALID;
    /* (each term is at most ONYX_MAX_ELEMENTS) */
    buffer = plane + 3 * t->OW + t->OH + Wp + 16;
    float *P = malloc((size_t)buffer * sizeof(float));
    int64_t *spans = malloc((size_t)(t->OH + 1) * 2 * sizeof *spans); /* (never 0 bytes) */
    if (!P || !spans) {
        free(P), free(spans);
        return ONYX_NOMEM;
    }
    window_rows(t, spans);
    float *acc = P + Hp * Wp, *column = acc + t->OW, *count_w = column + t->OW;
    float *count_h = count_w + t->OW; /* (the same for every plane) */
    float *vrow = count_h + t->OH;
    /* windows wholly inside the image read it in place: no padded copy to make */
    int direct = t->top == 0 && t->left == 0 && Hp <= t->H && Wp <= t->W;
    for (int64_t ow = 0; ow < t->OW; ow++) /* (a max counts nothing: no divisions) */
        count_w[ow] = !t->average ? 0.0f : (float)inside(ow, t->sw, t->left, t->dw, t->kw,
                                    t->include_pad ? -t->left : 0,
                                    t->include_pad ? t->W + t->right : t->W);
    for (int64_t oh = 0; oh < t->OH; oh++)
        count_h[oh] = !t->average ? 0.0f : (float)inside(oh, t->sh, t->top, t->dh, t->kh,
                                    t->include_pad ? -t->top : 0,
                                    t->include_pad ? t->H + t->bottom : t->H);
#ifdef HAVE_POOL_AVX512
    int vectors = onyx_isa() & ONYX_ISA_AVX512;
#endif
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = t->x + plane * t->H * t->W, *src = x;
        int64_t ld = t->W; /* (the row stride of what the windows read) */
        float *y = t->y + plane * t->OH * t->OW;
#ifdef HAVE_POOL_AVX512
        /* (a max pool's plane scanned for NaN first: a plane without takes the plain max, and
           the scan, a sequential pass, brings a plane the conv before left in memory into
           cache faster than the pool's reads of three rows at a time) */
#define SEPARABLE(plane_fn)                                                                  \
    {                                                                                        \
        plane_fn(t, x, y, count_w, count_h, spans, !t->average && has_nan(x, t->H * t->W));  \
        continue;                                                                            \
    }
        if (vectors && narrow_fits(t)) SEPARABLE(plane_narrow_avx512)
        if (vectors && t->sw == 1 && t->dw == 1 && t->kw <= 16 && (!t->average || t->by_columns))
            SEPARABLE(plane_s1_avx512)
        if (vectors && !t->average && max_3x3_s2_fits(t)) {
            max_3x3_s2_plane(t, x, y, has_nan(x, t->H * t->W));
            continue;
        }
        if (vectors && !t->average && max_2x2_fits(t)) {
            max_2x2_plane(t, x, y, has_nan(x, t->H * t->W));
            continue;
        }
        if (vectors && t->sw == 2 && t->dw == 1 && (t->kw == 2 || t->kw == 3) &&
            (!t->average || t->by_columns))
            SEPARABLE(plane_s2_avx512)
#undef SEPARABLE
        if (vectors && !t->average) {
            int nan = has_nan(x, t->H * t->W);
            for (int64_t oh = 0; oh < t->OH; oh++)
                max_row_avx512(t, x, oh, y + oh * t->OW, vrow, nan);
            continue;
        }
#endif
        if (!direct) {
            pad_plane(t, x, P, Hp, Wp, t->average ? 0.0f : -INFINITY);
            src = P, ld = Wp;
        }
        for (int64_t oh = 0; oh < t->OH; oh++) {
            const float *top = src + oh * t->sh * ld;
#ifdef HAVE_POOL_AVX512
            if (vectors) {
                pool_row_avx512(t, top, ld, y + oh * t->OW, count_w, count_h[oh]);
                continue;
            }
#endif
            pool_row_passes(t, top, ld, y + oh * t->OW, acc, column, count_w, count_h[oh]);
        }
    }
    free(P), free(spans);
    return 0;
}

/* ------------------------------------------------------------------ 8-bit MaxPool
 *
 * A quantized model's MaxPool on its bytes (pool2d's geometry, x and y 8-bit, dilations 1):
 * each output row is the max of its window's rows clipped to the image (contiguous, in
 * vectors), then each output the max of its window's columns of that row. A max of integers
 * is exact in any order; padding never wins, so the windows read only the image. int8 rows
 * are flipped to unsigned order (x ^ 0x80) for the column pass, and its outputs back.
 */
static inline __attribute__((always_inline)) int64_t clip64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static inline __attribute__((always_inline)) uint8_t max_u8(uint8_t a, uint8_t b) {
    return a > b ? a : b;
}

/* out[o] = max of row[o * sw + j], j < kw, for o in [from, to) (every such column inside),
   a whole window per output in registers (kw a constant where the caller makes it one). At
   stride 2 the row is read as 16-bit pairs (pair p holds columns c0 + 2p in its low byte and
   c0 + 2p + 1 in its high byte, c0 = left's parity, on this little-endian target): contiguous
   reads the compiler vectorizes, where it leaves byte reads at stride 2 scalar. Output o's
   offset j reads column 2o - left + j = c0 + 2 (o - at) + j: pair o - at + j / 2 (o >= from
   >= at: indexed from pairs, no pointer formed before it). */
static inline __attribute__((always_inline)) void
max_columns(const uint8_t *restrict row, uint16_t *restrict pairs, uint8_t *restrict out,
            int64_t from, int64_t to, const int64_t kw, const int64_t sw, int64_t left,
            int64_t W) {
    if (sw == 2 && W >= 2) {
        const int64_t c0 = left & 1, at = (left + c0) / 2;
        pairs[(W - c0) / 2] = 0; /* (the last pair's byte past the row) */
        memcpy(pairs, row + c0, (size_t)(W - c0));
        for (int64_t o = from; o < to; o++) {
            uint8_t m = 0;
            for (int64_t j = 0; j < kw; j++) {
                uint16_t v = pairs[o - at + j / 2];
                m = max_u8(m, (j & 1) ? (uint8_t)(v >> 8) : (uint8_t)v);
            }
            out[o] = m;
        }
        return;
    }
    for (int64_t o = from; o < to; o++) {
        const uint8_t *window = row + (o * sw - left); /* (inside the row: o >= from) */
        uint8_t m = window[0];
        for (int64_t j = 1; j < kw; j++) m = max_u8(m, window[j]);
        out[o] = m;
    }
}

/* The columns' pass with the common window widths (2, 3) and strides (1, 2) as constants. */
static inline __attribute__((always_inline)) void
max_columns_of(const uint8_t *restrict row, uint16_t *restrict pairs, uint8_t *restrict out,
               int64_t from, int64_t to, int64_t kw, int64_t sw, int64_t left, int64_t W) {
#define MAX_COLUMNS(K, S) max_columns(row, pairs, out, from, to, K, S, left, W)
    if (kw == 3 && sw == 2)
        MAX_COLUMNS(3, 2);
    else if (kw == 2 && sw == 2)
        MAX_COLUMNS(2, 2);
    else if (kw == 3 && sw == 1)
        MAX_COLUMNS(3, 1);
    else if (kw == 2 && sw == 1)
        MAX_COLUMNS(2, 1);
    else
        MAX_COLUMNS(kw, sw);
#undef MAX_COLUMNS
}

/* row[w] = the max of x's rows r0..r1 - 1 at column w, in unsigned order (x ^ flip). */
static inline __attribute__((always_inline)) void
max_rows(const uint8_t *restrict x, uint8_t *restrict row, int64_t r0, int64_t r1, int64_t W,
         const uint8_t flip) {
    const uint8_t *a = x + r0 * W; /* (the next rows' pointers formed only where they exist) */
    if (r1 - r0 == 3) {
        const uint8_t *b = a + W, *c = b + W;
        for (int64_t w = 0; w < W; w++)
            row[w] = max_u8(max_u8(a[w] ^ flip, b[w] ^ flip), c[w] ^ flip);
    } else if (r1 - r0 == 2) {
        const uint8_t *b = a + W;
        for (int64_t w = 0; w < W; w++) row[w] = max_u8(a[w] ^ flip, b[w] ^ flip);
    } else {
        for (int64_t w = 0; w < W; w++) row[w] = a[w] ^ flip;
        for (int64_t r = r0 + 1; r < r1; r++) {
            const uint8_t *src = x + r * W;
            for (int64_t w = 0; w < W; w++) row[w] = max_u8(row[w], src[w] ^ flip);
        }
    }
}

static inline __attribute__((always_inline)) void
max_plane_8bit(const pool2d *t, const uint8_t *restrict x, uint8_t *restrict y,
               uint8_t *restrict row, uint16_t *restrict pairs, const int is_signed) {
    const int64_t H = t->H, W = t->W, OW = t->OW, kw = t->kw, sw = t->sw;
    const uint8_t flip = is_signed ? 0x80 : 0;
    /* the outputs whose window lies inside the row: ow * sw - left in [0, W - kw] */
    int64_t lo = clip64((t->left + sw - 1) / sw, 0, OW);
    int64_t hi = W - kw + t->left < 0 ? 0 : clip64((W - kw + t->left) / sw + 1, lo, OW);
    for (int64_t oh = 0; oh < t->OH; oh++) {
        int64_t r0 = clip64(oh * t->sh - t->top, 0, H);
        int64_t r1 = clip64(oh * t->sh - t->top + t->kh, 0, H);
        uint8_t *out = y + oh * OW;
        if (r0 >= r1) { /* (no row of the image: the type's lowest) */
            for (int64_t o = 0; o < OW; o++) out[o] = flip;
            continue;
        }
        max_rows(x, row, r0, r1, W, flip);
        max_columns_of(row, pairs, out, lo, hi, kw, sw, t->left, W);
        for (int64_t o = 0; o < OW; o++) { /* the edge outputs, their windows clipped */
            if (o == lo && hi > lo) o = hi;
            if (o >= OW) break;
            int64_t c0 = clip64(o * sw - t->left, 0, W), c1 = clip64(o * sw - t->left + kw, 0, W);
            uint8_t m = 0;
            for (int64_t c = c0; c < c1; c++) m = max_u8(m, row[c]);
            out[o] = m;
        }
        if (is_signed)
            for (int64_t o = 0; o < OW; o++) out[o] ^= 0x80;
    }
}

static inline __attribute__((always_inline)) int
max8_range(const pool2d *t, int64_t begin, int64_t end, const int is_signed) {
    int64_t Hp, Wp, plane;
    if (!pool2d_ok(t, &Hp, &Wp, &plane) || begin < 0 || end < begin || t->dh != 1 ||
        t->dw != 1 || t->average)
        return ONYX_INVALID;
    uint8_t *row = malloc((size_t)t->W + 1); /* (never 0 bytes) */
    uint16_t *pairs = malloc(((size_t)t->W / 2 + 1) * sizeof *pairs);
    if (!row || !pairs) {
        free(row), free(pairs);
        return ONYX_NOMEM;
    }
    for (int64_t p = begin; p < end; p++)
        max_plane_8bit(t, (const uint8_t *)t->x + p * t->H * t->W,
                       (uint8_t *)t->y + p * t->OH * t->OW, row, pairs, is_signed);
    free(row), free(pairs);
    return 0;
}

EXPORT CLONES int onyx_max_pool2d_u8_range(const void *p, int64_t begin, int64_t end) {
    return max8_range(p, begin, end, 0);
}

EXPORT CLONES int onyx_max_pool2d_s8_range(const void *p, int64_t begin, int64_t end) {
    return max8_range(p, begin, end, 1);
}
