/* Chains of channels-last steps (native/nhwc_chain.py, runtime/conv_chain.py): a run of
 * consecutive NHWC convs and pixel means of a small CNN (a MobileNet's blocks) in one call.
 *
 * At batch 1 a small layer's kernel takes a few microseconds, and returning to Python
 * between layers (the generated runner's line, the kernel's checks, the output's allocation,
 * the ctypes call) cost about as much again. Here each step is nhwc.c's own task, set up once
 * per input shape by Python, with its tensors named as (base, byte offset): base 0 is the
 * chain's scratch (the values no one outside the chain reads), the others the call's inputs
 * and outputs. A call checks every step's tensors against the sizes of their bases, its
 * cuts against its work and its x strides against what its kernel reads first (nothing is
 * written when one does not fit), then runs the steps in order, each as onyx_nhwc_call runs
 * it: the same kernels, the same sums, the same bits.
 */
#include <stdint.h>

#include "onyx.h"

/* nhwc.c's entry (one task on up to `threads` threads). */
int onyx_nhwc_call(const nhwc_task *task, const float *x, float *y, const float *s,
                   const float *z, const int64_t *cuts, int64_t parts, int64_t threads);

enum { REF_X, REF_Y, REF_S, REF_Z, REFS };

/* The floats a task's x spans from its first element: the highest element's index + 1
   (strides as the task has them, none negative); 0 when out of range. */
static int64_t x_floats(const nhwc_task *t) {
    const int64_t dims[4] = {t->N, t->C, t->H, t->W};
    const int64_t strides[4] = {t->xs_n, t->xs_c, t->xs_h, t->xs_w};
    int64_t reach = 0, r;
    for (int i = 0; i < 4; i++) {
        if (dims[i] < 1 || strides[i] < 0 || !onyx_mul(dims[i] - 1, strides[i], &r)) return 0;
        reach += r;
        if (reach >= ONYX_MAX_ELEMENTS) return 0;
    }
    return reach + 1;
}

/* Whether x's strides are those the task's kernel assumes (x_floats then spans what it
   reads): the pointwise and mean kernels read x contiguous (pointwise: an input pixel an
   output one), the depthwise ones a pixel's channels contiguous and a row's pixels C apart. */
static int layout_ok(const nhwc_task *t) {
    int64_t row, image;
    switch (t->kind) {
    case NHWC_POINTWISE:
        if (t->OH != t->H || t->OW != t->W) return 0;
        /* fall through */
    case NHWC_MEAN:
        return onyx_mul(t->W, t->C, &row) && onyx_mul(t->H, row, &image) && t->xs_c == 1 &&
               t->xs_w == t->C && t->xs_h == row && t->xs_n == image;
    case NHWC_DEPTHWISE: return t->xs_c == 1 && t->xs_w == t->C;
    default: return 1;
    }
}

/* The floats of a task's output (N, OH, OW, M), or of its scales (N, C); 0 when out of range. */
static int64_t y_floats(const nhwc_task *t) {
    int64_t a, b, c;
    if (!onyx_mul(t->N, t->OH, &a) || !onyx_mul(a, t->OW, &b) || !onyx_mul(b, t->M, &c)) return 0;
    return c;
}

static int64_t s_floats(const nhwc_task *t) {
    int64_t a;
    return onyx_mul(t->N, t->C, &a) ? a : 0;
}

/* The parts of work a task's cuts split (the kernels run [cuts[i], cuts[i + 1]) without
   clamping it): output rows (conv, depthwise), pixels (pointwise) or images (mean); 0 when
   out of range. */
static int64_t task_parts(const nhwc_task *t) {
    int64_t rows, pixels;
    switch (t->kind) {
    case NHWC_CONV:
    case NHWC_DEPTHWISE: return onyx_mul(t->N, t->OH, &rows) ? rows : 0;
    case NHWC_POINTWISE:
        return onyx_mul(t->N, t->OH, &rows) && onyx_mul(rows, t->OW, &pixels) ? pixels : 0;
    case NHWC_MEAN: return t->N;
    default: return 0;
    }
}

/* Whether ref (base, byte offset) holds `floats` floats inside its base; its byte range in
   [*begin, *end) (none: base -1, floats unused). */
static int ref_ok(const int64_t *ref, int64_t floats, const int64_t *sizes, int64_t nbases,
                  int64_t *begin, int64_t *end) {
    int64_t base = ref[0], offset = ref[1], bytes;
    if (base == -1) {
        *begin = *end = 0;
        return 1;
    }
    if (base < 0 || base >= nbases || offset < 0 || offset % 4 || floats < 1 ||
        !onyx_mul(floats, 4, &bytes) || sizes[base] < 0 || offset > sizes[base] ||
        bytes > sizes[base] - offset)
        return 0;
    *begin = offset, *end = offset + bytes;
    return 1;
}

/* Whether step's refs fit their bases, its cuts its work, its x strides its kernel, and its
   output shares no byte with its inputs. */
static int step_ok(const chain_step *st, const int64_t *sizes, int64_t nbases) {
    const nhwc_task *t = st->task;
    if (!t || st->refs[2 * REF_X] == -1 || st->refs[2 * REF_Y] == -1) return 0;
    if (!onyx_cuts_ok(st->cuts, st->parts) || st->ways < 1) return 0;
    if (st->parts > 0 && st->cuts[st->parts] > task_parts(t)) return 0; /* (past y's end) */
    if (!layout_ok(t)) return 0;
    const int64_t floats[REFS] = {x_floats(t), y_floats(t), s_floats(t), y_floats(t)};
    int64_t begin[REFS], end[REFS];
    for (int r = 0; r < REFS; r++)
        if (!ref_ok(st->refs + 2 * r, floats[r], sizes, nbases, begin + r, end + r)) return 0;
    for (int r = 0; r < REFS; r++) {
        if (r == REF_Y || st->refs[2 * r] != st->refs[2 * REF_Y]) continue;
        if (begin[r] < end[REF_Y] && begin[REF_Y] < end[r]) return 0; /* (in place: no) */
    }
    return 1;
}

static const float *address(char *const *bases, const int64_t *ref) {
    return ref[0] == -1 ? (const float *)0 : (const float *)(bases[ref[0]] + ref[1]);
}

/* Runs steps[0..n) in order; bases[b] holds sizes[b] bytes (every base non-null). */
EXPORT int onyx_nhwc_chain(const chain_step *steps, int64_t n, char *const *bases,
                           const int64_t *sizes, int64_t nbases) {
    if (!steps || n < 1 || !bases || !sizes || nbases < 1) return ONYX_INVALID;
    for (int64_t b = 0; b < nbases; b++)
        if (!bases[b]) return ONYX_INVALID;
    for (int64_t i = 0; i < n; i++)
        if (!step_ok(steps + i, sizes, nbases)) return ONYX_INVALID;
    for (int64_t i = 0; i < n; i++) {
        const chain_step *st = steps + i;
        const int64_t *refs = st->refs;
        int status = onyx_nhwc_call(st->task, address(bases, refs + 2 * REF_X),
                                    (float *)address(bases, refs + 2 * REF_Y),
                                    address(bases, refs + 2 * REF_S),
                                    address(bases, refs + 2 * REF_Z), st->cuts, st->parts,
                                    st->ways);
        if (status) return status;
    }
    return 0;
}
