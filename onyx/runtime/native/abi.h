/* The library's ABI: every struct Python fills (a kernel's task) is declared here once, as a
   list of fields that makes both the C struct and the row of abi.c's table (names, offsets,
   sizes) from which Python checks its ctypes copies at load: a mismatch turns the library off
   with the reason in onyx.runtime.native.status(), never a kernel reading the wrong field.

   ONYX_<NAME>(F, S) lists the fields as F(S, type, name, array suffix); a new kernel adds its
   struct here and to ONYX_STRUCTS. */
#ifndef ONYX_ABI_H
#define ONYX_ABI_H

#include <stdint.h>

/* The entry points' version: raised whenever an entry point's arguments or return value
   change (the structs are checked field by field; a function's signature cannot be). Python
   refuses a library of another version (_core.ABI_VERSION): one left from an earlier build. */
#define ONYX_ABI_VERSION 1

#define ONYX_DECLARE(S, type, name, dims) type name dims;
#define ONYX_STRUCT(S, FIELDS) typedef struct { FIELDS(ONYX_DECLARE, S) } S;

/* ------------------------------------------------------------------ int8 GEMM (gemm_i8.c) */

/* Where A's rows are: row r at a + rows[r] (or a + r * lda when rows is NULL); quads (when
   gathered, an implicit-GEMM conv): row r's bytes 4q..4q+3 at a + rows[r] + quads[q]. */
#define ONYX_OPERAND(F, S)                                                                   \
    F(S, const uint8_t *, a, ) F(S, int64_t, lda, ) F(S, const int64_t *, rows, )            \
    F(S, const int64_t *, quads, )
ONYX_STRUCT(operand, ONYX_OPERAND)

#define ONYX_EPILOGUE(F, S)                                                                  \
    F(S, const int32_t *, row_off, ) /* [M] added to every row, or NULL */                   \
    F(S, const int32_t *, col_off, ) /* [N] added to every column, or NULL */                \
    F(S, const int32_t *, row_f, )   /* [M] times col_f[N] added (rank 1), or NULL */        \
    F(S, const int32_t *, col_f, )                                                           \
    F(S, int32_t *, c, ) /* int32 output, leading dimension ldc, when out8 is NULL */        \
    F(S, int64_t, ldc, )                                                                     \
    F(S, uint8_t *, out8, ) /* 8-bit requantized output, leading dimension ldo */            \
    F(S, int64_t, ldo, )                                                                     \
    F(S, const float *, scale, ) /* scale[r * scale_rs + j * scale_cs] */                    \
    F(S, int64_t, scale_rs, ) F(S, int64_t, scale_cs, )                                      \
    F(S, int32_t, zero_point, ) /* the output's zero point and its type's range */           \
    F(S, int32_t, lo, ) F(S, int32_t, hi, )                                                  \
    F(S, float *, outf, ) /* float output acc * scale [+ bias[j]], leading dimension ldf */  \
    F(S, int64_t, ldf, ) F(S, const float *, bias, )                                         \
    F(S, int32_t, relu, ) /* float output: max(v, 0) last (a fused Relu), when nonzero */
ONYX_STRUCT(epilogue, ONYX_EPILOGUE)

#define ONYX_GEMM_TASK(F, S)                                                                 \
    F(S, const operand *, A, ) F(S, const int8_t *, packed, ) F(S, const epilogue *, e, )    \
    F(S, int64_t, K, ) F(S, int64_t, N, ) F(S, int64_t, M, ) F(S, int64_t, panels, )         \
    F(S, int32_t, flip, ) F(S, int32_t, a_unsigned, ) F(S, int32_t, by_rows, )
ONYX_STRUCT(gemm_task, ONYX_GEMM_TASK)

#define ONYX_BATCHED_GEMM(F, S)                                                              \
    F(S, const uint8_t *, a, ) F(S, const uint8_t *, b, ) F(S, uint8_t *, y, )               \
    F(S, const int64_t *, a_off, ) /* byte offsets of each item's A and B */                 \
    F(S, const int64_t *, b_off, )                                                           \
    F(S, int64_t, lda, ) /* A's row stride; B's row and column strides (bytes) */            \
    F(S, int64_t, sk, ) F(S, int64_t, sn, ) F(S, int64_t, ldy, )                             \
    F(S, int64_t, M, ) F(S, int64_t, K, ) F(S, int64_t, N, )                                 \
    F(S, int64_t, y_item, ) /* bytes between items' outputs */                               \
    F(S, epilogue, e, )                                                                      \
    F(S, int32_t, flip_a, ) F(S, int32_t, a_unsigned, ) F(S, int32_t, b_flip, )              \
    F(S, int32_t, b_signed, ) F(S, int32_t, za, ) F(S, int32_t, zb, )
ONYX_STRUCT(batched_gemm, ONYX_BATCHED_GEMM)

/* A bound product's set-up for onyx_gemm_call (only read: threads share it): the task and
   the epilogue as made once (A, e and the output are the call's), the work split, and where
   the result goes: out_kind 0 int32 (e.c, ldc), 1 requantized bytes (e.out8, ldo), 2 float
   (e.outf, ldf). */
#define ONYX_GEMM_CALL(F, S)                                                                 \
    F(S, gemm_task, gemm, ) F(S, epilogue, e, ) F(S, const int64_t *, cuts, )                \
    F(S, int64_t, parts, ) F(S, int64_t, threads, ) F(S, int32_t, out_kind, )
ONYX_STRUCT(gemm_call, ONYX_GEMM_CALL)

