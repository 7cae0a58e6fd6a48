/* The boundary step every partitioning plugin shares (services grad_norm,
 * part_step, boundary_step, allgather_shares; contract in zero_plugin.h).
 *
 * Before these services each plugin (stage0/1/2/3, stage1-pp, offload)
 * carried its own copy of: sum of squares and overflow over its owned
 * ranges, one fp64 all-reduce, DeepSpeed's clip coefficient, the optimizer
 * loop over ranges with its indexing, and the in-place all-gather of the
 * updated shares.  They differed only in which arrays are indexed by flat
 * offset and which by partition offset, and in the communicator the norm is
 * agreed over; zero_part_step says exactly that.
 *
 * Summation order (bitwise repeatability, and stages agreeing with each
 * other): per range in range order, each range's sum of squares in the
 * kernel's fixed block order; the ranks' partial sums are then added by the
 * comm layer's deterministic all-reduce.  Thread-safety: call from the
 * engine's step thread only (the plugin's step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "engine.h"
#include "memory.h"
#include "optim.h"
#include "partition_step.h"
#include "optim_range.h"
#include "partition_lamb.h"
#include "part_step_args.h"
#include "trace.h"

static size_t dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4u : 2u; }

/* Element `flat` of range r, in an array indexed as `kind`. */
static size_t index_of(const zero_owned_range *r, zero_index_kind kind) {
    return kind == ZERO_INDEX_PART ? (size_t)r->part_lo : (size_t)r->flat_lo;
}

static zero_status check_ps(struct zero_engine *e, const zero_part_step *ps, const char *fn) {
    if (!ps || (ps->nranges && !ps->ranges))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: zero_part_step missing or without ranges", fn);
    if (ps->dtype != ZERO_DTYPE_F32 && ps->dtype != ZERO_DTYPE_BF16 && ps->dtype != ZERO_DTYPE_F16)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: unknown model dtype %d", fn, (int)ps->dtype);
    const zero_dtype gdt = zero__ps_grad_dtype(ps);
    if (gdt != ZERO_DTYPE_F32 && gdt != ps->dtype)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: gradient dtype %d is neither fp32 nor the model dtype %d",
                           fn, (int)gdt, (int)ps->dtype);
    return ZERO_OK;
}

/* (issue 31) The step thread's state around one plugin step (partition_step.h):
 * thread-local because the services reach the engine only through
 * zero_core, and grad_norm runs on the engine's step thread by contract. */
static _Thread_local const struct zero_engine *step_drop; /* read this engine's norm as an overflow */
static _Thread_local int step_norm_ran;
static _Thread_local char step_nonfinite[600];

void zero__ps_step_begin(const struct zero_engine *e, int drop) {
    step_drop = drop ? e : NULL;
    step_norm_ran = 0;
    step_nonfinite[0] = '\0';
}

int zero__ps_step_end(void) {
    const int ran = step_norm_ran;
    step_drop = NULL;
    step_norm_ran = 0;
    return ran;
}

const char *zero__ps_nonfinite_text(void) { return step_nonfinite; }

/* Index of the first Inf/NaN among n host values of dtype dt at g, or n:
 * an all-ones exponent, for fp32, bf16 and fp16 alike. */
static size_t first_nonfinite(const void *g, zero_dtype dt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == ZERO_DTYPE_F32) {
            uint32_t b;
            memcpy(&b, (const char *)g + 4 * i, 4);
            if ((b & 0x7f800000u) == 0x7f800000u) return i;
        } else {
            uint16_t h;
            const uint16_t m = dt == ZERO_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
            memcpy(&h, (const char *)g + 2 * i, 2);
            if ((h & m) == m) return i;
        }
    }
    return n;
}

/* The param that holds flat element x, or nparams (padding). */
static uint32_t param_at(const struct zero_engine *e, uint64_t x) {
    for (uint32_t i = 0; i < e->nparams; i++) {
        const zero_param_info *p = &e->params[i]->info;
        if (x >= p->flat_offset && x < p->flat_offset + p->numel) return i;
    }
    return e->nparams;
}

