/* onyx's optional native kernels, loaded with ctypes by onyx/runtime/native/__init__.py.
 *
 * numpy has no 8-bit integer GEMM: without this library, onyx multiplies quantized tensors
 * as exact small integers in float32 BLAS. CPUs with AVX512-VNNI multiply bytes four times
 * as fast (vpdpbusd: 64 u8 x s8 products summed into 16 int32 lanes per instruction), which
 * is what onnxruntime uses for its quantized models.
 *
 * Everything here is plain C with no Python API: onyx works without it (setup.py builds it
 * as an optional extension), and every function is checked against numpy in the tests.
 *
 * The GEMM: C[M x N] = A[M x K] . B[K x N] exactly in int32, where one operand is unsigned
 * bytes and the other signed (the caller shifts one by 128 where both have the same
 * signedness, and corrects with row/column sums). B is packed first into panels of 32
 * columns ([N/32][K/4][32][4] bytes: a 64-byte vector holds 4 consecutive k of 16 columns);
 * rows of A are read in place, 4 bytes of a row broadcast against two such vectors.
 * The epilogue adds the zero-point corrections and bias and either stores int32 or
 * requantizes to 8 bits: clamp(rint(acc * scale) + zero_point).
 *
 * Then the kernels numpy's BLAS does not serve: depthwise convolutions (float and integer;
 * portable, and 16 channels per AVX-512 vector), a direct convolution for few input channels
 * (AVX-512) and HardSwish in one pass.
 */
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "onyx.h"


#define NR 32 /* columns per packed panel: two 16-lane vectors */
#define MR 6  /* rows per register tile: 12 accumulators */

/* The per-call description of the GEMM's epilogue (see the header comment). */

/* Packing needs no particular instruction set. Rows of B with unit column stride (the usual
   case) go four at a time: 16 columns of 4 rows interleaved with SSE2 unpacks (x86-64's
   baseline), one 32-bit word per column elsewhere. */
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
static inline void interleave16(const uint8_t *const r[4], int64_t j, __m128i x, uint8_t *dst) {
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r[0] + j)), x);
    __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r[1] + j)), x);
    __m128i c = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r[2] + j)), x);
    __m128i d = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r[3] + j)), x);
    __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    _mm_storeu_si128((__m128i *)(dst + 0), _mm_unpacklo_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(ab1, cd1));
    _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(ab1, cd1));
}
#define HAVE_INTERLEAVE16 1
#endif

static void pack_contiguous_rows(const uint8_t *b, int64_t sk, int64_t K, int64_t N, uint8_t x,
                                 int8_t *out) {
    static const uint8_t zeros[NR] = {0};
    int64_t Kq = (K + 3) / 4, panels = (N + NR - 1) / NR;
    for (int64_t p = 0; p < panels; p++) {
        int64_t width = N - p * NR < NR ? N - p * NR : NR;
        for (int64_t q = 0; q < Kq; q++) {
            const uint8_t *r[4];
            int in = 4 * q + 3 < K; /* all four rows exist (else the missing ones are zeros) */
            for (int i = 0; i < 4; i++)
                r[i] = 4 * q + i < K ? b + (4 * q + i) * sk + p * NR : zeros;
            uint8_t *dst = (uint8_t *)out + (p * Kq + q) * NR * 4;
            int64_t j = 0;
#ifdef HAVE_INTERLEAVE16
            if (in)
                for (; j + 16 <= width; j += 16) interleave16(r, j, _mm_set1_epi8((char)x), dst + 4 * j);
#endif
            for (; j < width; j++)
                for (int i = 0; i < 4; i++)
                    dst[4 * j + i] = r[i] == zeros ? 0 : (uint8_t)(r[i][j] ^ x);
        }
    }
}

/* dst[c * ds + r] = src[r * ss + c] for a rows x cols block of bytes: 16 x 16 tiles in SSE2
   registers (four rounds of unpacks), the edges byte by byte. */
