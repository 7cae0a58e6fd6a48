/* MPI backend: communicator setup (duplicate of the host's communicator or
 * of MPI_COMM_WORLD, MPI initialised only if the host has not), split, free,
 * blocking collectives and counters.  The nonblocking collectives live in
 * comm_mpi_ring.c (shared-memory ones in comm_mpi_shm.c), the progress
 * engine in comm_mpi_progress.c and the helpers they all use in
 * comm_mpi_util.c; this file sits on top of them and hands the engine the
 * schedules' entry points (op_hooks).
 *
 * Blocking collectives run as their nonblocking MPI twins, completed here
 * by a bounded, backing-off poll (comm_wait.h): Open MPI's own blocking
 * calls spin a core for as long as a peer is missing and never time out
 * (issue 17/18).  With a progress thread the poll only tests the request
 * (MPI_THREAD_MULTIPLE; the thread keeps ring operations moving).  Without
 * one it also drives our own
 * operations (a peer may be waiting for our ring messages, which nobody else
 * would post); split, which has no nonblocking twin, first completes every
 * operation in flight. */
#ifdef ZERO_HAVE_MPI
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm_mpi_internal.h"
#include "optim.h" /* zero__optim_set_node_ranks */
#include "comm_wait.h"
#include "log.h"

/* libzero-owned MPI initialisation, process-wide: we finalise MPI when the
 * last world created under our own MPI_Init is freed (never when the host
 * initialised MPI).  MPI cannot be re-initialised after that in this
 * process; a later world then fails with a message that says so. */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_we_initialized = 0;
static int g_owned_worlds = 0;

int zero__comm_mpi_initialized(void) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized;
}

/* An MPI call failed.  The communicator stays usable (an error MPI
 * reports, like a truncated receive, is local to the call: tested in
 * tests/comm); only a timeout fails the world.  `locked` is unused here and
 * kept so that block_on states what it holds. */
static zero_status mpi_fail_l(zero_comm *m, int rc, const char *what, int locked) {
    (void)locked;
    char text[MPI_MAX_ERROR_STRING + 64];
    zero_status st = zero__zm_error_text(rc, what, text, sizeof text);
    return zero__error(m ? m->engine : NULL, st, "%s", text);
}

static zero_status mpi_fail(zero_comm *m, int rc, const char *what) { return mpi_fail_l(m, rc, what, 0); }

static void count_call(zm_comm *c, uint64_t *calls, uint64_t *bytes, uint64_t n) {
    pthread_mutex_lock(&c->stat_lock);
    ++*calls;
    if (bytes) *bytes += n;
    pthread_mutex_unlock(&c->stat_lock);
}

/* Enter / leave a blocking MPI call (see the file comment).  Without a
 * progress thread the world lock is held across the call, which serialises
 * our MPI calls (thread levels below MULTIPLE). */
static void blocking_enter(zm_comm *c) {
    zero__zm_busy_begin(c);
    if (!c->pe->has_thread) pthread_mutex_lock(&c->pe->lock);
}
static void blocking_leave(zm_comm *c) {
    if (!c->pe->has_thread) pthread_mutex_unlock(&c->pe->lock);
    zero__zm_busy_end(c);
}

/* Complete the nonblocking twin `rq` of a blocking collective `what`
 * (bytes: its payload, for the texts).  Without a progress thread pe->lock
 * is held (blocking_enter) and our own operations are driven meanwhile: a
 * peer may need our ring messages (on this or another communicator) before
 * it can reach this collective.  Gives up after the no-progress limit:
 * ZERO_ERR_TIMEOUT, the world failed, rq leaked (MPI forbids cancelling a
 * collective). */