/* Where this rank's first non-finite gradient value is, as {param + 1,
 * element} ({0, 0}: none here): piece k of the norm pass was flagged; its
 * values are scanned when the host can read them (else the element is
 * UINT64_MAX and the param the first one of the piece).  Overflow path
 * only. */
static void locate_nonfinite(const struct zero_engine *e, const zero__norm_piece *pcs, const uint64_t *flat_lo,
                             const int *flags, size_t npc, uint64_t where[2]) {
    where[0] = where[1] = 0;
    for (size_t k = 0; k < npc; k++) {
        if (!flags[k]) continue;
        uint64_t x = flat_lo[k], elem = UINT64_MAX;
        const int host = !zero__dev_is_device(e->dev, pcs[k].x);
        if (host) {
            const size_t i = first_nonfinite(pcs[k].x, pcs[k].dt, pcs[k].n);
            if (i < pcs[k].n) x += i;
        }
        const uint32_t p = param_at(e, x);
        if (host && p < e->nparams) elem = x - e->params[p]->info.flat_offset;
        where[0] = p < e->nparams ? (uint64_t)p + 1 : UINT64_MAX;
        where[1] = elem;
        return;
    }
}

/* What each rank tells the others about its first non-finite value: the
 * param's NAME travels (a pipeline's stages hold different params, so an
 * index means nothing to another stage). */
typedef struct nf_record {
    uint64_t found;   /* 0: none on this rank */
    uint64_t element; /* in the param, UINT64_MAX: unknown (device memory) */
    char name[48];    /* cut to fit */
} nf_record;

/* Every rank learns which rank(s) found a non-finite gradient, and where
 * (issue 31: the skip used to be agreed without saying who).  One small
 * all-gather, on the overflow path only; the text goes to step_nonfinite,
 * the same on every rank. */
static zero_status name_nonfinite(struct zero_engine *e, zero_comm *comm, const uint64_t mine[2]) {
    const int n = zero__comm_size(comm);
    nf_record me, *all = malloc((size_t)(n > 0 ? n : 1) * sizeof *all);
    if (!all) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "grad_norm: out of memory");
    memset(&me, 0, sizeof me);
    me.found = mine[0] != 0;
    me.element = mine[1];
    snprintf(me.name, sizeof me.name, "%s",
             mine[0] && mine[0] != UINT64_MAX && mine[0] - 1 < e->nparams ? e->params[mine[0] - 1]->name : "padding");
    zero_status st = zero__allgather_bytes(comm, &me, all, sizeof me);
    if (st != ZERO_OK) {
        free(all);
        return st;
    }
    char *t = step_nonfinite;
    const size_t cap = sizeof step_nonfinite;
    size_t off = (size_t)snprintf(t, cap, "non-finite gradient (Inf/NaN) found on");
    int listed = 0, found = 0;
    for (int r = 0; r < n; r++) {
        if (!all[r].found) continue;
        found++;
        if (listed == 4 || off >= cap - 1) continue;
        listed++;
        all[r].name[sizeof all[r].name - 1] = '\0';
        off += (size_t)snprintf(t + off, cap - off, "%s rank %d (param '%s'", listed > 1 ? "," : "", r, all[r].name);
        if (off < cap && all[r].element != UINT64_MAX)
            off += (size_t)snprintf(t + off, cap - off, ", element %llu", (unsigned long long)all[r].element);
        if (off < cap) off += (size_t)snprintf(t + off, cap - off, ")");
    }
    if (found > listed && off < cap) off += (size_t)snprintf(t + off, cap - off, " and %d more rank(s)", found - listed);
    if (!found && off < cap) /* a norm that overflowed fp64 without an Inf/NaN element */
        snprintf(t + off, cap - off, " no rank: the sum of squares overflowed");
    else if (off < cap)
        snprintf(t + off, cap - off, " (each rank checks its own part of the reduced gradient: the value may come from "
                 "any rank's backward)");
    free(all);
    return ZERO_OK;
}

