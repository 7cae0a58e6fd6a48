/* Shared-memory collectives of the MPI backend (issue 18).
 *
 * Why: on one node the ring moves every block through Open MPI's shared-
 * memory transport, a copy into a temporary (process_vm_readv) before each
 * sum, and it synchronises N-1 times per block.  perf over 4 ranks of the
 * peers bench put those copies at 17 % and the scheduling of the ring's
 * waits at 15 % of all CPU time.  When the buffers themselves are shared
 * blocks (base/shared_blocks.h: the accountant's large host blocks once a
 * communicator enabled them), a rank can instead read its peers' blocks
 * where they lie: a reduce-scatter sums its own block straight from the N
 * buffers (no copy), an all-gather copies each peer's block once.
 *
 * Protocol.  Each rank of a communicator owns a control area (a memfd the
 * others map read-only) with ZM_SHM_SLOTS slots; op number s uses slot
 * s % ZM_SHM_SLOTS on every rank.  In a slot a rank publishes:
 *   seq  = s once the slot describes op s (where its buffer lies: the pid,
 *          fd, inode and offset a peer maps it by, or fd -1 when it is
 *          private memory, plus the op's kind and size for a sanity check);
 *   f1   = s once it finished phase 1 of op s (its reduce-scatter block is
 *          summed, or its all-gather copies are done);
 *   f2   = s once it finished reading peers' buffers for op s altogether
 *          (an all-reduce's gather phase; = f1 for the other kinds).
 * A rank then:
 *   POST    waits until every peer's f2 of op s - SLOTS (the slot's last
 *           user) is done, writes its description and seq;
 *   DECIDE  waits for every peer's seq == s.  If every buffer is shared,
 *           maps them and goes on in shared memory; otherwise every rank
 *           sees the same private one and all take the ring/direct path
 *           (ZM_SHM_OFF), so the choice needs no extra round;
 *   SUM     (reduce-scatter, all-reduce) sums its block b = r from the N
 *           buffers in the ring's order b+1, b+2, ..., b (see below), in
 *           cache-sized chunks, a bounded amount per advance;
 *   GATHER  (all-gather: at once; all-reduce: once peer q's f1 says its
 *           block is summed) copies each peer q's block q into its buffer;
 *   WAIT    until every peer's f2 == s: nobody reads its buffer any more,
 *           so the caller may reuse it (the op completes).
 * Every slot value only grows, so a reader tests "f >= s".  A dead or
 * stalled peer leaves its flags where they are: the waiter's no-progress
 * limit (comm_wait.h) fires and the timeout text names the rank.
 *
 * Bits: block b's sum is formed exactly as the ring forms it, x[b+1] +
 * x[b+2] + ... + x[b] left to right with the same two-operand sums
 * (zero__comm_sum3, one rounding per addition for 16-bit types), so the
 * shared-memory path and the ring agree bitwise and a run does not change
 * its results when a buffer happens to be private.
 *
 * Locking: everything here runs under the world's lock (pe->lock), like the
 * ring.  The control areas and peers' blocks are written only by their
 * owner; C11 atomics (release on publish, acquire on read) order the data
 * before the flags across processes (lock-free 64-bit atomics are
 * address-free on the platforms we build for). */
#ifdef ZERO_HAVE_MPI
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "env.h"
#include "comm_mpi_internal.h"
#include "jitter.h"
#include "log.h"
#include "shared_blocks.h"

#define ZM_SHM_SLOTS 64
/* Most bytes of our block one advance sums or copies before it lets the
 * lock go (issuing host threads wait on it). */
#define ZM_SHM_STEP_BYTES ((size_t)512 << 10)
/* Peers' blocks kept mapped per world (a block is >= 1 MiB). */
#define ZM_SHM_MAPS 1024

enum { ZM_SHM_POST = 1, ZM_SHM_DECIDE, ZM_SHM_SUM, ZM_SHM_GATHER, ZM_SHM_WAIT, ZM_SHM_OFF };
enum { ZM_SHK_RS = 1, ZM_SHK_AG = 2, ZM_SHK_AR = 3 };

