/* What a comm backend implements and what it may use: the communicator and
 * request headers every backend embeds, the backend vtable, and the
 * constructors the factory (comm.c) picks from.
 *
 * Backends (comm_self.c, comm_host.c, comm_mpi*.c, comm_nccl.c) include this header and
 * not comm.h: comm.c depends on the backends, the backends do not depend on
 * comm.c, so the factory and its backends form no loop
 * (tools/check-loops.py, ctest lint.loops).  comm.h includes this header,
 * so the rest of the core sees one comm interface.  Thread-safety: see each
 * function; the types carry no state of their own. */
#ifndef ZERO_BACKENDS_COMM_BACKEND_H
#define ZERO_BACKENDS_COMM_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "zero_plugin.h"
#include "trace.h"

struct zero_engine;

typedef struct zero__comm_counters {
    uint64_t allreduce_calls, reduce_scatter_calls, allgather_calls, broadcast_calls, other_calls;
    uint64_t bytes_reduced, bytes_gathered;
    double busy_seconds; /* wall time with >= 1 collective in flight */
    uint64_t host_waits; /* (issue 35) times a caller blocked for device work (NCCL: event/stream waits) */
} zero__comm_counters;

typedef struct zero__comm_ops {
    const char *name;
    zero_status (*split)(zero_comm *m, int color, int key, zero_comm **out);
    void (*free)(zero_comm *m);
    zero_status (*allreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op);
    zero_status (*broadcast)(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root);
    zero_status (*barrier)(zero_comm *m);
    zero_status (*iallreduce)(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                              zero_comm_req **req);
    zero_status (*ireduce_scatterv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                    zero_dtype dt, zero_comm_req **req);
    zero_status (*iallgatherv)(zero_comm *m, const void *send, void *recv, const size_t *counts,
                               zero_dtype dt, zero_comm_req **req);
    zero_status (*wait)(zero_comm_req *req);
    zero_status (*test)(zero_comm_req *req, int *done);
    /* blocking allgather of fixed-size byte blocks (used for agreement checks) */
    zero_status (*allgather_bytes)(zero_comm *m, const void *send, void *recv, size_t bytes_each);
    /* appended: snapshot of the counters under the backend's lock; NULL = plain copy */
    void (*counters_get)(zero_comm *m, zero__comm_counters *out);
    /* appended (issue 13): in-place sum allreduce whose blocks are given, like
     * ireduce_scatterv's: block b is summed exactly as ireduce_scatterv with
     * the same counts sums it, so an all-reduce and a reduce-scatter over the
     * same layout agree bitwise.  NULL = the backend's iallreduce. */
    zero_status (*iallreducev)(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req);
    /* appended (issue 21, ABI 1.3 services).  Blocking all-to-all of bytes:
     * send holds scounts[r] bytes for rank r at sdispls[r]; recv receives
     * rcounts[r] bytes from rank r at rdispls[r].  Counted as a
     * reduce-scatter of sum(scounts) bytes (its one use is the quantized
     * reduce-scatter).  NULL: not available (ZERO_ERR_UNSUPPORTED). */
    zero_status (*alltoallv_bytes)(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                   void *recv, const size_t *rcounts, const size_t *rdispls);
    /* appended (issue 21).  Collective: the ranks of m that share memory
     * (one node), ordered by their rank in m; every rank of m must get
     * the same partition (the MPI backend reads it from gathered machine
     * records, comm_node.c).  NULL: see zero__comm_split_node. */
    zero_status (*split_node)(zero_comm *m, zero_comm **out);
    /* appended (issue 17): the no-progress limit of every blocking wait on
     * m and the communicators that share its backend (comm_wait.h), seconds,
     * 0 = none.  NULL = the backend has no blocking waits (self). */
    void (*set_timeout)(zero_comm *m, double seconds);
    /* appended (issue 24, ABI 1.5 services comm_group_start/end): batch the
     * collectives the calling thread issues on m until the matching
     * group_end into one launch (NCCL: ncclGroupStart/End).  Nest by
     * counting.  Requests handed out inside the group complete normally; a
     * wait or test on one, or a blocking call on m, from the thread that
     * opened the group first launches what the group holds.  NULL (MPI,
     * self): nothing to batch, the calls are no-ops. */
    zero_status (*group_start)(zero_comm *m);
    zero_status (*group_end)(zero_comm *m);
    /* appended (issue 35), both optional and used together.
     * ordered_on: 1 when m's device collectives are queued on `stream` (a
     * cudaStream_t, or whatever the engine's device calls its stream) in
     * issue order, so that device work queued on `stream` after a
     * collective runs after it, and a request completes only after every
     * request issued before it on m; 0 otherwise (NULL: never).
     * drop: end a request without waiting for it, which is allowed only
     * when ordered_on held when it was issued: its result is then known to
     * be ready to everything later on the stream and to whoever waits for
     * a later request of m (NULL: the caller waits instead). */
    int (*ordered_on)(zero_comm *m, void *stream);
    zero_status (*drop)(zero_comm_req *req);
    /* appended (1.7.1): the backend's settings that every rank of m must
     * share, or its collectives do not match (the MPI ring's chunk size and
     * algorithm choices, read from the environment of each process), as
     * "NAME=value" pairs separated by spaces, into buf (len bytes, always
     * terminated).  NULL: nothing to share.  Thread-safe. */
    void (*settings)(zero_comm *m, char *buf, size_t len);
} zero__comm_ops;