#ifdef HAVE_INTERLEAVE16
static void transpose16(const uint8_t *src, int64_t ss, uint8_t *dst, int64_t ds) {
    __m128i a[16], b[16];
    for (int i = 0; i < 16; i++) a[i] = _mm_loadu_si128((const __m128i *)(src + i * ss));
    for (int i = 0; i < 8; i++) { /* b[i]: columns 0-7 of rows 2i, 2i+1; b[i + 8]: 8-15 */
        b[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
        b[i + 8] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) /* a[4g + i]: columns 4g..4g+3 of rows 4i..4i+3 */
        for (int i = 0; i < 4; i++) {
            a[8 * h + i] = _mm_unpacklo_epi16(b[8 * h + 2 * i], b[8 * h + 2 * i + 1]);
            a[8 * h + i + 4] = _mm_unpackhi_epi16(b[8 * h + 2 * i], b[8 * h + 2 * i + 1]);
        }
    for (int g = 0; g < 4; g++) { /* columns 4g..4g+3: pairs of columns, 8 rows at a time */
        b[4 * g + 0] = _mm_unpacklo_epi32(a[4 * g + 0], a[4 * g + 1]);
        b[4 * g + 1] = _mm_unpackhi_epi32(a[4 * g + 0], a[4 * g + 1]);
        b[4 * g + 2] = _mm_unpacklo_epi32(a[4 * g + 2], a[4 * g + 3]);
        b[4 * g + 3] = _mm_unpackhi_epi32(a[4 * g + 2], a[4 * g + 3]);
    }
    for (int g = 0; g < 4; g++) {
        _mm_storeu_si128((__m128i *)(dst + (4 * g + 0) * ds), _mm_unpacklo_epi64(b[4 * g], b[4 * g + 2]));
        _mm_storeu_si128((__m128i *)(dst + (4 * g + 1) * ds), _mm_unpackhi_epi64(b[4 * g], b[4 * g + 2]));
        _mm_storeu_si128((__m128i *)(dst + (4 * g + 2) * ds), _mm_unpacklo_epi64(b[4 * g + 1], b[4 * g + 3]));
        _mm_storeu_si128((__m128i *)(dst + (4 * g + 3) * ds), _mm_unpackhi_epi64(b[4 * g + 1], b[4 * g + 3]));
    }
}
#endif

EXPORT void onyx_transpose_u8(const uint8_t *src, int64_t rows, int64_t cols, int64_t ss,
                              uint8_t *dst, int64_t ds) {
    int64_t r = 0;
#ifdef HAVE_INTERLEAVE16
    for (; r + 16 <= rows; r += 16) {
        int64_t c = 0;
        for (; c + 16 <= cols; c += 16) transpose16(src + r * ss + c, ss, dst + c * ds + r, ds);
        for (; c < cols; c++)
            for (int64_t i = r; i < r + 16; i++) dst[c * ds + i] = src[i * ss + c];
    }
#endif
    for (; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ds + r] = src[r * ss + c];
}

/* One image (C, H, W) into rows of a padded NHWC buffer: pixel (h, w) at
   dst + (h * Wp + w) * Cp (dst already offset to the first pixel). */
EXPORT void onyx_to_nhwc(const uint8_t *x, int64_t C, int64_t H, int64_t W, uint8_t *dst,
                         int64_t Wp, int64_t Cp) {
    for (int64_t h = 0; h < H; h++) onyx_transpose_u8(x + h * W, C, W, H * W, dst + h * Wp * Cp, Cp);
}

static void column_sums(const uint8_t *restrict b, int64_t sk, int64_t sn, int64_t K, int64_t N,
                        uint8_t x, int is_signed, int32_t *restrict colsum) {
    for (int64_t n = 0; n < N; n++) colsum[n] = 0;
    for (int64_t k = 0; k < K; k++) {
        const uint8_t *row = b + k * sk;
        if (sn == 1 && is_signed) /* (unit strides spelled out: they vectorize) */
            for (int64_t n = 0; n < N; n++) colsum[n] += (int8_t)(row[n] ^ x);
        else if (sn == 1)
            for (int64_t n = 0; n < N; n++) colsum[n] += (uint8_t)(row[n] ^ x);
        else if (is_signed)
            for (int64_t n = 0; n < N; n++) colsum[n] += (int8_t)(row[n * sn] ^ x);
        else
            for (int64_t n = 0; n < N; n++) colsum[n] += (uint8_t)(row[n * sn] ^ x);
    }
}

/* Columns of B contiguous (column n's K bytes at b + n * sn): each panel entry, four bytes of
   one column, is one 32-bit word of it; the column sums run along the same bytes. */
static void pack_contiguous_columns(const uint8_t *b, int64_t sn, int64_t K, int64_t N,
                                    uint8_t x, int is_signed, int8_t *out, int32_t *colsum) {
    int64_t Kq = (K + 3) / 4, full = K / 4;
    uint32_t flip = x * 0x01010101u;
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *col = b + n * sn;
        uint8_t *dst = (uint8_t *)out + ((n / NR) * Kq * NR + n % NR) * 4;
        for (int64_t q = 0; q < full; q++) {
            uint32_t w;
            memcpy(&w, col + 4 * q, 4);
            w ^= flip;
            memcpy(dst + q * NR * 4, &w, 4);
        }
        if (K % 4)
            for (int i = 0; i < 4; i++)
                dst[full * NR * 4 + i] = 4 * full + i < K ? (uint8_t)(col[4 * full + i] ^ x) : 0;
        if (colsum) {
            int32_t sum = 0;
            if (is_signed)
                for (int64_t k = 0; k < K; k++) sum += (int8_t)(col[k] ^ x);
            else
                for (int64_t k = 0; k < K; k++) sum += (uint8_t)(col[k] ^ x);
            colsum[n] = sum;
        }
    }
}

/* B (element (k, n) at b[k * sk + n * sn]) into panels, XORed with 0x80 if flip; colsum (if
   not NULL) gets the column sums of the packed values, read as signed bytes if is_signed. */
EXPORT void onyx_pack_panels(const uint8_t *b, int64_t sk, int64_t sn, int64_t K, int64_t N,
                             int flip, int is_signed, int8_t *out, int32_t *colsum) {
    int64_t Kq = (K + 3) / 4, panels = (N + NR - 1) / NR;
    uint8_t x = flip ? 0x80 : 0;
    if (N % NR) /* the last panel's missing columns are zeros */
        memset(out + (panels - 1) * Kq * NR * 4, 0, (size_t)(Kq * NR * 4));
    if (sk == 1 && sn != 1) { /* contiguous columns (a transposed matrix, as K^T) */
        pack_contiguous_columns(b, sn, K, N, x, is_signed, out, colsum);
        return;
    }
    if (colsum) column_sums(b, sk, sn, K, N, x, is_signed, colsum);
    if (sn == 1) {
        pack_contiguous_rows(b, sk, K, N, x, out);
        return;
    }
    if (K % 4) /* the last quad's missing rows are zeros */
        for (int64_t p = 0; p < panels; p++)
            memset(out + (p * Kq + Kq - 1) * NR * 4, 0, NR * 4);
    for (int64_t p = 0; p < panels; p++) {
        int64_t width = N - p * NR < NR ? N - p * NR : NR;
        for (int64_t k = 0; k < K; k++) {
            const uint8_t *src = b + k * sk + p * NR * sn;
            int8_t *dst = out + ((p * Kq + k / 4) * NR) * 4 + (k & 3);
            for (int64_t j = 0; j < width; j++) dst[j * 4] = (int8_t)(src[j * sn] ^ x);
        }
    }
}

