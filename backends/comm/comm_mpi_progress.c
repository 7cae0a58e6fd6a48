/* Progress engine of the MPI backend.
 *
 * Why it exists: Debian's Open MPI 4.1 has no asynchronous progress, so a
 * nonblocking operation only advances while some thread is inside MPI, and
 * our ring collectives are state machines that must post the next messages
 * and sum received chunks.  One progress thread per world (shared by its
 * sub-communicators) does that while the host computes.
 *
 * CPU policy (tests run 4 ranks on 2 cores, so a busy-polling thread would
 * steal the host's CPU):
 *  - nothing in flight: the thread blocks on a condition variable;
 *  - something in flight: it polls; after a pass that moved nothing it sleeps
 *    with an exponential back-off from 2 us up to ZERO_COMM_POLL_US
 *    (default 100 us); a pass that moved something polls again at once;
 *  - a host thread inside wait() drives progress itself (lowest latency) and
 *    the thread stands back meanwhile, so there is one poller, not two; it
 *    follows comm_wait.h: yields for ~2 ms, then sleeps 1 % of the silence
 *    so far (20 us to 1 ms), and gives up with ZERO_ERR_TIMEOUT after
 *    ZERO_COMM_TIMEOUT seconds without progress (issue 17), leaving the
 *    world failed;
 *  - a test() is one pass too: the bucket engine's hooks test the oldest
 *    reduce-scatter in flight (stage 2 with overlap_comm, core/buckets.c
 *    drive_inflight), so rings move at least once per hook when this
 *    thread shares its core with the compute and runs only at ticks;
 *  - the thread's own back-off stops at ZERO_COMM_POLL_US while work moves
 *    (overlap latency), and stretches with the silence (1 % of it) up to
 *    1 ms (a stalled peer costs no core); it sleeps on the condition
 *    variable, so a new operation wakes it at once.
 * Without MPI_THREAD_MULTIPLE there is no thread: operations advance only
 * inside test(), wait() and the blocking collectives (which first complete
 * what is in flight, so that they cannot deadlock against a peer waiting for
 * our ring messages). */
#ifdef ZERO_HAVE_MPI
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include "env.h"
#include "comm_mpi_internal.h"
#include "comm_wait.h"
#include "memory.h"
#include "jitter.h"
#include "log.h"

/* Ranges in env.c's table; a value out of range is the default (and was
 * warned about when the engine checked its environment). */
static long env_long(const char *name, long dflt) {
    long v = dflt;
    return zero__env_long(name, &v) == 1 ? v : dflt;
}

static void list_remove(zm_engine *pe, zm_op *op) {
    if (op->prev) op->prev->next = op->next; else pe->head = op->next;
    if (op->next) op->next->prev = op->prev; else pe->tail = op->prev;
    op->prev = op->next = NULL;
    op->in_list = 0;
    ZM(op->base.comm)->ops_in_list--;
}

int zero__zm_advance_all_locked(zm_engine *pe) {
    int moved = 0;
    zm_op *op = pe->head;
    while (op) {
        zm_op *next = op->next;
        moved |= pe->hooks->advance(op);
        if (op->done) {
            zero__trace_op_done(&op->base.trace);
            list_remove(pe, op);
            zero__zm_busy_end(ZM(op->base.comm));
            moved = 1;
        }
        op = next;
    }
    return moved;
}

/* Sleep on the wake condition for `us` (lock held; a submit wakes us).
 * The condition runs on CLOCK_MONOTONIC (zero__zm_engine_create), so a
 * wall-clock step cannot stretch a nap. */
static void nap_locked(zm_engine *pe, unsigned us) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)us * 1000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&pe->wake, &pe->lock, &ts);
}

