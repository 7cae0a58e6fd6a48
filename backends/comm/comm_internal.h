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

/* Nodes without MPI_Comm_split_type (comm_node.c): each rank's record of
 * its machine, gathered over a communicator, gives every rank the same
 * partition.  zero__node_record fills rec (ZERO__NODE_RECORD bytes: host
 * name, then the kernel's boot id; zero-padded, so records compare with
 * memcmp).  zero__node_leader: the lowest row of tbl (n records, row p
 * from rank p) equal to row q, i.e. q's node's first rank; in *members
 * (if not NULL) how many rows equal it, in *local_rank (if not NULL) how
 * many of those come before q (q's rank on its node).
 * zero__node_leader_rows: the same over rows of `stride` bytes whose
 * record starts at the row's first byte (a table of larger rows that
 * carry a record among other fields).  Thread-safe. */
#define ZERO__NODE_RECORD 128
void zero__node_record(char rec[ZERO__NODE_RECORD]);
int zero__node_leader(const char *tbl, int n, int q, int *members, int *local_rank);
int zero__node_leader_rows(const char *rows, size_t stride, int n, int q, int *members, int *local_rank);

#ifdef ZERO_HAVE_MPI
/* MPI_Initialized() && !MPI_Finalized() (safe to call before MPI_Init). */
int zero__comm_mpi_initialized(void);
#endif
#endif
