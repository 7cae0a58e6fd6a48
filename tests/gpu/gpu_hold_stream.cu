// A stream that cannot make progress until the host says so: the stand-in
// for a collective whose peer died (tests/gpu/test_gpu_nccl.c, the timeout
// -> ncclCommAbort path on one GPU).  One thread polls a host-mapped flag.
#include <cuda_runtime.h>

__global__ static void hold_kernel(const volatile int *flag) {
    while (*flag == 0) __nanosleep(10000);
}

// Queue the hold on `stream`; flag_dev is the device view of a
// cudaHostAllocMapped int the host sets to release it.  Returns cudaError_t.
extern "C" int zero_test_hold_stream(void *stream, const int *flag_dev) {
    hold_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const volatile int *)flag_dev);
    return (int)cudaGetLastError();
}
