/* A zero_host_comm (ABI 1.5, ZERO_COMM_HOST) whose callbacks are MPI calls:
 * what a host with its own transport would write, used by the tests to run
 * libzero's host backend under mpirun (test code only).  Header-only.
 *
 * hcm_make(&h, comm, flags): h->hc is ready to pass as
 * zero_engine_options.comm; it borrows `comm` (the caller keeps it alive).
 * Flags: HCM_ALLTOALL gives the optional alltoall callback, HCM_SPLIT the
 * split/release pair (sub-communicators are MPI_Comm_split of comm, freed
 * at release; h->released counts them), HCM_ASYNC (with HCM_ALLTOALL) the
 * started alltoall (MPI_Ialltoall; finish = MPI_Wait, test = MPI_Test; h->started
 * counts the exchanges, h->open those not finished yet).  h->fail_after = k > 0 makes the
 * k-th callback from then on fail with ZERO_ERR_IO (the error path).
 * Not thread-safe by itself: libzero never calls two callbacks at once. */
#ifndef ZERO_TESTS_HOST_COMM_MPI_H
#define ZERO_TESTS_HOST_COMM_MPI_H
#include <mpi.h>
#include <stdlib.h>

#include "zero.h"

enum { HCM_ALLTOALL = 1, HCM_SPLIT = 2, HCM_ASYNC = 4 };

typedef struct hcm {
    zero_host_comm hc;
    MPI_Comm comm;
    int flags;
    long calls;      /* callbacks made */
    long fail_after; /* > 0: the fail_after-th callback from now fails */
    int released;    /* split communicators handed back (counted on the root hcm) */
    long started, open, tested_done; /* HCM_ASYNC: exchanges started, not yet finished, found done by a test */
    struct hcm *root;
} hcm;

static int hcm_fail(hcm *h) {
    h->calls++;
    return h->fail_after > 0 && --h->fail_after == 0;
}

static MPI_Datatype hcm_type(zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: return MPI_FLOAT;
    case ZERO_DTYPE_F64: return MPI_DOUBLE;
    case ZERO_DTYPE_I64: return MPI_INT64_T;
    case ZERO_DTYPE_U64: return MPI_UINT64_T;
    case ZERO_DTYPE_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static zero_status hcm_allreduce_sum(void *user, void *buf, size_t count, zero_dtype dt) {
    hcm *h = user;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    MPI_Datatype t = hcm_type(dt);
    if (t == MPI_DATATYPE_NULL) return ZERO_ERR_UNSUPPORTED; /* 16-bit sums: not needed by these tests */
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, t, MPI_SUM, h->comm) == MPI_SUCCESS ? ZERO_OK : ZERO_ERR_COMM;
}
static zero_status hcm_allgather(void *user, const void *send, void *recv, size_t bytes) {
    hcm *h = user;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    int r;
    MPI_Comm_rank(h->comm, &r);
    const void *s = send == (char *)recv + (size_t)r * bytes ? MPI_IN_PLACE : send;
    return MPI_Allgather(s, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, h->comm) == MPI_SUCCESS ? ZERO_OK
                                                                                                    : ZERO_ERR_COMM;
}
static zero_status hcm_broadcast(void *user, void *buf, size_t bytes, int root) {
    hcm *h = user;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, h->comm) == MPI_SUCCESS ? ZERO_OK : ZERO_ERR_COMM;
}
static zero_status hcm_barrier(void *user) {
    hcm *h = user;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    return MPI_Barrier(h->comm) == MPI_SUCCESS ? ZERO_OK : ZERO_ERR_COMM;
}
static zero_status hcm_alltoall(void *user, const void *send, void *recv, size_t bytes) {
    hcm *h = user;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    return MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, h->comm) == MPI_SUCCESS
               ? ZERO_OK
               : ZERO_ERR_COMM;
}
static zero_status hcm_alltoall_start(void *user, const void *send, void *recv, size_t bytes, void **handle) {
    hcm *h = user;
    *handle = NULL;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    MPI_Request *q = malloc(sizeof *q);
    if (!q) return ZERO_ERR_OUT_OF_MEMORY;
    if (MPI_Ialltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, h->comm, q) != MPI_SUCCESS) {
        free(q);
        return ZERO_ERR_COMM;
    }
    h->started++, h->open++;
    *handle = q;
    return ZERO_OK;
}
static zero_status hcm_alltoall_finish(void *user, void *handle) {
    hcm *h = user;
    MPI_Request *q = handle;
    int rc = MPI_Wait(q, MPI_STATUS_IGNORE);
    free(q);
    h->open--;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    return rc == MPI_SUCCESS ? ZERO_OK : ZERO_ERR_COMM;
}
static zero_status hcm_alltoall_test(void *user, void *handle, int *done) {
    hcm *h = user;
    int flag = 0;
    if (MPI_Test((MPI_Request *)handle, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return ZERO_ERR_COMM;
    *done = flag;
    h->tested_done += flag != 0;
    return ZERO_OK;
}
static void hcm_make(hcm *h, MPI_Comm comm, int flags);
static zero_status hcm_split(void *user, int color, int key, zero_host_comm **out) {
    hcm *h = user;
    *out = NULL;
    if (hcm_fail(h)) return ZERO_ERR_IO;
    MPI_Comm sub = MPI_COMM_NULL;
    if (MPI_Comm_split(h->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub) != MPI_SUCCESS) return ZERO_ERR_COMM;
    if (sub == MPI_COMM_NULL) return ZERO_OK;
    hcm *s = malloc(sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    hcm_make(s, sub, h->flags);
    s->root = h->root;
    *out = &s->hc;
    return ZERO_OK;
}
static void hcm_release(void *user, zero_host_comm *sub) {
    hcm *h = user;
    hcm *s = sub->user;
    h->root->released++;
    MPI_Comm_free(&s->comm);
    free(s);
}

static void hcm_make(hcm *h, MPI_Comm comm, int flags) {
    const zero_host_comm init = ZERO_HOST_COMM_INIT;
    h->hc = init;
    h->comm = comm;
    h->flags = flags;
    h->calls = h->fail_after = 0;
    h->released = 0;
    h->root = h;
    int r = 0, n = 1;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    h->hc.rank = r;
    h->hc.size = n;
    h->hc.user = h;
    h->hc.name = "test MPI callbacks";
    h->hc.allreduce_sum = hcm_allreduce_sum;
    h->hc.allgather = hcm_allgather;
    h->hc.broadcast = hcm_broadcast;
    h->hc.barrier = hcm_barrier;
    h->started = h->open = h->tested_done = 0;
    if (flags & HCM_ALLTOALL) h->hc.alltoall = hcm_alltoall;
    if ((flags & HCM_ALLTOALL) && (flags & HCM_ASYNC)) {
        h->hc.alltoall_start = hcm_alltoall_start;
        h->hc.alltoall_finish = hcm_alltoall_finish;
        h->hc.alltoall_test = hcm_alltoall_test;
    }
    if (flags & HCM_SPLIT) {
        h->hc.split = hcm_split;
        h->hc.release = hcm_release;
    }
}
#endif
