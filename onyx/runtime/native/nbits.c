/* onyx's MatMulNBits kernels (part of the _kernels library): com.microsoft's block-quantized
 * weights (an LLM's int4 linear layers), y = A dequantize(B)^T.
 *
 * B is [N, k_blocks, block * bits / 8] bytes, values lowest bits first, each block with a
 * float32 scale and a zero point (float32 [N, k_blocks], or the default 2^(bits - 1)).
 *
 * Two kernels:
 * - nbits_dequant: rows of the float32 weight, (q - zero_point) * scale rounded once as the
 *   numpy kernel does (bit for bit), for a panel that BLAS then multiplies (prompts, and
 *   accuracy levels other than 4).
 * - nbits_int8: accuracy level 4 for a few rows of A (decoding): each block of A's rows
 *   quantized to int8 (scale max|a| / 127, 127 / max rounded half to even), each block's
 *   integer dot product with the weight's q, (sum - sum(qa) * zero_point) * (a_scale *
 *   w_scale) added block after block in float32. That is the numpy kernel's arithmetic, op for
 *   op (NO_FMA), so the results agree bit for bit. On AVX512-VNNI, 4-bit weights are unpacked
 *   in registers (low nibbles against A's even values, high ones against its odd values,
 *   vpdpbusd) 16 output columns at a time; elsewhere the portable loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx.h"

/* Output columns per unit of nbits_int8's work split. */
#define NB_COLUMNS 16
/* Values of A per VNNI step: 64 packed bytes of a 4-bit row. */
#define NB_CHUNK 128
/* Rows of A per tile of the int8 product (their block sums stay in L2). */
#define NB_ROWS 32
/* Weight rows ahead of the one read that the GEMV prefetches (past the end: no fault): three
   groups, so that a decoding step's small weights, read from DRAM or L3, have enough lines in
   flight (one group ahead left them at about half the LM head's bandwidth). */
#ifndef NB_PREFETCH
#define NB_PREFETCH 48
#endif

static int power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* The checks both kernels share (checks.h): fail closed before reading anything. */
static int shape_ok(const nbits_task *t) {
    int64_t values, bytes, cells;
    if (t->M < 0 || t->K < 1 || t->N < 0 || t->k_blocks < 1) return 0;
    if (!(t->bits == 2 || t->bits == 4 || t->bits == 8)) return 0;
    if (t->block < 16 || !power_of_two(t->block) || t->block > ((int64_t)1 << 24)) return 0;
    if (!onyx_mul(t->k_blocks, t->block, &values) || values < t->K || values - t->block >= t->K)
        return 0;
    if (!onyx_mul(t->N, values, &cells) || !onyx_mul(t->M, t->K, &bytes)) return 0;
    if (!onyx_mul(t->N, t->k_blocks, &cells) || !onyx_mul(t->M, t->N, &bytes)) return 0;
    return t->packed && t->scales;
}

static inline int q_at(const uint8_t *row, int64_t k, int64_t bits) {
    if (bits == 8) return row[k];
    int64_t per = 8 / bits;
    return (row[k / per] >> ((k % per) * bits)) & ((1 << bits) - 1);
}

/* ------------------------------------------------------------------------- dequantization */

/* Rows begin .. end of the weight (row0 .. : the panel), float32, into out[r - row0]. */
static CLONES NO_FMA void dequant_rows(const nbits_task *t, int64_t begin, int64_t end) {
    int64_t kb = t->k_blocks, block = t->block, bits = t->bits, width = kb * block;
    int64_t blob = block * bits / 8;
    for (int64_t r = begin; r < end; r++) {
        const uint8_t *row = t->packed + r * kb * blob;
        float *out = t->out + (r - t->row0) * width;
        for (int64_t b = 0; b < kb; b++) {
            float z = t->zero_points ? t->zero_points[r * kb + b] : t->default_zero;
            float s = t->scales[r * kb + b];
            const uint8_t *p = row + b * blob;
            float *o = out + b * block;
            if (bits == 4) {
                for (int64_t i = 0; i < blob; i++) {
                    o[2 * i] = ((float)(p[i] & 15) - z) * s;
                    o[2 * i + 1] = ((float)(p[i] >> 4) - z) * s;
                }
            } else if (bits == 8) {
                for (int64_t i = 0; i < block; i++) o[i] = ((float)p[i] - z) * s;
            } else {
                for (int64_t i = 0; i < block; i++) o[i] = ((float)q_at(p, i, 2) - z) * s;
            }
        }
    }
}

