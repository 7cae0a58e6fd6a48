/* See device.h. */
#include "device.h"

#include <stdio.h>

#if defined(DEMO_HAVE_CUDA)
#include <cuda_runtime_api.h>

int demo_dev_built(void) { return 1; }

/* cudaMemcpy on the legacy stream returns once the copy is complete for
 * device-to-host; host-to-device from pageable memory may return before the
 * DMA lands, so wait for the device: libzero's stream reads the gradient
 * right after zero_on_grad_ready. */
static int copy(void *dst, const void *src, size_t bytes, int to_device, char *err, size_t err_len) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    if (e == cudaSuccess && to_device) e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cudaMemcpy (%zu bytes): %s", bytes, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
int demo_dev_download(void *host_dst, const void *src, size_t bytes, char *err, size_t err_len) {
    return copy(host_dst, src, bytes, 0, err, err_len);
}
int demo_dev_upload(void *dst, const void *host_src, size_t bytes, char *err, size_t err_len) {
    return copy(dst, host_src, bytes, 1, err, err_len);
}
#else
int demo_dev_built(void) { return 0; }
int demo_dev_download(void *host_dst, const void *src, size_t bytes, char *err, size_t err_len) {
    (void)host_dst, (void)src, (void)bytes;
    snprintf(err, err_len, "this zero-demo was built without CUDA (--device cuda needs libzero's CUDA build)");
    return -1;
}
int demo_dev_upload(void *dst, const void *host_src, size_t bytes, char *err, size_t err_len) {
    return demo_dev_download(dst, host_src, bytes, err, err_len);
}
#endif
