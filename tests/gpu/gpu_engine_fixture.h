/* What the GPU engine tests (test_gpu_engine_stages.c,
 * test_gpu_engine_device.c) share: the model they train (NP params of
 * `sizes`, STEPS steps of GAS micro-steps, exact data from exact_data.h)
 * and the host's own MPI + NCCL setup, one rank per GPU.  Header-only (its
 * CHECKs count in the including test).  Main thread only. */
#ifndef ZERO_TESTS_GPU_ENGINE_FIXTURE_H
#define ZERO_TESTS_GPU_ENGINE_FIXTURE_H
#include <mpi.h>
#include <nccl.h>

#include "exact_data.h"
#include "gpu_common.h"
#include "rel_l2.h"

enum { NP = 6, STEPS = 4, GAS = 2 };
static const size_t sizes[NP] = {1, 7, 300, 1000, 33, 517};

/* MPI_Init_thread(MULTIPLE), rank and size; skip unless every rank sees a
 * GPU (returns GPU_SKIP after MPI_Finalize); select GPU node-local-rank % n
 * (*ordinal); make an ncclComm_t over the job as a trainer would
 * (ncclGetUniqueId on rank 0, MPI_Bcast, ncclCommInitRank), CHECKing it.
 * Returns 0 with *nr the NCCL result, or GPU_SKIP. */
static inline int gpu_engine_setup(int *argc, char ***argv, const char *test, int *rank, int *world, int *ordinal,
                                   ncclComm_t *nc, ncclResult_t *nr) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    int n = gpu_count_or_skip(test), all = 0;
    MPI_Allreduce(&n, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all == 0) {
        MPI_Finalize();
        return GPU_SKIP;
    }
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    *ordinal = local % n;
    CUDA_OK(cudaSetDevice(*ordinal));
    ncclUniqueId id;
    if (*rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    *nr = ncclCommInitRank(nc, *world, id, *rank);
    CHECK(*nr == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(*nr));
    return 0;
}
#endif
