/* The MPI backend's bounded waits (issue 17; backends/comm/comm_wait.h),
 * engine-less, with and without the progress thread:
 *  - zero__comm_timeout_resolve: precedence env > aliases > config > default;
 *  - a rank that does not join (it sleeps instead): the others' blocking
 *    all-reduce and their wait on a ring reduce-scatter return
 *    ZERO_ERR_TIMEOUT after about the limit, having used little CPU;
 *  - afterwards every call fails at once with the first failure, and
 *    freeing the world returns promptly (no drain of the abandoned ops);
 *  - a wait that keeps making progress is never cut off by the limit.
 * Rank N-1 is the absent one; it rejoins with an MPI_Barrier on
 * MPI_COMM_WORLD once the others are done, so the job ends cleanly.
 * argv[1]: "thread" or "nothread" (ZERO_COMM_PROGRESS_THREAD). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../common/check.h"
#include "comm.h"
#include "comm_internal.h"
#include "comm_wait.h"
#include "comm_mpi_internal.h" /* the world's failure text (absent_peer_shm) */
#include "shared_blocks.h"

static int R, N;

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void resolve_order(void) {
    const char *src = NULL;
    unsetenv("ZERO_COMM_TIMEOUT");
    unsetenv("ZERO_NCCL_TIMEOUT_S");
    unsetenv("ZERO_STAGE3_TIMEOUT_S");
    CHECK(zero__comm_timeout_resolve(0, 0, &src) == ZERO_COMM_TIMEOUT_DEFAULT_S && !strcmp(src, "default"),
          "default");
    CHECK(zero__comm_timeout_resolve(1, 42, &src) == 42 && strstr(src, "config"), "config");
    CHECK(zero__comm_timeout_resolve(1, 0, &src) == 0, "config 0 = no limit");
    setenv("ZERO_STAGE3_TIMEOUT_S", "7", 1);
    CHECK(zero__comm_timeout_resolve(1, 42, &src) == 7 && !strcmp(src, "ZERO_STAGE3_TIMEOUT_S"), "stage3 alias");
    setenv("ZERO_NCCL_TIMEOUT_S", "8", 1);
    CHECK(zero__comm_timeout_resolve(1, 42, &src) == 8 && !strcmp(src, "ZERO_NCCL_TIMEOUT_S"), "nccl alias first");
    setenv("ZERO_COMM_TIMEOUT", "9", 1);
    CHECK(zero__comm_timeout_resolve(1, 42, &src) == 9 && !strcmp(src, "ZERO_COMM_TIMEOUT"), "ZERO_COMM_TIMEOUT wins");
    setenv("ZERO_COMM_TIMEOUT", "soon", 1);
    CHECK(zero__comm_timeout_resolve(1, 42, &src) == 8, "a non-number is ignored");
    unsetenv("ZERO_COMM_TIMEOUT");
    unsetenv("ZERO_NCCL_TIMEOUT_S");
    unsetenv("ZERO_STAGE3_TIMEOUT_S");
}

/* A long transfer that keeps moving outlives a limit shorter than itself:
 * one round is timed without a limit, then run again with a limit of half
 * its length (at least 0.2 s: a loaded CI machine may deschedule a rank for
 * tens of milliseconds). */