static zero_status grad_norm_impl(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                 zero_grad_norm *out) {
    struct zero_engine *e = zero__engine_of(c);
    zero_status st = check_ps(e, ps, "grad_norm");
    if (st != ZERO_OK) return st;
    if (!ctx || !out) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "grad_norm: ctx or out is NULL");
    const zero_dtype gdt = zero__ps_grad_dtype(ps);
    const size_t es = dtype_size(gdt);
    /* replicated (stage 0): every DP rank holds the same values.  Each rank
     * contributes the sum of squares of its own layout shares, exactly the
     * ranges a partitioned stage sums, so the partial sums and their fp64
     * all-reduce are bitwise the partitioned stages' and so are the norm and
     * the clip coefficient (issue 13: rank 0 used to sum the whole model
     * alone, which rounds differently and moved the norm's last bit at some
     * N, enough to change every parameter once clipping is active). */
    const zero_layout *L = &e->layout.view;
    zero_owned_range *own = NULL;
    if (ps->replicated && (own = malloc((L->ngroups ? L->ngroups : 1) * sizeof *own)) == NULL)
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "grad_norm: out of memory");
    double agg[2] = {0.0, 0.0};
    /* Collect every piece first, then sum them all with one host wait on a
     * device (zero__dev_norm_pieces), adding the sums in piece order as
     * before (same bits). */
    size_t npc = 0, cap = 0;
    zero__norm_piece *pcs = NULL;
    uint64_t *pflat = NULL; /* each piece's first flat element, to name a non-finite value's param */
    for (uint32_t i = 0; i < ps->nranges; i++) {
        const zero_owned_range *r = &ps->ranges[i];
        /* replicated: this rank's layout shares of the range, in flat order */
        uint32_t npieces = 1;
        const zero_owned_range *pieces = r;
        if (ps->replicated) {
            npieces = r->flat_hi > r->flat_lo ? zero__layout_owned(L, L->rank, r->flat_lo, r->flat_hi, own, L->ngroups)
                                              : 0;
            pieces = own;
        }
        for (uint32_t k = 0; k < npieces; k++) {
            const size_t at = index_of(r, ps->grad_index) + (size_t)(pieces[k].flat_lo - r->flat_lo);
            const char *g = (const char *)ps->grad + at * es;
            size_t n = (size_t)(pieces[k].flat_hi - pieces[k].flat_lo);
            if (npc == cap) {
                cap = cap ? 2 * cap : 16;
                zero__norm_piece *np = realloc(pcs, cap * sizeof *np);
                if (np) pcs = np;
                uint64_t *nf = np ? realloc(pflat, cap * sizeof *nf) : NULL;
                if (nf) pflat = nf;
                if (!np || !nf) {
                    free(pcs), free(pflat), free(own);
                    return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "grad_norm: out of memory");
                }
            }
            pflat[npc] = pieces[k].flat_lo;
            pcs[npc++] = (zero__norm_piece){g, gdt, n};
        }
    }
    free(own);
    double *sums = malloc((npc ? npc : 1) * sizeof *sums);
    int *flags = malloc((npc ? npc : 1) * sizeof *flags);
    if (!sums || !flags) {
        free(pcs), free(pflat), free(sums), free(flags);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "grad_norm: out of memory");
    }
    st = zero__dev_norm_pieces(e->dev, pcs, npc, sums, flags);
    if (st != ZERO_OK) {
        /* as the sumsq/nonfinite services do: report, and read as an
         * overflow so that the step is skipped rather than taken on garbage */
        zero__error(e, st, "grad_norm on the %s device failed: %s", e->dev ? e->dev->ops->name : "host",
                    zero__dev_error(e->dev));
        zero__log(e, ZERO_LOG_ERROR, "%s", e->last_error);
        agg[0] = (double)NAN, agg[1] = 1.0;
    } else {
        for (size_t i = 0; i < npc; i++) {
            agg[0] += sums[i];
            if (flags[i]) agg[1] = 1.0;
        }
    }
    /* (issue 31) where this rank's first Inf/NaN is: only when it has one */
    uint64_t where[2] = {0, 0};
    if (st == ZERO_OK && agg[1] > 0) locate_nonfinite(e, pcs, pflat, flags, npc, where);
    free(pcs), free(pflat), free(sums), free(flags);
    /* (issue 31) zero_step dropping a window it refused: an overflow on
     * every rank (each asks for it: the verdict was agreed before) */
    const int drop = step_drop == e;
    step_norm_ran = 1;
    if (drop) agg[1] = 1.0;
    zero_comm *comm = ps->norm_comm ? ps->norm_comm : (e->global ? e->global : e->world);
    if ((st = zero__allreduce(comm, agg, 2, ZERO_DTYPE_F64, ZERO_OP_SUM)) != ZERO_OK) return st;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    if (agg[1] > 0 || !isfinite(agg[0])) {
        /* every rank takes this branch (the verdict is the all-reduce's), so
         * naming the ranks is one more collective on the overflow path only */
        if (!drop && (st = name_nonfinite(e, comm, where)) != ZERO_OK) return st;
        out->overflow = 1;
        out->norm = -1.0;
        out->clip_coef = 1.0;
        out->grad_mul = 0.0f;
        return ZERO_OK;
    }
    /* Norm of the mean, unscaled gradient, and DeepSpeed's clip
     * coefficient (clip_grad_norm_: max_norm / (total_norm + 1e-6), applied
     * only when it is < 1). */
    const double unscale = ctx->grad_divisor * ctx->loss_scale;
    out->norm = sqrt(agg[0]) / unscale;
    out->clip_coef = (ctx->grad_clip > 0 && out->norm > ctx->grad_clip) ? ctx->grad_clip / (out->norm + 1e-6) : 1.0;
    out->grad_mul = (float)(out->clip_coef / unscale);
    return ZERO_OK;
}