#define ONYX_IMPLICIT_CONV(F, S)                                                             \
    F(S, operand, A, ) F(S, epilogue, e, ) F(S, gemm_task, gemm, )                           \
    F(S, const int64_t *, cuts, ) F(S, int64_t, parts, ) F(S, int64_t, threads, )            \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, )              \
    F(S, int64_t, Hp, ) F(S, int64_t, Wp, ) F(S, int64_t, Cp, ) F(S, int64_t, r0, )          \
    F(S, int64_t, c0, ) F(S, int64_t, pixels, ) F(S, int64_t, M, )                           \
    F(S, int32_t, zx, ) F(S, int32_t, bare, )                                                \
    F(S, const void *, lookup, ) /* a lookup_fn applying table (256 bytes) to the output */  \
    F(S, const uint8_t *, table, )                                                           \
    F(S, int32_t, in_nhwc, ) F(S, int32_t, out_nhwc, ) /* x, out channels-last (N,H,W,C) */
ONYX_STRUCT(implicit_conv, ONYX_IMPLICIT_CONV)

/* DynamicQuantizeMatMul in one call (x and y are the call's arguments: the task is only
   read, so threads share it): x (M x K float32, contiguous) quantized to uint8 as
   DynamicQuantizeLinear does, times the packed B, to float y (M x N). gemm holds B, its split
   and the epilogue's constant part; zb_neg: -ZB_j (the packed B's zero points), with_rows:
   whether any is non-zero (then A's row sums are needed). */
#define ONYX_DYNAMIC_MATMUL(F, S)                                                            \
    F(S, const int32_t *, colsum, )                                                          \
    F(S, const int32_t *, zb_neg, ) F(S, const float *, b_scale, ) F(S, int64_t, b_scales, ) \
    F(S, gemm_task, gemm, ) F(S, epilogue, e, ) F(S, const int64_t *, cuts, )                \
    F(S, int64_t, parts, ) F(S, int64_t, threads, ) F(S, int32_t, with_rows, )
ONYX_STRUCT(dynamic_matmul, ONYX_DYNAMIC_MATMUL)

/* ------------------------------------------------------ plane convs (depthwise.c: depthwise
   and small) */

#define ONYX_DW_GEOMETRY(F, S)                                                               \
    F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, ) /* input channels and size */   \
    F(S, int64_t, mult, ) /* output channels per input channel */                            \
    F(S, int64_t, OH, ) F(S, int64_t, OW, )                                                  \
    F(S, int64_t, kh, ) F(S, int64_t, kw, ) F(S, int64_t, sh, ) F(S, int64_t, sw, )          \
    F(S, int64_t, dh, ) F(S, int64_t, dw, )                                                  \
    F(S, int64_t, top, ) F(S, int64_t, left, ) /* begin pads (>= 0) */                       \
    F(S, int64_t, M, )   /* output channels (C * mult for a depthwise conv) */               \
    F(S, int64_t, act, ) /* the float depthwise conv's activation (activation.h) ... */      \
    F(S, float, alpha, ) F(S, float, beta, ) /* ... and its parameters */                    \
    F(S, int64_t, band, ) /* the AVX-512 kernels' output rows per part (0: all of them) */ \
    F(S, int64_t, shuffle, ) /* > 1: x's channels read shuffled in that many groups */
ONYX_STRUCT(dw_geometry, ONYX_DW_GEOMETRY)

#define ONYX_DW_OUTPUT(F, S)                                                                 \
    F(S, const int32_t *, bias, ) /* [M] or NULL */                                          \
    F(S, int32_t *, y32, ) F(S, uint8_t *, y8, ) F(S, const float *, scale, ) /* [M] */      \
    F(S, int32_t, zero_point, ) F(S, int32_t, lo, ) F(S, int32_t, hi, )                     \
    F(S, const uint8_t *, table, ) /* 256 bytes the 8-bit output is mapped through, or NULL */
ONYX_STRUCT(dw_output, ONYX_DW_OUTPUT)

typedef int (*float_conv_fn)(const float *, const float *, const float *, float *,
                             const dw_geometry *, int64_t, int64_t);
#define ONYX_FLOAT_CONV_TASK(F, S)                                                           \
    F(S, float_conv_fn, fn, ) F(S, const float *, x, ) F(S, const float *, w, )              \
    F(S, const float *, bias, ) F(S, float *, y, ) F(S, const dw_geometry *, g, )
ONYX_STRUCT(float_conv_task, ONYX_FLOAT_CONV_TASK)

/* The stem conv then a MaxPool over its output (depthwise.c's onyx_stem_pool_f32_range). */
struct pool2d_s;
#define ONYX_STEM_POOL(F, S)                                                                 \
    F(S, const float *, x, ) F(S, const float *, w, ) F(S, const float *, bias, )            \
    F(S, float *, y, ) /* the pooled output (N, M, pool's OH, OW) */                         \
    F(S, const dw_geometry *, g, ) /* the stem conv's */                                    \
    F(S, const struct pool2d_s *, pool, ) /* the MaxPool's, its H x W the conv's output */   \
    F(S, int64_t, band, ) /* pooled rows per part */
typedef int (*int_conv_fn)(const uint8_t *, int, int32_t, const int16_t *, const dw_geometry *,
                           const dw_output *, int64_t, int64_t);
#define ONYX_INT_CONV_TASK(F, S)                                                             \
    F(S, int_conv_fn, fn, ) F(S, const uint8_t *, x, ) F(S, const int16_t *, wc, )           \
    F(S, const dw_geometry *, g, ) F(S, const dw_output *, o, )                              \
    F(S, int32_t, x_signed, ) F(S, int32_t, x_zp, )
ONYX_STRUCT(int_conv_task, ONYX_INT_CONV_TASK)

/* ------------------------------------------------------------ elementwise (elementwise.c) */

typedef void (*lookup_fn)(const uint8_t *, const void *, int64_t, void *, int64_t);
#define ONYX_LOOKUP_TASK(F, S)                                                               \
    F(S, lookup_fn, fn, ) F(S, const uint8_t *, x, ) F(S, const void *, table, )             \
    F(S, int64_t, size, ) F(S, uint8_t *, y, )
