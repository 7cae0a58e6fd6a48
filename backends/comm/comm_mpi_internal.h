/* Internal structures of the MPI comm backend, shared by comm_mpi.c (setup,
 * blocking collectives), comm_mpi_progress.c (progress engine: op list,
 * progress thread, wait/test) and comm_mpi_ring.c (the ring reduce-scatter /
 * allgather state machines and the native MPI ops).
 *
 * Locking: one mutex per world (zm_engine.lock), shared by its
 * sub-communicators, guards the op list, every op's state and the scratch
 * cache; every MPI call on an op's requests is made with it held.  That also
 * serialises our MPI calls when the thread level is below MULTIPLE.
 * Counters have their own small lock per communicator. */
#ifndef ZERO_BACKENDS_COMM_MPI_INTERNAL_H
#define ZERO_BACKENDS_COMM_MPI_INTERNAL_H
#ifdef ZERO_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include "comm_backend.h"
#include "comm_internal.h"

/* Most MPI requests one ring op keeps posted per direction.  The actual
 * window (ZERO_COMM_WINDOW) is clamped to this. */
#define ZM_MAX_WINDOW 64
/* Scratch buffers kept for reuse: enough for the bucket engine's concurrent
 * reductions (fresh memory costs page faults on every op). */
#define ZM_CACHE_SLOTS 8

typedef struct zm_op zm_op;
typedef struct zm_shm zm_shm;           /* comm_mpi_shm.c: a communicator's shared control area */
typedef struct zm_shm_maps zm_shm_maps; /* comm_mpi_shm.c: the world's mappings of peers' blocks */
typedef struct zm_engine zm_engine;

/* What the progress engine (comm_mpi_progress.c) calls for the ops it
 * drives: the schedules above it (comm_mpi_ring.c, comm_mpi_shm.c), handed
 * over at world creation (comm_mpi.c) so that the engine depends on
 * neither.  All need pe->lock held. */
typedef struct zm_op_hooks {
    int (*advance)(zm_op *op);                                /* zero__zm_op_advance_locked */
    void (*describe)(const zm_op *op, char *buf, size_t len); /* zero__zm_op_describe_locked */
    void (*free)(zm_engine *pe, zm_op *op);                   /* zero__zm_op_free_locked */
    void (*maps_free)(zm_engine *pe);                         /* zero__zm_shm_maps_free */
} zm_op_hooks;

/* Progress machinery of one world, shared by its sub-communicators. */
struct zm_engine {
    pthread_mutex_t lock;
    pthread_cond_t wake;       /* the progress thread sleeps here when it has nothing to drive */
    pthread_t thread;
    int has_thread;            /* 1 when the level is MULTIPLE and the thread runs */
    int stop;
    int thread_level;          /* MPI_Query_thread() */
    int waiters;               /* threads driving progress inside wait(): the thread stands back */
    zm_op *head, *tail;        /* ops in flight */
    int refs;                  /* world + live sub-communicators */
    /* knobs (read once from the environment at world creation) */
    unsigned poll_us;          /* ZERO_COMM_POLL_US: longest back-off sleep of the progress thread */
    size_t chunk_bytes;        /* ZERO_COMM_CHUNK_KB: ring message size */
    int window;                /* ZERO_COMM_WINDOW: posted requests per direction per op */
    int allgather_mode;        /* ZERO_COMM_ALLGATHER: ZM_AG_* (auto: direct up to 8 ranks, else ring) */
    int native_allreduce;      /* ZERO_COMM_ALLREDUCE=mpi: use MPI_Iallreduce for sums too */
    /* scratch cache: ring temporaries are reused across ops so that a large
     * reduce-scatter does not pay page faults on fresh memory every time */
    void *cache[ZM_CACHE_SLOTS];
    size_t cache_bytes[ZM_CACHE_SLOTS];
    size_t cache_cap;          /* ZERO_COMM_SCRATCH_CACHE_MB: most bytes kept cached */
    /* scratch budget (issue 14): the bytes of ring scratch this world holds
     * (in use by ops + cached) stay within the largest single op's need, so
     * the accounted comm scratch is a function of the buckets, not of how
     * many reductions timing leaves in flight (zero__zm_scratch_acquire_locked) */
    size_t scratch_live;       /* held by ops (between acquire and release) */
    size_t scratch_budget;     /* largest scratch need of any op so far */
    struct zero_engine *engine;
    /* issue 17: bounded waits (comm_wait.h).  timeout_s is written under
     * lock and read at the start of each wait.  `failed` is sticky: once a
     * wait gave up (a peer stopped answering), the collective sequence is
     * broken on this rank, so every later wait, test, blocking collective
     * and new operation fails at once with fail_status / fail_why (under
     * lock; `failed` itself is atomic so that lock-free pollers see it). */
    double timeout_s;
    atomic_int failed;
    zero_status fail_status;
    char fail_why[640];
    zm_shm_maps *shm_maps;     /* peers' shared blocks mapped here (comm_mpi_shm.c; under lock) */
    const zm_op_hooks *hooks;  /* the schedules' entry points (zero__zm_engine_create) */
};

