/* Gradient bucket engine (contract in buckets.h and zero_bucket_spec).
 *
 * Shape of the state:
 *  - buckets[]: static flat ranges [lo, hi), built once from the layout in
 *    REVERSE flat order inside each param group (a bucket never crosses a
 *    group, so its reduce-scatter blocks are simply the group's rank shares
 *    clipped to the bucket, in rank order).
 *  - per bucket a `pending` count of params (or param pieces) not yet ready
 *    in the current micro-step; a bucket is complete when it reaches 0.
 *  - launches happen strictly in bucket order (next_launch): MPI matches
 *    collectives by issue order, so every rank must issue the same sequence
 *    whatever order its hooks fire in.  A complete bucket waits for the
 *    earlier ones; the result never depends on hook order, only timing does.
 *  - in-flight requests form a FIFO (launch order) that is completed in that
 *    order, so post-processing (adding into the partition) is deterministic.
 *  - SCATTER mode stages gradients in a pool of slots, each sized to the
 *    largest bucket it has held, all within stage_budget (acquire_slot).
 *    The reduce-scatter runs in place (comm.h: recv may alias this rank's
 *    block of send), so a slot is the only buffer a bucket needs; the pass
 *    that opens an accumulation window sends its sums straight into the
 *    partition instead (direct_block).
 *
 * Mixed precision (grad_dtype BF16/F16): flat, partition and the slots the
 * host writes into are in the model dtype; sums are formed in fp32.  Before
 * a bucket's collective its elements are widened into an fp32 staging
 * buffer (a second array per slot; in-place modes borrow a slot only for
 * it, so their buckets are bounded like SCATTER's), scaled by DeepSpeed's
 * pre-reduction factor, reduced in fp32, scaled by the post-reduction factor
 * and rounded ONCE (RNE) into the destination (for SCATTER: partition +
 * block, added in fp32; ALLREDUCE: a reduce-scatter, then the owners'
 * rounded blocks are all-gathered at the flush).  The stored gradient is then the MEAN over the
 * ranks (DeepSpeed: prescale_gradients multiplies by 1/world before the
 * reduction; otherwise by 1/gradient_predivide_factor before and by
 * predivide/world after), so a 16-bit destination cannot overflow from
 * summing ranks; the core's grad_divisor for a 16-bit model is therefore gas
 * alone.  fp32 gradients keep the plain sum (grad_divisor world * gas): the
 * division is exact-enough in the optimizer's grad_mul, one multiply.
 *
 * spec.on_block_final (optional, for offload) is told when this rank's
 * block of a bucket is final: right after its post-processing in
 * complete_oldest, or at launch when world 1 has nothing to exchange.
 *
 * One mutex guards everything mutable; comm calls are made under it so the
 * issue order seen by the communicator equals bucket order even with several
 * host threads.  Waiting under the mutex only blocks other hook threads,
 * which could not make progress anyway (they need a slot or a launch).
 *
 * (issue 35) Ordered completion, on a CUDA engine with overlap_comm off
 * whose collectives run on the device's own stream (NCCL on libzero's
 * stream: zero__comm_ordered_on): a bucket is completed right after its
 * launch, as before, but without a host wait.  Its post-processing is
 * queued on the same stream behind the collective, its request is kept as
 * the set's `tail` (the previous tail is dropped: a later request of the
 * same communicator completes after it), and the flush waits once, for the
 * tail.  A released slot goes back to the host through fence_order (the
 * host's compute stream waits for its clear on the GPU) instead of a host
 * wait for the clear, so backward never blocks on a reduction: the GPU
 * serialises each reduction with the compute stream, which is what
 * overlap_comm false means in DeepSpeed too.  The collectives are issued in
 * the same order on the same buffers and their results are added by the
 * same kernels in the same order: the bits do not change.  Elsewhere (CPU
 * engines, MPI or staged communicators, overlap_comm on, on_block_final)
 * nothing changes; ZERO_BUCKET_HOST_WAIT=1 turns it off (the host then
 * waits per bucket as before: before/after measurements). */
#include "buckets.h"
#include "env.h"
#include "bucket_plan.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"
#include "engine.h"
#include "jitter.h"
#include "optim.h"
#include "trace.h"

typedef struct zb_bucket {
    uint64_t lo, hi;     /* flat range */
    uint32_t group;      /* layout group index */
    uint32_t nparts;     /* params (or pieces of a split param) inside */
    uint32_t pending;    /* not yet ready this micro-step */
    int launched;
    int slot;            /* SCATTER: staging slot index, -1 = none */
    uint64_t own_lo;     /* this rank's block: [own_lo, own_lo + own_n) */
    uint64_t own_n;
    uint64_t part_pos;   /* where the block lands in the partition buffer */
    zero_comm_req *req;
    int direct;          /* this micro-step's block is reduce-scattered straight into the partition */
    zero_status reaped;  /* status of a request completed by reap_done (req already freed) */
    zero__trace_bucket tr; /* (trace) fill and in-flight spans (base/trace.h) */
} zb_bucket;

typedef zero__bplan_param zb_param; /* offset, numel, group; first_bucket, nbuckets (bucket_plan.h) */

typedef struct zb_slot {
    void *buf;           /* cap elements of grad_dtype (SCATTER), BUCKETS-tagged; NULL in in-place modes */
    float *f32;          /* cap fp32 staging of the collective: == buf for fp32 SCATTER */
    void *w16;           /* wire16: cap elements of the 16-bit wire dtype, the collective's buffer; else NULL */
    uint64_t cap;        /* elements; sized to the largest bucket it has held (slots only grow) */
    uint64_t zlo, zhi;   /* free slot: buf[zlo, zhi) is known to be zero (cleared while its block was
                            added into the partition, or by the clear queued at its release), so
                            take_slot need not clear it again */
    void *fence;         /* device slot: the clear queued at its release is done once the device's
                            stream passes this marker (zero__dev_fence); NULL = nothing pending */
    int bucket;          /* owner, -1 = free */
} zb_slot;

struct zero_buckets {
    struct zero_engine *e;
    zero_bucket_spec spec;
    zero_comm *comm;
    int world, rank;
    void *flat, *part;   /* spec.flat / spec.partition, grad_dtype elements */
    size_t es;           /* bytes per gradient element */
    int mixed;           /* grad_dtype is 16-bit: fp32 staging around every collective */
    float pre, post;     /* mixed: scale before / after the reduction (mean over ranks, DeepSpeed's order) */
    /* (issue 14) fp32 gradients with a 16-bit communication_data_type: each
     * bucket travels (and is summed, rounding at every ring hop) in `wire`,
     * from a 16-bit staging array per slot; wpre before the rounding into
     * the wire, wpost after widening back, so the fp32 destination keeps
     * the SUM (grad_divisor world * gas, as with an fp32 wire) */
    int wire16;
    zero_dtype wire;     /* dtype of the collectives' payload: F32, or BF16/F16 when wire16 */
    float wpre, wpost;
    const zero_layout *layout;

    zb_bucket *b;
    uint32_t nb;
    zb_param *pm;
    uint32_t np;
    size_t *counts;      /* nb * world reduce-scatter block sizes */
    uint8_t *in_set;     /* (1.3) per layout group: reduced by this set (NULL: every group, no expert groups) */
    uint64_t bucket_numel; /* effective (clamped) bucket size */

    zb_slot *slots;
    uint32_t nslots;
    uint64_t slot_cap;   /* largest bucket: the most one slot ever needs */
    uint64_t stage_cap;  /* sum of the slots' cap */
    uint64_t stage_budget; /* stage_cap allowed without the host's order forcing it (see acquire_slot) */

    uint32_t next_launch;
    int pass_direct;     /* this pass writes the partition instead of adding (direct_block) */
    uint64_t last_window; /* accumulation window (boundaries passed) of the last pass; UINT64_MAX = none yet */
    uint32_t *fifo;      /* in-flight bucket indices, launch order (ring of nb) */
    uint32_t fifo_head, fifo_len;

