/* onyx's float32 convolution: an implicit GEMM on AVX-512 (part of the _kernels library).
 *
 * y[g][m][pixel] = sum over k of W[g][m][k] * column[k][pixel], with k = (input channel, tap)
 * and the columns (im2col) never built whole: a strip of NR output pixels has its columns
 * packed, KC rows at a time, into a buffer that stays in L1-L2, straight from the NCHW input
 * (out-of-image taps are zeros). The weights are packed once per session into panels of MR
 * output channels (k-major), so the register tile (MR channels x NR pixels, 24 accumulators)
 * reads one broadcast weight and three pixel vectors per three multiply-adds.
 *
 * numpy's im2col + BLAS path built the whole column matrix first: for a 56x56 ResNet layer,
 * 7 MB written and read back per image, and as much time as the GEMM itself at batch 8.
 *
 * Strips run over the pixels of the whole batch (a strip may span images), so a 7x7 layer's
 * 49 pixels per image waste no more than one partial strip per call. Bias, a residual input
 * (FusedConv's Z) and Relu / LeakyRelu / Clip are applied when the tile is stored.
 *
 * A unit-stride conv of a padded input (top = left = 0: x is the padded input, or with raw the
 * unpadded one, each part padding the rows it reads into a region of its thread's buffer)
 * may run "wide": its strips cover the output rows at the input's width W (the last kw - 1
 * pixels of each row are discarded), so the column of tap (c, a, b) is the input from c's
 * plane + a * dh * W + b * dw on, consecutive in the pixels: the tile reads it in place
 * through a table of offsets and nothing is packed, or, where a part has more than
 * CF_IN_PLACE panels to serve and its strips are not whole images, each row is first copied
 * once for all of their tiles. Strips then stay inside one image. A stride-2 conv (a stem, a downsampling 3x3) runs wide too, on
 * its input split into four (row, column) parity phases (by each part for the rows it reads
 * with raw, else by Python, onyx_phase_planes_f32): tap (a, b) reads phase (a % 2, b % 2)
 * from row a / 2 and column b / 2 on, a unit stride.
 *
 * Work is split (onyx_parallel, pool.c) into parts = (group, block of panels, block of
 * strips).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

#define CF_MR 8  /* output channels per register tile (divides the usual channel counts) */
#define CF_NR 48 /* output pixels per register tile: three 16-lane vectors */
#define CF_V (CF_NR / 16)
/* Most pixels of a strip taken by the narrow kernel (one multiply-add per pixel, k and 8
   channels), and most of those done in one pass with the full strip before it (tile_pair). */
#define CF_NARROW 8
#define CF_PAIR 2
/* Panels (of CF_MR channels) per part up to which a wide conv's tile reads its columns in
   place: a copy serves each panel's tile, and pays for itself only past about this many. */
#define CF_IN_PLACE 8



/* One run of consecutive pixels of a strip that share an image and an output row: j, its
   place in the strip; len pixels; image, the input image's offset; ih and iw, the input row
   and column of its first pixel's first tap (negative in the padding); out, its first
   pixel's offset in the output's first channel. */
typedef struct {
    int64_t j, len, image, ih, iw, out;
} run;

/* A 1x1 unit-stride conv without padding: output pixel p reads input pixel p of each plane. */
static int plain_1x1(const conv_f32 *t) {
    return t->kh == 1 && t->kw == 1 && t->sh == 1 && t->sw == 1 && t->top == 0 &&
           t->left == 0 && t->OW == t->W && t->OH == t->H; /* (an end pad adds rows) */
}

/* The strips of one image in a wide conv: its OH rows of W pixels. */
static int64_t wide_strips(const conv_f32 *t) { return (t->OH * t->W + CF_NR - 1) / CF_NR; }

/* A wide conv's floats per input channel: an H x W plane, or with wide = 2 (a stride-2 conv
   of phases) four, the input's (even / odd row, even / odd column) phases: tap (a, b) of
   output (oh, ow) is phase (a % 2, b % 2)'s cell (oh + a / 2, ow + b / 2), a unit stride. */
static int64_t wide_plane(const conv_f32 *t) { return t->H * t->W * (t->wide == 2 ? 4 : 1); }

/* Tap k = (c, a, b)'s offset from a wide strip's first pixel. */
static int64_t wide_offset(const conv_f32 *t, int64_t k) {
    int64_t c = k / (t->kh * t->kw), a = k / t->kw % t->kh, b = k % t->kw;
    if (t->wide == 2)
        return c * wide_plane(t) + (a % 2 * 2 + b % 2) * t->H * t->W + a / 2 * t->W + b / 2;
    return c * t->H * t->W + a * t->dh * t->W + b * t->dw;
}

/* A wide strip's runs (its pixels inside the output, row by row; ih and iw unused), j counted
   in the strip's full width (discarded pixels included). */
static int wide_runs(const conv_f32 *t, int64_t s, run *r) {
    int64_t per = wide_strips(t), n = s / per, q0 = s % per * CF_NR, count = 0;
    int64_t q1 = q0 + CF_NR < t->OH * t->W ? q0 + CF_NR : t->OH * t->W;
    for (int64_t q = q0; q < q1;) {
        int64_t oh = q / t->W, ow = q % t->W;
        if (ow >= t->OW) { /* (a discarded pixel: on to the next row) */
            q = (oh + 1) * t->W;
            continue;
        }
        int64_t len = t->OW - ow < q1 - q ? t->OW - ow : q1 - q;
        r[count++] = (run){q - q0, len, n * t->C * wide_plane(t), 0, 0,
                           (n * t->M + 0) * t->OH * t->OW + oh * t->OW + ow};
        q += len;
    }
    if (!count) r[count++] = (run){0, 0, n * t->C * wide_plane(t), 0, 0, n * t->M * t->OH * t->OW};
    return (int)count;
}

static int strip_runs(const conv_f32 *t, int64_t s, run *r) {
    if (t->wide) return wide_runs(t, s, r);
    int64_t P = t->OH * t->OW, total = t->N * P, first = s * CF_NR;
    int64_t last = first + CF_NR < total ? first + CF_NR : total, count = 0;
    /* a plain 1x1 conv's run goes on across rows to its image's end: its pixels are
       consecutive in the input and output planes (a 7x7 layer's strip is then two runs, not
       eight, and packs as two copies per row of columns) */
    int whole_planes = plain_1x1(t);
    for (int64_t q = first; q < last;) {
        int64_t n = q / P, p = q % P, oh = p / t->OW, ow = p % t->OW;
        int64_t rest = whole_planes ? P - p : t->OW - ow;
        int64_t len = rest < last - q ? rest : last - q;
        r[count++] = (run){q - first,          len, n * t->C * t->H * t->W, oh * t->sh - t->top,
                           ow * t->sw - t->left, n * t->M * P + p};
        q += len;
    }
    return (int)count;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#include "activation.h"

static AVX512 inline __mmask16 lanes(int64_t lo, int64_t hi) { /* lanes lo <= l < hi of 16 */
    lo = lo < 0 ? 0 : lo, hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}

/* d[i] = row[start + i * sw] for i < len, zero where that column is outside 0 .. W: stride 2
   (downsampling convs, stems) as two masked loads and an even-lane permute per 16 values,
   other strides by gathers. */
static AVX512 void strided_copy(const float *row, int64_t start, int64_t sw, int64_t W,
                                int64_t len, float *d) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    for (int64_t h = 0; h < len; h += 16) {
        int64_t first = start + h * sw; /* the input column of value h */
        if (sw == 2 && first >= 0 && first + 32 <= W && h + 16 <= len) { /* (the usual case) */
            __m512 v = _mm512_permutex2var_ps(_mm512_loadu_ps(row + first), even,
                                              _mm512_loadu_ps(row + first + 16));
            _mm512_storeu_ps(d + h, v);
            continue;
        }
        __mmask16 out = lanes(0, len - h);
        __m512 v;
        if (sw == 2) {
            __m512 a = _mm512_maskz_loadu_ps(lanes(-first, W - first), row + first);
            __m512 b = _mm512_maskz_loadu_ps(lanes(-first - 16, W - first - 16), row + first + 16);
            v = _mm512_permutex2var_ps(a, even, b);
        } else {
            __m512i at = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                             5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)sw));
            __m512i col = _mm512_add_epi32(at, _mm512_set1_epi32((int)first));
            __mmask16 in = _mm512_cmpge_epi32_mask(col, _mm512_setzero_si512()) &
                           _mm512_cmplt_epi32_mask(col, _mm512_set1_epi32((int)W)) & out;
            v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, col, row, 4);
        }
        _mm512_mask_storeu_ps(d + h, out, v);
    }
}

