/* The services table handed to plugins: thin adapters from the public
 * zero_services_v1 signatures onto the core's internal modules. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buckets.h"
#include "device.h"
#include "engine.h"
#include "optim.h"
#include "partition_step.h"

#define E(c) zero__engine_of(c)

static void svc_log(zero_core *c, zero_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zero__vlog(E(c), lvl, fmt, ap);
    va_end(ap);
}

static zero_status svc_error(zero_core *c, zero_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zero__verror(E(c), s, fmt, ap);
    va_end(ap);
    return s;
}

static const zero_run_config *svc_config(zero_core *c) { return E(c)->rc; }
static int svc_cfg_int(zero_core *c, const char *p, int64_t *o) { return zero__config_int(E(c)->cfg, p, o); }
static int svc_cfg_double(zero_core *c, const char *p, double *o) { return zero__config_double(E(c)->cfg, p, o); }
static int svc_cfg_bool(zero_core *c, const char *p, int *o) { return zero__config_bool(E(c)->cfg, p, o); }
static int svc_cfg_string(zero_core *c, const char *p, const char **o) { return zero__config_string(E(c)->cfg, p, o); }

static uint32_t svc_nparams(zero_core *c) { return E(c)->nparams; }
static zero_param_info *svc_param(zero_core *c, uint32_t i) {
    return i < E(c)->nparams ? &E(c)->params[i]->info : NULL;
}
static const zero_layout *svc_layout(zero_core *c) { return E(c)->params_frozen ? &E(c)->layout.view : NULL; }
static uint32_t svc_owned_ranges(zero_core *c, uint32_t rank, uint64_t lo, uint64_t hi, zero_owned_range *out,
                                 uint32_t cap) {
    return zero__layout_owned(&E(c)->layout.view, rank, lo, hi, out, cap);
}
static int svc_micro_is_boundary(zero_core *c) {
    return E(c)->micro_step + 1 >= (uint32_t)E(c)->rc->grad_accum_steps;
}

static void *svc_mem_alloc(zero_core *c, zero_mem_tier t, zero_mem_tag g, size_t b) {
    return zero__mem_alloc(E(c)->mem, t, g, b);
}
static void svc_mem_free(zero_core *c, void *p) { zero__mem_free(E(c)->mem, p); }
/* Device-aware services (gpu-wiring): with a device (e->dev) a buffer the
 * host cannot dereference goes to the device backend, everything else to
 * the CPU code as before (backends/device/device.c).  The void/double
 * services report a device failure as the engine's last error and an error
 * log line (sumsq answers NaN, nonfinite 1, so a failed norm pass reads as
 * an overflow and the step is skipped rather than taken on garbage). */
static void dev_failed(struct zero_engine *e, zero_status st, const char *what) {
    zero__error(e, st, "%s on the %s device failed: %s", what, e->dev ? e->dev->ops->name : "host",
                zero__dev_error(e->dev));
    zero__log(e, ZERO_LOG_ERROR, "%s", e->last_error);
}

static void svc_mem_copy(zero_core *c, void *d, const void *s, size_t b) {
    zero_status st = zero__dev_copy(E(c)->dev, d, s, b);
    if (st != ZERO_OK) dev_failed(E(c), st, "mem_copy");
}
static zero_status svc_mem_set(zero_core *c, void *d, int v, size_t b) {
    zero_status st = zero__dev_memset(E(c)->dev, d, v, b);
    if (st != ZERO_OK) dev_failed(E(c), st, "mem_set");
    return st;
}

static zero_comm *svc_comm_world(zero_core *c) { return E(c)->world; }
static zero_comm *svc_comm_global(zero_core *c) { return E(c)->global ? E(c)->global : E(c)->world; }

static uint32_t svc_optim_state_count(zero_core *c) {
    return zero__optim_state_count(E(c)->rc->optim, E(c)->rc->momentum);
}

/* Step [flat_lo, flat_hi), splitting it at group boundaries so each piece
 * gets its group's lr scale and weight decay; the step number and scheduled
 * lr are the core's (global_step + 1). */
