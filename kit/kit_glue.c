/* The glue of the plugin kit (zero_kit_glue.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_kit.h"

/* ---- create and memory --------------------------------------------------- */

zero_status zero_kit_create(const zero_services *svc, size_t size, unsigned refuse, const char *who, void **state) {
    zero_core *c = svc->core;
    const zero_run_config *rc = svc->config(c);
    *state = NULL;
    if ((refuse & ZERO_KIT_REFUSE_LAMB) && rc->optim == ZERO_OPTIM_LAMB)
        return svc->error(c, ZERO_ERR_UNSUPPORTED, "%s: optimizer Lamb is not supported", who);
    if ((refuse & ZERO_KIT_REFUSE_PIPELINE) && rc->pipeline_stages > 1)
        return svc->error(c, ZERO_ERR_UNSUPPORTED, "%s: pipeline parallelism is not supported", who);
    if (!(*state = calloc(1, size ? size : 1))) return svc->error(c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    return ZERO_OK;
}

void *zero_kit_alloc_n(const zero_services *svc, zero_mem_tier tier, zero_mem_tag tag, uint64_t n, size_t esize) {
    return svc->mem_alloc(svc->core, tier, tag, (size_t)(n ? n : 1) * esize);
}

/* ---- bucket engine ------------------------------------------------------ */

zero_bucket_spec zero_kit_bucket_spec(const zero_services *svc, zero_bucket_mode mode, zero_comm *comm,
                                      int contiguous, void *dst) {
    const zero_run_config *rc = svc->config(svc->core);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = mode;
    spec.comm = comm;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = contiguous;
    spec.grad_dtype = zero_kit_grad_dtype(rc);
    if (mode == ZERO_BUCKETS_SCATTER) {
        spec.partition = dst;
        spec.reduce_every_micro_step = 1;
    } else {
        spec.flat = dst;
        spec.reduce_every_micro_step = 0;
    }
    return spec;
}

/* ---- bucket sets per partition communicator (1.3) ----------------------- */

zero_status zero_kit_bsets_create(zero_kit_bsets *s, const zero_services *svc, const zero_bucket_spec *spec) {
    s->svc = svc;
    s->n = 0;
    s->of_param = NULL;
    const zero_layout *L = svc->layout(svc->core);
    const int experts = L->group_world != NULL;
    const uint32_t ng = L->ngroups, cap = experts ? ng + 1 : 1;
    s->b = calloc(cap, sizeof *s->b);
    if (!s->b) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "bucket sets: out of memory");
    zero_status st = svc->buckets_create(svc->core, spec, &s->b[0]); /* dense groups (all of them without experts) */
    if (st != ZERO_OK) return st;
    s->n = 1;
    if (!experts) return ZERO_OK;
    const uint32_t np = svc->nparams(svc->core);
    s->of_param = calloc(np ? np : 1, sizeof *s->of_param);
    if (!s->of_param) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "bucket sets: out of memory");
    zero_comm *world = svc->comm_world(svc->core);
    for (uint32_t g = 0; g < ng; g++) {
        zero_comm *gc = svc->group_comm(svc->core, g);
        if (!gc || gc == world) continue; /* dense: set 0 */
        zero_bucket_spec es = *spec;
        es.comm = gc;
        if ((st = svc->buckets_create(svc->core, &es, &s->b[s->n])) != ZERO_OK) return st;
        for (uint32_t j = 0; j < L->groups[g].nparams; j++) s->of_param[L->param_order[L->groups[g].first_param + j]] = s->n;
        s->n++;
    }
    return ZERO_OK;
}

zero_status zero_kit_bsets_flush(zero_kit_bsets *s) {
    zero_status st = ZERO_OK;
    for (uint32_t i = 0; i < s->n; i++) {
        zero_status f = s->svc->buckets_flush(s->b[i]);
        if (st == ZERO_OK) st = f;
    }
    return st;
}

void zero_kit_bsets_destroy(zero_kit_bsets *s) {
    if (!s->svc) return;
    for (uint32_t i = 0; i < s->n; i++) s->svc->buckets_destroy(s->b[i]);
    free(s->b);
    free(s->of_param);
    s->b = NULL;
    s->of_param = NULL;
    s->n = 0;
}