static zero_status block_on(zm_comm *c, MPI_Request *rq, const char *what, size_t bytes) {
    zm_engine *pe = c->pe;
    const int thread = pe->has_thread;
    if (thread) pthread_mutex_lock(&pe->lock);
    double limit = pe->timeout_s;
    if (thread) pthread_mutex_unlock(&pe->lock);
    zero__waiter w;
    zero__waiter_start(&w, limit);
    for (;;) {
        int flag = 0, rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail_l(&c->base, rc, what, !thread);
        if (flag) return ZERO_OK;
        if (atomic_load(&pe->failed)) break;
        if (!thread && zero__zm_advance_all_locked(pe)) {
            zero__waiter_moved(&w);
            continue;
        }
        if (!thread) pthread_mutex_unlock(&pe->lock);
        int gave_up = zero__waiter_pause(&w);
        if (!thread) pthread_mutex_lock(&pe->lock);
        if (gave_up) {
            char why[sizeof pe->fail_why];
            snprintf(why, sizeof why,
                     "comm: timed out in %s (%zu bytes on %d ranks): no rank-wide progress for %.1f s "
                     "(ZERO_COMM_TIMEOUT / comm_timeout = %g s); a peer stopped, died or called another collective "
                     "(MPI does not say which rank has not arrived)",
                     what, bytes, c->base.size, zero__waiter_idle(&w), limit);
            if (thread) pthread_mutex_lock(&pe->lock);
            zero__zm_fail_locked(pe, ZERO_ERR_TIMEOUT, why);
            if (thread) pthread_mutex_unlock(&pe->lock);
            break;
        }
    }
    return ZERO_ERR_TIMEOUT; /* the caller reports pe's reason (zero__zm_failed_error's text without "refused") */
}

/* The error of a blocking collective that block_on gave up on. */
static zero_status block_failed(zm_comm *c) {
    zm_engine *pe = c->pe;
    pthread_mutex_lock(&pe->lock);
    zero_status st = pe->fail_status;
    char why[sizeof pe->fail_why];
    snprintf(why, sizeof why, "%s", pe->fail_why);
    pthread_mutex_unlock(&pe->lock);
    return zero__error(c->base.engine, st, "%s", why);
}

/* Small blocking payloads (agreement records, norms) usually live on the
 * caller's stack; a collective abandoned after a timeout could still be
 * completed by MPI later and write there.  They travel in a heap copy that
 * is leaked, not freed, when that happens.  Larger buffers are the
 * engine's own heap blocks and are used directly (docs/reliability.md). */
#define ZM_BOUNCE_MAX (64u * 1024u)

/* What the progress engine calls back for the ops it drives (ring and
 * shared-memory schedules, above it): handed over at world creation so
 * that comm_mpi_progress.c depends on neither (tools/check-loops.py). */
static const zm_op_hooks op_hooks = {zero__zm_op_advance_locked, zero__zm_op_describe_locked,
                                     zero__zm_op_free_locked, zero__zm_shm_maps_free};

static const zero__comm_ops mpi_ops;
static void zm_free(zero_comm *m);

static zm_comm *comm_new(MPI_Comm comm, zm_engine *pe, struct zero_engine *engine) {
    zm_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base.ops = &mpi_ops;
    c->base.engine = engine;
    c->comm = comm;
    c->pe = pe;
    pthread_mutex_init(&c->stat_lock, NULL);
    MPI_Comm_rank(comm, &c->base.rank);
    MPI_Comm_size(comm, &c->base.size);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
    c->tag_mod = flag && ub && *ub > 0 ? (*ub < (1 << 30) ? *ub : (1 << 30)) : 32767;
    return c;
}

/* (1.7.5) Our duplicate of the host's communicator, bounded: MPI_Comm_idup
 * polled under the comm timeout (the environment's, or the default: the
 * config is read once a communicator exists).  MPI_Comm_dup waited for
 * ever for a rank that never called zero_engine_create (one stuck in its
 * own data loading, or gone without mpirun noticing).  On expiry the
 * request and the communicator are leaked (MPI cannot cancel a
 * collective) and ZERO_ERR_TIMEOUT is returned.  Also returns the MPI error
 * code in *rc_out. */
