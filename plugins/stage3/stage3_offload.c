/* stage3 with offload: the configuration, the tier-aware initialisation and
 * the tiled, double-buffered CPU optimizer step (see stage3_offload.h for
 * what lives in which tier).
 *
 * The step (zero__s3_off_step), after the gradient partition's norm (the
 * shared grad_norm service, so clipping and overflow are every plugin's):
 * the partition is cut into tiles of sub_group_size elements; tile k is
 * stepped by the vectorized CPU optimizer (svc->optim_step, element-wise,
 * so tiling changes no bit) on the step thread while the worker thread
 * finishes tile k-1 (its new model-dtype weights copied to the device shard
 * with svc->mem_copy; with NVMe its master and states written back) and
 * prepares tile k+1 (with NVMe: read).  Two sets of tile buffers alternate,
 * so the exposed time approaches max(copies + I/O, CPU optimizer) instead of
 * their sum; ZERO_OFFLOAD_SEQUENTIAL=1 runs the same jobs inline, one after
 * the other (the benchmark's baseline).
 *
 * The gradient crosses to the host during backward: the bucket engine's
 * reduce-scatter adds each bucket's reduced block into the host-tier
 * gradient partition, so no gradient copy is left for the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stage3_offload.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

zero_status zero__s3_off_configure(zero__s3 *s) {
    const zero_services_v1 *svc = s->svc;
    const zero_run_config *rc = s->rc;
    const char *od = NULL, *pd = NULL;
    if (svc->cfg_string(s->c, "zero_optimization.offload_optimizer.device", &od) != 1) od = NULL;
    if (svc->cfg_string(s->c, "zero_optimization.offload_param.device", &pd) != 1) pd = NULL;
    const int want_opt = rc->offload_optimizer || streq(od, "cpu") || streq(od, "nvme");
    const int want_param = streq(pd, "cpu") || streq(pd, "nvme");
    if (rc->stage != 3) {
        if (want_opt || want_param)
            svc->log(s->c, ZERO_LOG_INFO,
                     "stage3: chosen by name with zero_optimization.stage %d: offload_optimizer/offload_param "
                     "apply with stage 3 only; everything stays in the device tier",
                     (int)rc->stage);
        return ZERO_OK;
    }
    if (!want_opt && !want_param) return ZERO_OK;
    s->off_param = want_param;
    s->off_opt = streq(od, "nvme") ? ZERO__S3_OFF_NVME : ZERO__S3_OFF_CPU;
    if (!want_opt)
        svc->log(s->c, ZERO_LOG_INFO,
                 "stage3: offload_param without offload_optimizer: the optimizer states go to the host tier too "
                 "(the CPU optimizer writes the host-tier shard)");
    if (s->off_opt == ZERO__S3_OFF_NVME &&
        (svc->cfg_string(s->c, "zero_optimization.offload_optimizer.nvme_path", &s->nvme_path) != 1 ||
         !s->nvme_path || !*s->nvme_path))
        return svc->error(s->c, ZERO_ERR_CONFIG,
                          "stage3: zero_optimization.offload_optimizer.nvme_path: missing, expected the directory "
                          "for the NVMe tiles");
    s->off_param_nvme = streq(pd, "nvme");
    if (s->off_param_nvme &&
        (svc->cfg_string(s->c, "zero_optimization.offload_param.nvme_path", &s->param_nvme_path) != 1 ||
         !s->param_nvme_path || !*s->param_nvme_path))
        return svc->error(s->c, ZERO_ERR_CONFIG,
                          "stage3: zero_optimization.offload_param.nvme_path: missing, expected the directory "
                          "for the parameter shard file");
    if (rc->optim == ZERO_OPTIM_LAMB)
        return svc->error(s->c, ZERO_ERR_UNSUPPORTED,
                          "stage3 with offload: optimizer.type Lamb needs each parameter's whole norm, which the "
                          "tiled CPU optimizer cannot see; use AdamW/Adam/SGD/Lion/Adagrad, or no offload");
    s->off = calloc(1, sizeof *s->off);
    if (!s->off) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
    const char *env = getenv("ZERO_OFFLOAD_SEQUENTIAL");
    s->off->sequential = env && env[0] == '1';
    return ZERO_OK;
}

/* Host staging of one tile's model-dtype weights (set 0/1).  offload_param
 * nvme: the aligned block run covering the tile's bytes in the shard file,
 * the tile at its offset within the first block (zero__s3_nvme_write_range). */