static void *progress_main(void *arg) {
    zm_engine *pe = arg;
    /* Default timer slack (50 us) would turn our short back-off sleeps into
     * long ones; the thread is named so that it is recognisable in top. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    prctl(PR_SET_NAME, "zero-comm", 0, 0, 0);
    zero__trace_thread_name("progress");
    unsigned backoff = 2;
    double idle_since = 0;
    pthread_mutex_lock(&pe->lock);
    while (!pe->stop) {
        /* A failed world's ops never complete: nothing to drive. */
        if (!pe->head || pe->waiters > 0 || atomic_load(&pe->failed)) {
            pthread_cond_wait(&pe->wake, &pe->lock);
            backoff = 2;
            idle_since = 0;
            continue;
        }
        uint64_t t_pass = zero__trace_now();
        if (zero__zm_advance_all_locked(pe)) {
            if (t_pass) zero__trace_complete("progress.pass", "comm", t_pass, zero__trace_clock(), ZERO__LANE_NONE, -1, NULL, 0, NULL, 0);
            backoff = 2;
            idle_since = 0;
            pthread_mutex_unlock(&pe->lock);
            zero__jitter(ZERO_JITTER_PROGRESS);
            sched_yield(); /* let an issuing host thread take the lock */
            pthread_mutex_lock(&pe->lock);
        } else {
            /* the cap grows with the silence (1 % of it, comm_wait.h) from
             * ZERO_COMM_POLL_US up to 1 ms */
            double now = zero__comm_now();
            if (idle_since == 0) idle_since = now;
            double grown = (now - idle_since) * 1e6 / 100.0;
            unsigned cap = grown > (double)ZERO_COMM_WAIT_MAX_SLEEP_US ? ZERO_COMM_WAIT_MAX_SLEEP_US
                           : grown > (double)pe->poll_us              ? (unsigned)grown
                                                                      : pe->poll_us;
            unsigned us = backoff;
            backoff = backoff * 2 > cap ? cap : backoff * 2;
            nap_locked(pe, us);
        }
    }
    pthread_mutex_unlock(&pe->lock);
    return NULL;
}

zm_engine *zero__zm_engine_create(int thread_level, struct zero_engine *engine, const zm_op_hooks *hooks) {
    zm_engine *pe = calloc(1, sizeof *pe);
    if (!pe) return NULL;
    pthread_mutex_init(&pe->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pe->wake, &ca);
    pthread_condattr_destroy(&ca);
    pe->refs = 1;
    pe->engine = engine;
    pe->hooks = hooks;
    pe->thread_level = thread_level;
    pe->poll_us = (unsigned)env_long("ZERO_COMM_POLL_US", 100);
    pe->chunk_bytes = (size_t)env_long("ZERO_COMM_CHUNK_KB", 512) * 1024u;
    pe->window = (int)env_long("ZERO_COMM_WINDOW", 8);
    _Static_assert(ZM_MAX_WINDOW == 64, "ZERO_COMM_WINDOW's range in base/env.c is 1..64");
    pe->cache_cap = (size_t)env_long("ZERO_COMM_SCRATCH_CACHE_MB", 64) << 20;
    const char *ag = "auto";
    if (zero__env_choice("ZERO_COMM_ALLGATHER", &ag) != 1) ag = "auto";
    pe->allgather_mode = strcmp(ag, "ring") == 0     ? ZM_AG_RING
                         : strcmp(ag, "direct") == 0 ? ZM_AG_DIRECT
                         : strcmp(ag, "mpi") == 0    ? ZM_AG_MPI
                                                     : ZM_AG_AUTO;
    const char *ar = "ring";
    pe->native_allreduce = zero__env_choice("ZERO_COMM_ALLREDUCE", &ar) == 1 && strcmp(ar, "mpi") == 0;
    pe->timeout_s = zero__comm_timeout_resolve(0, 0, NULL); /* the engine sets the config's later */
    int want_thread = 1;
    if (zero__env_flag("ZERO_COMM_PROGRESS_THREAD", &want_thread) != 1) want_thread = 1;
    if (thread_level >= MPI_THREAD_MULTIPLE && want_thread) {
        if (pthread_create(&pe->thread, NULL, progress_main, pe) == 0)
            pe->has_thread = 1;
        else
            zero__log(engine, ZERO_LOG_WARN, "comm: could not start the progress thread; "
                                             "async collectives will progress only inside test/wait");
    } else if (thread_level < MPI_THREAD_MULTIPLE) {
        zero__log(engine, ZERO_LOG_INFO,
                  "comm: MPI thread level %d is below MPI_THREAD_MULTIPLE: no progress thread, async "
                  "collectives progress only inside test/wait and blocking calls (less overlap)",
                  thread_level);
    }
    return pe;
}

void zero__zm_engine_release(zm_engine *pe) {
    pthread_mutex_lock(&pe->lock);
    int last = --pe->refs == 0;
    if (last) {
        pe->stop = 1;
        pthread_cond_broadcast(&pe->wake);
    }
    pthread_mutex_unlock(&pe->lock);
    if (!last) return;
    if (pe->has_thread) pthread_join(pe->thread, NULL);
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i) {
        if (pe->cache[i]) zero__engine_note_scratch(pe->engine, ZERO_TIER_HOST, -(int64_t)pe->cache_bytes[i]);
        free(pe->cache[i]);
    }
    pthread_cond_destroy(&pe->wake);
    pthread_mutex_destroy(&pe->lock);
    pe->hooks->maps_free(pe);
    free(pe);
}

