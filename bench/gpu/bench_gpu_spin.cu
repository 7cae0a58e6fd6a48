// The synthetic backward layer of bench_gpu_nccl: one block that spins for
// a number of clock ticks on the given stream.
#include <cuda_runtime.h>

__global__ static void spin_kernel(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

extern "C" void zero_bench_spin(long long cycles, void *stream) {
    spin_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(cycles);
}