static char *stage_at(const zero__s3 *s, int set, uint64_t t0) {
    char *raw = s->off->stage16[set];
    if (!s->off_param_nvme) return raw;
    char *base = (char *)(((uintptr_t)raw + ZERO__S3_NVME_ALIGN - 1) & ~(uintptr_t)(ZERO__S3_NVME_ALIGN - 1));
    return base + (t0 * s->esize) % ZERO__S3_NVME_ALIGN;
}

/* offload_param nvme, at init: tile [t0, t0+n) of the shard assembled from
 * the params' initial values (zeros where none, and in the padding) into
 * dst, then written to the shard file. */
static zero_status init_nvme_tile(zero__s3 *s, uint64_t t0, size_t n, char *dst) {
    const zero_services_v1 *svc = s->svc;
    memset(dst, 0, n * s->esize);
    for (uint32_t i = 0; i < s->nparams; i++) {
        const zero__s3_param *p = &s->params[i];
        const uint64_t cnt = p->counts[s->rank], lo0 = p->part_lo;
        if (!cnt || !p->info->init_data) continue;
        const uint64_t lo = lo0 > t0 ? lo0 : t0, hi = lo0 + cnt < t0 + n ? lo0 + cnt : t0 + n;
        if (lo >= hi) continue;
        svc->mem_copy(s->c, dst + (size_t)(lo - t0) * s->esize,
                      (const char *)p->info->init_data + (size_t)(p->piece_off + (lo - lo0)) * s->esize,
                      (size_t)(hi - lo) * s->esize);
    }
    if (zero__s3_nvme_write_range(s->off->pfile, t0 * s->esize, n * s->esize, dst) != 0)
        return svc->error(s->c, ZERO_ERR_IO, "stage3: offload_param nvme_path '%s': writing the parameter shard: %s",
                          s->param_nvme_path, zero__s3_nvme_error(s->off->pfile));
    return ZERO_OK;
}

/* Shard elements [t0, t0+n) widened into host fp32 dst.  The shard may be
 * device memory (no offload_param): it crosses through `tmp` (host, n
 * model-dtype elements) with mem_copy first. */
static void shard_to_f32(zero__s3 *s, uint64_t t0, size_t n, float *dst, void *tmp) {
    const char *src = s->off_param_nvme ? (const char *)tmp : (const char *)s->shard + (size_t)t0 * s->esize;
    if (!s->off_param) {
        s->svc->mem_copy(s->c, tmp, src, n * s->esize);
        src = tmp;
    }
    if (s->dtype == ZERO_DTYPE_F32) memcpy(dst, src, n * sizeof(float));
    else s->svc->convert(s->c, dst, ZERO_DTYPE_F32, src, s->dtype, n);
}