static zero_status dup_bounded(MPI_Comm base, MPI_Comm *dup, int *rc_out, char *err, size_t err_len) {
    MPI_Request rq = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(base, dup, &rq);
    *rc_out = rc;
    if (rc != MPI_SUCCESS) return ZERO_ERR_COMM;
    const char *source = NULL;
    const double limit = zero__comm_timeout_resolve(0, 0, &source);
    zero__waiter w;
    zero__waiter_start(&w, limit);
    for (;;) {
        int flag = 0;
        rc = MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
        *rc_out = rc;
        if (rc != MPI_SUCCESS) return ZERO_ERR_COMM;
        if (flag) return ZERO_OK;
        if (zero__waiter_pause(&w)) break;
    }
    *dup = MPI_COMM_NULL;
    int size = 0;
    MPI_Comm_size(base, &size);
    snprintf(err, err_len, "comm: duplicating the communicator for the engine (MPI_Comm_idup over its %d ranks) "
                           "made no progress for %.1f s (%s): a rank of it has not called zero_engine_create (stuck "
                           "before it, or gone); MPI does not say which",
             size, zero__waiter_idle(&w), source && strcmp(source, "default") ? source : "the default comm timeout");
    return ZERO_ERR_TIMEOUT;
}

zero_status zero__comm_mpi_create(void *mpi_comm_handle, struct zero_engine *engine, zero_comm **out, char *err,
                                  size_t err_len) {
    *out = NULL;
    int inited = 0, finalized = 0, owns = 0, rc;
    MPI_Finalized(&finalized);
    if (finalized) {
        snprintf(err, err_len, "comm: MPI is already finalized in this process (libzero finalizes MPI when the "
                               "last engine it initialised MPI for is destroyed; initialise MPI in the host to "
                               "create engines one after another)");
        return ZERO_ERR_COMM;
    }
    pthread_mutex_lock(&g_init_lock);
    MPI_Initialized(&inited);
    if (!inited) {
        if (mpi_comm_handle) {
            pthread_mutex_unlock(&g_init_lock);
            snprintf(err, err_len, "comm: an MPI_Comm was passed but MPI is not initialised");
            return ZERO_ERR_INVALID_ARGUMENT;
        }
        int provided = 0;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&g_init_lock);
            zero__zm_error_text(rc, "MPI_Init_thread", err, err_len);
            return ZERO_ERR_COMM;
        }
        g_we_initialized = 1;
    }
    if (g_we_initialized && !mpi_comm_handle) {
        owns = 1;
        g_owned_worlds++;
    }
    pthread_mutex_unlock(&g_init_lock);

    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    MPI_Comm base = mpi_comm_handle ? *(MPI_Comm *)mpi_comm_handle : MPI_COMM_WORLD;
    MPI_Comm dup = MPI_COMM_NULL;
    /* Our own duplicate: our traffic never matches the host's messages, and
     * its error handler is ours (return codes, never abort). */
    const zero_status dst = dup_bounded(base, &dup, &rc, err, err_len);
    zm_engine *pe = dst == ZERO_OK ? zero__zm_engine_create(level, engine, &op_hooks) : NULL;
    zm_comm *c = pe ? comm_new(dup, pe, engine) : NULL;
    if (!c) {
        if (dst == ZERO_ERR_TIMEOUT) {
            /* the pending dup stays with MPI: no MPI_Finalize (it would wait for it) */
            if (owns) {
                pthread_mutex_lock(&g_init_lock);
                g_owned_worlds--;
                pthread_mutex_unlock(&g_init_lock);
            }
            return ZERO_ERR_TIMEOUT;
        }
        if (rc != MPI_SUCCESS)
            zero__zm_error_text(rc, "MPI_Comm_idup", err, err_len);
        else
            snprintf(err, err_len, "comm: out of memory creating the MPI communicator");
        if (pe) zero__zm_engine_release(pe);
        if (dup != MPI_COMM_NULL) MPI_Comm_free(&dup);
        if (owns) {
            pthread_mutex_lock(&g_init_lock);
            if (--g_owned_worlds == 0) MPI_Finalize();
            pthread_mutex_unlock(&g_init_lock);
        }
        return rc != MPI_SUCCESS ? ZERO_ERR_COMM : ZERO_ERR_OUT_OF_MEMORY;
    }
    c->is_world = 1;
    c->owns_mpi = owns;
    /* collective, like the dup above, and bounded by the comm timeout:
     * shared-memory collectives run when every rank is on this node
     * (comm_mpi_shm.c), and the same gathered table gives the ranks sharing
     * this node, which size the CPU kernels' thread team
     * (kernels/cpu/optim_threads.c) */
    int local = 0;
    zero_status sst = zero__zm_shm_setup(c, &local);
    if (sst != ZERO_OK) {
        snprintf(err, err_len, "comm: setting up the shared-memory collectives failed (an exchange over the "
                               "new communicator failed or timed out)");
        zm_free(&c->base);
        return sst;
    }
    zero__optim_set_node_ranks(local);
    zero__log(engine, ZERO_LOG_DEBUG, "comm: MPI world rank %d of %d, thread level %d, progress thread %s%s",
              c->base.rank, c->base.size, level, pe->has_thread ? "on" : "off",
              owns ? ", MPI initialised by libzero" : "");
    *out = &c->base;
    return ZERO_OK;
}

