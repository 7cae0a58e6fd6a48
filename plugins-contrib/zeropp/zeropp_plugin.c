/* zeropp: the plugin table, configuration, setup and teardown (checkpoints
 * and write_params: zeropp_ckpt.c; plan: zeropp_plan.c).
 * See zeropp.h for the strategy and README.md for what it trades. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"
#define ZO "zero_optimization."

/* A boolean key: absent = 0. */
static int flag(const zero_services *svc, const char *key, int *out, zero_status *st) {
    *out = 0;
    int got = svc->cfg_bool(svc->core, key, out);
    if (got < 0) *st = svc->error(svc->core, ZERO_ERR_CONFIG, "%s: expected true or false", key);
    return got >= 0;
}

static zero_status zpp_create(const zero_services *svc, void **state) {
    zero_core *c = svc->core;
    const zero_run_config *rc = svc->config(c);
    zero_status st = ZERO_OK;
    int qw, qg;
    if (!flag(svc, ZO "zero_quantized_weights", &qw, &st) || !flag(svc, ZO "zero_quantized_gradients", &qg, &st))
        return st;
    int64_t P = 1, bits = 8;
    int ef = 1, hier = 1; /* error feedback on by default: README "Loss" (0.02 nats over 100 steps) */
    if (svc->cfg_bool(c, ZO "zero_quantized_gradients_error_feedback", &ef) < 0)
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_error_feedback: expected true or false");
    if (svc->cfg_bool(c, ZO "zero_quantized_gradients_hierarchical", &hier) < 0)
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_hierarchical: expected true or false");
    if (svc->cfg_int(c, ZO "zero_hpz_partition_size", &P) < 0 || P < 1)
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_hpz_partition_size: expected an integer >= 1");
    if (svc->cfg_int(c, ZO "zero_quantized_gradients_bits", &bits) < 0 || (bits != 8 && bits != 4))
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_bits: expected 8 or 4");
    int64_t wblock = 256, gblock = 64;
    if (svc->cfg_int(c, ZO "zero_quantized_weights_block", &wblock) < 0 || wblock < 1 || wblock > 65536)
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_weights_block: expected an integer 1..65536");
    if (svc->cfg_int(c, ZO "zero_quantized_gradients_block", &gblock) < 0 || gblock < 1 || gblock > 65536)
        return svc->error(c, ZERO_ERR_CONFIG, ZO "zero_quantized_gradients_block: expected an integer 1..65536");
    void *mem;
    if ((st = zero_kit_create(svc, sizeof(zpp), ZERO_KIT_REFUSE_LAMB | ZERO_KIT_REFUSE_PIPELINE, WHO, &mem)) != ZERO_OK)
        return st;
    zpp *s = mem;
    s->svc = svc;
    s->c = c;
    s->rc = rc;
    s->nranks = svc->comm_size(svc->comm_world(c));
    s->rank = svc->comm_rank(svc->comm_world(c));
    s->qw = qw;
    s->qg = qg;
    s->qg_bits = (int)bits;
    s->qw_block = (uint32_t)wblock;
    s->qg_block = (uint32_t)gblock;
    s->qg_ef = ef;
    s->qg_hier = hier;
    s->P = (int)P;
    zero_kit_dtypes(rc, &s->dtype, &s->esize, &s->gdtype, &s->gesize);
    *state = s;
    return ZERO_OK;
}

/* hpZ: the node (services comm_split_node), then groups of P inside it. */
static zero_status setup_hpz(zpp *s) {
    const zero_services *svc = s->svc;
    zero_status st = svc->comm_split_node(svc->comm_world(s->c), &s->node);
    if (st != ZERO_OK) return st;
    const int ns = svc->comm_size(s->node), nr = svc->comm_rank(s->node);
    if (s->P > ns || ns % s->P != 0)
        return svc->error(s->c, ZERO_ERR_CONFIG,
                          ZO "zero_hpz_partition_size: got %d, expected a divisor of the %d ranks of this node "
                             "(nodes: the ranks on one machine, or ZERO_RANKS_PER_NODE)",
                          s->P, ns);
    if ((st = svc->comm_split(s->node, nr / s->P, nr, &s->hcomm)) != ZERO_OK) return st;
    s->hrank = svc->comm_rank(s->hcomm);
    return ZERO_OK;
}

/* Where each param's elements live: the kit's map of the world layout,
 * and the hpZ secondary chunks. */
static zero_status map_params(zpp *s) {
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_pmap_params(&s->pmap, svc, (uint32_t)s->nranks, sizeof *s->params,
                                          (void **)&s->params, &s->nparams, WHO);
    if (st != ZERO_OK) return st;
    for (uint32_t i = 0; i < s->nparams; i++) {
        zpp_param *mp = &s->params[i];
        zero_param_info *p = svc->param(s->c, i);
        mp->info = p;
        p->plugin_data = mp;
        mp->counts = zero_kit_pmap_count(&s->pmap, i);
        mp->part_lo = zero_kit_pmap_part_lo(&s->pmap, i);
        mp->off_me = (size_t)zero_kit_pmap_off(&s->pmap, i)[s->rank];
        if (!(mp->hcounts = calloc((size_t)s->P, sizeof *mp->hcounts)))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
        /* hpZ secondary chunks: P near-equal contiguous pieces */
        size_t at = 0;
        for (int h = 0; h < s->P; h++) {
            mp->hcounts[h] = (size_t)(p->numel / (uint64_t)s->P) + ((uint64_t)h < p->numel % (uint64_t)s->P);
            if (h == s->hrank) mp->hoff_me = at;
            at += mp->hcounts[h];
        }
        if (s->P > 1 &&
            !(mp->sec = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, mp->hcounts[s->hrank], s->esize)))
            return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory for the secondary partition");
        /* the share's initial values */
        if (p->init_data && mp->counts[s->rank])
            svc->mem_copy(s->c, (char *)s->pshard + mp->part_lo[s->rank] * s->esize,
                          (const char *)p->init_data + mp->off_me * s->esize, mp->counts[s->rank] * s->esize);
    }
    return ZERO_OK;
}

