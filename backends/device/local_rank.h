/* The process's rank on its node, as the job launcher tells it, for
 * choosing a GPU when the host asks for ZERO_DEVICE_INDEX_AUTO.
 *
 * Why the environment and not MPI: the device is opened before any
 * communicator exists (a machine without a GPU must fail first, on every
 * rank alike), and hosts that bring their own ncclComm_t need not use MPI at
 * all.  Every common launcher exports the local rank: Open MPI
 * (OMPI_COMM_WORLD_LOCAL_RANK), MPICH/Intel MPI's Hydra (MPI_LOCALRANKID),
 * Slurm (SLURM_LOCALID), PMIx launchers (PMIX_LOCAL_RANK... not standard, so
 * not read) and torchrun (LOCAL_RANK).  Thread-safe (reads the environment
 * only; getenv's usual caveat about concurrent setenv applies). */
#ifndef ZERO_BACKENDS_LOCAL_RANK_H
#define ZERO_BACKENDS_LOCAL_RANK_H
#include <stddef.h>

/* The local rank (>= 0), or 0 when no launcher variable is set or valid.
 * If `src` is given, the name of the variable used (or "none") is copied
 * there, for log and error messages. */
int zero__local_rank(char *src, size_t src_len);

#endif
