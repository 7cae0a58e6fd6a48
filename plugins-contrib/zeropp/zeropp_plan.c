/* zeropp: the table's plan entry (zero_plan, zero-estimate, "stage": "auto"):
 * what params_done, the gradient path and the gather engine will allocate
 * per rank, recorded through ps->add without allocating.  Mirrors
 * zpp_params_done / map_params (zeropp_plugin.c), zpp_grads_setup
 * (zeropp_grads.c) and the core's quantized collectives; keep them in step.
 *
 * Per rank, with N ranks, part = the layout's world share (Ψ/N rounded up
 * to the alignment), b / g bytes per model / gradient-accumulation
 * element, K fp32 optimizer states, P = zero_hpz_partition_size:
 *   PARAMS   part·b                     stage 3's share
 *            + Σ_p ⌈numel_p/P⌉·b        hpZ (P > 1): the secondary chunks,
 *                                       ≈ Ψb/P (rank 0 of its hpZ group
 *                                       holds the rounded-up chunks)
 *   MASTER   part·4                     16-bit models only
 *   OPTIM    K·part·4
 *   GRADS    part·g                     the window's accumulator
 *            qgZ: + 4Ψ_flat             the micro-step's full fp32 gradient
 *                 + 4·E                 error feedback, when on: E =
 *                                       zpp_qgz_ef_numel, M·part (the M node
 *                                       partial sums this rank quantizes,
 *                                       hierarchical) or Ψ_flat (flat)
 *            + largest·b                per-param temporaries (qgZ with a
 *                                       16-bit model; else contiguous_gradients
 *                                       off or fp32 accumulation of 16 bits)
 *   BUCKETS  qgZ: 4·max_g part_g        the share of one layout group
 *                 + 4·M·max_g part_g    hierarchical with k > 1: the node's
 *                                       slice of one group (≈ 4Ψ/k)
 *            else the core's SCATTER bucket set (ps->buckets_bytes; it
 *            plans the ring scratch, OTHER host, too)
 *   GATHER   the kit's gather engine replayed for the canonical host
 *            (zero_kit_gather_plan_peak) with stage 3's cap (Ψ - part)·b
 *   OTHER    host scratch of the quantized collectives (core/quant.c),
 *   (host)   each q(n) = ⌈n/block⌉·4 + n (int8; ⌈n/2⌉ int4), rounded up
 *            to 4 bytes:
 *            qwZ: max_p Σ_j q(piece of p in share j) for one gather;
 *            qgZ: max_g (2R·q(part_g) + 4·part_g (+ 4·part_g with error
 *            feedback)) for one reduce-scatter over R ranks: R = M
 *            (hierarchical; none when M = 1, one node: no quantized
 *            step) or N (flat);
 *            the sum of both when both are on (a gather may run while a
 *            bucket reduces: an upper bound, as for the ring scratch).
 * Nodes (qgZ): the plan has no communicator.  It takes nodes of
 * k = ZERO_RANKS_PER_NODE consecutive ranks when that is set (as
 * comm_split_node does), else one node of all N ranks (what comm_split_node
 * finds on one machine); M = N/k nodes.  k not dividing N (unequal nodes)
 * or zero_quantized_gradients_hierarchical false: the flat exchange.  A
 * job across machines without ZERO_RANKS_PER_NODE is planned as one node:
 * its node slice and error feedback are then planned M times too small,
 * its cross-node scratch too (set the variable to plan it).
 * Every plugin allocation is at least one element (zero_kit_alloc_n);
 * so is every term above.  Pure; thread-safe. */
#include <stdlib.h>

#include "zeropp.h"

#define WHO "zeropp"
#define ZO "zero_optimization."

static uint64_t at_least_1(uint64_t n) { return n ? n : 1; }

/* core/quant.c zero__quant_bytes */
static uint64_t qbytes(uint64_t n, int64_t bits, uint64_t block) {
    const uint64_t data = bits == 8 ? n : (n + 1) / 2;
    return ((n + block - 1) / block * 4 + data + 3) & ~(uint64_t)3;
}