typedef struct zm_shm_slot {
    _Alignas(64) _Atomic uint64_t seq;
    _Atomic uint64_t f1, f2;
    int32_t kind, pid, fd, pad;
    uint64_t ino, offset, length, total;
} zm_shm_slot;

typedef struct zm_shm_ctl {
    zm_shm_slot slot[ZM_SHM_SLOTS];
} zm_shm_ctl;

struct zm_shm {
    int n, r;
    int fd;                     /* our control memfd (peers open it through /proc) */
    zm_shm_ctl *mine;           /* read-write */
    const zm_shm_ctl **peer;    /* n; peer[r] == mine; the others read-only */
    uint64_t seq;               /* ops numbered so far (pe->lock) */
    uint64_t in_shm, on_transport; /* how the ops went (pe->lock; logged at free) */
};

typedef struct zm_shm_map {
    int32_t pid, fd;
    uint64_t ino;
    const char *base;
    size_t len;
    uint64_t used; /* maps->tick at the last lookup (least recently used goes first) */
} zm_shm_map;

struct zm_shm_maps {
    zm_shm_map *m;
    size_t n, cap;
    uint64_t tick;
};

/* Map another process's memfd (a control area or a shared block) read-only,
 * checking that the fd still names the announced file; NULL if not. */
static const void *map_peer(int32_t pid, int32_t fd, uint64_t ino, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(f, &st) == 0 && (uint64_t)st.st_ino == ino && (size_t)st.st_size >= len)
        p = mmap(NULL, len, PROT_READ, MAP_SHARED, f, 0);
    close(f); /* the mapping keeps the memory */
    return p == MAP_FAILED ? NULL : p;
}

/* ---- setup / teardown ---- */
static void shm_release(zm_shm *sh) {
    if (!sh) return;
    if (sh->peer)
        for (int q = 0; q < sh->n; ++q)
            if (sh->peer[q] && q != sh->r) munmap((void *)sh->peer[q], sizeof(zm_shm_ctl));
    if (sh->mine) munmap(sh->mine, sizeof(zm_shm_ctl));
    if (sh->fd >= 0) close(sh->fd);
    free(sh->peer);
    free(sh);
}

/* One rank's row of the setup's table: where its control area lies, and
 * what it can say alone about taking part (the switch, its machine).  The
 * ranks then decide from the whole table, never each on its own answer:
 * that answer can differ between ranks.  Two network-namespace "hosts" on
 * one kernel got different answers from Open MPI's shared split for one
 * communicator (rank 2 saw the pair {0, 2} on one node, rank 0 on two), so
 * rank 2 entered this setup's exchange and rank 0 did not, and both waited
 * for ever (zeropp and mics in bench/contrib_netns); a rank alone with
 * ZERO_COMM_SHM=0 did the same. */
typedef struct {
    char node[ZERO__NODE_RECORD]; /* first: zero__node_leader_rows reads it */
    int64_t pid, fd, ino, ok;     /* the control area a peer maps (ok: made) */
    int64_t allowed;              /* ZERO_COMM_SHM is not "0" here */
} zm_shm_row;

