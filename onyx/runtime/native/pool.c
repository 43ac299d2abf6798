/* onyx's thread pool for the native kernels, part of the same library.
 *
 * Handing work to a Python thread costs a lock, a wake-up and the GIL, as long as a
 * mid-sized GEMM runs. Here the caller's ctypes call has already let go of the GIL, and the
 * workers are plain threads that spin a little after each job before they sleep, so the next
 * kernel (one node later, tens of microseconds) finds them awake: a hand-off costs about a
 * microsecond.
 *
 * onyx_parallel(fn, args, cuts, parts, threads) runs fn(args, cuts[i], cuts[i + 1]) for the
 * parts i, on the calling thread and threads - 1 workers, and returns the OR of the results
 * (a kernel's out-of-memory flag). One job at a time: a second caller (another session on
 * another Python thread) that finds the pool busy runs its parts itself. Without POSIX
 * threads (Windows) every part runs on the calling thread.
 */
#if !defined(_WIN32)
#define _GNU_SOURCE /* (sched_yield, clock_gettime under -std=c99) */
#endif
#include <stdint.h>
#include <stdlib.h>

#include "onyx.h"

/* One thread's scratch blocks (onyx_scratch). */
typedef struct {
    char *block[SCRATCH_SLOTS];
    size_t size[SCRATCH_SLOTS];
} scratch_set;

static int64_t scratch_sets; /* (live sets, for the tests: onyx_scratch_sets) */

static void scratch_free(void *p) {
    scratch_set *set = p;
    __atomic_fetch_sub(&scratch_sets, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < SCRATCH_SLOTS; i++) free(set->block[i]);
    free(set);
}

static scratch_set *thread_scratch(void); /* (this thread's set, made on first use) */

/* Threads holding a scratch set now (a thread's is freed when it exits). */
EXPORT int64_t onyx_scratch_sets(void) { return __atomic_load_n(&scratch_sets, __ATOMIC_RELAXED); }

void *onyx_scratch(int slot, size_t bytes, int zeroed) {
    if (slot < 0 || slot >= SCRATCH_SLOTS || bytes > SIZE_MAX - 64) return 0;
    scratch_set *set = thread_scratch();
    if (!set) return 0;
    if (bytes > set->size[slot] || !set->block[slot]) {
        free(set->block[slot]);
        set->block[slot] = zeroed ? calloc(bytes + 64, 1) : malloc(bytes + 64);
        set->size[slot] = set->block[slot] ? bytes : 0;
        if (!set->block[slot]) return 0;
    }
    char *b = set->block[slot];
    return b + (64 - (uintptr_t)b % 64);
}

static int run_serial(range_fn fn, const void *args, const int64_t *cuts, int64_t parts) {
    if (!onyx_cuts_ok(cuts, parts)) return ONYX_INVALID;
    int status = 0;
    for (int64_t i = 0; i < parts; i++) status |= fn(args, cuts[i], cuts[i + 1]);
    return status;
}

#if defined(_WIN32)

static scratch_set *thread_scratch(void) {
    static __declspec(thread) scratch_set *mine; /* (kept for the thread's life) */
    if (!mine && (mine = calloc(1, sizeof *mine))) __atomic_fetch_add(&scratch_sets, 1, __ATOMIC_RELAXED);
    return mine;
}

EXPORT int onyx_parallel(range_fn fn, const void *args, const int64_t *cuts, int64_t parts,
                         int64_t threads) {
    (void)threads;
    return run_serial(fn, args, cuts, parts);
}

EXPORT int onyx_pool_threads(void) { return 0; }

#else

#include <pthread.h>
#include <sched.h>
#include <time.h>

/* The key whose destructor frees a thread's scratch set when the thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;
static __thread scratch_set *mine;

static void scratch_exit(void *set) {
    mine = 0; /* (a later call on this exiting thread makes a new set) */
    scratch_free(set);
}

static void scratch_key_make(void) {
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_exit) == 0;
}

static scratch_set *thread_scratch(void) {
    if (mine) return mine;
    pthread_once(&scratch_once, scratch_key_make);
    scratch_set *set = calloc(1, sizeof *set);
    if (!set || !scratch_key_ok || pthread_setspecific(scratch_key, set) != 0) {
        free(set);
        return 0;
    }
    __atomic_fetch_add(&scratch_sets, 1, __ATOMIC_RELAXED);
    return mine = set;
}

#define MAX_WORKERS 63
/* How long an idle worker stays awake: spinning, then yielding its core to other threads
   (numpy's BLAS), then it sleeps until the next job. */
#ifndef SPIN_NS
#define SPIN_NS 20000
#define YIELD_NS 300000
#endif

static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER; /* held by the job's caller */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int started; /* workers running (guarded by busy) */

/* The current job, written by the caller between two stores of `posted` (a sequence lock:
   -1 while it writes, then the job's number), so that a worker that comes late, as the next
   job is being written, reads either job whole or takes nothing. */
static struct {
    range_fn fn;
    const void *args;
    const int64_t *cuts;
    int64_t parts, runs;
} job;
static int64_t posted = -1; /* (atomic) */
/* The parts are dealt out in runs, one a thread (the caller's first, then worker 0's, ...):
   a thread takes its own run's parts first, then whatever is left of the others' (a worker
   that woke late, or found its core taken, leaves its parts to the others). So as long as
   every thread comes, each takes the same rows of every layer of a model, whose data then
   stays in its core's cache (parts that changed threads from job to job read half of each
   layer's input, and wrote half its output, across cores).
   next[r] = (job number << 32) | run r's next part: a thread takes part i of job g by moving
   it from (g, i) to (g, i + 1), so one that comes late, after job g, takes nothing from job
   g + 1 it was not meant to (and job g's fields stay until all its parts are done). done
   counts finished parts. Workers are woken by their ticket. */
