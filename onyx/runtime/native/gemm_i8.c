/* The exact int8 GEMM (part of the _kernels library; Python: gemm_i8.py).
 *
 * numpy has no 8-bit integer GEMM: without this library, onyx multiplies quantized tensors
 * as exact small integers in float32 BLAS. CPUs with AVX512-VNNI multiply bytes four times
 * as fast (vpdpbusd: 64 u8 x s8 products summed into 16 int32 lanes per instruction), which
 * is what onnxruntime uses for its quantized models.
 *
 * C[M x N] = A[M x K] . B[K x N] exactly in int32, where one operand is unsigned bytes and
 * the other signed (the caller shifts one by 128 where both have the same signedness, and
 * corrects with row/column sums). B is packed first into panels of 32 columns
 * ([N/32][K/4][32][4] bytes: a 64-byte vector holds 4 consecutive k of 16 columns); rows of
 * A are read in place, 4 bytes of a row broadcast against two such vectors. The epilogue
 * adds the zero-point corrections and bias and either stores int32 or requantizes to 8 bits:
 * clamp(rint(acc * scale) + zero_point).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

#define NR 32 /* columns per packed panel: two 16-lane vectors */
#define MR 6  /* rows per register tile: 12 accumulators */


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
/* The 16 x 16 byte transpose of a[] in place: four rounds of unpacks (a[c] then holds column
   c of the rows a[] held). */
static inline __attribute__((always_inline)) void transpose16_regs(__m128i a[16]) {
    __m128i b[16];
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
        a[4 * g + 0] = _mm_unpacklo_epi64(b[4 * g], b[4 * g + 2]);
        a[4 * g + 1] = _mm_unpackhi_epi64(b[4 * g], b[4 * g + 2]);
        a[4 * g + 2] = _mm_unpacklo_epi64(b[4 * g + 1], b[4 * g + 3]);
        a[4 * g + 3] = _mm_unpackhi_epi64(b[4 * g + 1], b[4 * g + 3]);
    }
}

static void transpose16(const uint8_t *src, int64_t ss, uint8_t *dst, int64_t ds) {
    __m128i a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm_loadu_si128((const __m128i *)(src + i * ss));
    transpose16_regs(a);
    for (int c = 0; c < 16; c++) _mm_storeu_si128((__m128i *)(dst + c * ds), a[c]);
}
#endif

#if defined(HAVE_INTERLEAVE16) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_EDGE_BW 1
/* A partial tile (rows, cols <= 16, one of them short) with masked loads and stores
   (AVX-512 BW / VL): its bytes only, the same unpacks. Byte by byte, the edges were most of
   a transpose whose rows are narrower than 16 or not a multiple of 16 long (a conv's NCHW
   input at 14 x 14 or 7 x 7: every row; at 56 x 56, every last 8 bytes). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
transpose_edge_bw(const uint8_t *src, int64_t ss, int64_t rows, int64_t cols, uint8_t *dst,
                  int64_t ds) {
    __m128i a[16];
    __mmask16 in = (__mmask16)((1u << cols) - 1), out = (__mmask16)((1u << rows) - 1);
    for (int i = 0; i < 16; i++)
        a[i] = i < rows ? _mm_maskz_loadu_epi8(in, src + i * ss) : _mm_setzero_si128();
    transpose16_regs(a);
    for (int c = 0; c < cols; c++) _mm_mask_storeu_epi8(dst + c * ds, out, a[c]);
}
#endif

static void transpose_edge(const uint8_t *src, int64_t ss, int64_t rows, int64_t cols,
                           uint8_t *dst, int64_t ds) {
#ifdef HAVE_EDGE_BW
    if (onyx_isa() & ONYX_ISA_AVX512BW) {
        transpose_edge_bw(src, ss, rows, cols, dst, ds);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ds + r] = src[r * ss + c];
}

/* dst[c * ds + r] = src[r * ss + c] for bytes; ONYX_INVALID (nothing touched) for sizes,
   strides or pointers out of range, as onyx_transpose_u32 (checks.h). */
EXPORT int onyx_transpose_u8(const uint8_t *src, int64_t rows, int64_t cols, int64_t ss,
                             uint8_t *dst, int64_t ds) {
    int64_t n;
    if (rows < 0 || cols < 0 || ss < cols || ds < rows || !onyx_mul(rows, ss, &n) ||
        !onyx_mul(cols, ds, &n) || (rows && cols && (!src || !dst)))
        return ONYX_INVALID;
#ifdef HAVE_INTERLEAVE16
    for (int64_t r = 0; r < rows; r += 16) {
        int64_t h = rows - r < 16 ? rows - r : 16, c = 0;
        if (h == 16)
            for (; c + 16 <= cols; c += 16) transpose16(src + r * ss + c, ss, dst + c * ds + r, ds);
        for (; c < cols; c += 16) {
            int64_t w = cols - c < 16 ? cols - c : 16;
            transpose_edge(src + r * ss + c, ss, h, w, dst + c * ds + r, ds);
        }
    }
#else
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ds + r] = src[r * ss + c];
#endif
    return 0;
}

/* dst[c * ds + r] = src[r * ss + c] for 4-byte elements (float32 or int32; strides in
   elements), in 8 x 8 blocks: each source line is read once for a block's 8 rows, where a
   transposing copy element by element (numpy's strided copy of a float conv's (pixels,
   channels) result to NCHW) read one element of each line it touched and was most of a
   pointwise conv's time. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* One 8 x 8 block of 4-byte elements in AVX registers: unpacks, shuffles, lane swaps. */
__attribute__((target("avx"))) static void transpose8x8_u32(const uint32_t *src, int64_t ss,
                                                            uint32_t *dst, int64_t ds) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps((const float *)(src + i * ss));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps((float *)(dst + i * ds), _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps((float *)(dst + (i + 4) * ds),
                         _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}
#define HAVE_TRANSPOSE8 1
#endif

EXPORT int onyx_transpose_u32(const uint32_t *src, int64_t rows, int64_t cols, int64_t ss,
                              uint32_t *dst, int64_t ds) {
    enum { B = 8 };
    int64_t n;
    if (rows < 0 || cols < 0 || ss < cols || ds < rows || !onyx_mul(rows, ss, &n) ||
        !onyx_mul(cols, ds, &n) || (rows && cols && (!src || !dst)))
        return ONYX_INVALID; /* (checks.h) */
#ifdef HAVE_TRANSPOSE8
    const int avx = __builtin_cpu_supports("avx");
#endif
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
        int64_t r1 = r0 + B < rows ? r0 + B : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += B) {
            int64_t c1 = c0 + B < cols ? c0 + B : cols;
#ifdef HAVE_TRANSPOSE8
            if (avx && r1 - r0 == B && c1 - c0 == B) {
                transpose8x8_u32(src + r0 * ss + c0, ss, dst + c0 * ds + r0, ds);
                continue;
            }
#endif
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ds + r] = src[r * ss + c];
        }
    }
    return 0;
}

