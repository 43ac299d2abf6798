/* Convs by output planes (part of the _kernels library; Python: depthwise.py): depthwise
 * convs, float and integer, portable and on AVX-512, and the few-input-channel stem conv.
 *
 * Depthwise 2-D convolution (group == C, M = C * mult output channels), one (image, output
 * channel) plane at a time. The input plane is copied, padded, into its stride phases: phase
 * (r0, r1) holds the padded pixels (i * sh + r0, j * sw + r1), Hq x Wq of them. Every kernel
 * tap then reads one phase at a fixed offset with unit stride: flattened, a tap is one run of
 * OH * Wq values in which output pixel (i, j) sits at i * Wq + j (the columns j >= OW are
 * wrap-around garbage, dropped when the result is stored). So each tap is one long
 * multiply-add loop, which the compiler vectorizes whatever the plane's width (ONNX's
 * MobileNets have 7x7 planes), over a block of rows whose sums stay in L1.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"
#include "activation.h"



typedef struct {
    int64_t Hq, Wq, phase, K, rows; /* phase: values per phase; rows: output rows per block */
} dw_layout;

#define DW_BLOCK 2048 /* sums per block of rows (8 KB of float or int32) */

static dw_layout dw_layout_of(const dw_geometry *g) {
    dw_layout d;
    int64_t need_h = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    int64_t need_w = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    d.Hq = (need_h + g->sh - 1) / g->sh;
    d.Wq = (need_w + g->sw - 1) / g->sw;
    /* the last tap's run ends (kw - 1) * dw / sw values past its phase's last row */
    d.phase = d.Hq * d.Wq + ((g->kw - 1) * g->dw) / g->sw;
    d.K = g->kh * g->kw;
    d.rows = DW_BLOCK / d.Wq > 0 ? DW_BLOCK / d.Wq : 1;
    return d;
}

/* Where each tap's run starts in the phase buffer. */
static void dw_taps(const dw_geometry *g, const dw_layout *d, int64_t *start) {
    for (int64_t a = 0; a < g->kh; a++)
        for (int64_t b = 0; b < g->kw; b++) {
            int64_t v = a * g->dh, u = b * g->dw;
            start[a * g->kw + b] =
                ((v % g->sh) * g->sw + u % g->sw) * d->phase + (v / g->sh) * d->Wq + u / g->sw;
        }
}

/* For the input row h and phase column r1: the first input column w0 landing there, and its
   place in the phase buffer (-1: the row is past what the windows read). */
static int64_t dw_row_dst(const dw_geometry *g, const dw_layout *d, int64_t h, int64_t r1,
                          int64_t *w0) {
    int64_t ph = h + g->top;
    if (ph >= d->Hq * g->sh) return -1;
    *w0 = ((r1 - g->left) % g->sw + g->sw) % g->sw;
    return ((ph % g->sh) * g->sw + r1) * d->phase + (ph / g->sh) * d->Wq + (*w0 + g->left) / g->sw;
}

/* The input plane into the zeroed phase buffer: x - zp, as the buffer's type. */
#define DW_SCATTER(name, S, T)                                                               \
    static void name(const S *x, int32_t zp, const dw_geometry *g, const dw_layout *d,       \
                     T *buf) {                                                               \
        memset(buf, 0, (size_t)(g->sh * g->sw * d->phase) * sizeof(T));                      \
        int64_t wend = d->Wq * g->sw - g->left; /* past this, no window reads the column */  \
        if (wend > g->W) wend = g->W;                                                        \
        for (int64_t h = 0; h < g->H; h++)                                                   \
            for (int64_t r1 = 0; r1 < g->sw; r1++) {                                         \
                int64_t w0, at = dw_row_dst(g, d, h, r1, &w0);                               \
                if (at < 0) break;                                                           \
                const S *row = x + h * g->W + w0;                                            \
                T *restrict dst = buf + at;                                                  \
                int64_t count = wend > w0 ? (wend - w0 + g->sw - 1) / g->sw : 0;             \
                if (g->sw == 1) /* (spelled out: it vectorizes) */                           \
                    for (int64_t j = 0; j < count; j++) dst[j] = (T)(row[j] - zp);           \
                else                                                                         \
                    for (int64_t j = 0; j < count; j++) dst[j] = (T)(row[j * g->sw] - zp);   \
            }                                                                                \
    }
DW_SCATTER(dw_scatter_f32, float, float)
DW_SCATTER(dw_scatter_u8, uint8_t, int16_t)
DW_SCATTER(dw_scatter_s8, int8_t, int16_t)

#if defined(__GNUC__) && !defined(__clang__)
#define IVDEP _Pragma("GCC ivdep") /* the sums and the buffer do not overlap */
#else
#define IVDEP
#endif

/* acc[0, n) = sum over taps of w[t] * buf[start[t] + j0 + j], four taps per pass over acc
   (fewer loads and stores of the sums; the compiler's own unroll-and-jam of this loop nest
   gives up vectorizing it). */
#define DW_SUMS(name, T, W, A)                                                              \
    static inline void name(const T *buf, const W *w, const int64_t *start, int64_t K,       \
                            int64_t j0, int64_t n, A *restrict acc) {                        \
        for (int64_t j = 0; j < n; j++) acc[j] = 0;                                          \
        int64_t t = 0;                                                                       \
        for (; t + 4 <= K; t += 4) {                                                         \
            const T *s0 = buf + start[t] + j0, *s1 = buf + start[t + 1] + j0;               \
            const T *s2 = buf + start[t + 2] + j0, *s3 = buf + start[t + 3] + j0;           \
            A w0 = (A)w[t], w1 = (A)w[t + 1], w2 = (A)w[t + 2], w3 = (A)w[t + 3];            \
            IVDEP for (int64_t j = 0; j < n; j++)                                            \
                acc[j] += w0 * (A)s0[j] + w1 * (A)s1[j] + w2 * (A)s2[j] + w3 * (A)s3[j];      \
        }                                                                                    \
        for (; t < K; t++) {                                                                 \
            const T *s0 = buf + start[t] + j0;                                               \
            A w0 = (A)w[t];                                                                  \
            IVDEP for (int64_t j = 0; j < n; j++) acc[j] += w0 * (A)s0[j];                   \
        }                                                                                    \
    }
DW_SUMS(dw_sums_f32, float, float, float)
DW_SUMS(dw_sums_i16, int16_t, int16_t, int32_t)

/* The input plane that conv channel c of image n reads: plane n * C + c, or with a channel
   shuffle of s groups (ShuffleNet's Reshape -> Transpose -> Reshape before its depthwise
   conv, ai.onyx ChannelShuffleConv) the channel the shuffle moved to c: channel c = i * s + j
   of the shuffled tensor is channel j * (C / s) + i of x. */
static inline int64_t dw_source(const dw_geometry *g, int64_t n, int64_t c) {
    if (g->shuffle > 1) c = (c % g->shuffle) * (g->C / g->shuffle) + c / g->shuffle;
    return n * g->C + c;
}

/* Float planes p0 <= p < p1 of the (N, M, OH, OW) output: y = conv(x, w) + bias. */

