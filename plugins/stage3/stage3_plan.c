/* stage3's plan (ABI 1.2 table entry `plan`): what params_done allocates
 * (shard, master, gradient partition, optimizer states, bucket staging)
 * and the peak of the gather engine's buffers (persistent and pooled),
 * which the kit replays for the canonical host
 * (zero_kit_gather_plan_peak, kit/gather_plan.c: shared with MiCS and
 * ZeRO++, which run on the same engine); tests/plan checks it against the
 * accountant's measured peak.  Pure; thread-safe. */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"
#include "stage3_tiers.h"

/* Peak bytes of gather buffers (persistent + pool) for the canonical host:
 * the engine's budget is capped at what sharding saves (s3_params_done). */
static uint64_t gather_peak(const zero_plan_services *ps, size_t esize, int off_param) {
    const zero_layout *L = ps->layout(ps->core);
    /* World 1: every gather aliases the shard (stage3_gather.c alias): no
     * gather buffer, persistent or pooled, is ever allocated. */
    if (L->world <= 1 && !off_param) return 0; /* (offload_param: the host-tier shard is gathered from) */
    const uint64_t saved = (L->flat_numel - (off_param ? 0 : L->part_numel)) * (uint64_t)esize;
    /* (1.12) so do the params of an expert group partitioned over one rank */
    const int experts = L->struct_size >= offsetof(zero_layout, group_world) + sizeof L->group_world && L->group_world;
    const uint32_t n = ps->nparams(ps->core);
    uint8_t *alias = experts && !off_param ? calloc(n ? n : 1, 1) : NULL;
    for (uint32_t g = 0; alias && g < L->ngroups; g++)
        for (uint32_t j = 0; j < L->groups[g].nparams; j++)
            alias[L->param_order[L->groups[g].first_param + j]] = L->group_world[g] == 1;
    const uint64_t peak = zero_kit_gather_plan_peak_aliased(ps, esize, saved, 0, alias);
    free(alias);
    return peak;
}

/* stage3_offload.c zero__s3_off_configure, without an engine. */
static void plan_offload(const zero_plan_services *ps, int *opt, int *param, int *param_nvme) {
    const zero_run_config *rc = ps->config(ps->core);
    const char *od = NULL, *pd = NULL;
    *opt = *param = *param_nvme = 0;
    if (rc->stage != 3) return;
    if (ps->cfg_string(ps->core, "zero_optimization.offload_optimizer.device", &od) != 1) od = NULL;
    if (ps->cfg_string(ps->core, "zero_optimization.offload_param.device", &pd) != 1) pd = NULL;
    *param = pd && (strcmp(pd, "cpu") == 0 || strcmp(pd, "nvme") == 0);
    *param_nvme = pd && strcmp(pd, "nvme") == 0;
    const int want = rc->offload_optimizer || (od && (strcmp(od, "cpu") == 0 || strcmp(od, "nvme") == 0));
    if (want || *param) *opt = od && strcmp(od, "nvme") == 0 ? ZERO__S3_OFF_NVME : ZERO__S3_OFF_CPU;
}

zero_status zero__s3_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const uint64_t part = ps->layout(c)->part_numel;
    const size_t es = zero__s3_dtype_size(rc->model_dtype);
    const zero_dtype gdt = rc->struct_size >= offsetof(zero_run_config, grad_accum_dtype) + sizeof(zero_dtype)
                               ? rc->grad_accum_dtype
                               : rc->model_dtype;
    /* alloc_tagged records at least one byte per block */
    const uint64_t one = part ? 0 : 1;
    /* s3_params_done's tiers (stage3_tiers.h): offload puts master,
     * states and gradients (offload_param: the shard too) in the host tier */
    int opt, oparam, pnvme;
    plan_offload(ps, &opt, &oparam, &pnvme);
    const zero_mem_tier st = opt ? ZERO_TIER_HOST : ZERO_TIER_DEVICE;
    const int nvme = opt == ZERO__S3_OFF_NVME;
    const int own_master = rc->model_dtype == ZERO_DTYPE_F32 && (opt != 0) == oparam && !nvme && !pnvme;
    if (!pnvme) ps->add(c, oparam ? ZERO_TIER_HOST : ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, part * es + one);
    if (!own_master && !nvme) ps->add(c, st, ZERO_MEM_MASTER, part * 4 + one);
    ps->add(c, st, ZERO_MEM_GRADS, part * zero__s3_dtype_size(gdt) + one);
    uint64_t tile = rc->sub_group_size > 0 ? (uint64_t)rc->sub_group_size : part;
    if (tile > part) tile = part;
    if (tile == 0) tile = 1;
    if (nvme) { /* zero__s3_off_init: three aligned tile sets of master + states (written, stepped, read) */
        const uint64_t tb = (tile * 4 + ZERO__S3_NVME_ALIGN - 1) / ZERO__S3_NVME_ALIGN * ZERO__S3_NVME_ALIGN;
        ps->add(c, ZERO_TIER_HOST, ZERO_MEM_OPTIM, 3 * ((1 + ps->optim_state_count(c)) * tb + ZERO__S3_NVME_ALIGN));
    } else {
        ps->add(c, st, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * (part * 4 + one));
    }
    if (opt && !oparam) ps->add(c, ZERO_TIER_HOST, ZERO_MEM_PARAMS, 2 * tile * es); /* copy-out staging */
    if (pnvme) { /* stage3_pwin.c: aligned staging tiles and the buffer_count window (pieces bounded by
                  * min(numel, part): an upper bound, the plan has no per-rank pieces) */
        int64_t count = 5;
        if (ps->cfg_int(c, "zero_optimization.offload_param.buffer_count", &count) != 1 || count < 2) count = 5;
        if (count > 64) count = 64;
        uint64_t piece = 0;
        for (uint32_t i = 0, n = ps->nparams(c); i < n; i++) {
            uint64_t k = ps->param(c, i)->numel < part ? ps->param(c, i)->numel : part;
            if (k > piece) piece = k;
        }
        const uint64_t A = ZERO__S3_NVME_ALIGN;
        ps->add(c, ZERO_TIER_HOST, ZERO_MEM_PARAMS,
                2 * ((tile * es + A - 1) / A * A + 2 * A) + (uint64_t)count * ((piece * es + A - 1) / A * A + 2 * A));
    }
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, gather_peak(ps, es, oparam));
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.grad_dtype = gdt;
    spec.reduce_every_micro_step = 1;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
    if (!(gdt == rc->model_dtype && rc->contiguous_gradients)) { /* per-param temporaries, one at a time */
        uint64_t largest = 0;
        for (uint32_t i = 0, n = ps->nparams(c); i < n; i++)
            if (ps->param(c, i)->numel > largest) largest = ps->param(c, i)->numel;
        ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, largest * es);
    }
    zero_kit_step_tile_plan(ps, 1); /* the step's fp32 tile (16-bit gradients with experts / max_group_size) */
    return ZERO_OK;
}