/* Columns k0 .. k0 + kc of a strip into B (kc rows of CF_NR pixels, zeros past the strip and
   for taps in the padding). Unit stride: a run is a few masked copies (lanes outside
   the image are never read). */
static AVX512 void pack_columns(const conv_f32 *t, int64_t g, const run *r, int runs,
                                int64_t k0, int64_t kc, float *B) {
    int64_t taps = t->kh * t->kw, plane = t->H * t->W;
    int64_t c = g * (t->C / t->group) + k0 / taps, a = k0 % taps / t->kw, b = k0 % t->kw;
    int64_t width = r[runs - 1].j + r[runs - 1].len; /* a short strip's rest stays zero */
    if (plain_1x1(t)) { /* each run: len consecutive values of the channel's plane */
        for (int64_t kk = 0; kk < kc; kk++, c++) {
            float *dst = B + kk * CF_NR;
            for (int i = 0; i < runs; i++) {
                const run *u = r + i;
                const float *from = t->x + u->image + c * plane + u->ih * t->W + u->iw;
                for (int64_t h = 0; h < u->len; h += 16)
                    _mm512_mask_storeu_ps(dst + u->j + h, lanes(0, u->len - h),
                                          _mm512_maskz_loadu_ps(lanes(0, u->len - h), from + h));
            }
            for (int64_t h = width; h < CF_NR; h += 16) /* (a short strip's rest) */
                _mm512_mask_storeu_ps(dst + h, lanes(0, CF_NR - h), _mm512_setzero_ps());
        }
        return;
    }
    for (int64_t kk = 0; kk < kc; kk++) {
        float *dst = B + kk * CF_NR;
        if (width < CF_NR) /* (the runs write every lane up to the width) */
            for (int h = 0; h < CF_V; h++) _mm512_storeu_ps(dst + h * 16, _mm512_setzero_ps());
        for (int i = 0; i < runs; i++) {
            const run *u = r + i;
            int64_t ih = u->ih + a * t->dh, start = u->iw + b * t->dw;
            float *d = dst + u->j;
            if (ih < 0 || ih >= t->H) {
                for (int h = 0; h * 16 < u->len; h++)
                    _mm512_mask_storeu_ps(d + h * 16, lanes(0, u->len - h * 16),
                                          _mm512_setzero_ps());
                continue;
            }
            const float *row = t->x + u->image + c * plane + ih * t->W;
            if (t->sw == 1) { /* pixel i reads row[start + i], in the image for lo <= i < hi;
                                 the run's other lanes get zeros: no zeroing beforehand */
                int64_t lo = -start, hi = t->W - start < u->len ? t->W - start : u->len;
                for (int h = 0; h * 16 < u->len; h++) {
                    const float *from = row + start + h * 16;
                    if (h * 16 >= lo && h * 16 + 16 <= hi) { /* (the usual case) */
                        _mm512_storeu_ps(d + h * 16, _mm512_loadu_ps(from));
                        continue;
                    }
                    __m512 v = _mm512_maskz_loadu_ps(lanes(lo - h * 16, hi - h * 16), from);
                    _mm512_mask_storeu_ps(d + h * 16, lanes(0, u->len - h * 16), v);
                }
            } else {
                strided_copy(row, start, t->sw, t->W, u->len, d);
            }
        }
        if (++b == t->kw) {
            b = 0;
            if (++a == t->kh) a = 0, c++;
        }
    }
}

/* Where a tile's final sums go when its strip lies inside one image (its pixels are then
   consecutive in every output plane): rows of y ldy apart, with the rows' biases and
   residual; rows and width bound what is stored. */
typedef struct {
    float *y;
    const float *bias, *z;
    int64_t ldy, rows, width;
} tile_out;

/* v + bias (+ the residual z[at ..]), then the activation act (activation.h), into lanes
   0 .. n of y + at (all 16 for n >= 16: the residual loaded and y stored unmasked, a masked
   load and store of a full vector costing the tiles' stores a good share of their time). act
   is a constant in the usual activations' instances (store_tile, TILE_STORE). */
static AVX512 inline __attribute__((always_inline)) void
finish_store(const conv_f32 *t, float *y, const float *z, int64_t at, __m512 v, __m512 bias,
             int64_t n, const int act) {
    v = _mm512_add_ps(v, bias);
    if (n >= 16) {
        if (z) v = _mm512_add_ps(v, _mm512_loadu_ps(z + at));
        _mm512_storeu_ps(y + at, onyx_activate(v, act, t->alpha, t->beta));
        return;
    }
    __mmask16 live = lanes(0, n);
    if (z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, z + at));
    _mm512_mask_storeu_ps(y + at, live, onyx_activate(v, act, t->alpha, t->beta));
}

/* The sums of a tile whose strip spans images or rows (a wide strip; kept in ct) into y, run
   by run, with the activation act a constant in each instance (store_tile): a wide conv's
   every tile is stored here, and the activation's test per vector, with masked stores of
   full vectors, took a stem's stores a seventh of its time. */
static AVX512 inline __attribute__((always_inline)) void
store_runs(const conv_f32 *t, int64_t g, int64_t m0, const float *ct, const run *r, int runs,
           const int act) {
    int64_t Mg = t->M / t->group, P = t->OH * t->OW;
    int64_t rows = Mg - m0 < CF_MR ? Mg - m0 : CF_MR;
    float *y = t->y;
    const float *z = t->z;
    for (int64_t i = 0; i < rows; i++) {
        int64_t m = g * Mg + m0 + i;
        __m512 bias = _mm512_set1_ps(t->bias ? t->bias[m] : 0.0f);
        const float *row = ct + i * CF_NR;
        for (int k = 0; k < runs; k++) {
            int64_t at = r[k].out + m * P, len = r[k].len, j = 0;
            const float *from = row + r[k].j;
            /* (unmasked loads of ct: a masked load of what the tile has just stored is not
               forwarded from the store and waits for it; ct has slack past a row) */
            for (; j + 16 <= len; j += 16)
                finish_store(t, y, z, at + j, _mm512_loadu_ps(from + j), bias, 16, act);
            if (j < len)
                finish_store(t, y, z, at + j, _mm512_loadu_ps(from + j), bias, len - j, act);
        }
    }
}

static AVX512 void store_tile(const conv_f32 *t, int64_t g, int64_t m0, const float *ct,
                              const run *r, int runs) {
    switch (t->act) {
    case ACT_NONE: store_runs(t, g, m0, ct, r, runs, ACT_NONE); break;
    case ACT_RELU: store_runs(t, g, m0, ct, r, runs, ACT_RELU); break;
    case ACT_LEAKY: store_runs(t, g, m0, ct, r, runs, ACT_LEAKY); break;
    case ACT_CLIP: store_runs(t, g, m0, ct, r, runs, ACT_CLIP); break;
    default: store_runs(t, g, m0, ct, r, runs, t->act); break;
    }
}

