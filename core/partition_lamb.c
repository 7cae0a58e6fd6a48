/* LAMB over partitions (part_step / boundary_step with optimizer.type Lamb).
 *
 * LAMB scales each parameter's Adam-style update by a trust ratio
 * ||w|| / ||u|| over the WHOLE parameter (DeepSpeed FusedLamb,
 * csrc/lamb/fused_lamb_cuda_kernel.cu):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   u = (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay * w
 *   trust = ||w|| / ||u|| when both are non-zero, else 1, clamped to
 *           [min_coeff, max_coeff] (optimizer.params, defaults 0.01 and 10)
 *   w = w - lr * trust * u
 * With ZeRO a parameter may straddle two ranks' partitions, so no rank can
 * compute its norms alone: pass 1 updates m and v and accumulates, per
 * parameter, this rank's partial ||w||^2 and ||u||^2 (fp64); ONE all-reduce
 * of the 2 x nparams array over the data-parallel group (comm_world: the
 * ranks that partition this layout; with a pipeline, one stage's params)
 * completes every norm (with expert groups, 1.12: an expert group's over
 * its expert-data-parallel group, complete_norms); pass 2 recomputes u
 * from the stored m, v and the unchanged w (the same float expression, so
 * bitwise the same u) and applies it.  A replicated plugin (stage 0) holds
 * every element on every rank: only one rank of each param's group (world
 * rank 0; an expert group's first expert-DP rank) contributes, so the sums
 * count each element once.
 * Alignment padding between params belongs to no parameter and is left
 * alone.  Host arrays only (the CUDA path has no LAMB kernel yet).
 * Engine step thread only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "engine.h"
#include "optim.h"
#include "part_step_args.h"
#include "partition_lamb.h"

enum { LAMB_TILE = 1024 };

typedef struct lamb_piece {
    uint32_t param;
    uint64_t lo, hi;            /* flat range of the piece */
    const zero_owned_range *r;  /* the owned range holding it */
} lamb_piece;

static size_t at(const zero_owned_range *r, zero_index_kind k, uint64_t flat) {
    return (size_t)((k == ZERO_INDEX_PART ? r->part_lo : r->flat_lo) + (flat - r->flat_lo));
}

/* The update direction u of one element (float math shared by both passes). */
static inline float lamb_u(const zero_optim_scalars *s, float m, float v, float w) {
    return (m * s->bc1) / (sqrtf(v) * s->bc2_sqrt + s->eps) + s->weight_decay * w;
}

static zero_optim_scalars scalars_of(struct zero_engine *e, const zero_param_info *p) {
    const zero_run_config *rc = e->rc;
    int g = zero__layout_group_of(&e->layout.view, p->flat_offset);
    zero__hp hp; /* scheduler, zero_set_group, zero_set_hparams (OneCycle may cycle the betas) */
    zero__hp_resolve(e, g >= 0 ? e->layout.view.groups[g].group_id : 0, e->global_step + 1, &hp);
    return zero__optim_scalars(ZERO_OPTIM_LAMB, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, rc->momentum,
                               rc->nesterov, rc->bias_correction, e->global_step + 1);
}

/* Pieces of params inside this rank's ranges, in range then flat order. */
static lamb_piece *pieces_of(struct zero_engine *e, const zero_part_step *ps, uint32_t *count) {
    const zero_layout *L = &e->layout.view;
    uint32_t cap = 16, n = 0;
    lamb_piece *v = malloc(cap * sizeof *v);
    for (uint32_t i = 0; v && i < ps->nranges; i++) {
        const zero_owned_range *r = &ps->ranges[i];
        for (uint32_t j = 0; j < L->nparams; j++) {
            const zero_param_info *p = &e->params[L->param_order[j]]->info;
            uint64_t lo = p->flat_offset > r->flat_lo ? p->flat_offset : r->flat_lo;
            uint64_t hi = p->flat_offset + p->numel < r->flat_hi ? p->flat_offset + p->numel : r->flat_hi;
            if (lo >= hi) continue;
            if (n == cap) {
                lamb_piece *nv = realloc(v, (cap *= 2) * sizeof *v);
                if (!nv) {
                    free(v);
                    return NULL;
                }
                v = nv;
            }
            v[n++] = (lamb_piece){p->index, lo, hi, r};
        }
    }
    *count = n;
    return v;
}