    pthread_mutex_t mu;
    zero_status sticky;  /* first async failure; returned by flush */
    uint64_t passes;
    double exposed;      /* seconds waited inside hooks since the last flush */
    double exposed_total;
    double flush_wait;   /* (1.3) last flush: waits for reductions launched before it */
    uint32_t flush_first; /* (1.3) during a flush: first bucket it launched (0 otherwise) */
    int ordered;          /* (issue 35) ordered completion (see the top of the file) */
    zero_comm_req *tail;  /* ordered: the newest request completed in stream order, waited for at the flush */
    uint32_t tail_bucket; /* its bucket (nb: an all-gather of the flush) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_reducing(const zero_buckets *b) {
    return b->spec.reduce_every_micro_step || zero__micro_is_boundary(b->e);
}

/* Does this bucket set exchange anything?  World 1 has nothing to reduce:
 * the local sum is the global sum -- but for 16-bit gradients in a job of
 * several ranks (an expert group over one rank: bucket_plan.h). */
static int needs_comm(const zero_buckets *b) {
    return zero__bucket_set_exchanges((uint32_t)b->world, b->mixed, (uint32_t)b->e->world_size);
}

/* ---------------------------------------------------------------- build */

/* (1.3) Expert groups: keep only the buckets of this set's groups (a
 * bucket never crosses a group, so a group's buckets are whole) and
 * renumber the params' first buckets; params of other groups get none and
 * are refused by grad_slot / ready.  Rank-independent like the plan. */
static zero_status keep_own_groups(zero_buckets *b, zero__bucket_plan *plan) {
    uint32_t *renum = malloc((plan->nb ? plan->nb : 1) * sizeof *renum);
    if (!renum) return ZERO_ERR_OUT_OF_MEMORY;
    uint32_t kept = 0;
    for (uint32_t k = 0; k < plan->nb; k++) {
        renum[k] = kept;
        if (b->in_set[plan->b[k].group]) plan->b[kept++] = plan->b[k];
    }
    for (uint32_t i = 0; i < b->np; i++) {
        if (!b->in_set[b->pm[i].group]) {
            b->pm[i].nbuckets = 0;
            b->pm[i].first_bucket = 0;
        } else if (b->pm[i].nbuckets) {
            b->pm[i].first_bucket = renum[b->pm[i].first_bucket];
        }
    }
    plan->nb = kept;
    free(renum);
    return ZERO_OK;
}

/* The static arithmetic (bucket ranges, which buckets cover a param, each
 * rank's block) is bucket_plan.c's; this copies it into the runtime state. */
static zero_status build_buckets(zero_buckets *b) {
    zero__bucket_plan plan;
    zero_status s = zero__bucket_plan_build(&plan, b->layout, b->pm, b->bucket_numel,
                                            b->spec.mode == ZERO_BUCKETS_SCATTER);
    if (s != ZERO_OK) return s;
    if (b->in_set && (s = keep_own_groups(b, &plan)) != ZERO_OK) {
        zero__bucket_plan_free(&plan);
        return s;
    }
    b->nb = plan.nb;
    b->b = calloc(plan.nb ? plan.nb : 1, sizeof *b->b);
    b->counts = calloc((size_t)(plan.nb ? plan.nb : 1) * (size_t)b->world, sizeof *b->counts);
    if (!b->b || !b->counts) {
        zero__bucket_plan_free(&plan);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t k = 0; k < plan.nb; k++) {
        zb_bucket *bk = &b->b[k];
        bk->lo = plan.b[k].lo;
        bk->hi = plan.b[k].hi;
        bk->group = plan.b[k].group;
        bk->nparts = bk->pending = plan.b[k].nparts;
        bk->slot = -1;
        /* reduce-scatter blocks: each rank's share of the group clipped to the bucket */
        for (int r = 0; r < b->world; r++) {
            uint64_t lo, n, pos;
            zero__bucket_plan_block(b->layout, &plan.b[k], (uint32_t)r, &lo, &n, &pos);
            b->counts[(size_t)k * b->world + r] = (size_t)n;
            if (r == b->rank) {
                bk->own_lo = lo;
                bk->own_n = n;
                bk->part_pos = pos;
            }
        }
    }
    zero__bucket_plan_free(&plan);
    return ZERO_OK;
}

/* SCATTER's staging budget, in slot elements (buckets.h states the rule):
 * the gradient bytes that partitioning saves, flat - part elements of
 * grad_dtype, so that stage 2 never holds more gradient memory than stage 1.
 * (libzero 1.10) Of this set's own groups: with expert groups each set spends what
 * its groups save, so that the sets together stay within the model's
 * saving (each spending the whole model's let stage 2 pass stage 1).
 * A slot element costs es bytes plus 4 for the fp32 staging of a 16-bit
 * model.  Never below one largest bucket: with contiguous_gradients a
 * param's whole gradient must fit one slot.  In-place modes stage only
 * 16-bit fp32 copies of buckets bounded at flat/8 and save nothing to spend:
 * no budget (two slots, as ever).  Rank-independent, like the buckets. */
static uint64_t staging_budget(const zero_buckets *b) {
    if (b->spec.mode != ZERO_BUCKETS_SCATTER) return UINT64_MAX;
    uint64_t saved = 0;
    for (uint32_t g = 0; g < b->layout->ngroups; g++)
        if (!b->in_set || b->in_set[g]) saved += b->layout->groups[g].numel - b->layout->groups[g].part_numel;
    const uint64_t per = (uint64_t)b->es + (b->mixed ? sizeof(float) : 0) + (b->wire16 ? 2 : 0);
    const uint64_t budget = saved * b->es / per;
    return budget > b->slot_cap ? budget : b->slot_cap;
}

/* (issue 14) The wire dtype and its factors.  A 16-bit wire is for fp32
 * gradients only (16-bit gradients keep their fp32 sums, rounded once:
 * docs/precision.md).  Factors (DeepSpeed's engine.allreduce_bucket order):
 * prescale_gradients: x 1/world before, x world after; otherwise
 * x 1/f before and x f after, f = gradient_predivide_factor when the
 * config gives it, else world for fp16 (a sum of N fp16 gradients can
 * reach N times the largest, which the loss scaler keeps below 65504 for
 * one rank's: pre-dividing keeps every partial sum of the ring within one
 * rank's range) and 1 for bf16 (fp32's range).  Rank-independent. */
static void wire_setup(zero_buckets *b) {
    const zero_dtype cdt = b->e->rc->comm_dtype;
    b->wire = ZERO_DTYPE_F32;
    b->wpre = b->wpost = 1.0f;
    b->wire16 = !b->mixed && (cdt == ZERO_DTYPE_BF16 || cdt == ZERO_DTYPE_F16);
    if (!b->wire16) return;
    b->wire = cdt;
    const double w = (double)b->e->world_size;
    double f = cdt == ZERO_DTYPE_F16 ? w : 1.0, given = 0.0;
    if (zero__config_double(b->e->cfg, "gradient_predivide_factor", &given) == 1 && given > 0) f = given;
    if (b->e->rc->prescale_gradients) f = w;
    b->wpre = (float)(1.0 / f);
    b->wpost = (float)f;
}

/* (issue 35) Does this set complete its buckets in stream order (see the
 * top of the file)?  Only where every condition holds: a device with
 * fences and fence_order, a communicator whose collectives run on that
 * device's stream in issue order (NCCL on libzero's stream), overlap_comm
 * off, no on_block_final (offload reads the final blocks on the host as
 * they complete), something to exchange, and ZERO_BUCKET_HOST_WAIT not set. */
static int ordered_completion(const zero_buckets *b) {
    zero__device *d = b->e->dev;
    if (!d || b->spec.overlap || b->spec.on_block_final || !needs_comm(b)) return 0;
    if (!zero__dev_has_fences(d) || !d->ops->fence_order) return 0;
    int host_wait = 0;
    if (zero__env_flag("ZERO_BUCKET_HOST_WAIT", &host_wait) == 1 && host_wait) return 0;
    return zero__comm_ordered_on(b->comm, d->ops->stream(d));
}

static zero_status make_slot(zero_buckets *b, uint32_t i, uint64_t n);
zero_status zero__buckets_create(zero_core *c, const zero_bucket_spec *spec, zero_buckets **out) {
    struct zero_engine *e = zero__engine_of(c);
    if (!out) return ZERO_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!spec) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "buckets_create: spec missing");
    if (!e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "buckets_create before params_done");
    if (spec->mode < ZERO_BUCKETS_ALLREDUCE || spec->mode > ZERO_BUCKETS_SCATTER)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "buckets_create: unknown mode %d", (int)spec->mode);
    if (spec->mode == ZERO_BUCKETS_SCATTER ? !spec->partition : !spec->flat)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "buckets_create: mode %d needs its %s buffer",
                           (int)spec->mode, spec->mode == ZERO_BUCKETS_SCATTER ? "partition" : "flat");

    zero_buckets *b = calloc(1, sizeof *b);
    if (!b) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "buckets_create: out of memory");
    b->e = e;
    b->spec = *spec;
    /* staging slots cannot carry a sum across micro-steps: SCATTER reduces
     * every micro-step whatever the spec says */
    if (spec->mode == ZERO_BUCKETS_SCATTER) b->spec.reduce_every_micro_step = 1;
    b->flat = spec->flat;
    b->part = spec->partition;
    b->comm = spec->comm ? spec->comm : e->world;
    b->world = zero__comm_size(b->comm);
    b->rank = zero__comm_rank(b->comm);
    b->layout = &e->layout.view;
    pthread_mutex_init(&b->mu, NULL);
    zero_status s = ZERO_OK;
    {
        const zero_dtype gdt = spec->grad_dtype;
        if (gdt != ZERO_DTYPE_F32 && gdt != ZERO_DTYPE_BF16 && gdt != ZERO_DTYPE_F16) {
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "buckets_create: unknown grad_dtype %d", (int)gdt);
            goto fail;
        }
        b->es = gdt == ZERO_DTYPE_F32 ? 4 : 2;
        b->mixed = gdt != ZERO_DTYPE_F32;
        /* the mean over the whole data-parallel group, also for an expert
         * group's set: its sum holds every rank's contribution (the host's
         * token exchange brought them to the expert's holders) */
        double w = (double)e->world_size, f = e->rc->gradient_predivide_factor > 0 ? e->rc->gradient_predivide_factor : 1.0;
        b->pre = (float)(e->rc->prescale_gradients ? 1.0 / w : 1.0 / f);
        b->post = (float)(e->rc->prescale_gradients ? 1.0 : f / w);
        wire_setup(b);
    }
    if (e->group_comms) { /* (1.3) expert groups: the groups partitioned over b->comm */
        int expert_comm = 0;
        for (uint32_t g = 0; g < b->layout->ngroups; g++) expert_comm |= e->group_comms[g] == b->comm;
        b->in_set = calloc(b->layout->ngroups ? b->layout->ngroups : 1, 1);
        if (!b->in_set) goto oom;
        for (uint32_t g = 0; g < b->layout->ngroups; g++)
            b->in_set[g] = expert_comm ? e->group_comms[g] == b->comm : e->group_comms[g] == NULL;
    }
    for (uint32_t g = 0; g < b->layout->ngroups; g++) {
        uint32_t gw = b->layout->group_world ? b->layout->group_world[g] : b->layout->world;
        if ((!b->in_set || b->in_set[g]) && (uint32_t)b->world != gw) {
            s = zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                            "buckets_create: communicator has %d ranks but layout group %u is partitioned over %u",
                            b->world, g, gw);
            goto fail;
        }
    }
    b->np = e->nparams;
    b->pm = calloc(b->np ? b->np : 1, sizeof *b->pm);
    if (!b->pm) goto oom;
    for (uint32_t i = 0; i < b->np; i++) {
        b->pm[i].offset = e->params[i]->info.flat_offset;
        b->pm[i].numel = e->params[i]->info.numel;
        int g = zero__layout_group_of(b->layout, b->pm[i].offset);
        b->pm[i].group = g < 0 ? 0 : (uint32_t)g;
    }
    b->last_window = UINT64_MAX;
    b->bucket_numel = zero__bucket_plan_size(b->layout, b->pm, b->spec.bucket_numel,
                                             b->spec.mode == ZERO_BUCKETS_SCATTER, b->mixed || b->wire16,
                                             e->rc->round_robin_gradients, b->in_set);
    if ((s = build_buckets(b)) != ZERO_OK) goto fail_s;
    b->fifo = calloc(b->nb ? b->nb : 1, sizeof *b->fifo);
    if (!b->fifo) goto oom;
    for (uint32_t k = 0; k < b->nb; k++)
        if (b->b[k].hi - b->b[k].lo > b->slot_cap) b->slot_cap = b->b[k].hi - b->b[k].lo;
    b->stage_budget = staging_budget(b);
    b->ordered = ordered_completion(b);
    if (b->ordered)
        zero__log(e, ZERO_LOG_DEBUG, "bucket engine: overlap_comm off on the device's stream: %u buckets complete in "
                  "stream order, one host wait per flush", b->nb);
    /* SCATTER with something to exchange: the double buffer is allocated
     * now, at its final size (the largest bucket), instead of when timing
     * asks for it, so that staging memory is a function of the model and
     * the world, never of how fast reductions complete.  Stage 2 and stage 3
     * then hold the same staging (docs/memory.md: what makes stage 3 <=
     * stage 2 hold by construction).  The second slot only within budget. */
    if (b->spec.mode == ZERO_BUCKETS_SCATTER && needs_comm(b) && b->nb) {
        if ((s = make_slot(b, 0, b->slot_cap)) != ZERO_OK) goto fail;
        if (b->nb > 1 && 2 * b->slot_cap <= b->stage_budget && (s = make_slot(b, 1, b->slot_cap)) != ZERO_OK)
            goto fail;
    }
    *out = b;
    return ZERO_OK;
