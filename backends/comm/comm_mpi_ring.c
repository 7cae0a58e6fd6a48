/* Nonblocking collectives of the MPI backend, as state machines advanced by
 * the progress engine (comm_mpi_progress.c) under the world lock.
 *
 * Reduce-scatter is a ring over nonblocking point-to-point because Open MPI
 * 4.1's MPI_Reduce_scatter_block is 1.5-1.8x slower than its MPI_Allreduce on
 * 64 MB here, while a ring moves (N-1)/N of the bytes once: N-1 steps; at
 * step k rank r sends block (r-k-1) mod N to r+1 and receives block
 * (r-k-2) mod N from r-1, adds its own contribution and forwards the partial
 * sum at step k+1; after the last step it holds the full sum of block r.
 * Block b is therefore summed in the fixed order b+1, b+2, ..., b, so the
 * result is bitwise repeatable.
 *
 * Pipelining: each block travels in chunks (ZERO_COMM_CHUNK_KB) with up to
 * ZERO_COMM_WINDOW requests posted per direction, so a chunk is forwarded as
 * soon as it was received and summed, and both directions stay busy.  Sends
 * and receives are each posted in (step, chunk) order, and MPI does not let
 * messages between a pair on one tag overtake each other, so the i-th send
 * matches the i-th receive without encoding the chunk in the tag; the tag
 * only separates concurrent operations (per-communicator sequence number).
 * Temporaries (from the world's scratch cache): two buffers of the largest
 * block, between which the forwarded partial sums alternate (one for N = 3,
 * none for N = 2); the last step lands in recv directly or, in place, in a
 * ring of `window` chunk slots that are summed into recv on arrival (at
 * most one block's worth: min(block, window x chunk) elements).  Scratch is
 * accounted as ZERO_MEM_OTHER, host tier (docs/memory.md), and budgeted
 * (issue 14): an op takes it at its first advance, only while the world's
 * scratch (held + cached) stays within the largest single op's need, else
 * after the earlier ops of its communicator release theirs, which they do
 * the moment their reduce-scatter phase ends (an allreduce's all-gather
 * phase needs none).  So the scratch peak is one op's, however many
 * reductions the bucket engine has in flight (stage 3's backward delays
 * completions: it held two sets where stage 2 held one).
 * Deadlock freedom: a receive into a buffer waits only for the send that
 * read the same chunk of that buffer one step earlier, and a send waits only
 * for the receive of the same chunk one step earlier; both are earlier in
 * (step, chunk) order, so by induction every message is eventually posted.
 *
 * Allgather: up to 8 ranks "direct" (everyone sends its block to everyone,
 * one round), above that the same ring without sums, straight into the
 * output.  Sum allreduce = ring reduce-scatter, then allgather, in place. */
#ifdef ZERO_HAVE_MPI
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm_mpi_internal.h"
#include "jitter.h"
#include "log.h"

/* ---- cursor arithmetic over (step, chunk) ---- */
static size_t nchunks(const zm_ring *g, int block) {
    size_t c = g->counts[block];
    return (c + g->chunk - 1) / g->chunk;
}
static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Block received / sent at step k. */
static int recv_block(const zm_op *op, int k) {
    const zm_ring *g = &op->ring;
    return op->kind == ZM_OP_RS_RING ? mod(g->r - k - 2, g->n) : mod(g->r - k - 1, g->n);
}
static int send_block(const zm_op *op, int k) {
    const zm_ring *g = &op->ring;
    return op->kind == ZM_OP_RS_RING ? mod(g->r - k - 1, g->n) : mod(g->r - k, g->n);
}

/* Skip steps whose block has no chunk left (zero counts). */
static void normalize(const zm_op *op, zm_cursor *c, int sending) {
    const zm_ring *g = &op->ring;
    while (c->k < g->nsteps && c->j >= nchunks(g, sending ? send_block(op, c->k) : recv_block(op, c->k))) {
        c->k++;
        c->j = 0;
    }
    if (c->k >= g->nsteps) {
        c->k = g->nsteps;
        c->j = 0;
    }
}
static void step_cursor(const zm_op *op, zm_cursor *c, int sending) {
    c->j++;
    normalize(op, c, sending);
}
static int before(zm_cursor a, zm_cursor b) { return a.k < b.k || (a.k == b.k && a.j < b.j); }
static int at_end(const zm_ring *g, zm_cursor c) { return c.k >= g->nsteps; }

static size_t chunk_len(const zm_ring *g, int block, size_t j) {
    size_t lo = j * g->chunk, n = g->counts[block];
    return n - lo < g->chunk ? n - lo : g->chunk;
}

