/* See flat_plugin.h. */
#include <stdlib.h>

#include "flat_plugin.h"

typedef struct flat_plugin {
    zero__flat_state f;
    const zero_services *svc;
    const zero__flat_plugin_spec *spec;
    zero_bucket_mode mode; /* what runs: spec->mode, or SCATTER when reducing every micro-step */
    int micro;      /* an in-place spec reducing every micro-step (zero__reduce_every_micro_step) */
    int contiguous; /* grad_buffer hands out the bucket slot (always, in the in-place modes) */
    zero__bsets bs; /* one bucket set per partition communicator (expert groups: 1.3) */
    /* A replicated spec (stage 0) reducing every micro-step: the window's
     * sum is this rank's partition accumulator `acc` (part_numel, grad
     * dtype, GRADS), exactly stage 2's; at the boundary its blocks go to
     * their places in the flat gradient (`mine`: this rank's layout shares)
     * and are all-gathered, so every rank steps stage 2's sums. */
    void *acc;
    size_t acc_bytes;
    zero_owned_range *mine;
    uint32_t nmine;
} flat_plugin;

zero_status zero__flat_plugin_create(const zero_services *svc, const zero__flat_plugin_spec *spec, void **state) {
    flat_plugin *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->spec = spec;
    *state = s;
    return ZERO_OK;
}

/* The reduction that runs for spec under rc (params_done and plan agree). */
static int runs_micro(const zero__flat_plugin_spec *spec, const zero_run_config *rc) {
    return spec->mode != ZERO_BUCKETS_SCATTER && zero__reduce_every_micro_step(rc);
}

/* The checkpoint name of the window's gradient: the spec's for the flat
 * window sum, "part" (stage 2's) for a partition accumulator. */
static const char *grads_blob(const flat_plugin *s) { return s->micro ? "part" : s->spec->grads_blob; }

zero_status zero__flat_plugin_params_done(void *state) {
    flat_plugin *s = state;
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
    zero_status st = zero__flat_init(&s->f, svc, s->spec->replicated, part_grads ? L->part_numel : L->flat_numel,
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
    zero_bucket_spec spec = zero__flat_bucket_spec(&s->f, s->mode, NULL, s->contiguous, dst);
    return zero__bsets_create(&s->bs, svc, &spec);
}

zero_status zero__flat_plugin_grad_buffer(void *state, zero_param_info *p, void **buf) {
    flat_plugin *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(zero__bsets_of(&s->bs, p->index), p->index, buf);
    return zero__grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, s->spec->name);
}

zero_status zero__flat_plugin_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    flat_plugin *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, zero__bsets_of(&s->bs, p->index), p, s->contiguous ? NULL : &p->plugin_data);
}

/* Stage 0 reducing every micro-step, at the boundary: the partition
 * accumulator's blocks into their places of the flat gradient, all-gathered
 * (bytes: every rank then holds bitwise the sums the partitioned stages
 * step), and the accumulator cleared for the next window. */
static zero_status gather_acc(flat_plugin *s) {
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

zero_status zero__flat_plugin_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    flat_plugin *s = state;
    zero_status st = zero__bsets_flush(&s->bs); /* every micro-step: also resets the ready counts */
    if (st != ZERO_OK || !ctx->boundary) return st;
    if (s->acc && (st = gather_acc(s)) != ZERO_OK) return st;
    return zero__flat_boundary(&s->f, ctx, rep);
}

/* The window's state is the partition accumulator when stage 0 keeps one
 * (its flat gradient is only filled at the boundary), else f's gradient. */
zero_status zero__flat_plugin_save(void *state, const char *dir) {
    flat_plugin *s = state;
    if (s->acc) return zero__flat_ckpt_buf(&s->f, dir, s->spec->name, grads_blob(s), s->acc, s->acc_bytes, 1);
    return zero__flat_ckpt(&s->f, dir, s->spec->name, grads_blob(s), 1);
}

zero_status zero__flat_plugin_load(void *state, const char *dir) {
    flat_plugin *s = state;
    if (s->acc) return zero__flat_load_buf(&s->f, dir, s->spec->name, grads_blob(s), s->acc, s->acc_bytes);
    return zero__flat_load(&s->f, dir, s->spec->name, grads_blob(s));
}

void zero__flat_plugin_destroy(void *state) {
    flat_plugin *s = state;
    if (!s) return;
    zero__bsets_destroy(&s->bs);
    if (!s->contiguous) zero__grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    if (s->acc) s->svc->mem_free(s->svc->core, s->acc);
    free(s->mine);
    zero__flat_free(&s->f);
    free(s);
}

zero_status zero__flat_plugin_plan(const zero_plan_services *ps, const zero__flat_plugin_spec *spec) {
    const zero_run_config *rc = ps->config(ps->core);
    const zero_layout *L = ps->layout(ps->core);
    const int micro = runs_micro(spec, rc);
    const zero_bucket_mode mode = micro ? ZERO_BUCKETS_SCATTER : spec->mode;
    const int staged = mode == ZERO_BUCKETS_SCATTER;
    const zero_dtype gdt = zero__grad_dtype_of(rc);
    zero__flat_plan(ps, spec->replicated, staged && !spec->replicated ? L->part_numel : L->flat_numel, mode);
    if (staged && spec->replicated) /* stage 0's partition accumulator beside its flat gradient */
        ps->add(ps->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, L->part_numel * (gdt == ZERO_DTYPE_F32 ? 4 : 2));
    /* as params_done decides contiguous */
    const int contiguous = gdt != rc->model_dtype ? 0 : staged ? rc->contiguous_gradients : 1;
    if (!contiguous) zero__grad_tmp_plan(ps);
    return ZERO_OK;
}