/* The communicator a split returned (MPI_COMM_NULL: this rank is in none):
 * counted, and wrapped on the parent's progress engine, which it shares. */
static zero_status adopt_split(zm_comm *c, MPI_Comm sub, zero_comm **out) {
    count_call(c, &c->base.counters.other_calls, NULL, 0);
    if (sub == MPI_COMM_NULL) return ZERO_OK;
    pthread_mutex_lock(&c->pe->lock);
    c->pe->refs++;
    pthread_mutex_unlock(&c->pe->lock);
    zm_comm *s = comm_new(sub, c->pe, c->base.engine);
    if (!s) {
        MPI_Comm_free(&sub);
        zero__zm_engine_release(c->pe);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    zero_status st = zero__zm_shm_setup(s, NULL); /* collective over sub */
    if (st != ZERO_OK) {
        zm_free(&s->base);
        return st;
    }
    *out = &s->base;
    return ZERO_OK;
}

static zero_status zm_barrier(zero_comm *m);
static zero_status zm_split(zero_comm *m, int color, int key, zero_comm **out) {
    zm_comm *c = ZM(m);
    MPI_Comm sub = MPI_COMM_NULL;
    *out = NULL;
    /* MPI_Comm_split has no nonblocking twin.  A bounded barrier first
     * (1.7.5): a rank that never reaches the split fails the others after
     * the comm timeout instead of leaving them in it for ever; only a rank
     * that stops between the barrier and the split can still hang it
     * (docs/reliability.md). */
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Comm_split");
    zero_status arrived = zm_barrier(m);
    if (arrived != ZERO_OK)
        return zero__error_context(m->engine, arrived, "comm: the ranks meeting before MPI_Comm_split");
    blocking_enter(c);
    /* MPI has no nonblocking split: complete what is in flight first, so
     * that no peer waits on ring messages we would not post meanwhile. */
    if (!c->pe->has_thread) zero__zm_drain_locked(c->pe, NULL);
    int rc = MPI_Comm_split(c->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    blocking_leave(c);
    if (rc != MPI_SUCCESS) return mpi_fail(m, rc, "MPI_Comm_split");
    return adopt_split(c, sub, out);
}

static void zm_free(zero_comm *m) {
    zm_comm *c = ZM(m);
    zm_engine *pe = c->pe;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
        /* The host finalised MPI before destroying the engine: no MPI call is
         * allowed any more, so only our own memory is released. */
        zero__log(m->engine, ZERO_LOG_WARN, "comm: MPI was finalized before libzero's communicator was freed");
        pthread_mutex_lock(&pe->lock);
        zero__zm_abandon_locked(pe, c);
        zero__zm_shm_free(c);
        pthread_mutex_unlock(&pe->lock);
        pthread_mutex_destroy(&c->stat_lock);
        free(c);
        zero__zm_engine_release(pe);
        return;
    }
    pthread_mutex_lock(&pe->lock);
    const int failed = atomic_load(&pe->failed);
    if (failed) {
        /* A peer stopped answering: draining would wait for it for ever.
         * What is still in flight is cancelled where MPI allows and leaked
         * otherwise (docs/reliability.md). */
        int left = zero__zm_forsake_locked(pe, c);
        if (left)
            zero__log(m->engine, ZERO_LOG_WARN, "comm: freeing a failed communicator: %d operation(s) abandoned "
                                                "(their MPI requests and buffers are leaked)", left);
    } else if (c->outstanding > 0) {
        zero__log(m->engine, ZERO_LOG_WARN, "comm: freeing a communicator with %d request(s) never waited; "
                                            "completing them first", c->outstanding);
    }
    zero__zm_drain_locked(pe, c);
    if (c->is_world && pe->refs > 1)
        zero__log(m->engine, ZERO_LOG_WARN, "comm: world freed while %d sub-communicator(s) are alive", pe->refs - 1);
    MPI_Comm_free(&c->comm);
    zero__zm_shm_free(c);
    pthread_mutex_unlock(&pe->lock);
    int owns = c->owns_mpi;
    pthread_mutex_destroy(&c->stat_lock);
    free(c);
    zero__zm_engine_release(pe);
    if (owns) {
        pthread_mutex_lock(&g_init_lock);
        if (--g_owned_worlds == 0) {
            int finalized = 0;
            MPI_Finalized(&finalized);
            /* MPI_Finalize synchronises with every process of the job: after
             * a failure it would wait for the peer that stopped answering. */
            if (!finalized && !failed) MPI_Finalize();
            if (failed)
                zero__log(NULL, ZERO_LOG_WARN, "comm: MPI not finalized: a peer stopped answering and MPI_Finalize "
                                               "would wait for it");
        }
        pthread_mutex_unlock(&g_init_lock);
    }
}

static zero_status zm_allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op) {
    zm_comm *c = ZM(m);
    MPI_Datatype t = zero__zm_datatype(dt, 1);
    if (t == MPI_DATATYPE_NULL)
        return zero__error(m->engine, zero__dtype_size(dt) ? ZERO_ERR_UNSUPPORTED : ZERO_ERR_INVALID_ARGUMENT,
                           "comm: allreduce of dtype %d is not supported", dt);
    MPI_Op mop = op == ZERO_OP_SUM ? MPI_SUM : op == ZERO_OP_MAX ? MPI_MAX : op == ZERO_OP_MIN ? MPI_MIN : MPI_OP_NULL;
    if (mop == MPI_OP_NULL) return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown reduce op %d", op);
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Allreduce");
    const size_t bytes = count * zero__dtype_size(dt);
    count_call(c, &m->counters.allreduce_calls, &m->counters.bytes_reduced, bytes);
    char *bounce = bytes && bytes <= ZM_BOUNCE_MAX ? malloc(bytes) : NULL;
    char *data = bounce ? bounce : buf;
    if (bounce) memcpy(bounce, buf, bytes);
    int rc = MPI_SUCCESS;
    zero_status st = ZERO_OK;
    blocking_enter(c);
    for (size_t lo = 0; lo < count && rc == MPI_SUCCESS && st == ZERO_OK; lo += (size_t)INT_MAX) {
        size_t len = count - lo < (size_t)INT_MAX ? count - lo : (size_t)INT_MAX;
        MPI_Request rq;
        rc = MPI_Iallreduce(MPI_IN_PLACE, data + lo * zero__dtype_size(dt), (int)len, t, mop, c->comm, &rq);
        if (rc == MPI_SUCCESS) st = block_on(c, &rq, "MPI_Allreduce", bytes);
    }
    blocking_leave(c);
    if (rc != MPI_SUCCESS) {
        free(bounce);
        return mpi_fail(m, rc, "MPI_Iallreduce");
    }
    if (st != ZERO_OK) return block_failed(c); /* bounce leaked: MPI may still write it */
    if (bounce) memcpy(buf, bounce, bytes);
    free(bounce);
    return ZERO_OK;
}