/* The residual (from, t->z) or the output (t->y) of a strip's runs in channels m0 .. m1 of
   group g into the cache (hint). A large batch's residual comes from memory, one plane per
   channel: too many streams for the hardware's prefetchers. So does the output of a layer
   written where the rest of the network has run since (a stem's 3 MB at batch 1: each line
   read for ownership from memory as its store came, a fifth of the stem's time): it is
   fetched into L2 before the part's last block of tiles, which then hide the wait (a wide
   conv's: a stem, a downsampling 3x3). */
static AVX512 void prefetch_runs(const conv_f32 *t, const float *from, int64_t g, int64_t m0,
                                 int64_t m1, const run *r, int runs, int hint) {
    int64_t Mg = t->M / t->group, P = t->OH * t->OW;
    m1 = m1 < Mg ? m1 : Mg;
    for (int64_t m = g * Mg + m0; m < g * Mg + m1; m++)
        for (int k = 0; k < runs; k++)
            for (int64_t j = 0; j < r[k].len; j += 16) {
                const char *at = (const char *)(from + r[k].out + m * P + j);
                if (hint == _MM_HINT_T0)
                    _mm_prefetch(at, _MM_HINT_T0);
                else
                    _mm_prefetch(at, _MM_HINT_T1);
            }
}

/* A tile's sums c (MR x 16 nv) into ct, or finished into y where o is given (a macro, its
   loops unrolled: the accumulators, passed to a function or indexed by a loop that is not
   unrolled, were kept in memory, a store of each per multiply-add step). The finishing is
   written once per usual activation (TILE_FINISH, act a constant there): a test of the
   activation per vector, and masked loads and stores of full vectors, took a small K's
   tile (a 1x1 conv over 64 channels) a good share of its time. */
#define TILE_FINISH(t, c, o, nv, act)                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < CF_MR; i++) {                                  \
        if (i >= (o)->rows) break;                                                             \
        __m512 bias = _mm512_set1_ps((o)->bias ? (o)->bias[i] : 0.0f);                         \
        float *yi = (o)->y + i * (o)->ldy;                                                     \
        const float *zi = (o)->z ? (o)->z + i * (o)->ldy : 0;                                  \
        for (int h = 0; h < (nv); h++)                                                         \
            finish_store(t, yi, zi, h * 16, (c)[i][h], bias, (o)->width - h * 16, act);        \
    }

#define TILE_STORE(t, c, ct, o, nv)                                                            \
    do {                                                                                       \
        if (!(o)) {                                                                            \
            for (int i = 0; i < CF_MR; i++)                                                    \
                for (int h = 0; h < (nv); h++)                                                 \
                    _mm512_storeu_ps((ct) + i * CF_NR + h * 16, (c)[i][h]);                    \
            break;                                                                             \
        }                                                                                      \
        if ((t)->act == ACT_NONE) {                                                            \
            TILE_FINISH(t, c, o, nv, ACT_NONE);                                                \
        } else if ((t)->act == ACT_RELU) {                                                     \
            TILE_FINISH(t, c, o, nv, ACT_RELU);                                                \
        } else {                                                                               \
            TILE_FINISH(t, c, o, nv, (t)->act);                                                \
        }                                                                                      \
    } while (0)

/* sums (MR x 16 nv) = (accumulate ? ct : 0) + A (kc x MR) . B (kc x 16 nv; rows ldb apart),
   into ct, or finished into y where o is given. nv is a constant in each instance below: the
   accumulators stay in registers. */
static AVX512 inline __attribute__((always_inline)) void
tile(const conv_f32 *t, const float *restrict A, const float *restrict B, int64_t ldb,
     const int64_t *off, int64_t kc, float *restrict ct, int accumulate, const tile_out *o,
     const float *pf, const int nv) {
    __m512 c[CF_MR][CF_V], v[CF_V];
    for (int i = 0; i < CF_MR; i++)
        for (int h = 0; h < nv; h++)
            c[i][h] = accumulate ? _mm512_loadu_ps(ct + i * CF_NR + h * 16) : _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        if (pf && !(k & 1)) _mm_prefetch((const char *)(pf + k * CF_MR), _MM_HINT_T1);
        const float *row = off ? B + off[k] : B + k * ldb; /* (off: a wide conv's rows) */
        for (int h = 0; h < nv; h++) v[h] = _mm512_loadu_ps(row + h * 16);
        const float *a = A + k * CF_MR;
        for (int i = 0; i < CF_MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            for (int h = 0; h < nv; h++) c[i][h] = _mm512_fmadd_ps(ai, v[h], c[i][h]);
        }
    }
    TILE_STORE(t, c, ct, o, nv);
}

/* A narrow strip's sums (sums[p]: pixel p's MR channels) into ct (channel-major), and
   finished into y where o is given. */
static AVX512 inline __attribute__((always_inline)) void
narrow_store(const conv_f32 *t, float sums[][16], float *restrict ct, const tile_out *o,
             const int w) {
    for (int p = 0; p < w; p++)
        for (int i = 0; i < CF_MR; i++) ct[i * CF_NR + p] = sums[p][i];
    if (!o) return;
    for (int i = 0; i < CF_MR && i < o->rows; i++) { /* (o->width = w: one partial vector) */
        __mmask16 live = lanes(0, o->width);
        const float *z = o->z ? o->z + i * o->ldy : 0;
        __m512 v = _mm512_maskz_loadu_ps(live, ct + i * CF_NR);
        __m512 bias = _mm512_set1_ps(o->bias ? o->bias[i] : 0.0f);
        finish_store(t, o->y + i * o->ldy, z, 0, v, bias, o->width, t->act);
    }
}

/* The same sums for a strip of w <= CF_NARROW pixels (a batch's last, as the 49th pixel of a
   7x7 layer at batch 1), with the pixels as the broadcasts: one multiply-add per pixel and
   k over the panel's 8 channels, not eight over a vector of 16 mostly empty pixels. The
   sums are kept pixel-major in registers and go to ct (channel-major) transposed. A strip
   of few pixels has too few sums for the multiply-adds' latency (a lone pixel's chain waits
   4 cycles a k): k is then dealt round-robin to CF_NARROW / w chains, summed at the end. */
static AVX512 inline __attribute__((always_inline)) void
narrow(const conv_f32 *t, const float *restrict A, const float *restrict B, int64_t ldb,
       const int64_t *off, int64_t kc, float *restrict ct, int accumulate, const tile_out *o,
       const float *pf, const int w) {
    const int u = CF_NARROW / w; /* chains per pixel: c[j * w + p], j < u */
    __m512 c[CF_NARROW];
    float sums[CF_NARROW][16];
    for (int p = 0; p < u * w; p++) c[p] = _mm512_setzero_ps();
    if (accumulate)
        for (int p = 0; p < w; p++) {
            for (int i = 0; i < CF_MR; i++) sums[p][i] = ct[i * CF_NR + p];
            c[p] = _mm512_maskz_loadu_ps(0xFF, sums[p]);
        }
    int64_t k = 0;
    for (; k + u <= kc; k += u)
        for (int j = 0; j < u; j++) {
            if (pf && !((k + j) & 1))
                _mm_prefetch((const char *)(pf + (k + j) * CF_MR), _MM_HINT_T1);
            __m512 a = _mm512_maskz_loadu_ps(0xFF, A + (k + j) * CF_MR);
            const float *row = off ? B + off[k + j] : B + (k + j) * ldb;
            for (int p = 0; p < w; p++)
                c[j * w + p] = _mm512_fmadd_ps(_mm512_set1_ps(row[p]), a, c[j * w + p]);
        }
    for (; k < kc; k++) {
        __m512 a = _mm512_maskz_loadu_ps(0xFF, A + k * CF_MR);
        const float *row = off ? B + off[k] : B + k * ldb;
        for (int p = 0; p < w; p++) c[p] = _mm512_fmadd_ps(_mm512_set1_ps(row[p]), a, c[p]);
    }
    for (int j = 1; j < u; j++)
        for (int p = 0; p < w; p++) c[p] = _mm512_add_ps(c[p], c[j * w + p]);
    for (int p = 0; p < w; p++) _mm512_storeu_ps(sums[p], c[p]);
    narrow_store(t, sums, ct, o, w);
}