/* Host fp32 src -> shard elements [t0, t0+n), rounded (RNE) through tmp. */
static int f32_to_shard(zero__s3 *s, uint64_t t0, size_t n, const float *src, void *tmp) {
    if (s->off_param_nvme) { /* tmp: stage_at(s, 0, t0) */
        if (s->dtype == ZERO_DTYPE_F32) memcpy(tmp, src, n * sizeof(float));
        else s->svc->convert(s->c, tmp, s->dtype, src, ZERO_DTYPE_F32, n);
        return zero__s3_nvme_write_range(s->off->pfile, t0 * s->esize, n * s->esize, tmp);
    }
    char *dst = (char *)s->shard + (size_t)t0 * s->esize;
    if (s->dtype == ZERO_DTYPE_F32 && s->off_param) {
        if ((const void *)src != dst) memcpy(dst, src, n * sizeof(float));
        return 0;
    }
    void *host = s->off_param ? (void *)dst : tmp;
    if (s->dtype == ZERO_DTYPE_F32) memcpy(host, src, n * sizeof(float));
    else s->svc->convert(s->c, host, s->dtype, src, ZERO_DTYPE_F32, n);
    if (!s->off_param) s->svc->mem_copy(s->c, dst, tmp, n * s->esize);
    return 0;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void set_views(zero__s3_off *o, int set, uint32_t nstate) {
    char *base = (char *)(((uintptr_t)o->raw[set] + ZERO__S3_NVME_ALIGN - 1) & ~(uintptr_t)(ZERO__S3_NVME_ALIGN - 1));
    for (uint32_t a = 0; a <= nstate; a++) o->buf[set][a] = (float *)(void *)(base + (size_t)a * o->tile_bytes);
}

zero_status zero__s3_off_init(zero__s3 *s) {
    const zero_services_v1 *svc = s->svc;
    zero__s3_off *o = s->off;
    const uint64_t part = s->L->part_numel;
    uint64_t tile = s->rc->sub_group_size > 0 ? (uint64_t)s->rc->sub_group_size : part;
    if (tile > part) tile = part;
    if (tile == 0) tile = 1;
    o->tile = tile;
    o->ntiles = (part + tile - 1) / tile;
    /* the copy-out staging of a device shard (or of the NVMe shard file,
     * aligned for O_DIRECT): host tier, one tile each */
    const size_t sbytes = s->off_param_nvme ? zero__s3_nvme_range_bytes((size_t)tile * s->esize) : (size_t)tile * s->esize;
    for (int k = 0; k < 2 && (!s->off_param || s->off_param_nvme); k++)
        if (!(o->stage16[k] = svc->mem_alloc(s->c, ZERO_TIER_HOST, ZERO_MEM_PARAMS, sbytes)))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: cannot allocate the offload staging");
    void *tmp = o->stage16[0];
    if (s->off_param_nvme) {
        zero_status ps = zero__s3_pwin_init(s);
        if (ps != ZERO_OK) return ps;
    }
    if (s->off_opt == ZERO__S3_OFF_NVME) {
        o->narr = 1 + s->nstate;
        o->tile_bytes = align_up((size_t)tile * sizeof(float), ZERO__S3_NVME_ALIGN);
        for (int k = 0; k < 2; k++) {
            o->raw[k] = svc->mem_alloc(s->c, ZERO_TIER_HOST, ZERO_MEM_OPTIM, o->narr * o->tile_bytes + ZERO__S3_NVME_ALIGN);
            if (!o->raw[k]) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: cannot allocate the NVMe tiles");
            set_views(o, k, s->nstate);
        }
        o->nvme = zero__s3_nvme_open(s, "offload_optimizer", s->nvme_path, o->ntiles, o->narr, o->tile_bytes);
        if (!o->nvme) return ZERO_ERR_IO;
        /* initial tiles: master widened from the shard, states zero */
        for (uint64_t k = 0; k < o->ntiles; k++) {
            const uint64_t t0 = k * tile, n = (t0 + tile <= part ? tile : part - t0);
            memset(o->buf[0][0], 0, o->narr * o->tile_bytes);
            if (s->off_param_nvme) {
                tmp = stage_at(s, 0, t0);
                zero_status ts = init_nvme_tile(s, t0, (size_t)n, tmp);
                if (ts != ZERO_OK) return ts;
            }
            shard_to_f32(s, t0, (size_t)n, o->buf[0][0], tmp);
            if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 1) != 0)
                return svc->error(s->c, ZERO_ERR_IO, "stage3: NVMe tile file under '%s': %s", s->nvme_path,
                                  zero__s3_nvme_error(o->nvme));
        }
    } else if ((void *)s->master != s->shard) {
        for (uint64_t t0 = 0; t0 < part; t0 += tile) {
            const uint64_t n = t0 + tile <= part ? tile : part - t0;
            if (s->off_param_nvme) {
                tmp = stage_at(s, 0, t0);
                zero_status ts = init_nvme_tile(s, t0, (size_t)n, tmp);
                if (ts != ZERO_OK) return ts;
            }
            shard_to_f32(s, t0, (size_t)n, s->master + t0, tmp);
        }
    }
    if (s->off_param_nvme) {
        /* test-only fault hook: the shard file loses its second half, so
         * the next read of a piece there is short (tests/stage3) */
        const char *f = getenv("ZERO_NVME_FAULT");
        if (f && strcmp(f, "truncate") == 0) zero__s3_nvme_truncate(o->pfile, part * s->esize / 2 / ZERO__S3_NVME_ALIGN * ZERO__S3_NVME_ALIGN);
    }
    if (!o->sequential && o->ntiles > 1) o->worker = zero__s3_worker_start();
    svc->log(s->c, ZERO_LOG_INFO,
             "stage3: offload: master and optimizer states in %s%s%s, gradient partition in the host tier, "
             "parameter shard in %s%s; CPU optimizer in %llu tile(s) of %llu elements (sub_group_size), "
             "%s",
             s->off_opt == ZERO__S3_OFF_NVME ? "an NVMe file under " : "the host tier",
             s->off_opt == ZERO__S3_OFF_NVME ? s->nvme_path : "",
             s->off_opt == ZERO__S3_OFF_NVME && !zero__s3_nvme_direct(o->nvme) ? " (buffered: no O_DIRECT)" : "",
             s->off_param_nvme ? "an NVMe file under " : s->off_param ? "the host tier" : "the device tier",
             s->off_param_nvme ? s->param_nvme_path : "", (unsigned long long)o->ntiles, (unsigned long long)tile,
             o->worker ? "pipelined (copies and I/O of the neighbouring tiles overlap the optimizer)"
                       : "sequential");
    return ZERO_OK;
}

