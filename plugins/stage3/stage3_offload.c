/* stage3 with offload: the configuration, the tier-aware initialisation and
 * the tiled, pipelined CPU optimizer step (see stage3_tiers.h for what
 * lives in which tier).
 *
 * The step (zero__s3_off_step), after the gradient partition's norm (the
 * shared grad_norm service, so clipping and overflow are every plugin's):
 * the partition is cut into tiles of sub_group_size elements; tile k is
 * stepped by the vectorized CPU optimizer (svc->optim_step, element-wise,
 * so tiling changes no bit) on the step thread while tile k-1's new
 * model-dtype weights leave on the worker thread (copied to the device shard
 * with svc->mem_copy, or written to the offload_param NVMe file) and, with
 * an NVMe optimizer, tile k-1's master and states are written back and tile
 * k+1's read in as POSIX AIO issued from the step thread (three buffer sets:
 * both in flight at once).  The exposed time approaches max(copies + I/O,
 * CPU optimizer) instead of their sum; ZERO_OFFLOAD_SEQUENTIAL=1 runs the
 * same jobs one after the other (the benchmark's baseline), =alternate
 * alternates the two per step and logs both (bench/offload).
 *
 * The gradient crosses to the host during backward: the bucket engine's
 * reduce-scatter adds each bucket's reduced block into the host-tier
 * gradient partition, so no gradient copy is left for the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "stage3_tiers.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

zero_status zero__s3_off_configure(zero__s3 *s) {
    const zero_services *svc = s->svc;
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
    /* "1", "0" (pipelined, not measured) or "alternate"; unset or anything
     * else (warned about by libzero at engine creation): measured over the
     * first steps, the faster kept */
    s->off->sequential = env && strcmp(env, "1") == 0;
    s->off->alternate = env && strcasecmp(env, "alternate") == 0;
    s->off->calibrate = !env || (strcmp(env, "0") && !s->off->sequential && !s->off->alternate);
    return ZERO_OK;
}

/* Does tile k's new model-dtype weights need carrying out of the step (to
 * the device shard, a copy; to the offload_param NVMe file, a write)?  Not
 * with a host-tier shard: the optimizer wrote it in place. */