/* One image (C, H, W) into rows of a padded NHWC buffer: pixel (h, w) at
   dst + (h * Wp + w) * Cp (dst already offset to the first pixel). */
EXPORT int onyx_to_nhwc(const uint8_t *x, int64_t C, int64_t H, int64_t W, uint8_t *dst,
                        int64_t Wp, int64_t Cp) {
    int64_t plane, image, row, rows;
    if (C < 0 || H < 0 || W < 0 || Wp < W || Cp < C || !onyx_mul(H, W, &plane) ||
        !onyx_mul(C, plane, &image) || !onyx_mul(Wp, Cp, &row) || !onyx_mul(H, row, &rows) ||
        (image && (!x || !dst)))
        return ONYX_INVALID; /* (checks.h) */
    for (int64_t h = 0; h < H; h++) onyx_transpose_u8(x + h * W, C, W, plane, dst + h * row, Cp);
    return 0;
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


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* The epilogue of one 16-column vector of row r. */
INLINE VNNI void finish(const epilogue *e, __m512i acc, int64_t r, int64_t j, __mmask16 m) {
    if (e->row_off) acc = _mm512_add_epi32(acc, _mm512_set1_epi32(e->row_off[r]));
    if (e->col_off) acc = _mm512_add_epi32(acc, _mm512_maskz_loadu_epi32(m, e->col_off + j));
    if (e->row_f)
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(e->row_f[r]),
                                                       _mm512_maskz_loadu_epi32(m, e->col_f + j)));
    if (!e->out8 && !e->outf) {
        _mm512_mask_storeu_epi32(e->c + r * e->ldc + j, m, acc);
        return;
    }
    __m512 s = e->scale_cs ? _mm512_maskz_loadu_ps(m, e->scale + r * e->scale_rs + j)
                           : _mm512_set1_ps(e->scale[r * e->scale_rs]);
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), s);
    if (e->outf) { /* (a product, then a sum: never fused, as numpy's two passes) */
        if (e->bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e->bias + j));
        if (e->relu) v = _mm512_max_ps(_mm512_setzero_ps(), v); /* (NaN, -0: v, as np.clip) */
        _mm512_mask_storeu_ps(e->outf + r * e->ldf + j, m, v);
        return;
    }
    /* clamp first (the bounds are integers, so this commutes with rounding); it also keeps
       the conversion in range */
    v = _mm512_max_ps(v, _mm512_set1_ps((float)(e->lo - e->zero_point)));
    v = _mm512_min_ps(v, _mm512_set1_ps((float)(e->hi - e->zero_point)));
    __m512i q = _mm512_add_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT |
                                                                 _MM_FROUND_NO_EXC),
                                 _mm512_set1_epi32(e->zero_point));
    _mm_mask_storeu_epi8(e->out8 + r * e->ldo + j, m, _mm512_cvtepi32_epi8(q));
}

/* finish's float result for a whole tile without a rank-1 term or per-row scales (convs,
   QLinearMatMul, QGemm, DynamicQuantizeMatMul): the epilogue's fields read once and the
   columns' offsets, scales and bias loaded once for all rows (finish reloads them after every
   store, which may alias them). The same operations in the same order: integer sums
   (wrapping, in any order), the product, the bias, the relu. (Byte results: byte_epilogue.) */
INLINE VNNI void float_tile(const epilogue *e, __m512i acc[][2], int mr, int64_t r0, int64_t j0,
                            __mmask16 m0, __mmask16 m1) {
    const __mmask16 m[2] = {m0, m1};
    __m512i off[2];
    __m512 scale[2], bias[2];
    for (int h = 0; h < 2; h++) {
        off[h] = e->col_off ? _mm512_maskz_loadu_epi32(m[h], e->col_off + j0 + 16 * h)
                            : _mm512_setzero_si512();
        scale[h] = e->scale_cs ? _mm512_maskz_loadu_ps(m[h], e->scale + j0 + 16 * h)
                               : _mm512_set1_ps(e->scale[0]);
        bias[h] = e->bias ? _mm512_maskz_loadu_ps(m[h], e->bias + j0 + 16 * h) : _mm512_setzero_ps();
    }
    const int32_t *row_off = e->row_off;
    float *outf = e->outf + r0 * e->ldf + j0;
    const int64_t ldf = e->ldf;
    for (int r = 0; r < mr; r++) {
        __m512i ro = row_off ? _mm512_set1_epi32(row_off[r0 + r]) : _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            if (!m[h]) continue;
            __m512i a = _mm512_add_epi32(_mm512_add_epi32(acc[r][h], ro), off[h]);
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale[h]);
            if (e->bias) v = _mm512_add_ps(v, bias[h]);
            if (e->relu) v = _mm512_max_ps(_mm512_setzero_ps(), v);
            _mm512_mask_storeu_ps(outf + r * ldf + 16 * h, m[h], v);
        }
    }
}

/* finish's byte output for a whole tile (as float_tile), from its named accumulators (an
   array of them was copied to the stack and back): its constants loaded once, then a row at
   a time. The two
   halves' 32 results, in range after the clamp, are narrowed by saturating packs, whose lane
   interleaving one dword permutation undoes, and stored as one 32-byte run: two masked
   down-converting stores (vpmovdb to memory) took twice as long on AMD's AVX-512, and the
   epilogue is most of a small-K product's tile (a pointwise conv's). The same operations in
   the same order on each value as finish: the sums, the product, the clamp, the rounding,
   the zero point. */
typedef struct {
    __m512i off0, off1, zp, order;
    __m512 s0, s1, lo, hi;
    __mmask32 mask;
    __mmask16 m0;
    int is_signed, both;
    const int32_t *row_off;
    uint8_t *out;
    int64_t ldo, r0;
} byte_epilogue;