/* ---- the tiled step -------------------------------------------------------- */

typedef struct tile_job {
    zero__s3 *s;
    int64_t store, load; /* tile indices, -1 = none */
} tile_job;

static void tile_bounds(const zero__s3 *s, uint64_t k, uint64_t *t0, uint64_t *t1) {
    *t0 = k * s->off->tile;
    *t1 = *t0 + s->off->tile;
    if (*t1 > s->L->part_numel) *t1 = s->L->part_numel;
}

static void io_fail(zero__s3 *s, const char *what) {
    zero__s3_off *o = s->off;
    if (o->io_failed) return;
    o->io_failed = 1;
    snprintf(o->io_err, sizeof o->io_err, "%s: %s", what, zero__s3_nvme_error(o->nvme));
}

/* Tile k's results leave the step: new weights to the device shard, and
 * with NVMe master and states back to the file. */
static void store_tile(zero__s3 *s, uint64_t k) {
    zero__s3_off *o = s->off;
    const int set = (int)(k & 1);
    uint64_t t0, t1;
    tile_bounds(s, k, &t0, &t1);
    if (s->off_param_nvme) {
        if (zero__s3_nvme_write_range(o->pfile, t0 * s->esize, (size_t)(t1 - t0) * s->esize, stage_at(s, set, t0)) != 0 &&
            !o->io_failed) {
            o->io_failed = 1;
            snprintf(o->io_err, sizeof o->io_err, "offload_param nvme_path '%s': parameter shard write: %s",
                     s->param_nvme_path, zero__s3_nvme_error(o->pfile));
        }
    } else if (!s->off_param)
        s->svc->mem_copy(s->c, (char *)s->shard + (size_t)t0 * s->esize, o->stage16[set], (size_t)(t1 - t0) * s->esize);
    if (o->nvme && zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[set], 1) != 0) io_fail(s, "NVMe write");
}

static void load_tile(zero__s3 *s, uint64_t k) {
    zero__s3_off *o = s->off;
    if (o->nvme && zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[k & 1], 0) != 0) io_fail(s, "NVMe read");
}

static void run_job(void *p) {
    tile_job *j = p;
    if (j->store >= 0) store_tile(j->s, (uint64_t)j->store);
    if (j->load >= 0) load_tile(j->s, (uint64_t)j->load);
}