typedef struct zm_comm {
    zero_comm base;
    MPI_Comm comm;             /* our duplicate (or split): never the host's own */
    zm_engine *pe;
    int is_world;
    int owns_mpi;              /* this world counts towards libzero-owned MPI init */
    int tag_mod;               /* ring tags are seq % tag_mod */
    uint32_t seq;              /* ring op sequence number (under pe->lock) */
    int ops_in_list;           /* under pe->lock */
    int outstanding;           /* requests handed out and not yet freed (under pe->lock) */
    pthread_mutex_t stat_lock; /* counters, inflight, busy_t0 */
    int inflight;
    double busy_t0;
    zm_shm *shm;               /* NULL: no shared-memory collectives on this communicator */
} zm_comm;

enum { ZM_OP_NATIVE = 0, ZM_OP_RS_RING = 1, ZM_OP_AG_RING = 2, ZM_OP_AG_DIRECT = 3 };
enum { ZM_AG_AUTO = 0, ZM_AG_RING = 1, ZM_AG_DIRECT = 2, ZM_AG_MPI = 3 };

typedef struct zm_cursor {
    int k;    /* ring step */
    size_t j; /* chunk within the step's block */
} zm_cursor;

typedef struct zm_ring {
    int n, r, next, prev, tag, nsteps;
    size_t esz, chunk; /* chunk in elements */
    zero_dtype dt;
    const char *send;
    char *recv;
    size_t *counts, *displ; /* n each, owned by the op */
    char *buf[2];           /* RS temporaries (inside scratch) */
    char *slots;            /* RS in place: `window` chunk slots for the last step (inside scratch) */
    int nbufs;              /* RS: partial-sum block buffers in scratch (0..2), each maxc elements */
    size_t maxc;            /* RS: largest block, elements */
    int recv_into_out;      /* RS: final step receives straight into recv */
    int then_allgather;     /* allreduce = this reduce-scatter, then an in-place ring allgather */
    zm_cursor rpost, rdone, spost, sdone, end;
    MPI_Request rq[ZM_MAX_WINDOW], sq[ZM_MAX_WINDOW];
    int rhead, rcount, shead, scount, window;
} zm_ring;

/* An op's shared-memory state (comm_mpi_shm.c).  seq 0: the op takes the
 * transport path from its start (native ops, communicators without a
 * shared control area). */
typedef struct zm_shm_op {
    uint64_t seq;        /* the op's number on its communicator (1, 2, ...) */
    int state;           /* ZM_SHM_* (comm_mpi_shm.c); ZM_SHM_OFF: the ring/direct path runs it */
    int kind;            /* what every rank posts: reduce-scatter, all-gather, all-reduce */
    const char **peer;   /* n bases, peer[q] + displ[b] * esz = rank q's block b (peer[r]: ours) */
    size_t pos;          /* SUM: elements of our block done; GATHER: ranks copied */
    int blocked_on;      /* the rank the last advance waited for (timeout texts); -1 none */
} zm_shm_op;