INLINE VNNI void byte_epilogue_init(byte_epilogue *b, const epilogue *e, int64_t r0, int64_t j0,
                                    __mmask16 m0, __mmask16 m1) {
    b->off0 = e->col_off ? _mm512_maskz_loadu_epi32(m0, e->col_off + j0) : _mm512_setzero_si512();
    b->off1 = e->col_off && m1 ? _mm512_maskz_loadu_epi32(m1, e->col_off + j0 + 16)
                               : _mm512_setzero_si512();
    b->s0 = e->scale_cs ? _mm512_maskz_loadu_ps(m0, e->scale + j0) : _mm512_set1_ps(e->scale[0]);
    b->s1 = e->scale_cs && m1 ? _mm512_maskz_loadu_ps(m1, e->scale + j0 + 16) : b->s0;
    b->lo = _mm512_set1_ps((float)(e->lo - e->zero_point));
    b->hi = _mm512_set1_ps((float)(e->hi - e->zero_point));
    b->zp = _mm512_set1_epi32(e->zero_point);
    b->order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    b->mask = (__mmask32)m0 | ((__mmask32)m1 << 16);
    b->m0 = m0, b->both = m1 != 0, b->is_signed = e->lo < 0;
    b->row_off = e->row_off, b->out = e->out8 + r0 * e->ldo + j0, b->ldo = e->ldo, b->r0 = r0;
}

INLINE VNNI __m512i byte_requantize(const byte_epilogue *b, __m512i a, __m512 s) {
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), s);
    v = _mm512_min_ps(_mm512_max_ps(v, b->lo), b->hi);
    return _mm512_add_epi32(
        _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), b->zp);
}

INLINE VNNI void byte_epilogue_row(const byte_epilogue *b, int r, __m512i a0, __m512i a1) {
    if (b->row_off) {
        __m512i ro = _mm512_set1_epi32(b->row_off[b->r0 + r]);
        a0 = _mm512_add_epi32(a0, ro), a1 = _mm512_add_epi32(a1, ro);
    }
    uint8_t *out = b->out + r * b->ldo;
    __m512i q0 = byte_requantize(b, _mm512_add_epi32(a0, b->off0), b->s0);
    if (!b->both) { /* (16 columns or fewer) */
        _mm_mask_storeu_epi8(out, b->m0, _mm512_cvtepi32_epi8(q0));
        return;
    }
    __m512i q1 = byte_requantize(b, _mm512_add_epi32(a1, b->off1), b->s1);
    __m512i w = _mm512_packs_epi32(q0, q1);
    w = b->is_signed ? _mm512_packs_epi16(w, w) : _mm512_packus_epi16(w, w);
    w = _mm512_permutexvar_epi32(b->order, w);
    _mm256_mask_storeu_epi8(out, b->mask, _mm512_castsi512_si256(w));
}

/* c0 += row r's 4 bytes w (broadcast) times the panel vector b0, c1 likewise with b1, for
   the rows the tile has (r < mr). The accumulators are named variables, not an array: GCC
   kept an array's twelve in registers but copied each between two of them on every step. */
#define STEP(r, w, c0, c1)                                                        \
    do {                                                                          \
        if ((r) < mr) {                                                           \
            __m512i ab = _mm512_set1_epi32((int32_t)(w));                         \
            if (flip) ab = _mm512_xor_si512(ab, _mm512_set1_epi32((int32_t)0x80808080)); \
            if (a_u8) {                                                           \
                c0 = _mm512_dpbusd_epi32(c0, ab, b0);                             \
                c1 = _mm512_dpbusd_epi32(c1, ab, b1);                             \
            } else {                                                              \
                c0 = _mm512_dpbusd_epi32(c0, b0, ab);                             \
                c1 = _mm512_dpbusd_epi32(c1, b1, ab);                             \
            }                                                                     \
        }                                                                         \
    } while (0)

/* Row r's 4 bytes at offset off (rows past mr are never read) */
#define QUAD(r, off) (w = 0, (r) < mr ? memcpy(&w, row[r] + (off), 4) : 0, w)

#define ALL_ROWS(bytes_of)                                                        \
    do {                                                                          \
        STEP(0, bytes_of(0), c00, c01);                                           \
        STEP(1, bytes_of(1), c10, c11);                                           \
        STEP(2, bytes_of(2), c20, c21);                                           \
        STEP(3, bytes_of(3), c30, c31);                                           \
        STEP(4, bytes_of(4), c40, c41);                                           \
        STEP(5, bytes_of(5), c50, c51);                                           \
    } while (0)

/* One mr x 32 tile. row[r]: where row r's bytes start; its quad q (k = 4q..4q+3) is at
   row[r] + quads[q] when gathered (an implicit-GEMM convolution: rows are output pixels, a
   quad is 4 channels of one kernel tap), else at row[r] + 4q. a_u8: A is the unsigned
   operand (vpdpbusd's first factor). */
INLINE VNNI void tile(const uint8_t *const *row, const int64_t *quads, const int flip,
                      const int8_t *panel, int64_t K, const epilogue *e, int64_t r0, int64_t j0,
                      int ncols, const int mr, const int a_u8, const int gathered) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    int64_t full = K / 4;
    uint32_t w;
    for (int64_t q = 0; q < full; q++) {
        int64_t off = gathered ? quads[q] : 4 * q;
        __m512i b0 = _mm512_loadu_si512(panel + q * 128);
        __m512i b1 = _mm512_loadu_si512(panel + q * 128 + 64);
#define FULL_QUAD(r) QUAD(r, off)
        ALL_ROWS(FULL_QUAD);
#undef FULL_QUAD
    }
    if (!gathered && (K & 3)) { /* a partial last quad: its missing bytes meet zeros */
        __m512i b0 = _mm512_loadu_si512(panel + full * 128);
        __m512i b1 = _mm512_loadu_si512(panel + full * 128 + 64);
#define PART_QUAD(r) (w = 0, (r) < mr ? memcpy(&w, row[r] + 4 * full, (size_t)(K & 3)) : 0, w)
        ALL_ROWS(PART_QUAD);
#undef PART_QUAD
    }
    __mmask16 m0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    if (e->out8 && !e->outf && !e->row_f && !e->scale_rs) {
        byte_epilogue b;
        byte_epilogue_init(&b, e, r0, j0, m0, m1);
        byte_epilogue_row(&b, 0, c00, c01);
        if (mr > 1) byte_epilogue_row(&b, 1, c10, c11);
        if (mr > 2) byte_epilogue_row(&b, 2, c20, c21);
        if (mr > 3) byte_epilogue_row(&b, 3, c30, c31);
        if (mr > 4) byte_epilogue_row(&b, 4, c40, c41);
        if (mr > 5) byte_epilogue_row(&b, 5, c50, c51);
        return;
    }
    __m512i acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (e->outf && !e->row_f && !e->scale_rs) {
        float_tile(e, acc, mr, r0, j0, m0, m1);
        return;
    }
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