ONYX_STRUCT(lookup_task, ONYX_LOOKUP_TASK)

#define ONYX_QBINARY(F, S)                                                                   \
    F(S, float, za, ) F(S, float, zb, ) F(S, float, ka, ) F(S, float, kb, ) F(S, float, zy, ) \
    F(S, int32_t, is_signed, ) F(S, int32_t, multiply, ) F(S, int32_t, lo, )                 \
    F(S, int32_t, hi, )
ONYX_STRUCT(qbinary, ONYX_QBINARY)

#define ONYX_QBINARY_TASK(F, S)                                                              \
    F(S, const uint8_t *, a, ) F(S, const uint8_t *, b, ) F(S, int64_t, inner, )             \
    F(S, int64_t, mid, ) F(S, int64_t, bn, ) F(S, const qbinary *, p, ) F(S, uint8_t *, y, )
ONYX_STRUCT(qbinary_task, ONYX_QBINARY_TASK)

#define ONYX_QUANTIZE_TASK(F, S)                                                             \
    F(S, const float *, x, ) F(S, float, scale, ) F(S, int32_t, zero_point, )                \
    F(S, int32_t, is_signed, ) F(S, uint8_t *, y, )
ONYX_STRUCT(quantize_task, ONYX_QUANTIZE_TASK)

#define ONYX_DEQUANTIZE_TASK(F, S)                                                           \
    F(S, const void *, x, ) F(S, float, scale, ) F(S, int32_t, zero_point, )                 \
    F(S, int32_t, is_signed, ) F(S, float *, y, )
ONYX_STRUCT(dequantize_task, ONYX_DEQUANTIZE_TASK)

#define ONYX_UNARY_TASK(F, S) F(S, const float *, x, ) F(S, float *, y, )
ONYX_STRUCT(unary_task, ONYX_UNARY_TASK)

/* erf(u) ~ u P(u^2) / Q(u^2) on |u| <= 4, lowest degree first */
#define ONYX_ERF_TASK(F, S)                                                                  \
    F(S, const float *, x, ) F(S, float *, y, ) F(S, float, scale, ) F(S, float, p, [7])     \
    F(S, float, q, [6]) F(S, int32_t, gelu, )                                               \
    F(S, const float *, bias, ) /* [width] added to x's rows first (BiasGelu), or null */    \
    F(S, int64_t, width, )      /* bias's length: with a bias the range counts rows */
ONYX_STRUCT(erf_task, ONYX_ERF_TASK)

#define ONYX_HARD_SIGMOID_TASK(F, S)                                                         \
    F(S, const float *, x, ) F(S, float *, y, ) F(S, float, alpha, ) F(S, float, beta, )
ONYX_STRUCT(hard_sigmoid_task, ONYX_HARD_SIGMOID_TASK)

/* -------------------------------------------------------------- float conv (conv_f32.c) */

#define ONYX_CONV_F32(F, S)                                                                  \
    F(S, const float *, x, )    /* input (N, C, H, W), C-contiguous */                       \
    F(S, const float *, w, )    /* packed weights (group, panels, K, MR) */                  \
    F(S, const float *, bias, ) /* [M] or null */                                            \
    F(S, const float *, z, )    /* residual (N, M, OH, OW) added before the activation */    \
    F(S, float *, y, )          /* output (N, M, OH, OW) */                                  \
    F(S, float *, cols, ) /* every strip's columns packed beforehand, or null */             \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, )              \
    F(S, int64_t, M, ) F(S, int64_t, OH, ) F(S, int64_t, OW, )                               \
    F(S, int64_t, kh, ) F(S, int64_t, kw, ) F(S, int64_t, sh, ) F(S, int64_t, sw, )          \
    F(S, int64_t, dh, ) F(S, int64_t, dw, ) F(S, int64_t, top, ) F(S, int64_t, left, )       \
    F(S, int64_t, group, ) F(S, int64_t, kc, ) /* rows of columns packed at a time */        \
    F(S, int64_t, strips, )   /* strips of CF_NR pixels over N * OH * OW */                  \
    F(S, int64_t, per_part, ) /* strips per part */                                          \
    F(S, int64_t, blocks, )   /* blocks of panels per block of strips */                     \
    F(S, int64_t, wide, ) /* 1: x is the padded input read in place (conv_f32.c's "wide") */   \
    F(S, int64_t, raw, )  /* 1 (wide 1 or 2): x is the unpadded input, padded by each part */ \
    F(S, int64_t, xh, ) F(S, int64_t, xw, )     /* the unpadded input's height and width */  \
    F(S, int64_t, xtop, ) F(S, int64_t, xleft, ) /* its place in the padded H x W */         \
    F(S, int32_t, act, ) F(S, float, alpha, ) F(S, float, beta, )                          \
    F(S, int64_t, ncols, ) /* the floats at cols (0 without): checked against what it holds */
ONYX_STRUCT(conv_f32, ONYX_CONV_F32)

/* ------------------------------------------------------------ 1-D float conv (conv1d.c) */

#define ONYX_CONV1D_F32(F, S)                                                                \
    F(S, const float *, x, )    /* input (N, C, L), element (n, c, l) at n sn + c sc + l sl */ \
    F(S, const float *, w, )    /* channel panels (group, panels, T, 16) or rows (M, T) */   \
    F(S, const float *, bias, ) /* [M] or null */                                            \
    F(S, const float *, z, )    /* residual (N, M, OL) added before the activation */        \
    F(S, float *, y, )          /* output (N, M, OL) */                                      \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, L, ) F(S, int64_t, M, )              \
    F(S, int64_t, sn, ) F(S, int64_t, sc, ) F(S, int64_t, sl, ) /* x's strides (floats) */    \
    F(S, int64_t, OL, ) F(S, int64_t, k, ) F(S, int64_t, s, ) F(S, int64_t, d, )             \
    F(S, int64_t, left, ) F(S, int64_t, group, )                                             \
    F(S, int64_t, chunk, ) /* output positions per part */                                   \
    F(S, int64_t, mode, )  /* 0: channel vectors, 1: position vectors */                     \
    F(S, int32_t, act, ) F(S, float, alpha, ) F(S, float, beta, )
