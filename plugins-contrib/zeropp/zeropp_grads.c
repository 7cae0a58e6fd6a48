/* zeropp: gradient hand-in and reduction -- the core's bucket engine (exact,
 * overlapped with backward) or, with qgZ, a full fp32 gradient of the
 * micro-step reduce-scattered quantized at its end -- and the boundary step. */
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

zero_status zpp_grads_setup(zpp *s) {
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    const zero_run_config *rc = s->rc;
    if (s->qg) {
        if (s->gdtype != ZERO_DTYPE_F32)
            return svc->error(s->c, ZERO_ERR_UNSUPPORTED,
                              WHO ": zero_quantized_gradients needs fp32 gradient accumulation "
                                  "(data_types.grad_accum_dtype fp32, the default)");
        uint64_t maxpart = 0;
        for (uint32_t g = 0; g < L->ngroups; g++)
            if (L->groups[g].part_numel > maxpart) maxpart = L->groups[g].part_numel;
        zero_status st = zpp_qgz_setup(s, maxpart);
        if (st != ZERO_OK) return st;
        /* qgZ trades memory for simplicity: one full fp32 gradient of the
         * micro-step (stage 1's gradient memory), reduced at its end */
        const size_t efn = zpp_qgz_ef_numel(s, L->flat_numel, L->part_numel);
        s->gflat = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, (size_t)(L->flat_numel ? L->flat_numel : 1) * 4);
        s->gpart = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, (size_t)(maxpart ? maxpart : 1) * 4);
        if (s->qg_ef)
            s->ef = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, (efn ? efn : 1) * 4);
        if (!s->gflat || !s->gpart || (s->qg_ef && !s->ef))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory for the qgZ gradient buffer");
        s->contiguous = s->dtype == ZERO_DTYPE_F32;
        return ZERO_OK;
    }
    s->contiguous = s->gdtype == s->dtype && rc->contiguous_gradients;
    zero_bucket_spec spec = zero_kit_bucket_spec(svc, ZERO_BUCKETS_SCATTER, NULL, s->contiguous, s->acc);
    return svc->buckets_create(s->c, &spec, &s->b);
}

void zpp_grads_free(zpp *s) {
    if (s->b) s->svc->buckets_destroy(s->b);
    s->b = NULL;
    s->svc->mem_free(s->c, s->gflat);
    s->svc->mem_free(s->c, s->gpart);
    s->svc->mem_free(s->c, s->ef);
    s->gflat = s->gpart = s->ef = NULL;
    zpp_qgz_free(s);
}

zero_status zpp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    zpp *s = state;
    if (s->contiguous) {
        if (s->gflat) {
            *buf = s->gflat + p->flat_offset;
            return ZERO_OK;
        }
        return s->svc->buckets_grad_slot(s->b, p->index, buf);
    }
    return zero_kit_grad_tmp(s->svc, p, s->esize, &((zpp_param *)p->plugin_data)->grad_tmp, buf, WHO);
}

zero_status zpp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    zpp *s = state;
    (void)stream;
    zpp_param *mp = p->plugin_data;
    if (!s->gflat) return zero_kit_grad_ready(s->svc, s->b, p, &mp->grad_tmp); /* the exact path */
    /* qgZ: into the micro-step's full fp32 gradient */
    const void *src = mp->grad_tmp ? mp->grad_tmp : (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    if (p->grad_is_zero) src = NULL;
    zero_status st = ZERO_OK;
    if (src) s->svc->add_into(s->c, s->gflat + p->flat_offset, src, p->dtype, (size_t)p->numel);
    if (mp->grad_tmp) {
        s->svc->mem_free(s->c, mp->grad_tmp);
        mp->grad_tmp = NULL;
    }
    return st;
}

/* The gradient reduction: qgZ's quantized one, or the bucket engine's. */
static zero_status reduce(void *state) {
    zpp *s = state;
    return s->gflat ? zpp_qgz_reduce(s) : s->svc->buckets_flush(s->b);
}

zero_status zpp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    zpp *s = state;
    const zero_services *svc = s->svc;
    /* the gather engine: verify the micro-step's gathers (collective, on
     * every rank), drop what was gathered (valid until zero_step), reduce */
    int go_on;
    zero_status st = zero_kit_gather_step_begin(s->gather, ctx->boundary, reduce, s, &go_on);
    if (!go_on) return st;
    zero_part_step ps = zero_kit_shard_part_step(s->mine, s->nmine, NULL, s->dtype, s->acc, s->gdtype, s->master,
                                                 s->state, s->nstate,
                                                 (void *)s->master != s->pshard ? s->pshard : NULL);
    st = svc->boundary_step(s->c, &ps, ctx, rep);
    zero_status z = svc->mem_set(s->c, s->acc, 0, (size_t)s->part * s->gesize);
    if (st == ZERO_OK) st = z;
    if (st != ZERO_OK) return st;
    if (!rep->overflow) zpp_params_changed(s); /* gathered tensors and secondary chunks are stale */
    return zero_kit_gather_prefetch_ahead(s->gather);
}