/* A bound product's whole call (gemm_i8.py's int8_gemm_setup): A (rows of lda bytes) and
   the output (leading dimension ld, in its elements) into copies of the set-up's task and
   epilogue, then the parts on the pool. One native call where Python had filled in two
   struct copies and an operand per call (most of a small product's time at batch 1). */
EXPORT int onyx_gemm_call(const gemm_call *t, const uint8_t *a, int64_t lda, void *out,
                          int64_t ld) {
    if (!t || !a || !out || lda < t->gemm.K || ld < t->gemm.N || t->parts < 1 || !t->cuts ||
        t->out_kind < 0 || t->out_kind > 2)
        return ONYX_INVALID; /* (checks.h) */
    epilogue e = t->e;
    if (t->out_kind == 1) e.out8 = out, e.ldo = ld;
    else if (t->out_kind == 2) e.outf = out, e.ldf = ld;
    else e.c = out, e.ldc = ld;
    operand A = {a, lda, 0, 0};
    gemm_task task = t->gemm;
    task.A = &A, task.e = &e;
    return onyx_parallel(onyx_gemm_range, &task, t->cuts, t->parts, t->threads);
}

/* A batch of products A_i . B_i whose B is data (attention's Q.K^T and weights . V), one
   item per part: each packs its B (any strides) and its A's row sums itself, so a batch
   takes one call instead of a Python set-up per item (which cost 5x the item's GEMM).
   Scalar zero points only; za and zb are as stored (after the flips, see _GemmCall). The
   epilogue e is a template: its corrections and output are set per item. */