/* Common header of every communicator; backends embed it first. */
struct zero_comm {
    const zero__comm_ops *ops;
    int rank, size;
    struct zero_engine *engine;      /* for error text and logging; may be NULL in unit tests */
    zero__comm_counters counters;    /* updated under the backend's lock */
    int group_depth;                 /* open comm_group_start calls (comm.c; the caller's thread) */
};

/* Byte size of a comm element type (0 if unknown). */
size_t zero__dtype_size(zero_dtype dt);

/* Common header of every request; backends embed it first so that
 * zero__comm_wait/test can dispatch through req->comm->ops.  A request is
 * owned by the caller from the i* call that returns it until wait() returns
 * or test() reports done; both free it.  Every request must be completed
 * before its communicator is freed (a free drives leftovers to completion
 * and frees them, with a warning; using such a request afterwards is a bug). */
struct zero_comm_req {
    zero_comm *comm;
    zero__trace_op trace; /* (trace) set by the comm.c wrappers when tracing; zero otherwise */
};

/* Semantics shared by all backends (what the services table promises):
 *  - split: collective over m; ranks passing color < 0 get *out = NULL
 *    (MPI_UNDEFINED); ranks with the same color form a sub-communicator
 *    ordered by (key, parent rank).  A sub-communicator shares its parent's
 *    progress machinery and must be freed before the world.
 *  - ireduce_scatterv: send holds sum(counts) elements (block b at offset
 *    sum(counts[0..b))); recv receives this rank's block, the elementwise SUM
 *    over ranks.  recv may alias this rank's block of send (in place).  The
 *    summation order is fixed by the algorithm, so results are bitwise
 *    repeatable for a given world size and counts.  BF16/F16 sums (issue
 *    14: the bucket engine's 16-bit wire) round to the dtype at every
 *    addition (MPI ring: fp32 add, RNE; NCCL: its own 16-bit sum).
 *  - iallgatherv: send holds counts[rank] elements; recv receives every
 *    block at its offset.  send may alias recv's own block (in place).
 *  - counts may contain zeros; counts must be identical on every rank.
 *  - Errors from MPI come back as ZERO_ERR_COMM with MPI's error text (also
 *    set as the engine's last error when the comm has an engine). */

/* ---- the backends the factory (zero__comm_world_create) picks from -----
 * Each returns a world communicator owned by the caller (freed with
 * ops->free); `engine` may be NULL (unit tests). */
zero_comm *zero__comm_self_create(struct zero_engine *engine);
/* (1.5) handle: the host's zero_host_comm (abi/zero.h), validated and
 * copied; errors (NULL, short struct, missing callbacks) go to err. */
zero_status zero__comm_host_create(const void *handle, struct zero_engine *engine, zero_comm **out, char *err,
                                   size_t err_len);
#ifdef ZERO_HAVE_MPI
/* handle: pointer to an MPI_Comm. */
zero_status zero__comm_mpi_create(void *mpi_comm_handle, struct zero_engine *engine, zero_comm **out,
                                  char *err, size_t err_len);
#endif
#endif