ONYX_STRUCT(conv1d_f32, ONYX_CONV1D_F32)

/* ---------------------------------------------------------------- float GEMV (gemv.c) */

#define ONYX_GEMV_F32(F, S)                                                                  \
    F(S, const float *, x, ) /* (M, K), C-contiguous */                                      \
    F(S, const float *, w, ) /* (N, K) when trans, else (K, N); C-contiguous */              \
    F(S, const float *, c, ) /* [N] times beta, or null */                                   \
    F(S, const float *, z, ) /* (M, N) added, or null */                                     \
    F(S, float *, y, )       /* (M, N) */                                                    \
    F(S, int64_t, M, ) F(S, int64_t, K, ) F(S, int64_t, N, ) F(S, int64_t, trans, )          \
    F(S, float, alpha, ) F(S, float, beta, )                                                 \
    F(S, int32_t, act, ) /* a code of activation.h, its parameters: */                       \
    F(S, float, act_alpha, ) F(S, float, act_beta, )
ONYX_STRUCT(gemv_f32, ONYX_GEMV_F32)

/* -------------------------------------------------------------------- Resize (resize.c) */

#define ONYX_BILINEAR(F, S)                                                                  \
    F(S, const float *, x, ) /* planes (n, H, W), contiguous */                              \
    F(S, float *, y, )       /* planes (n, OH, OW) */                                        \
    F(S, int64_t, H, ) F(S, int64_t, W, ) F(S, int64_t, OH, ) F(S, int64_t, OW, )            \
    F(S, const int32_t *, y_lo, ) F(S, const int32_t *, y_hi, ) /* taps per output row */    \
    F(S, const int32_t *, x_lo, ) F(S, const int32_t *, x_hi, ) /* and column */             \
    F(S, const float *, wy_lo, ) F(S, const float *, wy_hi, ) F(S, const float *, wx_lo, )   \
    F(S, const float *, wx_hi, )
ONYX_STRUCT(bilinear, ONYX_BILINEAR)

#define ONYX_REPEAT2D(F, S)                                                                  \
    F(S, const uint32_t *, x, ) F(S, uint32_t *, y, ) F(S, int64_t, H, ) F(S, int64_t, W, )  \
    F(S, int64_t, kh, ) F(S, int64_t, kw, )
ONYX_STRUCT(repeat2d, ONYX_REPEAT2D)

/* ------------------------------------------------------------------ LSTM, GRU (rnn.c) */

#define ONYX_RECURRENCE(F, S)                                                                \
    F(S, float *, xs, ) /* [dirs, gates, H, steps, batch] input projections; when x is set, \
                           rnn.c writes them from x first, [steps, batch, dirs, gates, H] */ \
    F(S, const float *, x, ) /* [steps, batch, n_in] or NULL: the inputs to project */       \
    F(S, const float *, w, ) /* [n_in, dirs * gates * H] input weights (with x) */           \
    F(S, const float *, bias, ) /* [dirs * gates * H] the projections' biases (with x) */    \
    F(S, int64_t, n_in, ) /* (without x: -1 when xs holds rows [steps, batch, dirs, gates, H]) */ \
    F(S, const float *, rt, ) /* [dirs, H / 16, H (in), gates, 16 (out)] recurrent weights */ \
    F(S, const float *, h0, ) F(S, const float *, c0, ) /* [dirs, batch, H] (c0: LSTM's) */  \
    F(S, const float *, rbh, ) /* [dirs, H]: GRU's recurrent bias of its candidate gate */   \
    F(S, float *, ys, ) F(S, float *, cs, ) /* [steps, dirs, batch, H] each step's H, C */   \
    F(S, int64_t, steps, ) F(S, int64_t, dirs, ) F(S, int64_t, batch, ) F(S, int64_t, H, )   \
    F(S, int64_t, reverse, ) /* bit d set: direction d runs from the last step back */
ONYX_STRUCT(recurrence, ONYX_RECURRENCE)

/* ------------ rows (rows.c: global_pool, softmax_rows) and norms (norms.c: the other three) */

#define ONYX_GLOBAL_POOL(F, S)                                                               \
    F(S, const void *, x, ) /* (rows, size), C-contiguous */                                 \
    F(S, void *, y, )       /* [rows] */                                                     \
    F(S, int64_t, size, )   /* values per row */                                             \
    F(S, float, scale, )    /* 8-bit rows: x_scale / (y_scale * size), in float32 */         \
    F(S, int32_t, x_zp, ) F(S, int32_t, y_zp, ) F(S, int32_t, is_signed, )                 \
    /* qmean_columns: x (images, size, columns) channels-last, y (images, columns) */       \
    F(S, int64_t, columns, )
ONYX_STRUCT(global_pool, ONYX_GLOBAL_POOL)

#define ONYX_LAYER_NORM(F, S)                                                                \
    F(S, const float *, x, ) /* (rows, size), C-contiguous */                                \
    F(S, const float *, scale, ) F(S, const float *, bias, ) /* [size]; bias may be null */  \
    F(S, float *, y, ) F(S, float *, mean, ) F(S, float *, inv_std, ) /* stats: [rows] */    \
    F(S, int64_t, size, ) F(S, float, epsilon, )                                             \
    /* SkipLayerNormalization: x + skip (rows like x) + add ([size]) into sum, which is      \
       normalized; all three null for a plain LayerNormalization */                         \
    F(S, const float *, skip, ) F(S, const float *, add, ) F(S, float *, sum, )
ONYX_STRUCT(layer_norm, ONYX_LAYER_NORM)