static int has_store16(const zero__s3 *s) { return !s->off_param || s->off_param_nvme; }

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
    const zero_services *svc = s->svc;
    memset(dst, 0, n * s->esize);
    for (uint32_t i = 0; i < s->nparams; i++) {
        const zero__s3_param *p = &s->params[i];
        const uint64_t cnt = p->count, lo0 = p->part_lo;
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
    const zero_services *svc = s->svc;
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
    const int nsets = 3; /* NVMe optimizer tiles: k-1 written, k stepped, k+1 read */
    if (s->off_param_nvme) {
        zero_status ps = zero__s3_pwin_init(s);
        if (ps != ZERO_OK) return ps;
    }
    if (s->off_opt == ZERO__S3_OFF_NVME) {
        o->narr = 1 + s->nstate;
        o->tile_bytes = align_up((size_t)tile * sizeof(float), ZERO__S3_NVME_ALIGN);
        for (int k = 0; k < nsets; k++) {
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
    /* the worker carries the new weights' copies / parameter-file writes;
     * the NVMe optimizer tiles need none (AIO from the step thread) */
    if (!o->sequential && o->ntiles > 1 && has_store16(s)) o->worker = zero__s3_worker_start();
    svc->log(s->c, ZERO_LOG_INFO,
             "stage3: offload: master and optimizer states in %s%s%s, gradient partition in the host tier, "
             "parameter shard in %s%s; CPU optimizer in %llu tile(s) of %llu elements (sub_group_size), "
             "%s",
             s->off_opt == ZERO__S3_OFF_NVME ? "an NVMe file under " : "the host tier",
             s->off_opt == ZERO__S3_OFF_NVME ? s->nvme_path : "",
             s->off_opt == ZERO__S3_OFF_NVME && !zero__s3_nvme_direct(o->nvme) ? " (buffered: no O_DIRECT)" : "",
             s->off_param_nvme ? "an NVMe file under " : s->off_param ? "the host tier" : "the device tier",
             s->off_param_nvme ? s->param_nvme_path : "", (unsigned long long)o->ntiles, (unsigned long long)tile,
             !o->sequential && o->ntiles > 1 ? "pipelined (copies and I/O of the neighbouring tiles overlap the optimizer)"
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

/* Tile k's new model-dtype weights leave the step (has_store16). */

static void store16(zero__s3 *s, uint64_t k) {
    zero__s3_off *o = s->off;
    const int set = (int)(k & 1);
    uint64_t t0, t1;
    tile_bounds(s, k, &t0, &t1);
    if (s->off_param_nvme) {
        if (zero__s3_nvme_write_range(o->pfile, t0 * s->esize, (size_t)(t1 - t0) * s->esize, stage_at(s, set, t0)) != 0 &&
            !o->io16_failed) {
            o->io16_failed = 1;
            snprintf(o->io16_err, sizeof o->io16_err, "offload_param nvme_path '%s': parameter shard write: %s",
                     s->param_nvme_path, zero__s3_nvme_error(o->pfile));
        }
    } else if (!s->off_param)
        s->svc->mem_copy(s->c, (char *)s->shard + (size_t)t0 * s->esize, o->stage16[set], (size_t)(t1 - t0) * s->esize);
}

/* The NVMe optimizer tiles (master and states): tile k lives in buffer set
 * k % 3 while in memory.  Start (or, `wait`, also finish) tile k's write
 * back / read in.  The writes and reads are POSIX AIO issued from the step
 * thread itself: no thread hop between the step and the I/O. */
static int set3_of(uint64_t k) { return (int)(k % 3); }
static void nvme_start(zero__s3 *s, uint64_t k, int write) {
    zero__s3_off *o = s->off;
    zero__s3_nvme_batch *b = write ? &o->wr : &o->rd;
    if (zero__s3_nvme_io_start(o->nvme, k, (void *const *)o->buf[set3_of(k)], write, b) != 0)
        io_fail(s, write ? "NVMe write" : "NVMe read");
}
static void nvme_wait(zero__s3 *s, int write) {
    zero__s3_off *o = s->off;
    if (zero__s3_nvme_io_wait(o->nvme, write ? &o->wr : &o->rd) != 0) io_fail(s, write ? "NVMe write" : "NVMe read");
}

static void run_job(void *p) {
    tile_job *j = p;
    if (j->store >= 0) store16(j->s, (uint64_t)j->store);
}

/* The CPU optimizer over tile k: every owned range's piece inside it. */
static zero_status compute_tile(zero__s3 *s, uint64_t k, float grad_mul) {
    const zero_services *svc = s->svc;
    zero__s3_off *o = s->off;
    const int set = (int)(k & 1), set3 = set3_of(k);
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
            r.master = o->buf[set3][0] + (lo - t0);
            for (uint32_t a = 0; a < s->nstate; a++) r.state[a] = o->buf[set3][1 + a] + (lo - t0);
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
    const zero_services *svc = s->svc;
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
    /* alternate mode: the same jobs inline on odd steps (the sequential baseline) */
    const int cal = o->calibrate && o->steps >= 1 && o->steps <= 4; /* step 0 warms up */
    const int seq = o->sequential || ((o->alternate || cal) && (o->steps & 1));
    zero__s3_worker *w = seq || !has_store16(s) ? NULL : o->worker;
    tile_job job = {s, -1, 0};
    if (o->nvme) { /* tile 0's inputs: nothing to overlap with yet */
        nvme_start(s, 0, 0);
        nvme_wait(s, 0);
    }
    for (uint64_t k = 0; k < o->ntiles && st == ZERO_OK; k++) {
        /* While this thread steps tile k: tile k-1's new weights go to the
         * device shard / parameter file (the worker), tile k-1's master and
         * states are written back and tile k+1's read in (AIO in flight;
         * three NVMe buffer sets, so both at once).  Sequential: the same,
         * each finished before the optimizer starts. */
        if (o->nvme && k > 0) nvme_start(s, k - 1, 1);
        if (o->nvme && seq && k > 0) nvme_wait(s, 1);
        if (o->nvme && k + 1 < o->ntiles) nvme_start(s, k + 1, 0);
        if (o->nvme && seq && k + 1 < o->ntiles) nvme_wait(s, 0);
        job.store = k > 0 && has_store16(s) ? (int64_t)k - 1 : -1;
        if (job.store >= 0) zero__s3_worker_run(w, run_job, &job);
        const double c0 = now_s();
        st = compute_tile(s, k, gn.grad_mul);
        const double c1 = now_s();
        if (job.store >= 0) zero__s3_worker_wait(w);
        if (o->nvme && !seq && k > 0) nvme_wait(s, 1);
        if (o->nvme && !seq && k + 1 < o->ntiles) nvme_wait(s, 0);
        o->t_compute += c1 - c0;
        o->t_wait += now_s() - c1;
    }
    if (o->ntiles && (st == ZERO_OK || o->nvme)) { /* the last tile (the file must not keep half a step) */
        if (has_store16(s) && st == ZERO_OK) store16(s, o->ntiles - 1);
        if (o->nvme && st == ZERO_OK) {
            nvme_start(s, o->ntiles - 1, 1);
            nvme_wait(s, 1);
        }
    }
    o->t_step += now_s() - t0;
    if (o->alternate && o->steps < ZERO__S3_ALT_MAX) o->alt_ms[o->steps] = 1e3 * (now_s() - t0);
    if (cal) o->cal_ms[seq] += 1e3 * (now_s() - t0);
    if (cal && o->steps == 4) { /* two steps each way measured: keep the faster (a performance choice only:
                                   both modes compute the same bits) */
        o->sequential = o->cal_ms[1] < o->cal_ms[0];
        svc->log(s->c, ZERO_LOG_INFO,
                 "stage3: offload: tiled phase over two steps pipelined %.3f ms, sequential %.3f ms: %s from now on "
                 "(ZERO_OFFLOAD_SEQUENTIAL=0 or 1 fixes the mode)",
                 o->cal_ms[0], o->cal_ms[1], o->sequential ? "sequential" : "pipelined");
    }
    o->steps++;
    if (o->io16_failed && !o->io_failed) { /* the worker is idle: its fields are ours again */
        o->io_failed = 1;
        memcpy(o->io_err, o->io16_err, sizeof o->io_err);
    }
    o->io16_failed = 0;
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
    if (o->io16_failed && !o->io_failed) {
        o->io_failed = 1;
        memcpy(o->io_err, o->io16_err, sizeof o->io_err);
    }
    o->io16_failed = 0;
    if (o->io_failed) {
        o->io_failed = 0;
        return s->svc->error(s->c, ZERO_ERR_IO, "stage3: offload tiles under '%s': %s", s->nvme_path ? s->nvme_path : "",
                             o->io_err);
    }
    return ZERO_OK;
}

zero_status zero__s3_off_write_master(zero__s3 *s, uint64_t part_lo, const float *src, uint64_t n) {
    zero__s3_off *o = s->off;
    const uint64_t hi = part_lo + n;
    for (uint64_t k = part_lo / o->tile; k < o->ntiles && k * o->tile < hi; k++) {
        uint64_t t0, t1;
        tile_bounds(s, k, &t0, &t1);
        const uint64_t a = part_lo > t0 ? part_lo : t0, b = hi < t1 ? hi : t1;
        if (a >= b) continue;
        /* read-modify-write of the whole tile: its states stay as they are */
        if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 0) != 0)
            return s->svc->error(s->c, ZERO_ERR_IO, "stage3: NVMe read: %s", zero__s3_nvme_error(o->nvme));
        memcpy(o->buf[0][0] + (a - t0), src + (a - part_lo), (size_t)(b - a) * sizeof(float));
        if (zero__s3_nvme_io(o->nvme, k, (void *const *)o->buf[0], 1) != 0)
            return s->svc->error(s->c, ZERO_ERR_IO, "stage3: NVMe write: %s", zero__s3_nvme_error(o->nvme));
    }
    return ZERO_OK;
}

zero_status zero__s3_off_blobs(zero__s3 *s, const char *dir, int write) {
    const zero_services *svc = s->svc;
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

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Alternate mode: medians of the pipelined (even) and sequential (odd)
 * steps and of the per-pair ratios, the first pair left out (warm-up). */
static void log_alternate(zero__s3 *s) {
    zero__s3_off *o = s->off;
    const uint64_t n = o->steps < ZERO__S3_ALT_MAX ? o->steps : ZERO__S3_ALT_MAX;
    double pipe[ZERO__S3_ALT_MAX / 2], seq[ZERO__S3_ALT_MAX / 2], ratio[ZERO__S3_ALT_MAX / 2];
    size_t k = 0;
    for (uint64_t i = 2; i + 1 < n; i += 2, k++) {
        pipe[k] = o->alt_ms[i];
        seq[k] = o->alt_ms[i + 1];
        ratio[k] = seq[k] > 0 ? pipe[k] / seq[k] : 0;
    }
    if (!k) return;
    qsort(pipe, k, sizeof *pipe, cmp_double);
    qsort(seq, k, sizeof *seq, cmp_double);
    qsort(ratio, k, sizeof *ratio, cmp_double);
    s->svc->log(s->c, ZERO_LOG_INFO,
                "stage3: offload: interleaved %zu pairs of %llu tile(s): tiled phase median pipelined %.3f ms, "
                "sequential %.3f ms, pipelined/sequential %.3f (min %.3f, max %.3f)",
                k, (unsigned long long)o->ntiles, pipe[k / 2], seq[k / 2], ratio[k / 2], ratio[0], ratio[k - 1]);
}

void zero__s3_off_free(zero__s3 *s) {
    zero__s3_off *o = s->off;
    if (!o) return;
    if (o->alternate) log_alternate(s);
    if (o->steps)
        s->svc->log(s->c, ZERO_LOG_INFO,
                    "stage3: offload: %llu steps of %llu tile(s); per step %.3f ms, of which CPU optimizer %.3f ms "
                    "and %.3f ms waiting for the copies/I/O of the neighbouring tiles (%s; %llu copy jobs the worker "
                    "had not started taken back by the step thread)",
                    (unsigned long long)o->steps, (unsigned long long)o->ntiles, 1e3 * o->t_step / (double)o->steps,
                    1e3 * o->t_compute / (double)o->steps, 1e3 * o->t_wait / (double)o->steps,
                    o->alternate ? "interleaved" : !o->sequential && o->ntiles > 1 ? "pipelined" : "sequential",
                    zero__s3_worker_taken_back(o->worker));
    zero__s3_worker_stop(o->worker);
    zero__s3_pwin_free(s);
    zero__s3_nvme_close(o->nvme);
    for (int k = 0; k < 3; k++) s->svc->mem_free(s->c, o->raw[k]);
    for (int k = 0; k < 2; k++) s->svc->mem_free(s->c, o->stage16[k]);
    free(o);
    s->off = NULL;
}