static zero_status zm_broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root) {
    zm_comm *c = ZM(m);
    MPI_Datatype t = zero__zm_datatype(dt, 0);
    if (t == MPI_DATATYPE_NULL) return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown dtype %d", dt);
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Bcast");
    count_call(c, &m->counters.broadcast_calls, NULL, 0);
    const size_t bytes = count * zero__dtype_size(dt);
    char *bounce = bytes && bytes <= ZM_BOUNCE_MAX ? malloc(bytes) : NULL;
    char *data = bounce ? bounce : buf;
    if (bounce) memcpy(bounce, buf, bytes);
    int rc = MPI_SUCCESS;
    zero_status st = ZERO_OK;
    blocking_enter(c);
    for (size_t lo = 0; lo < count && rc == MPI_SUCCESS && st == ZERO_OK; lo += (size_t)INT_MAX) {
        size_t len = count - lo < (size_t)INT_MAX ? count - lo : (size_t)INT_MAX;
        MPI_Request rq;
        rc = MPI_Ibcast(data + lo * zero__dtype_size(dt), (int)len, t, root, c->comm, &rq);
        if (rc == MPI_SUCCESS) st = block_on(c, &rq, "MPI_Bcast", bytes);
    }
    blocking_leave(c);
    if (rc != MPI_SUCCESS) {
        free(bounce);
        return mpi_fail(m, rc, "MPI_Ibcast");
    }
    if (st != ZERO_OK) return block_failed(c);
    if (bounce) memcpy(buf, bounce, bytes);
    free(bounce);
    return ZERO_OK;
}