/* The CPU optimizer over tile k: every owned range's piece inside it. */
static zero_status compute_tile(zero__s3 *s, uint64_t k, float grad_mul) {
    const zero_services_v1 *svc = s->svc;
    zero__s3_off *o = s->off;
    const int set = (int)(k & 1);
    uint64_t t0, t1;
    tile_bounds(s, k, &t0, &t1);
    for (uint32_t i = 0; i < s->nowned; i++) {
        const zero_owned_range *w = &s->owned[i];
        const uint64_t lo = w->part_lo > t0 ? w->part_lo : t0;
        const uint64_t end = w->part_lo + (w->flat_hi - w->flat_lo);
        const uint64_t hi = end < t1 ? end : t1;
        if (lo >= hi) continue;
        zero_opt_range r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        r.flat_lo = w->flat_lo + (lo - w->part_lo);
        r.flat_hi = r.flat_lo + (hi - lo);
        if (o->nvme) {
            r.master = o->buf[set][0] + (lo - t0);
            for (uint32_t a = 0; a < s->nstate; a++) r.state[a] = o->buf[set][1 + a] + (lo - t0);
        } else {
            r.master = s->master + lo;
            for (uint32_t a = 0; a < s->nstate; a++) r.state[a] = s->state[a] + lo;
        }
        r.grad = (const char *)s->grads + (size_t)lo * s->gesize;
        r.grad_dtype = s->gdtype;
        r.grad_mul = grad_mul;
        r.param_out_dtype = s->dtype;
        if (!s->off_param || s->off_param_nvme) r.param_out = stage_at(s, set, t0) + (size_t)(lo - t0) * s->esize;
        else if ((void *)r.master != (void *)((char *)s->shard + (size_t)lo * s->esize))
            r.param_out = (char *)s->shard + (size_t)lo * s->esize;
        zero_status st = svc->optim_step(s->c, &r);
        if (st != ZERO_OK) return st;
    }
    return ZERO_OK;
}

zero_status zero__s3_off_step(zero__s3 *s, const zero_step_ctx *ctx, zero_step_report *rep) {
    const zero_services_v1 *svc = s->svc;
    zero__s3_off *o = s->off;
    zero_part_step ps = zero__s3_part_step(s);
    zero_grad_norm gn;
    zero_status st = svc->grad_norm(s->c, &ps, ctx, &gn);
    if (st != ZERO_OK) return st;
    rep->overflow = gn.overflow;
    rep->grad_norm = gn.norm;
    if (gn.overflow || o->ntiles == 0) return ZERO_OK;
    zero__s3_pwin_reset(s); /* offload_param nvme: the shard file is rewritten below */
    const double t0 = now_s();
    zero__s3_worker *w = o->worker;
    tile_job job = {s, -1, 0};
    run_job(&job); /* tile 0's inputs: nothing to overlap with yet */
    for (uint64_t k = 0; k < o->ntiles && st == ZERO_OK; k++) {
        job.store = k > 0 ? (int64_t)k - 1 : -1;
        job.load = k + 1 < o->ntiles ? (int64_t)k + 1 : -1;
        /* the worker stores tile k-1 and loads tile k+1 (same buffer set:
         * store first) while this thread steps tile k */
        zero__s3_worker_run(w, run_job, &job);
        const double c0 = now_s();
        st = compute_tile(s, k, gn.grad_mul);
        const double c1 = now_s();
        zero__s3_worker_wait(w);
        o->t_compute += c1 - c0;
        o->t_wait += now_s() - c1;
    }
    if (st == ZERO_OK && o->ntiles) store_tile(s, o->ntiles - 1);
    o->t_step += now_s() - t0;
    o->steps++;
    if (st == ZERO_OK && o->io_failed) {
        o->io_failed = 0;
        return svc->error(s->c, ZERO_ERR_IO, "stage3: offload tiles under '%s': %s", s->nvme_path ? s->nvme_path : "",
                          o->io_err);
    }
    return st;
}

/* ---- checkpoints and resharding -------------------------------------------- */

