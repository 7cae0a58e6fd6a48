/* (1.1) Host-set hyper-parameters (zero_set_hparams) and their resolution
 * against the config, the scheduler and zero_set_group, for every optimizer
 * pass (services.c optim_step, partition_lamb.c) and zero_step_result.lr. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* The overrides zero_set_group stored (api.c); here rather than in api.c
 * because params.c, experts.c and the checkpoint loader read them too, and
 * none of them should depend on the host entry points (tools/check-loops.py). */
const zero__group_hp *zero__group_hp_of(const struct zero_engine *e, int32_t group_id) {
    for (uint32_t i = 0; i < e->ngroups_hp; i++)
        if (e->groups[i].group_id == group_id) return &e->groups[i];
    return NULL;
}

/* Resolution order, field by field: the group's own zero_set_hparams value,
 * then an ALL_GROUPS value, then the config / scheduler (lr: scheduled lr
 * times the group's lr_scale; weight decay: zero_set_group's, else the
 * config's; betas: the config's or OneCycle's cycled momentum). */
void zero__hp_resolve(const struct zero_engine *e, int32_t group_id, uint64_t t, zero__hp *out) {
    const zero_run_config *rc = e->rc;
    const zero__group_hp *hp = zero__group_hp_of(e, group_id);
    out->lr = e->lr * (hp ? hp->lr_scale : 1.0);
    out->weight_decay = hp && hp->weight_decay >= 0 ? hp->weight_decay : rc->weight_decay;
    zero__schedule_betas(e, t, &out->beta1, &out->beta2);
    out->eps = rc->eps;
    const zero__hp_override *all = NULL, *mine = NULL;
    for (uint32_t i = 0; i < e->nhp_over; i++) {
        if (e->hp_over[i].group == ZERO_ALL_GROUPS) all = &e->hp_over[i];
        else if (e->hp_over[i].group == group_id) mine = &e->hp_over[i];
    }
    const zero__hp_override *src[2] = {all, mine}; /* later wins */
    for (int k = 0; k < 2; k++) {
        const zero__hp_override *o = src[k];
        if (!o) continue;
        if (o->lr >= 0) out->lr = o->lr;
        if (o->weight_decay >= 0) out->weight_decay = o->weight_decay;
        if (o->beta1 >= 0) out->beta1 = o->beta1;
        if (o->beta2 >= 0) out->beta2 = o->beta2;
        if (o->eps >= 0) out->eps = o->eps;
    }
}

static int sentinel(double v) { return v == ZERO_HPARAM_KEEP || v == ZERO_HPARAM_DEFAULT; }

/* Apply one field of a request to a stored override (-1: none). */
static void apply(double *slot, double v) {
    if (v == ZERO_HPARAM_KEEP) return;
    *slot = v == ZERO_HPARAM_DEFAULT ? -1.0 : v;
}

zero_status zero_set_hparams(zero_engine *e, const zero_hparams *h) {
    if (!e) return ZERO_ERR_INVALID_ARGUMENT;
    if (!h || h->struct_size < offsetof(zero_hparams, lr) + sizeof(double))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_hparams: NULL or too small zero_hparams "
                                                         "(use ZERO_HPARAMS_INIT)");
    zero_hparams r = ZERO_HPARAMS_INIT;
    memcpy(&r, h, h->struct_size < sizeof r ? h->struct_size : sizeof r);
    if (r.group < 0 && r.group != ZERO_ALL_GROUPS)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_hparams: group %d is neither a group id (>= 0) "
                                                         "nor ZERO_ALL_GROUPS", (int)r.group);
    struct {
        const char *name;
        double v;
        double lo, hi; /* valid: lo <= v < hi */
        int open_lo;   /* lo excluded */
    } f[5] = {{"lr", r.lr, 0, HUGE_VAL, 0},
              {"weight_decay", r.weight_decay, 0, HUGE_VAL, 0},
              {"beta1", r.beta1, 0, 1, 0},
              {"beta2", r.beta2, 0, 1, 0},
              {"eps", r.eps, 0, HUGE_VAL, 1}};
    for (int k = 0; k < 5; k++) {
        double v = f[k].v;
        if (sentinel(v)) continue;
        if (!(v >= f[k].lo) || !(v < f[k].hi) || (f[k].open_lo && v == f[k].lo) || !isfinite(v))
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                               "zero_set_hparams: %s = %g is invalid (expected %s, or ZERO_HPARAM_KEEP / "
                               "ZERO_HPARAM_DEFAULT)",
                               f[k].name, v,
                               k == 2 || k == 3 ? "a number in [0, 1)" : k == 4 ? "a number > 0" : "a number >= 0");
    }
    zero__hp_override *o = NULL;
    for (uint32_t i = 0; i < e->nhp_over; i++)
        if (e->hp_over[i].group == r.group) o = &e->hp_over[i];
    if (!o) {
        zero__hp_override *n = realloc(e->hp_over, (e->nhp_over + 1) * sizeof *n);
        if (!n) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "zero_set_hparams: out of memory");
        e->hp_over = n;
        o = &e->hp_over[e->nhp_over++];
        *o = (zero__hp_override){r.group, -1.0, -1.0, -1.0, -1.0, -1.0};
    }
    apply(&o->lr, r.lr);
    apply(&o->weight_decay, r.weight_decay);
    apply(&o->beta1, r.beta1);
    apply(&o->beta2, r.beta2);
    apply(&o->eps, r.eps);
    return ZERO_OK;
}