/* (1.3) The step's tiles: each range cut at layout-group boundaries (a
 * group's share is stepped on its own) and at max_group_size elements.
 * Tile t of range o starts at o->flat_lo + t * cap within its group piece;
 * tile_next() advances [*lo, *hi) to the next tile of [lo0, hi0), 0 at the
 * end.  Pure. */
static int tile_next(const zero_layout *L, uint64_t cap, uint64_t hi0, uint64_t *lo, uint64_t *hi) {
    if (*hi >= hi0) return 0;
    *lo = *hi;
    int g = zero__layout_group_of(L, *lo);
    uint64_t end = hi0;
    if (g >= 0 && L->groups[g].flat_begin + L->groups[g].numel < end) end = L->groups[g].flat_begin + L->groups[g].numel;
    if (cap && end - *lo > cap) end = *lo + cap;
    *hi = end;
    return 1;
}

static zero_status part_step_impl(zero_core *c, const zero_part_step *ps, float grad_mul) {
    struct zero_engine *e = zero__engine_of(c);
    zero_status st = check_ps(e, ps, "part_step");
    if (st != ZERO_OK) return st;
    if (e->rc->optim == ZERO_OPTIM_LAMB) return zero__lamb_part_step(e, ps, grad_mul);
    const size_t es = dtype_size(ps->dtype);
    const zero_dtype gdt = zero__ps_grad_dtype(ps);
    const zero_layout *L = &e->layout.view;
    uint32_t nstate = zero__optim_state_count(e->rc->optim, e->rc->momentum);
    /* (1.3) Tiled step (DeepSpeed PR 2079): with 16-bit gradients and
     * either expert groups or max_group_size, each tile's gradient is
     * upcast, unscaled and clipped (x grad_mul) into ONE fp32 temporary of
     * the largest tile's size, then stepped; at most one tile's fp32
     * gradient exists.  Otherwise the fused kernel widens 16-bit
     * gradients on the fly and no temporary is needed: the tiles are then
     * only the order of work.  Same values either way: the kernel forms
     * (float)g * grad_mul too, and x * 1.0f is exact. */
    const uint64_t cap = e->max_group_size;
    uint64_t largest = 0, total = 0;
    for (uint32_t i = 0; i < ps->nranges; i++) {
        uint64_t lo = 0, hi = ps->ranges[i].flat_lo;
        while (tile_next(L, cap, ps->ranges[i].flat_hi, &lo, &hi))
            if (hi - lo > largest) largest = hi - lo;
        total += ps->ranges[i].flat_hi - ps->ranges[i].flat_lo;
    }
    const int upcast = gdt != ZERO_DTYPE_F32 && (cap || e->group_comms) && largest;
    float *tile = NULL;
    if (upcast) {
        const int on_dev = zero__dev_is_device(e->dev, ps->grad);
        tile = zero__mem_alloc(e->mem, on_dev ? ZERO_TIER_DEVICE : ZERO_TIER_HOST, ZERO_MEM_OTHER,
                               (size_t)largest * sizeof(float));
        if (!tile)
            return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "part_step: no memory for the fp32 tile (%llu elements)",
                               (unsigned long long)largest);
        if ((uint64_t)largest * sizeof(float) > e->step_fp32_peak_bytes) e->step_fp32_peak_bytes = largest * sizeof(float);
    }
    if (largest > e->step_tile_max_numel) e->step_tile_max_numel = largest;
    e->step_untiled_numel = total;
    for (uint32_t i = 0; i < ps->nranges && st == ZERO_OK; i++) {
        const zero_owned_range *o = &ps->ranges[i];
        uint64_t lo = 0, hi = o->flat_lo;
        while (st == ZERO_OK && tile_next(L, cap, o->flat_hi, &lo, &hi)) {
            const size_t d = (size_t)(lo - o->flat_lo), n = (size_t)(hi - lo);
            zero_opt_range r;
            memset(&r, 0, sizeof r);
            r.struct_size = sizeof r;
            r.flat_lo = lo;
            r.flat_hi = hi;
            r.master = ps->master + index_of(o, ps->master_index) + d;
            for (uint32_t k = 0; k < nstate && k < 4; k++)
                r.state[k] = ps->state[k] ? ps->state[k] + o->part_lo + d : NULL;
            r.grad = (const char *)ps->grad + (index_of(o, ps->grad_index) + d) * dtype_size(gdt);
            r.param_out = ps->param_out ? (char *)ps->param_out + (index_of(o, ps->param_out_index) + d) * es : NULL;
            r.param_out_dtype = ps->dtype;
            r.grad_mul = grad_mul;
            r.grad_dtype = gdt;
            if (tile) { /* upcast, unscale and clip this tile only */
                if ((st = zero__dev_convert(e->dev, tile, ZERO_DTYPE_F32, r.grad, gdt, n)) == ZERO_OK)
                    st = zero__dev_scale(e->dev, tile, grad_mul, n);
                if (st != ZERO_OK) {
                    st = zero__error(e, st, "part_step: upcasting a gradient tile failed: %s", zero__dev_error(e->dev));
                    break;
                }
                r.grad = tile;
                r.grad_dtype = ZERO_DTYPE_F32;
                r.grad_mul = 1.0f;
            }
            ZERO_TRACE_SCOPE("optim.range", "optim", "elements", hi - lo, "flat_lo", lo);
            st = zero__optim_range_step(c, &r);
        }
    }
    zero__mem_free(e->mem, tile);
    return st;
}