zero_status zero__s3_off_master_to_shard(zero__s3 *s) {
    zero__s3_off *o = s->off;
    const uint64_t part = s->L->part_numel;
    zero__s3_pwin_reset(s);
    for (uint64_t k = 0; k < o->ntiles; k++) {
        uint64_t t0, t1;
        tile_bounds(s, k, &t0, &t1);
        const float *src = s->master ? s->master + t0 : NULL;
        if (o->nvme) {
            if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 0) != 0) io_fail(s, "NVMe read");
            src = o->buf[0][0];
        }
        if (src && f32_to_shard(s, t0, (size_t)(t1 - t0), src, stage_at(s, 0, t0)) != 0)
            return s->svc->error(s->c, ZERO_ERR_IO, "stage3: offload_param nvme_path '%s': writing the parameter shard: %s",
                                 s->param_nvme_path, zero__s3_nvme_error(o->pfile));
    }
    (void)part;
    if (o->io_failed) {
        o->io_failed = 0;
        return s->svc->error(s->c, ZERO_ERR_IO, "stage3: offload tiles under '%s': %s", s->nvme_path ? s->nvme_path : "",
                             o->io_err);
    }
    return ZERO_OK;
}

zero_status zero__s3_off_blobs(zero__s3 *s, const char *dir, int write) {
    const zero_services_v1 *svc = s->svc;
    zero__s3_off *o = s->off;
    const uint64_t part = s->L->part_numel;
    /* The ckpt services take whole arrays: the NVMe tiles are materialized
     * for the duration of the save/load (host tier, accounted). */
    float *arr[5] = {0};
    zero_status st = ZERO_OK;
    for (uint32_t a = 0; a < o->narr && st == ZERO_OK; a++)
        if (!(arr[a] = svc->mem_alloc(s->c, ZERO_TIER_HOST, a ? ZERO_MEM_OPTIM : ZERO_MEM_MASTER,
                                      (size_t)(part ? part : 1) * sizeof(float))))
            st = svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: no host memory to checkpoint the NVMe tiles");
    for (uint64_t k = 0; write && st == ZERO_OK && k < o->ntiles; k++) {
        uint64_t t0, t1;
        tile_bounds(s, k, &t0, &t1);
        if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 0) != 0) {
            st = svc->error(s->c, ZERO_ERR_IO, "stage3: NVMe read: %s", zero__s3_nvme_error(o->nvme));
            break;
        }
        for (uint32_t a = 0; a < o->narr; a++) memcpy(arr[a] + t0, o->buf[0][a], (size_t)(t1 - t0) * sizeof(float));
    }
    if (st == ZERO_OK) {
        zero_part_step ps = zero__s3_part_step(s);
        ps.master = arr[0];
        for (uint32_t a = 0; a < s->nstate; a++) ps.state[a] = arr[1 + a];
        st = svc->ckpt_shard(s->c, dir, "stage3", &ps, NULL, write);
    }
    for (uint64_t k = 0; !write && st == ZERO_OK && k < o->ntiles; k++) {
        uint64_t t0, t1;
        tile_bounds(s, k, &t0, &t1);
        memset(o->buf[0][0], 0, o->narr * o->tile_bytes);
        for (uint32_t a = 0; a < o->narr; a++) memcpy(o->buf[0][a], arr[a] + t0, (size_t)(t1 - t0) * sizeof(float));
        if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 1) != 0)
            st = svc->error(s->c, ZERO_ERR_IO, "stage3: NVMe write: %s", zero__s3_nvme_error(o->nvme));
    }
    for (uint32_t a = 0; a < 5; a++) svc->mem_free(s->c, arr[a]);
    return st;
}

void zero__s3_off_free(zero__s3 *s) {
    zero__s3_off *o = s->off;
    if (!o) return;
    if (o->steps)
        s->svc->log(s->c, ZERO_LOG_INFO,
                    "stage3: offload: %llu steps of %llu tile(s); per step %.3f ms, of which CPU optimizer %.3f ms "
                    "and %.3f ms waiting for the copies/I/O of the neighbouring tiles (%s)",
                    (unsigned long long)o->steps, (unsigned long long)o->ntiles, 1e3 * o->t_step / (double)o->steps,
                    1e3 * o->t_compute / (double)o->steps, 1e3 * o->t_wait / (double)o->steps,
                    o->worker ? "pipelined" : "sequential");
    zero__s3_worker_stop(o->worker);
    zero__s3_pwin_free(s);
    zero__s3_nvme_close(o->nvme);
    for (int k = 0; k < 2; k++) {
        s->svc->mem_free(s->c, o->raw[k]);
        s->svc->mem_free(s->c, o->stage16[k]);
    }
    free(o);
    s->off = NULL;
}
