/* MPI/libzero helpers shared by the benchmarks that drive an engine through
 * the public ABI (bench/overlap, bench/stage2_reduce).  Library:
 * zero_bench_engine.  Call from the main thread. */
#ifndef ZERO_BENCH_ENGINE_H
#define ZERO_BENCH_ENGINE_H
#include <stddef.h>

#include "zero.h"

/* The slowest rank's value of v (MPI_MAX over MPI_COMM_WORLD). Collective. */
double bench_slowest(double v);
/* Print "<what>: <status> <last error>" and abort the job. */
void bench_die(const char *what, zero_engine *e, zero_status s);
/* An engine over MPI_COMM_WORLD from a JSON config and a plugin name, no
 * params yet; `cuda`: device_kind CUDA (local rank % GPUs); log_fn may be
 * NULL (libzero's stderr lines).  A failure aborts the job.  The caller
 * destroys the engine.  Collective. */
zero_engine *bench_engine_open(const char *json, const char *plugin, int cuda, zero_log_fn log_fn);
/* An engine over MPI_COMM_WORLD from a JSON config and a plugin name, with
 * nparams fp32 params "<prefix><i>" of per elements each (zeros), params
 * done.  Handles go to h[0..nparams) (the caller's array).  Any failure
 * aborts the job.  The caller destroys the engine.  Collective. */
zero_engine *bench_engine_flat(const char *json, const char *plugin, int nparams, size_t per, const char *prefix,
                               zero_param **h);
/* The same on a CUDA engine (device_kind CUDA, device local rank % GPUs)
 * over MPI_COMM_WORLD behind libzero's staging layer, so that several ranks
 * may share one GPU.  Param i is registered with host_grads[i] (per floats
 * of host memory the caller owns and keeps until the engine is destroyed)
 * as its gradient buffer: the host writes gradients on the CPU and libzero
 * copies them to the device at zero_on_grad_ready.  A library without CUDA
 * or a machine without a GPU aborts the job with libzero's message. */
zero_engine *bench_engine_flat_cuda(const char *json, const char *plugin, int nparams, size_t per,
                                    const char *prefix, zero_param **h, float **host_grads);
#endif