/* Complete every parameter's norms: sum the ranks' partial squares over
 * the ranks that partition it.  Dense params: one all-reduce over the
 * data-parallel group.  (libzero 1.12) An expert group's params: over its
 * expert-data-parallel communicator, where every rank holds the same
 * experts -- the other expert-DP groups hold other experts at the same
 * param indices, so their partials must not be added in; one all-reduce
 * per expert layout group, in layout order (every rank has every layout
 * group: the same sequence of collectives on each communicator). */
static zero_status complete_norms(struct zero_engine *e, double *sums, int replicated) {
    const size_t n2 = 2 * (size_t)e->nparams;
    const zero_layout *L = &e->layout.view;
    /* A replicated plugin (stage 0) holds whole params on every rank: one
     * copy of each counts, world rank 0's for the dense ones */
    const int dense_mine = !replicated || zero__comm_rank(e->world) == 0;
    if (!e->group_comms) {
        if (!dense_mine) memset(sums, 0, n2 * sizeof *sums);
        return zero__allreduce(e->world, sums, n2, ZERO_DTYPE_F64, ZERO_OP_SUM);
    }
    double *local = malloc((n2 ? n2 : 1) * sizeof *local);
    double *part = malloc((n2 ? n2 : 1) * sizeof *part);
    if (!local || !part) {
        free(local);
        free(part);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "LAMB: out of memory");
    }
    memcpy(local, sums, n2 * sizeof *sums);
    if (!dense_mine) memset(sums, 0, n2 * sizeof *sums);
    for (uint32_t g = 0; g < L->ngroups && g < e->ngroup_comms; g++) /* the world's sum: dense params only */
        for (uint32_t j = 0; e->group_comms[g] && j < L->groups[g].nparams; j++) {
            const uint32_t i = L->param_order[L->groups[g].first_param + j];
            sums[2 * i] = sums[2 * i + 1] = 0.0;
        }
    zero_status st = zero__allreduce(e->world, sums, n2, ZERO_DTYPE_F64, ZERO_OP_SUM);
    for (uint32_t g = 0; st == ZERO_OK && g < L->ngroups && g < e->ngroup_comms; g++) {
        if (!e->group_comms[g]) continue;
        const uint32_t first = L->groups[g].first_param, np = L->groups[g].nparams;
        /* replicated: the copy counted is the expert-DP group's first
         * rank's (world rank 0 holds only its own experts) */
        const int mine = !replicated || zero__comm_rank(e->group_comms[g]) == 0;
        for (uint32_t j = 0; j < np; j++) {
            const uint32_t i = L->param_order[first + j];
            part[2 * j] = mine ? local[2 * i] : 0.0;
            part[2 * j + 1] = mine ? local[2 * i + 1] : 0.0;
        }
        if (np) st = zero__allreduce(e->group_comms[g], part, 2 * (size_t)np, ZERO_DTYPE_F64, ZERO_OP_SUM);
        for (uint32_t j = 0; st == ZERO_OK && j < np; j++) {
            const uint32_t i = L->param_order[first + j];
            sums[2 * i] = part[2 * j];
            sums[2 * i + 1] = part[2 * j + 1];
        }
    }
    free(local);
    free(part);
    return st;
}

