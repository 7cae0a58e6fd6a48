/* The demo's bridge to a libzero engine whose parameters and gradients live
 * on a GPU (--device cuda).  The demo's model math is CPU code, so a CUDA
 * engine's gathered parameters are copied to host memory before use and the
 * host's fp32 gradient is added into libzero's device gradient buffer
 * through a host copy.  That is slow and not the point: the point is that
 * the same trainer exercises every libzero GPU path (device memory, NCCL,
 * CUDA optimizer kernels, stream ordering) and must reach the same weights
 * as on the CPU.  Copies run on the legacy default stream, which is the
 * "host compute stream" libzero orders itself against (options.stream NULL).
 * Built without CUDA, every function reports that and fails. */
#ifndef DEMO_DEVICE_H
#define DEMO_DEVICE_H
#include <stddef.h>

/* 1 if this demo was built with the CUDA runtime. */
int demo_dev_built(void);
/* Device (or host) memory to host memory, complete on return.  0 or -1
 * with a message in err. */
int demo_dev_download(void *host_dst, const void *src, size_t bytes, char *err, size_t err_len);
/* Host memory to device memory, complete on return. */
int demo_dev_upload(void *dst, const void *host_src, size_t bytes, char *err, size_t err_len);
#endif
