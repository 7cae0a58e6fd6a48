// Launcher of the fused multi-tensor optimizer kernel (body in
// zero_cuda_kernel_bodies.h).
#include "zero_cuda_kernel_bodies.h"
#include "zero_cuda_kernels.h"

#include <cuda_runtime.h>

static void launch_optim(const zero_cuda_mt_args *a, unsigned nblocks, void *user) {
    zero_cuda_k_optim<<<nblocks, ZERO_CUDA_THREADS, 0, (cudaStream_t)user>>>(*a);
}

extern "C" zero_status zero_cuda_optim_step(zero_optim_kind k, const zero_optim_scalars *s,
                                            const zero_cuda_mt_tensor *ts, size_t nt, zero_dtype grad_dt,
                                            zero_dtype out_dt, float grad_mul, const float *grad_mul_dev,
                                            void *stream) {
    if (k != ZERO_OPTIM_ADAMW && k != ZERO_OPTIM_ADAM && k != ZERO_OPTIM_SGD && k != ZERO_OPTIM_LION &&
        k != ZERO_OPTIM_ADAGRAD)
        return ZERO_ERR_UNSUPPORTED;
    if (!s || (nt && !ts)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_cuda_mt_args a;
    a.s = *s;
    a.kind = k;
    a.grad_dt = grad_dt;
    a.out_dt = out_dt;
    a.grad_mul = grad_mul;
    a.grad_mul_dev = grad_mul_dev;
    zero_cuda_mt_plan(&a, ts, nt, launch_optim, stream);
    return cudaGetLastError() == cudaSuccess ? ZERO_OK : ZERO_ERR_DEVICE;
}