EXPORT CLONES int onyx_depthwise_f32(const float *x, const float *w, const float *bias,
                                     float *y, const dw_geometry *g, int64_t p0, int64_t p1) {
    dw_layout d = dw_layout_of(g);
    int64_t M = g->C * g->mult, *start = malloc((size_t)d.K * sizeof(int64_t));
    float *buf = malloc((size_t)(g->sh * g->sw * d.phase) * sizeof(float));
    float *acc = malloc((size_t)(d.rows * d.Wq) * sizeof(float));
    if (!start || !buf || !acc) {
        free(start), free(buf), free(acc);
        return ONYX_NOMEM;
    }
    dw_taps(g, &d, start);
    int64_t scattered = -1;
    for (int64_t p = p0; p < p1; p++) {
        int64_t src = dw_source(g, p / M, (p % M) / g->mult); /* the input plane */
        if (src != scattered) dw_scatter_f32(x + src * g->H * g->W, 0, g, &d, buf);
        scattered = src;
        float b = bias ? bias[p % M] : 0.0f;
        float *out = y + p * g->OH * g->OW;
        for (int64_t i0 = 0; i0 < g->OH; i0 += d.rows) {
            int64_t rows = g->OH - i0 < d.rows ? g->OH - i0 : d.rows;
            dw_sums_f32(buf, w + (p % M) * d.K, start, d.K, i0 * d.Wq, rows * d.Wq, acc);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < g->OW; j++)
                    out[(i0 + i) * g->OW + j] = acc[i * d.Wq + j] + b;
        }
    }
    free(start), free(buf), free(acc);
    return 0;
}

/* The integer depthwise conv's output: int32 sums (+ bias) in y32, or requantized as the
   int8 GEMM's epilogue does: clamp(rint(acc * scale[m]) + zero_point) in y8. */

/* n sums a[j * stride] of output channel m (+ its bias) into the output from element at:
   as int32, or requantized. Shared by both integer kernels. */
static inline void dw_store(const dw_output *o, int64_t m, const int32_t *a, int64_t stride,
                            int64_t n, int64_t at) {
    int32_t b = o->bias ? o->bias[m] : 0;
    if (!o->y8) {
        for (int64_t j = 0; j < n; j++) o->y32[at + j] = a[j * stride] + b;
        return;
    }
    /* rint for |v| < 2**22: adding and taking away 1.5 * 2**23 rounds half to even */
    const float magic = 12582912.0f, lo = (float)(o->lo - o->zero_point),
                hi = (float)(o->hi - o->zero_point), s = o->scale[m];
    for (int64_t j = 0; j < n; j++) {
        float v = (float)(a[j * stride] + b) * s;
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        o->y8[at + j] = (uint8_t)((int32_t)((v + magic) - magic) + o->zero_point);
    }
    if (o->table) /* an activation's table (QLinearConvLookup) */
        for (int64_t j = 0; j < n; j++) o->y8[at + j] = o->table[o->y8[at + j]];
}

/* Integer planes p0 <= p < p1: (x - x_zp) * wc (+ bias), x bytes (signed or not), wc the
   weights minus their zero points as int16 [M][kh * kw]. The padding is x_zp (adds nothing). */
EXPORT CLONES int onyx_depthwise_i8(const uint8_t *x, int x_signed, int32_t x_zp,
                                    const int16_t *wc, const dw_geometry *g, const dw_output *o,
                                    int64_t p0, int64_t p1) {
    dw_layout d = dw_layout_of(g);
    int64_t M = g->C * g->mult, *start = malloc((size_t)d.K * sizeof(int64_t));
    int16_t *buf = malloc((size_t)(g->sh * g->sw * d.phase) * sizeof(int16_t));
    int32_t *acc = malloc((size_t)(d.rows * d.Wq) * sizeof(int32_t));
    if (!start || !buf || !acc) {
        free(start), free(buf), free(acc);
        return ONYX_NOMEM;
    }
    dw_taps(g, &d, start);
    int64_t scattered = -1;
    for (int64_t p = p0; p < p1; p++) {
        int64_t m = p % M, src = dw_source(g, p / M, m / g->mult);
        if (src != scattered) {
            const uint8_t *plane = x + src * g->H * g->W;
            if (x_signed) dw_scatter_s8((const int8_t *)plane, x_zp, g, &d, buf);
            else dw_scatter_u8(plane, x_zp, g, &d, buf);
        }
        scattered = src;
        for (int64_t i0 = 0; i0 < g->OH; i0 += d.rows) {
            int64_t rows = g->OH - i0 < d.rows ? g->OH - i0 : d.rows;
            dw_sums_i16(buf, wc + m * d.K, start, d.K, i0 * d.Wq, rows * d.Wq, acc);
            int64_t at = p * g->OH * g->OW + i0 * g->OW;
            for (int64_t i = 0; i < rows; i++, at += g->OW)
                dw_store(o, m, acc + i * d.Wq, 1, g->OW, at);
        }
    }
    free(start), free(buf), free(acc);
    return 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The depthwise conv on AVX-512, 16 output channels per vector (onnxruntime's NCHWc idea):
   the 16 input planes are interleaved into a padded buffer of 16-lane pixels, each output
   pixel is kh * kw vector multiply-adds (4 pixels at a time, sharing the weight loads), and
   the lanes go back to their planes when a row is stored. No per-plane overhead, so 7x7
   planes run as fast as large ones. Planes here are (image, block of 16 channels) pairs. */
#define AVX512 __attribute__((target("avx512f")))
#include "activation.h"

#define DWV_CHUNK 256 /* pixels whose sums (16 KB) a part stores at once */

typedef struct {
    int64_t Hp, Wp, K; /* the padded input's rows and columns; taps */
    int64_t band, bands, rows; /* a part's output rows, parts per block; its buffer's rows */
    int64_t chunk;             /* output rows summed before they are stored */
} dwv_layout;

static dwv_layout dwv_layout_of(const dw_geometry *g) {
    dwv_layout d;
    d.Hp = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    d.Wp = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    d.K = g->kh * g->kw;
    d.band = g->band > 0 && g->band < g->OH ? g->band : g->OH;
    d.bands = (g->OH + d.band - 1) / d.band;
    d.rows = (d.band - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    d.chunk = DWV_CHUNK / g->OW > 0 ? DWV_CHUNK / g->OW : 1; /* (the sums stay in L1) */
    if (d.chunk > d.band) d.chunk = d.band;
    return d;
}

/* Row r of the buffer of the band from output row i0 (padded row i0 * sh + r): zeroes what
   falls in the padding and returns the image row whose wend pixels go to row + left, or -1
   (a row wholly in the padding). The buffer is not zeroed beforehand: a part's band moves. */
static int64_t dwv_band_row(const dw_geometry *g, const dwv_layout *d, int64_t i0, int64_t r,
                            int64_t wend, void *row) {
    int64_t h = i0 * g->sh + r - g->top;
    if (h < 0 || h >= g->H) {
        memset(row, 0, (size_t)(d->Wp * 16) * 4);
        return -1;
    }
    memset(row, 0, (size_t)(g->left * 16) * 4);
    memset((char *)row + (g->left + wend) * 64, 0, (size_t)((d->Wp - g->left - wend) * 16) * 4);
    return h;
}

/* Part p of an AVX-512 depthwise or small conv: image n, the block of 16 output channels from
   m0 (lanes of them), output rows i0 .. i1, which read `rows` padded input rows from i0 * sh. */
typedef struct {
    int64_t n, m0, lanes, i0, i1, rows;
} dwv_part;

static dwv_part dwv_part_of(const dw_geometry *g, const dwv_layout *d, int64_t M, int64_t p) {
    int64_t blocks = (M + 15) / 16, block = p / d->bands;
    dwv_part q = {block / blocks, block % blocks * 16, 0, p % d->bands * d->band, 0, 0};
    q.lanes = M - q.m0 < 16 ? M - q.m0 : 16;
    q.i1 = q.i0 + d->band < g->OH ? q.i0 + d->band : g->OH;
    q.rows = (q.i1 - 1 - q.i0) * g->sh + (g->kh - 1) * g->dh + 1;
    return q;
}

/* Input plane of each lane (block m0 of image n; lanes past M repeat the last channel). */
static void dwv_planes(const dw_geometry *g, int64_t n, int64_t m0, int64_t *plane) {
    int64_t M = g->C * g->mult;
    for (int l = 0; l < 16; l++) {
        int64_t m = m0 + l < M ? m0 + l : M - 1;
        plane[l] = dw_source(g, n, m / g->mult) * g->H * g->W;
    }
}

/* The interior of the padded buffer (its border stays zero): lane l of pixel (h, w) is
   plane l's value minus zp. */
#define DWV_FILL(name, S, T)                                                               \
    static void name(const S *x, const int64_t *plane, int32_t zp, const dw_geometry *g,   \
                     const dwv_layout *d, const dwv_part *q, T *buf) {                     \
        int64_t wend = d->Wp - g->left < g->W ? d->Wp - g->left : g->W;                    \
        for (int64_t r = 0; r < q->rows; r++) {                                            \
            T *row = buf + r * d->Wp * 16;                                                 \
            int64_t h = dwv_band_row(g, d, q->i0, r, wend, row);                           \
            if (h < 0) continue;                                                           \
            row += g->left * 16;                                                           \
            for (int l = 0; l < 16; l++) {                                                 \
                const S *src = x + plane[l] + h * g->W;                                    \
                for (int64_t w = 0; w < wend; w++) row[w * 16 + l] = (T)(src[w] - zp);     \
            }                                                                              \
        }                                                                                  \
    }

/* r[k] = column k of the 16 x 16 block of rows r[0..15] (four rounds of shuffles). */
AVX512 static inline void transpose16_ps(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++) {
            t[8 * h + k] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + 4 + k], 0x88);
            t[8 * h + 4 + k] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + 4 + k], 0xdd);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    }
}

