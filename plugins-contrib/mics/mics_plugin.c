/* mics: the plugin table, setup and teardown, gradient hand-in (checkpoints
 * and write_params: mics_ckpt.c; plan: mics_plan.c).  See mics.h for the
 * partitioning and README.md for what it trades. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mics.h"

#define WHO "mics"

static zero_status mics_create(const zero_services *svc, void **state) {
    zero_core *c = svc->core;
    const zero_run_config *rc = svc->config(c);
    if (rc->optim == ZERO_OPTIM_LAMB)
        return svc->error(c, ZERO_ERR_UNSUPPORTED,
                          WHO ": optimizer Lamb is not supported (its trust ratios are completed over the world, "
                              "where MiCS replicates every shard N/S times)");
    const int n = svc->comm_size(svc->comm_world(c));
    int64_t S = -1;
    int got = svc->cfg_int(c, "zero_optimization.mics_shard_size", &S);
    if (got < 0) return svc->error(c, ZERO_ERR_CONFIG, "zero_optimization.mics_shard_size: expected an integer");
    if (got == 0 || S <= 0) S = n; /* DeepSpeed's -1: one group of every rank (ZeRO-3's partitioning) */
    if (S > n || n % S != 0)
        return svc->error(c, ZERO_ERR_CONFIG,
                          "zero_optimization.mics_shard_size: got %lld, expected a divisor of the world size %d",
                          (long long)S, n);
    void *mem;
    zero_status st = zero_kit_create(svc, sizeof(mics), ZERO_KIT_REFUSE_PIPELINE, WHO, &mem);
    if (st != ZERO_OK) return st;
    mics *s = mem;
    s->svc = svc;
    s->c = c;
    s->rc = rc;
    s->nranks = n;
    s->rank = svc->comm_rank(svc->comm_world(c));
    s->S = (int)S;
    s->R = n / (int)S;
    s->shard_index = s->rank % s->S;
    zero_kit_dtypes(rc, &s->dtype, &s->esize, &s->gdtype, &s->gesize);
    *state = s;
    return ZERO_OK;
}

/* Where each param's elements live (mics_param): the kit's map of the
 * world layout, and what each shard-group member holds of it. */
static zero_status map_params(mics *s) {
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_pmap_params(&s->pmap, svc, (uint32_t)s->nranks, sizeof *s->params,
                                          (void **)&s->params, &s->nparams, WHO);
    if (st != ZERO_OK) return st;
    for (uint32_t i = 0; i < s->nparams; i++) {
        mics_param *mp = &s->params[i];
        mp->info = svc->param(s->c, i);
        mp->info->plugin_data = mp;
        mp->off = zero_kit_pmap_off(&s->pmap, i);
        mp->len = zero_kit_pmap_count(&s->pmap, i);
        mp->part_lo = zero_kit_pmap_part_lo(&s->pmap, i);
        if (!(mp->counts = calloc((size_t)s->S, sizeof *mp->counts)))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
        for (int j = 0; j < s->nranks; j++) mp->counts[j % s->S] += mp->len[j];
    }
    return ZERO_OK;
}

/* The shard's ranges in packed numbering (block k = world share of rank
 * shard_index + k*S) and this rank's own world-share ranges. */
static zero_status map_ranges(mics *s) {
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    const uint32_t ng = L->ngroups ? L->ngroups : 1;
    s->ranges = calloc((size_t)s->R * ng, sizeof *s->ranges);
    s->mine = calloc(ng, sizeof *s->mine);
    if (!s->ranges || !s->mine) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    if (!L->flat_numel) return ZERO_OK;
    for (int k = 0; k < s->R; k++) {
        const uint32_t j = (uint32_t)(s->shard_index + k * s->S);
        zero_owned_range *out = s->ranges + s->nranges;
        const uint32_t n = svc->owned_ranges(s->c, j, 0, L->flat_numel, out, ng);
        for (uint32_t r = 0; r < n; r++) out[r].part_lo += (uint64_t)k * s->part;
        s->nranges += n;
    }
    s->nmine = svc->owned_ranges(s->c, (uint32_t)s->rank, 0, L->flat_numel, s->mine, ng);
    return ZERO_OK;
}

