/* The CPU kernels' thread team (kernels/cpu/optim_threads.c, issue 18):
 * CPUs per rank on this node unless OMP_NUM_THREADS says otherwise, and
 * results that do not depend on the team (the step is elementwise, the
 * sum of squares has a fixed block tree). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "optim.h"
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif

static int cpus(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

int main(void) {
    unsetenv("OMP_NUM_THREADS");
    const size_t n = (size_t)3 << 18; /* above the kernels' threading thresholds */
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; ++i) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;

    zero__optim_set_node_ranks(1);
    const int one_rank = zero__optim_threads();
    const double ref = zero__sumsq_f32(x, n);
#if defined(ZERO_HAVE_OPENMP)
    CHECK_EQ_INT(one_rank, omp_get_max_threads());
#else
    CHECK_EQ_INT(one_rank, 1);
#endif
    /* as many ranks as CPUs, and more (oversubscribed): one thread each */
    zero__optim_set_node_ranks(cpus());
    CHECK_EQ_INT(zero__optim_threads(), 1);
    zero__optim_set_node_ranks(4 * cpus());
    CHECK_EQ_INT(zero__optim_threads(), 1);
    CHECK(zero__sumsq_f32(x, n) == ref, "sum of squares changed with the team size");
    /* half as many ranks as CPUs: two threads each (when OpenMP may give them) */
    if (cpus() >= 2) {
        zero__optim_set_node_ranks(cpus() / 2);
        int want = 2 < one_rank ? 2 : one_rank;
        CHECK_EQ_INT(zero__optim_threads(), want < 1 ? 1 : want);
    }
    /* the user's OMP_NUM_THREADS is honoured whatever the ranks */
    setenv("OMP_NUM_THREADS", "3", 1);
    zero__optim_set_node_ranks(4 * cpus());
#if defined(ZERO_HAVE_OPENMP)
    omp_set_num_threads(3); /* what the runtime would have read at start */
    CHECK_EQ_INT(zero__optim_threads(), 3);
#endif
    CHECK(zero__sumsq_f32(x, n) == ref, "sum of squares changed with OMP_NUM_THREADS");
    free(x);
    return check_finish();
}