/* The sums of a strip of w pixels in registers (c[p]: pixel p's MR channels) and the same
   from a full strip's tile in one pass over the panel's weights (tile_pair). */
static AVX512 inline __attribute__((always_inline)) void
tile_pair(const conv_f32 *t, const float *restrict A, const float *restrict B, int64_t ldb,
          int64_t kc, float *restrict ct, int accumulate, const tile_out *o, const float *pf,
          const float *restrict B2, int64_t ldb2, float *restrict ct2, const tile_out *o2,
          const int w) {
    __m512 c[CF_MR][CF_V], v[CF_V], e0, e1 = _mm512_setzero_ps(); /* (the pixels' sums:
                                                            named, an array of two spilled) */
    for (int i = 0; i < CF_MR; i++)
        for (int h = 0; h < CF_V; h++)
            c[i][h] = accumulate ? _mm512_loadu_ps(ct + i * CF_NR + h * 16) : _mm512_setzero_ps();
    float sums[CF_PAIR][16] = {{0}};
    for (int p = 0; accumulate && p < w; p++)
        for (int i = 0; i < CF_MR; i++) sums[p][i] = ct2[i * CF_NR + p];
    e0 = _mm512_maskz_loadu_ps(0xFF, sums[0]);
    if (w > 1) e1 = _mm512_maskz_loadu_ps(0xFF, sums[1]);
    for (int64_t k = 0; k < kc; k++) {
        if (pf && !(k & 1)) _mm_prefetch((const char *)(pf + k * CF_MR), _MM_HINT_T1);
        for (int h = 0; h < CF_V; h++) v[h] = _mm512_loadu_ps(B + k * ldb + h * 16);
        const float *a = A + k * CF_MR;
        for (int i = 0; i < CF_MR; i++)
            for (int h = 0; h < CF_V; h++)
                c[i][h] = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), v[h], c[i][h]);
        /* (the lone pixels' single chains: the tile's 24 give the multiply-adds' latency
           its time) */
        __m512 av = _mm512_castps256_ps512(_mm256_loadu_ps(a));
        e0 = _mm512_fmadd_ps(_mm512_set1_ps(B2[k * ldb2]), av, e0);
        if (w > 1) e1 = _mm512_fmadd_ps(_mm512_set1_ps(B2[k * ldb2 + 1]), av, e1);
    }
    TILE_STORE(t, c, ct, o, CF_V);
    _mm512_storeu_ps(sums[0], e0);
    _mm512_storeu_ps(sums[1], e1);
    narrow_store(t, sums, ct2, o2, w);
}

typedef void (*tile_fn)(const conv_f32 *, const float *, const float *, int64_t,
                        const int64_t *, int64_t, float *, int, const tile_out *,
                        const float *);
/* body##n: the tile or narrow body with its size n a constant (its registers' count) */
#define INSTANCE(body, n)                                                                     \
    static AVX512 void body##n(const conv_f32 *t, const float *A, const float *B, int64_t ldb, \
                               const int64_t *off, int64_t kc, float *ct, int accumulate,     \
                               const tile_out *o, const float *pf) {                          \
        body(t, A, B, ldb, off, kc, ct, accumulate, o, pf, n);                                \
    }
INSTANCE(tile, 1)
INSTANCE(tile, 2)
INSTANCE(tile, 3)
INSTANCE(narrow, 1)
INSTANCE(narrow, 2)
INSTANCE(narrow, 3)
INSTANCE(narrow, 4)
INSTANCE(narrow, 5)
INSTANCE(narrow, 6)
INSTANCE(narrow, 7)
INSTANCE(narrow, 8)
#undef INSTANCE
static const tile_fn narrow_fn[CF_NARROW + 1] = {
    0, narrow1, narrow2, narrow3, narrow4, narrow5, narrow6, narrow7, narrow8};

/* pair##w: tile_pair for w pixels (the second strip's B2, ldb2, off2, ct2 and o2 after the
   first's arguments) */
typedef void (*pair_fn)(const conv_f32 *, const float *, const float *, int64_t, int64_t,
                        float *, int, const tile_out *, const float *, const float *, int64_t,
                        float *, const tile_out *);
#define INSTANCE(w)                                                                           \
    static AVX512 void pair##w(const conv_f32 *t, const float *A, const float *B, int64_t ldb, \
                               int64_t kc, float *ct, int accumulate, const tile_out *o,      \
                               const float *pf, const float *B2, int64_t ldb2, float *ct2,    \
                               const tile_out *o2) {                                          \
        tile_pair(t, A, B, ldb, kc, ct, accumulate, o, pf, B2, ldb2, ct2, o2, w);              \
    }
INSTANCE(1)
INSTANCE(2)
#undef INSTANCE
static const pair_fn pair_fns[CF_PAIR + 1] = {0, pair1, pair2};

/* Parts begin <= q < end, q = (group, block of panels, block of strips); -1: out of memory.
   Per block of kc columns: the block's strips are packed (L2), then each panel's weights
   (kc x MR, L1) meet every strip, so large weights are read once per block of strips and
   not once per strip. The sums wait in ct (strip, panel) until the last block of columns. */
/* Whether a conv that pads its own input (raw) has sizes that agree: the unpadded input lies
   at (xtop, xleft) of the padded H x W (its rows and columns past those dropped), or of a
   stride-2 conv's 2H x 2W, split into its phases. */
static int raw_ok(const conv_f32 *t) {
    int64_t sizes[4] = {t->xh, t->xw, t->xtop, t->xleft}, cells;
    if (!t->raw) return 1;
    int64_t scale = t->wide == 2 ? 2 : 1; /* (phases: the padded input is 2H x 2W) */
    return t->raw == 1 && (t->wide == 1 || t->wide == 2) &&
           onyx_in(sizes, 4, 0, ONYX_MAX_EXTENT) && t->xtop <= scale * t->H &&
           t->xleft <= scale * t->W && onyx_mul(t->N * t->C, t->xh, &cells) &&
           onyx_mul(cells, t->xw, &cells);
}

/* Whether t's sizes are in range and agree: every buffer below fits ONYX_MAX_ELEMENTS, the
   strips cover the batch's pixels and every window lies in the padded image. */