#define ONYX_SOFTMAX_ROWS(F, S)                                                              \
    F(S, const float *, x, ) F(S, float *, y, ) /* (rows, size), C-contiguous */            \
    F(S, int64_t, size, )
ONYX_STRUCT(softmax_rows, ONYX_SOFTMAX_ROWS)

#define ONYX_NORM_ROWS(F, S)                                                                 \
    F(S, const float *, x, ) /* (rows, channels, spatial), C-contiguous */                   \
    F(S, const float *, scale, ) F(S, const float *, bias, ) /* (rows, channels) */          \
    F(S, float *, y, ) F(S, int64_t, channels, ) F(S, int64_t, spatial, )                    \
    F(S, float, epsilon, )
ONYX_STRUCT(norm_rows, ONYX_NORM_ROWS)

#define ONYX_BATCH_NORM(F, S)                                                                \
    F(S, const float *, x, ) /* (N, C, size), C-contiguous */                                \
    F(S, float *, y, )                                                                       \
    F(S, const float *, mean, ) F(S, const float *, mult, ) /* [C]; mult = scale / std */    \
    F(S, const float *, bias, ) F(S, int64_t, channels, ) F(S, int64_t, size, )
ONYX_STRUCT(batch_norm, ONYX_BATCH_NORM)

/* ------------------------------------------------------------------ pooling (window.c) */

#define ONYX_POOL2D(F, S)                                                                    \
    F(S, const float *, x, ) /* (planes, H, W) */                                            \
    F(S, float *, y, )       /* (planes, OH, OW) */                                          \
    F(S, int64_t, H, ) F(S, int64_t, W, ) F(S, int64_t, OH, ) F(S, int64_t, OW, )            \
    F(S, int64_t, kh, ) F(S, int64_t, kw, ) F(S, int64_t, sh, ) F(S, int64_t, sw, )          \
    F(S, int64_t, dh, ) F(S, int64_t, dw, ) F(S, int64_t, top, ) F(S, int64_t, left, )       \
    F(S, int64_t, bottom, ) F(S, int64_t, right, )                                           \
    F(S, int64_t, average, ) F(S, int64_t, include_pad, ) F(S, int64_t, by_columns, )
typedef struct pool2d_s { ONYX_POOL2D(ONYX_DECLARE, pool2d) } pool2d;
ONYX_STRUCT(stem_pool, ONYX_STEM_POOL)

/* ------------------------------------------------------------ tree ensembles (trees.c) */

#define ONYX_FOREST_TASK(F, S)                                                               \
    F(S, const void *, x, )          /* rows x nf, float32 or float64 (is_double) */         \
    F(S, const int64_t *, roots, )   /* doubled root state of each tree */                   \
    F(S, const int64_t *, feature, ) /* [2S] */                                              \
    F(S, const void *, threshold, )  /* [2S], x's type */                                    \
    F(S, const int64_t *, child, )   /* [2S] */                                              \
    F(S, const uint8_t *, nan_outcome, ) /* [2S], or null: no NaN rule (or no NaN in x) */   \
    F(S, int64_t *, states, ) /* rows x trees: the (undoubled) state each row reaches */     \
    F(S, int64_t, nf, ) F(S, int64_t, trees, ) F(S, int64_t, depth, )                        \
    F(S, int64_t, is_double, )
ONYX_STRUCT(forest_task, ONYX_FOREST_TASK)

#define ONYX_FOREST_SUM_TASK(F, S)                                                           \
    F(S, const int64_t *, states, ) /* rows x trees */                                       \
    F(S, const void *, weights, ) /* states x targets, float32 or float64 (is_double) */     \
    F(S, void *, scores, )        /* rows x targets */                                       \
    F(S, int64_t, trees, ) F(S, int64_t, targets, ) F(S, int64_t, is_double, )
ONYX_STRUCT(forest_sum_task, ONYX_FOREST_SUM_TASK)

/* ------------------------------------------------------------ SVM classifier (trees.c) */

#define ONYX_SVM_TASK(F, S)                                                                  \
    F(S, const double *, vectors, ) /* [nf x vectors]: the support vectors, transposed */    \
    F(S, const double *, weights, ) /* [pairs x vectors]: each pair's dual coefficients */   \
    F(S, const double *, rho, )     /* [pairs] */                                            \
    F(S, const double *, prob_a, )  /* [pairs], or NULL: decisions out, no probabilities */  \
    F(S, const double *, prob_b, )                                                           \
    F(S, const int64_t *, first, ) F(S, const int64_t *, second, ) /* pairs' classes i < j */ \
    F(S, int64_t, n_vectors, ) F(S, int64_t, nf, ) F(S, int64_t, pairs, ) F(S, int64_t, k, ) \
    F(S, int64_t, kernel, ) /* 0 LINEAR, 1 POLY, 2 RBF, 3 SIGMOID */                          \
    F(S, int64_t, degree, ) F(S, double, gamma, ) F(S, double, coef0, )
ONYX_STRUCT(svm_task, ONYX_SVM_TASK)

/* ------------------------------------------------------------ ml small calls (trees.c) */

/* One ai.onnx.ml kernel's call on a few rows (trees.py's SmallCall): its kept tasks and
   constants, and the calling thread's own outputs, read by onyx_*_small(call, x, rows). */
#define ONYX_ML_CALL(F, S)                                                                   \
    F(S, const void *, task, ) F(S, const void *, task2, ) /* the kernel's kept tables */    \
    F(S, const void *, consts, ) /* a classifier's base values, or null */                   \
    F(S, void *, out, ) /* [max_rows][n]: scores (the thread's own) */                       \
    F(S, int64_t *, best, ) /* [max_rows]: each row's best class, or null */                 \
    F(S, void *, work, ) /* the kernel's work space (the thread's own), or null */           \
    F(S, int64_t, nf, ) /* x's row width */                                                  \
    F(S, int64_t, max_rows, ) F(S, int64_t, n, ) F(S, int64_t, mode, )
