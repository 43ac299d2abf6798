/* A thread's wait for the turn short runs take (runtime/turns.py), without the GIL.

   A waiter sleeps on a word of its own; the holder rings it (RUNG) when it hands the turn to
   it, or pokes it (POKED) when it has become the first waiter. The first waiter also watches
   the holder through a shared state that the holder writes as its runs start and end: when
   the holder has had no run in progress for `idle` seconds (it stopped calling: a server's
   worker back at its queue) the waiter returns to Python to take the turn. Every other wake
   of a waiter (to look whether the holder is idle, or to become the first) happens here, with
   no Python and no GIL: in Python each one took the GIL from the holder and ran the waiter's
   code with cold caches. Linux only (a futex); elsewhere the entry points say so and
   turns.py keeps its own locks. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "onyx.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

enum { QUIET = 0, RUNG = 1, POKED = 2 };                       /* a waiter's word */
enum { TIMED_OUT = 0, HANDED = 1, HOLDER_IDLE = 2, INTERRUPTED = 3, BAD = -1 }; /* the wait's end */
enum { DEPTH = 0, RELEASED = 1, FIRST = 2 }; /* the shared state: runs in progress, when the last
                                                ended (CLOCK_MONOTONIC seconds), first waiter's token */

EXPORT int onyx_turn_ok(void) {
#if defined(__linux__)
    return 1;
#else
    return 0;
#endif
}

#if defined(__linux__)
static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sleeps while *word is QUIET, `seconds` at most; whether a signal ended the sleep. */
static int sleep_on(int32_t *word, double seconds) {
    struct timespec t;
    if (seconds > 3600.0) seconds = 3600.0;
    t.tv_sec = (time_t)seconds;
    t.tv_nsec = (long)((seconds - (double)t.tv_sec) * 1e9);
    long r = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, QUIET, &t, NULL, 0);
    return r == -1 && errno == EINTR;
}
#endif

/* Waits until the waiter `token` is handed the turn (HANDED), or is the first waiter and the
   holder has had no run in progress for `idle` seconds (HOLDER_IDLE), or `until` (a
   CLOCK_MONOTONIC time) has come (TIMED_OUT), or a signal came (INTERRUPTED: Python runs its
   handler and waits again). The first waiter looks at the holder every `poll` seconds while
   a run is in progress. */
EXPORT void onyx_turn_ring(int32_t *word, int32_t how);

EXPORT int onyx_turn_wait(int32_t *word, const double *state, double token, double idle,
                          double poll, double until) {
#if defined(__linux__)
    if (!word || !state || !(idle >= 0.0) || !(poll > 0.0) || until != until) return BAD;
    const volatile double *shared = state;
    for (;;) {
        int32_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (w == RUNG) return HANDED;
        if (w == POKED) { /* (to look again: it may be the first now) */
            __atomic_compare_exchange_n(word, &w, QUIET, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            continue;
        }
        double now = seconds_now(), wait = until - now;
        if (wait <= 0.0) return TIMED_OUT;
        if (shared[FIRST] == token) {
            if (shared[DEPTH] == 0.0) {
                double at = shared[RELEASED] + idle;
                if (now >= at) return HOLDER_IDLE;
                if (at - now < wait) wait = at - now;
            } else if (poll < wait) {
                wait = poll;
            }
        }
        if (sleep_on(word, wait)) return INTERRUPTED;
    }
#else
    (void)word, (void)state, (void)token, (void)idle, (void)poll, (void)until;
    return BAD;
#endif
}

/* Hands the turn to the waiter whose word is `handed` (rings it RUNG, as onyx_turn_ring), then
   waits as onyx_turn_wait. A holder whose slice is over hands the turn over as its next run
   starts and queues: rung from Python, the new holder woke while the old one still held the
   GIL (it went on to queue itself), fought for it and slept again on the GIL, then was woken a
   second time when the old holder's wait let the GIL go. Called without the GIL, the ring
   wakes it once, the GIL already free. `handed` is rung whatever the other arguments. */
EXPORT int onyx_turn_pass(int32_t *handed, int32_t *word, const double *state, double token,
                          double idle, double poll, double until) {
    onyx_turn_ring(handed, RUNG);
    return onyx_turn_wait(word, state, token, idle, poll, until);
}

/* Rings a waiter's word (RUNG: the turn is its own) or pokes it (POKED: look again; a word
   already rung stays rung), and wakes it. */
EXPORT void onyx_turn_ring(int32_t *word, int32_t how) {
#if defined(__linux__)
    if (!word) return;
    if (how == RUNG) {
        __atomic_store_n(word, RUNG, __ATOMIC_RELEASE);
    } else {
        int32_t quiet = QUIET;
        if (!__atomic_compare_exchange_n(word, &quiet, POKED, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            return;
    }
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
    (void)word, (void)how;
#endif
}