/* The band's input rows into the buffer, 16 pixels of the 16 planes at a time through the
   register transpose. The image rows a band reads are one run of each plane, read as one
   flat stream (a 6-pixel row would waste 10 of every 16 lanes' loads and shuffles); each
   transposed pixel goes to its place in the padded buffer, whose rows in the padding and
   borders dwv_band_row zeroes. *hlo: the first image row read (-1: none). */
AVX512 static int64_t dwv_rows_read(const dw_geometry *g, const dwv_layout *d, const dwv_part *q,
                                    int64_t wend, void *buf, int64_t *hlo) {
    int64_t hhi = -1;
    *hlo = -1;
    for (int64_t r = 0; r < q->rows; r++) {
        int64_t h = dwv_band_row(g, d, q->i0, r, wend, (char *)buf + r * d->Wp * 64);
        if (h >= 0 && *hlo < 0) *hlo = h;
        if (h >= 0) hhi = h + 1;
    }
    return *hlo < 0 ? 0 : (hhi - *hlo) * g->W; /* (the rows read are consecutive) */
}

/* Pixels r[0 .. n) of the stream to the buffer: pixel (h, w) of the image at buf + at,
   advanced with it (columns past wend: no window reads them). */
typedef struct {
    int64_t w, at;
} dwv_cursor;

AVX512 static inline void dwv_scatter(const __m512 r[16], int n, const dw_geometry *g,
                                      const dwv_layout *d, int64_t wend, dwv_cursor *c,
                                      float *buf) {
    int64_t w = c->w, at = c->at, wrap = (d->Wp - g->W) * 16;
    if (n == 16 && w + 16 < g->W && w + 16 <= wend) { /* (most pixels of wide rows) */
        for (int k = 0; k < 16; k++) _mm512_storeu_ps(buf + at + 16 * k, r[k]);
        c->w = w + 16, c->at = at + 256;
        return;
    }
    for (int k = 0; k < 16; k++) { /* (constant bounds: r stays in registers) */
        if (k < n) {
            if (w < wend) _mm512_storeu_ps(buf + at, r[k]);
            at += 16;
            if (++w == g->W) w = 0, at += wrap;
        }
    }
    c->w = w, c->at = at;
}

/* Where the stream's first pixel (image row hlo, column 0) goes in the band's buffer. */
static inline dwv_cursor dwv_cursor_at(const dw_geometry *g, const dwv_layout *d,
                                       const dwv_part *q, int64_t hlo) {
    dwv_cursor c = {0, ((hlo + g->top - q->i0 * g->sh) * d->Wp + g->left) * 16};
    return c;
}

AVX512 static void dwv_fill_f32(const float *x, const int64_t *plane, const dw_geometry *g,
                                const dwv_layout *d, const dwv_part *q, float *buf) {
    int64_t wend = d->Wp - g->left < g->W ? d->Wp - g->left : g->W, hlo;
    int64_t count = dwv_rows_read(g, d, q, wend, buf, &hlo);
    dwv_cursor c = dwv_cursor_at(g, d, q, hlo);
    __m512 r[16];
    for (int64_t s = 0; s < count; s += 16) {
        int n = count - s < 16 ? (int)(count - s) : 16;
        __mmask16 m = (__mmask16)((1u << n) - 1);
        for (int l = 0; l < 16; l++) r[l] = _mm512_maskz_loadu_ps(m, x + plane[l] + hlo * g->W + s);
        transpose16_ps(r);
        dwv_scatter(r, n, g, d, wend, &c, buf);
    }
}

/* The float fill of wide rows, row by row, 16 pixels of the 16 planes at a time through a
   register transpose. */
AVX512 static void dwv_fill_f32_rows(const float *x, const int64_t *plane, const dw_geometry *g,
                                const dwv_layout *d, const dwv_part *q, float *buf) {
    int64_t wend = d->Wp - g->left < g->W ? d->Wp - g->left : g->W;
    for (int64_t r = 0; r < q->rows; r++) {
        float *row = buf + r * d->Wp * 16;
        int64_t h = dwv_band_row(g, d, q->i0, r, wend, row);
        if (h < 0) continue;
        row += g->left * 16;
        int64_t w = 0;
        __m512 r[16];
        for (; w + 16 <= wend; w += 16) {
            for (int l = 0; l < 16; l++) r[l] = _mm512_loadu_ps(x + plane[l] + h * g->W + w);
            transpose16_ps(r);
            for (int k = 0; k < 16; k++) _mm512_storeu_ps(row + (w + k) * 16, r[k]);
        }
        if (w < wend) { /* the last pixels: masked loads (kept apart: the full chunks' loops
                           have constant bounds, so r stays in registers) */
            int n = (int)(wend - w);
            __mmask16 m = (__mmask16)((1u << n) - 1);
            for (int l = 0; l < 16; l++) r[l] = _mm512_maskz_loadu_ps(m, x + plane[l] + h * g->W + w);
            transpose16_ps(r);
            for (int k = 0; k < 16; k++)
                if (k < n) _mm512_storeu_ps(row + (w + k) * 16, r[k]);
        }
    }
}
/* The byte fill for float sums (see onyx_depthwise_i8_avx512): x - zp as float, 16 pixels
   of the 16 planes at a time through the register transpose. The stream's last pixels are
   read 16 bytes at a time too (the excess is never stored) while that stays inside the
   image (end: the offset of its end), else through a copy. */
