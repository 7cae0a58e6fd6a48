/* Internal helpers shared by the comm backends (not part of the services
 * contract).  All functions are thread-safe (no shared state). */
#ifndef ZERO_BACKENDS_COMM_INTERNAL_H
#define ZERO_BACKENDS_COMM_INTERNAL_H
#include <stddef.h>
#include "comm_backend.h"

/* out[i] = a[i] + b[i] for n elements of dt (F32, F64, I64, U64, U8, and
 * BF16/F16: both widened to fp32, added once, rounded to nearest even).
 * out may alias a or b exactly (not partially).  The order of the operands
 * is fixed so that callers get a deterministic summation order.  Returns
 * ZERO_ERR_UNSUPPORTED for unknown dtypes. */
zero_status zero__comm_sum3(void *out, const void *a, const void *b, size_t n, zero_dtype dt);

/* Is dt a type the sum kernels handle? */
int zero__comm_dtype_summable(zero_dtype dt);

/* Monotonic wall clock in seconds. */
double zero__comm_now(void);

#ifdef ZERO_HAVE_MPI
/* MPI_Initialized() && !MPI_Finalized() (safe to call before MPI_Init). */
int zero__comm_mpi_initialized(void);
#endif
#endif