static int conv_f32_ok(const conv_f32 *t) {
    int64_t Hp, Wp, P, pixels, K, counts[7] = {t->C, t->M, t->group, t->kc, t->per_part,
                                               t->blocks, t->strips};
    return t->N >= 1 && onyx_in(counts, 7, 1, ONYX_MAX_EXTENT) && t->C % t->group == 0 &&
           t->M % t->group == 0 &&
           onyx_window_axis(t->H, t->OH, t->kh, t->sh, t->dh, t->top, &Hp) &&
           onyx_window_axis(t->W, t->OW, t->kw, t->sw, t->dw, t->left, &Wp) &&
           onyx_mul(t->OH, t->OW, &P) && onyx_mul(t->N, P, &pixels) &&
           (t->wide ? (t->wide == 1 ? t->sh == 1 && t->sw == 1
                                    : t->wide == 2 && t->sh == 2 && t->sw == 2 && t->dh == 1 &&
                                          t->dw == 1 && t->OH + (t->kh - 1) / 2 <= t->H &&
                                          t->OW + (t->kw - 1) / 2 <= t->W) &&
                          t->top == 0 && t->left == 0 && onyx_mul(t->N, wide_strips(t), &K) &&
                          t->strips == K && onyx_mul(t->H * 4, t->W, &K) &&
                          onyx_mul(K, t->C, &K) && onyx_mul(K, t->N, &K) /* (the input) */
                    : t->strips == (pixels + CF_NR - 1) / CF_NR) && onyx_mul(t->C, t->kh * t->kw, &K) &&
           onyx_mul(K, CF_NR, &K) && onyx_mul(t->kc * t->per_part, CF_NR * CF_MR, &K) &&
           t->act >= 0 && t->act <= ACT_TANH && raw_ok(t);
}

/* Floats read past a wide conv's padded input by its last strip's vectors (discarded
   pixels): conv_f32.py's slack. */
static int64_t wide_slack(const conv_f32 *t) { return (t->kw - 1) * t->dw + CF_NR; }

/* The input rows lo .. hi (clipped to the input's) of plane c into the cache: the next
   plane's rows are fetched while a part pads this one's (a part's few rows per plane, 32 to
   128 planes apart, are too short a stream for the hardware's prefetchers, and the loads
   waited on memory for most of the padding's time). */
static AVX512 void fetch_rows(const conv_f32 *t, int64_t c, int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : lo, hi = hi < t->xh ? hi : t->xh - 1;
    if (hi < lo) return;
    const char *from = (const char *)(t->x + (c * t->xh + lo) * t->xw);
    int64_t bytes = (hi - lo + 1) * t->xw * (int64_t)sizeof(float);
    for (int64_t b = 0; b < bytes + 63; b += 64) _mm_prefetch(from + b, _MM_HINT_T0);
}

/* Row i of a plane's (row, column) parity phases (wide = 2) from the padded input's row
   2i + pr (pr: the row phase): its even columns into d0, its odd ones into d1, Wq each; row:
   the input's row (W values, from the padded row's column left), null for a row of the
   padding. Each row is read once for both column phases (a pair of loads, an even- and an
   odd-lane permute per 16 values of each). */
static AVX512 void phase_row(const float *row, int64_t W, int64_t left, float *d0, float *d1,
                             int64_t Wq) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t h = 0; h < Wq; h += 16) {
        __mmask16 out = lanes(0, Wq - h);
        if (!row) {
            _mm512_mask_storeu_ps(d0 + h, out, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(d1 + h, out, _mm512_setzero_ps());
            continue;
        }
        int64_t first = 2 * h - left; /* the input column of column phase 0's value h */
        __m512 a, b;
        if (first >= 0 && first + 32 <= W) { /* (the usual case) */
            a = _mm512_loadu_ps(row + first), b = _mm512_loadu_ps(row + first + 16);
        } else { /* (lanes outside the row are never read) */
            a = _mm512_maskz_loadu_ps(lanes(-first, W - first), row + first);
            b = _mm512_maskz_loadu_ps(lanes(-first - 16, W - first - 16), row + first + 16);
        }
        _mm512_mask_storeu_ps(d0 + h, out, _mm512_permutex2var_ps(a, even, b));
        _mm512_mask_storeu_ps(d1 + h, out, _mm512_permutex2var_ps(a, odd, b));
    }
}

/* Rows lo .. hi of image n's phases (wide = 2) of group g into a part's region dst (per
   channel four phases of R rows, from row lo), from t's raw input. */
static AVX512 void phase_rows(const conv_f32 *t, float *dst, int64_t n, int64_t g, int64_t lo,
                              int64_t hi, int64_t R) {
    int64_t Cg = t->C / t->group, plane = R * t->W, c0 = n * t->C + g * Cg, c1 = c0 + Cg;
    fetch_rows(t, c0, 2 * lo - t->xtop, 2 * hi + 1 - t->xtop);
    for (int64_t c = c0; c < c1; c++) {
        if (c + 1 < c1) fetch_rows(t, c + 1, 2 * lo - t->xtop, 2 * hi + 1 - t->xtop);
        for (int64_t i = lo; i <= hi; i++)
            for (int64_t pr = 0; pr < 2; pr++) {
                float *d0 = dst + ((c - c0) * 4 + pr * 2) * plane + (i - lo) * t->W;
                int64_t ih = 2 * i + pr - t->xtop;
                const float *row = ih >= 0 && ih < t->xh ? t->x + (c * t->xh + ih) * t->xw : 0;
                phase_row(row, t->xw, t->xleft, d0, d0 + plane, t->W);
            }
    }
}

/* Rows lo .. hi of image n's padded planes of group g into a part's region dst (per channel
   R rows, from row lo), from t's unpadded input: a row's borders are zeros, its interior
   unmasked copies (lanes outside the input's row are never read). */
static AVX512 void pad_rows(const conv_f32 *t, float *dst, int64_t n, int64_t g, int64_t lo,
                            int64_t hi, int64_t R) {
    int64_t Cg = t->C / t->group, W = t->W, left = t->xleft;
    int64_t w = t->xw < W - left ? t->xw : W - left;
    const __m512 zero = _mm512_setzero_ps();
    int64_t c0 = n * t->C + g * Cg, c1 = c0 + Cg;
    fetch_rows(t, c0, lo - t->xtop, hi - t->xtop);
    for (int64_t c = c0; c < c1; c++) {
        if (c + 1 < c1) fetch_rows(t, c + 1, lo - t->xtop, hi - t->xtop);
        for (int64_t i = lo; i <= hi; i++) {
            float *d = dst + ((c - c0) * R + i - lo) * W;
            int64_t row = i - t->xtop;
            if (row < 0 || row >= t->xh || w <= 0) { /* (a row of the padding) */
                for (int64_t h = 0; h < W; h += 16) _mm512_mask_storeu_ps(d + h, lanes(0, W - h), zero);
                continue;
            }
            const float *from = t->x + (c * t->xh + row) * t->xw;
            for (int64_t h = 0; h < left; h += 16)
                _mm512_mask_storeu_ps(d + h, lanes(0, left - h), zero);
            int64_t j = 0;
            for (; j + 16 <= w; j += 16) _mm512_storeu_ps(d + left + j, _mm512_loadu_ps(from + j));
            if (j < w) {
                __mmask16 m = lanes(0, w - j);
                _mm512_mask_storeu_ps(d + left + j, m, _mm512_maskz_loadu_ps(m, from + j));
            }
            for (int64_t h = left + w; h < W; h += 16)
                _mm512_mask_storeu_ps(d + h, lanes(0, W - h), zero);
        }
    }
}

/* How far past a wide strip's pixel its window reads in the padded input (or its phases). */
static int64_t region_reach(const conv_f32 *t) {
    return t->wide == 2 ? (t->kh - 1) / 2 * t->W + (t->kw - 1) / 2
                        : (t->kh - 1) * t->dh * t->W + (t->kw - 1) * t->dw;
}

/* The rows a raw conv's part reads in each image: R per channel (and phase), from the first
   row of the part's first strip in the image (the last strip's window and its vectors'
   discarded pixels included). */
static int64_t region_rows(const conv_f32 *t) {
    return (t->per_part * CF_NR + region_reach(t)) / t->W + 2;
}

/* The first row of image n's region for the part whose first strip is s0. */
static int64_t region_top(const conv_f32 *t, int64_t s0, int64_t n) {
    int64_t per = wide_strips(t);
    return n == s0 / per ? s0 % per * CF_NR / t->W : 0;
}