EXPORT int onyx_nbits_dequant_range(const void *p, int64_t begin, int64_t end) {
    const nbits_task *t = p;
    if (!shape_ok(t) || !t->out || t->row0 < 0 || begin < 0 || end < begin ||
        t->row0 + begin > t->N || t->row0 + end > t->N)
        return ONYX_INVALID;
    dequant_rows(t, t->row0 + begin, t->row0 + end);
    return 0;
}

/* --------------------------------------------------------------------- accuracy level 4 */

/* A's rows as int8 blocks (numpy's _int8_quantized): qa [M][width] (zeros past K), the
   scales [M][kb] and the integer sums of each block [M][kb]. */
static CLONES NO_FMA void quantize_a(const nbits_task *t, int64_t width, int8_t *qa, float *a_scale,
                              int32_t *qa_sum) {
    int64_t K = t->K, kb = t->k_blocks, block = t->block;
    memset(qa, 0, (size_t)(t->M * width));
    for (int64_t m = 0; m < t->M; m++) {
        const float *a = t->a + m * K;
        for (int64_t b = 0; b < kb; b++) {
            int64_t k0 = b * block, k1 = k0 + block < K ? k0 + block : K;
            float top = 0.0f;
            for (int64_t k = k0; k < k1; k++) {
                float v = fabsf(a[k]);
                top = v > top ? v : top;
            }
            float inverse = top != 0.0f ? 127.0f / top : 0.0f;
            int32_t sum = 0;
            for (int64_t k = k0; k < k1; k++) {
                float v = nearbyintf(a[k] * inverse);
                int32_t q = (int32_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
                qa[m * width + k] = (int8_t)q;
                sum += q;
            }
            a_scale[m * kb + b] = top / 127.0f;
            qa_sum[m * kb + b] = sum;
        }
    }
}

/* y[m][n] from block sums, as numpy adds them (one block after another). */
static NO_FMA inline float add_blocks(const nbits_task *t, const int32_t *sums,
                                      const float *a_scale, const int32_t *qa_sum, int64_t n) {
    int64_t kb = t->k_blocks;
    float acc = 0.0f;
    for (int64_t b = 0; b < kb; b++) {
        float z = t->zero_points ? t->zero_points[n * kb + b] : t->default_zero;
        float s = (float)sums[b] - (float)qa_sum[b] * z;
        acc = acc + s * (a_scale[b] * t->scales[n * kb + b]);
    }
    return acc;
}

/* Columns n0 .. n1, every row: the portable loop. */
static CLONES void int8_columns(const nbits_task *t, int64_t n0, int64_t n1, const int8_t *qa,
                                int64_t width, const float *a_scale, const int32_t *qa_sum,
                                int32_t *sums) {
    int64_t kb = t->k_blocks, block = t->block, bits = t->bits;
    int64_t row_bytes = kb * block * bits / 8;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = t->packed + n * row_bytes;
        for (int64_t m = 0; m < t->M; m++) {
            const int8_t *x = qa + m * width;
            for (int64_t b = 0; b < kb; b++) {
                int32_t s = 0;
                for (int64_t k = b * block; k < (b + 1) * block; k++)
                    s += (int32_t)x[k] * q_at(row, k, bits);
                sums[b] = s;
            }
            t->y[m * t->N + n] = add_blocks(t, sums, a_scale + m * kb, qa_sum + m * kb, n);
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define HAVE_NBITS_VNNI 1

/* A's int8 values for the nibble layout: per 128 values, the 64 even ones then the 64 odd
   ones (a packed byte's low and high nibbles). */
static void split_even_odd(const int8_t *qa, int64_t rows, int64_t width, int8_t *out) {
    for (int64_t m = 0; m < rows; m++)
        for (int64_t c = 0; c < width; c += NB_CHUNK)
            for (int64_t i = 0; i < NB_CHUNK / 2; i++) {
                out[m * width + c + i] = qa[m * width + c + 2 * i];
                out[m * width + c + NB_CHUNK / 2 + i] = qa[m * width + c + 2 * i + 1];
            }
}

/* The block sums of one chunk's 16 lane sums (lanes of 8 values each) to sums[0 ..]: blocks
   of 16 / 32 / 64 values are 2 / 4 / 8 lanes (to 8 ints written, the buffer has room). */
static VNNI inline void store_block_sums(__m512i s, int64_t block, int32_t *sums) {
    __mmask16 keep = 0xffff;
    if (block >= 16) s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, (_MM_PERM_ENUM)0xB1)), keep = 0x5555;
    if (block >= 32) s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, (_MM_PERM_ENUM)0x4E)), keep = 0x1111;
    if (block >= 64) s = _mm512_add_epi32(s, _mm512_shuffle_i32x4(s, s, 0xB1)), keep = 0x0101;
    _mm256_storeu_si256((__m256i *)sums, _mm512_castsi512_si256(_mm512_maskz_compress_epi32(keep, s)));
}

