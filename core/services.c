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
#include "comm_stats.h"
#include "device.h"
#include "engine.h"
#include "ckpt/ckpt_engine.h"
#include "optim.h"
#include "partition_step.h"
#include "quant.h"

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
/* (1.3) The communicator layout group g is partitioned over. */
static zero_comm *svc_group_comm(zero_core *c, uint32_t g) {
    struct zero_engine *e = E(c);
    if (!e->params_frozen || g >= e->layout.view.ngroups) return NULL;
    return e->group_comms && e->group_comms[g] ? e->group_comms[g] : e->world;
}

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
    zero__span sp = zero__phase_begin(E(c)); /* (1.3) copies inside zero_step: the copy phase */
    zero_status st = zero__dev_copy(E(c)->dev, d, s, b);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) dev_failed(E(c), st, "mem_copy");
}
static zero_status svc_mem_set(zero_core *c, void *d, int v, size_t b) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_memset(E(c)->dev, d, v, b);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
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
static zero_status optim_step_impl(zero_core *c, const zero_opt_range *r) {
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

/* (1.3) Called directly from a plugin's step (offload's own loop), the
 * optimizer phase; inside part_step it is part_step's. */
static zero_status svc_optim_step(zero_core *c, const zero_opt_range *r) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = optim_step_impl(c, r);
    zero__phase_end(E(c), sp, ZERO__PH_OPTIM);
    return st;
}

/* (1.3) The gradient reduction's end, timed whole as `reduce`; the part
 * spent waiting for reductions launched during backward moves to
 * `exposed_comm` (zero__buckets_last_flush_wait). */
static zero_status svc_buckets_flush(zero_buckets *b) {
    struct zero_engine *e = zero__buckets_engine(b);
    zero__span sp = zero__phase_begin(e);
    zero_status st = zero__buckets_flush(b);
    zero__phase_end(e, sp, ZERO__PH_REDUCE);
    if (e && sp.t0 >= 0.0) zero__phase_move(e, ZERO__PH_REDUCE, ZERO__PH_EXPOSED, zero__buckets_last_flush_wait(b));
    return st;
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
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_convert(E(c)->dev, d, dd, s, sd, n);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) dev_failed(E(c), st, "convert");
}
static void svc_add_into(zero_core *c, float *d, const void *s, zero_dtype sd, size_t n) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = zero__dev_add_into(E(c)->dev, d, ZERO_DTYPE_F32, s, sd, n);
    zero__phase_end(E(c), sp, ZERO__PH_COPY);
    if (st != ZERO_OK) dev_failed(E(c), st, "add_into");
}

/* ---- (1.3) communicators made by plugins, counted in zero_comm_stats ---- */
static zero_status svc_comm_split(zero_comm *m, int color, int key, zero_comm **out) {
    return zero__sub_comm_track(m, zero__comm_split(m, color, key, out), out);
}
static zero_status svc_comm_split_node(zero_comm *m, zero_comm **out) {
    return zero__sub_comm_track(m, zero__comm_split_node(m, out), out);
}
static void svc_comm_free(zero_comm *m) {
    zero__sub_comm_retire(m);
    zero__comm_free(m);
}

static zero_status svc_comm_counters(zero_comm *m, zero_comm_stats *out) {
    if (!m || !zero__comm_stats_out_ok(out)) return ZERO_ERR_INVALID_ARGUMENT;
    zero__comm_counters c;
    zero__comm_counters_get(m, &c);
    zero_comm_stats st = zero__comm_stats_of(&c);
    zero__comm_stats_copy_out(out, &st);
    return ZERO_OK;
}

/* Checkpoint blobs: <dir>/<name>.rank<R>.bin (with a pipeline
 * <name>.pp<S>.rank<R>.bin: R is the data-parallel rank, shared by every
 * stage), written to a temp file, fsync'ed and renamed (core/ckpt/ckpt_io.c).
 * Inside zero_save each blob's size, chunk checksums and (from ckpt_shard)
 * contents are recorded for the manifest; inside zero_load each read is
 * checked against the manifest and verified. */