ONYX_STRUCT(ml_call, ONYX_ML_CALL)

/* An ai.onyx LinearChain's constants (optimizer/linear_chain.py): each row's features pass
   the Scaler, the Sub and the MatMul present, then LinearClassifier and a Normalizer. */
#define ONYX_LINEAR_CHAIN(F, S)                                                              \
    F(S, const float *, offset, ) F(S, const float *, scale, ) /* Scaler's [nf], or null */  \
    F(S, const float *, sub, ) /* [nf] subtracted next, or null */                           \
    F(S, const float *, proj, ) /* [nf][k up to 16s, 0s] multiplied next, or null (k = nf) */ \
    F(S, const float *, weights, ) F(S, const float *, bias, ) /* [k][C]; [C] or null */     \
    F(S, int64_t, k, ) F(S, int64_t, norm, ) /* -1 no Normalizer; else its norm (0..2) */
ONYX_STRUCT(linear_chain, ONYX_LINEAR_CHAIN)

/* ------------------------------------------------------------ MatMulNBits (nbits.c) */

#define ONYX_NBITS_TASK(F, S)                                                                \
    F(S, const float *, a, ) /* A [M, K] (nbits_int8) */                                     \
    F(S, float *, y, )       /* Y [M, N] (nbits_int8) */                                     \
    F(S, const uint8_t *, packed, ) /* B [N, k_blocks * block * bits / 8] */                 \
    F(S, const float *, scales, )   /* [N, k_blocks] */                                      \
    F(S, const float *, zero_points, ) /* [N, k_blocks], or NULL: default_zero */            \
    F(S, float *, out, ) /* nbits_dequant: rows row0 .. of the weight [n, k_blocks * block] */ \
    F(S, int64_t, M, ) F(S, int64_t, K, ) F(S, int64_t, N, ) F(S, int64_t, k_blocks, )       \
    F(S, int64_t, block, ) F(S, int64_t, bits, ) F(S, int64_t, row0, )                       \
    F(S, float, default_zero, )                                                              \
    F(S, const uint8_t *, dwords, ) /* NULL, or B's 4-byte words as [N / 16][words][16] */ \
    F(S, const float *, scales_t, ) /* NULL, or the scales as [N / 16][k_blocks][16] */      \
    F(S, const float *, zeros_t, )  /* the float zero points so (with scales_t), or NULL */
ONYX_STRUCT(nbits_task, ONYX_NBITS_TASK)

/* ------------------------------------------------- GroupQueryAttention (attention.c) */

#define ONYX_GQA_TASK(F, S)                                                                  \
    F(S, const float *, q, ) /* the step's rows: head h of token (b, s) at q + b * q_bs +    */ \
    F(S, const float *, k, ) /* s * q_ss + h * head (k, v: kv_bs, kv_ss), before rotary   */ \
    F(S, const float *, v, )                                                                 \
    F(S, int64_t, q_bs, ) F(S, int64_t, q_ss, ) F(S, int64_t, kv_bs, ) F(S, int64_t, kv_ss, ) \
    F(S, float *, k_cache, ) /* [batch, kv_heads, capacity, head]: rows past .. written */    \
    F(S, float *, v_cache, )                                                                 \
    F(S, float *, y, )                /* head h of token (b, s) at y_bs, y_ss, y_hs strides */\
    F(S, const int64_t *, past, )     /* [batch]: the step's first row in the cache */       \
    F(S, const int64_t *, valid, )    /* [batch]: keys attended (after this step) */         \
    F(S, const int64_t *, positions, ) /* [batch, q_len] rotary positions, or NULL */        \
    F(S, const float *, cos, ) F(S, const float *, sin, ) /* [max_position, rotary / 2] */    \
    F(S, const float *, sink, )       /* [q_heads] added to the softmax's sum, or NULL */    \
    F(S, const float *, key_bias, )   /* n_keys a row (kb_bs, kb_hs) added, or NULL */       \
    F(S, int64_t, batch, ) F(S, int64_t, q_len, ) F(S, int64_t, q_heads, )                   \
    F(S, int64_t, kv_heads, ) F(S, int64_t, head, ) F(S, int64_t, capacity, )                \
    F(S, int64_t, n_keys, ) F(S, int64_t, rotary, ) F(S, int64_t, max_position, )            \
    F(S, int64_t, interleaved, ) F(S, int64_t, causal, ) F(S, int64_t, window, )             \
    F(S, float, scale, ) F(S, float, softcap, )                                             \
    F(S, int64_t, q_hs, ) F(S, int64_t, kv_hs, ) /* head strides of q and k, v (head)      */ \
    F(S, int64_t, y_bs, ) F(S, int64_t, y_ss, ) F(S, int64_t, y_hs, ) /* y's (b, s, h)     */ \
    F(S, int64_t, kb_bs, ) F(S, int64_t, kb_hs, ) /* key_bias's (b, query head) strides     */
ONYX_STRUCT(gqa_task, ONYX_GQA_TASK)

/* RMS normalization of rows, the skip (and bias) added first (attention.c) */
#define ONYX_RMS_TASK(F, S)                                                                  \
    F(S, const float *, x, ) F(S, const float *, skip, ) /* [rows, size]; skip or NULL */    \
    F(S, const float *, bias, ) F(S, const float *, gamma, ) /* [size]; bias or NULL */      \
    F(S, float *, y, ) F(S, float *, sum, ) /* [rows, size]; sum (x + skip + bias) or NULL */ \
    F(S, float *, inv, )                    /* [rows]: 1 / rms */                             \
    F(S, int64_t, size, ) F(S, float, epsilon, )
ONYX_STRUCT(rms_task, ONYX_RMS_TASK)