static void fail(zm_op *op, int rc, const char *what) {
    op->status = zero__zm_error_text(rc, what, op->err, sizeof op->err);
    op->done = 1;
    /* Requests still posted may write into our buffers later: never hand
     * those buffers back (leak them rather than risk corrupting memory). */
    if (op->scratch) ZM(op->base.comm)->pe->scratch_live -= op->scratch_bytes; /* out of the budget's count */
    op->scratch = NULL;
}

/* The reduce-scatter phase is over: its scratch goes back at once (not when
 * the caller frees the request), so the next op of the budget can start. */
static void rs_phase_done(zm_op *op) { zero__zm_scratch_release_locked(ZM(op->base.comm)->pe, op); }

/* Take the reduce-scatter's scratch within the world's budget (progress
 * engine); returns 1 when the op may post messages, 0 to try again later. */
static int rs_scratch_ready(zm_op *op) {
    zm_ring *g = &op->ring;
    if (op->kind != ZM_OP_RS_RING || !op->scratch_need || op->scratch) return 1;
    int got = zero__zm_scratch_acquire_locked(ZM(op->base.comm)->pe, op);
    if (got < 0) {
        op->status = ZERO_ERR_OUT_OF_MEMORY;
        snprintf(op->err, sizeof op->err, "comm: out of memory for %zu bytes of ring scratch", op->scratch_need);
        op->done = 1;
        return 0;
    }
    if (!got) return 0;
    g->buf[0] = op->scratch;
    g->buf[1] = g->nbufs > 1 ? (char *)op->scratch + g->maxc * g->esz : g->buf[0];
    g->slots = (char *)op->scratch + (size_t)g->nbufs * g->maxc * g->esz;
    return 1;
}

/* Where the receive (k, j) lands. */
static char *recv_target(zm_op *op, int k, size_t j) {
    zm_ring *g = &op->ring;
    int b = recv_block(op, k);
    if (op->kind == ZM_OP_AG_RING) return g->recv + (g->displ[b] + j * g->chunk) * g->esz;
    if (k == g->nsteps - 1) {
        if (g->recv_into_out) return g->recv + j * g->chunk * g->esz;
        /* in place: the last step's chunks are summed into recv as soon as
         * they arrive, so a small ring of slots (cache-warm) is enough */
        return g->slots + (j % (size_t)g->window) * g->chunk * g->esz;
    }
    return g->buf[k % 2] + j * g->chunk * g->esz;
}

/* Where the send (k, j) reads from. */
static const char *send_source(zm_op *op, int k, size_t j) {
    zm_ring *g = &op->ring;
    int b = send_block(op, k);
    if (op->kind == ZM_OP_AG_RING) return g->recv + (g->displ[b] + j * g->chunk) * g->esz;
    if (k == 0) return g->send + (g->displ[b] + j * g->chunk) * g->esz;
    return g->buf[(k - 1) % 2] + j * g->chunk * g->esz;
}

/* A completed receive: RS adds this rank's contribution. */
static void on_received(zm_op *op, zm_cursor c) {
    zm_ring *g = &op->ring;
    if (op->kind != ZM_OP_RS_RING) return;
    zero__jitter(ZERO_JITTER_RING_RECV);
    int b = recv_block(op, c.k);
    size_t len = chunk_len(g, b, c.j);
    const char *own = g->send + (g->displ[b] + c.j * g->chunk) * g->esz;
    char *in = recv_target(op, c.k, c.j);
    char *out = c.k == g->nsteps - 1 ? g->recv + c.j * g->chunk * g->esz : in;
    /* incoming partial sum first, own value second: the order is part of
     * the bitwise-repeatability contract */
    zero__comm_sum3(out, in, own, len, g->dt);
}

static int can_post_recv(zm_op *op, zm_cursor c) {
    zm_ring *g = &op->ring;
    if (op->kind != ZM_OP_RS_RING || c.k < 2) return 1;
    /* last step: recv itself, or a slot whose previous chunk (j - window)
     * was already summed, since at most `window` receives are posted */
    if (c.k == g->nsteps - 1) return 1;
    /* buf[k%2] chunk j was last filled by the latest earlier step of the
     * same parity whose block has a chunk j, and read by the send one step
     * after that.  With zero counts that step need not be k-2: steps whose
     * blocks are empty are skipped, so the last reader can be send (k-3, j)
     * or earlier while send (k-1, j) does not exist.  Waiting until every
     * send before (k-1, j) in (step, chunk) order is complete covers the
     * last reader whatever was skipped (sends complete in that order), and
     * cannot deadlock: those sends depend only on receives before (k, j).
     * (The old test returned early when step k-1 had no chunk j and let
     * this receive overwrite a buffer a pending send was still reading:
     * wrong sums whenever a bucket spans non-adjacent blocks, e.g. N >= 9
     * with partitions smaller than a bucket.) */
    zm_cursor dep = {c.k - 1, c.j};
    return before(dep, g->sdone);
}