zero_status zero__lamb_part_step(struct zero_engine *e, const zero_part_step *ps, float grad_mul) {
    const size_t es = ps->dtype == ZERO_DTYPE_F32 ? 4 : 2;
    const zero_dtype gdt = zero__ps_grad_dtype(ps);
    const size_t ges = gdt == ZERO_DTYPE_F32 ? 4 : 2;
    if (ps->nranges && (zero__dev_is_device(e->dev, ps->master) || zero__dev_is_device(e->dev, ps->grad)))
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "optimizer.type Lamb: device-resident optimizer arrays are not supported yet (the LAMB "
                           "passes run on the host)");
    double max_coeff = 10.0, min_coeff = 0.01;
    zero__config_double(e->cfg, "optimizer.params.max_coeff", &max_coeff);
    zero__config_double(e->cfg, "optimizer.params.min_coeff", &min_coeff);
    uint32_t npieces = 0;
    lamb_piece *pc = pieces_of(e, ps, &npieces);
    double *sums = calloc(2 * (size_t)(e->nparams ? e->nparams : 1), sizeof *sums);
    if (!pc || !sums) {
        free(pc);
        free(sums);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "LAMB: out of memory");
    }
    float tile[LAMB_TILE];
    /* pass 1: moments and this rank's partial norms */
    for (uint32_t k = 0; k < npieces; k++) {
        const lamb_piece *q = &pc[k];
        const zero_optim_scalars s = scalars_of(e, &e->params[q->param]->info);
        float *w = ps->master + at(q->r, ps->master_index, q->lo);
        float *m = ps->state[0] + at(q->r, ZERO_INDEX_PART, q->lo), *v = ps->state[1] + at(q->r, ZERO_INDEX_PART, q->lo);
        const char *g = (const char *)ps->grad + at(q->r, ps->grad_index, q->lo) * ges;
        double wsq = 0.0, usq = 0.0;
        for (size_t i = 0, n = (size_t)(q->hi - q->lo); i < n; i += LAMB_TILE) {
            size_t c = n - i < LAMB_TILE ? n - i : LAMB_TILE;
            zero__convert(tile, ZERO_DTYPE_F32, g + i * ges, gdt, c);
            for (size_t j = 0; j < c; j++) {
                float gj = tile[j] * grad_mul;
                float mj = s.beta1 * m[i + j] + (1.0f - s.beta1) * gj;
                float vj = s.beta2 * v[i + j] + (1.0f - s.beta2) * (gj * gj);
                m[i + j] = mj;
                v[i + j] = vj;
                float u = lamb_u(&s, mj, vj, w[i + j]);
                wsq += (double)w[i + j] * (double)w[i + j];
                usq += (double)u * (double)u;
            }
        }
        sums[2 * q->param] += wsq;
        sums[2 * q->param + 1] += usq;
    }
    zero_status st = complete_norms(e, sums, ps->replicated);
    /* pass 2: apply with each parameter's trust ratio */
    for (uint32_t k = 0; st == ZERO_OK && k < npieces; k++) {
        const lamb_piece *q = &pc[k];
        const zero_optim_scalars s = scalars_of(e, &e->params[q->param]->info);
        double wn = sqrt(sums[2 * q->param]), un = sqrt(sums[2 * q->param + 1]);
        double trust = (wn > 0 && un > 0) ? wn / un : 1.0;
        trust = trust < min_coeff ? min_coeff : trust > max_coeff ? max_coeff : trust;
        const float step = (float)(s.lr * trust);
        float *w = ps->master + at(q->r, ps->master_index, q->lo);
        const float *m = ps->state[0] + at(q->r, ZERO_INDEX_PART, q->lo);
        const float *v = ps->state[1] + at(q->r, ZERO_INDEX_PART, q->lo);
        size_t n = (size_t)(q->hi - q->lo);
        for (size_t j = 0; j < n; j++) w[j] -= step * lamb_u(&s, m[j], v[j], w[j]);
        if (ps->param_out)
            zero__convert((char *)ps->param_out + at(q->r, ps->param_out_index, q->lo) * es, ps->dtype, w,
                          ZERO_DTYPE_F32, n);
    }
    free(pc);
    free(sums);
    return st;
}