EXPORT VNNI int onyx_batched_gemm_range(const void *p, int64_t begin, int64_t end) {
    const batched_gemm *t = p;
    int64_t sizes[3] = {t->M, t->K, t->N}, bytes;
    if (!onyx_in(sizes, 3, 0, ONYX_MAX_EXTENT) || !onyx_mul(t->K + 3, t->N + NR, &bytes))
        return ONYX_INVALID;
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

/* Whether the image(s) fit the padded buffer where they are packed (C <= Cp, a multiple of
   4; the corner and size inside Hp x Wp) and the buffer's size is in range. */
static int implicit_conv_ok(const implicit_conv *c) {
    int64_t sizes[11] = {c->N, c->C, c->H, c->W, c->Hp, c->Wp, c->Cp, c->r0, c->c0, c->pixels,
                         c->M}, plane, image, all;
    return onyx_in(sizes, 11, 0, ONYX_MAX_EXTENT) && c->C <= c->Cp && c->Cp % 4 == 0 &&
           c->r0 + c->H <= c->Hp && c->c0 + c->W <= c->Wp && onyx_mul(c->Hp, c->Wp, &plane) &&
           onyx_mul(plane, c->Cp, &image) && onyx_mul(image, c->N, &all);
}

/* An NHWC image (H, W, C) into the padded NHWC buffer's rows (row stride Wp * Cp, pixel
   stride Cp >= C): one run of bytes per row where Cp == C. */
static void nhwc_rows(const uint8_t *x, int64_t C, int64_t H, int64_t W, uint8_t *dst,
                      int64_t Wp, int64_t Cp) {
    for (int64_t h = 0; h < H; h++) {
        const uint8_t *src = x + h * W * C;
        uint8_t *row = dst + h * Wp * Cp;
        if (Cp == C)
            memcpy(row, src, (size_t)(W * C));
        else
            for (int64_t w = 0; w < W; w++) memcpy(row + w * Cp, src + w * C, (size_t)C);
    }
}

/* The padded NHWC buffer's rows [begin, end) (of N * Hp): each zero-point filled unless the
   conv is bare, then the image's row that lands there copied in. A part of the pool's job
   (the stem's pack of a 3-channel NCHW image was a large share of its time, on one thread
   while the GEMM after it was split); rows go to threads in runs, as the GEMM's pixels do,
   so a thread packs roughly the rows it then reads. */
typedef struct {
    const implicit_conv *c;
    const uint8_t *x;
    uint8_t *xp;
} pack_job;

static int pack_range(const void *p, int64_t begin, int64_t end) {
    const pack_job *j = p;
    const implicit_conv *c = j->c;
    int64_t row_bytes = c->Wp * c->Cp;
    for (int64_t r = begin; r < end; r++) {
        int64_t i = r / c->Hp, h = r % c->Hp - c->r0;
        uint8_t *row = j->xp + r * row_bytes;
        if (!c->bare) memset(row, c->zx, (size_t)row_bytes);
        if (h < 0 || h >= c->H) continue;
        uint8_t *dst = row + c->c0 * c->Cp;
        if (c->in_nhwc)
            nhwc_rows(j->x + (i * c->H + h) * c->W * c->C, c->C, 1, c->W, dst, c->Wp, c->Cp);
        else
            onyx_transpose_u8(j->x + i * c->C * c->H * c->W + h * c->W, c->C, c->W, c->H * c->W,
                              dst, c->Cp);
    }
    return 0;
}

/* A thread's part of the conv after the pack: its block of the GEMM (rows or panels), then
   that block's table lookup and its transpose to the NCHW output, while its results are
   still in cache (after the GEMM, the calling thread alone did both for the whole output). */
typedef struct {
    const implicit_conv *c;
    const gemm_task *t;
    uint8_t *y, *out;
} conv_job;

static int conv_part(const void *p, int64_t begin, int64_t end) {
    const conv_job *j = p;
    const implicit_conv *c = j->c;
    onyx_gemm_range(j->t, begin, end);
    int64_t M = c->M, pixels = c->pixels, r0 = 0, r1 = c->N * pixels, j0 = 0, j1 = M;
    if (j->t->by_rows)
        r0 = begin, r1 = end;
    else
        j0 = begin * NR, j1 = end * NR < M ? end * NR : M;
    if (r1 <= r0 || j1 <= j0) return 0;
    if (c->table) { /* an activation's table (QLinearConvLookup), in place */
        lookup_fn lookup = (lookup_fn)c->lookup;
        if (j1 - j0 == M)
            lookup(j->y + r0 * M, c->table, 1, j->y + r0 * M, (r1 - r0) * M);
        else
            for (int64_t r = r0; r < r1; r++)
                lookup(j->y + r * M + j0, c->table, 1, j->y + r * M + j0, j1 - j0);
    }
    for (int64_t i = r0 / pixels; i * pixels < r1 && !c->out_nhwc; i++) {
        int64_t a = r0 > i * pixels ? r0 : i * pixels;
        int64_t b = r1 < (i + 1) * pixels ? r1 : (i + 1) * pixels;
        onyx_transpose_u8(j->y + a * M + j0, b - a, j1 - j0, M,
                          j->out + (i * M + j0) * pixels + (a - i * pixels), pixels);
    }
    return 0;
}

EXPORT int onyx_implicit_conv(const implicit_conv *c, const uint8_t *x, uint8_t *xp, uint8_t *y,
                              uint8_t *out) {
    if (!implicit_conv_ok(c)) return ONYX_INVALID;
    int64_t image = c->Hp * c->Wp * c->Cp;
    uint8_t *own = NULL; /* xp and y NULL: buffers of its own (Python's cost more) */
    int in_place = c->in_nhwc && c->bare; /* the input is the padded buffer already */
    if ((!xp || !y) && !(in_place && c->out_nhwc)) {
        int64_t results;
        if (!onyx_mul(c->N * c->pixels, c->M, &results)) return ONYX_INVALID;
        own = malloc((size_t)(c->N * image + results));
        if (!own) return ONYX_NOMEM;
        xp = own, y = own + c->N * image;
    }
    if (c->out_nhwc) y = out; /* the GEMM's (pixels x M) rows are the NHWC output */
    if (in_place)
        xp = (uint8_t *)x;
    else {
        pack_job job = {c, x, xp};
        int64_t rows = c->N * c->Hp, ways = c->threads < 1 ? 1 : c->threads, cuts[65];
        if (ways > 64) ways = 64;
        if (ways > rows) ways = rows > 0 ? rows : 1;
        for (int64_t i = 0; i <= ways; i++) cuts[i] = rows * i / ways;
        onyx_parallel(pack_range, &job, cuts, ways, ways);
    }
    operand A = c->A;
    epilogue e = c->e;
    gemm_task t = c->gemm;
    A.a = xp;
    e.out8 = y, e.ldo = c->M;
    t.A = &A, t.e = &e;
    conv_job job = {c, &t, y, out};
    int status = onyx_parallel(conv_part, &job, c->cuts, c->parts, c->threads);
    free(own);
    return status;
}

/* DynamicQuantizeMatMul in one call (Python's per-call work and numpy's passes were most of
   a transformer's small products): x's range with 0, DynamicQuantizeLinear's scale and zero
   point in float32 as quantize.py's dynamic_params computes them, x quantized to uint8
   (x / scale rounded half to even, clamped, plus the zero point), the GEMM, and the epilogue
   float(acc) * (a_scale * b_scale_j) [+ bias_j], each a float32 operation as the numpy
   kernel's. Returns ONYX_DYNAMIC_FALLBACK, touching nothing, for an x with a NaN or an
   infinity (the numpy kernel's other paths decide those). */
#define ONYX_DYNAMIC_FALLBACK 4

static inline __mmask16 head_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static VNNI int dynamic_params(const float *x, int64_t n, float *scale, int32_t *zero_point) {
    __m512 lo = _mm512_setzero_ps(), hi = lo, bad = lo; /* (masked-off lanes read 0) */
    for (int64_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(head_mask(n - i), x + i);
        lo = _mm512_min_ps(lo, v), hi = _mm512_max_ps(hi, v);
        bad = _mm512_add_ps(bad, _mm512_sub_ps(v, v)); /* NaN after a NaN or an infinity */
    }
    if (_mm512_cmp_ps_mask(bad, bad, _CMP_EQ_OQ) != 0xFFFF) return ONYX_DYNAMIC_FALLBACK;
    float l = _mm512_reduce_min_ps(lo), h = _mm512_reduce_max_ps(hi);
    float s = (h - l) / 255.0f;
    if (s == 0.0f) s = 1.0f; /* all zeros: onnxruntime's scale */
    float z = rintf(-l / s);
    if (!(s - s == 0.0f) || !(z - z == 0.0f)) return ONYX_DYNAMIC_FALLBACK;
    *scale = s;
    *zero_point = (int32_t)(z < 0.0f ? 0.0f : z > 255.0f ? 255.0f : z);
    return 0;
}

/* q = clamp(rint(x / s), -zp, 255 - zp) + zp as uint8 (elementwise.c's quantize, vectored) */
static VNNI void quantize_u8(const float *x, int64_t n, float s, int32_t zero_point, uint8_t *q) {
    float zp = (float)zero_point;
    __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-zp), hi = _mm512_set1_ps(255.0f - zp);
    __m512i vz = _mm512_set1_epi32(zero_point);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = head_mask(n - i);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        __m512i w = _mm512_add_epi32(_mm512_cvtps_epi32(v), vz);
        _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(w));
    }
}

/* DynamicQuantizeLinear of float32 x in one call: dynamic_params and quantize_u8 above (the
   numpy kernel's float32 operations, to its bits); the scale and zero point to *scale and
   *zero_point. ONYX_DYNAMIC_FALLBACK, touching nothing, for a NaN or an infinity. */
EXPORT VNNI int onyx_dynamic_quantize(const float *x, int64_t n, uint8_t *q, float *scale,
                                      uint8_t *zero_point) {
    if (n < 1 || n > ONYX_MAX_EXTENT * 16) return ONYX_INVALID;
    float s;
    int32_t z;
    if (dynamic_params(x, n, &s, &z)) return ONYX_DYNAMIC_FALLBACK;
    quantize_u8(x, n, s, z, q);
    *scale = s, *zero_point = (uint8_t)z;
    return 0;
}