/* The layout group holding flat element `at` (params lie inside one). */
static const zero_layout_group *group_of(const zero_layout *L, uint64_t at) {
    for (uint32_t g = 0; g < L->ngroups; g++)
        if (at >= L->groups[g].flat_begin && at < L->groups[g].flat_begin + L->groups[g].numel) return &L->groups[g];
    return NULL;
}

/* qwZ: the largest one all-gather's scratch, Σ_j q(piece in share j). */
static uint64_t qw_scratch(const zero_plan_services *ps, uint64_t block) {
    zero_core *c = ps->core;
    const zero_layout *L = ps->layout(c);
    uint64_t most = 0;
    for (uint32_t i = 0, n = ps->nparams(c); i < n; i++) {
        const zero_param_info *p = ps->param(c, i);
        const zero_layout_group *g = group_of(L, p->flat_offset);
        if (!g || !p->numel) continue;
        uint64_t sum = 0;
        for (uint32_t j = 0; j < L->world; j++) {
            const uint64_t lo = g->flat_begin + j * g->part_numel, hi = lo + g->part_numel;
            const uint64_t a = p->flat_offset > lo ? p->flat_offset : lo;
            const uint64_t b = p->flat_offset + p->numel < hi ? p->flat_offset + p->numel : hi;
            sum += qbytes(b > a ? b - a : 0, 8, block);
        }
        if (sum > most) most = sum;
    }
    return most;
}

/* qgZ's nodes as the plan sees them (the comment above): k ranks per
 * node, M nodes, and whether the exchange is hierarchical. */
static zero_status plan_nodes(const zero_plan_services *ps, uint64_t N, int *hier, uint64_t *k, uint64_t *M) {
    *k = N;
    const char *env = getenv("ZERO_RANKS_PER_NODE");
    if (env && *env) {
        char *end = NULL;
        const long v = strtol(env, &end, 10);
        if (*end || v < 1)
            return ps->error(ps->core, ZERO_ERR_CONFIG, "ZERO_RANKS_PER_NODE: got '%s', expected a positive integer",
                             env);
        if ((uint64_t)v < N) *k = (uint64_t)v;
    }
    if (!*k || N % *k != 0) *hier = 0; /* unequal nodes: the flat exchange (zpp_qgz_setup) */
    *M = *k ? N / *k : 1;
    return ZERO_OK;
}

static zero_status cfg_int(const zero_plan_services *ps, const char *key, int64_t *v, int64_t lo, int64_t hi,
                           const char *want) {
    if (ps->cfg_int(ps->core, key, v) < 0 || *v < lo || *v > hi)
        return ps->error(ps->core, ZERO_ERR_CONFIG, "%s: expected %s", key, want);
    return ZERO_OK;
}

