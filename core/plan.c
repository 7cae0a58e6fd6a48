/* zero_plan and the planning services (contract in plan.h and zero.h).
 *
 * The context stands in for an engine: a parsed config, a layout built as
 * zero_params_done would build it (same alignment, rank 0), and one
 * zero_param_info per tensor.  The plugin's plan entry sees it through
 * zero_plan_services_v1 and records what it would allocate; nothing is
 * allocated for the model itself and nothing communicates. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_abi.h"
#include "layout.h"
#include "struct_in.h"
#include "optim.h"
#include "plan.h"
#include "plan_buckets.h"
#include "plan_candidates.h"

/* Must equal core/api.c's ENGINE_ALIGN_ELEMS: the plan's layout is the engine's. */
#define PLAN_ALIGN_ELEMS 16

typedef struct zero__plan_ctx {
    const zero__config *cfg;
    const zero_run_config *rc;
    zero__layout layout;
    zero_param_info *infos;
    uint64_t *numel;
    uint32_t n;
    zero_memory_plan acc;
    char *err;
    size_t err_len;
    /* (1.9) the bucket sets the engine makes (kit/kit_glue.c bsets, buckets.c
     * in_set): one for every group without expert groups; with them, the
     * dense groups' set and one per expert group, each over its own
     * communicator (nsets x ngroups flags, NULL: one set of every group) */
    uint32_t nsets;
    uint8_t *in_set;
    uint32_t *set_world;
} zero__plan_ctx;

#define P(c) ((zero__plan_ctx *)(void *)(c))

static const zero_run_config *ps_config(zero_core *c) { return P(c)->rc; }
static int ps_cfg_int(zero_core *c, const char *p, int64_t *o) { return zero__config_int(P(c)->cfg, p, o); }
static int ps_cfg_double(zero_core *c, const char *p, double *o) { return zero__config_double(P(c)->cfg, p, o); }
static int ps_cfg_bool(zero_core *c, const char *p, int *o) { return zero__config_bool(P(c)->cfg, p, o); }
static int ps_cfg_string(zero_core *c, const char *p, const char **o) {
    return zero__config_string(P(c)->cfg, p, o);
}
static uint32_t ps_nparams(zero_core *c) { return P(c)->n; }
static const zero_param_info *ps_param(zero_core *c, uint32_t i) { return i < P(c)->n ? &P(c)->infos[i] : NULL; }
static const zero_layout *ps_layout(zero_core *c) { return &P(c)->layout.view; }
static uint32_t ps_optim_state_count(zero_core *c) {
    return zero__optim_state_count(P(c)->rc->optim, P(c)->rc->momentum);
}
static void ps_add(zero_core *c, zero_mem_tier t, zero_mem_tag g, uint64_t bytes) {
    if (t < 0 || t >= ZERO_NTIERS || g < 0 || g >= ZERO_MEM_NTAGS) return;
    P(c)->acc.bytes[t][g] += bytes;
}
static uint64_t ps_buckets_bytes(zero_core *c, const zero_bucket_spec *plugin_spec) {
    zero_bucket_spec full; /* a plugin of any revision: older layouts get their defaults */
    if (zero__adopt_bucket_spec(plugin_spec, &full) != 0) return 0;
    const zero_bucket_spec *spec = &full;
    zero__plan_ctx *x = P(c);
    const zero_layout *L = &x->layout.view;
    uint64_t bytes = 0, ring = 0;
    /* With expert groups a plugin that declares ZERO_PLUGIN_CAP_EXPERT_GROUPS
     * makes one set per partition communicator from this one spec; each set
     * stages and reduces only its own groups.  The bucket sets' reductions
     * also bring the MPI ring scratch, which the engine accounts as
     * ZERO_MEM_OTHER on the host tier (docs/memory.md): one reduction's per
     * set, summed over the sets (the progress engine lets another
     * communicator's reduction hold its own scratch at the same time). */
    for (uint32_t k = 0; k < x->nsets; k++) {
        const uint8_t *in = x->in_set ? x->in_set + (size_t)k * L->ngroups : NULL;
        ring += zero__plan_ring_scratch_bytes(L, x->layout.param_offset, x->numel, x->n, spec,
                                              x->rc->round_robin_gradients, x->rc->comm_dtype, in, x->set_world[k]);
        bytes += zero__plan_buckets_bytes(L, x->layout.param_offset, x->numel, spec, x->rc->round_robin_gradients,
                                          x->rc->comm_dtype, in, x->set_world[k]);
    }
    ps_add(c, ZERO_TIER_HOST, ZERO_MEM_OTHER, ring);
    return bytes;
}
static zero_status ps_error(zero_core *c, zero_status s, const char *fmt, ...) {
    zero__plan_ctx *x = P(c);
    if (x->err && x->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, x->err_len, fmt, ap);
        va_end(ap);
    }
    return s;
}