EXPORT VNNI int onyx_dynamic_matmul(const dynamic_matmul *t, const float *x, float *y) {
    const gemm_task *g = &t->gemm;
    int64_t M = g->M, K = g->K, N = g->N, sizes[3] = {M, K, N}, n;
    if (!onyx_in(sizes, 3, 0, ONYX_MAX_EXTENT) || !onyx_mul(M, K, &n)) return ONYX_INVALID;
    float a_scale;
    int32_t za;
    if (dynamic_params(x, n, &a_scale, &za)) return ONYX_DYNAMIC_FALLBACK;
    uint8_t *q = malloc((size_t)(n + 1) + (size_t)(2 * N + M) * 4);
    if (!q) return ONYX_NOMEM;
    int32_t *col_off = (int32_t *)(q + ((n + 4) & ~(int64_t)3)), *row_sums = col_off + N;
    float *scale = (float *)(row_sums + M);
    quantize_u8(x, n, a_scale, za, q);
    /* (A - za)(B - zb_j) = S - ZB_j rowsum(A) - za colsum_j + K za ZB_j, wrapping int32 */
    for (int64_t j = 0; j < N; j++)
        col_off[j] = (int32_t)(uint32_t)(-(int64_t)K * za * t->zb_neg[j] -
                                         (int64_t)za * t->colsum[j]);
    for (int64_t j = 0; j < t->b_scales; j++) scale[j] = a_scale * t->b_scale[j];
    epilogue e = t->e;
    e.col_off = col_off, e.scale = scale, e.outf = y;
    if (t->with_rows) {
        onyx_row_sums(q, K, M, K, 0, 0, row_sums);
        e.row_f = row_sums, e.col_f = t->zb_neg;
    }
    operand A = {q, K, 0, 0};
    gemm_task task = *g;
    task.A = &A, task.e = &e;
    int status = onyx_parallel(onyx_gemm_range, &task, t->cuts, t->parts, t->threads);
    free(q);
    return status;
}

#endif

/* ------------------------------------------------------------ channels-last depthwise */

/* The depthwise integer conv of a channels-last (NHWC) image to a channels-last output, for
   chains of quantized convs kept in that layout (kernels/conv_nhwc.py): 16 channels per
   vector are a pixel's own run of bytes, so nothing is transposed. Parts p0 <= p < p1 are
   output rows (image p / OH, row p % OH). A band of up to DWN_BAND output rows has its
   input rows widened once to float32 x - x_zp in a zero-bordered buffer (the padding reads
   as the zero point: adds nothing), every pixel's channels padded to whole vectors; each
   output pixel is then kh * kw multiply-adds per vector, four pixels at a time. The sums are
   exact in float32 (every partial sum an integer below 2**24: Python sends only kernels of
   at most 258 taps) and are requantized as dw_store does: clamp(rint((acc + bias) * scale)
   + zero point), then mapped through the activation's table if any. wc: the weights minus
   their zero points, int16 [kh * kw][C]. Needs 8-bit outputs, one output channel per input
   channel and a bias of at most 2**24 in magnitude. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast") /* (exact integer sums: fusing changes nothing) */
#endif
typedef float dwn_vec __attribute__((vector_size(64)));
#define DWN_BAND 8

/* elementwise.c's byte lookups (QLinearConvLookup's table) */
void onyx_lookup8(const uint8_t *restrict x, const void *restrict table, int64_t size,
                  void *restrict y, int64_t n);
void onyx_lookup8_vbmi(const uint8_t *restrict x, const void *restrict table, int64_t size,
                       void *restrict y, int64_t n);

typedef int32_t dwn_ivec __attribute__((vector_size(64)));
typedef uint8_t dwn_bytes __attribute__((vector_size(16)));
/* n bytes at src widened to float32 x - x_zp at dst, 16 a vector (GCC's vectors of the
   scalar loop, or of vector-extension conversions, took two to four times the instructions:
   the fill was most of a stride-2 layer's time). Where the CPU has AVX-512 F. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DWN_WIDEN 1
__attribute__((target("avx512f"))) static void dwn_widen_avx512(const uint8_t *restrict src,
                                                                int x_signed, int32_t x_zp,
                                                                int64_t n, float *restrict dst) {
    __m512i zp = _mm512_set1_epi32(x_zp);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(src + k));
        __m512i i = x_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
        _mm512_storeu_ps(dst + k, _mm512_cvtepi32_ps(_mm512_sub_epi32(i, zp)));
    }
    for (; k < n; k++) dst[k] = (float)((x_signed ? (int8_t)src[k] : src[k]) - x_zp);
}
#endif

/* Input rows r0 .. r0 + rows of image n (padded coordinates) into the band's buffer as
   float32 x - x_zp, zeros around; a pixel's channels padded to S floats. */
static inline __attribute__((always_inline)) void dwn_fill(
    const uint8_t *restrict x, int x_signed, int32_t x_zp, const dw_geometry *g, int64_t n,
    int64_t r0, int64_t rows, int64_t Wp, int64_t S, float *restrict buf) {
    int64_t C = g->C, lo = g->left, hi = g->left + g->W < Wp ? g->left + g->W : Wp;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r0 + r - g->top;
        float *dst = buf + r * Wp * S;
        if (h < 0 || h >= g->H || hi <= lo) {
            memset(dst, 0, (size_t)(Wp * S) * sizeof(float));
            continue;
        }
        memset(dst, 0, (size_t)(lo * S) * sizeof(float));
        memset(dst + hi * S, 0, (size_t)((Wp - hi) * S) * sizeof(float));
        const uint8_t *src = x + (n * g->H + h) * g->W * C;
        float *at = dst + lo * S;
        int64_t run = (hi - lo) * C;
#ifdef DWN_WIDEN
        if (onyx_isa() & ONYX_ISA_AVX512) {
            if (C == S) /* (whole vectors of channels: the row is one run) */
                dwn_widen_avx512(src, x_signed, x_zp, run, at);
            else
                for (int64_t j = 0; j < hi - lo; j++, src += C, at += S) {
                    dwn_widen_avx512(src, x_signed, x_zp, C, at);
                    for (int64_t c = C; c < S; c++) at[c] = 0.0f;
                }
            continue;
        }
#endif
        if (C == S) { /* (whole vectors of channels: the row is one run) */
            if (x_signed)
                for (int64_t k = 0; k < run; k++) at[k] = (float)((int8_t)src[k] - x_zp);
            else
                for (int64_t k = 0; k < run; k++) at[k] = (float)(src[k] - x_zp);
            continue;
        }
        for (int64_t j = 0; j < hi - lo; j++, src += C, at += S) {
            if (x_signed)
                for (int64_t c = 0; c < C; c++) at[c] = (float)((int8_t)src[c] - x_zp);
            else
                for (int64_t c = 0; c < C; c++) at[c] = (float)(src[c] - x_zp);
            for (int64_t c = C; c < S; c++) at[c] = 0.0f;
        }
    }
}