static void progress_is_not_cut(zero_comm *w) {
    const size_t n = (size_t)2 << 20; /* 8 MB of floats, 4 KB chunks: thousands of progress events */
    float *buf = calloc(n, sizeof *buf);
    size_t *counts = malloc((size_t)N * sizeof *counts);
    for (int r = 0; r < N; ++r) counts[r] = n / (size_t)N + (r == 0 ? n % (size_t)N : 0);
    double lens[2] = {0, 0}, limit = 0;
    zero_status s = ZERO_OK;
    for (int k = 0; k < 2 && s == ZERO_OK; ++k) {
        if (k == 1) {
            double t1 = lens[0];
            MPI_Allreduce(MPI_IN_PLACE, &t1, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
            limit = t1 / 2 > 0.2 ? t1 / 2 : 0.2;
        }
        zero__comm_set_timeout(w, limit);
        zero_comm_req *q = NULL;
        double t0 = zero__comm_now();
        s = zero__iallreducev(w, buf, counts, ZERO_DTYPE_F32, &q);
        if (s == ZERO_OK) s = zero__comm_wait(q);
        lens[k] = zero__comm_now() - t0;
    }
    CHECK(s == ZERO_OK, "rank %d: a moving transfer (%.2f s unlimited) was cut off by a %.2f s limit (%s)", R, lens[0],
          limit, zero_status_string(s));
    if (R == 0)
        printf("a %.2f s transfer under a %.2f s no-progress limit: %s\n", lens[1], limit,
               s == ZERO_OK ? "completed" : "cut off");
    if (s == ZERO_OK) { /* else MPI may still write into them: leaked */
        free(buf);
        free(counts);
    }
}

static void absent_peer(zero_comm *w) {
    const double limit = 1.0;
    zero__comm_set_timeout(w, limit);
    const int absent = N - 1;
    if (R == absent) return; /* does not join: the others must time out */
    /* 1. a blocking collective */
    double t0 = zero__comm_now(), c0 = cpu_now();
    double v[2] = {1, 2};
    zero_status s = zero__allreduce(w, v, 2, ZERO_DTYPE_F64, ZERO_OP_SUM);
    double dt = zero__comm_now() - t0, cpu = cpu_now() - c0;
    CHECK(s == ZERO_ERR_TIMEOUT, "rank %d: blocking allreduce without rank %d gave %s", R, absent,
          zero_status_string(s));
    CHECK(dt > 0.9 * limit && dt < limit + 1.5, "rank %d: timed out after %.2f s (limit %.1f)", R, dt, limit);
    /* waiting costs no core: the spin is 2 ms, the rest sleeps */
    CHECK(cpu < 0.3 * dt, "rank %d: waited %.2f s using %.2f s of CPU", R, dt, cpu);
    /* 2. everything afterwards fails at once, naming the first failure */
    t0 = zero__comm_now();
    s = zero__barrier(w);
    CHECK(s == ZERO_ERR_TIMEOUT && zero__comm_now() - t0 < 0.1, "rank %d: barrier after a timeout gave %s in %.2f s",
          R, zero_status_string(s), zero__comm_now() - t0);
    size_t *counts = malloc((size_t)N * sizeof *counts);
    for (int r = 0; r < N; ++r) counts[r] = 1000;
    float *buf = calloc(1000 * (size_t)N, sizeof *buf);
    zero_comm_req *q = NULL;
    s = zero__ireduce_scatterv(w, buf, buf + 1000 * (size_t)R, counts, ZERO_DTYPE_F32, &q);
    if (s == ZERO_OK) s = zero__comm_wait(q);
    CHECK(s == ZERO_ERR_TIMEOUT, "rank %d: a new reduce-scatter after a timeout gave %s", R, zero_status_string(s));
    free(buf);
    free(counts);
}

/* A reduce-scatter in flight that one rank never joins, on the ring
 * (`shared` 0: private buffers) or (1.5.1, `shared` 1) in shared memory
 * (comm_mpi_shm.c: the buffers are shared blocks, so the op waits in the
 * shared-memory protocol for the absent rank to post its buffer).  Either
 * wait gives up within the limit; in shared memory the world's failure text
 * also says what it waited for and names the rank. */
static void absent_peer_reduce(zero_comm *w, int shared) {
    zero__comm_set_timeout(w, 1.0);
    const int absent = N - 1;
    const char *off = getenv("ZERO_COMM_SHM");
    if (R == absent || (shared && off && !strcmp(off, "0"))) return; /* ZERO_COMM_SHM=0: no shared memory to test */
    size_t *counts = malloc((size_t)N * sizeof *counts);
    for (int r = 0; r < N; ++r) counts[r] = 5000;
    const size_t bytes = 5000 * (size_t)N * sizeof(float);
    float *buf = shared ? zero__shared_block_alloc((bytes + 4095) / 4096 * 4096) : calloc(1, bytes);
    CHECK(buf != NULL, "rank %d: no %s buffer (shared memory should be on: all ranks on one node)", R,
          shared ? "shared" : "ring");
    if (!buf) return;
    zero_comm_req *q = NULL;
    double t0 = zero__comm_now();
    zero_status s = zero__ireduce_scatterv(w, buf, buf + 5000 * (size_t)R, counts, ZERO_DTYPE_F32, &q);
    CHECK(s == ZERO_OK, "issue");
    if (s == ZERO_OK) s = zero__comm_wait(q);
    CHECK(s == ZERO_ERR_TIMEOUT && zero__comm_now() - t0 < 2.5, "rank %d: %s wait gave %s after %.2f s", R,
          shared ? "shared-memory" : "ring", zero_status_string(s), zero__comm_now() - t0);
    if (shared) {
        zm_engine *pe = ZM(w)->pe;
        char why[sizeof pe->fail_why], want[64];
        pthread_mutex_lock(&pe->lock);
        snprintf(why, sizeof why, "%s", pe->fail_why);
        pthread_mutex_unlock(&pe->lock);
        snprintf(want, sizeof want, "waiting for rank %d to post its buffer", absent);
        CHECK(strstr(why, "shared-memory reduce-scatter") && strstr(why, want), "rank %d: failure text: %s", R, why);
    }
    /* buf and counts are leaked on purpose: the abandoned op may still own them */
}

int main(int argc, char **argv) {
    int provided = 0;
    const int thread = argc < 2 || strcmp(argv[1], "nothread") != 0;
    setenv("ZERO_COMM_PROGRESS_THREAD", thread ? "1" : "0", 1);
    setenv("ZERO_COMM_CHUNK_KB", "4", 1);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    resolve_order();
    for (int ring = 0; ring < 3; ++ring) { /* 0: blocking, 1: ring, 2: shared memory */
        zero_comm *w = NULL;
        char err[256];
        MPI_Comm world = MPI_COMM_WORLD;
        zero_status s = zero__comm_world_create(ZERO_COMM_MPI, &world, NULL, &w, err, sizeof err);
        CHECK(s == ZERO_OK, "create: %s", err);
        if (!w) break;
        if (!ring) progress_is_not_cut(w);
        if (ring) absent_peer_reduce(w, ring == 2);
        else absent_peer(w);
        double t0 = zero__comm_now();
        if (R != N - 1) zero__comm_world_free(w); /* must not wait for the absent rank */
        CHECK(zero__comm_now() - t0 < 1.0, "rank %d: freeing a failed world took %.2f s", R, zero__comm_now() - t0);
        /* the absent rank rejoins here; its world was never used after the
         * others gave up and is leaked with theirs (its collectives never
         * matched). */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int rc = check_finish(), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