oom:
    s = ZERO_ERR_OUT_OF_MEMORY;
fail_s:
    if (s == ZERO_ERR_OUT_OF_MEMORY) zero__error(e, s, "buckets_create: out of memory");
fail:
    zero__buckets_destroy(b);
    return s;
}

/* ------------------------------------------------------------ runtime */

/* World-1 SCATTER: the partition is the whole (padded) flat space of each
 * group, so a param's slot is simply its place in the accumulator. */
static void *direct_partition_slot(const zero_buckets *b, uint32_t index) {
    const zb_param *p = &b->pm[index];
    const zero_layout_group *lg = &b->layout->groups[p->group];
    return (char *)b->part + (size_t)(lg->part_offset + (p->offset - lg->flat_begin)) * b->es;
}

static void *elem(void *base, uint64_t i, size_t es) { return (char *)base + (size_t)i * es; }

/* Element-wise work on gradient buffers goes through the engine's device
 * (backends/device/device.h): on a CUDA engine flat, partition and slots are
 * device memory and these run as kernels on the device's stream, ordered
 * with the NCCL collectives there; without a device (dev NULL) they are the
 * CPU loops they always were.  A device failure is remembered in `sticky`
 * (returned by flush) with the device's reason as the last error. */
static zero_status dev_check(zero_buckets *b, zero_status s, const char *what) {
    if (s == ZERO_OK) return s;
    zero__error(b->e, s, "bucket engine: %s on the device failed: %s", what, zero__dev_error(b->e->dev));
    if (b->sticky == ZERO_OK) b->sticky = s;
    return s;
}

static zero_status scale_f32(zero_buckets *b, float *x, float a, size_t n) {
    return dev_check(b, zero__dev_scale(b->e->dev, x, a, n), "scale");
}