/* Group g's scales and zero points as [block][16 columns]: the set-up's transposed copies
   where it made them (no gathers: they cost more than the group's dot products on a GEMV),
   else gathered into `columns` [2][k_blocks][16]. */
static VNNI void group_params(const nbits_task *t, int64_t g, int64_t cols, float *columns,
                              const float **ws, const float **z) {
    int64_t kb = t->k_blocks, at = (g / NB_COLUMNS) * kb * NB_COLUMNS;
    *ws = t->scales_t ? t->scales_t + at : columns;
    int zeros_given = t->zero_points && t->zeros_t;
    *z = zeros_given ? t->zeros_t + at : columns + kb * NB_COLUMNS;
    __mmask16 mask = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    const __m512i lanes = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)kb));
    for (int64_t b = 0; !t->scales_t && b < kb; b++)
        _mm512_storeu_ps(columns + b * NB_COLUMNS,
                         _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, lanes,
                                                  t->scales + g * kb + b, 4));
    for (int64_t b = 0; t->zero_points && !zeros_given && b < kb; b++)
        _mm512_storeu_ps(columns + (kb + b) * NB_COLUMNS,
                         t->zero_points
                             ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, lanes,
                                                        t->zero_points + g * kb + b, 4)
                             : _mm512_set1_ps(t->default_zero));
}

/* Columns n0 .. n1 (a multiple of NB_COLUMNS apart but for the last), 4-bit weights. */
static VNNI NO_FMA void int8_columns_vnni(const nbits_task *t, int64_t n0, int64_t n1,
                                          const int8_t *qa, int64_t width, const float *a_scale,
                                          const int32_t *qa_sum, int32_t *sums, int64_t stride) {
    int64_t kb = t->k_blocks, block = t->block, M = t->M, N = t->N;
    int64_t row_bytes = kb * block / 2, chunks = width / NB_CHUNK;
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t g = n0; g < n1; g += NB_COLUMNS) {
        int64_t cols = n1 - g < NB_COLUMNS ? n1 - g : NB_COLUMNS;
        for (int64_t j = 0; j < cols; j++) {
            const uint8_t *row = t->packed + (g + j) * row_bytes;
            for (int64_t m = 0; m < M; m++) {
                int32_t *out = sums + (m * NB_COLUMNS + j) * stride;
                const int8_t *x = qa + m * width;
                __m512i acc = _mm512_setzero_si512();
                for (int64_t c = 0; c < chunks; c++) {
                    int64_t left = row_bytes - c * 64;
                    __mmask64 mask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
                    __m512i p = _mm512_maskz_loadu_epi8(mask, row + c * 64);
                    __m512i lo = _mm512_and_si512(p, low);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
                    const int8_t *xc = x + c * NB_CHUNK;
                    if (block < NB_CHUNK) acc = _mm512_setzero_si512();
                    acc = _mm512_dpbusd_epi32(acc, lo, _mm512_loadu_si512(xc));
                    acc = _mm512_dpbusd_epi32(acc, hi, _mm512_loadu_si512(xc + NB_CHUNK / 2));
                    if (block < NB_CHUNK) {
                        store_block_sums(acc, block, out + c * (NB_CHUNK / block));
                    } else if ((c + 1) % (block / NB_CHUNK) == 0) {
                        out[c / (block / NB_CHUNK)] = _mm512_reduce_add_epi32(acc);
                        acc = _mm512_setzero_si512();
                    }
                }
            }
        }
        /* the epilogue, 16 columns at once: numpy's float ops in its order */
        __mmask16 mask = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
        __m512i lanes = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)kb));
        __m512i sum_lanes = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32((int)stride));
        for (int64_t m = 0; m < M; m++) {
            __m512 acc = _mm512_setzero_ps();
            const int32_t *ms = sums + m * NB_COLUMNS * stride;
            for (int64_t b = 0; b < kb; b++) {
                __m512i isum = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask,
                                                           sum_lanes, ms + b, 4);
                __m512 ws = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, lanes,
                                                     t->scales + g * kb + b, 4);
                __m512 z = t->zero_points
                               ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, lanes,
                                                          t->zero_points + g * kb + b, 4)
                               : _mm512_set1_ps(t->default_zero);
                __m512 s = _mm512_sub_ps(_mm512_cvtepi32_ps(isum),
                                         _mm512_mul_ps(_mm512_set1_ps((float)qa_sum[m * kb + b]), z));
                s = _mm512_mul_ps(s, _mm512_mul_ps(_mm512_set1_ps(a_scale[m * kb + b]), ws));
                acc = _mm512_add_ps(acc, s);
            }
            _mm512_mask_storeu_ps(t->y + m * N + g, mask, acc);
        }
    }
}
/* Blocks of 32 values (the usual int4 layout), 4 columns at a time: a chunk's 4 blocks of 4
   rows are reduced together by a 4x4 transpose (unpack and add), so that the block sums land
   [block][column] and the epilogue reads them as vectors. */