/* The rows of the padded input (or its phases) that part q reads, into xp: per image that
   its strips cover, a region of R rows per channel (and phase) from region_top, made just
   before the part reads them, on its thread, so that they are in L2 when read. The caller's
   padding beforehand (of the whole input, serial) was read back from L3 by the tiles, and a
   buffer of the whole padded input per thread was written back to memory as the parts moved
   on; a part's few regions are written again and again in L2. */
static void pad_part(const conv_f32 *t, float *xp, int64_t q, int64_t R, int64_t region) {
    int64_t S = t->per_part, chunks = (t->strips + S - 1) / S, per = wide_strips(t);
    int64_t all = t->OH * t->W, reach = region_reach(t);
    int64_t g = q / chunks / t->blocks, s0 = q % chunks * S;
    int64_t last = s0 + S < t->strips ? s0 + S : t->strips;
    for (int64_t n = s0 / per; n * per < last; n++) {
        int64_t lo = region_top(t, s0, n), end = (n + 1) * per < last ? (n + 1) * per : last;
        int64_t q1 = (end - 1) % per * CF_NR + CF_NR, hi = ((q1 < all ? q1 : all) - 1 + reach) / t->W;
        hi = hi < t->H ? hi : t->H - 1; /* (past the plane: discarded pixels) */
        float *dst = xp + (n - s0 / per) * region;
        if (t->wide == 2)
            phase_rows(t, dst, n, g, lo, hi, R);
        else
            pad_rows(t, dst, n, g, lo, hi, R);
    }
}

/* This thread's regions of padded input (pad_part), `floats` floats (onyx_scratch: kept
   between calls, zeros where never written), or null. */
static float *pad_scratch(int64_t floats) {
    return onyx_scratch(SCRATCH_CONV_PAD, (size_t)floats * sizeof(float), 1); /* (zeros) */
}

/* Buffers of sizes[i] bytes (each 64-byte aligned) into parts[i], carved from one block of
   this thread's (onyx_scratch, as pad_scratch's); 0 when out of memory. */
static int part_scratch(const size_t *sizes, void **parts) {
    size_t total = 0;
    for (int i = 0; i < 8; i++) total += (sizes[i] + 63) / 64 * 64;
    char *at = onyx_scratch(SCRATCH_CONV_PARTS, total, 0);
    if (!at) return 0;
    for (int i = 0; i < 8; i++) parts[i] = at, at += (sizes[i] + 63) / 64 * 64;
    return 1;
}

/* Where a strip's tile stores its final sums (into o), or null where they wait in ct for
   store_tile: not the last block of columns, a wide conv's strip or one spanning images. */
static tile_out *strip_out(const conv_f32 *t, int64_t g, int64_t pn, const run *rs, int runs,
                           int last, tile_out *o) {
    const run *end = rs + runs - 1;
    int64_t Mg = t->M / t->group, P = t->OH * t->OW, m = g * Mg + pn * CF_MR;
    if (!last || t->wide || rs->out / (t->M * P) != end->out / (t->M * P)) return 0;
    o->y = t->y + rs->out + m * P, o->ldy = P;
    o->bias = t->bias ? t->bias + m : 0;
    o->z = t->z ? t->z + rs->out + m * P : 0;
    o->rows = Mg - pn * CF_MR, o->width = end->j + end->len;
    return o;
}

/* The pixels of a narrow strip that tile_pair takes with the strip before it (fn its
   kernel), or 0. */
static int narrow_width(tile_fn fn) {
    for (int w = 1; w <= CF_PAIR; w++)
        if (fn == narrow_fn[w]) return w;
    return 0;
}

/* Whether t's cols, where it has them, hold every strip's packed columns (group x strips x
   K x CF_NR floats, as ncols says): the packing writes them, the tiles read them. */
static int cols_ok(const conv_f32 *t) {
    int64_t n;
    return !t->cols || (onyx_mul(t->group, t->strips, &n) && onyx_mul(n, t->C / t->group, &n) &&
                        onyx_mul(n, t->kh * t->kw, &n) && onyx_mul(n, CF_NR, &n) &&
                        t->ncols >= n);
}

/* *parts = onyx_conv_f32_range's parts (groups x chunks of strips x blocks of panels), when
   they and a part's scratch (per_part strips of every panel of a block) are in range. */
static int conv_f32_parts(const conv_f32 *t, int64_t *parts) {
    int64_t panels = (t->M / t->group + CF_MR - 1) / CF_MR, chunks, tiles;
    int64_t per_block = (panels + t->blocks - 1) / t->blocks;
    chunks = (t->strips + t->per_part - 1) / t->per_part;
    return onyx_mul(t->group, chunks, parts) && onyx_mul(*parts, t->blocks, parts) &&
           onyx_mul(t->per_part, per_block, &tiles) && onyx_mul(tiles, CF_MR * CF_NR, &tiles);
}