EXPORT void onyx_row_sums(const uint8_t *a, int64_t lda, int64_t M, int64_t K, int flip,
                          int is_signed, int32_t *out) {
    uint8_t x = flip ? 0x80 : 0;
    for (int64_t r = 0; r < M; r++) {
        const uint8_t *row = a + r * lda;
        int32_t s = 0;
        if (is_signed)
            for (int64_t k = 0; k < K; k++) s += (int8_t)(row[k] ^ x);
        else
            for (int64_t k = 0; k < K; k++) s += (uint8_t)(row[k] ^ x);
        out[r] = s;
    }
}

/* ------------------------------------------------------------------ depthwise convolution
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
#include <stdlib.h>


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
        int64_t src = (p / M) * g->C + (p % M) / g->mult; /* the input plane */
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
        int64_t m = p % M, src = (p / M) * g->C + m / g->mult;
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

/* ------------------------------------------------------------------ elementwise */

/* HardSwish, y = x * clamp(x / 6 + 1/2, 0, 1), in one pass (numpy makes four). */
EXPORT CLONES void onyx_hardswish_f32(const float *restrict x, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float t = x[i] / 6.0f + 0.5f;
        t = t < 0.0f ? 0.0f : t;
        t = t > 1.0f ? 1.0f : t;
        y[i] = x[i] * t;
    }
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

EXPORT int onyx_erf_range(const void *p, int64_t begin, int64_t end) {
    const erf_task *t = p;
    onyx_erf_f32(t->x + begin, t->y + begin, end - begin, t);
    return 0;
}


/* HardSigmoid, y = clamp(x * alpha + beta, 0, 1), each step a float32 operation and none fused
   (the numpy kernel's bits; NaN stays NaN), in one pass where numpy makes three. */
EXPORT CLONES NO_FMA int onyx_hard_sigmoid_range(const void *p, int64_t begin, int64_t end) {
    const hard_sigmoid_task *t = p;
    const float *x = t->x;
    float *y = t->y, a = t->alpha, b = t->beta;
    for (int64_t i = begin; i < end; i++) {
        float v = x[i] * a + b;
        y[i] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    }
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
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* What this CPU runs: 1, the int8 GEMM (AVX512-VNNI); 2, the AVX-512 depthwise convs; 4, the
   byte-table lookup on AVX512-VBMI. */

/* QLinearAdd / QLinearMul and QuantizeLinear 16 values per step, in the operations and order
   of the portable loops above (the same bits; max(lo, v) keeps a NaN as their comparisons
   do). The compiler vectorized those with 8-lane vectors and a slow rounding: 0.5 ns per
   value, against 0.05 here. */
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

/* The epilogue of one 16-column vector of row r. */
INLINE VNNI void finish(const epilogue *e, __m512i acc, int64_t r, int64_t j, __mmask16 m) {
    if (e->row_off) acc = _mm512_add_epi32(acc, _mm512_set1_epi32(e->row_off[r]));
    if (e->col_off) acc = _mm512_add_epi32(acc, _mm512_maskz_loadu_epi32(m, e->col_off + j));
    if (e->row_f)
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(e->row_f[r]),
                                                       _mm512_maskz_loadu_epi32(m, e->col_f + j)));
    if (!e->out8) {
        _mm512_mask_storeu_epi32(e->c + r * e->ldc + j, m, acc);
        return;
    }
    __m512 s = e->scale_cs ? _mm512_maskz_loadu_ps(m, e->scale + r * e->scale_rs + j)
                           : _mm512_set1_ps(e->scale[r * e->scale_rs]);
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), s);
    /* clamp first (the bounds are integers, so this commutes with rounding); it also keeps
       the conversion in range */
    v = _mm512_max_ps(v, _mm512_set1_ps((float)(e->lo - e->zero_point)));
    v = _mm512_min_ps(v, _mm512_set1_ps((float)(e->hi - e->zero_point)));
    __m512i q = _mm512_add_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT |
                                                                 _MM_FROUND_NO_EXC),
                                 _mm512_set1_epi32(e->zero_point));
    _mm_mask_storeu_epi8(e->out8 + r * e->ldo + j, m, _mm512_cvtepi32_epi8(q));
}

/* acc[r] += row r's 4 bytes w (broadcast) times the two panel vectors b0, b1 */
#define STEP(r, w)                                                                \
    do {                                                                          \
        __m512i ab = _mm512_set1_epi32((int32_t)(w));                             \
        if (flip) ab = _mm512_xor_si512(ab, _mm512_set1_epi32((int32_t)0x80808080)); \
        if (a_u8) {                                                               \
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], ab, b0);                   \
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], ab, b1);                   \
        } else {                                                                  \
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b0, ab);                   \
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b1, ab);                   \
        }                                                                         \
    } while (0)

