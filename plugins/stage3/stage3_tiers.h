/* stage3 with offload (ZeRO-3 + ZeRO-Offload / ZeRO-Infinity): the
 * contract between stage3_offload.c (tiers, the tiled step), stage3_nvme.c
 * (the NVMe tile file), stage3_worker.c (the pipeline's second thread) and
 * stage3_pwin.c (the NVMe parameter window).  A header with no unit of its
 * own, so that those files depend on each other one way only (offload uses
 * nvme, worker and pwin; pwin uses nvme; none uses offload).
 * Plugin-internal; includes only abi/ and kit/ headers through stage3.h.
 *
 * What lives where (docs/memory.md, "stage3 with offload"):
 *   offload_optimizer.device "cpu":  fp32 master, optimizer states and the
 *     gradient partition in the host tier (ZERO_TIER_HOST);
 *   offload_optimizer.device "nvme": master and states in a file under
 *     nvme_path, tile by tile; the host tier holds three tiles of them
 *     (written back, stepped, read ahead) and the gradient partition;
 *   offload_param.device "cpu": the owned model-dtype parameter shard in
 *     the host tier too;
 *   offload_param.device "nvme": the shard in a file under its nvme_path;
 *     the host tier holds a window of buffer_count pieces (stage3_pwin.c)
 *     and the step's two tiles of new weights.
 * The device tier then holds only the gather window (gather buffers, bounded
 * by stage3_max_live_parameters), the bucket staging and, without
 * offload_param, the shard.
 *
 * Threading: everything runs on the engine's step thread, except the jobs
 * handed to the worker (zero__s3_worker_run), which touch only the tile
 * buffers the step thread does not use until zero__s3_worker_wait. */
#ifndef ZERO_PLUGIN_STAGE3_TIERS_H
#define ZERO_PLUGIN_STAGE3_TIERS_H
#include <aio.h>

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
/* Wait for the job given last (no-op when none or w NULL).  A job the
 * worker has not started yet is run here, on the calling thread, instead. */
void zero__s3_worker_wait(zero__s3_worker *w);
/* Jobs run by zero__s3_worker_wait rather than the worker (for the log).
 * Call only between a wait and the next run. */
unsigned long long zero__s3_worker_taken_back(const zero__s3_worker *w);
/* Stop and join; NULL is a no-op. */
void zero__s3_worker_stop(zero__s3_worker *w);

/* ---- NVMe tile file (stage3_nvme.c) --------------------------------------- */
typedef struct zero__s3_nvme zero__s3_nvme;
/* Create an unlinked temporary file in `dir` for ntiles tiles of narr arrays
 * of tile_bytes each (tile_bytes a multiple of ZERO__S3_NVME_ALIGN).  Tries
 * O_DIRECT first and falls back, with one warning, where the file system
 * refuses it (tmpfs).  Returns NULL with the engine's error set. */
#define ZERO__S3_NVME_ALIGN 4096u
/* `key` names the config section in messages ("offload_optimizer"). */
zero__s3_nvme *zero__s3_nvme_open(zero__s3 *s, const char *key, const char *dir, uint64_t ntiles, uint32_t narr,
                                  size_t tile_bytes);
/* Read (write = 0) or write tile `k`'s arrays from/into bufs[0..narr)
 * (each tile_bytes, ZERO__S3_NVME_ALIGN-aligned): all arrays' requests are
 * issued at once with POSIX AIO, then waited for.  Returns 0, or -1 with
 * errno-style text in the handle (zero__s3_nvme_error). Thread-safe for
 * distinct tiles (the worker and the step thread never share one). */
int zero__s3_nvme_io(zero__s3_nvme *f, uint64_t k, void *const *bufs, int write);
/* The same in two halves: issue every array's request of tile k (returns at
 * once) and wait for them.  The buffers belong to the I/O until the wait;
 * one batch per tile in flight. */
typedef struct zero__s3_nvme_batch {
    struct aiocb cb[8];
    uint32_t n;
    uint64_t k;
    int write;
} zero__s3_nvme_batch;
int zero__s3_nvme_io_start(zero__s3_nvme *f, uint64_t k, void *const *bufs, int write, zero__s3_nvme_batch *b);
int zero__s3_nvme_io_wait(zero__s3_nvme *f, zero__s3_nvme_batch *b);
const char *zero__s3_nvme_error(const zero__s3_nvme *f);
int zero__s3_nvme_direct(const zero__s3_nvme *f); /* 1 when O_DIRECT is in use */
void zero__s3_nvme_close(zero__s3_nvme *f);
/* Byte ranges of a file opened with ntiles 1, narr 1 (the 16-bit shard of
 * offload_param.device "nvme", contiguous).  `buf` is ZERO__S3_NVME_ALIGN-
 * aligned and holds zero__s3_nvme_range_bytes(len) bytes; the range's data
 * sits at buf + off % ZERO__S3_NVME_ALIGN (the aligned blocks covering it
 * move as a whole).  write_range takes that data pointer itself.  read_range/write_range are synchronous (write_range
 * reads the partial end blocks back first: not for concurrent use on
 * neighbouring ranges); read_start issues an asynchronous read (POSIX AIO)
 * that read_finish waits for (-1 from read_start: not issued, read
 * synchronously instead).  All return 0 or -1 with the text in
 * zero__s3_nvme_error. */
