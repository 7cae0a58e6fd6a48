/* The plugin ABI's revisions (core/plugin_abi.h): the one file that knows
 * a plugin may be older than this library.  NCCL adapts ncclNet_vN the same
 * way: find the newest table the library exports, convert it once, and let
 * everything else see the current one. */
#include "plugin_abi.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buckets.h"
#include "engine.h"
#include "log.h"
#include "optim_range.h"
#include "partition_step.h"
#include "quant.h"

/* A revision-1 table of 1.0 ends with `destroy`: anything shorter predates
 * the ABI. */
#define TABLE_V1_0_SIZE (offsetof(zero_plugin_table_v1, destroy) + sizeof(void (*)(void *)))
/* The first minors of revisions 2, 3 and 4. */
#define REV2_FIRST_MINOR 6u
#define REV3_FIRST_MINOR 7u
#define REV4_FIRST_MINOR 8u

static void set_err(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* Checks every revision shares: the first six fields are the same in all. */
static zero_status check_common(const zero_plugin_table_v1 *t, int rev, const char *path, char *err, size_t len) {
    if (t->abi_major != ZERO_PLUGIN_ABI_MAJOR) {
        set_err(err, len,
                "plugin %s was built for libzero plugin ABI %u.%u, this library implements %d.%d; "
                "rebuild the plugin against this libzero's headers",
                path, t->abi_major, t->abi_minor, ZERO_PLUGIN_ABI_MAJOR, ZERO_PLUGIN_ABI_MINOR);
        return ZERO_ERR_PLUGIN_ABI;
    }
    if (t->abi_minor > ZERO_PLUGIN_ABI_MINOR) {
        /* A newer minor may rely on services this core does not have. */
        set_err(err, len,
                "plugin %s was built for libzero plugin ABI %u.%u, newer than the %d.%d this library "
                "implements; upgrade libzero or rebuild the plugin against these headers",
                path, t->abi_major, t->abi_minor, ZERO_PLUGIN_ABI_MAJOR, ZERO_PLUGIN_ABI_MINOR);
        return ZERO_ERR_PLUGIN_ABI;
    }
    const size_t lo = rev == 1   ? TABLE_V1_0_SIZE
                      : rev == 2 ? sizeof(zero_plugin_table_v2)
                      : rev == 3 ? sizeof(zero_plugin_table_v3)
                                 : sizeof(zero_plugin_table_v4);
    const size_t hi = rev == 1 ? sizeof(zero_plugin_table_v1) : lo;
    const unsigned first = rev == 1 ? 0u : rev == 2 ? REV2_FIRST_MINOR : rev == 3 ? REV3_FIRST_MINOR : REV4_FIRST_MINOR;
    if (t->struct_size < lo || t->struct_size > hi || t->abi_minor < first) {
        set_err(err, len,
                "plugin %s has a table of %u bytes (zero_plugin_v%d, built for ABI %u.%u), but revision-%d "
                "tables are %zu..%zu bytes from ABI 1.%u on (corrupt table, or struct_size not set to "
                "sizeof(zero_plugin_table_v%d))",
                path, t->struct_size, rev, t->abi_major, t->abi_minor, rev, lo, hi, first, rev);
        return ZERO_ERR_PLUGIN_ABI;
    }
    if (!t->name || !t->name[0]) {
        set_err(err, len, "plugin %s: its table has no name", path);
        return ZERO_ERR_PLUGIN_SYMBOL;
    }
    return ZERO_OK;
}

/* Required entries, named in one message. */
static zero_status check_required(const zero_plugin_table_v4 *t, int has_create, const char *path, char *err,
                                  size_t len) {
    const char *missing[6];
    int n = 0;
    if (!has_create) missing[n++] = "create";
    if (!t->params_done) missing[n++] = "params_done";
    if (!t->grad_buffer) missing[n++] = "grad_buffer";
    if (!t->on_grad_ready) missing[n++] = "on_grad_ready";
    if (!t->step) missing[n++] = "step";
    if (!t->destroy) missing[n++] = "destroy";
    if (!n) return ZERO_OK;
    set_err(err, len, "plugin \"%s\" (%s) lacks required function%s:", t->name, path, n > 1 ? "s" : "");
    for (int i = 0; i < n; ++i) zero__appendf(err, len, "%s %s", i ? "," : "", missing[i]);
    return ZERO_ERR_PLUGIN_SYMBOL;
}

/* Revision 1 -> the current table.  `create` stays NULL: its services
 * differ, so zero__plugin_create calls the revision-1 entry itself.
 * set_phase (1.1) and plan (1.2) only where the table's size covers them. */
static void from_v1(const zero_plugin_table_v1 *t, zero_plugin_table_v4 *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->abi_major = t->abi_major;
    o->abi_minor = t->abi_minor;
    o->caps = t->caps;
    o->name = t->name;
    o->description = t->description;
    o->destroy = t->destroy;
    o->sync = t->sync;
    o->register_param = t->register_param;
    o->params_done = t->params_done;
    o->gather = t->gather;
    o->release = t->release;
    o->grad_buffer = t->grad_buffer;
    o->on_grad_ready = t->on_grad_ready;
    o->step = t->step;
    o->save = t->save;
    o->load = t->load;
    if (t->struct_size >= offsetof(zero_plugin_table_v1, set_phase) + sizeof t->set_phase) o->set_phase = t->set_phase;
    if (t->struct_size >= offsetof(zero_plugin_table_v1, plan) + sizeof t->plan) o->plan = t->plan;
}

/* Revisions 2 and 3 -> the current table: the same entries, without the
 * slice gathers (revision 2: the core serves zero_gather_slices through
 * gather) and without write_params (zero_params_write is refused naming
 * the plugin).  Revisions 3 and 4 only appended to revision 2's layout, and
 * create takes the same services.  `size` is the revision's table size. */
static void from_older(const void *t, size_t size, zero_plugin_table_v4 *o) {
    memset(o, 0, sizeof *o);
    memcpy(o, t, size);
    o->struct_size = sizeof *o;
}

zero_status zero__plugin_adopt(void *dl, const char *path, zero__plugin *out, char *err, size_t len) {
    dlerror(); /* clear */
    const void *sym = dlsym(dl, ZERO_PLUGIN_SYMBOL_V4);
    int rev = 4;
    if (!sym) {
        sym = dlsym(dl, ZERO_PLUGIN_SYMBOL_V3);
        rev = 3;
    }
    if (!sym) {
        sym = dlsym(dl, ZERO_PLUGIN_SYMBOL_V2);
        rev = 2;
    }
    if (!sym) {
        sym = dlsym(dl, ZERO_PLUGIN_SYMBOL_V1);
        rev = 1;
    }
    if (!sym) {
        /* Copy now: the probes below overwrite dlerror's buffer. */
        char why[512];
        const char *dl_why = dlerror();
        snprintf(why, sizeof why, "%s", dl_why ? dl_why : "symbol is NULL");
        /* A revision this library does not know yet: say so rather than "not
         * a plugin", since the fix is different. */
        for (int r = 5; r <= 9; r++) {
            char name[32];
            snprintf(name, sizeof name, "zero_plugin_v%d", r);
            if (dlsym(dl, name)) {
                set_err(err, len,
                        "plugin %s was built for a newer libzero plugin ABI (exports %s only); this library "
                        "implements %d.%d (tables zero_plugin_v1 to zero_plugin_v4): upgrade libzero",
                        path, name, ZERO_PLUGIN_ABI_MAJOR, ZERO_PLUGIN_ABI_MINOR);
                return ZERO_ERR_PLUGIN_ABI;
            }
        }
        set_err(err, len, "%s is not a libzero plugin: it exports none of %s, %s, %s, %s (%s)", path,
                ZERO_PLUGIN_SYMBOL_V4, ZERO_PLUGIN_SYMBOL_V3, ZERO_PLUGIN_SYMBOL_V2, ZERO_PLUGIN_SYMBOL_V1, why);
        return ZERO_ERR_PLUGIN_SYMBOL;
    }
    /* Every revision starts with the same six fields. */
    zero_status s = check_common((const zero_plugin_table_v1 *)sym, rev, path, err, len);
    if (s != ZERO_OK) return s;
    out->symbol = sym;
    out->revision = rev;
    out->v1 = NULL;
    out->adapted = NULL;
    if (rev == 4) {
        const zero_plugin_table_v4 *t = sym;
        if ((s = check_required(t, t->create != NULL, path, err, len)) != ZERO_OK) return s;
        out->table = t;
        return ZERO_OK;
    }
    zero_plugin_table_v4 *a = malloc(sizeof *a);
    if (!a) {
        set_err(err, len, "plugin %s: out of memory adapting its table", path);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    const zero_plugin_table_v1 *t1 = NULL;
    int has_create;
    if (rev == 3) {
        const zero_plugin_table_v3 *t3 = sym;
        from_older(t3, sizeof *t3, a);
        has_create = t3->create != NULL;
    } else if (rev == 2) {
        const zero_plugin_table_v2 *t2 = sym;
        from_older(t2, sizeof *t2, a);
        has_create = t2->create != NULL;
    } else {
        t1 = sym;
        from_v1(t1, a);
        has_create = t1->create != NULL;
    }
    if ((s = check_required(a, has_create, path, err, len)) != ZERO_OK) {
        free(a);
        return s;
    }
    out->v1 = t1;
    out->adapted = a;
    out->table = a;
    return ZERO_OK;
}

void zero__plugin_adopt_free(zero__plugin *p) {
    if (!p) return;
    free(p->adapted);
    p->adapted = NULL;
}

/* ---- services of revision 1, from the current ones ------------------- */

/* Same functions, release order.  Every entry of the frozen layout is set,
 * so a revision-1 plugin of any minor finds what its header promised. */
static void services_v1(const zero_services_v2 *s, zero_services_v1 *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->abi_version = s->abi_version;
    o->core = s->core;
    o->log = s->log;
    o->error = s->error;
    o->config = s->config;
    o->cfg_int = s->cfg_int;
    o->cfg_double = s->cfg_double;
    o->cfg_bool = s->cfg_bool;
    o->cfg_string = s->cfg_string;
    o->nparams = s->nparams;
    o->param = s->param;
    o->layout = s->layout;
    o->owned_ranges = s->owned_ranges;
    o->micro_is_boundary = s->micro_is_boundary;
    o->mem_alloc = s->mem_alloc;
    o->mem_free = s->mem_free;
    o->mem_copy = s->mem_copy;
    o->comm_world = s->comm_world;
    o->comm_rank = s->comm_rank;
    o->comm_size = s->comm_size;
    o->comm_split = s->comm_split;
    o->comm_free = s->comm_free;
    o->allreduce = s->allreduce;
    o->broadcast = s->broadcast;
    o->barrier = s->barrier;
    o->iallreduce = s->iallreduce;
    o->ireduce_scatterv = s->ireduce_scatterv;
    o->iallgatherv = s->iallgatherv;
    o->wait = s->wait;
    o->test = s->test;
    o->buckets_create = s->buckets_create;
    o->buckets_grad_slot = s->buckets_grad_slot;
    o->buckets_ready = s->buckets_ready;
    o->buckets_flush = s->buckets_flush;
    o->buckets_destroy = s->buckets_destroy;
    o->optim_state_count = s->optim_state_count;
    o->optim_step = s->optim_step;
    o->sumsq = s->sumsq;
    o->nonfinite = s->nonfinite;
    o->convert = s->convert;
    o->add_into = s->add_into;
    o->ckpt_write = s->ckpt_write;
    o->ckpt_read = s->ckpt_read;
    o->comm_global = s->comm_global;
    o->grad_norm = s->grad_norm;
    o->part_step = s->part_step;
    o->boundary_step = s->boundary_step;
    o->allgather_shares = s->allgather_shares;
    o->mem_set = s->mem_set;
    o->params_place = s->params_place;
    o->master_init = s->master_init;
    o->ckpt_shard = s->ckpt_shard;
    o->ckpt_agree = s->ckpt_agree;
    o->ckpt_reshard = s->ckpt_reshard;
    o->group_comm = s->group_comm;
    o->comm_split_node = s->comm_split_node;
    o->allgather_quantized = s->allgather_quantized;
    o->reduce_scatter_quantized = s->reduce_scatter_quantized;
    o->comm_counters = s->comm_counters;
    o->comm_group_start = s->comm_group_start;
    o->comm_group_end = s->comm_group_end;
}

zero_status zero__plugin_create(struct zero_engine *e, void **state) {
    zero__plugin *p = &e->plugin;
    if (p->v1) {
        services_v1(&e->svc, &p->services_v1);
        return p->v1->create(&p->services_v1, state);
    }
    return p->table->create(&e->svc, state);
}

/* ---- structs a plugin passes: adopt, then call the core -------------- */

#define COVERS(x, f) ((x)->struct_size >= offsetof(__typeof__(*(x)), f) + sizeof((x)->f))

int zero__adopt_bucket_spec(const zero_bucket_spec *spec, zero_bucket_spec *out) {
    if (!spec || !COVERS(spec, reduce_every_micro_step)) return -1;
    zero_bucket_spec b;
    memset(&b, 0, sizeof b);
    memcpy(&b, spec, spec->struct_size < sizeof b ? spec->struct_size : sizeof b);
    if (!COVERS(spec, grad_dtype)) b.grad_dtype = ZERO_DTYPE_F32;
    if (!COVERS(spec, on_block_final_user)) {
        b.on_block_final = NULL;
        b.on_block_final_user = NULL;
    }
    b.struct_size = sizeof b;
    *out = b;
    return 0;
}

/* zero_part_step: 1.0 ends at reserved0; grad_dtype (1.1) defaults to the
 * model dtype. */
static int adopt_part_step(const zero_part_step *ps, zero_part_step *out) {
    if (!ps || ps->struct_size < offsetof(zero_part_step, reserved0)) return -1;
    zero_part_step x;
    memset(&x, 0, sizeof x);
    memcpy(&x, ps, ps->struct_size < sizeof x ? ps->struct_size : sizeof x);
    if (!COVERS(ps, grad_dtype)) x.grad_dtype = ps->dtype;
    x.struct_size = sizeof x;
    *out = x;
    return 0;
}

static zero_status bad_struct(zero_core *c, const char *fn, const char *type) {
    return zero__error(zero__engine_of(c), ZERO_ERR_INVALID_ARGUMENT,
                       "%s: %s missing or shorter than its ABI 1.0 layout (set struct_size = sizeof(%s))", fn, type,
                       type);
}

static zero_status abi_buckets_create(zero_core *c, const zero_bucket_spec *spec, zero_buckets **out) {
    zero_bucket_spec b;
    if (zero__adopt_bucket_spec(spec, &b) != 0) {
        if (out) *out = NULL;
        return bad_struct(c, "buckets_create", "zero_bucket_spec");
    }
    return zero__buckets_create(c, &b, out);
}

static zero_status abi_optim_step(zero_core *c, const zero_opt_range *r) {
    if (!r || !COVERS(r, grad_mul)) return bad_struct(c, "optim_step", "zero_opt_range");
    zero_opt_range x;
    memset(&x, 0, sizeof x);
    memcpy(&x, r, r->struct_size < sizeof x ? r->struct_size : sizeof x);
    if (!COVERS(r, grad_dtype)) x.grad_dtype = ZERO_DTYPE_F32;
    x.struct_size = sizeof x;
    return zero__optim_range_step(c, &x);
}

static zero_status abi_grad_norm(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                 zero_grad_norm *out) {
    zero_part_step x;
    if (adopt_part_step(ps, &x) != 0) return bad_struct(c, "grad_norm", "zero_part_step");
    return zero__svc_grad_norm(c, &x, ctx, out);
}
static zero_status abi_part_step(zero_core *c, const zero_part_step *ps, float grad_mul) {
    zero_part_step x;
    if (adopt_part_step(ps, &x) != 0) return bad_struct(c, "part_step", "zero_part_step");
    return zero__svc_part_step(c, &x, grad_mul);
}
static zero_status abi_boundary_step(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                     zero_step_report *rep) {
    zero_part_step x;
    if (adopt_part_step(ps, &x) != 0) return bad_struct(c, "boundary_step", "zero_part_step");
    return zero__svc_boundary_step(c, &x, ctx, rep);
}
static zero_status abi_master_init(zero_core *c, const zero_part_step *ps, const void *params) {
    zero_part_step x;
    if (adopt_part_step(ps, &x) != 0) return bad_struct(c, "master_init", "zero_part_step");
    return zero__svc_master_init(c, &x, params);
}
static zero_status abi_ckpt_shard(zero_core *c, const char *dir, const char *prefix, const zero_part_step *ps,
                                  void *params, int write) {
    zero_part_step x;
    if (adopt_part_step(ps, &x) != 0) return bad_struct(c, "ckpt_shard", "zero_part_step");
    return zero__svc_ckpt_shard(c, dir, prefix, &x, params, write);
}

/* zero_quant_spec (1.3): bits and block required; error_feedback (1.4)
 * absent reads as NULL.  A bad spec is the collective's own
 * ZERO_ERR_INVALID_ARGUMENT (no engine to hold the text). */
static int adopt_quant(const zero_quant_spec *q, zero_quant_spec *out) {
    if (!q || !COVERS(q, block)) return -1;
    zero_quant_spec x;
    memset(&x, 0, sizeof x);
    memcpy(&x, q, q->struct_size < sizeof x ? q->struct_size : sizeof x);
    x.struct_size = sizeof x;
    *out = x;
    return 0;
}
static zero_status abi_allgather_quantized(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                           const zero_quant_spec *q) {
    zero_quant_spec x;
    return adopt_quant(q, &x) != 0 ? ZERO_ERR_INVALID_ARGUMENT : zero__allgather_quantized(m, recv, counts, dt, &x);
}
static zero_status abi_reduce_scatter_quantized(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                                zero_dtype dt, const zero_quant_spec *q) {
    zero_quant_spec x;
    return adopt_quant(q, &x) != 0 ? ZERO_ERR_INVALID_ARGUMENT
                                   : zero__reduce_scatter_quantized(m, send, recv, counts, dt, &x);
}

void zero__plugin_abi_services(zero_services_v2 *s) {
    s->buckets_create = abi_buckets_create;
    s->optim_step = abi_optim_step;
    s->grad_norm = abi_grad_norm;
    s->part_step = abi_part_step;
    s->boundary_step = abi_boundary_step;
    s->master_init = abi_master_init;
    s->ckpt_shard = abi_ckpt_shard;
    s->allgather_quantized = abi_allgather_quantized;
    s->reduce_scatter_quantized = abi_reduce_scatter_quantized;
}
