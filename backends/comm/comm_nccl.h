/* NCCL comm backend (GPU): the zero__comm_ops of comm.h over an ncclComm_t.
 *
 * Buffers may be device memory (the normal case: collectives run on the
 * backend's CUDA stream, no host copy) or host memory (small agreement
 * messages: norms, overflow flags, hashes), which is staged through a
 * device scratch buffer.  Blocking collectives return when the result is in
 * the caller's buffer; async ones return a request completed by a CUDA
 * event (wait = cudaEventSynchronize, test = cudaEventQuery), so the host
 * never spins inside NCCL.
 *
 * v-collectives (device or host buffers; host ones are staged and complete
 * before the call returns): equal counts map to ncclReduceScatter / ncclAllGather;
 * unequal counts to one NCCL group of ncclReduce / ncclBroadcast calls, one
 * per rank's block.  Sub-communicators come from ncclCommSplit.
 *
 * Thread-safety: all functions may be called from several threads; calls
 * on one communicator are serialised by its mutex (NCCL requires one issuing
 * thread per communicator at a time).  Built only with ZERO_HAVE_NCCL. */
#ifndef ZERO_BACKENDS_COMM_NCCL_H
#define ZERO_BACKENDS_COMM_NCCL_H
#ifdef ZERO_HAVE_NCCL
#include <stddef.h>
#include "comm_backend.h"

/* Wrap the host's communicator.  `nccl_comm_handle` points to an ncclComm_t
 * (borrowed: the host destroys it after the engine).  The CUDA device is
 * the communicator's (ncclCommCuDevice); every call on m makes it current
 * on the calling thread (cudaSetDevice), so the engine's threads need no
 * setup.  Collectives run on a non-blocking stream of the backend's own
 * unless zero__comm_nccl_set_stream is called. */
zero_status zero__comm_nccl_create(void *nccl_comm_handle, struct zero_engine *engine, zero_comm **out,
                                   char *err, size_t err_len);

#ifdef ZERO_HAVE_MPI
/* Create an ncclComm_t over the ranks of an MPI communicator: rank 0 makes
 * an ncclUniqueId and broadcasts it over MPI, every rank calls
 * ncclCommInitRank.  mpi_comm_handle points to an MPI_Comm, or NULL for
 * MPI_COMM_WORLD (MPI must be initialised).  device < 0 picks
 * (node-local rank) % (devices on the node), the usual one-GPU-per-rank
 * mapping.  The NCCL communicator is owned and destroyed by the backend.
 * Collective over the MPI communicator. */
zero_status zero__comm_nccl_create_mpi(void *mpi_comm_handle, int device, struct zero_engine *engine,
                                       zero_comm **out, char *err, size_t err_len);
#endif

/* Issue collectives on `stream` (a cudaStream_t, e.g. the device backend's
 * comm stream, so that zero_cuda_order_after() orders them after the
 * gradient kernels).  NULL restores the backend's own stream.  The stream is
 * borrowed.  Not thread-safe against collectives in flight on m. */
zero_status zero__comm_nccl_set_stream(zero_comm *m, void *stream);

/* The cudaStream_t (as void*) m's collectives run on; work queued there
 * is ordered with them without host synchronisation.  Valid until the next
 * zero__comm_nccl_set_stream or free.  NULL if m is not an NCCL comm. */
void *zero__comm_nccl_stream(const zero_comm *m);

/* The CUDA device ordinal m runs on, or -1 if m is not an NCCL comm. */
int zero__comm_nccl_device(const zero_comm *m);

/* Is m an NCCL communicator? */
int zero__comm_is_nccl(const zero_comm *m);
#endif /* ZERO_HAVE_NCCL */
#endif