static VNNI NO_FMA void int8_columns_vnni32(const nbits_task *t, int64_t n0, int64_t n1,
                                            const int8_t *qa, int64_t width,
                                            const float *a_scale, const int32_t *qa_sum,
                                            int32_t *sums, float *columns) {
    int64_t kb = t->k_blocks, M = t->M, N = t->N;
    int64_t row_bytes = kb * 16, chunks = width / NB_CHUNK, blocks = chunks * 4;
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t g = n0; g < n1; g += NB_COLUMNS) {
        int64_t cols = n1 - g < NB_COLUMNS ? n1 - g : NB_COLUMNS;
        for (int64_t j = 0; j < cols; j += 4) {
            const uint8_t *row[4];
            for (int i = 0; i < 4; i++)
                row[i] = t->packed + (g + (j + i < cols ? j + i : cols - 1)) * row_bytes;
            /* (the next group's scales as the epilogue reads them: its transposed copy, a
               line per 16 floats; the original array is then never touched) */
            const float *next = t->scales_t ? t->scales_t + (g / NB_COLUMNS + 1) * kb * NB_COLUMNS
                                            : t->scales + (g + NB_COLUMNS) * kb;
            for (int64_t at = j / 4 * 16; at < kb * NB_COLUMNS && g + NB_COLUMNS < n1; at += 64)
                _mm_prefetch((const char *)(next + at), _MM_HINT_T0);
            for (int64_t c = 0; c < chunks; c++) {
                int64_t left = row_bytes - c * 64;
                __mmask64 mask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
                __m512i lo[4], hi[4];
                for (int i = 0; i < 4; i++) {
                    __m512i p = _mm512_maskz_loadu_epi8(mask, row[i] + c * 64);
                    /* (the next group's rows: DRAM latency, not bandwidth, bounds a cold GEMV) */
                    _mm_prefetch((const char *)(row[i] + NB_PREFETCH * row_bytes + c * 64), _MM_HINT_T0);
                    lo[i] = _mm512_and_si512(p, low);
                    hi[i] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
                }
                for (int64_t m = 0; m < M; m++) {
                    const int8_t *xc = qa + m * width + c * NB_CHUNK;
                    __m512i xlo = _mm512_loadu_si512(xc), xhi = _mm512_loadu_si512(xc + 64);
                    __m512i acc[4];
                    for (int i = 0; i < 4; i++)
                        acc[i] = _mm512_dpbusd_epi32(
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i], xlo), hi[i], xhi);
                    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[0], acc[1]),
                                                   _mm512_unpackhi_epi32(acc[0], acc[1]));
                    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2], acc[3]),
                                                   _mm512_unpackhi_epi32(acc[2], acc[3]));
                    __m512i r = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23),
                                                 _mm512_unpackhi_epi64(s01, s23));
                    int32_t *out = sums + (m * blocks + c * 4) * NB_COLUMNS + j;
                    _mm_storeu_si128((__m128i *)out, _mm512_castsi512_si128(r));
                    _mm_storeu_si128((__m128i *)(out + 16), _mm512_extracti32x4_epi32(r, 1));
                    _mm_storeu_si128((__m128i *)(out + 32), _mm512_extracti32x4_epi32(r, 2));
                    _mm_storeu_si128((__m128i *)(out + 48), _mm512_extracti32x4_epi32(r, 3));
                }
            }
        }
        __mmask16 mask = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
        const float *ws_t, *z_t; /* [block][column], once for all rows */
        group_params(t, g, cols, columns, &ws_t, &z_t);
        for (int64_t m = 0; m < M; m++) {
            __m512 acc = _mm512_setzero_ps();
            const int32_t *ms = sums + m * blocks * NB_COLUMNS;
            for (int64_t b = 0; b < kb; b++) {
                __m512i isum = _mm512_loadu_si512(ms + b * NB_COLUMNS);
                __m512 ws = _mm512_loadu_ps(ws_t + b * NB_COLUMNS);
                /* sum(qa) * zero point: one scalar product without zero points (the same
                   float32 product in every lane) */
                __m512 qz = t->zero_points
                                ? _mm512_mul_ps(_mm512_set1_ps((float)qa_sum[m * kb + b]),
                                                _mm512_loadu_ps(z_t + b * NB_COLUMNS))
                                : _mm512_set1_ps((float)qa_sum[m * kb + b] * t->default_zero);
                __m512 s = _mm512_sub_ps(_mm512_cvtepi32_ps(isum), qz);
                s = _mm512_mul_ps(s, _mm512_mul_ps(_mm512_set1_ps(a_scale[m * kb + b]), ws));
                acc = _mm512_add_ps(acc, s);
            }
            _mm512_mask_storeu_ps(t->y + m * N + g, mask, acc);
        }
    }
}
/* Many rows (a prompt), blocks of 32: B's 4-byte words laid out [16 columns] per word
   (t->dwords), so that vpdpbusd adds each column's products in its own lane (no reductions):
   4 rows of A at a time against 16 columns, block after block. The same integer sums and
   float ops as int8_columns_vnni32: the same bits. */
