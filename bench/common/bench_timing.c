/* See bench_timing.h. */
#include "bench_timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double bench_clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_now_s(void) { return bench_clock_s(CLOCK_MONOTONIC); }

void bench_busy_us(double us) {
    double end = bench_now_s() + us * 1e-6;
    volatile double x = 1.0;
    while (bench_now_s() < end) x = x * 1.0000001 + 1e-9;
}

double bench_loadavg1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort(double *x, size_t n) { qsort(x, n, sizeof *x, cmp_double); }
