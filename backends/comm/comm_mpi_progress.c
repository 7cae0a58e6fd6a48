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
 *    the thread stands back meanwhile, so there is one poller, not two.
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
#include "comm_mpi_internal.h"
#include "memory.h"
#include "jitter.h"
#include "log.h"

static long env_long(const char *name, long dflt, long lo, long hi) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || v < lo || v > hi) return dflt;
    return v;
}

static void sleep_us(unsigned us) {
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
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
        moved |= zero__zm_op_advance_locked(op);
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

static void *progress_main(void *arg) {
    zm_engine *pe = arg;
    /* Default timer slack (50 us) would turn our short back-off sleeps into
     * long ones; the thread is named so that it is recognisable in top. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    prctl(PR_SET_NAME, "zero-comm", 0, 0, 0);
    zero__trace_thread_name("progress");
    unsigned backoff = 2;
    pthread_mutex_lock(&pe->lock);
    while (!pe->stop) {
        if (!pe->head || pe->waiters > 0) {
            pthread_cond_wait(&pe->wake, &pe->lock);
            backoff = 2;
            continue;
        }
        uint64_t t_pass = zero__trace_now();
        if (zero__zm_advance_all_locked(pe)) {
            if (t_pass) zero__trace_complete("progress.pass", "comm", t_pass, zero__trace_clock(), ZERO__LANE_NONE, -1, NULL, 0, NULL, 0);
            backoff = 2;
            pthread_mutex_unlock(&pe->lock);
            zero__jitter(ZERO_JITTER_PROGRESS);
            sched_yield(); /* let an issuing host thread take the lock */
        } else {
            unsigned us = backoff;
            backoff = backoff * 2 > pe->poll_us ? pe->poll_us : backoff * 2;
            pthread_mutex_unlock(&pe->lock);
            sleep_us(us);
        }
        pthread_mutex_lock(&pe->lock);
    }
    pthread_mutex_unlock(&pe->lock);
    return NULL;
}

zm_engine *zero__zm_engine_create(int thread_level, struct zero_engine *engine) {
    zm_engine *pe = calloc(1, sizeof *pe);
    if (!pe) return NULL;
    pthread_mutex_init(&pe->lock, NULL);
    pthread_cond_init(&pe->wake, NULL);
    pe->refs = 1;
    pe->engine = engine;
    pe->thread_level = thread_level;
    pe->poll_us = (unsigned)env_long("ZERO_COMM_POLL_US", 100, 1, 100000);
    pe->chunk_bytes = (size_t)env_long("ZERO_COMM_CHUNK_KB", 512, 4, 1L << 20) * 1024u;
    pe->window = (int)env_long("ZERO_COMM_WINDOW", 8, 1, ZM_MAX_WINDOW);
    pe->cache_cap = (size_t)env_long("ZERO_COMM_SCRATCH_CACHE_MB", 64, 0, 1L << 20) << 20;
    const char *ag = getenv("ZERO_COMM_ALLGATHER");
    pe->allgather_mode = !ag ? ZM_AG_AUTO
                         : strcmp(ag, "ring") == 0   ? ZM_AG_RING
                         : strcmp(ag, "direct") == 0 ? ZM_AG_DIRECT
                         : strcmp(ag, "mpi") == 0    ? ZM_AG_MPI
                                                     : ZM_AG_AUTO;
    const char *ar = getenv("ZERO_COMM_ALLREDUCE");
    pe->native_allreduce = ar && strcmp(ar, "mpi") == 0;
    int want_thread = env_long("ZERO_COMM_PROGRESS_THREAD", 1, 0, 1) != 0;
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
    free(pe);
}

void zero__zm_submit_locked(zm_engine *pe, zm_op *op) {
    zm_comm *c = ZM(op->base.comm);
    zero__zm_busy_begin(c);
    c->outstanding++;
    op->prev = pe->tail;
    op->next = NULL;
    if (pe->tail) pe->tail->next = op; else pe->head = op;
    pe->tail = op;
    op->in_list = 1;
    c->ops_in_list++;
    /* Start it now in the caller's thread: the first messages go out without
     * waiting for the progress thread to wake up. */
    zero__zm_op_advance_locked(op);
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
    zero__zm_op_free_locked(pe, op);
    return st;
}

zero_status zero__zm_wait(zero_comm_req *req) {
    zm_op *op = (zm_op *)req;
    zm_engine *pe = ZM(req->comm)->pe;
    double idle_since = 0;
    pthread_mutex_lock(&pe->lock);
    pe->waiters++;
    while (!op->done) {
        if (zero__zm_advance_all_locked(pe)) {
            idle_since = 0;
            continue;
        }
        pthread_mutex_unlock(&pe->lock);
        zero__jitter(ZERO_JITTER_PROGRESS);
        /* Like MPI's own blocking waits: spin with yields (other ranks may
         * share our core) for up to ~2 ms, then sleep briefly between polls
         * so that a peer that is far behind gets the CPU. */
        double now = zero__comm_now();
        if (idle_since == 0) idle_since = now;
        if (now - idle_since < 2e-3)
            sched_yield();
        else
            sleep_us(pe->poll_us < 20 ? pe->poll_us : 20);
        pthread_mutex_lock(&pe->lock);
    }
    pe->waiters--;
    if (pe->waiters == 0 && pe->head) pthread_cond_signal(&pe->wake);
    zero_status st = finish(pe, op);
    pthread_mutex_unlock(&pe->lock);
    return st;
}

zero_status zero__zm_test(zero_comm_req *req, int *done) {
    zm_op *op = (zm_op *)req;
    zm_engine *pe = ZM(req->comm)->pe;
    pthread_mutex_lock(&pe->lock);
    if (!op->done) zero__zm_advance_all_locked(pe);
    *done = op->done;
    zero_status st = op->done ? finish(pe, op) : ZERO_OK;
    pthread_mutex_unlock(&pe->lock);
    return st;
}
#endif
