/* Glue shared by the built-in flat-layout plugins (see plugin_glue.h). */
#include "plugin_glue.h"

#include <stdio.h>
#include <stdlib.h>

static void *alloc_n(const zero__flat_state *f, zero_mem_tag tag, uint64_t numel, size_t esize) {
    return f->svc->mem_alloc(f->c, ZERO_TIER_DEVICE, tag, (size_t)numel * esize);
}

zero_status zero__flat_init(zero__flat_state *f, const zero_services *svc, int replicated, uint64_t grad_numel,
                            zero_index_kind grad_index, const char *who) {
    f->svc = svc;
    f->c = svc->core;
    if (!ZERO_SERVICES_HAS(svc, ckpt_agree))
        return svc->error(f->c, ZERO_ERR_UNSUPPORTED, "%s: the core lacks the partition step services", who);
    f->L = svc->layout(f->c);
    f->dtype = svc->config(f->c)->model_dtype;
    f->esize = f->dtype == ZERO_DTYPE_F32 ? 4 : 2;
    f->gdtype = zero__grad_dtype_of(svc->config(f->c));
    f->gesize = f->gdtype == ZERO_DTYPE_F32 ? 4 : 2;
    f->replicated = replicated;
    f->grad_index = grad_index;
    f->grad_bytes = (size_t)grad_numel * f->gesize;
    f->norm_comm = NULL; /* comm_global: the whole model's norm (= comm_world without a pipeline) */
    f->gather_comm = replicated ? NULL : svc->comm_world(f->c);
    const uint32_t ng = f->L->ngroups;
    const uint64_t flat = f->L->flat_numel, mine = replicated ? flat : f->L->part_numel;
    f->params = alloc_n(f, ZERO_MEM_PARAMS, flat, f->esize);
    f->grads = alloc_n(f, ZERO_MEM_GRADS, grad_numel, f->gesize);
    f->master = f->dtype == ZERO_DTYPE_F32 ? f->params : alloc_n(f, ZERO_MEM_MASTER, mine, sizeof(float));
    f->nstate = svc->optim_state_count(f->c);
    f->owned = calloc(ng ? ng : 1, sizeof *f->owned);
    int ok = f->params && f->grads && f->master && f->nstate <= 4 && f->owned;
    for (uint32_t k = 0; ok && k < f->nstate; k++)
        ok = (f->state[k] = alloc_n(f, ZERO_MEM_OPTIM, mine, sizeof(float))) != NULL;
    if (!ok)
        return svc->error(f->c, ZERO_ERR_OUT_OF_MEMORY, "%s: cannot allocate model state (%llu elements)", who,
                          (unsigned long long)flat);
    if (replicated) {
        f->owned[0] = (zero_owned_range){0, flat, 0};
        f->nowned = flat ? 1 : 0;
    } else {
        f->nowned = flat ? svc->owned_ranges(f->c, f->L->rank, 0, flat, f->owned, ng) : 0;
    }
    /* initial values (host or device memory) into the flat params; the
     * master of the owned share (16-bit model) widened from them */
    zero_status st = svc->params_place(f->c, f->params, f->dtype, who);
    zero_part_step ps = zero__flat_part_step(f);
    if (st == ZERO_OK) st = svc->master_init(f->c, &ps, f->params);
    return st;
}

zero_status zero__flat_buckets(zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                               zero_buckets **out) {
    return zero__flat_buckets_into(f, mode, comm, contiguous, f->grads, out);
}

zero_status zero__flat_buckets_into(zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                    void *dst, zero_buckets **out) {
    zero_bucket_spec spec = zero__flat_bucket_spec(f, mode, comm, contiguous, dst);
    return f->svc->buckets_create(f->c, &spec, out);
}

