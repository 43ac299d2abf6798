/* What Python asks the library about itself: its structs' layout (abi.h), checked against
   the ctypes copies at load, and the one CPU dispatch of every kernel (onyx_isa). */
#include <stddef.h>
#include <stdint.h>

#include "onyx.h"

/* ------------------------------------------------------------------------ struct layout */

typedef struct {
    const char *structure, *field; /* field "": the struct's own row (offset 0, its size) */
    int64_t offset, size;
} abi_row;

#define ROW(S, type, name, dims) {#S, #name, (int64_t)offsetof(S, name), (int64_t)sizeof(((S *)0)->name)},
#define STRUCT_ROWS(S, FIELDS) {#S, "", 0, (int64_t)sizeof(S)}, FIELDS(ROW, S)

static const abi_row table[] = {ONYX_STRUCTS(STRUCT_ROWS){0, 0, 0, 0}};

/* The table's rows, ended by a row whose structure is null. */
EXPORT const abi_row *onyx_abi(void) { return table; }

/* ONYX_ABI_VERSION of the sources this library was built from. */
EXPORT int onyx_abi_version(void) { return ONYX_ABI_VERSION; }

/* ------------------------------------------------------------------------ CPU dispatch */

static int isa = -1; /* ONYX_ISA_* bits the hand-written kernels may use */

static int detected(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    int f = __builtin_cpu_supports("avx512f");
    int bw = f && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return (f ? ONYX_ISA_AVX512 : 0) | (bw ? ONYX_ISA_AVX512BW : 0) |
           (bw && __builtin_cpu_supports("avx512vnni") ? ONYX_ISA_VNNI : 0) |
           (bw && __builtin_cpu_supports("avx512vbmi") ? ONYX_ISA_VBMI : 0);
#else
    return 0; /* (no intrinsic kernels are built: the portable ones run) */
#endif
}

/* The instruction sets the kernels use: the CPU's (and the build's), at most `allowed`. */
EXPORT int onyx_isa(void) {
    if (isa < 0) isa = detected();
    return isa;
}

/* Caps the kernels' instruction sets at `allowed` (ONYX_NATIVE_ISA; Python calls it once,
   before any kernel runs) and returns what is left. */
EXPORT int onyx_allow_isa(int allowed) {
    isa = detected() & allowed;
    return isa;
}

#if defined(_WIN32)
/* setuptools links every extension with this export; Python never imports this library. */
EXPORT void *PyInit__kernels(void) { return 0; }
#endif