/* Rotary embedding by halves, as PyTorch exports it (attention.c) */
#define ONYX_ROTARY_TASK(F, S)                                                               \
    F(S, const float *, x, ) F(S, float *, y, ) /* [rows, size] */                            \
    F(S, const float *, cos, ) F(S, const float *, sin, ) /* [period, size]: row r's r % period */ \
    F(S, int64_t, size, ) F(S, int64_t, period, )
ONYX_STRUCT(rotary_task, ONYX_ROTARY_TASK)

/* SiLU, gated: y = g * sigmoid(g) [* u] (attention.c) */
#define ONYX_SILU_TASK(F, S)                                                                 \
    F(S, const float *, g, ) F(S, const float *, u, ) /* [n]; u (the gate's other half) or NULL */ \
    F(S, float *, y, )
ONYX_STRUCT(silu_task, ONYX_SILU_TASK)

/* ------------------------------------------------------- float32 GEMM, packed B (gemm_f32.c) */

#define ONYX_SGEMM_TASK(F, S)                                                                \
    F(S, const float *, a, )      /* A [M, K], rows lda apart */                             \
    F(S, const float *, packed, ) /* B as [panels][K][32] (zeros past N) */                  \
    F(S, float *, y, )            /* Y [M, N], rows ldy apart */                             \
    F(S, int64_t, M, ) F(S, int64_t, K, ) F(S, int64_t, N, ) F(S, int64_t, lda, )            \
    F(S, int64_t, ldy, )                                                                     \
    F(S, const float *, bias, ) /* [N] added to every row after its sums, or NULL */         \
    F(S, int64_t, relu, )       /* 1: max(0, .) of the biased sums */
ONYX_STRUCT(sgemm_task, ONYX_SGEMM_TASK)

/* ------------------------------------------------ float32 ConvTranspose (convtranspose.c) */

#define ONYX_CONVT_F32(F, S)                                                                 \
    F(S, const float *, x, ) /* (N, C, H, W), contiguous */                                  \
    F(S, const float *, w, ) /* packed: (group, blocks, rows, C / group), rows = chans * kh   \
                                * kw rounded up to the tile's (zero rows past them) */       \
    F(S, const float *, bias, ) /* [M] or NULL */                                            \
    F(S, float *, y, )          /* (N, M, OH, OW) */                                         \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, )              \
    F(S, int64_t, M, ) F(S, int64_t, OH, ) F(S, int64_t, OW, ) F(S, int64_t, kh, )           \
    F(S, int64_t, kw, ) F(S, int64_t, sh, ) F(S, int64_t, sw, ) F(S, int64_t, dh, )          \
    F(S, int64_t, dw, ) F(S, int64_t, top, ) /* the begin pads: outputs start there */       \
    F(S, int64_t, left, ) F(S, int64_t, group, )                                             \
    F(S, int64_t, chans, ) /* output channels per block (a part: one image's block) */      \
    F(S, int64_t, blocks, ) F(S, int64_t, rows, )
ONYX_STRUCT(convt_f32, ONYX_CONVT_F32)

/* ------------------------------------------- channels-last float32 kernels (nhwc.c) */

enum { NHWC_CONV = 0, NHWC_POINTWISE = 1, NHWC_DEPTHWISE = 2, NHWC_MEAN = 3 };

#define ONYX_NHWC_TASK(F, S)                                                                 \
    F(S, const float *, x, ) /* input: element (n, c, h, w) at n*xs_n + c*xs_c + h*xs_h + w*xs_w */ \
    F(S, const float *, w, ) /* packed weights (nhwc.c), or NULL (mean) */                  \
    F(S, const float *, bias, ) /* [M rounded up to 16] */                                   \
    F(S, float *, y, )          /* (N, OH, OW, M) contiguous; mean: (N, C) */                \
    F(S, int64_t, kind, ) F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, )           \
    F(S, int64_t, W, ) F(S, int64_t, M, ) F(S, int64_t, OH, ) F(S, int64_t, OW, )            \
    F(S, int64_t, kh, ) F(S, int64_t, kw, ) F(S, int64_t, sh, ) F(S, int64_t, sw, )          \
    F(S, int64_t, dh, ) F(S, int64_t, dw, ) F(S, int64_t, top, ) F(S, int64_t, left, )       \
    F(S, int64_t, xs_n, ) F(S, int64_t, xs_c, ) F(S, int64_t, xs_h, ) F(S, int64_t, xs_w, )  \
    F(S, int64_t, act, ) F(S, float, alpha, ) F(S, float, beta, )                             \
    F(S, const float *, z, ) /* residual (N, OH, OW, M) added before the activation, or NULL */ \
    F(S, const float *, s, ) /* pointwise: per-image input channel scales (N, C), or NULL */
ONYX_STRUCT(nhwc_task, ONYX_NHWC_TASK)

/* ------------------------------------------- small CNN layers at serving sizes (small_cnn.c) */

#define ONYX_SMALL_CONV_F32(F, S)                                                            \
    F(S, const float *, x, ) /* (N, C, H, W) contiguous; the max pool: (C planes, H, W) */   \
    F(S, const float *, w, ) /* packed: (panels, kh * kw, C, 8), zeros past M */             \
    F(S, const float *, bias, ) /* [M] or NULL (a call's bias replaces it) */                \
    F(S, const float *, z, ) /* residual (N, M, OH, W) added before the activation, or NULL */ \
    F(S, float *, y, )       /* (N, M, OH, W) */                                             \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, )              \
    F(S, int64_t, M, ) F(S, int64_t, OH, ) F(S, int64_t, kh, ) F(S, int64_t, kw, )           \
    F(S, int64_t, dh, ) F(S, int64_t, dw, ) F(S, int64_t, top, ) F(S, int64_t, left, )       \
    F(S, int64_t, nv, ) /* vectors of 16 pixels per strip, 1 to 3 */                         \
    F(S, int64_t, act, ) F(S, float, alpha, ) F(S, float, beta, )                             \
    F(S, int64_t, up, ) /* 1: a 2x2 stride-2 ConvTranspose, its M rows (m, a, b) of a 1x1    \
                           conv stored to y (N, M / 4, 2 H, 2 W) at (2 h + a, 2 w + b) */   \
    F(S, int64_t, cv, ) /* 1: channel vectors (w packed (panels, kh * kw, C, 16)); 0: pixel   \
                           vectors (SC_MR channels a panel) */                               \
    F(S, int64_t, OW, ) F(S, int64_t, sh, ) F(S, int64_t, sw, ) /* (cv; else W, 1, 1) */
