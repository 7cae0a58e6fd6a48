/* How many threads the CPU kernels (optimizer step, sum of squares) use.
 *
 * Why not simply OpenMP's default (one thread per CPU): ZeRO runs one
 * process per rank, and several ranks often share a node's CPUs.  Four
 * ranks on two cores, each with a two-thread team, left every rank's idle
 * team member spinning in libgomp after each region: the peers bench
 * (issue 18, N = 4 on 2 cores) spent 35 % of its CPU time in libgomp's
 * wait loop, and each rank used 68 ms of CPU per step instead of 34.  So
 * unless the user set OMP_NUM_THREADS (always honoured), the team is the
 * CPUs this process may run on divided by the ranks on this node (at least
 * one), as torchrun and DeepSpeed's launcher do for their workers. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif
#include "log.h"
#include "optim.h"

static atomic_int node_ranks; /* 0: not known (one process, or a backend that does not say) */

static int cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int user_set(void) {
    const char *s = getenv("OMP_NUM_THREADS");
    return s && *s;
}

void zero__optim_set_node_ranks(int ranks) {
    if (ranks < 1) ranks = 1;
    atomic_store(&node_ranks, ranks);
    if (ranks > 1)
        zero__log(NULL, ZERO_LOG_DEBUG, "optim: %d thread(s) for the CPU kernels (%d CPUs, %d ranks on this node%s)",
                  zero__optim_threads(), cpus_available(), ranks,
                  user_set() ? "; OMP_NUM_THREADS set, honoured" : "");
}

int zero__optim_threads(void) {
#if defined(ZERO_HAVE_OPENMP)
    int dflt = omp_get_max_threads(); /* OMP_NUM_THREADS, else one per CPU */
#else
    int dflt = 1;
#endif
    int ranks = atomic_load(&node_ranks);
    if (ranks <= 1 || user_set()) return dflt > 0 ? dflt : 1;
    int t = cpus_available() / ranks;
    if (t < 1) t = 1;
    return t < dflt ? t : dflt;
}