/* dst (grad dtype) = round(dst + src), the sum formed in fp32. */
static zero_status add_into_dt(zero_buckets *b, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt,
                               size_t n) {
    return dev_check(b, zero__dev_add_into(b->e->dev, dst, ddt, src, sdt, n), "add");
}

static zero_status convert(zero_buckets *b, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    return dev_check(b, zero__dev_convert(b->e->dev, dst, ddt, src, sdt, n), "convert");
}

/* dst += src, then src = 0, tile by tile so that each tile of src is
 * cleared while still in L1.  The sum is zero__add_into's (one IEEE fp32
 * addition per element), so the result is bitwise what add_into_dt gives.
 * Host memory only. */
static void add_and_clear_f32(float *dst, float *src, size_t n) {
    enum { TILE = 2048 }; /* 8 KiB of src per tile */
    for (size_t i = 0; i < n; i += TILE) {
        size_t k = n - i < TILE ? n - i : TILE;
        zero__add_into(dst + i, src + i, ZERO_DTYPE_F32, k);
        memset(src + i, 0, k * sizeof(float));
    }
}

static int scatter_staged(const zero_buckets *b) {
    return b->spec.mode == ZERO_BUCKETS_SCATTER && needs_comm(b);
}

/* Complete the oldest in-flight bucket.  Called with mu held. */
/* A device slot whose bucket is done (its sum consumed by work queued on
 * the device's stream): queue its clear right away, behind that work, and
 * fence it, so that take_slot hands it out after waiting only for the
 * clear -- not for everything queued on the stream since (later buckets'
 * collectives) -- and the host may then write it from any stream.  Host
 * slots keep being cleared at take_slot (cheap, and cache-warm there).
 * Called with mu held. */
static zero_status clear_released(zero_buckets *b, zb_slot *sl, uint64_t n) {
    /* the cheap test first: a CPU engine or a device without fences asks no driver */
    if (!sl->buf || !zero__dev_has_fences(b->e->dev) || !zero__dev_is_device(b->e->dev, sl->buf)) return ZERO_OK;
    const uint64_t zlo = sl->zlo < n ? sl->zlo : n, zhi = sl->zhi < n ? sl->zhi : n;
    zero_status s = dev_check(b, zero__dev_clear_async(b->e->dev, sl->buf, (size_t)zlo * b->es), "clearing a slot");
    if (s == ZERO_OK && zhi < n)
        s = dev_check(b, zero__dev_clear_async(b->e->dev, elem(sl->buf, zhi, b->es), (size_t)(n - zhi) * b->es),
                      "clearing a slot");
    if (s == ZERO_OK) s = dev_check(b, zero__dev_fence(b->e->dev, &sl->fence), "fencing a slot");
    if (s != ZERO_OK) return s;
    sl->zlo = 0, sl->zhi = n; /* [0, n) is zero once the fence is passed */
    return ZERO_OK;
}

/* spec.on_block_final: this rank's block of bucket bk is final.  mu held
 * (or no concurrency: world 1 reports from launch, which runs under mu too). */
static void notify_final(const zero_buckets *b, const zb_bucket *bk) {
    if (!b->spec.on_block_final || bk->own_n == 0) return;
    zero_owned_range r = {bk->own_lo, bk->own_lo + bk->own_n, bk->part_pos};
    b->spec.on_block_final(b->spec.on_block_final_user, &r);
}

/* (issue 14) A 16-bit wire reduction is complete: widen the sums into the
 * fp32 destination and undo the pre-factor.  SCATTER: the own block is
 * widened into the slot's fp32 array (its host values were consumed by the
 * conversion), scaled, and added into the partition; SCATTER_INPLACE: the
 * own block lands in flat; ALLREDUCE: the whole bucket (every block was
 * summed by its owner's ring, as the reduce-scatter sums it) lands in
 * flat.  The same fp32 operations in every mode, so stage 0/1/2/3 agree
 * bitwise.  Called with mu held. */
static zero_status land_wire16(zero_buckets *b, const zb_bucket *bk) {
    const zb_slot *sl = &b->slots[bk->slot];
    const uint64_t off = bk->own_lo - bk->lo;
    zero_status s = ZERO_OK;
    switch (b->spec.mode) {
    case ZERO_BUCKETS_SCATTER: {
        if (bk->own_n == 0) return ZERO_OK;
        float *tmp = (float *)sl->buf + off;
        if ((s = convert(b, tmp, ZERO_DTYPE_F32, elem(sl->w16, off, 2), b->wire, (size_t)bk->own_n)) != ZERO_OK ||
            (b->wpost != 1.0f && (s = scale_f32(b, tmp, b->wpost, (size_t)bk->own_n)) != ZERO_OK))
            return s;
        return add_into_dt(b, elem(b->part, bk->part_pos, 4), ZERO_DTYPE_F32, tmp, ZERO_DTYPE_F32, (size_t)bk->own_n);
    }
    case ZERO_BUCKETS_SCATTER_INPLACE: {
        if (bk->own_n == 0) return ZERO_OK;
        float *dst = elem(b->flat, bk->own_lo, 4);
        if ((s = convert(b, dst, ZERO_DTYPE_F32, elem(sl->w16, off, 2), b->wire, (size_t)bk->own_n)) != ZERO_OK)
            return s;
        return b->wpost != 1.0f ? scale_f32(b, dst, b->wpost, (size_t)bk->own_n) : ZERO_OK;
    }
    default: {
        const size_t n = (size_t)(bk->hi - bk->lo);
        float *dst = elem(b->flat, bk->lo, 4);
        if ((s = convert(b, dst, ZERO_DTYPE_F32, sl->w16, b->wire, n)) != ZERO_OK) return s;
        return b->wpost != 1.0f ? scale_f32(b, dst, b->wpost, n) : ZERO_OK;
    }
    }
}

/* (issue 35) Ordered completion: req's collective is done for everything
 * queued after it on the device's stream; keep it as the tail (the one the
 * flush waits for) and drop the previous tail, which completes before it.
 * Called with mu held. */
static zero_status retire(zero_buckets *b, zero_comm_req *req, uint32_t k) {
    zero_comm_req *old = b->tail;
    b->tail = req;
    b->tail_bucket = k;
    return old ? zero__comm_drop(old) : ZERO_OK;
}

/* (issue 35) The one host wait of an ordered set: for the tail, which
 * completes after every collective retired before it.  Timed like the
 * waits of complete_oldest (exposed; flush_wait when its bucket was
 * launched during backward).  Called with mu held. */
static zero_status settle_tail(zero_buckets *b) {
    zero_comm_req *t = b->tail;
    if (!t) return ZERO_OK;
    b->tail = NULL;
    double t0 = now_s();
    zero_status s = zero__comm_wait(t);
    double waited = now_s() - t0;
    b->exposed += waited;
    if (b->tail_bucket < b->flush_first) b->flush_wait += waited;
    if (s == ZERO_ERR_TIMEOUT)
        zero__error_context(b->e, s, "bucket engine: the reductions up to bucket %u of %u (completed in stream "
                            "order, waited for once) did not finish", b->tail_bucket, b->nb);
    return s;
}