/* One mr x 32 tile. row[r]: where row r's bytes start; its quad q (k = 4q..4q+3) is at
   row[r] + quads[q] when gathered (an implicit-GEMM convolution: rows are output pixels, a
   quad is 4 channels of one kernel tap), else at row[r] + 4q. a_u8: A is the unsigned
   operand (vpdpbusd's first factor). */
INLINE VNNI void tile(const uint8_t *const *row, const int64_t *quads, const int flip,
                      const int8_t *panel, int64_t K, const epilogue *e, int64_t r0, int64_t j0,
                      int ncols, const int mr, const int a_u8, const int gathered) {
    __m512i acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    int64_t full = K / 4;
    for (int64_t q = 0; q < full; q++) {
        int64_t off = gathered ? quads[q] : 4 * q;
        __m512i b0 = _mm512_loadu_si512(panel + q * 128);
        __m512i b1 = _mm512_loadu_si512(panel + q * 128 + 64);
        for (int r = 0; r < MR; r++) {
            if (r < mr) {
                uint32_t w;
                memcpy(&w, row[r] + off, 4);
                STEP(r, w);
            }
        }
    }
    if (!gathered && (K & 3)) { /* a partial last quad: its missing bytes meet zeros */
        __m512i b0 = _mm512_loadu_si512(panel + full * 128);
        __m512i b1 = _mm512_loadu_si512(panel + full * 128 + 64);
        for (int r = 0; r < MR; r++) {
            if (r < mr) {
                uint32_t w = 0;
                memcpy(&w, row[r] + 4 * full, (size_t)(K & 3));
                STEP(r, w);
            }
        }
    }
    __mmask16 m0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    for (int r = 0; r < mr; r++) {
        finish(e, acc[r][0], r0 + r, j0, m0);
        if (m1) finish(e, acc[r][1], r0 + r, j0 + 16, m1);
    }
}

/* Where A's rows are: row r at a + rows[r] (or a + r * lda when rows is NULL); quads as in
   tile (NULL: contiguous rows). */

#define TILE(mr) tile(row, A->quads, flip, panel, K, e, m, p * NR, ncols, mr, u8, gathered)

/* The panels stay in L2 in chunks of about this many bytes while the row tiles pass over
   them (a tile's rows stay in L1 across the chunk). */
#define PANEL_CHUNK (256 << 10)

INLINE VNNI void gemm(const operand *A, const int flip, const int8_t *packed, int64_t K,
                      int64_t N, const epilogue *e, int64_t m0, int64_t m1, int64_t p0,
                      int64_t p1, const int u8, const int gathered) {
    int64_t Kq = (K + 3) / 4;
    int64_t chunk = PANEL_CHUNK / (Kq * NR * 4);
    if (chunk < 1) chunk = 1;
    for (int64_t pc = p0; pc < p1; pc += chunk) {
        int64_t pe = pc + chunk < p1 ? pc + chunk : p1;
        for (int64_t m = m0; m < m1; m += MR) {
            int mr = (int)(m1 - m < MR ? m1 - m : MR);
            const uint8_t *row[MR];
            for (int r = 0; r < mr; r++)
                row[r] = A->a + (A->rows ? A->rows[m + r] : (m + r) * A->lda);
            for (int64_t p = pc; p < pe; p++) {
                const int8_t *panel = packed + p * Kq * NR * 4;
                int ncols = (int)(N - p * NR < NR ? N - p * NR : NR);
                switch (mr) {
                case MR: TILE(MR); break;
                case 5: TILE(5); break;
                case 4: TILE(4); break;
                case 3: TILE(3); break;
                case 2: TILE(2); break;
                default: TILE(1); break;
                }
            }
        }
    }
}

/* C = A . B for rows m0 <= m < m1 and panels p0 <= p < p1 (threads take disjoint blocks).
   A's bytes are XORed with 0x80 when flip is set (int8 <-> uint8 shifted by 128); a_unsigned
   says what they are after that, and the packed B is of the other signedness. */
EXPORT VNNI void onyx_gemm_u8s8(const operand *A, int flip, int a_unsigned, const int8_t *packed,
                                int64_t K, int64_t N, const epilogue *e, int64_t m0, int64_t m1,
                                int64_t p0, int64_t p1) {
    /* every combination of the three flags, so each has no branches and no XOR it needs not */
#define GEMM(f, u, g) gemm(A, f, packed, K, N, e, m0, m1, p0, p1, u, g)
    int g = A->quads != NULL;
    switch ((flip ? 4 : 0) | (a_unsigned ? 2 : 0) | g) {
    case 0: GEMM(0, 0, 0); break;
    case 1: GEMM(0, 0, 1); break;
    case 2: GEMM(0, 1, 0); break;
    case 3: GEMM(0, 1, 1); break;
    case 4: GEMM(1, 0, 0); break;
    case 5: GEMM(1, 0, 1); break;
    case 6: GEMM(1, 1, 0); break;
    default: GEMM(1, 1, 1); break;
    }
#undef GEMM
}

/* The depthwise conv on AVX-512, 16 output channels per vector (onnxruntime's NCHWc idea):
   the 16 input planes are interleaved into a padded buffer of 16-lane pixels, each output
   pixel is kh * kw vector multiply-adds (4 pixels at a time, sharing the weight loads), and
   the lanes go back to their planes when a row is stored. No per-plane overhead, so 7x7
   planes run as fast as large ones. Planes here are (image, block of 16 channels) pairs. */
