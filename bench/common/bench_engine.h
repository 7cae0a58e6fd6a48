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
/* An engine over MPI_COMM_WORLD from a JSON config and a plugin name, with
 * nparams fp32 params "<prefix><i>" of per elements each (zeros), params
 * done.  Handles go to h[0..nparams) (the caller's array).  Any failure
 * aborts the job.  The caller destroys the engine.  Collective. */
zero_engine *bench_engine_flat(const char *json, const char *plugin, int nparams, size_t per, const char *prefix,
                               zero_param **h);
#endif
