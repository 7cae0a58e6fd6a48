/* The comm factory and dispatch: world creation (which backend, and whether
 * libzero owns MPI's initialisation) and the wrappers the services table
 * points at.  The backends it picks from implement comm_backend.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "env.h"
#include "comm.h"
#include "comm_internal.h"
#include "comm_nccl.h" /* empty without ZERO_HAVE_NCCL */
#include "log.h"

#ifdef ZERO_HAVE_MPI
/* Does any launcher environment say we run under mpirun/srun/hydra?  Used
 * only by ZERO_COMM_AUTO when MPI is not initialised yet, so that a plain
 * single-process run does not pay for (or trip over) an MPI singleton init. */
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                 "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i)
        if (getenv(vars[i])) return 1;
    return 0;
}
#endif

zero_status zero__comm_world_create(int kind, void *handle, struct zero_engine *engine, zero_comm **out,
                                    char *err, size_t err_len) {
    if (!out) return ZERO_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (err && err_len) err[0] = '\0';
    if (kind == ZERO_COMM_SELF) {
        *out = zero__comm_self_create(engine);
        return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    }
    if (kind == ZERO_COMM_HOST) /* (1.5) the host's callbacks, comm_host.c */
        return zero__comm_host_create(handle, engine, out, err, err_len);
    if (kind == ZERO_COMM_MPI) {
#ifdef ZERO_HAVE_MPI
        if (!handle) {
            if (err) snprintf(err, err_len, "comm_kind ZERO_COMM_MPI needs comm = &your_MPI_Comm, got NULL");
            return ZERO_ERR_INVALID_ARGUMENT;
        }
        return zero__comm_mpi_create(handle, engine, out, err, err_len);
#else
        if (err) snprintf(err, err_len, "this libzero was built without MPI (ZERO_WITH_MPI=OFF)");
        return ZERO_ERR_UNSUPPORTED;
#endif
    }
    if (kind == ZERO_COMM_AUTO) {
        /* ZERO_COMM_BACKEND=self|mpi overrides the choice (documented knob). */
        const char *forced = NULL; /* a bad value is refused once the engine checks its environment */
        if (zero__env_choice("ZERO_COMM_BACKEND", &forced) != 1) forced = NULL;
        if (forced && strcmp(forced, "self") == 0) {
            *out = zero__comm_self_create(engine);
            return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
        }
#ifdef ZERO_HAVE_MPI
        int use_mpi = (forced && strcmp(forced, "mpi") == 0) || launched_by_mpi() || zero__comm_mpi_initialized();
        if (use_mpi) return zero__comm_mpi_create(NULL, engine, out, err, err_len);
        zero__log(engine, ZERO_LOG_INFO, "comm: no MPI launcher detected and MPI not initialised: "
                                         "single-process backend (set ZERO_COMM_BACKEND=mpi to force MPI)");
#endif
        *out = zero__comm_self_create(engine);
        return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    }
#ifdef ZERO_HAVE_NCCL
    /* The host's ncclComm_t (GPU path, backends/comm/comm_nccl.c). */
    if (kind == ZERO_COMM_NCCL) return zero__comm_nccl_create(handle, engine, out, err, err_len);
#endif
    if (err) snprintf(err, err_len, "comm_kind %d is not supported by this build (NCCL comes with the GPU backend)", kind);
    return ZERO_ERR_UNSUPPORTED;
}

void zero__comm_world_free(zero_comm *m) {
    if (m) m->ops->free(m);
}

zero_status zero__comm_split(zero_comm *m, int color, int key, zero_comm **out) {
    if (!m || !out) return ZERO_ERR_INVALID_ARGUMENT;
    return m->ops->split(m, color, key, out);
}
void zero__comm_free(zero_comm *m) {
    if (m) m->ops->free(m);
}
int zero__comm_rank(const zero_comm *m) { return m ? m->rank : -1; }
int zero__comm_size(const zero_comm *m) { return m ? m->size : 0; }

/* (trace) Bytes of n elements, for the trace's "bytes" argument. */
static double tbytes(size_t n, zero_dtype dt) { return (double)n * (double)zero__dtype_size(dt); }
static size_t tsum(const zero_comm *m, const size_t *counts) {
    size_t n = 0;
    for (int b = 0; b < m->size; b++) n += counts[b];
    return n;
}
/* (trace) An issued request gets its span; a finished one is recorded here
 * unless its backend records it itself (with the real end, comm_mpi). */
