/* The flat data-parallel engine of the plugin kit: whole strategies from a
 * zero_kit_dp_spec (zero_kit_flat.h).  stage0, stage1, stage2 and stage1-pp
 * are presets of it. */
#include <stdlib.h>

#include "zero_kit.h"

typedef struct kit_dp {
    zero_kit_flat f;
    const zero_services *svc;
    const zero_kit_dp_spec *spec;
    zero_bucket_mode mode; /* what runs: spec->mode, or SCATTER when reducing every micro-step */
    int micro;      /* an in-place spec reducing every micro-step (zero_kit_reduce_every_micro_step) */
    int contiguous; /* grad_buffer hands out the bucket slot (always, in the in-place modes) */
    zero_kit_bsets bs; /* one bucket set per partition communicator (expert groups: 1.3) */
    /* A replicated spec (stage 0) reducing every micro-step: the window's
     * sum is this rank's partition accumulator `acc` (part_numel, grad
     * dtype, GRADS), exactly stage 2's; at the boundary its blocks go to
     * their places in the flat gradient (`mine`: this rank's layout shares)
     * and are all-gathered, so every rank steps stage 2's sums. */
    void *acc;
    size_t acc_bytes;
    zero_owned_range *mine;
    uint32_t nmine;
} kit_dp;

zero_status zero_kit_dp_create(const zero_services *svc, const zero_kit_dp_spec *spec, void **state) {
    kit_dp *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->spec = spec;
    *state = s;
    return ZERO_OK;
}

/* The reduction that runs for spec under rc (params_done and plan agree). */
static int runs_micro(const zero_kit_dp_spec *spec, const zero_run_config *rc) {
    return spec->mode != ZERO_BUCKETS_SCATTER && zero_kit_reduce_every_micro_step(rc);
}

/* The checkpoint name of the window's gradient: the spec's for the flat
 * window sum; for a partition accumulator the spec's micro_blob, by default
 * "part" (stage 2's). */
static const char *grads_blob(const kit_dp *s) {
    if (!s->micro) return s->spec->grads_blob;
    return s->spec->micro_blob ? s->spec->micro_blob : "part";
}

/* Where a load agrees on its outcome (zero_kit_dp_spec.agree_global). */
static zero_comm *agree_comm(const kit_dp *s) {
    return s->spec->agree_global ? s->svc->comm_global(s->svc->core) : NULL;
}

zero_status zero_kit_dp_register_param(void *state, zero_param_info *p) {
    kit_dp *s = state;
    const zero_dtype dt = s->svc->config(s->svc->core)->model_dtype;
    if (p->dtype != dt)
        return s->svc->error(s->svc->core, ZERO_ERR_UNSUPPORTED,
                             "%s: param '%s' has dtype %d, but the model dtype (bf16.enabled / fp16.enabled) is %d",
                             s->spec->name, p->name, (int)p->dtype, (int)dt);
    return ZERO_OK;
}

zero_status zero_kit_dp_params_done(void *state) {
    kit_dp *s = state;
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(svc->core);
    const zero_run_config *rc = svc->config(svc->core);
    s->micro = runs_micro(s->spec, rc);
    s->mode = s->micro ? ZERO_BUCKETS_SCATTER : s->spec->mode;
    const int staged = s->mode == ZERO_BUCKETS_SCATTER;
    const int part_grads = staged && !s->spec->replicated;
    /* staged: the gradient is this rank's partition accumulator (stage 0:
     * beside the flat gradient it steps); in place: the full flat window
     * sum, reduced at its owned ranges (or everywhere) */
    zero_status st = zero_kit_flat_init(&s->f, svc, s->spec->replicated, part_grads ? L->part_numel : L->flat_numel,
                                     part_grads ? ZERO_INDEX_PART : ZERO_INDEX_FLAT, s->spec->name);
    if (st != ZERO_OK) return st;
    void *dst = s->f.grads;
    if (staged && s->spec->replicated) {
        const uint32_t ng = L->ngroups;
        s->acc_bytes = (size_t)L->part_numel * s->f.gesize;
        s->acc = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, s->acc_bytes);
        s->mine = calloc(ng ? ng : 1, sizeof *s->mine);
        if (!s->acc || !s->mine)
            return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY,
                              "%s: cannot allocate the gradient partition accumulator (%llu elements)", s->spec->name,
                              (unsigned long long)L->part_numel);
        if ((st = svc->mem_set(svc->core, s->acc, 0, s->acc_bytes)) != ZERO_OK) return st;
        s->nmine = L->flat_numel ? svc->owned_ranges(svc->core, L->rank, 0, L->flat_numel, s->mine, ng) : 0;
        dst = s->acc;
    }
    if (s->micro)
        svc->log(svc->core, ZERO_LOG_DEBUG,
                 "%s: gradient_accumulation_steps %lld: every micro-step is reduced into a partition accumulator "
                 "(stage 2's sums, bitwise; zero_optimization.reduce_once_per_window reduces once per window)",
                 s->spec->name, (long long)rc->grad_accum_steps);
    /* Only staged buckets can do without contiguous gradients: the in-place
     * modes' slot IS the accumulation buffer.  With fp32 accumulation of a
     * 16-bit model the slots are fp32 while the host writes its model
     * dtype: every mode hands out per-param temporaries, widened into the
     * slot at on_grad_ready. */
    s->contiguous = s->f.gdtype != s->f.dtype ? 0 : staged ? rc->contiguous_gradients : 1;
    if (!s->contiguous) {
        const uint32_t np = svc->nparams(svc->core);
        for (uint32_t i = 0; i < np; i++) svc->param(svc->core, i)->plugin_data = NULL;
    }
    zero_bucket_spec spec = zero_kit_flat_bucket_spec(&s->f, s->mode, NULL, s->contiguous, dst);
    return zero_kit_bsets_create(&s->bs, svc, &spec);
}