static zero_status complete_oldest(zero_buckets *b) {
    zero__jitter(ZERO_JITTER_COMPLETE);
    uint32_t k = b->fifo[b->fifo_head];
    b->fifo_head = (b->fifo_head + 1) % (b->nb ? b->nb : 1);
    b->fifo_len--;
    zb_bucket *bk = &b->b[k];
    ZERO_TRACE_BUCKET_COMPLETE(&bk->tr, k);
    zero_status s = bk->reaped;
    bk->reaped = ZERO_OK;
    if (bk->req && b->ordered) {
        /* no host wait: what follows is queued behind the collective */
        s = retire(b, bk->req, k);
        bk->req = NULL;
    } else if (bk->req) {
        double t0 = now_s();
        s = zero__comm_wait(bk->req);
        double waited = now_s() - t0;
        b->exposed += waited;
        if (k < b->flush_first) b->flush_wait += waited; /* (1.3) launched during backward */
        bk->req = NULL;
        if (s == ZERO_ERR_TIMEOUT) /* say which gradients were waited for */
            zero__error_context(b->e, s, "bucket engine: bucket %u of %u (flat elements %llu..%llu, %s) not reduced",
                                k, b->nb, (unsigned long long)bk->lo, (unsigned long long)bk->hi,
                                b->spec.mode == ZERO_BUCKETS_ALLREDUCE ? "all-reduce" : "reduce-scatter");
    }
    if (s == ZERO_OK && bk->slot >= 0 && b->wire16) {
        s = land_wire16(b, bk);
    } else if (s == ZERO_OK && bk->slot >= 0 && (bk->own_n > 0 || b->spec.mode == ZERO_BUCKETS_ALLREDUCE)) {
        /* the reduced block sits in place in the slot's fp32 array at its send offset */
        float *blk = b->slots[bk->slot].f32 + (bk->own_lo - bk->lo);
        zero_dtype dt = b->spec.grad_dtype;
        switch (b->spec.mode) {
        case ZERO_BUCKETS_SCATTER:
            if (bk->direct) {
                /* the collective wrote the sum into the partition itself */
            } else if (!b->mixed) {
                float *dst = elem(b->part, bk->part_pos, 4);
                if (!zero__dev_is_device(b->e->dev, dst) && !zero__dev_is_device(b->e->dev, blk)) {
                    /* host memory: clear the block while it is in cache (the
                     * slot's next owner would otherwise clear it in a pass of
                     * its own) and remember that it is zero */
                    add_and_clear_f32(dst, blk, (size_t)bk->own_n);
                    b->slots[bk->slot].zlo = bk->own_lo - bk->lo;
                    b->slots[bk->slot].zhi = bk->own_lo - bk->lo + bk->own_n;
                } else {
                    s = add_into_dt(b, dst, ZERO_DTYPE_F32, blk, ZERO_DTYPE_F32, (size_t)bk->own_n);
                }
            } else if ((s = scale_f32(b, blk, b->post, (size_t)bk->own_n)) == ZERO_OK) {
                s = add_into_dt(b, elem(b->part, bk->part_pos, b->es), dt, blk, ZERO_DTYPE_F32, (size_t)bk->own_n);
            }
            break;
        case ZERO_BUCKETS_SCATTER_INPLACE: /* mixed only: round the owned block once into flat */
            if ((s = scale_f32(b, blk, b->post, (size_t)bk->own_n)) == ZERO_OK)
                s = convert(b, elem(b->flat, bk->own_lo, b->es), dt, blk, ZERO_DTYPE_F32, (size_t)bk->own_n);
            break;
        default: /* ALLREDUCE, mixed only: reduce-scattered (see launch); the owner rounds its block, the
                  * 16-bit blocks are all-gathered by gather_rounded_blocks at the flush */
            if ((s = scale_f32(b, blk, b->post, (size_t)bk->own_n)) == ZERO_OK)
                s = convert(b, elem(b->flat, bk->own_lo, b->es), dt, blk, ZERO_DTYPE_F32, (size_t)bk->own_n);
            break;
        }
    }
    if (s == ZERO_OK) notify_final(b, bk);
    if (bk->slot >= 0) {
        if (s == ZERO_OK) s = clear_released(b, &b->slots[bk->slot], bk->hi - bk->lo);
        b->slots[bk->slot].bucket = -1;
        bk->slot = -1;
    }
    if (s != ZERO_OK && b->sticky == ZERO_OK) b->sticky = s;
    return s;
}

/* Give slot i (free) to bucket k.  A reused slot is cleared because the
 * host adds into it; fresh memory is zero-filled; in-place modes' fp32
 * staging is overwritten whole.  Called with mu held. */
static zero_status take_slot(zero_buckets *b, uint32_t i, uint32_t k, int fresh) {
    zero__jitter(ZERO_JITTER_SLOT);
    zb_slot *sl = &b->slots[i];
    const uint64_t n = b->b[k].hi - b->b[k].lo;
    const uint64_t zlo = sl->zlo < n ? sl->zlo : n, zhi = sl->zhi < n ? sl->zhi : n;
    sl->bucket = (int)k;
    sl->zlo = sl->zhi = 0; /* the host writes into it from now on */
    b->b[k].slot = (int)i;
    if (fresh || !sl->buf) return ZERO_OK;
    if (sl->fence) { /* the clear queued at its release */
        void *f = sl->fence;
        sl->fence = NULL;
        /* ordered completion (issue 35): the host's compute stream waits for
         * the clear on the GPU (the host goes on); otherwise the host waits,
         * so that it may write the slot from any stream */
        zero_status s = b->ordered ? dev_check(b, zero__dev_fence_order(b->e->dev, f, NULL), "ordering a slot's clear")
                                   : dev_check(b, zero__dev_fence_wait(b->e->dev, f), "waiting for a slot's clear");
        if (s != ZERO_OK) return s;
    }
    /* clear [0, n) except the part already known to be zero */
    if (b->ordered && (zlo > 0 || zhi < n)) {
        /* (issue 35) queued on the device's stream, and the host's compute
         * stream waits for it there, as for the fenced clear above (e.g. a
         * bucket longer than the one the slot held last: its tail) */
        zero_status s = dev_check(b, zero__dev_clear_async(b->e->dev, sl->buf, (size_t)zlo * b->es), "clearing a slot");
        if (s == ZERO_OK)
            s = dev_check(b, zero__dev_clear_async(b->e->dev, elem(sl->buf, zhi, b->es), (size_t)(n - zhi) * b->es),
                          "clearing a slot");
        void *f = NULL;
        if (s == ZERO_OK) s = dev_check(b, zero__dev_fence(b->e->dev, &f), "fencing a slot");
        if (s == ZERO_OK) s = dev_check(b, zero__dev_fence_order(b->e->dev, f, NULL), "ordering a slot's clear");
        return s;
    }
    zero_status s = dev_check(b, zero__dev_memset(b->e->dev, sl->buf, 0, (size_t)zlo * b->es), "clearing a slot");
    if (s == ZERO_OK)
        s = dev_check(b, zero__dev_memset(b->e->dev, elem(sl->buf, zhi, b->es), 0, (size_t)(n - zhi) * b->es),
                      "clearing a slot");
    return s;
}

/* (Re)allocate slot i with n elements: i == nslots appends one, else the
 * free slot i is replaced (it was too small); its old buffers are freed
 * first, so the peak never counts both.  Called with mu held. */
static zero_status make_slot(zero_buckets *b, uint32_t i, uint64_t n) {
    if (i == b->nslots) {
        zb_slot *ns = realloc(b->slots, (b->nslots + 1) * sizeof *ns);
        if (!ns) return zero__error(b->e, ZERO_ERR_OUT_OF_MEMORY, "bucket engine: cannot grow the slot pool");
        b->slots = ns;
        b->nslots++;
    } else {
        zero__dev_fence_wait(b->e->dev, b->slots[i].fence); /* the clear must be done before the memory goes */
        if ((void *)b->slots[i].f32 != b->slots[i].buf) zero__mem_free(b->e->mem, b->slots[i].f32);
        zero__mem_free(b->e->mem, b->slots[i].buf);
        zero__mem_free(b->e->mem, b->slots[i].w16);
        b->stage_cap -= b->slots[i].cap;
    }
    zb_slot *sl = &b->slots[i];
    memset(sl, 0, sizeof *sl); /* an empty free slot until both buffers exist */
    sl->bucket = -1;
    const int host_slot = b->spec.mode == ZERO_BUCKETS_SCATTER;
    void *buf = host_slot ? zero__mem_alloc(b->e->mem, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, (size_t)n * b->es) : NULL;
    float *f32 = b->mixed ? zero__mem_alloc(b->e->mem, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, (size_t)n * sizeof(float))
                          : buf;
    void *w16 = b->wire16 ? zero__mem_alloc(b->e->mem, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, (size_t)n * 2) : NULL;
    if ((host_slot && !buf) || (b->mixed && !f32) || (b->wire16 && !w16)) {
        zero__mem_free(b->e->mem, buf);
        zero__mem_free(b->e->mem, w16);
        if ((void *)f32 != buf) zero__mem_free(b->e->mem, f32);
        return zero__error(b->e, ZERO_ERR_OUT_OF_MEMORY, "bucket engine: cannot allocate a %llu-element slot",
                           (unsigned long long)n);
    }
    sl->buf = buf;
    sl->f32 = f32;
    sl->w16 = w16;
    sl->cap = n;
    b->stage_cap += n;
    return ZERO_OK;
}