/* The requantization's constants, read once per call (the byte stores may alias anything:
   read through o, they were loaded again for every vector). */
typedef struct {
    dwn_vec lo, hi; /* the output type's range minus the zero point */
    int32_t zero_point;
} dwn_epilogue;

/* Requantizes a vector of sums (channels c0 .. c0 + lanes; their bias, as float32, and
   scale at bias, scale) into dst, the pixel's run: dw_store's operations, 16 lanes at a
   time. The sum and the bias are integers below 2**24 in magnitude (Python sends no larger
   bias), so their float32 sum is the int32 sum's conversion: one rounding of the same exact
   value. */
static inline __attribute__((always_inline)) void dwn_store(const dwn_epilogue *e, dwn_vec acc,
                                                           const float *bias,
                                                           const float *scale, int64_t lanes,
                                                           uint8_t *dst) {
    const dwn_vec magic = (dwn_vec){0} + 12582912.0f;
    dwn_vec v = (acc + *(const dwn_vec *)bias) * *(const dwn_vec *)scale;
    dwn_ivec below = v < e->lo, above = v > e->hi; /* (then rint: half to even, |v| < 2**22) */
    v = (dwn_vec)((below & (dwn_ivec)e->lo) | (~below & (dwn_ivec)v));
    v = (dwn_vec)((above & (dwn_ivec)e->hi) | (~above & (dwn_ivec)v));
    dwn_ivec q = __builtin_convertvector((v + magic) - magic, dwn_ivec) + e->zero_point;
    dwn_bytes b = __builtin_convertvector(q, dwn_bytes);
    if (lanes == 16)
        memcpy(dst, &b, 16);
    else
        memcpy(dst, &b, (size_t)lanes);
}

/* dwn_store of four neighbouring pixels' sums, the first pixel's run at dst (C bytes a pixel). */
static inline __attribute__((always_inline)) void dwn_store4(const dwn_epilogue *e, dwn_vec a0,
                                                            dwn_vec a1, dwn_vec a2, dwn_vec a3,
                                                            const float *bias,
                                                            const float *scale, int64_t lanes,
                                                            int64_t C, uint8_t *dst) {
    dwn_store(e, a0, bias, scale, lanes, dst);
    dwn_store(e, a1, bias, scale, lanes, dst + C);
    dwn_store(e, a2, bias, scale, lanes, dst + 2 * C);
    dwn_store(e, a3, bias, scale, lanes, dst + 3 * C);
}

/* One output row (its window rows from `rows` in the band's buffer): four pixels at a time
   per vector of channels. Inlined, so a 3x3 kernel's taps are unrolled. */
static inline __attribute__((always_inline)) void dwn_row(
    const dwn_epilogue *o, const float *restrict rows, const float *wt, const float *bias,
    const float *scale, int64_t C, int64_t OW, int64_t sw, int64_t kh, int64_t kw, int64_t dh,
    int64_t dw, int64_t Wp, uint8_t *yrow) {
    int64_t V = (C + 15) / 16, S = V * 16, ps = sw * S;
    for (int64_t v = 0; v < V; v++) {
        int64_t c0 = v * 16, lanes = C - c0 < 16 ? C - c0 : 16;
        int64_t j = 0;
        for (; j + 4 <= OW; j += 4) {
            dwn_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t a = 0; a < kh; a++) {
                const float *row = rows + (a * dh * Wp + j * sw) * S + c0;
                for (int64_t b = 0; b < kw; b++) {
                    dwn_vec w = *(const dwn_vec *)(wt + (a * kw + b) * S + c0);
                    const float *px = row + b * dw * S;
                    a0 += *(const dwn_vec *)px * w;
                    a1 += *(const dwn_vec *)(px + ps) * w;
                    a2 += *(const dwn_vec *)(px + 2 * ps) * w;
                    a3 += *(const dwn_vec *)(px + 3 * ps) * w;
                }
            }
            dwn_store4(o, a0, a1, a2, a3, bias + c0, scale + c0, lanes, C, yrow + j * C + c0);
        }
        for (; j < OW; j++) {
            dwn_vec a0 = {0};
            for (int64_t a = 0; a < kh; a++) {
                const float *row = rows + (a * dh * Wp + j * sw) * S + c0;
                for (int64_t b = 0; b < kw; b++)
                    a0 += *(const dwn_vec *)(row + b * dw * S) *
                          *(const dwn_vec *)(wt + (a * kw + b) * S + c0);
            }
            dwn_store(o, a0, bias + c0, scale + c0, lanes, yrow + j * C + c0);
        }
    }
}

/* dwn_row for a 3x3 undilated kernel of stride sw (1 or 2, a constant where inlined): a
   vector's nine weights stay in registers across the row (the byte stores may alias
   anything, so dwn_row loads them again for every pixel block), and each window row's
   pixels are loaded once for the four outputs that share them (6 vectors for 12
   multiply-adds at stride 1, 9 at stride 2, where dwn_row loads 12). The same products in
   the same order: the same sums. */
static inline __attribute__((always_inline)) void dwn_row3(const dwn_epilogue *o,
                                                           const float *const *rows,
                                                           const float *wt, const float *bias,
                                                           const float *scale, int64_t C,
                                                           int64_t OW, const int64_t sw,
                                                           uint8_t *yrow) {
    int64_t V = (C + 15) / 16, S = V * 16;
    for (int64_t v = 0; v < V; v++) {
        int64_t c0 = v * 16, lanes = C - c0 < 16 ? C - c0 : 16;
        dwn_vec w[9];
        for (int t = 0; t < 9; t++) w[t] = *(const dwn_vec *)(wt + t * S + c0);
        int64_t j = 0;
        for (; j + 4 <= OW; j += 4) {
            dwn_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int a = 0; a < 3; a++) {
                const float *row = rows[a] + j * sw * S + c0;
                dwn_vec p[9];
                for (int q = 0; q < 3 * sw + 3; q++) p[q] = *(const dwn_vec *)(row + q * S);
                for (int b = 0; b < 3; b++) {
                    a0 += p[b] * w[a * 3 + b];
                    a1 += p[sw + b] * w[a * 3 + b];
                    a2 += p[2 * sw + b] * w[a * 3 + b];
                    a3 += p[3 * sw + b] * w[a * 3 + b];
                }
            }
            dwn_store4(o, a0, a1, a2, a3, bias + c0, scale + c0, lanes, C, yrow + j * C + c0);
        }
        for (; j < OW; j++) {
            dwn_vec a0 = {0};
            for (int a = 0; a < 3; a++) {
                const float *row = rows[a] + j * sw * S + c0;
                for (int b = 0; b < 3; b++) a0 += *(const dwn_vec *)(row + b * S) * w[a * 3 + b];
            }
            dwn_store(o, a0, bias + c0, scale + c0, lanes, yrow + j * C + c0);
        }
    }
}

