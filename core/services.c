/* The services table handed to plugins (zero_services_v2, by topic): thin
 * adapters from the public signatures onto the core's modules, which the
 * core itself calls by name, never through this table.  Plugins built
 * against an older revision get theirs from core/plugin_abi.c. */
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
#include "ckpt/ckpt_blob.h"
#include "engine_mem.h"
#include "plugin_abi.h"
#include "trace.h"
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
static int svc_micro_is_boundary(zero_core *c) { return zero__micro_is_boundary(E(c)); }

static void *svc_mem_alloc(zero_core *c, zero_mem_tier t, zero_mem_tag g, size_t b) {
    return zero__mem_alloc(E(c)->mem, t, g, b);
}
static void svc_mem_free(zero_core *c, void *p) { zero__mem_free(E(c)->mem, p); }
static zero_comm *svc_comm_world(zero_core *c) { return E(c)->world; }
static zero_comm *svc_comm_global(zero_core *c) { return E(c)->global ? E(c)->global : E(c)->world; }

static uint32_t svc_optim_state_count(zero_core *c) {
    return zero__optim_state_count(E(c)->rc->optim, E(c)->rc->momentum);
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

/* (1.6) Plugin spans on the engine's timeline: names are interned, since
 * the trace keeps pointers until it is written, after the plugin may be
 * unloaded. */
static uint64_t svc_trace_clock(zero_core *c) {
    (void)c;
    return zero__trace_now();
}
static void svc_trace_span(zero_core *c, const char *name, uint64_t t0, uint64_t t1, const char *key, double v) {
    (void)c;
    if (!t0 || !name) return;
    const char *n = zero__trace_intern(name), *k = key ? zero__trace_intern(key) : NULL;
    if (n) zero__trace_complete(n, "plugin", t0, t1 ? t1 : zero__trace_clock(), ZERO__LANE_NONE, -1, k, v, NULL, 0);
}

void zero__services_init(struct zero_engine *e) {
    zero_services_v2 *s = &e->svc;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->abi_version = ZERO_ABI_VERSION;
    s->core = zero__core_of(e);
    /* 1. log and errors */
    s->log = svc_log;
    s->error = svc_error;
    /* 2. configuration */
    s->config = svc_config;
    s->cfg_int = svc_cfg_int;
    s->cfg_double = svc_cfg_double;
    s->cfg_bool = svc_cfg_bool;
    s->cfg_string = svc_cfg_string;
    /* 3. parameters and layout */
    s->nparams = svc_nparams;
    s->param = svc_param;
    s->layout = svc_layout;
    s->owned_ranges = svc_owned_ranges;
    s->micro_is_boundary = svc_micro_is_boundary;
    s->params_place = zero__svc_params_place;
    /* 4. memory */
    s->mem_alloc = svc_mem_alloc;
    s->mem_free = svc_mem_free;
    s->mem_set = zero__engine_set;
    s->mem_copy = zero__engine_copy;
    /* 5. communicators */
    s->comm_world = svc_comm_world;
    s->comm_global = svc_comm_global;
    s->group_comm = svc_group_comm;
    s->comm_rank = zero__comm_rank;
    s->comm_size = zero__comm_size;
    s->comm_split = svc_comm_split;
    s->comm_split_node = svc_comm_split_node;
    s->comm_free = svc_comm_free;
    s->comm_counters = svc_comm_counters;
    /* 6. collectives */
    s->allreduce = zero__allreduce;
    s->broadcast = zero__broadcast;
    s->barrier = zero__barrier;
    s->iallreduce = zero__iallreduce;
    s->ireduce_scatterv = zero__ireduce_scatterv;
    s->iallgatherv = zero__iallgatherv;
    s->wait = zero__comm_wait;
    s->test = zero__comm_test;
    s->comm_group_start = zero__comm_group_start;
    s->comm_group_end = zero__comm_group_end;
    /* 7. gradient buckets */
    s->buckets_grad_slot = zero__buckets_grad_slot;
    s->buckets_ready = zero__buckets_ready;
    s->buckets_flush = svc_buckets_flush;
    s->buckets_destroy = zero__buckets_destroy;
    /* 8. parameter gather */
    s->allgather_shares = zero__svc_allgather_shares;
    /* 9. optimizer and kernels */
    s->optim_state_count = svc_optim_state_count;
    s->sumsq = zero__engine_sumsq;
    s->nonfinite = zero__engine_nonfinite;
    s->convert = zero__engine_convert;
    s->add_into = zero__engine_add_into;
    /* 10. checkpoints */
    s->ckpt_write = zero__ckpt_blob_write;
    s->ckpt_read = zero__ckpt_blob_read;
    s->ckpt_agree = zero__svc_ckpt_agree;
    s->ckpt_reshard = zero__ckpt_blob_reshard;
    /* 11. trace */
    s->trace_clock = svc_trace_clock;
    s->trace_span = svc_trace_span;
    /* The entries that take a struct from the plugin (buckets_create,
     * optim_step, grad_norm, part_step, boundary_step, master_init,
     * ckpt_shard, the quantized collectives) adopt it first. */
    zero__plugin_abi_services(s);
}
