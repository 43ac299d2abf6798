/* What every source file of the native library shares: the export marker and the thread
   pool's entry (pool.c). */
#ifndef ONYX_H
#define ONYX_H

#include <stdint.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

/* pool.c: fn(args, cuts[i], cuts[i + 1]) for each part i, on up to `threads` threads. */
typedef int (*range_fn)(const void *args, int64_t begin, int64_t end);
int onyx_parallel(range_fn fn, const void *args, const int64_t *cuts, int64_t parts,
                  int64_t threads);

#endif
