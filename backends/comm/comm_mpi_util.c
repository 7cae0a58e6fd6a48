/* MPI backend: the small helpers every other file of it uses (error text,
 * datatypes, busy-time counters, node size).  Apart from comm_mpi.c, which
 * uses the progress engine and the schedules, so that those depend on this
 * file and nothing here depends on them (tools/check-loops.py): the files
 * stack as comm_mpi_util < comm_mpi_progress < comm_mpi_shm < comm_mpi_ring
 * < comm_mpi. */
#ifdef ZERO_HAVE_MPI
#include <stdio.h>
#include <stdlib.h>
#include "comm_mpi_internal.h"

zero_status zero__zm_error_text(int rc, const char *what, char *buf, size_t len) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error code %d", rc);
    snprintf(buf, len, "comm: %s failed: %s", what, text);
    return ZERO_ERR_COMM;
}

MPI_Datatype zero__zm_datatype(zero_dtype dt, int for_sum) {
    switch (dt) {
    case ZERO_DTYPE_F32: return MPI_FLOAT;
    case ZERO_DTYPE_F64: return MPI_DOUBLE;
    case ZERO_DTYPE_I64: return MPI_INT64_T;
    case ZERO_DTYPE_U64: return MPI_UINT64_T;
    case ZERO_DTYPE_U8: return MPI_UINT8_T;
    case ZERO_DTYPE_BF16:
    case ZERO_DTYPE_F16: return for_sum ? MPI_DATATYPE_NULL : MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

void zero__zm_busy_begin(zm_comm *c) {
    pthread_mutex_lock(&c->stat_lock);
    if (c->inflight++ == 0) c->busy_t0 = zero__comm_now();
    pthread_mutex_unlock(&c->stat_lock);
}

void zero__zm_busy_end(zm_comm *c) {
    pthread_mutex_lock(&c->stat_lock);
    if (--c->inflight == 0) c->base.counters.busy_seconds += zero__comm_now() - c->busy_t0;
    pthread_mutex_unlock(&c->stat_lock);
}

#endif