EXPORT AVX512 int onyx_conv_f32_range(const void *p, int64_t begin, int64_t end) {
    const conv_f32 *t = p;
    int64_t work;
    if (!conv_f32_ok(t) || begin < 0 || begin > end || !conv_f32_parts(t, &work) ||
        end > work || !cols_ok(t))
        return ONYX_INVALID;
    conv_f32 padded; /* a raw conv's task, reading its parts' regions (pad_part) */
    const conv_f32 *raw = t->raw ? t : 0;
    int64_t R = 0, region = 0; /* (a region's rows, floats) */
    if (raw) {
        R = region_rows(t);
        /* (a part's strips cover at most per_part + 1 images; sizes counted without overflow:
           the buffer is allocated to them) */
        int64_t floats, slack = wide_slack(t);
        if (!onyx_mul(t->C / t->group * (t->wide == 2 ? 4 : 1), R, &region) ||
            !onyx_mul(region, t->W, &region) || !onyx_mul(t->per_part + 1, region, &floats))
            return ONYX_INVALID;
        float *xp = pad_scratch(floats + slack);
        if (!xp) return ONYX_NOMEM;
        memset(xp + floats, 0, sizeof(float) * (size_t)slack);
        padded = *t, padded.x = xp, padded.raw = 0, padded.H = R, t = &padded;
    }
    int64_t Mg = t->M / t->group, K = (t->C / t->group) * t->kh * t->kw;
    int64_t panels = (Mg + CF_MR - 1) / CF_MR, S = t->per_part;
    int64_t per_block = (panels + t->blocks - 1) / t->blocks, chunks = (t->strips + S - 1) / S;
    int64_t tile_size = CF_MR * CF_NR, P = t->OH * t->OW;
    /* (one block of this thread's scratch, kept across calls, where eight mallocs and frees
       a call cost a small layer's call more than its work) */
    size_t sizes[8] = {sizeof(float) * (size_t)(S * t->kc * CF_NR),
                       sizeof(float) * (size_t)(S * per_block * tile_size + 16),
                       sizeof(run) * (size_t)(S * (CF_NR + 1)),
                       sizeof(int) * (size_t)S,
                       sizeof(tile_fn) * (size_t)S,
                       sizeof(float *) * (size_t)S,
                       sizeof(int64_t) * (size_t)S,
                       t->wide ? sizeof(int64_t) * (size_t)K : 0};
    void *parts[8];
    if (!part_scratch(sizes, parts)) return ONYX_NOMEM;
    float *B = parts[0], *ct = parts[1];
    run *r = parts[2];
    int *runs = parts[3];
    tile_fn *fn = parts[4];
    const float **src = parts[5];
    int64_t *ldb = parts[6], *off = parts[7];
    for (int64_t k = 0; t->wide && k < K; k++) /* tap (c, a, b)'s row, from the strip's start */
        off[k] = wide_offset(t, k);
    /* a 1x1 unit-stride conv without padding reads its columns straight from the image: a
       pixel's k-th column value is at its own offset in the k-th channel's plane */
    int64_t Cg = t->C / t->group, plane = t->H * t->W;
    int plain = plain_1x1(t);
    /* a wide conv whose parts have few panels reads its columns in place: a copy would serve
       too few tiles to pay for itself; so does one whose parts cover whole images (a small
       image's layer, 7x7 to 16x16: its rows are in L1 and L2 for every panel's tile) */
    int in_place = t->wide && ((panels + t->blocks - 1) / t->blocks <= CF_IN_PLACE ||
                               (raw && wide_strips(t) <= S));
    for (int64_t q = begin; q < end; q++) {
        /* (blocks of strips vary fastest: a thread's share of a layer with few strips, whose
           last may be short, is then some blocks of panels over all of them) */
        int64_t chunk = q % chunks, blk = q / chunks % t->blocks;
        int64_t g = q / chunks / t->blocks, s0 = chunk * S;
        int64_t ns = t->strips - s0 < S ? t->strips - s0 : S;
        int64_t p0 = blk * per_block, p1 = p0 + per_block < panels ? p0 + per_block : panels;
        if (raw) pad_part(raw, (float *)t->x, q, R, region);
        for (int64_t s = 0; s < ns; s++) {
            run *rs = r + s * (CF_NR + 1);
            runs[s] = strip_runs(t, s0 + s, rs);
            /* a short strip (the batch's last) computes only the vectors it has */
            int64_t width = rs[runs[s] - 1].j + rs[runs[s] - 1].len;
            if (t->wide) { /* (the full strip: its discarded pixels too) */
                int64_t q0 = (s0 + s) % wide_strips(t) * CF_NR, all = t->OH * t->W;
                width = all - q0 < CF_NR ? all - q0 : CF_NR;
            }
            fn[s] = width > 32   ? tile3
                    : width > 16 ? tile2
                    : width > CF_NARROW ? tile1
                                        : narrow_fn[width];
        }
        const float *wg = t->w + g * panels * K * CF_MR;
        for (int64_t k0 = 0; k0 < K; k0 += t->kc) {
            int64_t kc = K - k0 < t->kc ? K - k0 : t->kc, last = k0 + kc == K;
            for (int64_t s = 0; s < ns; s++) {
                const run *rs = r + s * (CF_NR + 1), *end = rs + runs[s] - 1;
                const float *from = t->wide ? t->x + rs->image + g * Cg * wide_plane(t) +
                                                  (s0 + s) % wide_strips(t) * CF_NR
                                            : 0; /* (a wide strip's first pixel, tap 0) */
                if (raw) { /* (in its image's region of the part) */
                    int64_t n = (s0 + s) / wide_strips(t), n0 = s0 / wide_strips(t);
                    from = t->x + (n - n0) * region + (s0 + s) % wide_strips(t) * CF_NR -
                           region_top(raw, s0, n) * t->W;
                }
                if (t->wide && in_place) { /* the tile reads the input at the taps' offsets */
                    src[s] = from, ldb[s] = 0;
                } else if (t->wide) { /* each row of columns: one unmasked copy from the input */
                    float *to = B + s * kc * CF_NR;
                    /* (each row's stream: too many for the hardware's prefetchers; the
                       same row of the strip after next is fetched as this one is copied) */
                    int ahead = s + 2 < ns;
                    for (int64_t kk = 0; kk < kc; kk++)
                        for (int h = 0; h < CF_V; h++) {
                            const float *at = from + off[k0 + kk] + h * 16;
                            if (ahead) _mm_prefetch((const char *)(at + 2 * CF_NR), _MM_HINT_T0);
                            _mm512_storeu_ps(to + kk * CF_NR + h * 16, _mm512_loadu_ps(at));
                        }
                    src[s] = to, ldb[s] = CF_NR;
                } else if (t->cols) {
                    src[s] = t->cols + ((g * t->strips + s0 + s) * K + k0) * CF_NR;
                    ldb[s] = CF_NR;
                } else if (plain && rs->image == end->image && end->j + end->len == CF_NR) {
                    /* a whole strip inside one image: its columns are in the planes */
                    src[s] = t->x + rs->image + (g * Cg + k0) * plane + rs->ih * t->W + rs->iw;
                    ldb[s] = plane;
                } else {
                    pack_columns(t, g, rs, runs[s], k0, kc, B + s * kc * CF_NR);
                    src[s] = B + s * kc * CF_NR, ldb[s] = CF_NR;
                }
            }
            if (last) /* the residual is read and the output written as the tiles finish:
                         fetched meanwhile */
                for (int64_t s = 0; s < ns; s++) {
                    const run *rs = r + s * (CF_NR + 1);
                    if (t->z) prefetch_runs(t, t->z, g, p0 * CF_MR, p1 * CF_MR, rs, runs[s], _MM_HINT_T0);
                    if (t->wide) /* (a packed conv's few pixels gained nothing) */
                        prefetch_runs(t, t->y, g, p0 * CF_MR, p1 * CF_MR, rs, runs[s], _MM_HINT_T1);
                }
            const int64_t *offs = t->wide && in_place ? off + k0 : 0;
            for (int64_t pn = p0; pn < p1; pn++)
                for (int64_t s = 0; s < ns; s++) {
                    float *sums = ct + (s * per_block + pn - p0) * tile_size;
                    tile_out o, *out = strip_out(t, g, pn, r + s * (CF_NR + 1), runs[s], last, &o);
                    /* the first strip's tile fetches the next panel's weights (a run of
                       their own, from memory in a deep layer) into L2, a line per 2 k */
                    const float *pf = s > 0 ? 0
                                      : pn + 1 < p1 ? wg + ((pn + 1) * K + k0) * CF_MR
                                      : !last       ? wg + (p0 * K + k0 + kc) * CF_MR
                                                    : 0;
                    const float *A = wg + (pn * K + k0) * CF_MR;
                    int w = s + 1 < ns && fn[s] == tile3 && !offs ? narrow_width(fn[s + 1]) : 0;
                    if (w) { /* a full strip and the narrow one after it: one pass over A (the
                                49th pixel of a 7x7 layer read the panel's weights again) */
                        float *sums2 = sums + per_block * tile_size;
                        tile_out o2, *out2 =
                            strip_out(t, g, pn, r + (s + 1) * (CF_NR + 1), runs[s + 1], last, &o2);
                        pair_fns[w](t, A, src[s], ldb[s], kc, sums, k0 > 0, out, pf, src[s + 1],
                                    ldb[s + 1], sums2, out2);
                        s++;
                        continue;
                    }
                    fn[s](t, A, src[s], ldb[s], offs, kc, sums, k0 > 0, out, pf);
                }
        }
        for (int64_t s = 0; s < ns; s++) {
            const run *rs = r + s * (CF_NR + 1), *end = rs + runs[s] - 1;
            if (t->wide || rs->out / (t->M * P) != end->out / (t->M * P)) /* spans images */
                for (int64_t pn = p0; pn < p1; pn++)
                    store_tile(t, g, pn * CF_MR, ct + (s * per_block + pn - p0) * tile_size, rs,
                               runs[s]);
        }
    }
    return 0;
}
/* The columns of jobs begin <= q < end, q = (group, block of kc rows of K, strip), into
   t->cols: packed once for all the parts when those split a layer's output channels (each
   would pack them all); blocks of K as jobs of their own share a few strips' packing between
   threads. */