static zero_status svc_optim_step(zero_core *c, const zero_opt_range *r) {
    struct zero_engine *e = E(c);
    const zero_run_config *rc = e->rc;
    const zero_layout *l = &e->layout.view;
    uint64_t t = e->global_step + 1;
    if (rc->optim == ZERO_OPTIM_LAMB)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "optimizer.type Lamb: its trust ratio needs each parameter's whole norm, which a range "
                           "kernel cannot see; the plugin '%s' must step through the part_step / boundary_step "
                           "services (stage0/1/2/3 and stage1-pp do)",
                           e->plugin.table ? e->plugin.table->name : "?");
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const zero_layout_group *lg = &l->groups[g];
        uint64_t lo = r->flat_lo > lg->flat_begin ? r->flat_lo : lg->flat_begin;
        uint64_t hi = r->flat_hi < lg->flat_begin + lg->numel ? r->flat_hi : lg->flat_begin + lg->numel;
        if (lo >= hi) continue;
        zero__hp hp; /* scheduler, zero_set_group, zero_set_hparams (OneCycle may cycle the betas) */
        zero__hp_resolve(e, lg->group_id, t, &hp);
        zero_optim_scalars s = zero__optim_scalars(rc->optim, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                                                   rc->momentum,
                                                   rc->nesterov, rc->bias_correction, t);
        size_t off = (size_t)(lo - r->flat_lo), n = (size_t)(hi - lo);
        float *st_[4] = {0};
        for (int k = 0; k < 4; k++) st_[k] = r->state[k] ? r->state[k] + off : NULL;
        void *out = NULL;
        if (r->param_out) {
            size_t es = r->param_out_dtype == ZERO_DTYPE_F32 ? 4 : 2;
            out = (char *)r->param_out + off * es;
        }
        zero_dtype gdt = r->struct_size >= offsetof(zero_opt_range, grad_dtype) + sizeof(zero_dtype)
                             ? r->grad_dtype
                             : ZERO_DTYPE_F32;
        if (gdt != ZERO_DTYPE_F32 && gdt != ZERO_DTYPE_BF16 && gdt != ZERO_DTYPE_F16)
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "optim_step: unknown gradient dtype %d", (int)gdt);
        /* Host arrays: the fused CPU pass (16-bit gradients widened one tile
         * at a time); device arrays: the CUDA multi-tensor kernel. */
        const void *grad = (const char *)r->grad + off * (gdt == ZERO_DTYPE_F32 ? 4 : 2);
        zero_status st = zero__dev_optim_step(e->dev, rc->optim, &s, r->master + off, st_, grad, gdt, r->grad_mul,
                                              out, r->param_out_dtype, n);
        if (st == ZERO_ERR_INVALID_ARGUMENT)
            return zero__error(e, st, "optim_step: master, optimizer states and copy-out must all be device memory "
                                      "or all host memory (a host gradient is staged)");
        if (st != ZERO_OK)
            return zero__error(e, st, "optim_step on the %s device failed: %s", e->dev ? e->dev->ops->name : "host",
                               zero__dev_error(e->dev));
    }
    return ZERO_OK;
}

/* Mixed-precision variants convert in bounded tiles (fp32 temporaries stay
 * small); device buffers run the CUDA kernels in the same summation order. */
static double svc_sumsq(zero_core *c, const void *x, zero_dtype dt, size_t n) {
    double acc = 0.0;
    zero_status st = zero__dev_sumsq(E(c)->dev, x, dt, n, &acc);
    if (st != ZERO_OK) {
        dev_failed(E(c), st, "sumsq");
        return (double)NAN;
    }
    return acc;
}
static int svc_nonfinite(zero_core *c, const void *x, zero_dtype dt, size_t n) {
    int any = 0;
    zero_status st = zero__dev_nonfinite(E(c)->dev, x, dt, n, &any);
    if (st != ZERO_OK) {
        dev_failed(E(c), st, "nonfinite");
        return 1;
    }
    return any;
}
static void svc_convert(zero_core *c, void *d, zero_dtype dd, const void *s, zero_dtype sd, size_t n) {
    zero_status st = zero__dev_convert(E(c)->dev, d, dd, s, sd, n);
    if (st != ZERO_OK) dev_failed(E(c), st, "convert");
}
static void svc_add_into(zero_core *c, float *d, const void *s, zero_dtype sd, size_t n) {
    zero_status st = zero__dev_add_into(E(c)->dev, d, ZERO_DTYPE_F32, s, sd, n);
    if (st != ZERO_OK) dev_failed(E(c), st, "add_into");
}

/* Checkpoint blobs: <dir>/<name>.rank<R>.bin (with a pipeline
 * <name>.pp<S>.rank<R>.bin: R is the data-parallel rank, shared by every
 * stage), written to a temp file then renamed, so a crash never leaves a
 * torn shard under the final name. */
static zero_status ckpt_path(struct zero_engine *e, const char *dir, const char *name, char *out, size_t n) {
    int w = e->pp_stages > 1 ? snprintf(out, n, "%s/%s.pp%d.rank%d.bin", dir, name, e->pp_stage, e->rank)
                             : snprintf(out, n, "%s/%s.rank%d.bin", dir, name, e->rank);
    if (w < 0 || w >= (int)n)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "checkpoint path too long: %s/%s", dir, name);
    return ZERO_OK;
}