static zero_status zm_barrier(zero_comm *m) {
    zm_comm *c = ZM(m);
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Barrier");
    count_call(c, &m->counters.other_calls, NULL, 0);
    blocking_enter(c);
    MPI_Request rq;
    zero_status st = ZERO_OK;
    int rc = MPI_Ibarrier(c->comm, &rq);
    if (rc == MPI_SUCCESS) st = block_on(c, &rq, "MPI_Barrier", 0);
    blocking_leave(c);
    if (rc != MPI_SUCCESS) return mpi_fail(m, rc, "MPI_Ibarrier");
    return st == ZERO_OK ? ZERO_OK : block_failed(c);
}

static zero_status zm_allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    zm_comm *c = ZM(m);
    if (bytes_each > (size_t)INT_MAX)
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm: allgather_bytes limited to INT_MAX bytes");
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Allgather");
    count_call(c, &m->counters.other_calls, NULL, 0);
    const size_t total = bytes_each * (size_t)m->size;
    char *bounce = total && total + bytes_each <= ZM_BOUNCE_MAX ? malloc(total + bytes_each) : NULL;
    const void *sp = send;
    void *rp = recv;
    if (bounce) {
        memcpy(bounce + total, send, bytes_each);
        sp = bounce + total;
        rp = bounce;
    }
    blocking_enter(c);
    MPI_Request rq;
    zero_status st = ZERO_OK;
    int rc = MPI_Iallgather(sp, (int)bytes_each, MPI_BYTE, rp, (int)bytes_each, MPI_BYTE, c->comm, &rq);
    if (rc == MPI_SUCCESS) st = block_on(c, &rq, "MPI_Allgather", total);
    blocking_leave(c);
    if (rc != MPI_SUCCESS) {
        free(bounce);
        return mpi_fail(m, rc, "MPI_Iallgather");
    }
    if (st != ZERO_OK) return block_failed(c);
    if (bounce) memcpy(recv, bounce, total);
    free(bounce);
    return ZERO_OK;
}

static void zm_set_timeout(zero_comm *m, double seconds) {
    zm_engine *pe = ZM(m)->pe;
    pthread_mutex_lock(&pe->lock);
    pe->timeout_s = seconds > 0 ? seconds : 0;
    pthread_mutex_unlock(&pe->lock);
}

/* MPI counts are int: refuse what does not fit rather than truncate. */
static int to_int_counts(const size_t *a, int n, int *out) {
    for (int i = 0; i < n; i++) {
        if (a[i] > (size_t)INT_MAX) return 0;
        out[i] = (int)a[i];
    }
    return 1;
}

static zero_status zm_alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                      void *recv, const size_t *rcounts, const size_t *rdispls) {
    zm_comm *c = ZM(m);
    const int n = m->size;
    int *v = malloc((size_t)4 * (size_t)n * sizeof *v);
    if (!v) return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "comm: out of memory");
    int *sc = v, *sd = v + n, *rc_ = v + 2 * n, *rd = v + 3 * n;
    if (!to_int_counts(scounts, n, sc) || !to_int_counts(sdispls, n, sd) || !to_int_counts(rcounts, n, rc_) ||
        !to_int_counts(rdispls, n, rd)) {
        free(v);
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm: alltoallv limited to INT_MAX bytes per block");
    }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += scounts[i];
    if (atomic_load(&c->pe->failed)) {
        free(v);
        return zero__zm_failed_error(c, "MPI_Alltoallv");
    }
    count_call(c, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, total);
    /* Nonblocking twin + the engine's bounded wait (ZERO_COMM_TIMEOUT), as
     * every other blocking collective here. */
    blocking_enter(c);
    MPI_Request rq;
    zero_status st = ZERO_OK;
    int rc = MPI_Ialltoallv(send, sc, sd, MPI_BYTE, recv, rc_, rd, MPI_BYTE, c->comm, &rq);
    if (rc == MPI_SUCCESS) st = block_on(c, &rq, "MPI_Alltoallv", (size_t)total);
    blocking_leave(c);
    free(v);
    if (rc != MPI_SUCCESS) return mpi_fail(m, rc, "MPI_Ialltoallv");
    return st == ZERO_OK ? ZERO_OK : block_failed(c);
}