zero_status zero__svc_boundary_step(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                    zero_step_report *rep) {
    ZERO_TRACE_SCOPE("boundary_step", "optim", NULL, 0, NULL, 0);
    zero_grad_norm gn;
    zero_status st = zero__svc_grad_norm(c, ps, ctx, &gn);
    if (st != ZERO_OK) return st;
    if (rep) {
        rep->overflow = gn.overflow;
        rep->grad_norm = gn.norm;
    }
    if (gn.overflow) return ZERO_OK; /* every rank skips: the verdict came from one all-reduce */
    return zero__svc_part_step(c, ps, gn.grad_mul);
}

static zero_status allgather_shares_impl(zero_core *c, zero_comm *comm, void *flat, zero_dtype dt) {
    struct zero_engine *e = zero__engine_of(c);
    const zero_layout *L = &e->layout.view;
    if (!comm) comm = e->world;
    if (!e->params_frozen) return zero__error(e, ZERO_ERR_STATE, "allgather_shares before params_done");
    if (L->world <= 1 || !L->ngroups) return ZERO_OK;
    const size_t es = zero__dtype_size(dt);
    if (!es) return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "allgather_shares: unknown dtype %d", (int)dt);
    size_t *counts = malloc((size_t)L->ngroups * L->world * sizeof *counts);
    zero_comm_req **reqs = calloc(L->ngroups, sizeof *reqs);
    if (!counts || !reqs) {
        free(counts);
        free(reqs);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "allgather_shares: out of memory");
    }
    zero_status st = ZERO_OK;
    uint32_t issued = 0;
    for (uint32_t g = 0; g < L->ngroups && st == ZERO_OK; g++) {
        const zero_layout_group *lg = &L->groups[g];
        if (lg->numel == 0) continue;
        /* (1.3) an expert group's shares live on its own communicator */
        zero_comm *gc = e->group_comms && e->group_comms[g] ? e->group_comms[g] : comm;
        const uint32_t gw = L->group_world ? L->group_world[g] : L->world;
        const uint32_t gr = L->group_rank ? L->group_rank[g] : L->rank;
        if (gw <= 1) continue;
        size_t *cnt = counts + (size_t)g * L->world; /* live while the request is in flight */
        for (uint32_t r = 0; r < gw; r++) cnt[r] = (size_t)lg->part_numel;
        char *base = (char *)flat + (size_t)lg->flat_begin * es;
        st = zero__iallgatherv(gc, base + (size_t)gr * lg->part_numel * es, base, cnt, dt, &reqs[issued]);
        if (st == ZERO_OK) issued++;
    }
    for (uint32_t i = 0; i < issued; i++) {
        zero_status w = zero__comm_wait(reqs[i]);
        if (st == ZERO_OK) st = w;
    }
    free(counts);
    free(reqs);
    return st;
}

/* (1.3) The three services as zero_step phases (step_timing.h): counted
 * when the plugin's step calls them directly or through boundary_step. */
zero_status zero__svc_grad_norm(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                zero_grad_norm *out) {
    struct zero_engine *e = zero__engine_of(c);
    zero__span sp = zero__phase_begin(e);
    zero_status st = grad_norm_impl(c, ps, ctx, out);
    zero__phase_end(e, sp, ZERO__PH_NORM);
    return st;
}

zero_status zero__svc_part_step(zero_core *c, const zero_part_step *ps, float grad_mul) {
    struct zero_engine *e = zero__engine_of(c);
    zero__span sp = zero__phase_begin(e);
    zero_status st = part_step_impl(c, ps, grad_mul);
    zero__phase_end(e, sp, ZERO__PH_OPTIM);
    return st;
}

zero_status zero__svc_allgather_shares(zero_core *c, zero_comm *comm, void *flat, zero_dtype dt) {
    struct zero_engine *e = zero__engine_of(c);
    zero__span sp = zero__phase_begin(e);
    zero_status st = allgather_shares_impl(c, comm, flat, dt);
    zero__phase_end(e, sp, ZERO__PH_GATHER);
    return st;
}
