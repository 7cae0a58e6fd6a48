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
    /* The bucket set's reductions also bring the MPI ring scratch, which the
     * engine accounts as ZERO_MEM_OTHER on the host tier (docs/memory.md):
     * planned here, one reduction's set, for every plugin that plans buckets. */
    ps_add(c, ZERO_TIER_HOST, ZERO_MEM_OTHER,
           zero__plan_ring_scratch_bytes(&P(c)->layout.view, P(c)->layout.param_offset, P(c)->numel, P(c)->n, spec,
                                         P(c)->rc->round_robin_gradients, P(c)->rc->comm_dtype));
    return zero__plan_buckets_bytes(&P(c)->layout.view, P(c)->layout.param_offset, P(c)->numel, spec,
                                    P(c)->rc->round_robin_gradients, P(c)->rc->comm_dtype);
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

zero_status zero__plan_table(const zero_plugin_table *table, const zero__config *cfg, uint32_t world,
                             const uint64_t *numels, const int32_t *groups, uint32_t nparams, zero_memory_plan *out,
                             char *err, size_t err_len) {
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
    zero_status s = ZERO_OK;
    if (!in || !x.infos || !x.numel) {
        copy_err(err, err_len, "zero_plan: out of memory");
        s = ZERO_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (uint32_t i = 0; i < nparams; i++) in[i] = (zero__layout_input){numels[i], groups ? groups[i] : 0};
    /* the engine's layout, interleaved or not (api.c zero_params_done) */
    if (zero__layout_build_run(&x.layout, in, nparams, world, 0, PLAN_ALIGN_ELEMS, x.rc->round_robin_gradients,
                               x.rc->reduce_bucket_size > 0 ? (uint64_t)x.rc->reduce_bucket_size : 0) != 0) {
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
    if (req->reserved0 != 0) {
        copy_err(err, err_len, "zero_plan: zero_plan_request.reserved0 must be 0 (ZERO_PLAN_REQUEST_INIT)");
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
        s = zero__plan_table(pl.table, cfg, req->world_size, numels, numels == split ? NULL : req->groups, n, out, err,
                             err_len);
        zero__plugin_unload(&pl);
    }
    zero__config_free(cfg);
    free(split);
    return s;
}
