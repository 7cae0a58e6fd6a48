/* Engine-level memory and kernel calls that pick the engine's device: a
 * buffer the host cannot dereference goes to the device backend (CUDA),
 * everything else to the CPU code (backends/device/device.c).  Copies and
 * conversions made inside zero_step are timed as its `copy` phase.  The
 * services table hands these to plugins unchanged; the core calls them by
 * name.  Any thread, like the device backend under them.
 *
 * The void/double functions report a device failure as the engine's last
 * error and an error log line (sumsq answers NaN, nonfinite 1, so a failed
 * norm pass reads as an overflow and the step is skipped rather than taken
 * on garbage). */
#ifndef ZERO_CORE_ENGINE_MEM_H
#define ZERO_CORE_ENGINE_MEM_H
#include <stddef.h>
#include "zero_plugin.h"

struct zero_engine;

/* Record a device failure of `what` as the engine's last error and log it. */
void zero__engine_dev_failed(struct zero_engine *e, zero_status st, const char *what);
/* dst = src, any direction (host/device). */
void zero__engine_copy(zero_core *c, void *dst, const void *src, size_t bytes);
/* dst[0..bytes) = value; ZERO_ERR_DEVICE when the device failed. */
zero_status zero__engine_set(zero_core *c, void *dst, int value, size_t bytes);
/* fp64 sum of squares (NaN on a device failure); any Inf/NaN (1 on failure). */
double zero__engine_sumsq(zero_core *c, const void *x, zero_dtype dt, size_t n);
int zero__engine_nonfinite(zero_core *c, const void *x, zero_dtype dt, size_t n);
/* dst = src converted (RNE); dst += src. */
void zero__engine_convert(zero_core *c, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n);
void zero__engine_add_into(zero_core *c, float *dst, const void *src, zero_dtype src_dt, size_t n);
#endif