void zero__zm_submit_locked(zm_engine *pe, zm_op *op) {
    zm_comm *c = ZM(op->base.comm);
    zero__zm_busy_begin(c);
    c->outstanding++;
    if (atomic_load(&pe->failed)) { /* never post messages into a broken sequence */
        op->done = 1;
        op->status = pe->fail_status;
        snprintf(op->err, sizeof op->err, "comm: refused, the communicator failed earlier: %.200s", pe->fail_why);
        zero__zm_busy_end(c);
        return;
    }
    op->prev = pe->tail;
    op->next = NULL;
    if (pe->tail) pe->tail->next = op; else pe->head = op;
    pe->tail = op;
    op->in_list = 1;
    c->ops_in_list++;
    /* Start it now in the caller's thread: the first messages go out without
     * waiting for the progress thread to wake up. */
    pe->hooks->advance(op);
    if (op->done) {
        zero__trace_op_done(&op->base.trace);
        list_remove(pe, op);
        zero__zm_busy_end(c);
    } else {
        pthread_cond_signal(&pe->wake);
    }
}

void zero__zm_drain_locked(zm_engine *pe, zm_comm *c) {
    for (;;) {
        if (atomic_load(&pe->failed)) return; /* what is left never completes: forsaken at free */
        int pending = 0;
        for (zm_op *op = pe->head; op; op = op->next)
            if (!c || ZM(op->base.comm) == c) pending = 1;
        if (!pending) return;
        if (!zero__zm_advance_all_locked(pe)) {
            pthread_mutex_unlock(&pe->lock);
            sched_yield();
            pthread_mutex_lock(&pe->lock);
        }
    }
}

void zero__zm_abandon_locked(zm_engine *pe, zm_comm *c) {
    zm_op *op = pe->head;
    while (op) {
        zm_op *next = op->next;
        if (ZM(op->base.comm) == c) {
            op->done = 1;
            op->status = ZERO_ERR_COMM;
            snprintf(op->err, sizeof op->err, "comm: MPI was finalized while this operation was in flight");
            if (op->scratch) pe->scratch_live -= op->scratch_bytes; /* leaked, out of the budget's count */
            op->scratch = NULL; /* MPI may still own it: never reuse */
            list_remove(pe, op);
            zero__zm_busy_end(c);
        }
        op = next;
    }
}

void *zero__zm_scratch_get_locked(zm_engine *pe, size_t bytes, size_t *got) {
    int best = -1;
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i)
        if (pe->cache[i] && pe->cache_bytes[i] >= bytes && (best < 0 || pe->cache_bytes[i] < pe->cache_bytes[best]))
            best = i;
    if (best >= 0) {
        void *p = pe->cache[best];
        *got = pe->cache_bytes[best];
        pe->cache[best] = NULL;
        pe->cache_bytes[best] = 0;
        return p;
    }
    *got = bytes;
    void *p = malloc(bytes ? bytes : 1);
    /* ring temporaries are communication scratch: ZERO_MEM_OTHER, host tier,
     * from allocation until freed (cached ones included; docs/memory.md) */
    if (p) zero__engine_note_scratch(pe->engine, ZERO_TIER_HOST, (int64_t)bytes);
    return p;
}

/* Bytes in the scratch cache. */
static size_t cached_bytes(const zm_engine *pe) {
    size_t t = 0;
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i) t += pe->cache_bytes[i];
    return t;
}

/* Free the smallest cached block; 0 when the cache is empty. */
static int evict_smallest(zm_engine *pe) {
    int small = -1;
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i)
        if (pe->cache[i] && (small < 0 || pe->cache_bytes[small] > pe->cache_bytes[i])) small = i;
    if (small < 0) return 0;
    zero__engine_note_scratch(pe->engine, ZERO_TIER_HOST, -(int64_t)pe->cache_bytes[small]);
    free(pe->cache[small]);
    pe->cache[small] = NULL;
    pe->cache_bytes[small] = 0;
    return 1;
}