AVX512 static inline __m512 dwv_bytes_ps(const uint8_t *x, int64_t at, int64_t n, int64_t end,
                                         int is_signed) {
    __m128i b;
    if (at + 16 <= end) {
        b = _mm_loadu_si128((const __m128i *)(x + at));
    } else { /* (byte-masked loads would need AVX512-BW) */
        uint8_t t[16] = {0};
        for (int64_t k = 0; k < n; k++) t[k] = x[at + k];
        b = _mm_loadu_si128((const __m128i *)t);
    }
    return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}

/* The byte fill of wide rows, row by row (as dwv_fill_f32_rows). */
AVX512 static void dwv_fill_bytes_rows(const uint8_t *x, int is_signed, const int64_t *plane,
                                  int32_t zp, const dw_geometry *g, const dwv_layout *d,
                                  int64_t end, const dwv_part *q, float *buf) {
    int64_t wend = d->Wp - g->left < g->W ? d->Wp - g->left : g->W;
    __m512 z = _mm512_set1_ps((float)zp);
    for (int64_t r = 0; r < q->rows; r++) {
        float *row = buf + r * d->Wp * 16;
        int64_t h = dwv_band_row(g, d, q->i0, r, wend, row);
        if (h < 0) continue;
        row += g->left * 16;
        for (int64_t w = 0; w < wend; w += 16) {
            int64_t n = wend - w < 16 ? wend - w : 16;
            __m512 r[16];
            for (int l = 0; l < 16; l++)
                r[l] = _mm512_sub_ps(dwv_bytes_ps(x, plane[l] + h * g->W + w, n, end, is_signed), z);
            transpose16_ps(r);
            for (int k = 0; k < 16; k++)
                if (k < n) _mm512_storeu_ps(row + (w + k) * 16, r[k]);
        }
    }
}

AVX512 static void dwv_fill_bytes(const uint8_t *x, int is_signed, const int64_t *plane,
                                  int32_t zp, const dw_geometry *g, const dwv_layout *d,
                                  int64_t end, const dwv_part *q, float *buf) {
    int64_t wend = d->Wp - g->left < g->W ? d->Wp - g->left : g->W, hlo;
    int64_t count = dwv_rows_read(g, d, q, wend, buf, &hlo);
    dwv_cursor c = dwv_cursor_at(g, d, q, hlo);
    __m512 z = _mm512_set1_ps((float)zp), r[16];
    for (int64_t s = 0; s < count; s += 16) {
        int n = count - s < 16 ? (int)(count - s) : 16;
        for (int l = 0; l < 16; l++)
            r[l] = _mm512_sub_ps(dwv_bytes_ps(x, plane[l] + hlo * g->W + s, n, end, is_signed), z);
        transpose16_ps(r);
        dwv_scatter(r, n, g, d, wend, &c, buf);
    }
}
DWV_FILL(dwv_fill_u8, uint8_t, int32_t)
DWV_FILL(dwv_fill_s8, int8_t, int32_t)

/* out[p] (16 lanes) = sum over taps t of wt[t] * the tap's pixel (at off[t] from the
   window's corner), for the rows * OW output pixels of a band, taken as one stream: eight
   pixels at a time whatever the row width (a 7-pixel row had taken one pixel at a time, a
   chain of dependent multiply-adds), so each weight vector load serves eight multiply-adds
   and eight independent sums hide their latency. A last group of fewer than eight pixels
   repeats its last one. */
#define DWV_BAND(name, V, T, ZERO, LOAD, MADD, STORE)                                      \
    AVX512 static void name(const T *buf, const T *wt, const int64_t *off,                 \
                            const dw_geometry *g, const dwv_layout *d, int64_t i,          \
                            int64_t rows, T *out) {                                        \
        int64_t count = rows * g->OW, j = 0;                                               \
        for (int64_t s = 0; s < count; s += 8) {                                           \
            int n = count - s < 8 ? (int)(count - s) : 8;                                  \
            V a[8];                                                                        \
            for (int u = 0; u < 8; u++) a[u] = ZERO;                                       \
            if (n == 8 && j + 8 <= g->OW) { /* (one row: one pointer, as wide rows were) */ \
                int64_t step = g->sw * 16;                                                 \
                for (int64_t k = 0; k < g->kh; k++) {                                      \
                    const T *r = buf + ((i * g->sh + k * g->dh) * d->Wp + j * g->sw) * 16; \
                    const T *wr = wt + k * g->kw * 16;                                     \
                    for (int64_t b = 0; b < g->kw; b++) {                                  \
                        V w = LOAD(wr + b * 16);                                           \
                        const T *pt = r + b * g->dw * 16;                                  \
                        for (int u = 0; u < 8; u++)                                        \
                            a[u] = MADD(w, LOAD(pt + u * step), a[u]);                     \
                    }                                                                      \
                }                                                                          \
                for (int u = 0; u < 8; u++) STORE(out + (s + u) * 16, a[u]);               \
                if ((j += 8) == g->OW) j = 0, ++i;                                         \
                continue;                                                                  \
            }                                                                              \
            const T *p[8];                                                                 \
            for (int u = 0; u < 8; u++) {                                                  \
                p[u] = buf + (i * g->sh * d->Wp + j * g->sw) * 16;                         \
                if (u < n - 1 || (n == 8 && u == 7))                                       \
                    if (++j == g->OW) j = 0, ++i;                                          \
            }                                                                              \
            for (int64_t t = 0; t < d->K; t++) {                                           \
                V w = LOAD(wt + t * 16);                                                   \
                int64_t o = off[t];                                                        \
                for (int u = 0; u < 8; u++) a[u] = MADD(w, LOAD(p[u] + o), a[u]);          \
            }                                                                              \
            for (int u = 0; u < 8; u++)                                                    \
                if (u < n) STORE(out + (s + u) * 16, a[u]);                                \
        }                                                                                  \
    }
#define F_MADD(w, p, a) _mm512_fmadd_ps(w, p, a)
#define I_MADD(w, p, a) _mm512_add_epi32(a, _mm512_mullo_epi32(w, p))
#define I_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define I_STORE(p, v) _mm512_storeu_si512((void *)(p), v)
DWV_BAND(dwv_band_f32, __m512, float, _mm512_setzero_ps(), _mm512_loadu_ps, F_MADD, _mm512_storeu_ps)
DWV_BAND(dwv_band_i32, __m512i, int32_t, _mm512_setzero_si512(), I_LOAD, I_MADD, I_STORE)

/* Buffers of one call: the padded 16-lane input, the block's weights by tap, the taps'
   offsets, a band's sums. The vector buffers start on a 64-byte boundary (raw: what malloc
   gave): a vector load from malloc's 16-byte alignment would straddle two cache lines. */