static int can_post_send(zm_op *op, zm_cursor c) {
    zm_ring *g = &op->ring;
    if (c.k == 0) return 1;
    zm_cursor dep = {c.k - 1, c.j}; /* the receive (and sum) of the same chunk one step earlier */
    return before(dep, g->rdone);
}

static void ring_start_cursors(zm_op *op) {
    zm_ring *g = &op->ring;
    memset(&g->rpost, 0, sizeof g->rpost);
    memset(&g->spost, 0, sizeof g->spost);
    normalize(op, &g->rpost, 0);
    g->rdone = g->rpost;
    normalize(op, &g->spost, 1);
    g->sdone = g->spost;
}

/* Allreduce, second half: every rank holds the sum of its block; gather
 * them in place.  The same tag is safe: all our phase-1 receives completed
 * before any phase-2 receive is posted, and a peer's phase-2 sends follow
 * its phase-1 sends, which MPI matches in order. */
static void phase_to_allgather(zm_op *op) {
    zm_ring *g = &op->ring;
    g->then_allgather = 0;
    op->kind = ZM_OP_AG_RING;
    g->recv = (char *)g->send; /* AG addresses the whole buffer; RS addressed our block */
    g->rhead = g->rcount = g->shead = g->scount = 0;
    ring_start_cursors(op);
}

static int use_direct(const zm_op *op) {
    zm_engine *pe = ZM(op->base.comm)->pe;
    int n = op->ring.n;
    return pe->allgather_mode == ZM_AG_DIRECT || (pe->allgather_mode != ZM_AG_RING && n <= 8);
}

/* Direct allgather: every rank sends its block to every other rank, and
 * each block lands straight in place: one round, no forwarding chain.  On
 * one node (shared memory, single-copy CMA) that beats the ring, whose N-1
 * dependent hops each wait for a peer to be scheduled; across many nodes
 * the ring's neighbour-only traffic wins, hence the rank threshold.
 * Receives are posted first.  Messages are cut in chunk-sized pieces
 * (ZERO_COMM_CHUNK_KB), which measured faster than one large message. */
static void direct_post(zm_op *op) {
    zm_ring *g = &op->ring;
    const size_t ZM_DIRECT_PIECE = g->chunk * g->esz;
    MPI_Comm comm = ZM(op->base.comm)->comm;
    size_t nreq = 0, mine = g->counts[g->r] * g->esz;
    for (int b = 0; b < g->n; ++b)
        if (b != g->r) {
            nreq += (g->counts[b] * g->esz + ZM_DIRECT_PIECE - 1) / ZM_DIRECT_PIECE;
            nreq += (mine + ZM_DIRECT_PIECE - 1) / ZM_DIRECT_PIECE;
        }
    op->reqs = calloc(nreq ? nreq : 1, sizeof(MPI_Request));
    op->req_peer = calloc(nreq ? nreq : 1, sizeof(int));
    op->req_idx = calloc(nreq ? nreq : 1, sizeof(int));
    if (!op->reqs || !op->req_peer || !op->req_idx) {
        op->status = ZERO_ERR_OUT_OF_MEMORY;
        snprintf(op->err, sizeof op->err, "comm: out of memory posting an allgather");
        op->done = 1;
        return;
    }
    int k = 0, rc;
    for (int d = 1; d < g->n; ++d) { /* staggered so that not everyone reads rank 0 first */
        int b = mod(g->r - d, g->n);
        char *dst = g->recv + g->displ[b] * g->esz;
        for (size_t lo = 0, len = g->counts[b] * g->esz; lo < len; lo += ZM_DIRECT_PIECE) {
            int piece = (int)(len - lo < ZM_DIRECT_PIECE ? len - lo : ZM_DIRECT_PIECE);
            op->req_peer[k] = b;
            if ((rc = MPI_Irecv(dst + lo, piece, MPI_BYTE, b, g->tag, comm, &op->reqs[k++])) != MPI_SUCCESS) {
                op->nreqs = k - 1;
                fail(op, rc, "allgather MPI_Irecv");
                return;
            }
        }
    }
    const char *src = g->recv + g->displ[g->r] * g->esz;
    for (int d = 1; d < g->n; ++d) {
        int b = mod(g->r + d, g->n);
        for (size_t lo = 0; lo < mine; lo += ZM_DIRECT_PIECE) {
            int piece = (int)(mine - lo < ZM_DIRECT_PIECE ? mine - lo : ZM_DIRECT_PIECE);
            op->req_peer[k] = b;
            if ((rc = MPI_Isend(src + lo, piece, MPI_BYTE, b, g->tag, comm, &op->reqs[k++])) != MPI_SUCCESS) {
                op->nreqs = k - 1;
                fail(op, rc, "allgather MPI_Isend");
                return;
            }
        }
    }
    op->nreqs = k;
}