static zero_status zpp_params_done(void *state) {
    zpp *s = state;
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    zero_status st = svc->comm_split(svc->comm_world(s->c), 0, s->rank, &s->gcomm);
    if (st == ZERO_OK && s->P > 1) st = setup_hpz(s);
    if (st != ZERO_OK) return st;
    s->part = L->part_numel;
    s->pshard = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, s->part, s->esize);
    s->master = s->dtype == ZERO_DTYPE_F32
                    ? s->pshard
                    : zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_MASTER, s->part, sizeof(float));
    s->acc = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, s->part, s->gesize);
    s->nstate = svc->optim_state_count(s->c);
    const uint32_t ng = L->ngroups ? L->ngroups : 1;
    s->mine = calloc(ng, sizeof *s->mine);
    int ok = s->pshard && s->master && s->acc && s->mine && s->nstate <= 4;
    for (uint32_t k = 0; ok && k < s->nstate; k++)
        ok = (s->state[k] = zero_kit_alloc_n(s->svc, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, s->part, sizeof(float))) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": cannot allocate the share");
    s->nmine = L->flat_numel ? svc->owned_ranges(s->c, (uint32_t)s->rank, 0, L->flat_numel, s->mine, ng) : 0;
    if ((st = map_params(s)) != ZERO_OK) return st;
    if ((st = zpp_gather_setup(s)) != ZERO_OK) return st; /* persistent params start from the initial values */
    if ((void *)s->master != s->pshard)
        svc->convert(s->c, s->master, ZERO_DTYPE_F32, s->pshard, s->dtype, (size_t)s->part);
    if ((st = zpp_grads_setup(s)) != ZERO_OK) return st;
    svc->log(s->c, ZERO_LOG_INFO,
             WHO ": qwZ %s (block %u), qgZ %s (int%d, block %u, %s), hpZ %s (secondary group of %d)", s->qw ? "on" : "off",
             s->qw_block, s->qg ? "on" : "off", s->qg_bits, s->qg_block,
             !s->qg ? "-" : s->qg_hier ? "hierarchical" : "flat", s->P > 1 ? "on" : "off", s->P);
    return ZERO_OK;
}

static void log_counts(zpp *s) {
    zero_comm_stats g = {sizeof g, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0}, h = g;
    if (s->gcomm) s->svc->comm_counters(s->gcomm, &g);
    if (s->hcomm) s->svc->comm_counters(s->hcomm, &h);
    s->svc->log(s->c, ZERO_LOG_INFO,
                WHO ": rank %d parameter gathers: world %llu calls %llu bytes, hpZ group %llu calls %llu bytes; "
                    "order agreements (the gather engine's, over the world) %llu calls %llu bytes",
                s->rank, (unsigned long long)g.allgather_calls, (unsigned long long)g.bytes_gathered,
                (unsigned long long)h.allgather_calls, (unsigned long long)h.bytes_gathered,
                (unsigned long long)g.allreduce_calls, (unsigned long long)g.bytes_reduced);
}

static void zpp_destroy(void *state) {
    zpp *s = state;
    if (!s) return;
    const zero_services *svc = s->svc;
    zero_kit_gather_destroy(s->gather); /* waits for its all-gathers, logs how gathers were served */
    log_counts(s);
    zpp_qgz_log(s);
    zpp_grads_free(s);
    if (s->params) {
        for (uint32_t i = 0; i < s->nparams; i++) {
            zpp_param *mp = &s->params[i];
            svc->mem_free(s->c, mp->grad_tmp);
            svc->mem_free(s->c, mp->sec);
            free(mp->hcounts);
            if (mp->info) mp->info->plugin_data = NULL;
        }
        free(s->params);
    }
    zero_kit_pmap_free(&s->pmap);
    zero_kit_shard_free(svc, s->state, s->master, s->pshard);
    svc->mem_free(s->c, s->acc);
    free(s->mine);
    if (s->hcomm) svc->comm_free(s->hcomm);
    if (s->node) svc->comm_free(s->node);
    if (s->gcomm) svc->comm_free(s->gcomm);
    free(s);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_PARTITIONS_PARAMS | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD,
    .name = "zeropp",
    .description = "ZeRO++: stage 3 with quantized weight gathers (qwZ), quantized gradient reduce-scatter (qgZ) "
                   "and an intra-node secondary parameter partition (hpZ) (contrib, built against the installed "
                   "libzero)",
    .create = zpp_create,
    .register_param = NULL,
    .params_done = zpp_params_done,
    .gather = zpp_gather,
    .release = zpp_release,
    .grad_buffer = zpp_grad_buffer,
    .on_grad_ready = zpp_on_grad_ready,
    .step = zpp_step,
    .save = zpp_save,
    .load = zpp_load,
    .write_params = zpp_write_params,
    .sync = NULL,
    .destroy = zpp_destroy,
    .set_phase = zpp_set_phase,
    .plan = zpp_plan,
};