typedef struct {
    void *buf, *wt, *sums, *raw[3];
    int64_t *off;
} dwv_scratch;

/* n 16-lane vectors of 4-byte values, aligned to their size; *raw: the block to free. */
static void *dwv_vectors(int64_t n, void **raw) {
    *raw = malloc((size_t)(n + 1) * 64);
    return *raw ? (void *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63) : NULL;
}

static void dwv_free(dwv_scratch *s) {
    free(s->raw[0]), free(s->raw[1]), free(s->raw[2]), free(s->off);
}

static int dwv_alloc(const dw_geometry *g, const dwv_layout *d, dwv_scratch *s) {
    s->buf = dwv_vectors(d->rows * d->Wp, &s->raw[0]); /* one band's rows */
    s->wt = dwv_vectors(d->K, &s->raw[1]);
    s->sums = dwv_vectors(d->chunk * g->OW, &s->raw[2]);
    s->off = malloc((size_t)d->K * sizeof(int64_t));
    if (s->buf && s->wt && s->sums && s->off) {
        for (int64_t k = 0; k < g->kh; k++)
            for (int64_t b = 0; b < g->kw; b++)
                s->off[k * g->kw + b] = (k * g->dh * d->Wp + b * g->dw) * 16;
        return 0;
    }
    dwv_free(s);
    return ONYX_NOMEM;
}

/* A band's sums (pixel p's 16 lanes at sums + 16 p) to the lanes' planes (out + l * OH * OW:
   the band's rows are one run of each plane), 16 pixels at a time through a register
   transpose, plus bias and the activation. */
static AVX512 void dwv_store_f32(const float *sums, int64_t count, const dw_geometry *g,
                                 int64_t lanes, const float *bias, float *out) {
    int64_t stride = g->OH * g->OW;
    for (int64_t j = 0; j < count; j += 16) {
        int64_t n = count - j < 16 ? count - j : 16;
        __mmask16 live = (__mmask16)((1u << n) - 1);
        __m512 r[16];
        for (int u = 0; u < 16; u++)
            r[u] = u < n ? _mm512_loadu_ps(sums + (j + u) * 16) : _mm512_setzero_ps();
        transpose16_ps(r); /* r[l]: lane l's pixels j .. j + 15 */
        for (int64_t l = 0; l < lanes; l++) {
            __m512 v = _mm512_add_ps(r[l], _mm512_set1_ps(bias ? bias[l] : 0.0f));
            v = onyx_activate(v, (int)g->act, g->alpha, g->beta);
            _mm512_mask_storeu_ps(out + l * stride + j, live, v);
        }
    }
}

/* Float blocks p0 <= p < p1, block p = (image p / B, channels 16 * (p % B) ...). */
EXPORT AVX512 int onyx_depthwise_f32_avx512(const float *x, const float *w, const float *bias,
                                            float *y, const dw_geometry *g, int64_t p0,
                                            int64_t p1) {
    dwv_layout d = dwv_layout_of(g);
    dwv_scratch s;
    if (dwv_alloc(g, &d, &s)) return ONYX_NOMEM;
    float *buf = s.buf, *sums = s.sums;
    int64_t M = g->C * g->mult, plane[16];
    for (int64_t p = p0; p < p1; p++) {
        dwv_part q = dwv_part_of(g, &d, M, p);
        int64_t n = q.n, m0 = q.m0, lanes = q.lanes, i0 = q.i0, i1 = q.i1;
        dwv_planes(g, n, m0, plane);
        if (g->W < 16) dwv_fill_f32(x, plane, g, &d, &q, buf); /* (narrow rows: one stream) */
        else dwv_fill_f32_rows(x, plane, g, &d, &q, buf);
        const float *wt = w + m0 * d.K; /* (block m0 / 16 of the packed weights) */
        for (int64_t i = i0; i < i1; i += d.chunk) {
            int64_t rows = i1 - i < d.chunk ? i1 - i : d.chunk;
            dwv_band_f32(buf, wt, s.off, g, &d, i - i0, rows, sums);
            dwv_store_f32(sums, rows * g->OW, g, lanes, bias ? bias + m0 : 0,
                          y + ((n * M + m0) * g->OH + i) * g->OW);
        }
    }
    dwv_free(&s);
    return 0;
}

/* Requantize `count` pixels' sums (pixel j's 16 lanes at sums + 16 j, channels m0 ..
   m0 + lanes) as dw_store does, 16 lanes per vector: pixel j's bytes to tile + 16 j. */
static AVX512 void dwv_requantize(const dw_output *o, int64_t m0, int64_t lanes,
                                  const int32_t *sums, int float_sums, int64_t count,
                                  uint8_t *tile) {
    __mmask16 live = (__mmask16)((1u << lanes) - 1);
    __m512i bias = o->bias ? _mm512_maskz_loadu_epi32(live, o->bias + m0) : _mm512_setzero_si512();
    __m512 s = _mm512_maskz_loadu_ps(live, o->scale + m0);
    __m512 lo = _mm512_set1_ps((float)(o->lo - o->zero_point));
    __m512 hi = _mm512_set1_ps((float)(o->hi - o->zero_point));
    __m512i zp = _mm512_set1_epi32(o->zero_point);
    for (int64_t j = 0; j < count; j++) {
        __m512i a = float_sums ? _mm512_cvtps_epi32(_mm512_loadu_ps((const float *)sums + 16 * j))
                               : _mm512_loadu_si512((const void *)(sums + 16 * j));
        a = _mm512_add_epi32(a, bias);
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), s);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi); /* (then rint: half to even) */
        __m512i q = _mm512_add_epi32(
            _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp);
        _mm_storeu_si128((__m128i *)(tile + 16 * j), _mm512_cvtepi32_epi8(q));
    }
}

/* Integer blocks: as onyx_depthwise_i8. Where a window's sum cannot reach 2**24 (kernels of
   up to 258 taps: |x - zp| and |wc| are at most 255), the sums run in float32, exactly: every
   partial sum is an integer below 2**24, and a fused multiply-add is one instruction where an
   int32 multiply is two, with twice the latency. Larger kernels sum in int32. */