/* As zm_split, one communicator per node.  The nodes come from one table
 * of machine records gathered over m (comm_node.c), so every rank computes
 * the same partition; MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) lets ranks
 * see different nodes, and then crashed Open MPI in the split itself (two
 * network-namespace hosts, bench/contrib_netns).  The gather is m's own
 * blocking all-gather, bounded by comm_timeout. */
static zero_status zm_split_node(zero_comm *m, zero_comm **out) {
    zm_comm *c = ZM(m);
    *out = NULL;
    char mine[ZERO__NODE_RECORD];
    zero__node_record(mine);
    char *tbl = malloc((size_t)m->size * ZERO__NODE_RECORD);
    if (!tbl) return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "comm: out of memory finding the nodes");
    zero_status st = m->ops->allgather_bytes(m, mine, tbl, ZERO__NODE_RECORD);
    const int color = st == ZERO_OK ? zero__node_leader(tbl, m->size, m->rank, NULL, NULL) : 0;
    free(tbl);
    if (st != ZERO_OK) return st; /* the all-gather is bounded: every rank arrived */
    if (atomic_load(&c->pe->failed)) return zero__zm_failed_error(c, "MPI_Comm_split");
    MPI_Comm sub = MPI_COMM_NULL;
    blocking_enter(c);
    if (!c->pe->has_thread) zero__zm_drain_locked(c->pe, NULL);
    int rc = MPI_Comm_split(c->comm, color, m->rank, &sub);
    blocking_leave(c);
    if (rc != MPI_SUCCESS) return mpi_fail(m, rc, "MPI_Comm_split");
    return adopt_split(c, sub, out);
}

/* What the ring's peers must share: a message is cut into chunks of
 * chunk_bytes on both ends, and the algorithm decides who sends to whom.
 * (Window, poll interval and scratch cache are local.) */
static void zm_settings(zero_comm *m, char *buf, size_t len) {
    const zm_engine *pe = ZM(m)->pe;
    static const char *const ag[] = {"auto", "ring", "direct", "mpi"};
    const int mode = pe->allgather_mode >= 0 && pe->allgather_mode <= ZM_AG_MPI ? pe->allgather_mode : 0;
    snprintf(buf, len, "ZERO_COMM_CHUNK_KB=%zu ZERO_COMM_ALLGATHER=%s ZERO_COMM_ALLREDUCE=%s", pe->chunk_bytes / 1024u,
             ag[mode], pe->native_allreduce ? "mpi" : "ring");
}

static void zm_counters_get(zero_comm *m, zero__comm_counters *out) {
    zm_comm *c = ZM(m);
    pthread_mutex_lock(&c->stat_lock);
    *out = m->counters;
    if (c->inflight > 0) out->busy_seconds += zero__comm_now() - c->busy_t0;
    pthread_mutex_unlock(&c->stat_lock);
}

static const zero__comm_ops mpi_ops = {
    .name = "mpi",
    .split = zm_split,
    .free = zm_free,
    .allreduce = zm_allreduce,
    .broadcast = zm_broadcast,
    .barrier = zm_barrier,
    .iallreduce = zero__zm_iallreduce,
    .ireduce_scatterv = zero__zm_ireduce_scatterv,
    .iallgatherv = zero__zm_iallgatherv,
    .wait = zero__zm_wait,
    .test = zero__zm_test,
    .allgather_bytes = zm_allgather_bytes,
    .counters_get = zm_counters_get,
    .iallreducev = zero__zm_iallreducev,
    .alltoallv_bytes = zm_alltoallv_bytes,
    .split_node = zm_split_node,
    .set_timeout = zm_set_timeout,
    .settings = zm_settings,
};
#endif