ONYX_STRUCT(small_conv_f32, ONYX_SMALL_CONV_F32)

/* ------------------------------------- float 3x3 conv by Winograd F(2x2, 3x3) (winograd.c) */

#define ONYX_WINOGRAD_F32(F, S)                                                              \
    F(S, const float *, x, )    /* input (N, C, H, W), C-contiguous */                       \
    F(S, const float *, w, )    /* transformed weights (16, panels, C, 8), zeros past M */   \
    F(S, const float *, bias, ) /* [M] or null */                                            \
    F(S, const float *, z, )    /* residual (N, M, OH, OW) added before the activation */    \
    F(S, float *, y, )          /* output (N, M, OH, OW) */                                  \
    F(S, int64_t, N, ) F(S, int64_t, C, ) F(S, int64_t, H, ) F(S, int64_t, W, )              \
    F(S, int64_t, M, ) F(S, int64_t, OH, ) F(S, int64_t, OW, )                               \
    F(S, int64_t, top, ) F(S, int64_t, left, ) /* the begin pads */                          \
    F(S, int64_t, TH, ) F(S, int64_t, TW, )    /* 2x2 tiles per column and row of an image */\
    F(S, int64_t, act, ) F(S, float, alpha, ) F(S, float, beta, )
ONYX_STRUCT(winograd_f32, ONYX_WINOGRAD_F32)

/* ------------------------------------------- chains of channels-last steps (nhwc_chain.c) */

/* One step of a chain: an nhwc.c task (its pointers unused) and where its tensors lie, each
   as (base, byte offset) into the call's bases (base -1: none; x and y are required). */
#define ONYX_CHAIN_STEP(F, S)                                                                \
    F(S, const nhwc_task *, task, ) F(S, const int64_t *, cuts, )                            \
    F(S, int64_t, parts, ) F(S, int64_t, ways, )                                             \
    F(S, int64_t, refs, [8]) /* x, y, s, z: base and byte offset each */
ONYX_STRUCT(chain_step, ONYX_CHAIN_STEP)

/* Every struct above, for abi.c's table. */
#define ONYX_STRUCTS(X)                                                                      \
    X(operand, ONYX_OPERAND) X(epilogue, ONYX_EPILOGUE) X(gemm_task, ONYX_GEMM_TASK)         \
    X(batched_gemm, ONYX_BATCHED_GEMM) X(implicit_conv, ONYX_IMPLICIT_CONV)                  \
    X(gemm_call, ONYX_GEMM_CALL)                                                             \
    X(dynamic_matmul, ONYX_DYNAMIC_MATMUL)                                                   \
    X(dw_geometry, ONYX_DW_GEOMETRY) X(dw_output, ONYX_DW_OUTPUT)                            \
    X(float_conv_task, ONYX_FLOAT_CONV_TASK) X(int_conv_task, ONYX_INT_CONV_TASK)            \
    X(lookup_task, ONYX_LOOKUP_TASK) X(qbinary, ONYX_QBINARY)                                \
    X(qbinary_task, ONYX_QBINARY_TASK) X(quantize_task, ONYX_QUANTIZE_TASK)                  \
    X(dequantize_task, ONYX_DEQUANTIZE_TASK) X(unary_task, ONYX_UNARY_TASK)                  \
    X(erf_task, ONYX_ERF_TASK) X(hard_sigmoid_task, ONYX_HARD_SIGMOID_TASK)                  \
    X(conv_f32, ONYX_CONV_F32) X(gemv_f32, ONYX_GEMV_F32) X(bilinear, ONYX_BILINEAR)         \
    X(repeat2d, ONYX_REPEAT2D) X(recurrence, ONYX_RECURRENCE)                                \
    X(global_pool, ONYX_GLOBAL_POOL) X(layer_norm, ONYX_LAYER_NORM)                          \
    X(norm_rows, ONYX_NORM_ROWS) X(batch_norm, ONYX_BATCH_NORM) X(pool2d, ONYX_POOL2D)       \
    X(forest_task, ONYX_FOREST_TASK) X(forest_sum_task, ONYX_FOREST_SUM_TASK)                                  \
    X(nbits_task, ONYX_NBITS_TASK) X(gqa_task, ONYX_GQA_TASK)        \
    X(rms_task, ONYX_RMS_TASK) X(rotary_task, ONYX_ROTARY_TASK) X(silu_task, ONYX_SILU_TASK)  \
    X(sgemm_task, ONYX_SGEMM_TASK)                                                           \
    X(softmax_rows, ONYX_SOFTMAX_ROWS) X(convt_f32, ONYX_CONVT_F32)                          \
    X(conv1d_f32, ONYX_CONV1D_F32)                                                           \
    X(nhwc_task, ONYX_NHWC_TASK)                                                             \
    X(svm_task, ONYX_SVM_TASK)                                                               \
    X(small_conv_f32, ONYX_SMALL_CONV_F32) X(stem_pool, ONYX_STEM_POOL)                    \
    X(ml_call, ONYX_ML_CALL) X(linear_chain, ONYX_LINEAR_CHAIN)                             \
    X(winograd_f32, ONYX_WINOGRAD_F32)                                                       \
    X(chain_step, ONYX_CHAIN_STEP)

#endif
