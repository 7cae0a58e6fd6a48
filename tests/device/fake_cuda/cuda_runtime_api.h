/* A CUDA runtime stand-in for CPU-run tests of code written against
 * cuda_runtime_api.h (tests/device/test_nccl_order.c compiles
 * backends/comm/comm_nccl.c against it).  Only what that code calls.
 *
 * It models CUDA's ordering rules, not its speed: each stream is a queue of
 * work that runs LAZILY, only when the host needs a point of it to be done
 * (cudaStreamSynchronize, cudaEventSynchronize, a cudaEventQuery, which
 * reports the event done after running what it covers, or cudaFree, which
 * synchronises the device as the real one does).  Running a point of a
 * stream runs first what that point depends on: the stream's earlier work,
 * and for a cudaStreamWaitEvent the other stream up to the event's record.
 * Nothing else runs.  That is a schedule real hardware may pick, so work on
 * two streams that nothing orders runs in whatever order the host's waits
 * happen to ask for, and a missing cudaStreamWaitEvent shows up as wrong
 * data instead of a rare flake.  Not modelled: the legacy default stream's
 * implicit synchronisation (every stream here behaves as
 * cudaStreamNonBlocking), pageable-memory copies being synchronous (every
 * host buffer acts as pinned), multiple devices, threads (single-threaded
 * callers only). */
#ifndef ZERO_TEST_FAKE_CUDA_RUNTIME_API_H
#define ZERO_TEST_FAKE_CUDA_RUNTIME_API_H
#include <stddef.h>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNotReady = 600
} cudaError_t;

typedef struct fake_cuda_stream *cudaStream_t;
typedef struct fake_cuda_event *cudaEvent_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);

/* Test helpers (not CUDA).  A host "kernel" on stream s: fn(arg) runs when
 * the stream reaches it. */
void fake_cuda_launch(cudaStream_t s, void (*fn)(void *arg), void *arg);
/* Work queued and not yet run, over every stream. */
size_t fake_cuda_pending(void);
/* Run everything queued (the device catches up). */
void fake_cuda_device_sync(void);
#endif