static struct {
    int64_t at; /* (atomic) */
    char pad[64 - sizeof(int64_t)];
} next[MAX_WORKERS + 1] __attribute__((aligned(64)));
static int64_t done, status, ticket[MAX_WORKERS]; /* atomics */
static int64_t jobs; /* (guarded by busy) */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Take the parts of run r (of n) of job g, `parts` parts, until none is left. */
static void take_run(int64_t g, int64_t r, int64_t n, int64_t parts) {
    const int64_t end = parts * (r + 1) / n;
    int64_t c = __atomic_load_n(&next[r].at, __ATOMIC_ACQUIRE);
    for (;;) {
        int64_t i = c & 0xffffffff;
        if ((c >> 32) != g || i >= end) return;
        if (!__atomic_compare_exchange_n(&next[r].at, &c, c + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue; /* (c now holds the current value) */
        int s = job.fn(job.args, job.cuts[i], job.cuts[i + 1]);
        if (s) __atomic_fetch_or(&status, (int64_t)s, __ATOMIC_RELAXED);
        __atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
        c = __atomic_load_n(&next[r].at, __ATOMIC_ACQUIRE);
    }
}

/* Take parts of the current job until none is left: run `own` first, then the others'. */
static void take_parts(int64_t own) {
    int64_t g = __atomic_load_n(&posted, __ATOMIC_ACQUIRE);
    if (g < 0) return; /* (the next job is being written: its ticket comes after) */
    /* (atomic reads, as the caller's writes: the job may be being written as they run) */
    int64_t parts = __atomic_load_n(&job.parts, __ATOMIC_RELAXED);
    int64_t n = __atomic_load_n(&job.runs, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&posted, __ATOMIC_RELAXED) != g || n < 1) return;
    if (own < n) take_run(g, own, n, parts);
    for (int64_t k = 1; k < n; k++) take_run(g, (own + k) % n, n, parts);
}

static int64_t wait_for_job(const int64_t *mine, int64_t seen) {
    int64_t start = now_ns(), g;
    for (int64_t spins = 0;; spins++) {
        if ((g = __atomic_load_n(mine, __ATOMIC_ACQUIRE)) != seen) return g;
        if ((spins & 255) == 0) {
            int64_t idle = now_ns() - start;
            if (idle > YIELD_NS) break;
            if (idle > SPIN_NS) sched_yield();
        }
        cpu_relax();
    }
    pthread_mutex_lock(&wake_lock);
    while ((g = __atomic_load_n(mine, __ATOMIC_ACQUIRE)) == seen)
        pthread_cond_wait(&wake, &wake_lock);
    pthread_mutex_unlock(&wake_lock);
    return g;
}

static void *worker(void *arg) {
    int64_t id = (int64_t)(intptr_t)arg, seen = 0;
    for (;;) {
        seen = wait_for_job(&ticket[id], seen);
        take_parts(id + 1);
    }
    return NULL;
}

/* A child after fork() has none of the parent's workers. */
static void forget_workers(void) {
    started = 0;
    for (int i = 0; i < MAX_WORKERS; i++) ticket[i] = 0;
    pthread_mutex_init(&busy, NULL);
    pthread_mutex_init(&wake_lock, NULL);
    pthread_cond_init(&wake, NULL);
}

static void start_workers(int64_t n) {
    static int registered;
    if (!registered) {
        pthread_atfork(NULL, NULL, forget_workers);
        registered = 1;
    }
    while (started < n) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)started);
        pthread_attr_destroy(&attr);
        if (failed) break;
        started++;
    }
}

EXPORT int onyx_parallel(range_fn fn, const void *args, const int64_t *cuts, int64_t parts,
                         int64_t threads) {
    if (!onyx_cuts_ok(cuts, parts)) return ONYX_INVALID;
    if (threads <= 1 || parts <= 1 || pthread_mutex_trylock(&busy) != 0)
        return run_serial(fn, args, cuts, parts);
    int64_t helpers = threads - 1 < MAX_WORKERS ? threads - 1 : MAX_WORKERS;
    if (helpers > parts - 1) helpers = parts - 1;
    start_workers(helpers);
    if (helpers > started) helpers = started;
    int64_t g = ++jobs & 0x7fffffff, n = helpers + 1;
    __atomic_store_n(&posted, -1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    job.fn = fn, job.args = args, job.cuts = cuts;
    __atomic_store_n(&job.parts, parts, __ATOMIC_RELAXED);
    __atomic_store_n(&job.runs, n, __ATOMIC_RELAXED);
    __atomic_store_n(&done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&status, 0, __ATOMIC_RELAXED);
    for (int64_t r = 0; r < n; r++)
        __atomic_store_n(&next[r].at, g << 32 | (parts * r / n), __ATOMIC_RELAXED);
    __atomic_store_n(&posted, g, __ATOMIC_RELEASE);
    pthread_mutex_lock(&wake_lock);
    for (int64_t i = 0; i < helpers; i++) __atomic_fetch_add(&ticket[i], 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_lock);
    take_parts(0);
    /* the parts the helpers took; a helper that has not woken yet finds nothing left */
    for (int64_t spins = 1; __atomic_load_n(&done, __ATOMIC_ACQUIRE) < parts; spins++)
        if (spins % 1024 == 0) sched_yield(); else cpu_relax();
    int result = (int)__atomic_load_n(&status, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&busy);
    return result;
}

/* Workers started so far (for the tests). */
EXPORT int onyx_pool_threads(void) { return started; }

#endif