zero_status zero_kit_grad_tmp(const zero_services *svc, zero_param_info *p, size_t esize, void **tmp, void **buf,
                              const char *who) {
    if (!*tmp) {
        *tmp = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, (size_t)p->numel * esize);
        if (!*tmp)
            return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "%s: no memory for the gradient of '%s'", who,
                              p->name);
    }
    *buf = *tmp;
    return ZERO_OK;
}

zero_status zero_kit_grad_ready(const zero_services *svc, zero_buckets *b, zero_param_info *p, void **tmp) {
    void *t = tmp ? *tmp : NULL;
    if (t) { /* contiguous_gradients off: the temporary goes into the slot and is freed */
        *tmp = NULL;
        zero_status st = svc->buckets_ready(b, p->index, p->grad_is_zero ? NULL : t, p->dtype);
        svc->mem_free(svc->core, t);
        return st;
    }
    const void *src = (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    return svc->buckets_ready(b, p->index, src, p->dtype);
}

void zero_kit_grad_tmps_free(const zero_services *svc) {
    const uint32_t np = svc->layout(svc->core) ? svc->nparams(svc->core) : 0;
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(svc->core, i);
        if (p && p->plugin_data) {
            svc->mem_free(svc->core, p->plugin_data);
            p->plugin_data = NULL;
        }
    }
}

/* ---- the parameter map ----------------------------------------------------- */