zero_status zpp_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    int qw = 0, qg = 0, ef = 1; /* zeropp_plugin.c: error feedback on by default */
    int64_t P = 1, bits = 8, wblock = 256, gblock = 64;
    if (ps->cfg_bool(c, ZO "zero_quantized_weights", &qw) < 0 || ps->cfg_bool(c, ZO "zero_quantized_gradients", &qg) < 0 ||
        ps->cfg_bool(c, ZO "zero_quantized_gradients_error_feedback", &ef) < 0)
        return ps->error(c, ZERO_ERR_CONFIG, WHO ": the quantization switches expect true or false");
    zero_status st;
    if ((st = cfg_int(ps, ZO "zero_hpz_partition_size", &P, 1, INT32_MAX, "an integer >= 1")) != ZERO_OK ||
        (st = cfg_int(ps, ZO "zero_quantized_gradients_bits", &bits, 4, 8, "8 or 4")) != ZERO_OK ||
        (st = cfg_int(ps, ZO "zero_quantized_weights_block", &wblock, 1, 65536, "an integer 1..65536")) != ZERO_OK ||
        (st = cfg_int(ps, ZO "zero_quantized_gradients_block", &gblock, 1, 65536, "an integer 1..65536")) != ZERO_OK)
        return st;
    if (bits != 8 && bits != 4) return ps->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_bits: expected 8 or 4");
    if (rc->optim == ZERO_OPTIM_LAMB) return ps->error(c, ZERO_ERR_UNSUPPORTED, WHO ": optimizer Lamb is not supported");
    /* the plan has no nodes: P must at least divide the world (setup_hpz
     * checks the node) */
    if (P > (int64_t)L->world || L->world % (uint64_t)P != 0)
        return ps->error(c, ZERO_ERR_CONFIG,
                         ZO "zero_hpz_partition_size: got %lld, expected a divisor of the ranks of a node (of the "
                            "world size %u here)",
                         (long long)P, L->world);
    const zero_dtype dt = rc->model_dtype, gdt = zero_kit_grad_dtype(rc);
    if (qg && gdt != ZERO_DTYPE_F32)
        return ps->error(c, ZERO_ERR_UNSUPPORTED, WHO ": zero_quantized_gradients needs fp32 gradient accumulation");
    const size_t es = zero_kit_dtype_size(dt), ges = zero_kit_dtype_size(gdt);
    const uint64_t part = L->part_numel, flat = L->flat_numel;
    uint64_t params = at_least_1(part) * es;
    for (uint32_t i = 0, n = ps->nparams(c); P > 1 && i < n; i++) /* hpZ: rank 0's secondary chunks */
        params += at_least_1((ps->param(c, i)->numel + (uint64_t)P - 1) / (uint64_t)P) * es;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, params);
    if (dt != ZERO_DTYPE_F32) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, at_least_1(part) * 4);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * at_least_1(part) * 4);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, at_least_1(part) * ges);
    uint64_t scratch = qw ? qw_scratch(ps, (uint64_t)wblock) : 0;
    if (qg) {
        int hier = 1;
        uint64_t k = 1, M = 1;
        if (ps->cfg_bool(c, ZO "zero_quantized_gradients_hierarchical", &hier) < 0)
            return ps->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_hierarchical: expected true or false");
        if ((st = plan_nodes(ps, L->world, &hier, &k, &M)) != ZERO_OK) return st;
        /* the quantized reduce-scatter's ranks: the cross-node communicator
         * (hierarchical; one node: no quantized step) or the world */
        const uint64_t R = hier ? (M > 1 ? M : 0) : L->world;
        uint64_t maxpart = 0, most = 0;
        for (uint32_t g = 0; g < L->ngroups; g++) {
            const uint64_t pg = L->groups[g].part_numel;
            if (pg > maxpart) maxpart = pg;
            if (!L->groups[g].numel || !R) continue;
            const uint64_t q = 2 * R * qbytes(pg, bits, (uint64_t)gblock) + 4 * pg * (ef ? 2 : 1);
            if (q > most) most = q;
        }
        scratch += most;
        const uint64_t efn = hier ? M * part : flat; /* zpp_qgz_ef_numel */
        ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, at_least_1(flat) * 4);
        if (ef) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, at_least_1(efn) * 4);
        ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, at_least_1(maxpart) * 4);
        if (hier && k > 1) ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, at_least_1(maxpart) * M * 4);
        if (dt != ZERO_DTYPE_F32) zero_kit_grad_tmp_plan(ps);
    } else {
        const int contiguous = gdt == dt && rc->contiguous_gradients;
        zero_bucket_spec spec = zero_kit_plan_bucket_spec(ps, ZERO_BUCKETS_SCATTER);
        spec.contiguous = contiguous;
        ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
        if (!contiguous) zero_kit_grad_tmp_plan(ps);
    }
    ps->add(c, ZERO_TIER_HOST, ZERO_MEM_OTHER, scratch);
    zero_kit_step_tile_plan(ps, 1); /* the step's fp32 tile (16-bit gradients with max_group_size) */
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, zero_kit_gather_plan_peak(ps, es, (flat - part) * (uint64_t)es, 0));
    return ZERO_OK;
}