int zero__zm_scratch_acquire_locked(zm_engine *pe, zm_op *op) {
    const size_t need = op->scratch_need;
    if (need > pe->scratch_budget) pe->scratch_budget = need;
    /* earlier ops of the same communicator: one holding scratch may make
     * us wait; one still waiting for scratch goes first (issue order) */
    int holder = 0;
    for (zm_op *p = pe->head; p && p != op; p = p->next) {
        if (p->base.comm != op->base.comm || p->done) continue;
        if (p->scratch) holder = 1;
        else if (p->scratch_need && p->kind == ZM_OP_RS_RING) return 0;
    }
    /* a cached block that fits keeps held + cached as it is */
    int best = -1;
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i)
        if (pe->cache[i] && pe->cache_bytes[i] >= need && (best < 0 || pe->cache_bytes[i] < pe->cache_bytes[best]))
            best = i;
    if (best < 0) {
        if (pe->scratch_live + need > pe->scratch_budget) {
            if (holder) return 0; /* the earlier op's completion frees room */
            zero__log(pe->engine, ZERO_LOG_DEBUG,
                      "comm: ring scratch past the budget (%zu + %zu > %zu bytes): held by another communicator's "
                      "operations", pe->scratch_live, need, pe->scratch_budget);
        }
        /* make room in the cache first, so that held + cached stays in budget */
        while (pe->scratch_live + cached_bytes(pe) + need > pe->scratch_budget && evict_smallest(pe)) {
        }
    }
    size_t got = 0;
    op->scratch = zero__zm_scratch_get_locked(pe, need, &got);
    if (!op->scratch) return -1;
    op->scratch_bytes = got;
    pe->scratch_live += got;
    return 1;
}

void zero__zm_scratch_release_locked(zm_engine *pe, zm_op *op) {
    if (!op->scratch) return;
    pe->scratch_live -= op->scratch_bytes;
    zero__zm_scratch_put_locked(pe, op->scratch, op->scratch_bytes);
    op->scratch = NULL;
    op->scratch_bytes = 0;
}

void zero__zm_scratch_put_locked(zm_engine *pe, void *p, size_t bytes) {
    if (!p) return;
    /* Keep it unless that would exceed the cap; evict smaller buffers first
     * (a large one can serve small requests, not the other way round). */
    size_t total = bytes;
    int empty = -1;
    for (int i = 0; i < ZM_CACHE_SLOTS; ++i) {
        total += pe->cache_bytes[i];
        if (!pe->cache[i]) empty = i;
    }
    while (total > pe->cache_cap || empty < 0) {
        int small = -1;
        for (int i = 0; i < ZM_CACHE_SLOTS; ++i)
            if (pe->cache[i] && (small < 0 || pe->cache_bytes[i] < pe->cache_bytes[small])) small = i;
        if (small < 0 || pe->cache_bytes[small] >= bytes) { /* p is the smallest: drop p */
            zero__engine_note_scratch(pe->engine, ZERO_TIER_HOST, -(int64_t)bytes);
            free(p);
            return;
        }
        total -= pe->cache_bytes[small];
        zero__engine_note_scratch(pe->engine, ZERO_TIER_HOST, -(int64_t)pe->cache_bytes[small]);
        free(pe->cache[small]);
        pe->cache[small] = NULL;
        pe->cache_bytes[small] = 0;
        empty = small;
    }
    pe->cache[empty] = p;
    pe->cache_bytes[empty] = bytes;
}

static zero_status finish(zm_engine *pe, zm_op *op) {
    /* pe->lock held */
    zm_comm *c = ZM(op->base.comm);
    zero_status st = op->status;
    if (st != ZERO_OK) zero__error(c->base.engine, st, "%s", op->err);
    c->outstanding--;
    zero__trace_op_finished(&op->base.trace);
    pe->hooks->free(pe, op);
    return st;
}

void zero__zm_fail_locked(zm_engine *pe, zero_status st, const char *why) {
    if (atomic_load(&pe->failed)) return;
    pe->fail_status = st;
    snprintf(pe->fail_why, sizeof pe->fail_why, "%s", why);
    atomic_store(&pe->failed, 1);
    pthread_cond_broadcast(&pe->wake);
}

zero_status zero__zm_failed_error(zm_comm *c, const char *what) {
    zm_engine *pe = c->pe;
    pthread_mutex_lock(&pe->lock);
    zero_status st = pe->fail_status;
    char why[sizeof pe->fail_why];
    snprintf(why, sizeof why, "%s", pe->fail_why);
    pthread_mutex_unlock(&pe->lock);
    return zero__error(c->base.engine, st, "comm: %s refused: the communicator failed earlier (%s)", what, why);
}