static int native_advance(zm_op *op);

/* MPI_Testsome rather than MPI_Testall: every piece that lands counts as
 * progress, so a long all-gather that keeps moving is never mistaken for a
 * stalled one by the wait's no-progress limit (comm_wait.h). */
static int direct_advance(zm_op *op) {
    int moved = 0;
    if (!op->reqs) {
        zero__jitter(ZERO_JITTER_RING_POST);
        direct_post(op);
        if (op->done) return 1;
        moved = 1;
    }
    int outcount = 0;
    int rc = MPI_Testsome(op->nreqs, op->reqs, &outcount, op->req_idx, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return fail(op, rc, "allgather MPI_Testsome"), 1;
    if (outcount == MPI_UNDEFINED || op->nreqs == 0) { /* every request completed (now MPI_REQUEST_NULL) */
        op->done = 1;
        return 1;
    }
    return moved | (outcount > 0);
}

static int ring_advance(zm_op *op) {
    zm_ring *g = &op->ring;
    MPI_Comm comm = ZM(op->base.comm)->comm;
    int moved = 0, again = 1, rc, flag;
    if (!rs_scratch_ready(op)) return op->done; /* waits for the scratch budget (or failed) */
    while (again && !op->done) {
        again = 0;
        while (g->rcount > 0) {
            rc = MPI_Test(&g->rq[g->rhead], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return fail(op, rc, "ring receive"), 1;
            if (!flag) break;
            on_received(op, g->rdone);
            step_cursor(op, &g->rdone, 0);
            g->rhead = (g->rhead + 1) % g->window;
            g->rcount--;
            again = 1;
        }
        while (g->scount > 0) {
            rc = MPI_Test(&g->sq[g->shead], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return fail(op, rc, "ring send"), 1;
            if (!flag) break;
            step_cursor(op, &g->sdone, 1);
            g->shead = (g->shead + 1) % g->window;
            g->scount--;
            again = 1;
        }
        while (g->rcount < g->window && !at_end(g, g->rpost) && can_post_recv(op, g->rpost)) {
            int b = recv_block(op, g->rpost.k);
            int bytes = (int)(chunk_len(g, b, g->rpost.j) * g->esz);
            int slot = (g->rhead + g->rcount) % g->window;
            zero__jitter(ZERO_JITTER_RING_POST);
            rc = MPI_Irecv(recv_target(op, g->rpost.k, g->rpost.j), bytes, MPI_BYTE, g->prev, g->tag, comm,
                           &g->rq[slot]);
            if (rc != MPI_SUCCESS) return fail(op, rc, "ring MPI_Irecv"), 1;
            g->rcount++;
            step_cursor(op, &g->rpost, 0);
            again = 1;
        }
        while (g->scount < g->window && !at_end(g, g->spost) && can_post_send(op, g->spost)) {
            int b = send_block(op, g->spost.k);
            int bytes = (int)(chunk_len(g, b, g->spost.j) * g->esz);
            int slot = (g->shead + g->scount) % g->window;
            zero__jitter(ZERO_JITTER_RING_POST);
            rc = MPI_Isend(send_source(op, g->spost.k, g->spost.j), bytes, MPI_BYTE, g->next, g->tag, comm,
                           &g->sq[slot]);
            if (rc != MPI_SUCCESS) return fail(op, rc, "ring MPI_Isend"), 1;
            g->scount++;
            step_cursor(op, &g->spost, 1);
            again = 1;
        }
        if (at_end(g, g->rdone) && at_end(g, g->sdone)) {
            if (op->kind == ZM_OP_RS_RING) rs_phase_done(op);
            if (g->then_allgather && use_direct(op)) {
                g->then_allgather = 0;
                g->recv = (char *)g->send; /* the whole buffer now */
                op->kind = ZM_OP_AG_DIRECT; /* posted by the next advance */
                return 1;
            } else if (g->then_allgather) {
                phase_to_allgather(op);
                again = 1;
            } else {
                op->done = 1;
            }
        }
        moved |= again;
    }
    return moved;
}

static int native_advance(zm_op *op) {
    int flag = 0;
    int rc = MPI_Testall(op->nreqs, op->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return fail(op, rc, "MPI_Testall"), 1;
    if (flag) op->done = 1;
    return flag;
}

int zero__zm_op_advance_locked(zm_op *op) {
    if (op->done) return 0;
    if (zero__zm_shm_active(op)) {
        /* shared memory first (comm_mpi_shm.c); the ranks may agree on the
         * transport path instead, which then starts at once */
        int moved = zero__zm_shm_advance_locked(op);
        if (op->done || zero__zm_shm_active(op)) return moved;
    }
    if (op->kind == ZM_OP_NATIVE) return native_advance(op);
    if (op->kind == ZM_OP_AG_DIRECT) return direct_advance(op);
    return ring_advance(op);
}

void zero__zm_op_free_locked(zm_engine *pe, zm_op *op) {
    zero__zm_scratch_release_locked(pe, op);
    free(op->ring.counts);
    free(op->reqs);
    free(op->req_peer);
    free(op->req_idx);
    free(op->icounts);
    free((void *)op->shm.peer);
    free(op);
}

/* ---- what an op waits for (timeout texts) ---- */
static const char *kind_name(const zm_op *op) {
    switch (op->kind) {
    case ZM_OP_RS_RING: return op->ring.then_allgather ? "ring all-reduce (reduce-scatter phase)" : "ring reduce-scatter";
    case ZM_OP_AG_RING: return "ring all-gather";
    case ZM_OP_AG_DIRECT: return "direct all-gather";
    default: return "MPI nonblocking collective";
    }
}

void zero__zm_op_describe_locked(const zm_op *op, char *buf, size_t len) {
    const zm_ring *g = &op->ring;
    if (zero__zm_shm_active(op)) {
        zero__zm_shm_describe_locked(op, buf, len);
        return;
    }
    int n = snprintf(buf, len, "%s of %zu bytes on %d ranks", kind_name(op), op->bytes, op->base.comm->size);
    if (n < 0 || (size_t)n >= len) return;
    if (op->kind == ZM_OP_RS_RING || op->kind == ZM_OP_AG_RING) {
        /* The ring receives only from prev and sends only to next: a pending
         * receive names the rank that did not send, a pending send the one
         * that did not receive (the stalled rank may be further round the
         * ring: each rank waits for its predecessor). */
        if (g->rcount > 0)
            snprintf(buf + n, len - (size_t)n, ", at ring step %d of %d: no message from rank %d (ring predecessor)",
                     g->rdone.k + 1, g->nsteps, g->prev);
        else if (g->scount > 0)
            snprintf(buf + n, len - (size_t)n, ", at ring step %d of %d: rank %d (ring successor) took no message",
                     g->sdone.k + 1, g->nsteps, g->next);
        return;
    }
    if (op->kind == ZM_OP_AG_DIRECT && op->req_peer && op->nreqs > 0) {
        /* MPI_Request_get_status does not free a request: safe to ask. */
        int seen[64] = {0}, listed = 0;
        n += snprintf(buf + n, len - (size_t)n, ": not arrived from or not taken by rank(s)");
        for (int i = 0; i < op->nreqs && (size_t)n < len; ++i) {
            int flag = 1, peer = op->req_peer[i];
            MPI_Request r = op->reqs[i];
            if (r != MPI_REQUEST_NULL) MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE);
            if (flag || (peer < 64 && seen[peer])) continue;
            if (peer < 64) seen[peer] = 1;
            if (++listed > 16) {
                n += snprintf(buf + n, len - (size_t)n, " ...");
                break;
            }
            n += snprintf(buf + n, len - (size_t)n, " %d", peer);
        }
        return;
    }
    snprintf(buf + n, len - (size_t)n, " (MPI does not say which rank has not arrived)");
}

/* ---- issuing ---- */
static zm_op *op_new(zero_comm *m, int kind) {
    zm_op *op = calloc(1, sizeof *op);
    if (!op) return NULL;
    op->base.comm = m;
    op->base.trace.backend_emits = 1; /* finish() records it, with the time the op really ended */
    op->kind = kind;
    return op;
}

static void count_issue(zm_comm *c, uint64_t *calls, uint64_t *bytes, uint64_t n) {
    pthread_mutex_lock(&c->stat_lock);
    ++*calls;
    *bytes += n;
    pthread_mutex_unlock(&c->stat_lock);
}

static zero_status submit(zm_comm *c, zm_op *op, zero_comm_req **req) {
    zm_engine *pe = c->pe;
    pthread_mutex_lock(&pe->lock);
    if (op->kind != ZM_OP_NATIVE) op->ring.tag = (int)(c->seq++ % (uint32_t)c->tag_mod);
    zero__zm_shm_number_locked(c, op);
    zero__zm_submit_locked(pe, op);
    pthread_mutex_unlock(&pe->lock);
    *req = &op->base;
    return ZERO_OK;
}

static zero_status ring_allreduce(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req);

zero_status zero__zm_iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op rop,
                                zero_comm_req **req) {
    zm_comm *c = ZM(m);
    MPI_Datatype t = zero__zm_datatype(dt, 1);
    /* MPI has no 16-bit float sum: bf16/fp16 sums always take our ring */
    const int sum16 = rop == ZERO_OP_SUM && (dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_F16);
    if (t == MPI_DATATYPE_NULL && !sum16)
        return zero__error(m->engine, zero__dtype_size(dt) ? ZERO_ERR_UNSUPPORTED : ZERO_ERR_INVALID_ARGUMENT,
                           "comm: iallreduce of dtype %d is not supported", dt);
    MPI_Op mop = rop == ZERO_OP_SUM ? MPI_SUM : rop == ZERO_OP_MAX ? MPI_MAX : rop == ZERO_OP_MIN ? MPI_MIN : MPI_OP_NULL;
    if (mop == MPI_OP_NULL) return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown reduce op %d", rop);
    if (sum16 || (rop == ZERO_OP_SUM && zero__comm_dtype_summable(dt) && !c->pe->native_allreduce)) {
        size_t *counts = malloc((size_t)m->size * sizeof *counts);
        if (!counts) return ZERO_ERR_OUT_OF_MEMORY;
        for (int b = 0; b < m->size; ++b)
            counts[b] = count / (size_t)m->size + ((size_t)b < count % (size_t)m->size ? 1 : 0);
        zero_status st = ring_allreduce(m, buf, counts, dt, req);
        free(counts);
        return st;
    }
    zm_op *op = op_new(m, ZM_OP_NATIVE);
    size_t piece = (size_t)INT_MAX;
    int n = (int)((count + piece - 1) / piece);
    if (op) op->reqs = calloc(n ? (size_t)n : 1, sizeof(MPI_Request));
    if (!op || !op->reqs) {
        if (op) free(op);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    op->nreqs = n;
    count_issue(c, &m->counters.allreduce_calls, &m->counters.bytes_reduced, count * zero__dtype_size(dt));
    /* MPI_Iallreduce is issued under the world lock, in the caller's order,
     * so collectives keep the order the caller issued them in. */
    zm_engine *pe = c->pe;
    pthread_mutex_lock(&pe->lock);
    for (int i = 0; i < n; ++i) {
        size_t lo = (size_t)i * piece, len = count - lo < piece ? count - lo : piece;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + lo * zero__dtype_size(dt), (int)len, t, mop, c->comm,
                                &op->reqs[i]);
        if (rc != MPI_SUCCESS) {
            char text[256];
            zero_status st = zero__zm_error_text(rc, "MPI_Iallreduce", text, sizeof text);
            pthread_mutex_unlock(&pe->lock);
            free(op->reqs);
            free(op);
            return zero__error(m->engine, st, "%s", text);
        }
    }
    zero__zm_submit_locked(pe, op);
    pthread_mutex_unlock(&pe->lock);
    *req = &op->base;
    return ZERO_OK;
}

/* Common checks and setup of a ring op; returns the op or sets *st. */
static zm_op *ring_new(zero_comm *m, int kind, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                       zero_status *st) {
    zm_comm *c = ZM(m);
    size_t esz = zero__dtype_size(dt);
    *st = ZERO_OK;
    if (!esz) {
        *st = zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown dtype %d", dt);
        return NULL;
    }
    if (kind == ZM_OP_RS_RING && !zero__comm_dtype_summable(dt)) {
        *st = zero__error(m->engine, ZERO_ERR_UNSUPPORTED,
                          "comm: reduce-scatter sums of dtype %d (bf16/fp16) are not supported", dt);
        return NULL;
    }
    zm_op *op = op_new(m, kind);
    size_t *arr = calloc(2 * (size_t)m->size, sizeof(size_t));
    if (!op || !arr) {
        free(op);
        free(arr);
        *st = ZERO_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    zm_ring *g = &op->ring;
    g->n = m->size;
    g->r = m->rank;
    g->next = (g->r + 1) % g->n;
    g->prev = (g->r + g->n - 1) % g->n;
    g->nsteps = g->n - 1;
    g->esz = esz;
    g->dt = dt;
    g->send = send;
    g->recv = recv;
    g->counts = arr;
    g->displ = arr + m->size;
    size_t total = 0, maxc = 0;
    for (int b = 0; b < g->n; ++b) {
        g->counts[b] = counts[b];
        g->displ[b] = total;
        total += counts[b];
        if (counts[b] > maxc) maxc = counts[b];
    }
    g->chunk = c->pe->chunk_bytes / esz ? c->pe->chunk_bytes / esz : 1;
    if (g->chunk > (size_t)INT_MAX / esz) g->chunk = (size_t)INT_MAX / esz;
    g->window = c->pe->window;
    g->end.k = g->nsteps;
    op->bytes = total * esz;
    (void)maxc;
    return op;
}


/* Reduce-scatter setup shared by reduce-scatter and allreduce: temporaries
 * and whether the last step can land in recv directly. */
static zero_status rs_setup(zm_comm *c, zm_op *op) {
    zm_ring *g = &op->ring;
    size_t total = op->bytes / g->esz, mine = g->counts[g->r], maxc = 0;
    for (int b = 0; b < g->n; ++b)
        if (g->counts[b] > maxc) maxc = g->counts[b];
    if (g->n == 1) {
        if (mine && (const char *)g->recv != g->send) memmove(g->recv, g->send, mine * g->esz);
        g->nsteps = 0;
        return ZERO_OK;
    }
    /* Receive the final partial sums straight into recv unless recv
     * overlaps send (in place): then they go through a temporary. */
    const char *s0 = g->send, *s1 = g->send + total * g->esz;
    const char *r0 = g->recv, *r1 = g->recv + mine * g->esz;
    g->recv_into_out = !mine || !total || r1 <= s0 || r0 >= s1;
    /* temporaries: two block buffers for the partial sums being forwarded
     * (one if there is a single forwarding step), plus `window` chunk slots
     * for the last step when it cannot land in recv directly */
    int nbufs = g->nsteps - 1 > 2 ? 2 : g->nsteps - 1;
    /* Chunk j of the last step lands at slot (j % window) * chunk: a block
     * of maxc elements touches at most min(maxc, window * chunk) of them
     * (a block smaller than one chunk needs one block, not `window` of
     * them: docs/memory.md, the ring scratch cap). */
    size_t slot_span = (size_t)g->window * g->chunk;
    if (slot_span > maxc) slot_span = maxc;
    size_t slots_elems = g->recv_into_out ? 0 : slot_span;
    /* taken at the op's first advance, within the world's scratch budget
     * (zero__zm_scratch_acquire_locked), and released when this phase ends */
    g->nbufs = nbufs;
    g->maxc = maxc;
    if ((nbufs > 0 || slots_elems > 0) && maxc) op->scratch_need = ((size_t)nbufs * maxc + slots_elems) * g->esz;
    (void)c;
    return ZERO_OK;
}

zero_status zero__zm_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                      zero_dtype dt, zero_comm_req **req) {
    zm_comm *c = ZM(m);
    zero_status st;
    zm_op *op = ring_new(m, ZM_OP_RS_RING, send, recv, counts, dt, &st);
    if (!op) return st;
    size_t total = op->bytes / op->ring.esz, mine = counts[op->ring.r];
    if ((total && !send) || (mine && !recv)) {
        zero__zm_op_free_locked(c->pe, op); /* holds nothing shared yet */
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: reduce-scatter with a NULL buffer");
    }
    count_issue(c, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, op->bytes);
    if ((st = rs_setup(c, op)) != ZERO_OK) {
        zero__zm_op_free_locked(c->pe, op);
        return st;
    }
    ring_start_cursors(op);
    return submit(c, op, req);
}

/* Sum allreduce as ring reduce-scatter + ring allgather, in place: twice
 * the bytes of a reduce-scatter, progressed by our engine (libnbc's
 * MPI_Iallreduce measured several times slower here), and every rank ends
 * with bitwise the same values, each block summed once by its owner. */
static zero_status ring_allreduce(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req) {
    zm_comm *c = ZM(m);
    zero_status st;
    zm_op *op = ring_new(m, ZM_OP_RS_RING, buf, NULL, counts, dt, &st);
    if (!op) return st;
    zm_ring *g = &op->ring;
    g->recv = (char *)buf + g->displ[g->r] * g->esz;
    g->then_allgather = g->n > 1;
    count_issue(c, &m->counters.allreduce_calls, &m->counters.bytes_reduced, op->bytes);
    if ((st = rs_setup(c, op)) != ZERO_OK) {
        zero__zm_op_free_locked(c->pe, op);
        return st;
    }
    ring_start_cursors(op);
    return submit(c, op, req);
}

/* Allreduce over given blocks (the bucket engine passes the layout's rank
 * shares clipped to a bucket): each block is reduced by the same ring as
 * zero__zm_ireduce_scatterv with these counts, so its sum is bitwise the one
 * a reduce-scatter over the same layout forms (issue 13: stage 0 split every
 * bucket evenly instead, which gave its elements other owners, hence another
 * summation order, than stages 1-3 whenever a bucket was not a whole group).
 * ZERO_COMM_ALLREDUCE=mpi and non-summable types keep MPI's own allreduce. */
zero_status zero__zm_iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req) {
    zm_comm *c = ZM(m);
    if (!zero__comm_dtype_summable(dt) || (c->pe->native_allreduce && dt != ZERO_DTYPE_BF16 && dt != ZERO_DTYPE_F16)) {
        size_t total = 0;
        for (int b = 0; b < m->size; ++b) total += counts[b];
        return zero__zm_iallreduce(m, buf, total, dt, ZERO_OP_SUM, req);
    }
    return ring_allreduce(m, buf, counts, dt, req);
}

static zero_status native_allgatherv(zero_comm *m, zm_op *op, zero_comm_req **req) {
    zm_comm *c = ZM(m);
    zm_ring *g = &op->ring;
    for (int b = 0; b < g->n; ++b)
        if (g->displ[b] + g->counts[b] > (size_t)INT_MAX) {
            zero__zm_op_free_locked(c->pe, op);
            return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm: MPI_Iallgatherv limited to INT_MAX elements");
        }
    op->kind = ZM_OP_NATIVE;
    op->icounts = calloc(2 * (size_t)g->n, sizeof(int));
    op->reqs = calloc(1, sizeof(MPI_Request));
    if (!op->icounts || !op->reqs) {
        zero__zm_op_free_locked(c->pe, op);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    op->idispl = op->icounts + g->n;
    for (int b = 0; b < g->n; ++b) {
        op->icounts[b] = (int)g->counts[b];
        op->idispl[b] = (int)g->displ[b];
    }
    op->nreqs = 1;
    MPI_Datatype t = zero__zm_datatype(g->dt, 0);
    zm_engine *pe = c->pe;
    pthread_mutex_lock(&pe->lock);
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, t, g->recv, op->icounts, op->idispl, t, c->comm, &op->reqs[0]);
    if (rc != MPI_SUCCESS) {
        char text[256];
        zero_status st = zero__zm_error_text(rc, "MPI_Iallgatherv", text, sizeof text);
        zero__zm_op_free_locked(pe, op);
        pthread_mutex_unlock(&pe->lock);
        return zero__error(m->engine, st, "%s", text);
    }
    zero__zm_submit_locked(pe, op);
    pthread_mutex_unlock(&pe->lock);
    *req = &op->base;
    return ZERO_OK;
}

zero_status zero__zm_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                                 zero_comm_req **req) {
    zm_comm *c = ZM(m);
    zero_status st;
    zm_op *op = ring_new(m, ZM_OP_AG_RING, send, recv, counts, dt, &st);
    if (!op) return st;
    zm_ring *g = &op->ring;
    size_t total = op->bytes / g->esz, mine = counts[g->r];
    if ((total && !recv) || (mine && !send)) {
        zero__zm_op_free_locked(c->pe, op);
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: allgather with a NULL buffer");
    }
    count_issue(c, &m->counters.allgather_calls, &m->counters.bytes_gathered, op->bytes);
    char *own = g->recv + g->displ[g->r] * g->esz;
    if (mine && (const char *)send != own) memmove(own, send, mine * g->esz);
    if (g->n == 1) g->nsteps = 0;
    else if (c->pe->allgather_mode == ZM_AG_MPI) return native_allgatherv(m, op, req);
    else if (use_direct(op)) op->kind = ZM_OP_AG_DIRECT;
    ring_start_cursors(op);
    return submit(c, op, req);
}
#endif