#define AVX512 __attribute__((target("avx512f")))
#include "activation.h"

typedef struct {
    int64_t Hp, Wp, K; /* the padded input's rows and columns; taps */
    int64_t band, bands, rows; /* a part's output rows, parts per block; its buffer's rows */
} dwv_layout;

static dwv_layout dwv_layout_of(const dw_geometry *g) {
    dwv_layout d;
    d.Hp = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    d.Wp = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    d.K = g->kh * g->kw;
    d.band = g->band > 0 && g->band < g->OH ? g->band : g->OH;
    d.bands = (g->OH + d.band - 1) / d.band;
    d.rows = (d.band - 1) * g->sh + (g->kh - 1) * g->dh + 1;
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
        plane[l] = (n * g->C + m / g->mult) * g->H * g->W;
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

/* The float fill, 16 pixels of the 16 planes at a time through a register transpose. */
AVX512 static void dwv_fill_f32(const float *x, const int64_t *plane, const dw_geometry *g,
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
   of the 16 planes at a time through the register transpose. A row's last pixels are read
   16 bytes at a time too (the excess is never stored) while that stays inside the image
   (end: the offset of its end), else through a copy. */
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

AVX512 static void dwv_fill_bytes(const uint8_t *x, int is_signed, const int64_t *plane,
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
DWV_FILL(dwv_fill_u8, uint8_t, int32_t)
DWV_FILL(dwv_fill_s8, int8_t, int32_t)

/* out[j] (16 lanes) = sum over taps of wt[t] * the tap's pixel, for the OW pixels of output
   row i: eight pixels at a time, so each weight vector load serves eight multiply-adds and
   eight independent sums hide the multiply-add latency. */
#define DWV_ROW(name, V, T, ZERO, LOAD, MADD, STORE)                                       \
    AVX512 static void name(const T *buf, const T *wt, const dw_geometry *g,               \
                            const dwv_layout *d, int64_t i, T *out) {                      \
        int64_t j = 0, step = g->sw * 16;                                                  \
        for (; j + 8 <= g->OW; j += 8) {                                                   \
            V a[8];                                                                        \
            for (int u = 0; u < 8; u++) a[u] = ZERO;                                       \
            for (int64_t k = 0; k < g->kh; k++) {                                          \
                const T *r = buf + ((i * g->sh + k * g->dh) * d->Wp + j * g->sw) * 16;     \
                const T *wr = wt + k * g->kw * 16;                                         \
                for (int64_t b = 0; b < g->kw; b++) {                                      \
                    V w = LOAD(wr + b * 16);                                               \
                    const T *p = r + b * g->dw * 16;                                       \
                    for (int u = 0; u < 8; u++) a[u] = MADD(w, LOAD(p + u * step), a[u]);  \
                }                                                                          \
            }                                                                              \
            for (int u = 0; u < 8; u++) STORE(out + (j + u) * 16, a[u]);                   \
        }                                                                                  \
        for (; j < g->OW; j++) {                                                           \
            V a0 = ZERO;                                                                   \
            for (int64_t k = 0; k < g->kh; k++) {                                          \
                const T *r = buf + ((i * g->sh + k * g->dh) * d->Wp + j * g->sw) * 16;     \
                for (int64_t b = 0; b < g->kw; b++)                                        \
                    a0 = MADD(LOAD(wt + (k * g->kw + b) * 16), LOAD(r + b * g->dw * 16), a0); \
            }                                                                              \
            STORE(out + j * 16, a0);                                                       \
        }                                                                                  \
    }
#define F_MADD(w, p, a) _mm512_fmadd_ps(w, p, a)
#define I_MADD(w, p, a) _mm512_add_epi32(a, _mm512_mullo_epi32(w, p))
#define I_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define I_STORE(p, v) _mm512_storeu_si512((void *)(p), v)
DWV_ROW(dwv_row_f32, __m512, float, _mm512_setzero_ps(), _mm512_loadu_ps, F_MADD, _mm512_storeu_ps)
DWV_ROW(dwv_row_i32, __m512i, int32_t, _mm512_setzero_si512(), I_LOAD, I_MADD, I_STORE)

/* Buffers of one call: the padded 16-lane input, the block's weights by tap, a row of sums. */
typedef struct {
    void *buf, *wt, *row;
} dwv_scratch;

static int dwv_alloc(const dw_geometry *g, const dwv_layout *d, dwv_scratch *s) {
    s->buf = malloc((size_t)(d->rows * d->Wp * 16) * 4); /* one band's rows */
    s->wt = malloc((size_t)(d->K * 16) * 4);
    s->row = malloc((size_t)(g->OW * 16) * 4);
    if (s->buf && s->wt && s->row) return 0;
    free(s->buf), free(s->wt), free(s->row);
    return ONYX_NOMEM;
}

static void dwv_free(dwv_scratch *s) { free(s->buf), free(s->wt), free(s->row); }

/* A row of sums (pixel j's 16 lanes at row + 16 j) to the lanes' planes (out + l * OH * OW),
   16 pixels at a time through a register transpose, plus bias and the activation. */
static AVX512 void dwv_store_f32(const float *row, const dw_geometry *g, int64_t lanes,
                                 const float *bias, float *out) {
    int64_t stride = g->OH * g->OW;
    for (int64_t j = 0; j < g->OW; j += 16) {
        int64_t n = g->OW - j < 16 ? g->OW - j : 16;
        __mmask16 live = (__mmask16)((1u << n) - 1);
        __m512 r[16];
        for (int u = 0; u < 16; u++)
            r[u] = u < n ? _mm512_loadu_ps(row + (j + u) * 16) : _mm512_setzero_ps();
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
    float *buf = s.buf, *wt = s.wt, *row = s.row;
    int64_t M = g->C * g->mult, plane[16];
    for (int64_t p = p0; p < p1; p++) {
        dwv_part q = dwv_part_of(g, &d, M, p);
        int64_t n = q.n, m0 = q.m0, lanes = q.lanes, i0 = q.i0, i1 = q.i1;
        dwv_planes(g, n, m0, plane);
        dwv_fill_f32(x, plane, g, &d, &q, buf);
        for (int64_t t = 0; t < d.K; t++)
            for (int l = 0; l < 16; l++) wt[t * 16 + l] = l < lanes ? w[(m0 + l) * d.K + t] : 0;
        for (int64_t i = i0; i < i1; i++) {
            dwv_row_f32(buf, wt, g, &d, i - i0, row);
            dwv_store_f32(row, g, lanes, bias ? bias + m0 : 0,
                          y + ((n * M + m0) * g->OH + i) * g->OW);
        }
    }
    dwv_free(&s);
    return 0;
}

/* Requantize a row of sums (pixel j's 16 lanes at row + 16 j, channels m0.. m0 + lanes) as
   dw_store does, 16 lanes per vector: pixel j's bytes to tile + 16 j. */
static AVX512 void dwv_requantize(const dw_output *o, int64_t m0, int64_t lanes,
                                  const int32_t *row, int64_t width, uint8_t *tile) {
    __mmask16 live = (__mmask16)((1u << lanes) - 1);
    __m512i bias = o->bias ? _mm512_maskz_loadu_epi32(live, o->bias + m0) : _mm512_setzero_si512();
    __m512 s = _mm512_maskz_loadu_ps(live, o->scale + m0);
    __m512 lo = _mm512_set1_ps((float)(o->lo - o->zero_point));
    __m512 hi = _mm512_set1_ps((float)(o->hi - o->zero_point));
    __m512i zp = _mm512_set1_epi32(o->zero_point);
    for (int64_t j = 0; j < width; j++) {
        __m512i a = _mm512_add_epi32(_mm512_loadu_si512((const void *)(row + 16 * j)), bias);
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
    int32_t *buf = s.buf, *wt = s.wt, *row = s.row;
    int64_t M = g->C * g->mult, plane[16];
    int exact = d.K * 255 * 255 < (1 << 24);
    uint8_t *tile = malloc((size_t)(g->OW * 16));
    if (!tile) {
        dwv_free(&s);
        return ONYX_NOMEM;
    }
    for (int64_t p = p0; p < p1; p++) {
        dwv_part q = dwv_part_of(g, &d, M, p);
        int64_t n = q.n, m0 = q.m0, lanes = q.lanes, i0 = q.i0, i1 = q.i1;
        dwv_planes(g, n, m0, plane);
        if (exact) {
            dwv_fill_bytes(x, x_signed, plane, x_zp, g, &d, (n + 1) * g->C * g->H * g->W, &q,
                           s.buf);
            for (int64_t t = 0; t < d.K; t++)
                for (int l = 0; l < 16; l++)
                    ((float *)wt)[t * 16 + l] = l < lanes ? (float)wc[(m0 + l) * d.K + t] : 0.0f;
        } else {
            if (x_signed) dwv_fill_s8((const int8_t *)x, plane, x_zp, g, &d, &q, buf);
            else dwv_fill_u8(x, plane, x_zp, g, &d, &q, buf);
            for (int64_t t = 0; t < d.K; t++)
                for (int l = 0; l < 16; l++) wt[t * 16 + l] = l < lanes ? wc[(m0 + l) * d.K + t] : 0;
        }
        for (int64_t i = i0; i < i1; i++) {
            if (exact) { /* float sums to int32 in place (integers: exact) */
                dwv_row_f32(s.buf, s.wt, g, &d, i - i0, s.row);
                for (int64_t j = 0; j < g->OW * 16; j += 16)
                    _mm512_storeu_si512((void *)(row + j),
                                        _mm512_cvtps_epi32(_mm512_loadu_ps((float *)row + j)));
            } else {
                dwv_row_i32(buf, wt, g, &d, i - i0, row);
            }
            if (o->y8) { /* the 16 lanes of a pixel requantized at once, then to their planes */
                dwv_requantize(o, m0, lanes, row, g->OW, tile);
                onyx_transpose_u8(tile, g->OW, lanes, 16, o->y8 + ((n * M + m0) * g->OH + i) * g->OW,
                                  g->OH * g->OW);
                continue;
            }
            for (int64_t l = 0; l < lanes; l++)
                dw_store(o, m0 + l, row + l, 16, g->OW, ((n * M + m0 + l) * g->OH + i) * g->OW);
        }
    }
    free(tile);
    dwv_free(&s);
    return 0;
}

/* A convolution with few input channels (a network's stem: 3 channels, group 1) on AVX-512,
   16 output channels per vector: each output pixel sums, over input channels and taps, the
   input value broadcast times the 16 channels' weights (an im2col GEMM with K = 27 is mostly
   the cost of building its columns). Parts p = (image, 16 output channels, band of output
   rows) as above, g->M output channels; each part copies its band's rows into the padded
   image (zero-bordered). */
EXPORT AVX512 int onyx_conv_small_f32_avx512(const float *x, const float *w, const float *bias,
                                             float *y, const dw_geometry *g, int64_t p0,
                                             int64_t p1) {
    dwv_layout d = dwv_layout_of(g);
    int64_t M = g->M, CK = g->C * d.K, plane = d.Hp * d.Wp;
    float *pad = calloc((size_t)(g->C * plane), sizeof(float)); /* the border stays zero */
    float *wt = malloc((size_t)(CK * 16) * sizeof(float));
    float *row = malloc((size_t)(g->OW * 16) * sizeof(float));
    if (!pad || !wt || !row) {
        free(pad), free(wt), free(row);
        return ONYX_NOMEM;
    }
    int64_t wend = d.Wp - g->left < g->W ? d.Wp - g->left : g->W;
    for (int64_t p = p0; p < p1; p++) {
        dwv_part q = dwv_part_of(g, &d, M, p);
        int64_t n = q.n, m0 = q.m0, lanes = q.lanes, i0 = q.i0, i1 = q.i1;
        for (int64_t c = 0; c < g->C; c++) /* the rows of the band (its image's; once more
                                               where bands overlap) */
            for (int64_t r = i0 * g->sh, end = r + q.rows; r < end; r++) {
                int64_t h = r - g->top;
                if (h >= 0 && h < g->H)
                    memcpy(pad + c * plane + r * d.Wp + g->left,
                           x + ((n * g->C + c) * g->H + h) * g->W, (size_t)wend * sizeof(float));
            }
        for (int64_t k = 0; k < CK; k++)
            for (int l = 0; l < 16; l++) wt[k * 16 + l] = l < lanes ? w[(m0 + l) * CK + k] : 0;
        for (int64_t i = i0; i < i1; i++) {
            int64_t j = 0;
            for (; j + 8 <= g->OW; j += 8) { /* eight pixels: see DWV_ROW */
                __m512 a[8];
                for (int u = 0; u < 8; u++) a[u] = _mm512_setzero_ps();
                for (int64_t c = 0; c < g->C; c++)
                    for (int64_t k = 0; k < g->kh; k++) {
                        const float *r = pad + c * plane + (i * g->sh + k * g->dh) * d.Wp + j * g->sw;
                        const float *wr = wt + (c * d.K + k * g->kw) * 16;
                        for (int64_t b = 0; b < g->kw; b++) {
                            __m512 wv = _mm512_loadu_ps(wr + b * 16);
                            const float *q = r + b * g->dw;
                            for (int u = 0; u < 8; u++)
                                a[u] = _mm512_fmadd_ps(wv, _mm512_set1_ps(q[u * g->sw]), a[u]);
                        }
                    }
                for (int u = 0; u < 8; u++) _mm512_storeu_ps(row + (j + u) * 16, a[u]);
            }
            for (; j < g->OW; j++) {
                __m512 a0 = _mm512_setzero_ps();
                for (int64_t c = 0; c < g->C; c++)
                    for (int64_t a = 0; a < g->kh; a++) {
                        const float *r = pad + c * plane + (i * g->sh + a * g->dh) * d.Wp + j * g->sw;
                        for (int64_t b = 0; b < g->kw; b++)
                            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wt + (c * d.K + a * g->kw + b) * 16),
                                                 _mm512_set1_ps(r[b * g->dw]), a0);
                    }
                _mm512_storeu_ps(row + j * 16, a0);
            }
            for (int64_t l = 0; l < lanes; l++) {
                float bl = bias ? bias[m0 + l] : 0.0f;
                float *out = y + ((n * M + m0 + l) * g->OH + i) * g->OW;
                for (int64_t jj = 0; jj < g->OW; jj++) out[jj] = row[jj * 16 + l] + bl;
            }
        }
    }
    free(pad), free(wt), free(row);
    return 0;
}

/* The GEMM's part of a job on the thread pool (onyx_parallel, called from Python with the
   ranges below): parts are blocks of rows or of panels (cuts). */

EXPORT int onyx_gemm_range(const void *p, int64_t begin, int64_t end) {
    const gemm_task *t = p;
    if (t->by_rows)
        onyx_gemm_u8s8(t->A, t->flip, t->a_unsigned, t->packed, t->K, t->N, t->e, begin, end, 0,
                       t->panels);
    else
        onyx_gemm_u8s8(t->A, t->flip, t->a_unsigned, t->packed, t->K, t->N, t->e, 0, t->M, begin,
                       end);
    return 0;
}

/* A batch of products A_i . B_i whose B is data (attention's Q.K^T and weights . V), one
   item per part: each packs its B (any strides) and its A's row sums itself, so a batch
   takes one call instead of a Python set-up per item (which cost 5x the item's GEMM).
   Scalar zero points only; za and zb are as stored (after the flips, see _GemmCall). The
   epilogue e is a template: its corrections and output are set per item. */

EXPORT VNNI int onyx_batched_gemm_range(const void *p, int64_t begin, int64_t end) {
    const batched_gemm *t = p;
    int64_t Kq = (t->K + 3) / 4, panels = (t->N + NR - 1) / NR, M = t->M, N = t->N;
    int8_t *packed = malloc((size_t)(panels * Kq * NR * 4));
    int32_t *colsum = malloc((size_t)N * sizeof(int32_t));
    int32_t *col_off = malloc((size_t)N * sizeof(int32_t));
    int32_t *row_off = malloc((size_t)M * sizeof(int32_t));
    if (!packed || !colsum || !col_off || !row_off) {
        free(packed), free(colsum), free(col_off), free(row_off);
        return ONYX_NOMEM;
    }
    for (int64_t i = begin; i < end; i++) {
        const uint8_t *a = t->a + t->a_off[i];
        onyx_pack_panels(t->b + t->b_off[i], t->sk, t->sn, t->K, N, t->b_flip, t->b_signed,
                         packed, colsum);
        epilogue e = t->e;
        /* (A - ZA)(B - ZB) = S - ZB rowsum(A) - ZA colsum(B) + K ZA ZB, in wrapping int32 */
        if (t->za) {
            for (int64_t j = 0; j < N; j++)
                col_off[j] = (int32_t)(uint32_t)((int64_t)t->K * t->za * t->zb -
                                                 (int64_t)t->za * colsum[j]);
            e.col_off = col_off;
        }
        if (t->zb) {
            onyx_row_sums(a, t->lda, M, t->K, t->flip_a, !t->a_unsigned, row_off);
            for (int64_t r = 0; r < M; r++)
                row_off[r] = (int32_t)(uint32_t)(-(int64_t)t->zb * row_off[r]);
            e.row_off = row_off;
        }
        if (e.out8) e.out8 = t->y + i * t->y_item;
        else e.c = (int32_t *)(t->y + i * t->y_item);
        operand A = {a, t->lda, 0, 0};
        onyx_gemm_u8s8(&A, t->flip_a, t->a_unsigned, packed, t->K, N, &e, 0, M, 0, panels);
    }
    free(packed), free(colsum), free(col_off), free(row_off);
    return 0;
}

/* A whole 2-D integer conv as an implicit GEMM with requantized 8-bit output, in one call
   (Python's per-call work was most of a small conv's time): the image(s) into the padded
   NHWC buffer xp, the gathered GEMM on the pool into y (pixels x M), y transposed to out
   (N, M, pixels). The operand's rows/quads and the epilogue are the caller's, made once;
   their buffer and output pointers are set here. */

EXPORT void onyx_implicit_conv(const implicit_conv *c, const uint8_t *x, uint8_t *xp, uint8_t *y,
                               uint8_t *out) {
    int64_t image = c->Hp * c->Wp * c->Cp;
    if (!c->bare) memset(xp, c->zx, (size_t)(c->N * image));
    for (int64_t i = 0; i < c->N; i++)
        onyx_to_nhwc(x + i * c->C * c->H * c->W, c->C, c->H, c->W,
                     xp + i * image + (c->r0 * c->Wp + c->c0) * c->Cp, c->Wp, c->Cp);
    operand A = c->A;
    epilogue e = c->e;
    gemm_task t = c->gemm;
    A.a = xp;
    e.out8 = y, e.ldo = c->M;
    t.A = &A, t.e = &e;
    onyx_parallel(onyx_gemm_range, &t, c->cuts, c->parts, c->threads);
    for (int64_t i = 0; i < c->N; i++)
        onyx_transpose_u8(y + i * c->pixels * c->M, c->pixels, c->M, c->M,
                          out + i * c->M * c->pixels, c->pixels);
}

#endif

/* ------------------------------------------------------------------ parts of pool jobs */

/* Each kernel's part of a job: Python hands onyx_parallel (pool.c) one of these ranges, a
   task struct (the kernel's arguments) and the cuts. The float convs (depthwise and small:
   one signature) take planes. */

/* Whether a depthwise or small conv's geometry is in range: its padded plane, 16 lanes of
   it and C planes of it fit ONYX_MAX_ELEMENTS (the kernels' buffers are at most these). */
static int dw_geometry_ok(const dw_geometry *g) {
    int64_t Hp, Wp, plane, lanes, all, counts[3] = {g->C, g->mult, g->M};
    return onyx_in(counts, 3, 1, ONYX_MAX_EXTENT) &&
           onyx_window_axis(g->H, g->OH, g->kh, g->sh, g->dh, g->top, &Hp) &&
           onyx_window_axis(g->W, g->OW, g->kw, g->sw, g->dw, g->left, &Wp) &&
           onyx_mul(Hp, Wp, &plane) && onyx_mul(plane, 16, &lanes) &&
           onyx_mul(plane, g->C, &all) && g->act >= 0 && g->act <= 5 /* ACT_HARDSIGMOID */ &&
           g->band >= 0;
}

EXPORT int onyx_float_conv_range(const void *p, int64_t begin, int64_t end) {
    const float_conv_task *t = p;
    if (!dw_geometry_ok(t->g) || begin < 0) return ONYX_INVALID;
    return t->fn(t->x, t->w, t->bias, t->y, t->g, begin, end);
}


EXPORT int onyx_int_conv_range(const void *p, int64_t begin, int64_t end) {
    const int_conv_task *t = p;
    if (!dw_geometry_ok(t->g) || begin < 0) return ONYX_INVALID;
    return t->fn(t->x, t->x_signed, t->x_zp, t->wc, t->g, t->o, begin, end);
}


EXPORT int onyx_lookup_range(const void *p, int64_t begin, int64_t end) {
    const lookup_task *t = p;
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

#if defined(_WIN32)
/* setuptools links every extension with this export; Python never imports this library. */
EXPORT void *PyInit__kernels(void) { return 0; }
#endif
