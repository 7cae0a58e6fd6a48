/* The host program of multihost.sh's link-down case: tests/stages' MLP host
 * (libzero calls only inside its training loop: no MPI call of the host's
 * own that libzero's timeout could not reach) trains for many steps; the
 * script takes the inter-host link down while it runs.  Each rank writes
 * OUTDIR/rank<R>.log itself (with the link down, output forwarded through
 * mpirun would not arrive from the other host): one line once 3 steps
 * passed (the script cuts the link only then: mid-training, not inside
 * engine creation) and one when host_run returns:
 *   [rank R] stepping
 *   [rank R] ended after S s at E: ZERO_ERR_...: <message>      (or: finished)
 * (E: CLOCK_REALTIME seconds, which the script compares with the moment it
 * took the link down)
 * then exits without MPI_Finalize (exit status 3 on error; run it with
 * --mca orte_abort_on_non_zero_status 0 so that one rank's exit does not
 * take the others down before they report).
 *
 *   link_host PLUGIN STEPS OUTDIR */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../stages/mlp_host.h"

static double now_clock(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_step(void *user, uint64_t done) {
    if (done == 3) {
        printf("[rank %d] stepping\n", *(int *)user);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 4) {
        fprintf(stderr, "usage: link_host PLUGIN STEPS OUTDIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d.log", argv[3], rank);
    FILE *trunc = fopen(path, "w"); /* then both streams append: no overwriting each other */
    if (trunc) fclose(trunc);
    if (!trunc || !freopen(path, "a", stdout) || !freopen(path, "a", stderr)) {
        perror(path);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    host_run_cfg c = host_default_cfg();
    c.plugin = argv[1];
    c.steps = atoi(argv[2]);
    c.model = HOST_MODEL_10K;
    c.on_step = on_step;
    c.on_step_user = &rank;
    const double t0 = now_clock(CLOCK_MONOTONIC);
    host_run_out o;
    host_run(&c, &o);
    const double dt = now_clock(CLOCK_MONOTONIC) - t0, at = now_clock(CLOCK_REALTIME);
    if (o.status != ZERO_OK) {
        printf("[rank %d] ended after %.1f s at %.3f: %s: %s\n", rank, dt, at, zero_status_string(o.status),
               o.error);
        fflush(stdout);
        host_run_free(&o);
        _Exit(3);
    }
    printf("[rank %d] finished %d steps in %.1f s\n", rank, c.steps, dt);
    fflush(stdout);
    host_run_free(&o);
    MPI_Finalize();
    return 0;
}