static zero_status mics_params_done(void *state) {
    mics *s = state;
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    zero_comm *world = svc->comm_world(s->c);
    /* shard group: consecutive ranks (DeepSpeed's layout); replication group: same shard index */
    zero_status st = svc->comm_split(world, s->rank / s->S, s->rank, &s->shard_comm);
    if (st == ZERO_OK) st = svc->comm_split(world, s->shard_index, s->rank, &s->repl_comm);
    if (st != ZERO_OK) return st;
    s->part = L->part_numel;
    s->shard_numel = (uint64_t)s->R * s->part;
    s->pshard = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, s->shard_numel, s->esize);
    s->master = s->dtype == ZERO_DTYPE_F32
                    ? s->pshard
                    : zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, s->shard_numel, sizeof(float));
    s->grad = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, s->shard_numel, s->gesize);
    s->acc = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, s->part, s->gesize);
    s->nstate = svc->optim_state_count(s->c);
    int ok = s->pshard && s->master && s->grad && s->acc && s->nstate <= 4;
    for (uint32_t k = 0; ok && k < s->nstate; k++)
        ok = (s->state[k] =
                  zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, s->shard_numel, sizeof(float))) != NULL;
    if (!ok)
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": cannot allocate the shard (%llu elements)",
                          (unsigned long long)s->shard_numel);
    if ((st = map_params(s)) != ZERO_OK || (st = map_ranges(s)) != ZERO_OK) return st;
    if ((st = mics_place_params(s)) != ZERO_OK) return st;
    if ((st = mics_gather_setup(s)) != ZERO_OK) return st; /* persistent params start from the initial values */
    if ((void *)s->master != s->pshard) /* 16-bit model: the master is the shard widened (exact) */
        svc->convert(s->c, s->master, ZERO_DTYPE_F32, s->pshard, s->dtype, (size_t)s->shard_numel);

    /* Gradients: the core's world reduce-scatter into this rank's share,
     * every micro-step (stage 2's sums, hence stage0's bits). */
    const zero_run_config *rc = s->rc;
    s->contiguous = s->gdtype == s->dtype && rc->contiguous_gradients;
    zero_bucket_spec spec = zero_kit_bucket_spec(svc, ZERO_BUCKETS_SCATTER, NULL, s->contiguous, s->acc);
    svc->log(s->c, ZERO_LOG_INFO, WHO ": shard size %d, %d replica group(s); shard %llu elements per rank", s->S,
             s->R, (unsigned long long)s->shard_numel);
    return svc->buckets_create(s->c, &spec, &s->b);
}

/* Where the host adds p's gradient: the bucket slot itself, or (16-bit
 * model with fp32 accumulation, or contiguous_gradients off) a per-param
 * temporary in the model dtype that on_grad_ready hands to the bucket. */
static zero_status mics_grad_buffer(void *state, zero_param_info *p, void **buf) {
    mics *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(s->b, p->index, buf);
    return zero_kit_grad_tmp(s->svc, p, s->esize, &((mics_param *)p->plugin_data)->grad_tmp, buf, WHO);
}

static zero_status mics_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    mics *s = state;
    (void)stream;
    return zero_kit_grad_ready(s->svc, s->b, p, &((mics_param *)p->plugin_data)->grad_tmp);
}

static void mics_destroy(void *state) {
    mics *s = state;
    if (!s) return;
    const zero_services *svc = s->svc;
    zero_kit_gather_destroy(s->gather); /* waits for its all-gathers, logs how gathers were served */
    if (s->b) svc->buckets_destroy(s->b);
    if (s->params) {
        for (uint32_t i = 0; i < s->nparams; i++) {
            mics_param *mp = &s->params[i];
            svc->mem_free(s->c, mp->grad_tmp);
            free(mp->counts);
            if (mp->info) mp->info->plugin_data = NULL;
        }
        free(s->params);
    }
    zero_kit_pmap_free(&s->pmap);
    zero_kit_shard_free(svc, s->state, s->master, s->pshard);
    svc->mem_free(s->c, s->grad);
    svc->mem_free(s->c, s->acc);
    free(s->ranges);
    free(s->mine);
    if (s->shard_comm) svc->comm_free(s->shard_comm);
    if (s->repl_comm) svc->comm_free(s->repl_comm);
    free(s);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_PARTITIONS_PARAMS | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD,
    .name = "mics",
    .description = "MiCS: model states partitioned over shard groups of mics_shard_size ranks, replicated across "
                   "groups (contrib, built against the installed libzero)",
    .create = mics_create,
    .register_param = NULL,
    .params_done = mics_params_done,
    .gather = mics_gather,
    .release = mics_release,
    .grad_buffer = mics_grad_buffer,
    .on_grad_ready = mics_on_grad_ready,
    .step = mics_step,
    .save = mics_save,
    .load = mics_load,
    .write_params = mics_write_params,
    .sync = NULL,
    .destroy = mics_destroy,
    .set_phase = mics_set_phase,
    .plan = mics_plan,
};