static zero_status ckpt_write_host(zero_core *c, const char *dir, const char *name, const void *buf,
                                   size_t bytes) {
    struct zero_engine *e = E(c);
    char path[4096], tmp[4200];
    zero_status s = ckpt_path(e, dir, name, path, sizeof path);
    if (s != ZERO_OK) return s;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return zero__error(e, ZERO_ERR_IO, "checkpoint: cannot create %s: %s", dir, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return zero__error(e, ZERO_ERR_IO, "checkpoint: cannot write %s: %s", tmp, strerror(errno));
    uint64_t len = bytes;
    int ok = fwrite(&len, sizeof len, 1, f) == 1 && (bytes == 0 || fwrite(buf, 1, bytes, f) == bytes);
    ok = (fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return zero__error(e, ZERO_ERR_IO, "checkpoint: writing %s failed: %s", path, strerror(err));
    }
    return ZERO_OK;
}

static zero_status ckpt_read_host(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    char path[4096];
    zero_status s = ckpt_path(e, dir, name, path, sizeof path);
    if (s != ZERO_OK) return s;
    FILE *f = fopen(path, "rb");
    if (!f) return zero__error(e, ZERO_ERR_IO, "checkpoint: cannot open %s: %s", path, strerror(errno));
    uint64_t len = 0;
    int ok = fread(&len, sizeof len, 1, f) == 1;
    if (ok && len != bytes) {
        fclose(f);
        return zero__error(e, ZERO_ERR_MISMATCH, "checkpoint %s holds %llu bytes, expected %zu (different model?)",
                           path, (unsigned long long)len, bytes);
    }
    ok = ok && (bytes == 0 || fread(buf, 1, bytes, f) == bytes);
    fclose(f);
    if (!ok) return zero__error(e, ZERO_ERR_IO, "checkpoint: %s is truncated", path);
    return ZERO_OK;
}

/* A device buffer is written / read through one host bounce buffer: the
 * file format is the same, so a checkpoint moves between CPU and GPU runs. */
static zero_status svc_ckpt_write(zero_core *c, const char *dir, const char *name, const void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    if (!zero__dev_is_device(e->dev, buf)) return ckpt_write_host(c, dir, name, buf, bytes);
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint %s: out of host memory", name);
    zero_status st = zero__dev_copy(e->dev, h, buf, bytes);
    if (st != ZERO_OK) dev_failed(e, st, "checkpoint download");
    else st = ckpt_write_host(c, dir, name, h, bytes);
    free(h);
    return st;
}

static zero_status svc_ckpt_read(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    if (!zero__dev_is_device(e->dev, buf)) return ckpt_read_host(c, dir, name, buf, bytes);
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint %s: out of host memory", name);
    zero_status st = ckpt_read_host(c, dir, name, h, bytes);
    if (st == ZERO_OK && (st = zero__dev_copy(e->dev, buf, h, bytes)) != ZERO_OK) dev_failed(e, st, "checkpoint upload");
    free(h);
    return st;
}

void zero__services_init(struct zero_engine *e) {
    zero_services_v1 *s = &e->svc;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->abi_version = ZERO_ABI_VERSION;
    s->core = zero__core_of(e);
    s->log = svc_log;
    s->error = svc_error;
    s->config = svc_config;
    s->cfg_int = svc_cfg_int;
    s->cfg_double = svc_cfg_double;
    s->cfg_bool = svc_cfg_bool;
    s->cfg_string = svc_cfg_string;
    s->nparams = svc_nparams;
    s->param = svc_param;
    s->layout = svc_layout;
    s->owned_ranges = svc_owned_ranges;
    s->micro_is_boundary = svc_micro_is_boundary;
    s->mem_alloc = svc_mem_alloc;
    s->mem_free = svc_mem_free;
    s->mem_copy = svc_mem_copy;
    s->comm_world = svc_comm_world;
    s->comm_rank = zero__comm_rank;
    s->comm_size = zero__comm_size;
    s->comm_split = zero__comm_split;
    s->comm_free = zero__comm_free;
    s->allreduce = zero__allreduce;
    s->broadcast = zero__broadcast;
    s->barrier = zero__barrier;
    s->iallreduce = zero__iallreduce;
    s->ireduce_scatterv = zero__ireduce_scatterv;
    s->iallgatherv = zero__iallgatherv;
    s->wait = zero__comm_wait;
    s->test = zero__comm_test;
    s->buckets_create = zero__buckets_create;
    s->buckets_grad_slot = zero__buckets_grad_slot;
    s->buckets_ready = zero__buckets_ready;
    s->buckets_flush = zero__buckets_flush;
    s->buckets_destroy = zero__buckets_destroy;
    s->optim_state_count = svc_optim_state_count;
    s->optim_step = svc_optim_step;
    s->sumsq = svc_sumsq;
    s->nonfinite = svc_nonfinite;
    s->convert = svc_convert;
    s->add_into = svc_add_into;
    s->ckpt_write = svc_ckpt_write;
    s->ckpt_read = svc_ckpt_read;
    s->comm_global = svc_comm_global;
    s->grad_norm = zero__svc_grad_norm;
    s->part_step = zero__svc_part_step;
    s->boundary_step = zero__svc_boundary_step;
    s->allgather_shares = zero__svc_allgather_shares;
    s->params_place = zero__svc_params_place;
    s->master_init = zero__svc_master_init;
    s->ckpt_shard = zero__svc_ckpt_shard;
    s->ckpt_agree = zero__svc_ckpt_agree;
    s->mem_set = svc_mem_set;
}