/* A zeroed slot for bucket k (SCATTER, and in-place 16-bit staging).
 * In order of preference:
 *  1. the smallest free slot that holds the bucket;
 *  2. a new slot (while fewer than two: double buffering), or the largest
 *     free slot enlarged to the bucket, if the pool stays within
 *     stage_budget (slots only grow, so this settles after a few steps);
 *  3. wait for the oldest in-flight bucket, which frees its slot, and retry;
 *  4. nothing in flight and nothing fits: the host holds every slot for
 *     buckets it has not finished (its hook order left no choice), so grow
 *     past the budget rather than deadlock.
 * Slots are sized to the buckets they hold, so a model whose largest param
 * dwarfs its others does not pay two slots of that size: when the budget
 * forbids it, the big bucket waits for the previous big one instead (less
 * overlap, bounded memory).  Called with mu held. */
static zero_status acquire_slot(zero_buckets *b, uint32_t k) {
    const uint64_t n = b->b[k].hi - b->b[k].lo;
    for (;;) {
        int fit = -1, small = -1;
        for (uint32_t i = 0; i < b->nslots; i++) {
            const zb_slot *sl = &b->slots[i];
            if (sl->bucket >= 0) continue;
            if (sl->cap >= n) {
                if (fit < 0 || sl->cap < b->slots[fit].cap) fit = (int)i;
            } else if (small < 0 || sl->cap > b->slots[small].cap) {
                small = (int)i;
            }
        }
        if (fit >= 0) return take_slot(b, (uint32_t)fit, k, 0);
        const uint64_t freed = small >= 0 ? b->slots[small].cap : 0;
        const int room = b->stage_cap - freed + n <= b->stage_budget && (small >= 0 || b->nslots < 2);
        if (room || b->fifo_len == 0) {
            const uint32_t i = small >= 0 ? (uint32_t)small : b->nslots;
            if (!room)
                zero__log(b->e, ZERO_LOG_DEBUG,
                          "bucket engine: hook order filled every slot; pool grows to %llu elements in %u slots",
                          (unsigned long long)(b->stage_cap - freed + n), b->nslots + (small < 0));
            zero_status s = make_slot(b, i, n);
            if (s != ZERO_OK) return s;
            return take_slot(b, i, k, 1);
        }
        zero_status s = complete_oldest(b);
        if (s != ZERO_OK) return s;
    }
}

/* Does this pass open an accumulation window?  Decided when its first
 * bucket launches: the core is at micro_step 0 (every micro-step when
 * gradient_accumulation_steps is 1) and no pass has run since the window
 * began (the core's boundary count moved since the last pass, or this is
 * the engine's first pass).  Called with mu held. */
static void begin_pass(zero_buckets *b) {
    const uint64_t window = b->e->global_step + b->e->skipped_steps;
    b->pass_direct = b->e->micro_step == 0 && window != b->last_window;
    b->last_window = window;
}

/* May bucket bk's reduce-scatter write its sum straight into the partition
 * instead of into the slot followed by a pass adding it there?  Yes in a
 * pass that opens an accumulation window (begin_pass), for fp32 SCATTER in
 * host memory: the own blocks of all buckets tile this rank's partition, so
 * that pass writes every element of it, and the accumulator restarts each
 * window (every SCATTER plugin clears it after the boundary step anyway; a
 * checkpoint resumed mid-window has micro_step > 0 and keeps adding).
 * Bitwise the same as adding into the cleared partition: 0 + x == x for
 * every x but -0, and a sum of slots that started at +0 and were only added
 * into (the zero_grad_buffer contract) is never -0.  16-bit models scale and
 * round after the reduction: never.  Saves, per bucket, a pass that reads
 * the slot's block and the partition block and writes the latter.  Called
 * with mu held. */
static int direct_block(const zero_buckets *b, const zb_bucket *bk, const float *send) {
    if (!b->pass_direct || b->spec.mode != ZERO_BUCKETS_SCATTER || b->mixed || b->wire16 || !needs_comm(b) ||
        bk->own_n == 0)
        return 0;
    const void *dst = elem(b->part, bk->part_pos, 4);
    return !zero__dev_is_device(b->e->dev, dst) && !zero__dev_is_device(b->e->dev, send);
}

/* Issue bucket k's collective.  Called with mu held, in bucket order. */
static zero_status launch(zero_buckets *b, uint32_t k) {
    zb_bucket *bk = &b->b[k];
    zero_status s = ZERO_OK;
    ZERO_TRACE_BUCKET_LAUNCH(&bk->tr, k, (bk->hi - bk->lo) * (b->wire16 ? 2 : 4));
    zero__jitter(ZERO_JITTER_LAUNCH);
    bk->launched = 1;
    if (k == 0) begin_pass(b); /* launches run in bucket order: bucket 0 opens every pass */
    if (!needs_comm(b)) { /* world 1: the local sum is already in place */
        notify_final(b, bk);
        return ZERO_OK;
    }
    if (bk->hi == bk->lo) return ZERO_OK;
    const size_t n = (size_t)(bk->hi - bk->lo);
    const size_t *counts = b->counts + (size_t)k * b->world;
    float *send = NULL;
    if (b->wire16) { /* (issue 14) fp32 gradients, 16-bit wire */
        if (bk->slot < 0 && (s = acquire_slot(b, k)) != ZERO_OK) goto out;
        void *w = b->slots[bk->slot].w16;
        float *src = b->spec.mode == ZERO_BUCKETS_SCATTER ? (float *)b->slots[bk->slot].buf : elem(b->flat, bk->lo, 4);
        /* the pre-factor scales the fp32 source in place: the SCATTER slot
         * is this bucket's, and in-place modes overwrite what they reduce
         * (SCATTER_INPLACE leaves the other ranks' blocks of flat scaled:
         * dead after the reduction, zero_bucket_spec) */
        if (b->wpre != 1.0f && (s = scale_f32(b, src, b->wpre, n)) != ZERO_OK) goto out;
        if ((s = convert(b, w, b->wire, src, ZERO_DTYPE_F32, n)) != ZERO_OK) goto out;
        bk->direct = 0;
        if (b->spec.mode == ZERO_BUCKETS_ALLREDUCE) /* every block summed as the reduce-scatter sums it */
            s = zero__iallreducev(b->comm, w, counts, b->wire, &bk->req);
        else
            s = zero__ireduce_scatterv(b->comm, w, elem(w, bk->own_lo - bk->lo, 2), counts, b->wire, &bk->req);
        goto out; /* the common tail: the error, or the FIFO */
    } else if (b->mixed || b->spec.mode == ZERO_BUCKETS_SCATTER) {
        /* SCATTER: the slot the host filled (no param touched it: zeros);
         * in-place 16-bit: a slot just for the fp32 staging */
        if (bk->slot < 0 && (s = acquire_slot(b, k)) != ZERO_OK) goto out;
        send = b->slots[bk->slot].f32;
        if (b->mixed) {
            const void *src = b->spec.mode == ZERO_BUCKETS_SCATTER ? b->slots[bk->slot].buf : elem(b->flat, bk->lo, b->es);
            if ((s = convert(b, send, ZERO_DTYPE_F32, src, b->spec.grad_dtype, n)) != ZERO_OK ||
                (s = scale_f32(b, send, b->pre, n)) != ZERO_OK)
                goto out;
        }
    } else {
        send = elem(b->flat, bk->lo, 4); /* fp32 in-place modes reduce the flat buffer itself */
    }
    /* 16-bit ALLREDUCE: a reduce-scatter in fp32 (the same sums, in the same
     * order, as stage 1/2/3 form), each owner rounds its block once, and the
     * flush all-gathers the 16-bit blocks: every rank then holds bitwise the
     * gradient the partitioned stages step with, and the fp32 traffic halves */
    bk->direct = direct_block(b, bk, send);
    /* fp32 ALLREDUCE: blocks are the layout's rank shares clipped to the
     * bucket (counts), as for every other mode, so each element is summed
     * in its owner's ring order whatever the bucket boundaries: stage 0 is
     * then bitwise stage 1/2/3 (issue 13; an even split of each bucket gave
     * elements other owners, hence another order, as soon as a bucket was
     * smaller than its group) */
    (void)n;
    if (b->spec.mode == ZERO_BUCKETS_ALLREDUCE && !b->mixed)
        s = zero__iallreducev(b->comm, send, counts, ZERO_DTYPE_F32, &bk->req);
    else if (bk->direct) /* window start: the partition block receives the sum (see direct_block) */
        s = zero__ireduce_scatterv(b->comm, send, elem(b->part, bk->part_pos, 4), counts, ZERO_DTYPE_F32, &bk->req);
    else /* in place: this rank's block of the bucket receives the sum */
        s = zero__ireduce_scatterv(b->comm, send, send + (bk->own_lo - bk->lo), counts, ZERO_DTYPE_F32, &bk->req);
out:
    if (s != ZERO_OK) {
        bk->req = NULL;
        if (b->sticky == ZERO_OK) b->sticky = s;
        return s;
    }
    ZERO_TRACE_BUCKET_INFLIGHT(&bk->tr);
    uint32_t pos = (b->fifo_head + b->fifo_len) % b->nb;
    b->fifo[pos] = k;
    b->fifo_len++;
    return ZERO_OK;
}

