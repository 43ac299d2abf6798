/* What every source file of the native library shares: the export marker, the CLONES
   marker and the thread pool's entry (pool.c). */
#ifndef ONYX_H
#define ONYX_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "checks.h"

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

/* CLONES functions are compiled for AVX-512, AVX2 and baseline x86-64 (GCC on Linux), one
   build per vector width, picked at load time. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* NO_FMA functions round every product and sum as written: a kernel that must give the bits
   of numpy's separate passes may not fuse a multiply and an add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define NO_FMA
#elif defined(__GNUC__)
#define NO_FMA __attribute__((optimize("fp-contract=off")))
#else
#define NO_FMA
#endif

/* The instruction sets a kernel may use (abi.c's onyx_isa: the CPU's, capped by
   ONYX_NATIVE_ISA): every hand-written vector kernel asks this, and nothing else. CLONES
   functions are portable C that the compiler builds per vector width. */
#define ONYX_ISA_AVX512 1   /* AVX-512 F */
#define ONYX_ISA_AVX512BW 2 /* + BW and VL (byte and 256-bit lanes) */
#define ONYX_ISA_VNNI 4     /* + VNNI (the int8 GEMM) */
#define ONYX_ISA_VBMI 8     /* + VBMI (byte lookups) */
int onyx_isa(void);

/* gemm_i8.c: dst[j][i] = src[i][j] for bytes (the depthwise int8 conv's stores use it);
   ONYX_INVALID (nothing touched) for sizes, strides or pointers out of range (checks.h). */
int onyx_transpose_u8(const uint8_t *src, int64_t rows, int64_t cols, int64_t ss, uint8_t *dst,
                      int64_t ds);
/* The same for 4-byte elements; ONYX_INVALID (nothing touched) for sizes, strides or
   pointers out of range (checks.h). */
int onyx_transpose_u32(const uint32_t *src, int64_t rows, int64_t cols, int64_t ss, uint32_t *dst,
                       int64_t ds);

/* window.c: a 2-D pool's planes begin <= plane < end (its task: a pool2d); depthwise.c's
   stem_pool pools each band of a conv's rows with it. */
int onyx_pool2d_f32_range(const void *p, int64_t begin, int64_t end);

/* Scratch memory a thread keeps between kernel calls (pool.c): one block per slot, grown,
   never shrunk, freed when the thread exits. A kernel called on a Python thread runs on that
   thread, so a server that starts a thread per request must not leak each thread's block.
   onyx_scratch returns `bytes` bytes 64-byte aligned (zeroed when the block grows and `zeroed`
   is set), or null when out of memory or for a bad slot. */
enum { SCRATCH_CONV1D_PART, SCRATCH_CONV1D_FULL, SCRATCH_CONV_PAD, SCRATCH_CONV_PARTS,
       SCRATCH_WINOGRAD, SCRATCH_SMALL_CONV, SCRATCH_SLOTS };
void *onyx_scratch(int slot, size_t bytes, int zeroed);

/* pool.c: fn(args, cuts[i], cuts[i + 1]) for each part i, on up to `threads` threads. */
typedef int (*range_fn)(const void *args, int64_t begin, int64_t end);
int onyx_parallel(range_fn fn, const void *args, const int64_t *cuts, int64_t parts,
                  int64_t threads);

#endif
