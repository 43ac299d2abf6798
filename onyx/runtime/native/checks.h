/* The entry points' argument checks: overflow-safe size arithmetic, so that a kernel refuses
   absurd sizes (a fuzzed model's dilations near 2**32, kernels near 2**63) before it
   allocates or reads anything, and its loops stay bounded by sizes that fit in memory.
   Python checks the same limits first (kernels/conv.py's check_windows); these are the
   second line, for any caller. */
#ifndef ONYX_CHECKS_H
#define ONYX_CHECKS_H

#include <stdint.h>

/* Statuses a kernel's part returns (onyx_parallel ORs them). */
#define ONYX_NOMEM 1   /* a buffer could not be allocated */
#define ONYX_INVALID 2 /* the arguments are out of range: nothing was touched */

/* The longest padded axis a window kernel takes (values along it fit an int32 gather's
   index with room for a vector's lanes), and the most elements of any one buffer. */
#define ONYX_MAX_EXTENT ((int64_t)1 << 30)
#define ONYX_MAX_ELEMENTS ((int64_t)1 << 40)

/* *r = a * b for 0 <= a, b, when it is at most ONYX_MAX_ELEMENTS; else 0. */
static inline int onyx_mul(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0 || (a && b > ONYX_MAX_ELEMENTS / a)) return 0;
    *r = a * b;
    return 1;
}

/* Whether every value lies in [lo, hi]. */
static inline int onyx_in(const int64_t *v, int n, int64_t lo, int64_t hi) {
    for (int i = 0; i < n; i++)
        if (v[i] < lo || v[i] > hi) return 0;
    return 1;
}

/* One window axis: out outputs at stride s of k taps dilated by d, begin padding before an
   input of `size`: *extent = (out - 1) * s + (k - 1) * d + 1, the padded axis the windows
   read. 0 when a value is out of range (negative sizes, zero strides, an extent beyond
   ONYX_MAX_EXTENT). */
static inline int onyx_window_axis(int64_t size, int64_t out, int64_t k, int64_t s, int64_t d,
                                   int64_t begin, int64_t *extent) {
    const int64_t M = ONYX_MAX_EXTENT;
    if (size < 0 || size > M || out < 1 || out > M || k < 1 || k > M || s < 1 || s > M ||
        d < 1 || d > M || begin < 0 || begin > M)
        return 0;
    if ((out - 1) > (M - 1) / s) return 0;
    int64_t reach = (out - 1) * s;
    if (k - 1 > 0 && (k - 1) > (M - 1 - reach) / d) return 0;
    *extent = reach + (k - 1) * d + 1;
    return 1;
}

/* Whether cuts[0..parts] are parts runs of work: from 0 on, none backwards. */
static inline int onyx_cuts_ok(const int64_t *cuts, int64_t parts) {
    if (parts < 0 || (parts > 0 && !cuts)) return 0;
    for (int64_t i = 0; i < parts; i++)
        if (cuts[i] < 0 || cuts[i + 1] < cuts[i]) return 0;
    return 1;
}

#endif