static VNNI NO_FMA void int8_rows_vnni32(const nbits_task *t, int64_t n0, int64_t n1,
                                         const int8_t *qa, int64_t width, const float *a_scale,
                                         const int32_t *qa_sum, float *columns) {
    int64_t kb = t->k_blocks, M = t->M, N = t->N, words = kb * 4;
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t g = n0; g < n1; g += NB_COLUMNS) {
        int64_t cols = n1 - g < NB_COLUMNS ? n1 - g : NB_COLUMNS;
        __mmask16 mask = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
        const float *ws_t, *z_t;
        group_params(t, g, cols, columns, &ws_t, &z_t);
        const uint8_t *w = t->dwords + (g / NB_COLUMNS) * words * 64;
        for (int64_t m0 = 0; m0 < M; m0 += 4) {
            int rows = M - m0 < 4 ? (int)(M - m0) : 4;
            const int8_t *x[4];
            for (int i = 0; i < 4; i++) x[i] = qa + (m0 + (i < rows ? i : rows - 1)) * width;
            __m512 facc[4];
            for (int i = 0; i < 4; i++) facc[i] = _mm512_setzero_ps();
            for (int64_t b = 0; b < kb; b++) {
                __m512i acc[4];
                for (int i = 0; i < 4; i++) acc[i] = _mm512_setzero_si512();
                for (int64_t d = 4 * b; d < 4 * b + 4; d++) {
                    __m512i p = _mm512_loadu_si512(w + d * 64);
                    __m512i lo = _mm512_and_si512(p, low);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
                    /* word d holds values 8d .. 8d + 7: its chunk's evens at 4r, odds at 64 + 4r */
                    int64_t at = (d / 16) * NB_CHUNK + 4 * (d % 16);
                    for (int i = 0; i < 4; i++) {
                        int32_t even, odd;
                        memcpy(&even, x[i] + at, 4);
                        memcpy(&odd, x[i] + at + NB_CHUNK / 2, 4);
                        acc[i] = _mm512_dpbusd_epi32(acc[i], lo, _mm512_set1_epi32(even));
                        acc[i] = _mm512_dpbusd_epi32(acc[i], hi, _mm512_set1_epi32(odd));
                    }
                }
                __m512 ws = _mm512_loadu_ps(ws_t + b * NB_COLUMNS);
                __m512 z = t->zero_points ? _mm512_loadu_ps(z_t + b * NB_COLUMNS)
                                          : _mm512_set1_ps(t->default_zero);
                for (int i = 0; i < 4; i++) {
                    int64_t m = m0 + (i < rows ? i : rows - 1);
                    __m512 s = _mm512_sub_ps(
                        _mm512_cvtepi32_ps(acc[i]),
                        _mm512_mul_ps(_mm512_set1_ps((float)qa_sum[m * kb + b]), z));
                    s = _mm512_mul_ps(s, _mm512_mul_ps(_mm512_set1_ps(a_scale[m * kb + b]), ws));
                    facc[i] = _mm512_add_ps(facc[i], s);
                }
            }
            for (int i = 0; i < rows; i++)
                _mm512_mask_storeu_ps(t->y + (m0 + i) * N + g, mask, facc[i]);
        }
    }
}
#endif