/* Launch every complete bucket that is next in order.  Without overlap,
 * in-place modes leave everything to flush; SCATTER still reduces as
 * buckets fill (synchronously) so its staging stays bounded: that is
 * DeepSpeed's overlap_comm=false behaviour too.  ("Synchronously" is in
 * stream order under ordered completion: the host does not wait, the GPU
 * does, see the top of the file.)  Called with mu held. */
/* With on_block_final, complete (in FIFO order, never waiting) the oldest
 * in-flight buckets whose collectives have already finished, so the plugin
 * hears about their blocks during backward; otherwise in-place modes would
 * complete everything at flush.  Only when the callback is set: the other
 * plugins keep the engine's original (lazy) behaviour.  Called with mu held. */
/* Test the oldest in-flight bucket (fifo_len > 0): one pass of the
 * communicator's progress.  *done when its reduction is finished; a
 * finished test frees the request, and its status waits in bk->reaped for
 * complete_oldest.  While not done, returns the test's status.  Called
 * with mu held. */
static zero_status test_oldest(zero_buckets *b, int *done) {
    zb_bucket *bk = &b->b[b->fifo[b->fifo_head]];
    *done = 1;
    if (!bk->req) return ZERO_OK;
    zero_status s = zero__comm_test(bk->req, done);
    if (!*done) return s;
    bk->req = NULL; /* a finished test freed it */
    bk->reaped = s;
    return ZERO_OK;
}

static zero_status reap_done(zero_buckets *b) {
    while (b->spec.on_block_final && b->fifo_len) {
        int done;
        zero_status s = test_oldest(b, &done);
        if (!done) return s; /* still in flight: nothing after it may complete first */
        if ((s = complete_oldest(b)) != ZERO_OK) return s;
    }
    return ZERO_OK;
}

/* SCATTER with overlap: every hook also drives the reductions in flight,
 * whose staging slots the next buckets need.  A test of the oldest one is
 * one non-blocking pass of the communicator's progress (MPI: every ring in
 * flight moves as far as its messages allow).  Where the progress thread
 * has a core of its own the pass finds little to do; where it shares one
 * with the compute (every core busy, or mpirun binding a rank to one core)
 * it runs only at scheduler ticks, and the slot for bucket k + 2 waited for
 * a bucket k that had barely moved (bench/overlap/README.md: exposed
 * fraction 0.855 -> 0.613 contiguous, 1.002 -> 0.514 round-robin at N = 2
 * on 2 cores).  The in-place modes (stage 0/1) keep theirs in flight until
 * the flush without blocking anything, so they are left to the progress
 * thread.  Nothing is completed here: a request the test finishes is
 * recorded as reaped and completed in FIFO order as before (the same
 * bits).  Not on ordered (stream-ordered device) completion, which never
 * waits per bucket.  Called with mu held. */
static void drive_inflight(zero_buckets *b) {
    if (!b->spec.overlap || b->spec.mode != ZERO_BUCKETS_SCATTER || b->ordered || !b->fifo_len) return;
    int done;
    (void)test_oldest(b, &done); /* a failure still in flight is the wait's to report */
}

static zero_status advance(zero_buckets *b) {
    if (!b->spec.overlap && b->spec.mode != ZERO_BUCKETS_SCATTER) return ZERO_OK;
    drive_inflight(b);
    zero_status s = reap_done(b);
    while (s == ZERO_OK && b->next_launch < b->nb && b->b[b->next_launch].pending == 0) {
        s = launch(b, b->next_launch++);
        if (s != ZERO_OK) return s;
        if (!b->spec.overlap)
            while (b->fifo_len) {
                if ((s = complete_oldest(b)) != ZERO_OK) return s;
            }
    }
    return s;
}

/* Param `index`'s name for messages (the host's name, not the index). */
static const char *param_name(const zero_buckets *b, uint32_t index) {
    const zero_engine *e = b->e;
    return e && e->params && index < e->nparams && e->params[index] && e->params[index]->name ? e->params[index]->name
                                                                                               : "?";
}

/* (1.3) A param of a group this set does not reduce (another
 * communicator's: an expert group, or the dense groups). */
static zero_status foreign(zero_buckets *b, uint32_t index) {
    return zero__error(b->e, ZERO_ERR_INVALID_ARGUMENT,
                       "bucket engine: param %u belongs to a group partitioned over another communicator; use the "
                       "bucket set created for svc->group_comm of its group", index);
}

/* Slot of param `index`; mu must be held in staged SCATTER mode. */
static zero_status slot_locked(zero_buckets *b, uint32_t index, void **slot) {
    const zb_param *p = &b->pm[index];
    if (b->in_set && !b->in_set[p->group]) return foreign(b, index);
    switch (b->spec.mode) {
    case ZERO_BUCKETS_ALLREDUCE:
    case ZERO_BUCKETS_SCATTER_INPLACE:
        *slot = elem(b->flat, p->offset, b->es);
        return ZERO_OK;
    default:
        if (!needs_comm(b)) {
            *slot = direct_partition_slot(b, index);
            return ZERO_OK;
        }
        break;
    }
    zb_bucket *bk = &b->b[p->first_bucket];
    if (bk->launched)
        return zero__error(b->e, ZERO_ERR_STATE,
                           "gradient slot of '%s' (param %u) requested after its bucket was reduced: its gradient was "
                           "already reported ready in this micro-step (backward run twice, or zero_grad_buffer after "
                           "zero_on_grad_ready, without zero_step in between)",
                           param_name(b, index), index);
    if (bk->slot < 0) {
        zero_status s = acquire_slot(b, p->first_bucket);
        if (s != ZERO_OK) return s;
    }
    *slot = elem(b->slots[bk->slot].buf, p->offset - bk->lo, b->es);
    return ZERO_OK;
}

