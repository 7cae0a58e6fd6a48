/* The fuzz targets link kernels/cpu/optim_convert.c (the checkpoint reader
 * converts dtypes with it) without the optimizer's dispatch unit, which
 * pulls in logging, OpenMP and every step kernel.  The conversions are
 * bitwise the same in every variant (tests/optim checks that), so the
 * fuzzer uses the scalar one. */
#include "optim_kernels.h"

zero__simd zero__simd_active(void) { return ZERO__SIMD_SCALAR; }
