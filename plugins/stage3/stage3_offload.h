/* stage3 with offload (ZeRO-3 + ZeRO-Offload / ZeRO-Infinity): internals
 * shared by stage3_offload.c (tiers, the tiled step), stage3_nvme.c (the
 * NVMe tile file) and stage3_worker.c (the pipeline's second thread).
 * Plugin-internal; includes only abi/ headers through stage3.h.
 *
 * What lives where (docs/memory.md, "stage3 with offload"):
 *   offload_optimizer.device "cpu":  fp32 master, optimizer states and the
 *     gradient partition in the host tier (ZERO_TIER_HOST);
 *   offload_optimizer.device "nvme": master and states in a file under
 *     nvme_path, tile by tile; the host tier holds two tiles of them
 *     (double buffer) and the gradient partition;
 *   offload_param.device "cpu" (or "nvme", kept in host memory): the owned
 *     model-dtype parameter shard in the host tier too.
 * The device tier then holds only the gather window (gather buffers, bounded
 * by stage3_max_live_parameters), the bucket staging and, without
 * offload_param, the shard.
 *
 * Threading: everything runs on the engine's step thread, except the jobs
 * handed to the worker (zero__s3_worker_run), which touch only the tile
 * buffers the step thread does not use until zero__s3_worker_wait. */
#ifndef ZERO_PLUGIN_STAGE3_OFFLOAD_H
#define ZERO_PLUGIN_STAGE3_OFFLOAD_H
#include "stage3.h"

enum { ZERO__S3_OFF_NONE = 0, ZERO__S3_OFF_CPU = 1, ZERO__S3_OFF_NVME = 2 };

/* ---- worker (stage3_worker.c) ------------------------------------------- */
typedef struct zero__s3_worker zero__s3_worker;
/* Start the thread.  NULL when it cannot be created (the caller then runs
 * jobs inline). */
zero__s3_worker *zero__s3_worker_start(void);
/* Run fn(arg) on the worker; the previous job must have been waited for.
 * With w NULL, runs it now on the calling thread. */
void zero__s3_worker_run(zero__s3_worker *w, void (*fn)(void *), void *arg);
/* Wait for the job given last (no-op when none or w NULL). */
void zero__s3_worker_wait(zero__s3_worker *w);
/* Stop and join; NULL is a no-op. */
void zero__s3_worker_stop(zero__s3_worker *w);

/* ---- NVMe tile file (stage3_nvme.c) --------------------------------------- */
typedef struct zero__s3_nvme zero__s3_nvme;
/* Create an unlinked temporary file in `dir` for ntiles tiles of narr arrays
 * of tile_bytes each (tile_bytes a multiple of ZERO__S3_NVME_ALIGN).  Tries
 * O_DIRECT first and falls back, with one warning, where the file system
 * refuses it (tmpfs).  Returns NULL with the engine's error set. */
#define ZERO__S3_NVME_ALIGN 4096u
zero__s3_nvme *zero__s3_nvme_open(zero__s3 *s, const char *dir, uint64_t ntiles, uint32_t narr, size_t tile_bytes);
/* Read (write = 0) or write tile `k`'s arrays from/into bufs[0..narr)
 * (each tile_bytes, ZERO__S3_NVME_ALIGN-aligned): all arrays' requests are
 * issued at once with POSIX AIO, then waited for.  Returns 0, or -1 with
 * errno-style text in the handle (zero__s3_nvme_error). Thread-safe for
 * distinct tiles (the worker and the step thread never share one). */
int zero__s3_nvme_io(zero__s3_nvme *f, uint64_t k, void *const *bufs, int write);
const char *zero__s3_nvme_error(const zero__s3_nvme *f);
int zero__s3_nvme_direct(const zero__s3_nvme *f); /* 1 when O_DIRECT is in use */
void zero__s3_nvme_close(zero__s3_nvme *f);

/* ---- offload (stage3_offload.c) ------------------------------------------ */
/* Pipeline state: tile staging, the worker, the NVMe file.  Owned by s. */
typedef struct zero__s3_off {
    uint64_t tile;          /* elements per tile (sub_group_size, clamped to the partition) */
    uint64_t ntiles;
    uint32_t narr;          /* NVMe: 1 + nstate fp32 arrays per tile (master, states) */
    size_t tile_bytes;      /* NVMe: bytes of one array's tile, aligned */
    void *raw[2];           /* NVMe staging blocks (accounted), two tiles of narr arrays */
    float *buf[2][5];       /* NVMe: aligned views into raw: [set][0] master, [set][1+k] state k */
    void *stage16[2];       /* device shard: the new weights of a tile (model dtype), host tier */
    zero__s3_worker *worker;
    zero__s3_nvme *nvme;
    int sequential;         /* ZERO_OFFLOAD_SEQUENTIAL=1: no overlap (the benchmark's baseline) */
    int io_failed;          /* a worker job failed (NVMe I/O): reported by the step */
    char io_err[256];
    /* timings, seconds summed over steps (logged at destroy, read by the bench via the log) */
    double t_step, t_compute, t_wait;
    uint64_t steps;
} zero__s3_off;

/* Read offload_optimizer / offload_param / nvme_path / sub_group_size (only
 * with zero_optimization.stage 3; else no offload) into s.  Logs what runs. */
zero_status zero__s3_off_configure(zero__s3 *s);
/* After the shard holds the initial values and s->master/state are
 * allocated (or NULL for NVMe): widen the master from the shard (host
 * tiles), create the staging, the worker and the NVMe file and write its
 * initial tiles. */
zero_status zero__s3_off_init(zero__s3 *s);
/* The boundary step with offload: norm over the host gradient partition,
 * then the tiled, double-buffered CPU optimizer pass (see the .c). */
zero_status zero__s3_off_step(zero__s3 *s, const zero_step_ctx *ctx, zero_step_report *rep);
/* Checkpoint helpers: NVMe master/states materialized into host arrays
 * (load: written back to the file after) -- the ckpt services need arrays. */
zero_status zero__s3_off_blobs(zero__s3 *s, const char *dir, int write);
/* master -> shard (rounded) by host tiles: after a resharded load. */
void zero__s3_off_master_to_shard(zero__s3 *s);
void zero__s3_off_free(zero__s3 *s);
#endif
