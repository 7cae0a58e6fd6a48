/* Timing helpers shared by the benchmarks (under bench/): a monotonic clock, a
 * busy loop that stands for compute, the machine's load (figures mean
 * little on a busy shared machine) and sorting for medians.  No MPI, no
 * libzero (test hosts that time things link it too: tests/faults).  Library:
 * zero_bench_timing.  Every function is thread-safe. */
#ifndef ZERO_BENCH_TIMING_H
#define ZERO_BENCH_TIMING_H
#include <stddef.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
double bench_now_s(void);
/* Seconds on clock `id` (CLOCK_REALTIME for timestamps other processes
 * compare, CLOCK_THREAD_CPUTIME_ID / CLOCK_PROCESS_CPUTIME_ID for CPU time). */
double bench_clock_s(clockid_t id);
/* Spin (no sleep) for `us` microseconds: simulated compute. */
void bench_busy_us(double us);
/* The 1-minute load average from /proc/loadavg, or -1. */
double bench_loadavg1(void);
/* Sort x[0..n) ascending (then x[n / 2] is the median of odd n). */
void bench_sort(double *x, size_t n);
#endif