typedef struct zero__s3_nvme_rd {
    struct aiocb cb;
    int active;
} zero__s3_nvme_rd;
size_t zero__s3_nvme_range_bytes(size_t len);
int zero__s3_nvme_read_range(zero__s3_nvme *f, uint64_t off, size_t len, void *buf);
int zero__s3_nvme_write_range(zero__s3_nvme *f, uint64_t off, size_t len, void *data);
int zero__s3_nvme_read_start(zero__s3_nvme *f, uint64_t off, size_t len, void *buf, zero__s3_nvme_rd *rd);
int zero__s3_nvme_read_finish(zero__s3_nvme *f, zero__s3_nvme_rd *rd);
/* Test-only fault hook: cut the file to `bytes` (the next read past it is
 * short).  Used by ZERO_NVME_FAULT=truncate (stage3_pwin.c). */
int zero__s3_nvme_truncate(zero__s3_nvme *f, uint64_t bytes);

/* ---- offload (stage3_offload.c) ------------------------------------------ */
/* Pipeline state: tile staging, the worker, the NVMe file.  Owned by s. */
typedef struct zero__s3_off {
    uint64_t tile;          /* elements per tile (sub_group_size, clamped to the partition) */
    uint64_t ntiles;
    uint32_t narr;          /* NVMe: 1 + nstate fp32 arrays per tile (master, states) */
    size_t tile_bytes;      /* NVMe: bytes of one array's tile, aligned */
    void *raw[3];           /* NVMe staging blocks (accounted), three tiles of narr arrays: tile k is
                               stepped while k-1 is written and k+1 read, all three in flight */
    float *buf[3][5];       /* NVMe: aligned views into raw: [set][0] master, [set][1+k] state k */
    zero__s3_nvme_batch wr, rd; /* the step's in-flight tile write and read */
    void *stage16[2];       /* device shard: the new weights of a tile (model dtype), host tier */
    zero__s3_worker *worker;
    zero__s3_nvme *nvme;
    /* offload_param.device "nvme" (stage3_pwin.c): the shard file and the
     * host window of buffer_count slots */
    zero__s3_nvme *pfile;
    struct zero__s3_pslot *pslots;
    uint32_t npslots;
    size_t pslot_bytes;
    uint64_t pseq, n_read_ahead, n_read_sync;
    zero_status send_err;   /* a window slot's all-gather test failed (reported by the next piece read) */
    int sequential;         /* ZERO_OFFLOAD_SEQUENTIAL=1: no overlap (the benchmark's baseline) */
    int calibrate;          /* ZERO_OFFLOAD_SEQUENTIAL unset: steps 1..4 alternate sequential/pipelined, then
                               the faster mode stays (pipelining a host memcpy next to the CPU optimizer can
                               lose: bench/offload); "0" always pipelines */
    double cal_ms[2];       /* calibration sums: [0] pipelined, [1] sequential */
    int alternate;          /* ZERO_OFFLOAD_SEQUENTIAL=alternate: odd steps sequential, even ones pipelined, so
                               one run compares both under the same load (logged at destroy) */
#define ZERO__S3_ALT_MAX 512
    double alt_ms[ZERO__S3_ALT_MAX]; /* tiled phase of each step, alternate mode */
    int io_failed;          /* NVMe I/O failed (step thread): reported by the step */
    char io_err[256];
    int io16_failed;        /* the worker's parameter-file write failed: its own fields (no race with the
                               step thread's), merged after the worker was waited for */
    char io16_err[256];
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
 * then the tiled, pipelined CPU optimizer pass (see the .c). */
zero_status zero__s3_off_step(zero__s3 *s, const zero_step_ctx *ctx, zero_step_report *rep);
/* Checkpoint helpers: NVMe master/states materialized into host arrays
 * (load: written back to the file after) -- the ckpt services need arrays. */
zero_status zero__s3_off_blobs(zero__s3 *s, const char *dir, int write);
/* master -> shard (rounded) by host tiles: after a resharded load (and,
 * offload_param nvme, after any load without a 16-bit params blob).
 * ZERO_ERR_IO with the engine's error set when the NVMe I/O fails. */
zero_status zero__s3_off_master_to_shard(zero__s3 *s);
/* (plugin ABI 1.8, write_params) The NVMe optimizer tiles' master
 * elements [part_lo, part_lo + n) = src (fp32, host memory): each tile it
 * touches read, patched and written back (its optimizer states kept).
 * Step thread, between steps. */
zero_status zero__s3_off_write_master(zero__s3 *s, uint64_t part_lo, const float *src, uint64_t n);
void zero__s3_off_free(zero__s3 *s);

/* ---- parameter window (stage3_pwin.c): offload_param.device "nvme" ------- */
/* Read buffer_count/buffer_size, allocate the window, create the shard file
 * (empty).  Params' counts/part_lo must be set.  Error set on failure. */
zero_status zero__s3_pwin_init(zero__s3 *s);
/* Host pointer to this rank's piece of p for the all-gather's send side:
 * from a read-ahead slot, else read now.  *slot is what zero__s3_pwin_sent
 * needs.  NULL with the engine's error set (ZERO_ERR_IO) on a failed read. */
const void *zero__s3_pwin_piece(zero__s3 *s, zero__s3_param *p, int *slot);
/* The all-gather of p was issued (`req`, the gather engine's request for
 * p; NULL if it failed): the slot stays busy until the engine no longer
 * has that request in flight (zero_kit_gather_pending). */
void zero__s3_pwin_sent(zero__s3 *s, int slot, zero__s3_param *p, const zero_comm_req *req);
/* Start asynchronous reads of the next pieces of the recorded order into
 * free slots (no-op without offload_param nvme or off the order). */
void zero__s3_pwin_readahead(zero__s3 *s);
/* Drop every read-ahead and wait for the sends: the file is about to
 * change (step, load). */
void zero__s3_pwin_reset(zero__s3 *s);
void zero__s3_pwin_free(zero__s3 *s);
#endif