static zero_status traced_issue(zero_status s, zero_comm_req **req, uint64_t t0, const char *name, double bytes) {
    if (t0 && s == ZERO_OK && *req) zero__trace_op_issued(&(*req)->trace, t0, name, bytes);
    return s;
}

zero_status zero__allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op) {
    if (!m || (!buf && count)) return ZERO_ERR_INVALID_ARGUMENT;
    ZERO_TRACE_SCOPE("allreduce", "comm", "bytes", tbytes(count, dt), NULL, 0);
    return m->ops->allreduce(m, buf, count, dt, op);
}
zero_status zero__broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root) {
    if (!m || (!buf && count) || root < 0 || root >= m->size) return ZERO_ERR_INVALID_ARGUMENT;
    ZERO_TRACE_SCOPE("broadcast", "comm", "bytes", tbytes(count, dt), "root", root);
    return m->ops->broadcast(m, buf, count, dt, root);
}
zero_status zero__barrier(zero_comm *m) {
    if (!m) return ZERO_ERR_INVALID_ARGUMENT;
    ZERO_TRACE_SCOPE("barrier", "comm", NULL, 0, NULL, 0);
    return m->ops->barrier(m);
}
zero_status zero__iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                             zero_comm_req **req) {
    if (!m || !req || (!buf && count)) return ZERO_ERR_INVALID_ARGUMENT;
    *req = NULL;
    uint64_t t0 = zero__trace_now();
    return traced_issue(m->ops->iallreduce(m, buf, count, dt, op, req), req, t0, "allreduce", tbytes(count, dt));
}
zero_status zero__ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                   zero_dtype dt, zero_comm_req **req) {
    if (!m || !req || !counts) return ZERO_ERR_INVALID_ARGUMENT;
    *req = NULL;
    uint64_t t0 = zero__trace_now();
    return traced_issue(m->ops->ireduce_scatterv(m, send, recv, counts, dt, req), req, t0, "reduce_scatter",
                        t0 ? tbytes(tsum(m, counts), dt) : 0);
}
zero_status zero__iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                              zero_dtype dt, zero_comm_req **req) {
    if (!m || !req || !counts) return ZERO_ERR_INVALID_ARGUMENT;
    *req = NULL;
    uint64_t t0 = zero__trace_now();
    return traced_issue(m->ops->iallgatherv(m, send, recv, counts, dt, req), req, t0, "allgather",
                        t0 ? tbytes(tsum(m, counts), dt) : 0);
}
zero_status zero__iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req) {
    if (!m || !req || !counts) return ZERO_ERR_INVALID_ARGUMENT;
    *req = NULL;
    size_t total = 0;
    for (int b = 0; b < m->size; b++) total += counts[b];
    if (!buf && total) return ZERO_ERR_INVALID_ARGUMENT;
    uint64_t t0 = zero__trace_now();
    if (m->ops->iallreducev)
        return traced_issue(m->ops->iallreducev(m, buf, counts, dt, req), req, t0, "allreduce", tbytes(total, dt));
    /* a backend whose reduction order is its own (NCCL, MPI's libnbc) */
    return traced_issue(m->ops->iallreduce(m, buf, total, dt, ZERO_OP_SUM, req), req, t0, "allreduce",
                        tbytes(total, dt));
}
zero_status zero__comm_wait(zero_comm_req *req) {
    if (!req || !req->comm) return ZERO_ERR_INVALID_ARGUMENT;
    if (!ZERO__TRACE_ON()) return req->comm->ops->wait(req);
    zero__trace_op tr = zero__trace_op_snapshot(&req->trace); /* the wait frees req */
    ZERO_TRACE_SCOPE("comm.wait", "comm", "bytes", tr.bytes, NULL, 0);
    zero_status s = req->comm->ops->wait(req);
    if (!tr.backend_emits) zero__trace_op_finished(&tr);
    return s;
}
zero_status zero__comm_test(zero_comm_req *req, int *done) {
    if (!req || !req->comm || !done) return ZERO_ERR_INVALID_ARGUMENT;
    if (!ZERO__TRACE_ON()) return req->comm->ops->test(req, done);
    zero__trace_op tr = zero__trace_op_snapshot(&req->trace); /* a finished test frees req */
    zero_status s = req->comm->ops->test(req, done);
    if (*done && !tr.backend_emits) zero__trace_op_finished(&tr);
    return s;
}
int zero__comm_ordered_on(zero_comm *m, void *stream) {
    return m && m->ops->ordered_on && m->ops->drop && m->ops->ordered_on(m, stream);
}
zero_status zero__comm_drop(zero_comm_req *req) {
    if (!req || !req->comm) return ZERO_ERR_INVALID_ARGUMENT;
    if (!req->comm->ops->drop) return zero__comm_wait(req);
    if (!ZERO__TRACE_ON()) return req->comm->ops->drop(req);
    /* the op's span ends here, where libzero stops tracking it (its
     * completion is ordered on the device, not observed by the host) */
    zero__trace_op tr = zero__trace_op_snapshot(&req->trace); /* drop frees req */
    zero_status s = req->comm->ops->drop(req);
    if (!tr.backend_emits) zero__trace_op_finished(&tr);
    return s;
}
void zero__comm_set_timeout(zero_comm *m, double seconds) {
    if (m && m->ops->set_timeout) m->ops->set_timeout(m, seconds);
}

