/* The two ways the NCCL GPU tests run one body on every rank, shared by
 * test_gpu_nccl.c and test_gpu_stage_equivalence.c:
 *   <test> mpi      under mpirun: an NCCL communicator made from an
 *                   ncclUniqueId broadcast over MPI (np 1 = NCCL world 1);
 *   <test> threads  one process, one thread per GPU present, each wrapping
 *                   a host-made ncclComm_t (ncclCommInitAll): the "host
 *                   passes its ncclComm_t" path, on every GPU.
 * TCHECK is CHECK under a lock (the threads share check.h's counters).
 * Header-only so that the counters are the including test's. */
#ifndef ZERO_TESTS_GPU_NCCL_DRIVER_H
#define ZERO_TESTS_GPU_NCCL_DRIVER_H
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>

#include "comm.h" /* the core's wrappers (zero__comm_wait, ...) */
#include "comm_nccl.h"
#include "gpu_common.h"

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
#define TCHECK(cond, ...)                  \
    do {                                   \
        pthread_mutex_lock(&check_lock);   \
        CHECK(cond, __VA_ARGS__);          \
        pthread_mutex_unlock(&check_lock); \
    } while (0)

/* The test's body on one rank's communicator; from_mpi says which mode
 * made it.  Runs concurrently on several threads in "threads" mode. */
typedef void (*gpu_nccl_body)(zero_comm *m, int from_mpi);

typedef struct gpu_nccl_thread_arg {
    ncclComm_t nc;
    int dev;
    gpu_nccl_body body;
} gpu_nccl_thread_arg;

static inline void *gpu_nccl_thread_main(void *p) {
    gpu_nccl_thread_arg *a = p;
    CUDA_OK(cudaSetDevice(a->dev));
    zero_comm *m = NULL;
    char err[256] = "";
    zero_status s = zero__comm_nccl_create(&a->nc, NULL, &m, err, sizeof err);
    TCHECK(s == ZERO_OK && m, "wrap host ncclComm_t: %s", err);
    if (m) {
        a->body(m, 0);
        m->ops->free(m);
    }
    return NULL;
}

/* main() of such a test: mode from argv[1] (default "threads"); skips
 * (GPU_SKIP) without a GPU, naming "<test>_mpi" / "<test>_threads"; prints
 * "<what> ran on N GPU(s)" after the threads mode.  Returns the exit code. */
static inline int gpu_nccl_main(int argc, char **argv, const char *test, const char *what, gpu_nccl_body body) {
    const char *mode = argc > 1 ? argv[1] : "threads";
    char name[128];
    if (strcmp(mode, "mpi") == 0) {
        MPI_Init(&argc, &argv);
        snprintf(name, sizeof name, "%s_mpi", test);
        int n = gpu_count_or_skip(name), all = 0;
        MPI_Allreduce(&n, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (all == 0) {
            MPI_Finalize();
            return GPU_SKIP;
        }
        zero_comm *m = NULL;
        char err[256] = "";
        zero_status s = zero__comm_nccl_create_mpi(NULL, -1, NULL, &m, err, sizeof err);
        CHECK(s == ZERO_OK && m, "NCCL from MPI: %s", err);
        if (m) {
            body(m, 1);
            m->ops->free(m);
        }
        int rc = check_finish();
        MPI_Finalize();
        return rc;
    }
    snprintf(name, sizeof name, "%s_threads", test);
    int n = gpu_count_or_skip(name);
    if (n == 0) return GPU_SKIP;
    if (n > 64) n = 64;
    ncclComm_t comms[64];
    int devs[64];
    for (int i = 0; i < n; ++i) devs[i] = i;
    ncclResult_t r = ncclCommInitAll(comms, n, devs);
    CHECK(r == ncclSuccess, "ncclCommInitAll(%d): %s", n, ncclGetErrorString(r));
    if (r != ncclSuccess) return check_finish();
    pthread_t th[64];
    gpu_nccl_thread_arg args[64];
    for (int i = 0; i < n; ++i) {
        args[i] = (gpu_nccl_thread_arg){comms[i], i, body};
        pthread_create(&th[i], NULL, gpu_nccl_thread_main, &args[i]);
    }
    for (int i = 0; i < n; ++i) pthread_join(th[i], NULL);
    for (int i = 0; i < n; ++i) ncclCommDestroy(comms[i]);
    printf("%s ran on %d GPU(s)\n", what, n);
    return check_finish();
}
#endif