static void copy_err(char *err, size_t len, const char *fmt, ...) ZERO_PRINTF(3, 4);
static void copy_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

int zero__plan_supported(const zero_plugin_table *t) {
    return t && t->plan;
}

uint64_t *zero__plan_split_count(uint64_t total, uint32_t *n) {
    const uint64_t T = ZERO_PLAN_TENSOR_NUMEL;
    uint64_t k = total / T + (total % T ? 1 : 0);
    if (k == 0 || k > UINT32_MAX) return NULL;
    uint64_t *v = malloc((size_t)k * sizeof *v);
    if (!v) return NULL;
    for (uint64_t i = 0; i < k; i++) v[i] = T;
    if (total % T) v[k - 1] = total % T;
    *n = (uint32_t)k;
    return v;
}

/* (1.9) What zero_params_done would say of these expert groups
 * (core/api.c expert_support, core/experts.c), before anything is built;
 * fills part_world (per param: its group's partition size, 0 = dense). */
static zero_status experts_check(const zero_plugin_table *table, const zero_run_config *rc, uint32_t world,
                                 const int32_t *groups, uint32_t nparams, const zero__plan_experts *ex,
                                 uint32_t *part_world, char *err, size_t err_len) {
    for (uint32_t k = 0; k < ex->n; k++) {
        const int32_t g = ex->groups[k];
        const uint32_t d = ex->sizes[k];
        if (d < 1 || d > world || world % d != 0) {
            copy_err(err, err_len,
                     "zero_plan: expert group %d: expert_dp_sizes %u must divide world_size %u (every "
                     "expert-data-parallel group of a run has the same size)",
                     (int)g, d, world);
            return ZERO_ERR_INVALID_ARGUMENT;
        }
        uint32_t held = 0;
        for (uint32_t j = 0; j < k; j++)
            if (ex->groups[j] == g) {
                copy_err(err, err_len, "zero_plan: expert group %d is given twice", (int)g);
                return ZERO_ERR_INVALID_ARGUMENT;
            }
        for (uint32_t i = 0; i < nparams; i++)
            if ((groups ? groups[i] : 0) == g) {
                part_world[i] = d;
                held++;
            }
        if (!held) {
            copy_err(err, err_len, "zero_plan: expert group %d holds no parameter (groups names none)", (int)g);
            return ZERO_ERR_INVALID_ARGUMENT;
        }
    }
    if (!(table->caps & ZERO_PLUGIN_CAP_EXPERT_GROUPS)) {
        copy_err(err, err_len,
                 "zero_plan: param group %d is an expert group but plugin '%s' does not support expert groups "
                 "(no ZERO_PLUGIN_CAP_EXPERT_GROUPS); use stage0, stage1, stage2, stage3 or offload",
                 (int)ex->groups[0], table->name ? table->name : "?");
        return ZERO_ERR_UNSUPPORTED;
    }
    if (rc->round_robin_gradients) {
        copy_err(err, err_len,
                 "zero_plan: zero_optimization.round_robin_gradients with expert groups: not supported (as at "
                 "zero_params_done); set round_robin_gradients to false");
        return ZERO_ERR_UNSUPPORTED;
    }
    return ZERO_OK;
}

/* The bucket sets of x's layout (buckets.c zero__buckets_create in_set):
 * set 0 the dense groups (every group without expert groups), then one per
 * expert group, in layout order.  part_world: experts_check's (NULL: no
 * expert groups).  0, or -1 when out of memory. */
static int plan_sets(zero__plan_ctx *x, uint32_t world, const uint32_t *part_world) {
    const zero_layout *L = &x->layout.view;
    const uint32_t ng = L->ngroups;
    uint32_t nexp = 0;
    for (uint32_t g = 0; part_world && g < ng; g++)
        nexp += L->groups[g].nparams && part_world[L->param_order[L->groups[g].first_param]] > 0;
    x->nsets = 1 + nexp;
    x->set_world = calloc(x->nsets, sizeof *x->set_world);
    if (!x->set_world) return -1;
    x->set_world[0] = world;
    if (!nexp) return 0;
    x->in_set = calloc((size_t)x->nsets * ng, 1);
    if (!x->in_set) return -1;
    for (uint32_t g = 0, k = 1; g < ng; g++) {
        const uint32_t d = L->groups[g].nparams ? part_world[L->param_order[L->groups[g].first_param]] : 0;
        if (!d) {
            x->in_set[g] = 1; /* set 0 */
            continue;
        }
        x->in_set[(size_t)k * ng + g] = 1;
        x->set_world[k++] = d;
    }
    return 0;
}