static zero_status ckpt_write_host(zero_core *c, const char *dir, const char *name, const void *buf,
                                   size_t bytes) {
    struct zero_engine *e = E(c);
    char file[512], err[1200];
    if (zero__ck_file_name(e, name, file, sizeof file))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "checkpoint blob name too long: %s", name);
    zero__ck_save *ss = e->ck_save;
    if (!ss && zero__ck_mkdirs(dir) != 0)
        return zero__error(e, ZERO_ERR_IO, "checkpoint: cannot create %s: %s", dir, strerror(errno));
    uint32_t *crc = NULL, nc = 0;
    if (zero__ck_write_blob(dir, file, buf, bytes, ZERO__CK_CHUNK, e->global ? zero__comm_rank(e->global) : e->rank,
                            &crc, &nc, err, sizeof err))
        return zero__error(e, ZERO_ERR_IO, "%s", err);
    if (ss) {
        zero__ck_file f = {0};
        f.file = file;
        f.blob = (char *)name;
        f.rank = e->rank;
        f.pp_stage = e->pp_stage;
        f.bytes = bytes;
        f.nchunks = nc;
        f.crc = crc;
        f.kind = ss->kind;
        f.dtype = ss->dtype;
        zero__ck_range *r = NULL;
        if (ss->kind != ZERO__CK_OPAQUE) {
            r = calloc(ss->nranges ? ss->nranges : 1, sizeof *r);
            if (!r) {
                free(crc);
                return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
            }
            for (uint32_t k = 0; k < ss->nranges; k++) r[k] = (zero__ck_range){ss->ranges[k].flat_lo, ss->ranges[k].flat_hi};
            f.nranges = ss->nranges;
            f.ranges = r;
        }
        json_array_append_new(ss->files, zero__ck_file_json(&f));
        free(r);
        ss->kind = ZERO__CK_OPAQUE;
        if (++ss->nblobs == 2) zero__ck_fault_point("between_shards", zero__comm_rank(e->global));
    }
    free(crc);
    return ZERO_OK;
}

static zero_status ckpt_read_host(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    (void)dir; /* the load session knows the directory (the plugin passes it back) */
    zero__ck_load *ld = e->ck_load;
    if (!ld)
        return zero__error(e, ZERO_ERR_STATE, "checkpoint: blob '%s' read outside zero_load (no manifest to check it)",
                           name);
    if (ld->reshard)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "checkpoint %s: blob '%s' can only be read by plugin '%s' at %d ranks (this load reshards; "
                           "read shards through ckpt_shard)",
                           ld->dir, name, ld->m->plugin, ld->m->world);
    const zero__ck_file *f = zero__ck_find(ld->m, name, e->rank, e->pp_stage);
    if (!f)
        return zero__error(e, ZERO_ERR_IO,
                           "checkpoint %s has no blob '%s' for rank %d: it was written by plugin '%s' (this run: '%s')",
                           ld->dir, name, e->rank, ld->m->plugin, e->plugin.table->name);
    if (f->bytes != bytes)
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "checkpoint %s: blob '%s' holds %llu bytes, this run expects %zu (different model or "
                           "configuration?)",
                           ld->dir, f->file, (unsigned long long)f->bytes, bytes);
    char err[1200];
    if (zero__ck_read(ld->r, f, 0, buf, bytes, err, sizeof err)) return zero__error(e, ZERO_ERR_IO, "%s", err);
    return ZERO_OK;
}

static int svc_ckpt_reshard(zero_core *c) { return E(c)->ck_load && E(c)->ck_load->reshard; }

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
    s->comm_split = svc_comm_split;
    s->comm_free = svc_comm_free;
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
    s->buckets_flush = svc_buckets_flush;
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
    s->ckpt_reshard = svc_ckpt_reshard;
    s->group_comm = svc_group_comm;
    s->comm_split_node = svc_comm_split_node;
    s->allgather_quantized = zero__allgather_quantized;
    s->reduce_scatter_quantized = zero__reduce_scatter_quantized;
    s->comm_counters = svc_comm_counters;
    s->comm_group_start = zero__comm_group_start;
    s->comm_group_end = zero__comm_group_end;
}
