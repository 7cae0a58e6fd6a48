/* mics: the table's plan entry (zero_plan, zero-estimate, "stage": "auto"):
 * what params_done, the bucket set and the gather engine will allocate per
 * rank, recorded through ps->add without allocating.  Keep it next to
 * mics_params_done (mics_plugin.c) and the fetch (mics_gather.c).
 *
 * Per rank, with N ranks, S = mics_shard_size (a divisor of N; -1 or
 * absent: N), R = N / S, part = the layout's world share (Ψ/N rounded up
 * to the alignment), b / g bytes per model / gradient-accumulation
 * element, K optimizer states (fp32):
 *   PARAMS   R·part·b            the shard: R world shares (Ψb/S)
 *   MASTER   R·part·4            16-bit models only (fp32: the shard is it)
 *   OPTIM    K·R·part·4
 *   GRADS    R·part·g + part·g   the shard's gradient at the boundary, and
 *                                the world-share accumulator the bucket
 *                                engine reduce-scatters into
 *            + largest·b         contiguous_gradients off or fp32
 *                                accumulation of a 16-bit model: the
 *                                per-param temporaries, one at a time
 *   BUCKETS  the core's SCATTER bucket set (ps->buckets_bytes, which also
 *            plans the ring scratch, OTHER on the host tier)
 *   GATHER   the kit's gather engine replayed for the canonical host
 *            (zero_kit_gather_plan_peak) with stage 3's budget cap
 *            (Ψ - part)·b, plus the fetch's receive staging: a param's
 *            numel·b from the fetch's issue until it lands
 * Every allocation of the plugin is at least one element
 * (zero_kit_alloc_n); so is every term above.  Pure; thread-safe. */
#include "mics.h"

#define WHO "mics"

static uint64_t at_least_1(uint64_t n) { return n ? n : 1; }

zero_status mics_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    const int n = (int)L->world;
    int64_t S = -1;
    int got = ps->cfg_int(c, "zero_optimization.mics_shard_size", &S);
    if (got < 0) return ps->error(c, ZERO_ERR_CONFIG, "zero_optimization.mics_shard_size: expected an integer");
    if (got == 0 || S <= 0) S = n; /* as mics_create */
    if (S > n || n % S != 0)
        return ps->error(c, ZERO_ERR_CONFIG,
                         "zero_optimization.mics_shard_size: got %lld, expected a divisor of the world size %d",
                         (long long)S, n);
    if (rc->optim == ZERO_OPTIM_LAMB)
        return ps->error(c, ZERO_ERR_UNSUPPORTED, WHO ": optimizer Lamb is not supported");
    const uint64_t R = (uint64_t)(n / S), part = L->part_numel, shard = R * part;
    const zero_dtype dt = rc->model_dtype, gdt = zero_kit_grad_dtype(rc);
    const size_t es = zero_kit_dtype_size(dt), ges = zero_kit_dtype_size(gdt);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, at_least_1(shard) * es);
    if (dt != ZERO_DTYPE_F32) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, at_least_1(shard) * 4);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * at_least_1(shard) * 4);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, (at_least_1(shard) + at_least_1(part)) * ges);
    const int contiguous = gdt == dt && rc->contiguous_gradients;
    if (!contiguous) zero_kit_grad_tmp_plan(ps);
    zero_kit_step_tile_plan(ps, (uint32_t)R); /* the step's fp32 tile (16-bit gradients with max_group_size) */
    zero_bucket_spec spec = zero_kit_plan_bucket_spec(ps, ZERO_BUCKETS_SCATTER);
    spec.contiguous = contiguous;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
    /* mics_gather_setup: stage 3's cap at this world size; no alias */
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER,
            zero_kit_gather_plan_peak(ps, es, (L->flat_numel - part) * (uint64_t)es, 1));
    return ZERO_OK;
}