zero_bucket_spec zero__flat_bucket_spec(const zero__flat_state *f, zero_bucket_mode mode, zero_comm *comm,
                                        int contiguous, void *dst) {
    const zero_run_config *rc = f->svc->config(f->c);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = mode;
    spec.comm = comm;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = contiguous;
    spec.grad_dtype = f->gdtype;
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

zero_status zero__bsets_create(zero__bsets *s, const zero_services *svc, const zero_bucket_spec *spec) {
    s->svc = svc;
    s->n = 0;
    s->of_param = NULL;
    const zero_layout *L = svc->layout(svc->core);
    const int experts = ZERO_SERVICES_HAS(svc, group_comm) &&
                        L->struct_size >= offsetof(zero_layout, group_world) + sizeof L->group_world &&
                        L->group_world != NULL;
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

zero_status zero__bsets_flush(zero__bsets *s) {
    zero_status st = ZERO_OK;
    for (uint32_t i = 0; i < s->n; i++) {
        zero_status f = s->svc->buckets_flush(s->b[i]);
        if (st == ZERO_OK) st = f;
    }
    return st;
}

void zero__bsets_destroy(zero__bsets *s) {
    if (!s->svc) return;
    for (uint32_t i = 0; i < s->n; i++) s->svc->buckets_destroy(s->b[i]);
    free(s->b);
    free(s->of_param);
    s->b = NULL;
    s->of_param = NULL;
    s->n = 0;
}

void zero__flat_free(zero__flat_state *f) {
    if (!f->svc) return;
    for (uint32_t k = 0; k < 4; k++) {
        f->svc->mem_free(f->c, f->state[k]);
        f->state[k] = NULL;
    }
    if ((void *)f->master != f->params) f->svc->mem_free(f->c, f->master);
    f->svc->mem_free(f->c, f->params);
    f->svc->mem_free(f->c, f->grads);
    f->master = NULL;
    f->params = NULL;
    f->grads = NULL;
    free(f->owned);
    f->owned = NULL;
}

zero_part_step zero__flat_part_step(const zero__flat_state *f) {
    const int mixed = (void *)f->master != f->params;
    zero_part_step ps = {0};
    ps.struct_size = sizeof ps;
    ps.nranges = f->nowned;
    ps.ranges = f->owned;
    ps.norm_comm = f->norm_comm;
    ps.replicated = f->replicated;
    ps.dtype = f->dtype;
    ps.grad = f->grads;
    ps.grad_dtype = f->gdtype;
    ps.grad_index = f->grad_index;
    ps.master = f->master;
    ps.master_index = mixed ? ZERO_INDEX_PART : ZERO_INDEX_FLAT;
    for (uint32_t k = 0; k < f->nstate; k++) ps.state[k] = f->state[k];
    ps.param_out = mixed ? f->params : NULL;
    ps.param_out_index = ZERO_INDEX_FLAT;
    return ps;
}

zero_status zero__flat_boundary(zero__flat_state *f, const zero_step_ctx *ctx, zero_step_report *rep) {
    const zero_services *svc = f->svc;
    zero_part_step ps = zero__flat_part_step(f);
    zero_status st = svc->boundary_step(f->c, &ps, ctx, rep);
    svc->mem_set(f->c, f->grads, 0, f->grad_bytes); /* the next window starts from zero, overflow or not */
    if (st != ZERO_OK || rep->overflow || !f->gather_comm) return st;
    return svc->allgather_shares(f->c, f->gather_comm, f->params, f->dtype);
}

zero_status zero__flat_ckpt(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                            int write) {
    return zero__flat_ckpt_buf(f, dir, prefix, grads_blob, f->grads, f->grad_bytes, write);
}

zero_status zero__flat_ckpt_buf(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                                void *grads, size_t grad_bytes, int write) {
    const zero_services *svc = f->svc;
    zero_part_step ps = zero__flat_part_step(f);
    zero_status st = svc->ckpt_shard(f->c, dir, prefix, &ps, f->params, write);
    char name[160];
    snprintf(name, sizeof name, "%s.%s", prefix, grads_blob);
    /* resharding (another world size / plugin): always at a boundary, where
     * the window's gradient is zero; the saver's gradient blob is not ours */
    if (st == ZERO_OK && !write && ZERO_SERVICES_HAS(svc, ckpt_reshard) && svc->ckpt_reshard(f->c))
        return svc->mem_set(f->c, grads, 0, grad_bytes);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(f->c, dir, name, grads, grad_bytes)
                   : svc->ckpt_read(f->c, dir, name, grads, grad_bytes);
    return st;
}

zero_status zero__flat_load(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob) {
    return zero__flat_load_buf(f, dir, prefix, grads_blob, f->grads, f->grad_bytes);
}

zero_status zero__flat_load_buf(zero__flat_state *f, const char *dir, const char *prefix, const char *grads_blob,
                                void *grads, size_t grad_bytes) {
    zero_status st = zero__flat_ckpt_buf(f, dir, prefix, grads_blob, grads, grad_bytes, 0);
    st = f->svc->ckpt_agree(f->c, NULL, st, dir, prefix);
    if (st != ZERO_OK || !f->gather_comm) return st;
    return f->svc->allgather_shares(f->c, f->gather_comm, f->params, f->dtype);
}

zero_status zero__grad_tmp(const zero_services *svc, zero_param_info *p, size_t esize, void **tmp, void **buf,
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

zero_status zero__grad_ready(const zero_services *svc, zero_buckets *b, zero_param_info *p, void **tmp) {
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

void zero__grad_tmps_free(const zero_services *svc) {
    const uint32_t np = svc->layout(svc->core) ? svc->nparams(svc->core) : 0;
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(svc->core, i);
        if (p && p->plugin_data) {
            svc->mem_free(svc->core, p->plugin_data);
            p->plugin_data = NULL;
        }
    }
}

/* ---- planning ---------------------------------------------------------- */

static size_t dtype_bytes(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

zero_bucket_spec zero__plan_bucket_spec(const zero_plan_services *ps, zero_bucket_mode mode) {
    const zero_run_config *rc = ps->config(ps->core);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = mode;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.grad_dtype = zero__grad_dtype_of(rc);
    spec.reduce_every_micro_step = mode == ZERO_BUCKETS_SCATTER;
    return spec;
}

void zero__flat_plan(const zero_plan_services *ps, int replicated, uint64_t grad_numel, zero_bucket_mode mode) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    const size_t es = dtype_bytes(rc->model_dtype), ges = dtype_bytes(zero__grad_dtype_of(rc));
    const uint64_t flat = L->flat_numel, mine = replicated ? flat : L->part_numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, flat * es);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, grad_numel * ges);
    if (rc->model_dtype != ZERO_DTYPE_F32) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, mine * sizeof(float));
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * mine * sizeof(float));
    zero_bucket_spec spec = zero__plan_bucket_spec(ps, mode);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
}

void zero__grad_tmp_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    uint64_t largest = 0;
    for (uint32_t i = 0, n = ps->nparams(c); i < n; i++)
        if (ps->param(c, i)->numel > largest) largest = ps->param(c, i)->numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, largest * dtype_bytes(ps->config(c)->model_dtype));
}