/* The depth is counted here for every backend, so that an unmatched end
 * is refused the same way whether or not the backend batches anything. */
zero_status zero__comm_group_start(zero_comm *m) {
    if (!m) return ZERO_ERR_INVALID_ARGUMENT;
    zero_status st = m->ops->group_start ? m->ops->group_start(m) : ZERO_OK;
    if (st == ZERO_OK) m->group_depth++;
    return st;
}
zero_status zero__comm_group_end(zero_comm *m) {
    if (!m) return ZERO_ERR_INVALID_ARGUMENT;
    if (m->group_depth <= 0)
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm_group_end without a matching comm_group_start");
    m->group_depth--;
    return m->ops->group_end ? m->ops->group_end(m) : ZERO_OK;
}

zero_status zero__allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    if (!m || ((!send || !recv) && bytes_each)) return ZERO_ERR_INVALID_ARGUMENT;
    ZERO_TRACE_SCOPE("allgather_bytes", "comm", "bytes", (double)bytes_each * m->size, NULL, 0);
    return m->ops->allgather_bytes(m, send, recv, bytes_each);
}
zero_status zero__comm_split_node(zero_comm *m, zero_comm **out) {
    if (!m || !out) return ZERO_ERR_INVALID_ARGUMENT;
    *out = NULL;
    long k = 0;
    const int rpn = zero__env_long("ZERO_RANKS_PER_NODE", &k);
    if (rpn < 0)
        return zero__error(m->engine, ZERO_ERR_CONFIG, "ZERO_RANKS_PER_NODE: got '%s', expected a positive integer",
                           getenv("ZERO_RANKS_PER_NODE"));
    if (rpn == 1) return m->ops->split(m, (int)(m->rank / k), m->rank, out);
    if (m->ops->split_node) return m->ops->split_node(m, out);
    if (m->size == 1) return m->ops->split(m, 0, 0, out);
    return zero__error(m->engine, ZERO_ERR_UNSUPPORTED,
                       "comm: the %s backend cannot find node boundaries (set ZERO_RANKS_PER_NODE)", m->ops->name);
}

void zero__comm_settings(zero_comm *m, char *buf, size_t len) {
    if (!len) return;
    const char *rpn = getenv("ZERO_RANKS_PER_NODE");
    int used = snprintf(buf, len, "ZERO_RANKS_PER_NODE=%s", rpn && *rpn ? rpn : "(unset)");
    if (m && m->ops->settings && used >= 0 && (size_t)used + 1 < len) {
        buf[used] = ' ';
        m->ops->settings(m, buf + used + 1, len - (size_t)used - 1);
        if (!buf[used + 1]) buf[used] = '\0'; /* the backend had nothing to add */
    }
}

zero_status zero__alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                  void *recv, const size_t *rcounts, const size_t *rdispls) {
    if (!m || !scounts || !sdispls || !rcounts || !rdispls) return ZERO_ERR_INVALID_ARGUMENT;
    if (!m->ops->alltoallv_bytes)
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm: the %s backend has no all-to-all", m->ops->name);
    size_t sent = 0;
    for (int r = 0; r < m->size; r++) sent += scounts[r];
    ZERO_TRACE_SCOPE("alltoallv_bytes", "comm", "bytes", (double)sent, NULL, 0);
    return m->ops->alltoallv_bytes(m, send, scounts, sdispls, recv, rcounts, rdispls);
}

void zero__comm_counters_get(zero_comm *m, zero__comm_counters *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!m) return;
    if (m->ops->counters_get)
        m->ops->counters_get(m, out);
    else
        *out = m->counters;
}
