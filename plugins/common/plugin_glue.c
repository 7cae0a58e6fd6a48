/* Glue shared by the built-in flat-layout plugins (see plugin_glue.h). */
#include "plugin_glue.h"

#include <stdlib.h>

static void *alloc_n(const zero__flat_state *f, zero_mem_tag tag, uint64_t numel, size_t esize) {
    return f->svc->mem_alloc(f->c, ZERO_TIER_DEVICE, tag, (size_t)numel * esize);
}

zero_status zero__flat_init(zero__flat_state *f, const zero_services_v1 *svc, int replicated, const char *who) {
    f->svc = svc;
    f->c = svc->core;
    if (!ZERO_SERVICES_HAS(svc, ckpt_agree))
        return svc->error(f->c, ZERO_ERR_UNSUPPORTED, "%s: the core lacks the partition step services", who);
    f->L = svc->layout(f->c);
    f->dtype = svc->config(f->c)->model_dtype;
    f->esize = f->dtype == ZERO_DTYPE_F32 ? 4 : 2;
    f->replicated = replicated;
    const uint32_t ng = f->L->ngroups;
    const uint64_t flat = f->L->flat_numel, mine = replicated ? flat : f->L->part_numel;
    f->params = alloc_n(f, ZERO_MEM_PARAMS, flat, f->esize);
    f->master = f->dtype == ZERO_DTYPE_F32 ? f->params : alloc_n(f, ZERO_MEM_MASTER, mine, sizeof(float));
    f->nstate = svc->optim_state_count(f->c);
    f->owned = calloc(ng ? ng : 1, sizeof *f->owned);
    int ok = f->params && f->master && f->nstate <= 4 && f->owned;
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
    zero_part_step ps = zero__flat_part_step(f, NULL, ZERO_INDEX_FLAT, NULL);
    if (st == ZERO_OK) st = svc->master_init(f->c, &ps, f->params);
    return st;
}

void zero__flat_free(zero__flat_state *f) {
    if (!f->svc) return;
    for (uint32_t k = 0; k < 4; k++) {
        f->svc->mem_free(f->c, f->state[k]);
        f->state[k] = NULL;
    }
    if ((void *)f->master != f->params) f->svc->mem_free(f->c, f->master);
    f->svc->mem_free(f->c, f->params);
    f->master = NULL;
    f->params = NULL;
    free(f->owned);
    f->owned = NULL;
}

zero_part_step zero__flat_part_step(const zero__flat_state *f, const void *grad, zero_index_kind grad_index,
                                    zero_comm *norm_comm) {
    const int mixed = (void *)f->master != f->params;
    zero_part_step ps = {0};
    ps.struct_size = sizeof ps;
    ps.nranges = f->nowned;
    ps.ranges = f->owned;
    ps.norm_comm = norm_comm;
    ps.replicated = f->replicated;
    ps.dtype = f->dtype;
    ps.grad = grad;
    ps.grad_index = grad_index;
    ps.master = f->master;
    ps.master_index = mixed ? ZERO_INDEX_PART : ZERO_INDEX_FLAT;
    for (uint32_t k = 0; k < f->nstate; k++) ps.state[k] = f->state[k];
    ps.param_out = mixed ? f->params : NULL;
    ps.param_out_index = ZERO_INDEX_FLAT;
    return ps;
}

zero_status zero__grad_tmp(const zero_services_v1 *svc, zero_param_info *p, size_t esize, void **tmp, void **buf,
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

zero_status zero__grad_ready(const zero_services_v1 *svc, zero_buckets *b, zero_param_info *p, void **tmp) {
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