zero_status zero_kit_dp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    kit_dp *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(zero_kit_bsets_of(&s->bs, p->index), p->index, buf);
    return zero_kit_grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, s->spec->name);
}

zero_status zero_kit_dp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    kit_dp *s = state;
    (void)stream;
    return zero_kit_grad_ready(s->svc, zero_kit_bsets_of(&s->bs, p->index), p, s->contiguous ? NULL : &p->plugin_data);
}

/* Stage 0 reducing every micro-step, at the boundary: the partition
 * accumulator's blocks into their places of the flat gradient, all-gathered
 * (bytes: every rank then holds bitwise the sums the partitioned stages
 * step), and the accumulator cleared for the next window. */
static zero_status gather_acc(kit_dp *s) {
    const zero_services *svc = s->svc;
    const size_t ges = s->f.gesize;
    for (uint32_t i = 0; i < s->nmine; i++) {
        const zero_owned_range *o = &s->mine[i];
        svc->mem_copy(svc->core, (char *)s->f.grads + (size_t)o->flat_lo * ges, (char *)s->acc + (size_t)o->part_lo * ges,
                      (size_t)(o->flat_hi - o->flat_lo) * ges);
    }
    zero_status st = svc->allgather_shares(svc->core, svc->comm_world(svc->core), s->f.grads, s->f.gdtype);
    zero_status z = svc->mem_set(svc->core, s->acc, 0, s->acc_bytes);
    return st != ZERO_OK ? st : z;
}

zero_status zero_kit_dp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    kit_dp *s = state;
    zero_status st = zero_kit_bsets_flush(&s->bs); /* every micro-step: also resets the ready counts */
    if (st != ZERO_OK || !ctx->boundary) return st;
    if (s->acc && (st = gather_acc(s)) != ZERO_OK) return st;
    return zero_kit_flat_boundary(&s->f, ctx, rep);
}

/* The window's state is the partition accumulator when stage 0 keeps one
 * (its flat gradient is only filled at the boundary), else f's gradient. */
zero_status zero_kit_dp_save(void *state, const char *dir) {
    kit_dp *s = state;
    if (s->acc) return zero_kit_flat_ckpt_buf(&s->f, dir, s->spec->name, grads_blob(s), s->acc, s->acc_bytes, 1);
    return zero_kit_flat_ckpt(&s->f, dir, s->spec->name, grads_blob(s), 1);
}

zero_status zero_kit_dp_load(void *state, const char *dir) {
    kit_dp *s = state;
    if (s->acc) return zero_kit_flat_load_buf(&s->f, dir, s->spec->name, grads_blob(s), s->acc, s->acc_bytes, agree_comm(s));
    return zero_kit_flat_load(&s->f, dir, s->spec->name, grads_blob(s), agree_comm(s));
}

zero_status zero_kit_dp_write_params(void *state, zero_param_info *const *params, size_t n,
                                     const void *const *values) {
    kit_dp *s = state;
    return zero_kit_flat_write(&s->f, params, n, values);
}

void zero_kit_dp_destroy(void *state) {
    kit_dp *s = state;
    if (!s) return;
    zero_kit_bsets_destroy(&s->bs);
    if (!s->contiguous) zero_kit_grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    if (s->acc) s->svc->mem_free(s->svc->core, s->acc);
    free(s->mine);
    zero_kit_flat_free(&s->f);
    free(s);
}

zero_status zero_kit_dp_plan(const zero_plan_services *ps, const zero_kit_dp_spec *spec) {
    const zero_run_config *rc = ps->config(ps->core);
    const zero_layout *L = ps->layout(ps->core);
    const int micro = runs_micro(spec, rc);
    const zero_bucket_mode mode = micro ? ZERO_BUCKETS_SCATTER : spec->mode;
    const int staged = mode == ZERO_BUCKETS_SCATTER;
    const zero_dtype gdt = zero_kit_grad_dtype(rc);
    zero_kit_flat_plan(ps, spec->replicated, staged && !spec->replicated ? L->part_numel : L->flat_numel, mode);
    if (staged && spec->replicated) /* stage 0's partition accumulator beside its flat gradient */
        ps->add(ps->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, L->part_numel * (gdt == ZERO_DTYPE_F32 ? 4 : 2));
    /* as params_done decides contiguous */
    const int contiguous = gdt != rc->model_dtype ? 0 : staged ? rc->contiguous_gradients : 1;
    if (!contiguous) zero_kit_grad_tmp_plan(ps);
    return ZERO_OK;
}