EXPORT AVX512 int onyx_depthwise_i8_avx512(const uint8_t *x, int x_signed, int32_t x_zp,
                                           const int16_t *wc, const dw_geometry *g,
                                           const dw_output *o, int64_t p0, int64_t p1) {
    dwv_layout d = dwv_layout_of(g);
    dwv_scratch s;
    if (dwv_alloc(g, &d, &s)) return ONYX_NOMEM;
    int32_t *buf = s.buf, *wt = s.wt, *sums = s.sums;
    int64_t M = g->C * g->mult, plane[16];
    int exact = d.K * 255 * 255 < (1 << 24);
    uint8_t *tile = malloc((size_t)(d.chunk * g->OW * 16));
    if (!tile) {
        dwv_free(&s);
        return ONYX_NOMEM;
    }
    for (int64_t p = p0; p < p1; p++) {
        dwv_part q = dwv_part_of(g, &d, M, p);
        int64_t n = q.n, m0 = q.m0, lanes = q.lanes, i0 = q.i0, i1 = q.i1;
        dwv_planes(g, n, m0, plane);
        if (exact) {
            int64_t end = (n + 1) * g->C * g->H * g->W; /* (image n's) */
            if (g->W < 16) dwv_fill_bytes(x, x_signed, plane, x_zp, g, &d, end, &q, s.buf);
            else dwv_fill_bytes_rows(x, x_signed, plane, x_zp, g, &d, end, &q, s.buf);
        } else {
            if (x_signed) dwv_fill_s8((const int8_t *)x, plane, x_zp, g, &d, &q, buf);
            else dwv_fill_u8(x, plane, x_zp, g, &d, &q, buf);
        }
        for (int64_t t = 0; t < d.K; t++) { /* block m0 / 16 of the packed weights */
            __m512i v = _mm512_cvtepi16_epi32(
                _mm256_loadu_si256((const __m256i *)(wc + m0 * d.K + t * 16)));
            if (exact) _mm512_storeu_ps((float *)wt + t * 16, _mm512_cvtepi32_ps(v));
            else _mm512_storeu_si512((void *)(wt + t * 16), v);
        }
        for (int64_t i = i0; i < i1; i += d.chunk) {
            int64_t rows = i1 - i < d.chunk ? i1 - i : d.chunk, count = rows * g->OW;
            int64_t at = ((n * M + m0) * g->OH + i) * g->OW;
            if (exact) dwv_band_f32(s.buf, s.wt, s.off, g, &d, i - i0, rows, s.sums);
            else dwv_band_i32(buf, wt, s.off, g, &d, i - i0, rows, sums);
            if (o->y8) { /* a pixel's 16 lanes requantized at once, then to their planes */
                dwv_requantize(o, m0, lanes, sums, exact, count, tile);
                if (o->table) /* an activation's table (QLinearConvLookup) */
                    for (int64_t k = 0; k < count * 16; k++) tile[k] = o->table[tile[k]];
                onyx_transpose_u8(tile, count, lanes, 16, o->y8 + at, g->OH * g->OW);
                continue;
            }
            if (exact) /* float sums to int32 in place (integers: exact) */
                for (int64_t j = 0; j < count * 16; j += 16)
                    _mm512_storeu_si512((void *)(sums + j),
                                        _mm512_cvtps_epi32(_mm512_loadu_ps((float *)sums + j)));
            for (int64_t l = 0; l < lanes; l++)
                dw_store(o, m0 + l, sums + l, 16, count, at + l * g->OH * g->OW);
        }
    }
    free(tile);
    dwv_free(&s);
    return 0;
}

/* A convolution with few input channels (a network's stem: 3 channels, group 1) on AVX-512,
   16 output pixels of a row per vector: each tap of each input channel is one contiguous load
   of 16 input values times one broadcast weight per output channel, and a tile of 4 output
   channels x up to 4 vectors (64 pixels) shares its loads (the 16-channel-per-vector order
   loaded a broadcast per multiply-add and then transposed every row back to its planes).
   Rows go to the output planes as they are, with the bias and activation (g->act).
   The padded input rows of a part are split into their sw stride phases (phase f of a row:
   its padded columns f, f + sw, ...), so that a stride-2 tap's 16 inputs are one load.
   Parts p = (image, band of output rows, block of 16 output channels), the block fastest:
   consecutive parts of a band share its phase rows, filled once. */
typedef struct {
    int64_t Wq, rs, rows; /* values per phase; floats per buffered row; buffered rows a part */
    int64_t CK, band, bands, blocks;
} stem_layout;

/* Padded row r of the band from output row i0, channel c, into its phases at dst (line:
   Wq * sw + 32 floats of scratch for the padded row). */
static AVX512 void stem_fill_row(const float *x, const dw_geometry *g, const stem_layout *L,
                                 int64_t n, int64_t c, int64_t i0, int64_t r, float *line,
                                 float *dst) {
    int64_t h = i0 * g->sh + r - g->top, width = L->Wq * g->sw;
    if (h < 0 || h >= g->H) {
        memset(dst, 0, (size_t)width * sizeof(float));
        return;
    }
    /* (none where the begin pad reaches past the columns the windows read: a large stride) */
    int64_t take = g->W < width - g->left ? g->W : width - g->left;
    float *to = g->sw == 1 ? dst : line; /* (unit stride: the padded row is its one phase) */
    memset(to, 0, (size_t)(g->sw == 1 ? width : width + 32) * sizeof(float));
    if (take > 0)
        memcpy(to + g->left, x + ((n * g->C + c) * g->H + h) * g->W,
               (size_t)take * sizeof(float));
    if (g->sw == 1) return;
    if (g->sw == 2) { /* even and odd columns, 32 at a time */
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        for (int64_t q = 0; q < L->Wq; q += 16) {
            __m512 a = _mm512_loadu_ps(line + 2 * q), b = _mm512_loadu_ps(line + 2 * q + 16);
            __mmask16 live = L->Wq - q >= 16 ? 0xFFFF : (__mmask16)((1u << (L->Wq - q)) - 1);
            _mm512_mask_storeu_ps(dst + q, live, _mm512_permutex2var_ps(a, even, b));
            _mm512_mask_storeu_ps(dst + L->Wq + q, live, _mm512_permutex2var_ps(a, odd, b));
        }
    } else {
        for (int64_t f = 0; f < g->sw; f++)
            for (int64_t q = 0; q < L->Wq; q++) dst[f * L->Wq + q] = line[q * g->sw + f];
    }
}

/* Output row i (local row li of the part's buffer), pixels j0 .. j0 + 16 nv (the last vector
   masked by tail), channels m[0..3] (repeats past the block's last) of which `live` are
   stored: sums over the taps t in the order c, kh, kw (tap t reads at tap_at[t]). The 16
   sums are named variables: an array of them stayed in memory. */
#define STEM_X(v) __m512 x##v = v < nv ? _mm512_maskz_loadu_ps(v == nv - 1 ? tail : 0xFFFF, src + 16 * v) : zero
#define STEM_FMA(k, v) if (v < nv) s##k##v = _mm512_fmadd_ps(w##k, x##v, s##k##v)
#define STEM_ROW(k)                                                                        \
    { __m512 w##k = _mm512_set1_ps(wr[k][t]);                                              \
      STEM_FMA(k, 0); STEM_FMA(k, 1); STEM_FMA(k, 2); STEM_FMA(k, 3); }
