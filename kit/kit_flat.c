/* The flat model state of the plugin kit (zero_kit_flat.h). */
#include <stdio.h>
#include <stdlib.h>

#include "zero_kit.h"

/* Exactly numel * esize bytes (zero_kit_alloc_n rounds 0 up to one element;
 * the flat plugins' accounting, which their plans mirror, does not). */
static void *alloc_n(const zero_kit_flat *f, zero_mem_tag tag, uint64_t numel, size_t esize) {
    return f->svc->mem_alloc(f->c, ZERO_TIER_DEVICE, tag, (size_t)numel * esize);
}

zero_status zero_kit_flat_init(zero_kit_flat *f, const zero_services *svc, int replicated, uint64_t grad_numel,
                               zero_index_kind grad_index, const char *who) {
    f->svc = svc;
    f->c = svc->core;
    f->L = svc->layout(f->c);
    zero_kit_dtypes(svc->config(f->c), &f->dtype, &f->esize, &f->gdtype, &f->gesize);
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
    zero_part_step ps = zero_kit_flat_part_step(f);
    if (st == ZERO_OK) st = svc->master_init(f->c, &ps, f->params);
    return st;
}

zero_status zero_kit_flat_buckets(zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                  zero_buckets **out) {
    return zero_kit_flat_buckets_into(f, mode, comm, contiguous, f->grads, out);
}

zero_status zero_kit_flat_buckets_into(zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm, int contiguous,
                                       void *dst, zero_buckets **out) {
    zero_bucket_spec spec = zero_kit_flat_bucket_spec(f, mode, comm, contiguous, dst);
    return f->svc->buckets_create(f->c, &spec, out);
}

zero_bucket_spec zero_kit_flat_bucket_spec(const zero_kit_flat *f, zero_bucket_mode mode, zero_comm *comm,
                                           int contiguous, void *dst) {
    zero_bucket_spec spec = zero_kit_bucket_spec(f->svc, mode, comm, contiguous, dst);
    spec.grad_dtype = f->gdtype;
    return spec;
}

void zero_kit_flat_free(zero_kit_flat *f) {
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

zero_part_step zero_kit_flat_part_step(const zero_kit_flat *f) {
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

zero_status zero_kit_flat_boundary(zero_kit_flat *f, const zero_step_ctx *ctx, zero_step_report *rep) {
    const zero_services *svc = f->svc;
    zero_part_step ps = zero_kit_flat_part_step(f);
    zero_status st = svc->boundary_step(f->c, &ps, ctx, rep);
    svc->mem_set(f->c, f->grads, 0, f->grad_bytes); /* the next window starts from zero, overflow or not */
    if (st != ZERO_OK || rep->overflow || !f->gather_comm) return st;
    return svc->allgather_shares(f->c, f->gather_comm, f->params, f->dtype);
}

zero_status zero_kit_flat_ckpt(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                               int write) {
    return zero_kit_flat_ckpt_buf(f, dir, prefix, grads_blob, f->grads, f->grad_bytes, write);
}

zero_status zero_kit_flat_ckpt_buf(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                                   void *grads, size_t grad_bytes, int write) {
    const zero_services *svc = f->svc;
    zero_part_step ps = zero_kit_flat_part_step(f);
    zero_status st = svc->ckpt_shard(f->c, dir, prefix, &ps, f->params, write);
    char name[160];
    snprintf(name, sizeof name, "%s.%s", prefix, grads_blob);
    /* resharding (another world size / plugin): always at a boundary, where
     * the window's gradient is zero; the saver's gradient blob is not ours */
    if (st == ZERO_OK && !write && svc->ckpt_reshard(f->c))
        return svc->mem_set(f->c, grads, 0, grad_bytes);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(f->c, dir, name, grads, grad_bytes)
                   : svc->ckpt_read(f->c, dir, name, grads, grad_bytes);
    return st;
}

zero_status zero_kit_flat_load(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                               zero_comm *agree_comm) {
    return zero_kit_flat_load_buf(f, dir, prefix, grads_blob, f->grads, f->grad_bytes, agree_comm);
}

zero_status zero_kit_flat_load_buf(zero_kit_flat *f, const char *dir, const char *prefix, const char *grads_blob,
                                   void *grads, size_t grad_bytes, zero_comm *agree_comm) {
    zero_status st = zero_kit_flat_ckpt_buf(f, dir, prefix, grads_blob, grads, grad_bytes, 0);
    st = f->svc->ckpt_agree(f->c, agree_comm, st, dir, prefix);
    if (st != ZERO_OK || !f->gather_comm) return st;
    return f->svc->allgather_shares(f->c, f->gather_comm, f->params, f->dtype);
}

zero_status zero_kit_flat_write(zero_kit_flat *f, zero_param_info *const *params, size_t n,
                                const void *const *values) {
    const zero_services *svc = f->svc;
    const int mixed = (void *)f->master != f->params;
    for (size_t i = 0; i < n; i++) {
        const zero_param_info *p = params[i];
        if (p->dtype != f->dtype)
            return svc->error(f->c, ZERO_ERR_INVALID_ARGUMENT, "write_params: param '%s' is not in the model dtype",
                              p->name);
        const uint64_t lo = p->flat_offset, hi = lo + p->numel;
        svc->mem_copy(f->c, (char *)f->params + (size_t)lo * f->esize, values[i], (size_t)p->numel * f->esize);
        /* the master of what this rank steps, widened as master_init does */
        for (uint32_t r = 0; mixed && r < f->nowned; r++) {
            const zero_owned_range *o = &f->owned[r];
            const uint64_t a = lo > o->flat_lo ? lo : o->flat_lo, b = hi < o->flat_hi ? hi : o->flat_hi;
            if (a >= b) continue;
            svc->convert(f->c, f->master + o->part_lo + (a - o->flat_lo), ZERO_DTYPE_F32,
                         (const char *)values[i] + (size_t)(a - lo) * f->esize, f->dtype, (size_t)(b - a));
        }
    }
    return ZERO_OK;
}

/* ---- planning ---------------------------------------------------------- */

void zero_kit_flat_plan(const zero_plan_services *ps, int replicated, uint64_t grad_numel, zero_bucket_mode mode) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    const size_t es = zero_kit_dtype_size(rc->model_dtype), ges = zero_kit_dtype_size(zero_kit_grad_dtype(rc));
    const uint64_t flat = L->flat_numel, mine = replicated ? flat : L->part_numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, flat * es);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, grad_numel * ges);
    if (rc->model_dtype != ZERO_DTYPE_F32) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, mine * sizeof(float));
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * mine * sizeof(float));
    zero_bucket_spec spec = zero_kit_plan_bucket_spec(ps, mode);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
    zero_kit_step_tile_plan(ps, replicated ? 0 : 1);
}