/* Columns n0 .. n1 for rows of A taken NB_ROWS at a time (each tile quantized once here,
   its weight columns then unpacked once per tile). */
static int int8_tiles(const nbits_task *t, int64_t n0, int64_t n1) {
    int64_t kb = t->k_blocks, width = kb * t->block;
    width = (width + NB_CHUNK - 1) / NB_CHUNK * NB_CHUNK;
    int64_t stride = width / 16 + 8; /* block sums per row (blocks are >= 16), and room */
    int64_t rows = t->M < NB_ROWS ? t->M : NB_ROWS;
    int8_t *qa = malloc((size_t)(2 * rows * width));
    float *a_scale = malloc(sizeof(float) * (size_t)(rows * kb));
    int32_t *qa_sum = malloc(sizeof(int32_t) * (size_t)(rows * kb));
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)(rows * NB_COLUMNS * stride + 8));
    float *columns = malloc(sizeof(float) * (size_t)(2 * kb * NB_COLUMNS));
    int status = 0;
    if (!qa || !a_scale || !qa_sum || !sums || !columns) status = ONYX_NOMEM;
    for (int64_t m0 = 0; !status && m0 < t->M; m0 += NB_ROWS) {
        nbits_task tile = *t;
        tile.M = t->M - m0 < NB_ROWS ? t->M - m0 : NB_ROWS;
        tile.a = t->a + m0 * t->K;
        tile.y = t->y + m0 * t->N;
        quantize_a(&tile, width, qa, a_scale, qa_sum);
#ifdef HAVE_NBITS_VNNI
        if (t->bits == 4 && (onyx_isa() & (ONYX_ISA_AVX512BW | ONYX_ISA_VNNI)) ==
                                (ONYX_ISA_AVX512BW | ONYX_ISA_VNNI)) {
            int8_t *split = qa + tile.M * width;
            split_even_odd(qa, tile.M, width, split);
            if (t->block == 32 && t->dwords)
                int8_rows_vnni32(&tile, n0, n1, split, width, a_scale, qa_sum, columns);
            else if (t->block == 32)
                int8_columns_vnni32(&tile, n0, n1, split, width, a_scale, qa_sum, sums,
                                    columns);
            else
                int8_columns_vnni(&tile, n0, n1, split, width, a_scale, qa_sum, sums, stride);
            continue;
        }
#endif
        int8_columns(&tile, n0, n1, qa, width, a_scale, qa_sum, sums);
    }
    free(qa), free(a_scale), free(qa_sum), free(sums), free(columns);
    return status;
}

EXPORT int onyx_nbits_int8_range(const void *p, int64_t begin, int64_t end) {
    const nbits_task *t = p;
    if (!shape_ok(t) || !t->a || !t->y || !(t->bits == 4 || t->bits == 8) ||
        t->k_blocks > ((int64_t)1 << 24) || begin < 0 || end < begin)
        return ONYX_INVALID;
    int64_t n0 = begin * NB_COLUMNS, n1 = end * NB_COLUMNS < t->N ? end * NB_COLUMNS : t->N;
    return n0 < n1 && t->M > 0 ? int8_tiles(t, n0, n1) : 0;
}

/* Columns per unit of nbits_int8's work split. */
EXPORT int64_t onyx_nbits_columns(void) { return NB_COLUMNS; }