zero_status zero__plan_table(const zero_plugin_table *table, const zero__config *cfg, uint32_t world,
                             const uint64_t *numels, const int32_t *groups, uint32_t nparams,
                             const zero__plan_experts *ex, zero_memory_plan *out, char *err, size_t err_len) {
    if (!zero__plan_supported(table)) {
        copy_err(err, err_len, "plugin '%s' has no plan function (the table's plan entry, ABI 1.2)",
                 table && table->name ? table->name : "?");
        return ZERO_ERR_UNSUPPORTED;
    }
    if (world < 1) {
        copy_err(err, err_len, "zero_plan: world_size must be at least 1");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    zero__plan_ctx x;
    memset(&x, 0, sizeof x);
    x.cfg = cfg;
    x.rc = zero__config_run(cfg);
    x.n = nparams;
    x.err = err;
    x.err_len = err_len;
    x.acc.struct_size = sizeof x.acc;
    zero__layout_input *in = calloc(nparams ? nparams : 1, sizeof *in);
    x.infos = calloc(nparams ? nparams : 1, sizeof *x.infos);
    x.numel = calloc(nparams ? nparams : 1, sizeof *x.numel);
    uint32_t *part_world = NULL, *part_rank = NULL;
    zero_status s = ZERO_OK;
    if (!in || !x.infos || !x.numel) {
        copy_err(err, err_len, "zero_plan: out of memory");
        s = ZERO_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (uint32_t i = 0; i < nparams; i++) in[i] = (zero__layout_input){numels[i], groups ? groups[i] : 0};
    const int experts = ex && ex->n > 0;
    if (experts) { /* (1.9) partition sizes per param; rank 0's place (0) in each group */
        part_world = calloc(nparams ? nparams : 1, sizeof *part_world);
        part_rank = calloc(nparams ? nparams : 1, sizeof *part_rank);
        if (!part_world || !part_rank) {
            copy_err(err, err_len, "zero_plan: out of memory");
            s = ZERO_ERR_OUT_OF_MEMORY;
            goto done;
        }
        if ((s = experts_check(table, x.rc, world, groups, nparams, ex, part_world, err, err_len)) != ZERO_OK)
            goto done;
    }
    /* the engine's layout, interleaved or not, or with expert groups (api.c zero_params_done) */
    if ((experts ? zero__layout_build_parts(&x.layout, in, nparams, world, 0, PLAN_ALIGN_ELEMS, part_world, part_rank)
                 : zero__layout_build_run(&x.layout, in, nparams, world, 0, PLAN_ALIGN_ELEMS,
                                          x.rc->round_robin_gradients,
                                          x.rc->reduce_bucket_size > 0 ? (uint64_t)x.rc->reduce_bucket_size : 0)) != 0 ||
        plan_sets(&x, world, part_world) != 0) {
        copy_err(err, err_len, "zero_plan: could not build the partition layout");
        s = ZERO_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (uint32_t i = 0; i < nparams; i++) {
        zero_param_info *p = &x.infos[i];
        p->struct_size = sizeof *p;
        p->index = i;
        p->name = "";
        p->numel = numels[i];
        p->dtype = x.rc->model_dtype;
        p->group = groups ? groups[i] : 0;
        p->flat_offset = x.layout.param_offset[i];
        x.numel[i] = numels[i];
    }
    zero_plan_services_v1 ps = {
        .struct_size = sizeof ps,
        .abi_version = ZERO_ABI_VERSION,
        .core = (zero_core *)(void *)&x,
        .config = ps_config,
        .cfg_int = ps_cfg_int,
        .cfg_double = ps_cfg_double,
        .cfg_bool = ps_cfg_bool,
        .cfg_string = ps_cfg_string,
        .nparams = ps_nparams,
        .param = ps_param,
        .layout = ps_layout,
        .optim_state_count = ps_optim_state_count,
        .add = ps_add,
        .buckets_bytes = ps_buckets_bytes,
        .error = ps_error,
    };
    if (err && err_len) err[0] = '\0';
    s = table->plan(&ps);
    if (s != ZERO_OK) {
        if (err && err_len && !err[0])
            copy_err(err, err_len, "plugin '%s': plan failed (%s)", table->name, zero_status_string(s));
        goto done;
    }
    for (int t = 0; t < ZERO_NTIERS; t++) {
        x.acc.total[t] = 0;
        for (int g = 0; g < ZERO_MEM_NTAGS; g++) x.acc.total[t] += x.acc.bytes[t][g];
    }
    snprintf(x.acc.plugin, sizeof x.acc.plugin, "%s", table->name ? table->name : "");
    if (out) {
        size_t n = out->struct_size < sizeof x.acc ? out->struct_size : sizeof x.acc;
        if (n > sizeof(uint32_t) * 2)
            memcpy((char *)out + sizeof(uint32_t) * 2, (const char *)&x.acc + sizeof(uint32_t) * 2,
                   n - sizeof(uint32_t) * 2);
    }
done:
    if (x.layout.view.groups || x.layout.param_offset) zero__layout_free(&x.layout);
    free(part_world);
    free(part_rank);
    free(x.in_set);
    free(x.set_world);
    free(in);
    free(x.infos);
    free(x.numel);
    return s;
}

ZERO_API zero_status zero_plan(const zero_plan_request *req, zero_memory_plan *out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!req || !out || req->struct_size < offsetof(zero_plan_request, total_params) + sizeof req->total_params ||
        out->struct_size < offsetof(zero_memory_plan, total)) {
        copy_err(err, err_len, "zero_plan: request and out must be given with their struct_size set (*_INIT)");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    /* (1.7.7) only the check: req's size covers every field read below */
    zero_plan_request known = ZERO_PLAN_REQUEST_INIT;
    char why[512];
    if (!zero__struct_in(&known, req, req->struct_size, sizeof known, "zero_plan_request", why, sizeof why)) {
        if (err && err_len) snprintf(err, err_len, "zero_plan: %s", why);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (req->reserved0 != 0 || known.reserved1 != 0) {
        copy_err(err, err_len, "zero_plan: zero_plan_request.%s must be 0 (ZERO_PLAN_REQUEST_INIT)",
                 req->reserved0 ? "reserved0" : "reserved1");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (known.nexpert_groups && (!known.expert_groups || !known.expert_dp_sizes)) {
        copy_err(err, err_len, "zero_plan: nexpert_groups %u without expert_groups and expert_dp_sizes",
                 known.nexpert_groups);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (known.nexpert_groups && !req->numels) {
        copy_err(err, err_len, "zero_plan: expert groups need the model's tensors (numels and groups), not a bare "
                               "total_params");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (req->world_size < 1) {
        copy_err(err, err_len, "zero_plan: world_size must be at least 1");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    uint64_t *split = NULL;
    const uint64_t *numels = req->numels;
    uint32_t n = req->nparams;
    if (!numels) {
        if (req->total_params == 0) {
            copy_err(err, err_len, "zero_plan: give numels (nparams entries) or total_params");
            return ZERO_ERR_INVALID_ARGUMENT;
        }
        if (!(split = zero__plan_split_count(req->total_params, &n))) {
            copy_err(err, err_len, "zero_plan: out of memory");
            return ZERO_ERR_OUT_OF_MEMORY;
        }
        numels = split;
    }
    zero__config *cfg = NULL;
    const char *text = req->config_json ? req->config_json : req->config_path ? NULL : "{}";
    zero_status s = zero__config_parse(text, text ? NULL : req->config_path, (int)req->world_size, &cfg, NULL, NULL,
                                       err, err_len);
    if (s != ZERO_OK) {
        free(split);
        return s;
    }
    { /* "auto" sizes from the model, as zero_params_done resolves them */
        uint64_t largest = 0;
        for (uint32_t i = 0; i < n; i++)
            if (numels[i] > largest) largest = numels[i];
        zero__config_resolve_auto(cfg, largest, NULL, 0);
    }
    const char *name = req->plugin && req->plugin[0] ? req->plugin : zero__config_plugin(cfg);
    zero__plugin pl;
    memset(&pl, 0, sizeof pl);
    if (strcmp(name, "auto") == 0) {
        copy_err(err, err_len, "zero_plan plans one plugin; \"auto\" is a choice among plans (name a plugin)");
        s = ZERO_ERR_INVALID_ARGUMENT;
    } else {
        s = zero__plugin_load(name, &pl, err, err_len);
    }
    if (s == ZERO_OK) {
        const zero_run_config *rc = zero__config_run(cfg);
        /* an "auto" config: plan the candidate as auto would run it */
        if (strcmp(zero__config_plugin(cfg), "auto") == 0 && zero__auto_stage_of(name) >= 0)
            zero__config_set_stage(cfg, zero__auto_stage_of(name));
        if (!(pl.table->caps & ZERO_PLUGIN_CAP_GRAD_DTYPES))
            zero__config_set_grad_dtypes(cfg, rc->model_dtype, rc->model_dtype);
        const zero__plan_experts ex = {known.nexpert_groups, known.expert_groups, known.expert_dp_sizes};
        s = zero__plan_table(pl.table, cfg, req->world_size, numels, numels == split ? NULL : req->groups, n, &ex, out,
                             err, err_len);
        zero__plugin_unload(&pl);
    }
    zero__config_free(cfg);
    free(split);
    return s;
}