EXPORT AVX512 int onyx_conv_f32_pack_range(const void *p, int64_t begin, int64_t end) {
    const conv_f32 *t = p;
    if (!conv_f32_ok(t) || begin < 0 || begin > end || !cols_ok(t)) return ONYX_INVALID;
    int64_t K = (t->C / t->group) * t->kh * t->kw, blocks = (K + t->kc - 1) / t->kc, jobs;
    if (!onyx_mul(t->group, blocks, &jobs) || !onyx_mul(jobs, t->strips, &jobs) || end > jobs)
        return ONYX_INVALID;
    run r[CF_NR + 1];
    if (t->raw || !t->cols) return ONYX_INVALID; /* (a raw conv is wide: it packs nothing) */
    for (int64_t q = begin; q < end; q++) {
        int64_t s = q % t->strips, k0 = q / t->strips % blocks * t->kc, g = q / t->strips / blocks;
        int64_t kc = K - k0 < t->kc ? K - k0 : t->kc;
        int runs = strip_runs(t, s, r);
        pack_columns(t, g, r, runs, k0, kc, t->cols + ((g * t->strips + s) * K + k0) * CF_NR);
    }
    return 0;
}
#endif

/* x's planes (H x W, contiguous) into the interior of dst's (Hp x Wp, their borders left as
   they are: a wide conv's own zero-bordered input), from row top and column left, rows and
   columns past dst's dropped (what a window never reads). A row is a memcpy, where numpy's
   slice assignment paid its per-row overhead on a small layer's short rows. */
EXPORT int onyx_pad_planes_f32(const float *x, int64_t planes, int64_t H, int64_t W, float *dst,
                               int64_t Hp, int64_t Wp, int64_t top, int64_t left) {
    int64_t sizes[8] = {planes, H, W, Hp, Wp, top, left, 0}, cells;
    if (!onyx_in(sizes, 8, 0, ONYX_MAX_EXTENT) || top > Hp || left > Wp || !x || !dst ||
        !onyx_mul(planes, H * W, &cells) || !onyx_mul(planes, Hp * Wp, &cells))
        return ONYX_INVALID;
    int64_t h = H < Hp - top ? H : Hp - top, w = W < Wp - left ? W : Wp - left;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < h; i++)
            memcpy(dst + (p * Hp + top + i) * Wp + left, x + (p * H + i) * W,
                   sizeof(float) * (size_t)w);
    return 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* onyx_phase_planes_f32 on AVX-512, a row pair at a time (phase_row: each input row read once
   for both of its column phases, where a strided copy per phase read it twice). */
static AVX512 void phase_planes_avx512(const float *x, int64_t planes, int64_t H, int64_t W,
                                       float *dst, int64_t Hq, int64_t Wq, int64_t top,
                                       int64_t left) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t r = 0; r < 2 * Hq; r++) { /* the padded input's row r: phase row r % 2 */
            float *d0 = dst + ((p * 4 + r % 2 * 2) * Hq + r / 2) * Wq;
            int64_t ih = r - top;
            phase_row(ih < 0 || ih >= H ? 0 : x + (p * H + ih) * W, W, left, d0, d0 + Hq * Wq, Wq);
        }
}
#endif

/* x's planes (H x W) as a stride-2 wide conv's phases (conv_f32.c's wide = 2): per plane four
   Hq x Wq planes, phase (pr, pc)'s cell (i, j) the padded input's (2i + pr, 2j + pc), that is
   x's (2i + pr - top, 2j + pc - left), zero outside x. */
EXPORT int onyx_phase_planes_f32(const float *x, int64_t planes, int64_t H, int64_t W, float *dst,
                                 int64_t Hq, int64_t Wq, int64_t top, int64_t left) {
    int64_t sizes[8] = {planes, H, W, Hq, Wq, top, left, 0}, cells;
    if (!onyx_in(sizes, 8, 0, ONYX_MAX_EXTENT) || !x || !dst || !onyx_mul(planes, H * W, &cells) ||
        !onyx_mul(planes, 4 * Hq * Wq, &cells))
        return ONYX_INVALID;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (onyx_isa() & ONYX_ISA_AVX512) {
        phase_planes_avx512(x, planes, H, W, dst, Hq, Wq, top, left);
        return 0;
    }
#endif
    for (int64_t p = 0; p < planes; p++)
        for (int64_t ph = 0; ph < 4; ph++)
            for (int64_t i = 0; i < Hq; i++) {
                float *d = dst + ((p * 4 + ph) * Hq + i) * Wq;
                int64_t ih = 2 * i + ph / 2 - top, c0 = ph % 2 - left;
                if (ih < 0 || ih >= H) {
                    memset(d, 0, sizeof(float) * (size_t)Wq);
                    continue;
                }
                const float *row = x + (p * H + ih) * W;
                for (int64_t j = 0; j < Wq; j++) {
                    int64_t iw = 2 * j + c0;
                    d[j] = iw >= 0 && iw < W ? row[iw] : 0.0f;
                }
            }
    return 0;
}

/* Planes begin <= p < end of a stride-2 conv's input into their phases: a pool job's part
   (the caller's serial copy was a fifth of the conv's time at two threads). t is read as a
   phase job: x the input, N planes of H x W; cols the phases, xh x xw each, from the padded
   input's row xtop and column xleft (onyx_phase_planes_f32's Hq, Wq, top and left). */
EXPORT int onyx_conv_f32_phase_range(const void *p, int64_t begin, int64_t end) {
    const conv_f32 *t = p;
    int64_t sizes[7] = {t->N, t->H, t->W, t->xh, t->xw, t->xtop, t->xleft}, cells;
    if (!onyx_in(sizes, 7, 0, ONYX_MAX_EXTENT) || begin < 0 || begin > end || end > t->N ||
        !t->x || !t->cols || !onyx_mul(t->N, t->H * t->W, &cells) ||
        !onyx_mul(t->N, 4 * t->xh * t->xw, &cells) || t->ncols < cells)
        return ONYX_INVALID;
    return onyx_phase_planes_f32(t->x + begin * t->H * t->W, end - begin, t->H, t->W,
                                 t->cols + begin * 4 * t->xh * t->xw, t->xh, t->xw, t->xtop,
                                 t->xleft);
}

/* x's planes (H x W) sampled every sh rows and sw columns into dst's (OH x OW): a strided 1x1
   conv's input, which then runs as an unpadded unit-stride one reading its columns in place
   (where packing them took a strided copy per strip and row, as long as its multiply-adds). */
EXPORT int onyx_subsample_planes_f32(const float *x, int64_t planes, int64_t H, int64_t W,
                                     float *dst, int64_t OH, int64_t OW, int64_t sh, int64_t sw) {
    int64_t sizes[8] = {planes, H, W, OH, OW, sh - 1, sw - 1, 0}, cells;
    if (!onyx_in(sizes, 8, 0, ONYX_MAX_EXTENT) || !x || !dst || !onyx_mul(planes, H * W, &cells) ||
        !onyx_mul(planes, OH * OW, &cells) || (OH && (OH - 1) * sh >= H) ||
        (OW && (OW - 1) * sw >= W))
        return ONYX_INVALID;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < OH; i++) {
            const float *row = x + (p * H + i * sh) * W;
            float *d = dst + (p * OH + i) * OW;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
            if (onyx_isa() & ONYX_ISA_AVX512 && sw <= 1 << 20) { /* (int32 lanes' columns) */
                strided_copy(row, 0, sw, W, OW, d);
                continue;
            }
#endif
            for (int64_t j = 0; j < OW; j++) d[j] = row[j * sw];
        }
    return 0;
}

/* The register tile's sizes (MR output channels, NR pixels), for Python's packing. */
EXPORT void onyx_conv_f32_shape(int64_t *mr_nr) { mr_nr[0] = CF_MR, mr_nr[1] = CF_NR; }
