/* Internal communication layer behind the services' comm functions.
 *
 * A zero_comm is a communicator with a backend vtable.  Backends: "self"
 * (world size 1, no MPI), "mpi" (MPI, nonblocking collectives driven by a
 * progress thread of libzero's own, because Debian's Open MPI has no async
 * progress), later "nccl".  All functions are thread-safe unless noted.
 * Collectives on one communicator must be issued in the same order on every
 * rank (MPI rule); async ones may complete in any order.
 *
 * This is the core's view (the factory and the dispatch wrappers, comm.c);
 * backends implement comm_backend.h and never include this header. */
#ifndef ZERO_BACKENDS_COMM_H
#define ZERO_BACKENDS_COMM_H
#include <stddef.h>
#include <stdint.h>
#include "comm_backend.h" /* the communicator types and the backends' contract */

/* Create the world communicator.
 *  kind ZERO_COMM_SELF: single process.
 *  kind ZERO_COMM_MPI: `handle` points to an MPI_Comm (duplicated internally).
 *  kind ZERO_COMM_HOST (1.5): `handle` points to the host's zero_host_comm.
 *  kind ZERO_COMM_AUTO: MPI_COMM_WORLD if built with MPI (initialising MPI with
 *    MPI_THREAD_MULTIPLE if the host has not; finalised at zero__comm_world_free
 *    only then), else self.
 * `engine` may be NULL. Errors go to err. */
zero_status zero__comm_world_create(int kind, void *handle, struct zero_engine *engine,
                                    zero_comm **out, char *err, size_t err_len);
void zero__comm_world_free(zero_comm *m);

/* Convenience wrappers dispatching through m->ops (these are what the
 * services table points at). */
zero_status zero__comm_split(zero_comm *m, int color, int key, zero_comm **out);
void zero__comm_free(zero_comm *m);
int zero__comm_rank(const zero_comm *m);
int zero__comm_size(const zero_comm *m);
zero_status zero__allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op);
zero_status zero__broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root);
zero_status zero__barrier(zero_comm *m);
zero_status zero__iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                             zero_comm_req **req);
zero_status zero__ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                   zero_dtype dt, zero_comm_req **req);
zero_status zero__iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                              zero_dtype dt, zero_comm_req **req);
/* Sum allreduce of sum(counts) elements in place, each block b reduced in
 * ireduce_scatterv's order for block b (see the op's comment). */
zero_status zero__iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt, zero_comm_req **req);
zero_status zero__comm_wait(zero_comm_req *req);
zero_status zero__comm_test(zero_comm_req *req, int *done);
/* (issue 35) See ordered_on / drop in comm_backend.h.  zero__comm_ordered_on
 * is 0 for a NULL m or a backend without the ops; zero__comm_drop on such a
 * backend waits for the request (always safe). */
int zero__comm_ordered_on(zero_comm *m, void *stream);
zero_status zero__comm_drop(zero_comm_req *req);
zero_status zero__allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each);
/* (issue 21) See the ops above.  zero__comm_split_node: with the environment
 * variable ZERO_RANKS_PER_NODE=k (k >= 1) the "nodes" are k consecutive
 * ranks of m (so tests simulate several nodes on one machine); else the
 * backend's node split (MPI: gathered machine records, comm_node.c); a
 * backend without one answers m's size-1
 * split when m has one rank, else ZERO_ERR_UNSUPPORTED.  Collective. */
zero_status zero__comm_split_node(zero_comm *m, zero_comm **out);
/* (1.7.1) The settings every rank of m must share (the engine compares
 * them at creation, engine_agree.c): ZERO_RANKS_PER_NODE (node splits),
 * then the backend's (ops->settings).  "NAME=value ..." into buf (len
 * bytes, terminated); "(unset)" for a variable that is not set.  Local,
 * thread-safe. */
void zero__comm_settings(zero_comm *m, char *buf, size_t len);
zero_status zero__alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                  void *recv, const size_t *rcounts, const size_t *rdispls);
/* Set the wait limit (comm_wait.h) of m's backend; thread-safe, takes effect
 * for waits that start afterwards.  Backends start with the limit from the
 * environment (zero__comm_timeout_resolve without config); the engine sets
 * the config's once it is parsed. */
void zero__comm_set_timeout(zero_comm *m, double seconds);
/* (issue 24) Batch the collectives this thread issues on m between the two
 * calls (comm_backend.h's group_start/group_end; a no-op on backends that
 * have nothing to batch).  Every group_start needs its group_end, also
 * after an error.  Only the opening thread may close the group. */
zero_status zero__comm_group_start(zero_comm *m);
zero_status zero__comm_group_end(zero_comm *m);

/* Consistent snapshot of m's counters (taken under the backend's lock).
 * Thread-safe; busy_seconds includes the currently running busy interval. */
void zero__comm_counters_get(zero_comm *m, zero__comm_counters *out);
#endif
