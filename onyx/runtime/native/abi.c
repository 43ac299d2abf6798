/* What Python asks the library about itself: its structs' layout (abi.h), checked against
   the ctypes copies at load, and the one CPU dispatch of every kernel (onyx_isa); and about
   the process: the shared objects it has loaded (onyx_loaded_objects). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* (dl_iterate_phdr) */
#endif
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <link.h>
#endif

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

/* The rows of struct `name` in the table: its own row (field "") then its fields' rows, ended
   by the next struct's own row or the table's end; null where the table has no such struct.
   (A family checks its few structs at its import: reading the whole table through ctypes, row
   by row, cost a cold start a third of a millisecond.) */
EXPORT const abi_row *onyx_abi_struct(const char *name) {
    if (name == 0) return 0;
    for (const abi_row *r = table; r->structure; r++)
        if (r->field[0] == 0 && strcmp(r->structure, name) == 0) return r;
    return 0;
}

/* Appends text (then, where number >= 0, its decimal digits) at buf[n], within cap bytes;
   returns the new length, -1 once it does not fit. (Not snprintf: a few thousand
   instructions a field, a family's import checks tens of fields.) */
static int64_t put(char *buf, int64_t n, int64_t cap, const char *text, int64_t number) {
    while (n >= 0 && *text) n = n < cap ? (buf[n] = *text++, n + 1) : -1;
    if (n < 0 || number < 0) return n;
    char digits[24];
    int k = 0;
    do digits[k++] = (char)('0' + number % 10);
    while ((number /= 10) > 0);
    if (n + k > cap) return -1;
    while (k) buf[n++] = digits[--k];
    return n;
}

/* Writes struct row r's description to buf (at most cap bytes) as Python's _core._layout
   writes a ctypes copy's: "name size" then " field:offset:size" for each field in order;
   returns its length, or -1 where it does not fit. */
static int64_t describe(const abi_row *r, char *buf, int64_t cap) {
    int64_t n = put(buf, put(buf, 0, cap, r->structure, -1), cap, " ", r->size);
    for (r++; r->structure && r->field[0]; r++) {
        n = put(buf, put(buf, n, cap, " ", -1), cap, r->field, -1);
        n = put(buf, put(buf, n, cap, ":", r->offset), cap, ":", r->size);
    }
    return n;
}

/* 1 where every line of desc (lines "struct size field:offset:size ...", each ended by a
   newline: the ctypes copies of a family's structs, _core._layout) is exactly the description
   of that struct in the table, else 0 (an unknown struct, another size, field, order, offset,
   a line too long to compare). One call checks a family at its import: reading its structs'
   rows through ctypes, row by row, was most of the check's cost. Python then reads the rows
   only to say what disagrees. */
EXPORT int onyx_abi_agrees(const char *desc) {
    char want[8192], name[128];
    if (desc == 0) return 0;
    while (*desc) {
        const char *end = strchr(desc, '\n');
        const char *space = end ? memchr(desc, ' ', (size_t)(end - desc)) : 0;
        if (space == 0 || space - desc >= (int64_t)sizeof name) return 0;
        memcpy(name, desc, (size_t)(space - desc));
        name[space - desc] = 0;
        const abi_row *r = onyx_abi_struct(name);
        int64_t n = r ? describe(r, want, (int64_t)sizeof want) : -1;
        if (n < 0 || n != end - desc || memcmp(want, desc, (size_t)n) != 0) return 0;
        desc = end + 1;
    }
    return 1;
}

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

/* ------------------------------------------------------------------------ loaded objects */

#if defined(__linux__)
typedef struct {
    char *buf;
    int64_t cap, len;
    uint64_t adds;
    int first;
} object_walk;

static int note_object(struct dl_phdr_info *info, size_t size, void *data) {
    object_walk *w = (object_walk *)data;
    if (w->first) { /* (the count is the same in every object's info: the first says it) */
        w->first = 0;
        if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
            w->adds = info->dlpi_adds;
    }
    const char *name = info->dlpi_name;
    if (name == 0 || name[0] != '/') return 0; /* (the program itself, the vDSO) */
    int64_t n = (int64_t)strlen(name);
    if (w->len + n + 1 <= w->cap) {
        memcpy(w->buf + w->len, name, (size_t)n);
        w->buf[w->len + n] = '\n';
    }
    w->len += n + 1;
    return 0;
}
#endif

/* The paths of the shared objects the process has loaded (dl_iterate_phdr's absolute
   ones), each followed by a newline, written to buf while they fit in its cap bytes; returns
   the bytes they take (more than cap: ask again with that much room), -1 where the platform
   has no dl_iterate_phdr. *adds: how many objects the process has loaded so far, ever
   (glibc's dlpi_adds; 0 where unknown). Python's BLAS survey (blas_threads.py) calls it:
   a ctypes callback per object cost a fresh process's first run a quarter millisecond. */
EXPORT int64_t onyx_loaded_objects(char *buf, int64_t cap, uint64_t *adds) {
    if (adds) *adds = 0;
#if defined(__linux__)
    object_walk w = {buf, buf == 0 || cap < 0 ? 0 : cap, 0, 0, 1}; /* (no buffer: sizes only) */
    dl_iterate_phdr(note_object, &w);
    if (adds) *adds = w.adds;
    return w.len;
#else
    (void)buf;
    (void)cap;
    return -1;
#endif
}

#if defined(_WIN32)
/* setuptools links every extension with this export; Python never imports this library. */
EXPORT void *PyInit__kernels(void) { return 0; }
#endif
