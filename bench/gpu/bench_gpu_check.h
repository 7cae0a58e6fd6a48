/* CK(call): a CUDA runtime call in an MPI GPU bench; on failure print the
 * call, file, line and CUDA's text and abort the whole job (MPI_Abort), so
 * no rank waits on a peer that is gone.  Shared by bench_gpu_nccl and
 * bench_gpu_waits.  Include after <mpi.h>, <stdio.h> and
 * <cuda_runtime_api.h>. */
#ifndef ZERO_BENCH_GPU_CHECK_H
#define ZERO_BENCH_GPU_CHECK_H
#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
        }                                                                                            \
    } while (0)
#endif