zero_status zero__zm_shm_setup(zm_comm *c, int *node_ranks) {
    const int n = c->base.size, r = c->base.rank;
    if (node_ranks) *node_ranks = 1;
    if (n < 2) return ZERO_OK;
    int shm = 1;
    if (zero__env_flag("ZERO_COMM_SHM", &shm) != 1) shm = 1;
    zm_shm_row mine;
    memset(&mine, 0, sizeof mine);
    mine.fd = -1;
    mine.allowed = shm;
    zero__node_record(mine.node);
    zero_status st;

    zm_shm *sh = mine.allowed ? calloc(1, sizeof *sh) : NULL;
    if (sh) {
        sh->n = n;
        sh->r = r;
        sh->fd = memfd_create("libzero-ctl", MFD_CLOEXEC);
        sh->peer = calloc((size_t)n, sizeof *sh->peer);
        struct stat sb;
        if (sh->fd >= 0 && sh->peer && ftruncate(sh->fd, (off_t)sizeof(zm_shm_ctl)) == 0 && fstat(sh->fd, &sb) == 0) {
            void *p = mmap(NULL, sizeof(zm_shm_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, sh->fd, 0);
            if (p != MAP_FAILED) {
                sh->mine = p; /* zero-filled: every seq/f1/f2 is 0 */
                mine.pid = (int64_t)getpid();
                mine.fd = sh->fd;
                mine.ino = (int64_t)sb.st_ino;
                mine.ok = 1;
            }
        }
    }
    /* Every rank joins this exchange whatever it can say alone, through the
     * communicator's own blocking all-gather: a rank that never arrives
     * (here: out of memory for the table) ends its peers' wait in
     * ZERO_ERR_TIMEOUT after comm_timeout, not in an unbounded
     * MPI_Allgather. */
    zm_shm_row *all = calloc((size_t)n, sizeof *all);
    if (!all) {
        shm_release(sh);
        return zero__error(c->base.engine, ZERO_ERR_OUT_OF_MEMORY, "comm: out of memory setting up shared memory");
    }
    st = c->base.ops->allgather_bytes(&c->base, &mine, all, sizeof mine);
    if (st != ZERO_OK) {
        free(all);
        shm_release(sh);
        return st;
    }
    /* the same table says how many ranks share this machine (the world's
     * CPU thread team), so world creation gathers the records once */
    if (node_ranks) (void)zero__node_leader_rows((const char *)all, sizeof *all, n, r, node_ranks, NULL);
    int every = 1; /* every rank allows it and runs on this machine */
    for (int q = 0; q < n && every; ++q)
        every = all[q].allowed && memcmp(all[q].node, all[0].node, sizeof mine.node) == 0;
    if (!every) {
        free(all);
        shm_release(sh);
        zero__log(c->base.engine, ZERO_LOG_DEBUG, "comm: a communicator of %d ranks on the transport path: not every "
                  "rank is on one machine and allows shared memory (ZERO_COMM_SHM)", n);
        return ZERO_OK;
    }
    int ok = sh && mine.ok;
    for (int q = 0; ok && q < n; ++q) {
        if (!all[q].ok) {
            ok = 0;
            break;
        }
        if (q == r) {
            sh->peer[q] = sh->mine;
            continue;
        }
        sh->peer[q] = map_peer((int32_t)all[q].pid, (int32_t)all[q].fd, (uint64_t)all[q].ino, sizeof(zm_shm_ctl));
        if (!sh->peer[q]) ok = 0;
    }
    free(all);
    int64_t mapped = ok;
    st = c->base.ops->allreduce(&c->base, &mapped, 1, ZERO_DTYPE_I64, ZERO_OP_MIN);
    if (st != ZERO_OK) {
        shm_release(sh);
        return st;
    }
    if (!mapped) {
        zero__log(c->base.engine, ZERO_LOG_DEBUG,
                  "comm: ranks cannot map each other's memory; collectives take the transport path");
        shm_release(sh);
        return ZERO_OK;
    }
    c->shm = sh;
    zero__shared_blocks_enable();
    return ZERO_OK;
}

void zero__zm_shm_counts(zero_comm *m, uint64_t *in_shm, uint64_t *on_transport) {
    zm_comm *c = ZM(m);
    pthread_mutex_lock(&c->pe->lock);
    *in_shm = c->shm ? c->shm->in_shm : 0;
    *on_transport = c->shm ? c->shm->on_transport : 0;
    pthread_mutex_unlock(&c->pe->lock);
}

void zero__zm_shm_free(zm_comm *c) {
    if (c->shm)
        zero__log(c->base.engine, ZERO_LOG_DEBUG, "comm: %llu collective(s) ran in shared memory, %llu on the transport",
                  (unsigned long long)c->shm->in_shm, (unsigned long long)c->shm->on_transport);
    shm_release(c->shm);
    c->shm = NULL;
}

void zero__zm_shm_maps_free(zm_engine *pe) {
    zm_shm_maps *ms = pe->shm_maps;
    if (!ms) return;
    for (size_t i = 0; i < ms->n; ++i) munmap((void *)ms->m[i].base, ms->m[i].len);
    free(ms->m);
    free(ms);
    pe->shm_maps = NULL;
}

/* ---- peers' blocks ---- */
/* 1 when some op in flight reads from [base, base + len). */
static int map_in_use(const zm_engine *pe, const zm_shm_map *e) {
    for (const zm_op *op = pe->head; op; op = op->next) {
        if (!op->shm.peer) continue;
        for (int q = 0; q < op->base.comm->size; ++q) {
            const char *b = op->shm.peer[q];
            if (b && b >= e->base && b < e->base + e->len) return 1;
        }
    }
    return 0;
}

/* The local address of a peer's block (mapped on first use, then cached).
 * NULL when it cannot be mapped (the caller fails the op). */
static const char *peer_block(zm_engine *pe, const zm_shm_slot *d) {
    zm_shm_maps *ms = pe->shm_maps;
    if (!ms && !(ms = pe->shm_maps = calloc(1, sizeof *ms))) return NULL;
    ms->tick++;
    for (size_t i = 0; i < ms->n; ++i) {
        zm_shm_map *e = &ms->m[i];
        if (e->pid != d->pid || e->fd != d->fd) continue;
        if (e->ino == d->ino && e->len == d->length) {
            e->used = ms->tick;
            return e->base;
        }
        /* the peer freed that block and its fd now names another: the
         * old block is no longer read by anyone (its ops completed) */
        munmap((void *)e->base, e->len);
        ms->m[i] = ms->m[--ms->n];
        break;
    }
    if (ms->n == ms->cap) {
        if (ms->cap < ZM_SHM_MAPS) {
            size_t cap = ms->cap ? 2 * ms->cap : 32;
            zm_shm_map *m = realloc(ms->m, cap * sizeof *m);
            if (!m) return NULL;
            ms->m = m;
            ms->cap = cap;
        } else { /* full: drop the least recently used mapping no op in flight reads */
            size_t victim = ms->n;
            for (size_t i = 0; i < ms->n; ++i)
                if ((victim == ms->n || ms->m[i].used < ms->m[victim].used) && !map_in_use(pe, &ms->m[i]))
                    victim = i;
            if (victim == ms->n) return NULL;
            munmap((void *)ms->m[victim].base, ms->m[victim].len);
            ms->m[victim] = ms->m[--ms->n];
        }
    }
    const void *p = map_peer(d->pid, d->fd, d->ino, d->length);
    if (!p) return NULL;
    ms->m[ms->n++] = (zm_shm_map){d->pid, d->fd, d->ino, p, d->length, ms->tick};
    return p;
}

/* ---- the op ---- */
static const char *kind_name(int kind) {
    return kind == ZM_SHK_RS ? "reduce-scatter" : kind == ZM_SHK_AG ? "all-gather" : kind == ZM_SHK_AR ? "all-reduce" : "?";
}

static int op_kind(const zm_op *op) {
    if (op->kind == ZM_OP_RS_RING) return op->ring.then_allgather ? ZM_SHK_AR : ZM_SHK_RS;
    return ZM_SHK_AG;
}

/* The buffer every rank's block b lies in, at displ[b]. */
static const char *own_base(const zm_op *op) {
    return op->kind == ZM_OP_RS_RING ? op->ring.send : op->ring.recv;
}

void zero__zm_shm_number_locked(zm_comm *c, zm_op *op) {
    if (!c->shm || op->kind == ZM_OP_NATIVE) return; /* (a control area means >= 2 ranks) */
    op->shm.seq = ++c->shm->seq;
    op->shm.state = ZM_SHM_POST;
    op->shm.kind = op_kind(op);
    op->shm.blocked_on = -1;
}

int zero__zm_shm_active(const zm_op *op) { return op->shm.seq && op->shm.state != ZM_SHM_OFF; }

static void mark(zm_shm *sh, uint64_t s, int both);

/* Fail op.  `release`: every rank fails this op alike (a mismatch all of
 * them see), so mark it finished here and nobody waits on our slot; else
 * (only this rank cannot go on) the world fails, and peers waiting on our
 * flags time out naming this rank. */
__attribute__((format(printf, 4, 5))) static int shm_fail(zm_op *op, zero_status st, int release, const char *fmt,
                                                           ...) {
    zm_comm *c = ZM(op->base.comm);
    va_list ap;
    va_start(ap, fmt);
    op->status = st;
    vsnprintf(op->err, sizeof op->err, fmt, ap);
    va_end(ap);
    op->done = 1;
    if (release)
        mark(c->shm, op->shm.seq, 1);
    else
        zero__zm_fail_locked(c->pe, st, op->err);
    return 1;
}

static const zm_shm_slot *slot_of(const zm_shm *sh, int q, uint64_t s) {
    return &sh->peer[q]->slot[s % ZM_SHM_SLOTS];
}

/* A reduce-scatter whose recv overlaps send anywhere but at our own block
 * would overwrite what peers read: the ring's temporaries handle it. */
static int shareable(const zm_op *op) {
    const zm_ring *g = &op->ring;
    if (op->shm.kind != ZM_SHK_RS || !g->counts[g->r]) return 1;
    const char *s0 = g->send, *s1 = g->send + op->bytes;
    const char *r0 = g->recv, *r1 = g->recv + g->counts[g->r] * g->esz;
    return r1 <= s0 || r0 >= s1 || r0 == s0 + g->displ[g->r] * g->esz;
}

/* POST: describe our buffer in slot s once every rank is done with the
 * slot's previous op. */
static int post(zm_op *op, zm_shm *sh) {
    const uint64_t s = op->shm.seq;
    if (s > ZM_SHM_SLOTS)
        for (int q = 0; q < sh->n; ++q)
            if (atomic_load_explicit(&slot_of(sh, q, s)->f2, memory_order_acquire) < s - ZM_SHM_SLOTS) {
                op->shm.blocked_on = q;
                return 0;
            }
    zm_shm_slot *d = &sh->mine->slot[s % ZM_SHM_SLOTS];
    zero__shared_ref ref;
    const size_t total = op->bytes;
    d->kind = op->shm.kind;
    d->total = total;
    if (total && shareable(op) && zero__shared_block_find(own_base(op), total, &ref)) {
        d->pid = ref.pid;
        d->fd = ref.fd;
        d->ino = ref.ino;
        d->offset = ref.offset;
        d->length = ref.length;
    } else {
        d->pid = 0;
        d->fd = -1;
        d->ino = d->offset = d->length = 0;
    }
    zero__jitter(ZERO_JITTER_RING_POST);
    atomic_store_explicit(&d->seq, s, memory_order_release);
    op->shm.state = ZM_SHM_DECIDE;
    op->shm.blocked_on = -1;
    return 1;
}

static void mark(zm_shm *sh, uint64_t s, int both) {
    zm_shm_slot *d = &sh->mine->slot[s % ZM_SHM_SLOTS];
    atomic_store_explicit(&d->f1, s, memory_order_release);
    if (both) atomic_store_explicit(&d->f2, s, memory_order_release);
}

/* DECIDE: read every rank's description; shared memory if every buffer is
 * a shared block, else the transport path on every rank alike. */
static int decide(zm_op *op, zm_shm *sh) {
    const uint64_t s = op->shm.seq;
    const zm_shm_slot *mine = slot_of(sh, sh->r, s);
    int all_shared = mine->fd >= 0;
    for (int q = 0; q < sh->n; ++q) {
        const zm_shm_slot *d = slot_of(sh, q, s);
        if (atomic_load_explicit(&d->seq, memory_order_acquire) != s) {
            op->shm.blocked_on = q;
            return 0;
        }
        if (d->kind != mine->kind || d->total != mine->total)
            return shm_fail(op, ZERO_ERR_COMM, 1,
                            "collective mismatch: op #%llu is a %s of %llu bytes on rank %d but a %s of %llu "
                            "bytes here (collectives issued in a different order on the ranks?)",
                            (unsigned long long)s, kind_name(d->kind), (unsigned long long)d->total, q,
                            kind_name(mine->kind), (unsigned long long)mine->total);
        if (d->fd < 0) all_shared = 0;
    }
    op->shm.blocked_on = -1;
    if (!all_shared) {
        /* the transport path: nothing of ours will be read from here */
        mark(sh, s, 1);
        sh->on_transport++;
        op->shm.state = ZM_SHM_OFF;
        return 1;
    }
    zm_engine *pe = ZM(op->base.comm)->pe;
    op->shm.peer = calloc((size_t)sh->n, sizeof *op->shm.peer);
    if (!op->shm.peer) return shm_fail(op, ZERO_ERR_OUT_OF_MEMORY, 0, "out of memory");
    for (int q = 0; q < sh->n; ++q) {
        if (q == sh->r) {
            op->shm.peer[q] = own_base(op);
            continue;
        }
        const zm_shm_slot *d = slot_of(sh, q, s);
        const char *b = peer_block(pe, d);
        if (!b)
            return shm_fail(op, ZERO_ERR_COMM, 0,
                            "cannot map rank %d's shared block (fd %d, %llu bytes): out of mappings or memory", q,
                            (int)d->fd, (unsigned long long)d->length);
        op->shm.peer[q] = b + d->offset;
    }
    /* no ring temporaries: release the claim on the scratch budget */
    op->scratch_need = 0;
    sh->in_shm++;
    op->shm.pos = 0;
    op->shm.state = op->shm.kind == ZM_SHK_AG ? ZM_SHM_GATHER : ZM_SHM_SUM;
    return 1;
}

/* SUM: our block r = x[r+1] + x[r+2] + ... + x[r], the ring's order, a
 * bounded stretch per call.  Writes only our own block (in place for an
 * all-reduce: each chunk reads our x[r] before the chunk is written). */
static int sum(zm_op *op, zm_shm *sh) {
    const zm_ring *g = &op->ring;
    const int n = sh->n, r = sh->r;
    const size_t esz = g->esz, count = g->counts[r], off = g->displ[r] * esz;
    enum { TMP = 16384 };
    _Alignas(64) char tmp[TMP];
    const size_t chunk = TMP / esz;
    size_t budget = ZM_SHM_STEP_BYTES / esz;
    while (op->shm.pos < count && budget > 0) {
        size_t i = op->shm.pos, len = count - i < chunk ? count - i : chunk;
        const size_t at = off + i * esz;
        char *out = g->recv + i * esz;
        const char *own = op->shm.peer[r] + at;
        zero_status st;
        if (n == 2) {
            st = zero__comm_sum3(out, op->shm.peer[(r + 1) % n] + at, own, len, g->dt);
        } else {
            st = zero__comm_sum3(tmp, op->shm.peer[(r + 1) % n] + at, op->shm.peer[(r + 2) % n] + at, len, g->dt);
            for (int k = 3; k < n && st == ZERO_OK; ++k)
                st = zero__comm_sum3(tmp, tmp, op->shm.peer[(r + k) % n] + at, len, g->dt);
            if (st == ZERO_OK) st = zero__comm_sum3(out, tmp, own, len, g->dt);
        }
        if (st != ZERO_OK)
            return shm_fail(op, st, 0, "shared-memory sum of dtype %d is not supported", (int)g->dt);
        op->shm.pos += len;
        budget = budget > len ? budget - len : 0;
    }
    if (op->shm.pos < count) return 1;
    if (op->shm.kind == ZM_SHK_RS) {
        mark(sh, op->shm.seq, 1);
        op->shm.state = ZM_SHM_WAIT;
    } else { /* all-reduce: our block is final; now gather the others' */
        mark(sh, op->shm.seq, 0);
        op->shm.pos = 0;
        op->shm.state = ZM_SHM_GATHER;
    }
    return 1;
}

/* GATHER: copy block q from rank q, for q = r+1, r+2, ... (an all-reduce
 * waits until q's block is summed: its f1). */
static int gather(zm_op *op, zm_shm *sh) {
    const zm_ring *g = &op->ring;
    const int n = sh->n, r = sh->r;
    const uint64_t s = op->shm.seq;
    char *base = op->shm.kind == ZM_SHK_AR ? (char *)g->send : g->recv;
    int moved = 0;
    size_t budget = ZM_SHM_STEP_BYTES;
    while (op->shm.pos < (size_t)n - 1) {
        const int q = (r + 1 + (int)op->shm.pos) % n;
        if (op->shm.kind == ZM_SHK_AR &&
            atomic_load_explicit(&slot_of(sh, q, s)->f1, memory_order_acquire) < s) {
            op->shm.blocked_on = q;
            return moved;
        }
        const size_t bytes = g->counts[q] * g->esz, at = g->displ[q] * g->esz;
        if (bytes) memcpy(base + at, op->shm.peer[q] + at, bytes);
        op->shm.pos++;
        moved = 1;
        if (bytes >= budget) break;
        budget -= bytes;
    }
    op->shm.blocked_on = -1;
    if (op->shm.pos < (size_t)n - 1) return 1;
    mark(sh, s, 1);
    op->shm.state = ZM_SHM_WAIT;
    return 1;
}

/* WAIT: done once no rank reads our buffer any more. */
static int finish(zm_op *op, zm_shm *sh) {
    const uint64_t s = op->shm.seq;
    for (int q = 0; q < sh->n; ++q)
        if (atomic_load_explicit(&slot_of(sh, q, s)->f2, memory_order_acquire) < s) {
            op->shm.blocked_on = q;
            return 0;
        }
    op->shm.blocked_on = -1;
    op->done = 1;
    return 1;
}

static int shm_advance(zm_op *op) {
    zm_shm *sh = ZM(op->base.comm)->shm;
    int moved = 0, step = 1;
    while (step && !op->done && op->shm.state != ZM_SHM_OFF) {
        switch (op->shm.state) {
        case ZM_SHM_POST: step = post(op, sh); break;
        case ZM_SHM_DECIDE: step = decide(op, sh); break;
        case ZM_SHM_SUM: {
            size_t before = op->shm.pos;
            step = sum(op, sh);
            /* one bounded stretch per advance: let the lock go */
            if (op->shm.state == ZM_SHM_SUM && op->shm.pos != before) return 1;
            break;
        }
        case ZM_SHM_GATHER: {
            size_t before = op->shm.pos;
            step = gather(op, sh);
            if (op->shm.state == ZM_SHM_GATHER) return moved | (op->shm.pos != before);
            break;
        }
        case ZM_SHM_WAIT: step = finish(op, sh); break;
        default: step = 0; break;
        }
        moved |= step;
    }
    return moved;
}

/* Let MPI progress while op waits on a peer's flag.  Every wait here (POST,
 * DECIDE, an all-reduce's GATHER, WAIT) is on shared memory and makes no MPI
 * call, but a peer may still be inside an earlier transport-path op that
 * needs our MPI engine to move even though that op completed here: Open MPI
 * has no asynchronous progress, so what it still owes the peer (the FIN of a
 * single-copy RGET we completed, a control fragment it had to queue) leaves
 * only inside some MPI call of ours.  Without this, the peer never finishes
 * that op, never posts the next one, and we wait for its post forever:
 * comm_mpi_small_chunks_np4 hung so, the last rank in a direct all-gather,
 * the others in the next op's DECIDE (tests/comm: comm_mpi_progress_stress_np4).
 * An MPI_Iprobe that cannot match drives the progress engine once: the tag
 * is tag_mod, which no ring/direct op uses (their tags are seq % tag_mod,
 * and tag_mod <= MPI_TAG_UB, or 32767, which every MPI allows). */
static void mpi_poke(zm_comm *c) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, c->tag_mod, c->comm, &flag, MPI_STATUS_IGNORE);
}

int zero__zm_shm_advance_locked(zm_op *op) {
    const int moved = shm_advance(op);
    if (!moved && !op->done && op->shm.state != ZM_SHM_OFF) mpi_poke(ZM(op->base.comm));
    return moved;
}

void zero__zm_shm_describe_locked(const zm_op *op, char *buf, size_t len) {
    static const char *waits[] = {"?",
                                  "to finish the op that used the slot before (posting)",
                                  "to post its buffer",
                                  "?",
                                  "to finish summing its block",
                                  "to finish reading this rank's buffer"};
    const int st = op->shm.state, q = op->shm.blocked_on;
    int n = snprintf(buf, len, "shared-memory %s of %zu bytes on %d ranks (op #%llu)",
                     kind_name(op->shm.kind), op->bytes,
                     op->base.comm->size, (unsigned long long)op->shm.seq);
    if (n < 0 || (size_t)n >= len || q < 0) return;
    const char *what = st >= ZM_SHM_POST && st <= ZM_SHM_WAIT ? waits[st] : "?";
    snprintf(buf + n, len - (size_t)n, ": waiting for rank %d %s", q, what);
}
#endif