/* Output rows p0 <= p < p1 of a 3x3 undilated conv of horizontal stride 1 or 2 (rows a step
   of g->sh apart, any vertical stride: rows the step skips are not widened): each input row is
   widened once into a ring of three rows (where the band's buffer of up to 17 rows left L1
   for L2: its stores were most of a stride-2 layer's time), then each output row reads its
   window's three rows from the ring. */
static inline __attribute__((always_inline)) void dwn_ring3(
    const uint8_t *x, int x_signed, int32_t x_zp, const dw_geometry *g, const dwn_epilogue *e,
    const float *wt, const float *bias, const float *scale, lookup_fn lookup, const void *table,
    uint8_t *y8, int64_t Wp, int64_t S, int64_t p0, int64_t p1, float *buf) {
    float *slot[3] = {buf, buf + Wp * S, buf + 2 * Wp * S};
    int64_t image = -1, next = 0; /* the image whose rows the ring holds, its next row */
    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / g->OH, i = p % g->OH, first = i * g->sh;
        if (n != image || next < first) image = n, next = first;
        for (; next < first + 3; next++)
            dwn_fill(x, x_signed, x_zp, g, n, next, 1, Wp, S, slot[next % 3]);
        const float *rows[3] = {slot[first % 3], slot[(first + 1) % 3], slot[(first + 2) % 3]};
        uint8_t *yrow = y8 + (n * g->OH + i) * g->OW * g->C;
        if (g->sw == 1)
            dwn_row3(e, rows, wt, bias, scale, g->C, g->OW, 1, yrow);
        else
            dwn_row3(e, rows, wt, bias, scale, g->C, g->OW, 2, yrow);
        if (table) lookup(yrow, table, 1, yrow, g->OW * g->C);
    }
}

EXPORT CLONES int onyx_depthwise_nhwc_i8(const uint8_t *x, int x_signed, int32_t x_zp,
                                         const int16_t *wc, const dw_geometry *g,
                                         const dw_output *o, int64_t p0, int64_t p1) {
    if (!o->y8 || !o->scale || g->mult != 1 || g->M != g->C) return ONYX_INVALID;
    for (int64_t c = 0; o->bias && c < g->C; c++)
        if (o->bias[c] > (1 << 24) || o->bias[c] < -(1 << 24)) return ONYX_INVALID;
    int64_t C = g->C, V = (C + 15) / 16, S = V * 16, K = g->kh * g->kw;
    int64_t Wp = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    int64_t reach = (g->kh - 1) * g->dh + 1, brows = (DWN_BAND - 1) * g->sh + reach;
    dwn_epilogue e = {(dwn_vec){0} + (float)(o->lo - o->zero_point),
                      (dwn_vec){0} + (float)(o->hi - o->zero_point), o->zero_point};
    lookup_fn lookup = onyx_lookup8; /* an activation's table, a row at a time */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (onyx_isa() & ONYX_ISA_VBMI) lookup = onyx_lookup8_vbmi;
#endif
    void *raw_buf = malloc((size_t)(brows * Wp * S) * sizeof(float) + 64);
    void *raw_wt = malloc((size_t)((K + 2) * S) * sizeof(float) + 64); /* + bias, scale */
    if (!raw_buf || !raw_wt) {
        free(raw_buf), free(raw_wt);
        return ONYX_NOMEM;
    }
    float *buf = (float *)(((uintptr_t)raw_buf + 63) & ~(uintptr_t)63);
    float *wt = (float *)(((uintptr_t)raw_wt + 63) & ~(uintptr_t)63);
    for (int64_t t = 0; t < K; t++)
        for (int64_t c = 0; c < S; c++) wt[t * S + c] = c < C ? (float)wc[t * C + c] : 0.0f;
    float *bias = wt + K * S, *scale = wt + (K + 1) * S;
    for (int64_t c = 0; c < S; c++) {
        bias[c] = c < C && o->bias ? (float)o->bias[c] : 0.0f;
        scale[c] = c < C ? o->scale[c] : 0.0f;
    }
    if (g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1 && (g->sw == 1 || g->sw == 2)) {
        dwn_ring3(x, x_signed, x_zp, g, &e, wt, bias, scale, lookup, o->table, o->y8, Wp, S, p0,
                  p1, buf);
        p0 = p1; /* (done) */
    }
    for (int64_t p = p0; p < p1;) {
        int64_t n = p / g->OH, i0 = p % g->OH, rows = g->OH - i0;
        rows = rows < DWN_BAND ? rows : DWN_BAND;
        rows = rows < p1 - p ? rows : p1 - p;
        dwn_fill(x, x_signed, x_zp, g, n, i0 * g->sh, (rows - 1) * g->sh + reach, Wp, S, buf);
        for (int64_t i = 0; i < rows; i++) {
            uint8_t *yrow = o->y8 + ((n * g->OH + i0 + i) * g->OW) * C;
            const float *rows_at = buf + i * g->sh * Wp * S;
            if (g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1)
                dwn_row(&e, rows_at, wt, bias, scale, C, g->OW, g->sw, 3, 3, 1, 1, Wp, yrow);
            else if (g->kh == 5 && g->kw == 5 && g->dh == 1 && g->dw == 1)
                dwn_row(&e, rows_at, wt, bias, scale, C, g->OW, g->sw, 5, 5, 1, 1, Wp, yrow);
            else
                dwn_row(&e, rows_at, wt, bias, scale, C, g->OW, g->sw, g->kh, g->kw, g->dh, g->dw,
                        Wp, yrow);
            if (o->table) lookup(yrow, o->table, 1, yrow, g->OW * C);
        }
        p += rows;
    }
    free(raw_buf), free(raw_wt);
    return 0;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