#define STEM_OUT(k, v)                                                                     \
    if (v < nv && k < live)                                                                \
        _mm512_mask_storeu_ps(out[k] + 16 * v, v == nv - 1 ? tail : 0xFFFF,               \
                              onyx_activate(_mm512_add_ps(s##k##v, bv[k]), (int)g->act,   \
                                            g->alpha, g->beta))
#define STEM_OUTS(k) STEM_OUT(k, 0); STEM_OUT(k, 1); STEM_OUT(k, 2); STEM_OUT(k, 3)
static inline __attribute__((always_inline)) AVX512 void stem_tile(
    const float *buf, const float *w, const float *bias, float *const *rows, const dw_geometry *g,
    const stem_layout *L, const int64_t *tap_at, int64_t li, int64_t j0,
    const int nv, __mmask16 tail, const int64_t *m, int live) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 s00 = zero, s01 = zero, s02 = zero, s03 = zero, s10 = zero, s11 = zero, s12 = zero,
           s13 = zero, s20 = zero, s21 = zero, s22 = zero, s23 = zero, s30 = zero, s31 = zero,
           s32 = zero, s33 = zero;
    const float *wr[4] = {w + m[0] * L->CK, w + m[1] * L->CK, w + m[2] * L->CK, w + m[3] * L->CK};
    const float *base = buf + li * g->sh * L->rs + j0;
    for (int64_t t = 0; t < L->CK; t++) {
        const float *src = base + tap_at[t];
        STEM_X(0); STEM_X(1); STEM_X(2); STEM_X(3);
        STEM_ROW(0) STEM_ROW(1) STEM_ROW(2) STEM_ROW(3)
    }
    float *out[4];
    __m512 bv[4];
    for (int k = 0; k < 4; k++) {
        out[k] = rows[k] + j0;
        bv[k] = _mm512_set1_ps(bias ? bias[m[k]] : 0.0f);
    }
    STEM_OUTS(0); STEM_OUTS(1); STEM_OUTS(2); STEM_OUTS(3);
}

/* One output row's vectors (stem_tile, 4 at a time) for channels m[0..3], stored to rows[k]
   (where channel m[k]'s row begins). */
static inline __attribute__((always_inline)) AVX512 void
stem_row(const float *buf, const float *w, const float *bias, float *const *rows,
         const dw_geometry *g, const stem_layout *L, const int64_t *tap_at, int64_t li,
         int64_t vectors, __mmask16 last, const int64_t *m, int live) {
    for (int64_t v0 = 0; v0 < vectors; v0 += 4) {
        int nv = vectors - v0 < 4 ? (int)(vectors - v0) : 4;
        __mmask16 tail = v0 + nv == vectors ? last : 0xFFFF;
        int64_t j0 = v0 * 16;
        switch (nv) { /* (a constant count each: the tile stays in registers) */
        case 4: stem_tile(buf, w, bias, rows, g, L, tap_at, li, j0, 4, tail, m, live); break;
        case 3: stem_tile(buf, w, bias, rows, g, L, tap_at, li, j0, 3, tail, m, live); break;
        case 2: stem_tile(buf, w, bias, rows, g, L, tap_at, li, j0, 2, tail, m, live); break;
        default: stem_tile(buf, w, bias, rows, g, L, tap_at, li, j0, 1, tail, m, live);
        }
    }
}

EXPORT AVX512 int onyx_conv_small_f32_avx512(const float *x, const float *w, const float *bias,
                                             float *y, const dw_geometry *g, int64_t p0,
                                             int64_t p1) {
    dwv_layout d = dwv_layout_of(g);
    stem_layout L;
    L.Wq = (d.Wp + g->sw - 1) / g->sw;
    L.rs = L.Wq * g->sw + 16; /* (masked loads never read past a row's own phases) */
    L.band = d.band, L.bands = d.bands, L.blocks = (g->M + 15) / 16, L.CK = g->C * d.K;
    L.rows = (d.band - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    int64_t cells; /* (rs exceeds the padded width by up to sw + 16: counted again) */
    if (!onyx_mul(L.rows, L.rs, &cells) || !onyx_mul(cells, g->C, &cells)) return ONYX_INVALID;
    float *buf = malloc((size_t)cells * sizeof(float));
    float *line = malloc((size_t)(L.Wq * g->sw + 32) * sizeof(float));
    int64_t *tap_at = malloc((size_t)L.CK * sizeof(int64_t));
    if (!buf || !line || !tap_at) {
        free(buf), free(line), free(tap_at);
        return ONYX_NOMEM;
    }
    for (int64_t c = 0, t = 0; c < g->C; c++) /* (a tap's phase: its column's, by stride) */
        for (int64_t a = 0; a < g->kh; a++)
            for (int64_t b = 0; b < g->kw; b++, t++)
                tap_at[t] = (c * L.rows + a * g->dh) * L.rs + (b * g->dw) % g->sw * L.Wq +
                            (b * g->dw) / g->sw;
    int64_t filled = -1, vectors = (g->OW + 15) / 16;
    __mmask16 last = (__mmask16)(g->OW % 16 ? (1u << (g->OW % 16)) - 1 : 0xFFFF);
    for (int64_t p = p0; p < p1; p++) {
        int64_t block = p % L.blocks, nb = p / L.blocks, n = nb / L.bands;
        int64_t i0 = nb % L.bands * L.band, i1 = i0 + L.band < g->OH ? i0 + L.band : g->OH;
        int64_t m0 = block * 16, lanes = g->M - m0 < 16 ? g->M - m0 : 16;
        if (nb != filled) { /* the band's rows (its image's; once more where bands overlap) */
            int64_t rows = (i1 - 1 - i0) * g->sh + (g->kh - 1) * g->dh + 1;
            for (int64_t c = 0; c < g->C; c++)
                for (int64_t r = 0; r < rows; r++)
                    stem_fill_row(x, g, &L, n, c, i0, r, line, buf + (c * L.rows + r) * L.rs);
            filled = nb;
        }
        float *yn = y + n * g->M * g->OH * g->OW;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t k0 = 0; k0 < lanes; k0 += 4) {
                int64_t m[4];
                int live = lanes - k0 < 4 ? (int)(lanes - k0) : 4;
                float *rows[4];
                for (int k = 0; k < 4; k++) {
                    m[k] = m0 + k0 + (k < live ? k : live - 1);
                    rows[k] = yn + (m[k] * g->OH + i) * g->OW;
                }
                stem_row(buf, w, bias, rows, g, &L, tap_at, i - i0, vectors, last, m, live);
            }
    }
    free(buf), free(line), free(tap_at);
    return 0;
}

/* The stem conv (onyx_conv_small_f32_avx512's tiles, bias and activation) and the MaxPool
   after it, a band of pooled rows at a time: parts p = (image, band of t->band pooled rows,
   block of 16 channels), the block fastest. A part computes the conv rows its band's windows
   read (the row a window shares with the next band's computed again, in each) into a buffer
   that stays in L2, pools them there (window.c's onyx_pool2d_f32_range, a task of the band's
   rows: the same windows over the same values) and copies the pooled rows out: the conv's
   full-size output (3 MB for SqueezeNet's 64 x 111 x 111) is never written and read back. */