/* Give up on op after a timeout (or an earlier failure): it stays in the
 * list, owned by nobody, until its communicator is freed (forsake). */
static zero_status orphan_locked(zm_engine *pe, zm_op *op) {
    zm_comm *c = ZM(op->base.comm);
    op->orphaned = 1;
    c->outstanding--;
    return zero__error(c->base.engine, pe->fail_status, "%s", pe->fail_why);
}

static void timeout_why(zm_engine *pe, const zm_op *op, const zero__waiter *w, char *buf, size_t len) {
    char what[256];
    pe->hooks->describe(op, what, sizeof what);
    snprintf(buf, len,
             "comm: timed out waiting for a %.250s: no progress for %.1f s (ZERO_COMM_TIMEOUT / comm_timeout = %g s); a "
             "peer stopped, died or never issued the same collective",
             what, zero__waiter_idle(w), pe->timeout_s);
}

zero_status zero__zm_wait(zero_comm_req *req) {
    zm_op *op = (zm_op *)req;
    zm_engine *pe = ZM(req->comm)->pe;
    zero__waiter w;
    pthread_mutex_lock(&pe->lock);
    zero__waiter_start(&w, pe->timeout_s);
    pe->waiters++;
    while (!op->done && !atomic_load(&pe->failed)) {
        if (zero__zm_advance_all_locked(pe)) {
            zero__waiter_moved(&w);
            continue;
        }
        pthread_mutex_unlock(&pe->lock);
        zero__jitter(ZERO_JITTER_PROGRESS);
        int gave_up = zero__waiter_pause(&w);
        pthread_mutex_lock(&pe->lock);
        if (gave_up && !op->done) {
            char why[sizeof pe->fail_why];
            timeout_why(pe, op, &w, why, sizeof why);
            zero__zm_fail_locked(pe, ZERO_ERR_TIMEOUT, why);
        }
    }
    pe->waiters--;
    if (pe->waiters == 0 && pe->head) pthread_cond_signal(&pe->wake);
    zero_status st = op->done ? finish(pe, op) : orphan_locked(pe, op);
    pthread_mutex_unlock(&pe->lock);
    return st;
}

zero_status zero__zm_test(zero_comm_req *req, int *done) {
    zm_op *op = (zm_op *)req;
    zm_engine *pe = ZM(req->comm)->pe;
    pthread_mutex_lock(&pe->lock);
    if (!op->done && !atomic_load(&pe->failed)) zero__zm_advance_all_locked(pe);
    zero_status st = ZERO_OK;
    if (op->done) {
        st = finish(pe, op);
        *done = 1;
    } else if (atomic_load(&pe->failed)) {
        st = orphan_locked(pe, op); /* reported done: the caller must not use it again */
        *done = 1;
    } else {
        *done = 0;
    }
    pthread_mutex_unlock(&pe->lock);
    return st;
}

static void cancel_p2p(MPI_Request *r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    MPI_Request_free(r);
}

int zero__zm_forsake_locked(zm_engine *pe, zm_comm *c) {
    int left = 0;
    zm_op *op = pe->head;
    while (op) {
        zm_op *next = op->next;
        if (ZM(op->base.comm) == c) {
            if (op->kind == ZM_OP_RS_RING || op->kind == ZM_OP_AG_RING) {
                zm_ring *g = &op->ring;
                for (int i = 0; i < g->rcount; ++i) cancel_p2p(&g->rq[(g->rhead + i) % g->window]);
                for (int i = 0; i < g->scount; ++i) cancel_p2p(&g->sq[(g->shead + i) % g->window]);
                g->rcount = g->scount = 0;
            } else if (op->kind == ZM_OP_AG_DIRECT) {
                for (int i = 0; i < op->nreqs; ++i) cancel_p2p(&op->reqs[i]);
            } /* native collectives: MPI forbids cancelling or freeing them; leaked */
            list_remove(pe, op);
            zero__zm_busy_end(c);
            if (!op->orphaned) c->outstanding--;
            if (op->scratch) pe->scratch_live -= op->scratch_bytes; /* leaked below: out of the budget's count */
            /* Leaked on purpose: MPI may still write into the op's scratch,
             * receive buffers and counts (a cancel can fail once a message
             * has matched). */
            left++;
        }
        op = next;
    }
    return left;
}
#endif