zero_status zero__buckets_grad_slot(zero_buckets *b, uint32_t index, void **slot) {
    if (!b || !slot || index >= b->np) return ZERO_ERR_INVALID_ARGUMENT;
    void *f = NULL;
    zero_status s;
    if (!scatter_staged(b)) {
        s = slot_locked(b, index, &f);
    } else {
        pthread_mutex_lock(&b->mu);
        s = slot_locked(b, index, &f);
        pthread_mutex_unlock(&b->mu);
    }
    *slot = f;
    return s;
}

zero_status zero__buckets_ready(zero_buckets *b, uint32_t index, const void *src, zero_dtype dt) {
    if (!b || index >= b->np) return ZERO_ERR_INVALID_ARGUMENT;
    const zb_param *p = &b->pm[index];
    zero_status s = ZERO_OK;
    if (b->in_set && !b->in_set[p->group]) return foreign(b, index);
    zero__jitter(ZERO_JITTER_HOOK);
    if (src && p->numel) {
        void *slot;
        /* The slot cannot be recycled before this param is marked ready, so
         * the add itself runs outside the lock (params are disjoint). */
        if ((s = zero__buckets_grad_slot(b, index, &slot)) != ZERO_OK) return s;
        if ((s = add_into_dt(b, slot, b->spec.grad_dtype, src, dt, (size_t)p->numel)) != ZERO_OK) return s;
    }
    if (!is_reducing(b)) return ZERO_OK; /* accumulate only: nothing to count */
    zero__jitter(ZERO_JITTER_HOOK);
    pthread_mutex_lock(&b->mu);
    for (uint32_t k = p->first_bucket; k < p->first_bucket + p->nbuckets; k++) {
        if (b->b[k].pending == 0) {
            /* the core rejects real duplicates first: this is a micro-step
             * abandoned on an error (e.g. strict_grads) without a flush */
            s = zero__error(b->e, ZERO_ERR_STATE,
                            "'%s' (param %u) reported ready twice; the previous micro-step ended in an error (e.g. "
                            "strict_grads) and its reductions were never finished",
                            param_name(b, index), index);
            goto out;
        }
        ZERO_TRACE_BUCKET_FILL(&b->b[k].tr, k, b->b[k].pending == b->b[k].nparts);
        b->b[k].pending--;
    }
    s = advance(b);
out:
    pthread_mutex_unlock(&b->mu);
    return s;
}

/* 16-bit ALLREDUCE, second half: all-gather every bucket's rounded owner
 * blocks in place.  Issued at the flush, after every bucket's reduce-scatter
 * was launched and completed, in bucket order: the collective sequence is
 * the same on every rank whatever the hook timing.  Called with mu held. */
static zero_status gather_rounded_blocks(zero_buckets *b) {
    zero_comm_req **rq = calloc(b->nb ? b->nb : 1, sizeof *rq);
    if (!rq) return zero__error(b->e, ZERO_ERR_OUT_OF_MEMORY, "bucket engine: out of memory");
    zero_status s = ZERO_OK;
    uint32_t issued = 0;
    for (uint32_t k = 0; k < b->nb && s == ZERO_OK; k++) {
        zb_bucket *bk = &b->b[k];
        if (bk->hi == bk->lo) continue;
        s = zero__iallgatherv(b->comm, elem(b->flat, bk->own_lo, b->es), elem(b->flat, bk->lo, b->es),
                              b->counts + (size_t)k * b->world, b->spec.grad_dtype, &rq[issued]);
        if (s == ZERO_OK) issued++;
    }
    for (uint32_t i = 0; i < issued; i++) { /* every issued request is waited, even after an error */
        if (b->ordered) { /* (issue 35) the flush waits once, for the last (settle_tail) */
            zero_status w = retire(b, rq[i], b->nb);
            if (s == ZERO_OK) s = w;
            continue;
        }
        zero_status w = zero__comm_wait(rq[i]);
        if (s == ZERO_OK && w == ZERO_ERR_TIMEOUT)
            zero__error_context(b->e, w, "bucket engine: all-gather of rounded 16-bit blocks (bucket %u of %u)", i,
                                b->nb);
        if (s == ZERO_OK) s = w;
    }
    free(rq);
    return s;
}

zero_status zero__buckets_flush(zero_buckets *b) {
    if (!b) return ZERO_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    b->flush_wait = 0.0;
    zero_status s = ZERO_OK;
    if (is_reducing(b)) {
        /* Whatever is left (overlap off, or params the host never reported:
         * the core has already delivered those as zeros) goes now, still in
         * bucket order. */
        /* (1.3) buckets below this index were launched during backward:
         * waiting for them here is the exposed part of the flush */
        b->flush_first = b->next_launch;
        while (b->next_launch < b->nb && s == ZERO_OK) s = launch(b, b->next_launch++);
        while (b->fifo_len) {
            zero_status w = complete_oldest(b);
            if (s == ZERO_OK) s = w;
        }
        if (s == ZERO_OK && b->mixed && b->spec.mode == ZERO_BUCKETS_ALLREDUCE && needs_comm(b))
            s = gather_rounded_blocks(b);
        { /* ordered completion: the flush's one host wait, for all of the above */
            zero_status w = settle_tail(b);
            if (s == ZERO_OK) s = w;
        }
        b->flush_first = 0;
        b->passes++;
        atomic_fetch_add(&b->e->reduction_passes, 1);
    }
    for (uint32_t k = 0; k < b->nb; k++) {
        b->b[k].pending = b->b[k].nparts;
        b->b[k].launched = 0;
        if (b->b[k].slot >= 0) { /* filled but never reduced (accumulate-only step) */
            b->slots[b->b[k].slot].bucket = -1;
            b->b[k].slot = -1;
        }
    }
    b->next_launch = 0;
    /* the step thread owns e->exposed_comm_seconds; hooks accumulate here */
    b->e->exposed_comm_seconds += b->exposed;
    b->exposed_total += b->exposed;
    b->exposed = 0;
    if (s == ZERO_OK) s = b->sticky;
    b->sticky = ZERO_OK;
    pthread_mutex_unlock(&b->mu);
    return s;
}

void zero__buckets_destroy(zero_buckets *b) {
    if (!b) return;
    /* never free a buffer a collective may still write into */
    b->spec.on_block_final = NULL; /* draining for teardown is not a result */
    while (b->fifo_len) complete_oldest(b);
    settle_tail(b); /* ordered completion: the last collective must be done too */
    for (uint32_t i = 0; i < b->nslots; i++) {
        zero__dev_fence_wait(b->e->dev, b->slots[i].fence); /* the clear must be done before the memory goes */
        if ((void *)b->slots[i].f32 != b->slots[i].buf) zero__mem_free(b->e->mem, b->slots[i].f32);
        zero__mem_free(b->e->mem, b->slots[i].buf);
        zero__mem_free(b->e->mem, b->slots[i].w16);
    }
    free(b->slots);
    free(b->b);
    free(b->pm);
    free(b->counts);
    free(b->in_set);
    free(b->fifo);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

uint32_t zero__buckets_count(const zero_buckets *b) { return b ? b->nb : 0; }

uint64_t zero__buckets_staging_bytes(const zero_buckets *b) {
    if (!b) return 0;
    size_t per = (b->spec.mode == ZERO_BUCKETS_SCATTER ? b->es : 0) + (b->mixed ? sizeof(float) : 0) +
                 (b->wire16 ? 2 : 0);
    return b->stage_cap * per;
}

uint64_t zero__buckets_passes(const zero_buckets *b) { return b ? b->passes : 0; }
uint64_t zero__buckets_numel(const zero_buckets *b) { return b ? b->bucket_numel : 0; }
double zero__buckets_exposed_seconds(const zero_buckets *b) { return b ? b->exposed_total : 0.0; }
double zero__buckets_last_flush_wait(const zero_buckets *b) { return b ? b->flush_wait : 0.0; }
struct zero_engine *zero__buckets_engine(const zero_buckets *b) { return b ? b->e : NULL; }