zero_status zero_kit_pmap_init(zero_kit_pmap *m, const zero_services *svc, uint32_t world, const char *who) {
    zero_core *c = svc->core;
    const zero_dtype dt = svc->config(c)->model_dtype;
    m->nparams = svc->nparams(c);
    m->world = world;
    const size_t n = (size_t)(m->nparams ? m->nparams : 1) * (world ? world : 1);
    m->off = calloc(n, sizeof *m->off);
    m->count = calloc(n, sizeof *m->count);
    m->part_lo = calloc(n, sizeof *m->part_lo);
    if (!m->off || !m->count || !m->part_lo) return svc->error(c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    for (uint32_t i = 0; i < m->nparams; i++) {
        const zero_param_info *p = svc->param(c, i);
        if (p->dtype != dt)
            return svc->error(c, ZERO_ERR_UNSUPPORTED,
                              "%s: param '%s' has dtype %d, the model dtype is %d (register every param in the "
                              "model dtype)",
                              who, p->name, (int)p->dtype, (int)dt);
        for (uint32_t j = 0; j < world; j++) {
            zero_owned_range o;
            const size_t at = (size_t)i * world + j;
            /* a param lies in one layout group: at most one piece per rank */
            if (p->numel && svc->owned_ranges(c, j, p->flat_offset, p->flat_offset + p->numel, &o, 1)) {
                m->off[at] = o.flat_lo - p->flat_offset;
                m->count[at] = (size_t)(o.flat_hi - o.flat_lo);
                m->part_lo[at] = o.part_lo;
            }
        }
    }
    return ZERO_OK;
}

zero_status zero_kit_pmap_params(zero_kit_pmap *m, const zero_services *svc, uint32_t world, size_t elem,
                                 void **per_param, uint32_t *nparams, const char *who) {
    *per_param = NULL;
    zero_status st = zero_kit_pmap_init(m, svc, world, who);
    *nparams = m->nparams;
    if (st != ZERO_OK) return st;
    *per_param = calloc(m->nparams ? m->nparams : 1, elem);
    return *per_param ? ZERO_OK : svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
}

zero_part_step zero_kit_shard_part_step(const zero_owned_range *ranges, uint32_t nranges, zero_comm *norm_comm,
                                        zero_dtype dtype, const void *grad, zero_dtype gdtype, float *master,
                                        float *const state[4], uint32_t nstate, void *param_out) {
    zero_part_step ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    ps.nranges = nranges;
    ps.ranges = ranges;
    ps.norm_comm = norm_comm;
    ps.dtype = dtype;
    ps.grad = grad;
    ps.grad_dtype = gdtype;
    ps.grad_index = ZERO_INDEX_PART;
    ps.master = master;
    ps.master_index = ZERO_INDEX_PART;
    for (uint32_t k = 0; k < nstate && k < 4; k++) ps.state[k] = state[k];
    ps.param_out = param_out;
    ps.param_out_index = ZERO_INDEX_PART;
    return ps;
}

void zero_kit_shard_free(const zero_services *svc, float *const state[4], float *master, void *shard) {
    for (uint32_t k = 0; k < 4; k++) svc->mem_free(svc->core, state[k]);
    if ((void *)master != shard) svc->mem_free(svc->core, master);
    svc->mem_free(svc->core, shard);
}

void zero_kit_pmap_free(zero_kit_pmap *m) {
    free(m->off);
    free(m->count);
    free(m->part_lo);
    m->off = NULL;
    m->count = NULL;
    m->part_lo = NULL;
}

/* ---- checkpoint blobs ------------------------------------------------------ */

uint32_t zero_kit_state_blobs(zero_kit_blob *out, void *params, size_t esize, float *master, float *const *state,
                              uint32_t nstate, uint64_t numel) {
    static const char *const names[4] = {"state0", "state1", "state2", "state3"};
    uint32_t n = 0;
    out[n++] = (zero_kit_blob){"params", params, (size_t)numel * esize};
    if ((void *)master != params) out[n++] = (zero_kit_blob){"master", master, (size_t)numel * sizeof(float)};
    for (uint32_t k = 0; k < nstate && k < 4; k++)
        out[n++] = (zero_kit_blob){names[k], state[k], (size_t)numel * sizeof(float)};
    return n;
}

zero_status zero_kit_blobs_io(const zero_services *svc, const char *dir, const char *prefix,
                              const zero_kit_blob *b, uint32_t n, int write) {
    zero_status st = ZERO_OK;
    for (uint32_t i = 0; i < n && st == ZERO_OK; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s.%s", prefix, b[i].name);
        st = write ? svc->ckpt_write(svc->core, dir, name, b[i].buf, b[i].bytes)
                   : svc->ckpt_read(svc->core, dir, name, b[i].buf, b[i].bytes);
    }
    return st;
}

zero_status zero_kit_blobs_agree(const zero_services *svc, zero_comm *comm, zero_status local, const char *dir,
                                 const char *who) {
    return svc->ckpt_agree(svc->core, comm, local, dir, who);
}

/* ---- planning ---------------------------------------------------------- */

zero_bucket_spec zero_kit_plan_bucket_spec(const zero_plan_services *ps, zero_bucket_mode mode) {
    const zero_run_config *rc = ps->config(ps->core);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = mode;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.grad_dtype = zero_kit_grad_dtype(rc);
    spec.reduce_every_micro_step = mode == ZERO_BUCKETS_SCATTER;
    return spec;
}

void zero_kit_step_tile_plan(const zero_plan_services *ps, uint32_t shares) {
    zero_core *c = ps->core;
    const zero_layout *L = ps->layout(c);
    if (zero_kit_grad_dtype(ps->config(c)) == ZERO_DTYPE_F32) return;
    int64_t cap = 0, v = 0; /* as the engine reads it: zero_optimization's key over moe's */
    if (ps->cfg_int(c, "moe.max_group_size", &v) == 1 && v > 0) cap = v;
    if (ps->cfg_int(c, "zero_optimization.max_group_size", &v) == 1 && v > 0) cap = v;
    if (!cap && !L->group_world) return; /* the kernel widens on the fly: no temporary */
    uint64_t largest = 0;
    for (uint32_t g = 0; g < L->ngroups; g++) {
        const uint64_t piece = shares ? (uint64_t)shares * L->groups[g].part_numel : L->groups[g].numel;
        if (piece > largest) largest = piece;
    }
    if (cap && largest > (uint64_t)cap) largest = (uint64_t)cap;
    ps->add(c, ZERO_TIER_HOST, ZERO_MEM_OTHER, largest * sizeof(float));
}

void zero_kit_grad_tmp_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    uint64_t largest = 0;
    for (uint32_t i = 0, n = ps->nparams(c); i < n; i++)
        if (ps->param(c, i)->numel > largest) largest = ps->param(c, i)->numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, largest * zero_kit_dtype_size(ps->config(c)->model_dtype));
}