static AVX512 int stem_pool_parts(const stem_pool *t, int64_t p0, int64_t p1) {
    const dw_geometry *g = t->g;
    const pool2d *pool = t->pool;
    dwv_layout d = dwv_layout_of(g);
    stem_layout L;
    int64_t B = t->band, bands = (pool->OH + B - 1) / B, POHW = pool->OH * pool->OW;
    int64_t most = (B - 1) * pool->sh + (pool->kh - 1) * pool->dh + 1; /* conv rows a part */
    most = most < g->OH ? most : g->OH;
    L.Wq = (d.Wp + g->sw - 1) / g->sw;
    L.rs = L.Wq * g->sw + 16;
    L.blocks = (g->M + 15) / 16, L.CK = g->C * d.K;
    L.rows = (most - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    L.band = most, L.bands = 0; /* (unused) */
    int64_t cells, conv_cells, pooled_cells;
    if (!onyx_mul(L.rows, L.rs, &cells) || !onyx_mul(cells, g->C, &cells) ||
        !onyx_mul(16 * most, g->OW, &conv_cells) || !onyx_mul(16 * B, pool->OW, &pooled_cells))
        return ONYX_INVALID;
    float *buf = malloc((size_t)cells * sizeof(float));
    float *line = malloc((size_t)(L.Wq * g->sw + 32) * sizeof(float));
    int64_t *tap_at = malloc((size_t)L.CK * sizeof(int64_t));
    float *conv = malloc((size_t)conv_cells * sizeof(float));
    float *pooled = malloc((size_t)pooled_cells * sizeof(float));
    int status = 0;
    if (!buf || !line || !tap_at || !conv || !pooled) {
        status = ONYX_NOMEM;
        goto done;
    }
    for (int64_t c = 0, k = 0; c < g->C; c++)
        for (int64_t a = 0; a < g->kh; a++)
            for (int64_t b = 0; b < g->kw; b++, k++)
                tap_at[k] = (c * L.rows + a * g->dh) * L.rs + (b * g->dw) % g->sw * L.Wq +
                            (b * g->dw) / g->sw;
    int64_t filled = -1, vectors = (g->OW + 15) / 16;
    __mmask16 last = (__mmask16)(g->OW % 16 ? (1u << (g->OW % 16)) - 1 : 0xFFFF);
    for (int64_t p = p0; p < p1; p++) {
        int64_t block = p % L.blocks, nb = p / L.blocks, n = nb / bands;
        int64_t q0 = nb % bands * B, q1 = q0 + B < pool->OH ? q0 + B : pool->OH;
        int64_t first = q0 * pool->sh - pool->top, lo = first > 0 ? first : 0;
        int64_t hi = (q1 - 1) * pool->sh - pool->top + (pool->kh - 1) * pool->dh + 1;
        hi = hi < g->OH ? hi : g->OH;
        if (hi <= lo) { /* (windows wholly in the padding: stem_pool_ok refuses them) */
            status = ONYX_INVALID;
            goto done;
        }
        int64_t m0 = block * 16, lanes = g->M - m0 < 16 ? g->M - m0 : 16, nr = hi - lo;
        if (nb != filled) { /* the input rows of conv rows lo .. hi (once for the blocks) */
            int64_t rows = (nr - 1) * g->sh + (g->kh - 1) * g->dh + 1;
            for (int64_t c = 0; c < g->C; c++)
                for (int64_t r = 0; r < rows; r++)
                    stem_fill_row(t->x, g, &L, n, c, lo, r, line, buf + (c * L.rows + r) * L.rs);
            filled = nb;
        }
        for (int64_t i = lo; i < hi; i++)
            for (int64_t k0 = 0; k0 < lanes; k0 += 4) {
                int64_t m[4];
                int live = lanes - k0 < 4 ? (int)(lanes - k0) : 4;
                float *rows[4];
                for (int k = 0; k < 4; k++) {
                    m[k] = m0 + k0 + (k < live ? k : live - 1);
                    rows[k] = conv + ((m[k] - m0) * nr + i - lo) * g->OW;
                }
                stem_row(buf, t->w, t->bias, rows, g, &L, tap_at, i - lo, vectors, last, m, live);
            }
        pool2d band = *pool; /* the band's windows over its conv rows */
        band.x = conv, band.y = pooled, band.H = nr, band.OH = q1 - q0;
        band.top = lo - first;
        int64_t reach = (band.OH - 1) * band.sh + (band.kh - 1) * band.dh + 1 - band.top - nr;
        band.bottom = reach > 0 ? reach : 0;
        status = onyx_pool2d_f32_range(&band, 0, lanes);
        if (status) goto done;
        for (int64_t l = 0; l < lanes; l++)
            memcpy(t->y + (n * g->M + m0 + l) * POHW + q0 * pool->OW,
                   pooled + l * band.OH * pool->OW, (size_t)(band.OH * pool->OW) * sizeof(float));
    }
done:
    free(buf), free(line), free(tap_at), free(conv), free(pooled);
    return status;
}
#define HAVE_STEM_POOL 1
#endif

/* Each kernel's part of a job: Python hands onyx_parallel (pool.c) one of these ranges, a
   task struct (the kernel's arguments) and the cuts. The float convs (depthwise and small:
   one signature) take planes. */

/* Whether a depthwise or small conv's geometry is in range: its padded plane, 16 lanes of
   it and C planes of it fit ONYX_MAX_ELEMENTS (the kernels' buffers are at most these). */
static int dw_geometry_ok(const dw_geometry *g) {
    int64_t Hp, Wp, plane, lanes, all, counts[2] = {g->C, g->M};
    return onyx_in(counts, 2, 1, ONYX_MAX_EXTENT) && g->mult >= 0 && /* (0: a small conv) */
           onyx_window_axis(g->H, g->OH, g->kh, g->sh, g->dh, g->top, &Hp) &&
           onyx_window_axis(g->W, g->OW, g->kw, g->sw, g->dw, g->left, &Wp) &&
           onyx_mul(Hp, Wp, &plane) && onyx_mul(plane, 16, &lanes) &&
           onyx_mul(plane, g->C, &all) && g->act >= 0 && g->act <= ACT_TANH &&
           g->band >= 0 && g->shuffle >= 0 &&
           (g->shuffle <= 1 || (g->mult > 0 && g->C % g->shuffle == 0));
}

EXPORT int onyx_float_conv_range(const void *p, int64_t begin, int64_t end) {
    const float_conv_task *t = p;
    if (!dw_geometry_ok(t->g) || begin < 0) return ONYX_INVALID;
    return t->fn(t->x, t->w, t->bias, t->y, t->g, begin, end);
}


/* Whether a stem_pool task agrees: the conv's geometry and a MaxPool
   over its output whose every band of pooled rows has a window row in it. */
static int stem_pool_ok(const stem_pool *t) {
    const dw_geometry *g = t->g;
    const pool2d *q = t->pool;
    int64_t Hp, Wp, pads[4] = {q->top, q->left, q->bottom, q->right};
    return g && q && dw_geometry_ok(g) && q->H == g->OH && q->W == g->OW &&
           onyx_window_axis(q->H, q->OH, q->kh, q->sh, q->dh, q->top, &Hp) &&
           onyx_window_axis(q->W, q->OW, q->kw, q->sw, q->dw, q->left, &Wp) &&
           onyx_in(pads, 4, 0, ONYX_MAX_EXTENT) && !q->average && q->top < q->kh &&
           (q->OH - 1) * q->sh - q->top < q->H && t->band >= 1 && t->band <= q->OH;
}

EXPORT int onyx_stem_pool_f32_range(const void *p, int64_t begin, int64_t end) {
    const stem_pool *t = p;
    if (!stem_pool_ok(t) || begin < 0 || begin > end) return ONYX_INVALID;
#ifdef HAVE_STEM_POOL
    if (onyx_isa() & ONYX_ISA_AVX512) return stem_pool_parts(t, begin, end);
#endif
    return ONYX_INVALID;
}

EXPORT int onyx_int_conv_range(const void *p, int64_t begin, int64_t end) {
    const int_conv_task *t = p;
    if (!dw_geometry_ok(t->g) || begin < 0) return ONYX_INVALID;
    return t->fn(t->x, t->x_signed, t->x_zp, t->wc, t->g, t->o, begin, end);
}