struct zm_op {
    zero_comm_req base;
    zm_op *prev, *next;
    int kind;
    int in_list;
    int orphaned; /* its waiter gave up (timeout): nobody owns it; forsaken at free */
    int done;
    zero_status status;
    char err[256];
    size_t bytes; /* for the counters */
    /* native: MPI requests (several when a count exceeds INT_MAX) */
    MPI_Request *reqs;
    int nreqs;
    int *icounts, *idispl; /* MPI_Iallgatherv arguments, alive until completion */
    int *req_peer;         /* direct allgather: the peer of each reqs[i] (for timeout texts) */
    int *req_idx;          /* direct allgather: MPI_Testsome's index array (nreqs) */
    /* ring */
    zm_ring ring;
    void *scratch;
    size_t scratch_bytes;  /* size of the block held (a cached block may exceed the need) */
    size_t scratch_need;   /* bytes the reduce-scatter phase needs (0: none); taken at the op's first
                              advance within the world's budget, released when that phase ends */
    zm_shm_op shm;
};

static inline zm_comm *ZM(zero_comm *m) { return (zm_comm *)m; }

/* Ownership: a zm_engine belongs to its world and is reference-counted by
 * the world and its sub-communicators; a zm_op is owned by the caller that
 * received it as a request (the engine's list only borrows it while it is in
 * flight) and is freed by wait/test (zero__zm_op_free_locked).  Scratch
 * buffers belong to the op that took them until it is freed, then to the
 * world's cache, which frees them with the world. */

/* ---- comm_mpi_util.c (thread-safe) ---- */
/* Format "what: MPI error text" into op->err / a buffer; returns ZERO_ERR_COMM. */
zero_status zero__zm_error_text(int rc, const char *what, char *buf, size_t len);
/* MPI datatype for dt: for_sum selects the arithmetic type; BF16/F16 map to
 * MPI_UINT16_T for data movement and to MPI_DATATYPE_NULL for sums. */
MPI_Datatype zero__zm_datatype(zero_dtype dt, int for_sum);
/* Counters: a collective starts / ends on m (busy time bookkeeping). */
void zero__zm_busy_begin(zm_comm *c);
void zero__zm_busy_end(zm_comm *c);

/* ---- comm_mpi_progress.c (all "_locked" functions need pe->lock held) ---- */
zm_engine *zero__zm_engine_create(int thread_level, struct zero_engine *engine, const zm_op_hooks *hooks);
/* Drop a reference; the last one stops the thread and frees everything. */
void zero__zm_engine_release(zm_engine *pe);
/* Append op to the in-flight list, advance it once, wake the thread. */
void zero__zm_submit_locked(zm_engine *pe, zm_op *op);
/* One pass over every op in flight; returns 1 if anything moved. */
int zero__zm_advance_all_locked(zm_engine *pe);
/* Drive until no op of c (or of any comm when c is NULL) is in flight. */
void zero__zm_drain_locked(zm_engine *pe, zm_comm *c);
/* MPI is finalized: fail and unlink c's ops without any MPI call (their
 * requests stay owned by the caller; their buffers are not reused). */
void zero__zm_abandon_locked(zm_engine *pe, zm_comm *c);
/* Mark the world failed (sticky; the first reason is kept). */
void zero__zm_fail_locked(zm_engine *pe, zero_status st, const char *why);
/* The world failed earlier: the error for a new call of `what`, also set
 * as the engine's last error. */
zero_status zero__zm_failed_error(zm_comm *c, const char *what);
/* After a failure: unlink c's remaining ops, cancel and free their
 * point-to-point requests, and leak what MPI may still write into (their
 * scratch, arrays and collective requests, which MPI forbids cancelling).
 * Returns how many ops were left behind. */
int zero__zm_forsake_locked(zm_engine *pe, zm_comm *c);
/* One line saying what `op` waits for: its kind, size and, where the
 * algorithm knows it, the peer rank(s) whose messages have not arrived. */
