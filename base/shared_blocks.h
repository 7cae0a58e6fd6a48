/* Host blocks that other processes of this node can map (issue 18).
 *
 * The MPI backend's shared-memory collectives (comm_mpi_shm.c) let a rank
 * read its peers' buffers directly: a reduce-scatter sums the peers' blocks
 * where they lie instead of copying each through the transport first.  For
 * that the buffers must be mappable by the peers, so once a communicator has
 * found that all its ranks share this node and can map each other's memory
 * it enables shared blocks, and from then on the accountant (memory.c) makes
 * every host block of 64 KiB or more a MAP_SHARED mapping of a memfd.  Peers open it through
 * /proc/<pid>/fd/<fd> (the same ptrace-read permission Open MPI's
 * single-copy transport needs) and map it read-only.
 *
 * Nothing here changes what a block holds or how it is accounted.  One
 * difference a host can see: a child the process forks shares these blocks
 * with it instead of getting copy-on-write copies (libzero's buffers are not
 * the host's to write, in the parent or a child).
 *
 * Thread-safe: one mutex guards the registry.  Process-wide. */
#ifndef ZERO_BASE_SHARED_BLOCKS_H
#define ZERO_BASE_SHARED_BLOCKS_H
#include <stddef.h>
#include <stdint.h>

/* Where a byte range lies inside a shared block: what a peer needs to map
 * it (the owner's pid and fd, the memfd's inode to tell a reused fd number
 * from the same block) and the range's offset in it. */
typedef struct zero__shared_ref {
    int32_t pid, fd;
    uint64_t ino;
    uint64_t offset;   /* of the range's first byte from the block's start */
    uint64_t length;   /* of the whole block (what a peer maps) */
} zero__shared_ref;

/* From now on zero__shared_block_alloc hands out shared blocks (until
 * ZERO_COMM_SHM=0 in the environment, which keeps it off).  Idempotent. */
void zero__shared_blocks_enable(void);
int zero__shared_blocks_enabled(void);

/* A zero-filled MAP_SHARED block of len bytes (a multiple of the page
 * size), or NULL when shared blocks are off or the system refused (no
 * memfd, no descriptor left: the registry keeps at most a quarter of the
 * process's descriptor limit, at most 1024): the caller then makes a
 * private block as before.  Freed only by zero__shared_block_free. */
void *zero__shared_block_alloc(size_t len);
/* Unmap and close p if it is a shared block (returns 1), else 0. */
int zero__shared_block_free(void *p);

/* 1 and *out filled when [p, p + bytes) lies inside one shared block, else
 * 0 (private memory: the collectives take their transport path). */
int zero__shared_block_find(const void *p, size_t bytes, zero__shared_ref *out);

#endif