void zero__zm_op_describe_locked(const zm_op *op, char *buf, size_t len);
void *zero__zm_scratch_get_locked(zm_engine *pe, size_t bytes, size_t *got);
void zero__zm_scratch_put_locked(zm_engine *pe, void *p, size_t bytes);
/* Scratch budget (issue 14).  Give op its op->scratch_need bytes if the
 * world's scratch (held + cached) stays within pe->scratch_budget (the
 * largest need of any op so far; cached blocks are evicted to make room):
 * returns 1 (op->scratch set; NULL with need 0 never happens) or 0 = not
 * now, try again at a later advance.  An op waits only while an EARLIER op
 * of its own communicator holds or awaits scratch: that op needs nothing
 * from later ones, every rank issues a communicator's ops in the same
 * order, so the earliest waiting op always gets its scratch once the ops
 * before it finish (no deadlock); an op whose only competitors belong to
 * other communicators allocates past the budget instead of waiting on an
 * order no rank agreed on.  -1: out of memory. */
int zero__zm_scratch_acquire_locked(zm_engine *pe, zm_op *op);
/* Hand op's scratch back (to the cache or free) and drop it from the held
 * bytes; called as soon as the reduce-scatter phase completes. */
void zero__zm_scratch_release_locked(zm_engine *pe, zm_op *op);
zero_status zero__zm_wait(zero_comm_req *req);
zero_status zero__zm_test(zero_comm_req *req, int *done);

/* ---- comm_mpi_shm.c: shared-memory collectives (issue 18) ----
 * Collective over c (at communicator creation): when every rank of c sees
 * all of c on its node, allows it (ZERO_COMM_SHM is not 0) and can map the
 * others' memory, give c a shared control area (c->shm) and enable shared
 * blocks (shared_blocks.h).  The ranks decide together from one table
 * (an all-gather of each rank's node record, switch and control area, then
 * an all-reduce of "mapped them all"), never each on its own answer;
 * anything short of "all yes" leaves c->shm NULL and c on its transport
 * path.  Only an MPI failure or a peer that does not arrive within
 * comm_timeout (ZERO_ERR_TIMEOUT) is an error.  *node_ranks (if not NULL)
 * receives how many of c's ranks share this machine, read from the same
 * table (1 for a communicator of one rank; set before any error). */
zero_status zero__zm_shm_setup(zm_comm *c, int *node_ranks);
/* How many of m's collectives ran in shared memory / took the transport
 * path after the ranks' agreement (0, 0 without a control area).  Tests
 * and logs.  Thread-safe. */
void zero__zm_shm_counts(zero_comm *m, uint64_t *in_shm, uint64_t *on_transport);
/* Release c's control area (not collective: peers keep their mappings). */
void zero__zm_shm_free(zm_comm *c);
/* Unmap the world's mappings of peers' blocks (engine teardown). */
void zero__zm_shm_maps_free(zm_engine *pe);
/* At submit (pe->lock held): number op on c if c shares memory and op is a
 * ring/direct collective; its first advances then run through
 * zero__zm_shm_advance_locked. */
void zero__zm_shm_number_locked(zm_comm *c, zm_op *op);
/* Advance op's shared-memory protocol (pe->lock held).  Returns 1 if it
 * moved; sets op->done when the op completed in shared memory, or
 * op->shm.state = ZM_SHM_OFF when the ranks agreed on the transport path
 * (some rank's buffer is private), which the caller then runs. */
int zero__zm_shm_advance_locked(zm_op *op);
/* 1 while op is still in its shared-memory protocol. */
int zero__zm_shm_active(const zm_op *op);
/* Timeout text for an op in its shared-memory protocol. */
void zero__zm_shm_describe_locked(const zm_op *op, char *buf, size_t len);

/* ---- comm_mpi_ring.c (issuing functions are thread-safe; _locked ones need pe->lock) ---- */
/* Advance one op (pe->lock held); sets op->done.  Returns 1 if it moved. */
int zero__zm_op_advance_locked(zm_op *op);
/* Release what an op holds (scratch back to the cache, arrays) and free it. */
void zero__zm_op_free_locked(zm_engine *pe, zm_op *op);
zero_status zero__zm_iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                                zero_comm_req **req);
zero_status zero__zm_iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt,
                                 zero_comm_req **req);
zero_status zero__zm_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                      zero_dtype dt, zero_comm_req **req);
zero_status zero__zm_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                 zero_dtype dt, zero_comm_req **req);
#endif
#endif
