/* (1.1) Host-set hyper-parameters (zero_set_hparams) and their resolution
 * against the config, the scheduler and zero_set_group, for every optimizer
 * pass (services.c optim_step, partition_lamb.c) and zero_step_result.lr. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "struct_in.h"

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

/* ---- the step's values, checked before any weight moves ---------------- */

/* fp32 limits (the kernels' scalars are floats: zero_optim_scalars). */
#define HP_FLT_MAX 3.40282346638528859811704183484516925e+38
#define HP_FLT_MIN 1.17549435082228750796873653722224568e-38

static int uses_betas(zero_optim_kind k) {
    return k == ZERO_OPTIM_ADAMW || k == ZERO_OPTIM_ADAM || k == ZERO_OPTIM_LION || k == ZERO_OPTIM_LAMB;
}
static int uses_eps(zero_optim_kind k) {
    return k == ZERO_OPTIM_ADAMW || k == ZERO_OPTIM_ADAM || k == ZERO_OPTIM_ADAGRAD || k == ZERO_OPTIM_LAMB;
}

/* Which zero_set_hparams override (the group's own, else ALL_GROUPS) set
 * field `off` of group_id, or NULL: the resolution's order, read back. */
static const zero__hp_override *override_of(const struct zero_engine *e, int32_t group_id, size_t off) {
    const zero__hp_override *hit = NULL;
    for (uint32_t i = 0; i < e->nhp_over; i++) {
        const zero__hp_override *o = &e->hp_over[i];
        if (*(const double *)((const char *)o + off) < 0) continue;
        if (o->group == group_id) return o;
        if (o->group == ZERO_ALL_GROUPS) hit = o;
    }
    return hit;
}

/* Where group_id's lr for step t came from, for the message. */
static void lr_source(const struct zero_engine *e, int32_t group_id, uint64_t t, char *out, size_t n) {
    if (override_of(e, group_id, offsetof(zero__hp_override, lr))) {
        snprintf(out, n, "set by zero_set_hparams");
        return;
    }
    const zero__group_hp *hp = zero__group_hp_of(e, group_id);
    const double sched = zero__schedule_lr(e, t);
    /* e->lr is the schedule's value for the next step unless zero_load
     * restored it from a checkpoint */
    const int restored = !(e->lr == sched || (isnan(e->lr) && isnan(sched)));
    const char *sch = zero__config_scheduler(e->cfg);
    char base[160];
    if (restored)
        snprintf(base, sizeof base, "the lr %g restored by zero_load from a checkpoint", e->lr);
    else if (sch)
        snprintf(base, sizeof base, "scheduler %s's lr %g for step %llu", sch, e->lr, (unsigned long long)t);
    else
        snprintf(base, sizeof base, "optimizer.params.lr %g", e->lr);
    if (hp && hp->lr_scale != 1.0)
        snprintf(out, n, "%s times zero_set_group's lr_scale %g", base, hp->lr_scale);
    else
        snprintf(out, n, "%s", base);
}

zero_status zero__hp_check_step(struct zero_engine *e, uint64_t t) {
    const zero_layout *l = &e->layout.view;
    const zero_optim_kind k = e->rc->optim;
    for (uint32_t g = 0; g < (l->ngroups ? l->ngroups : 1); g++) {
        const int32_t gid = l->ngroups ? l->groups[g].group_id : 0;
        zero__hp hp;
        zero__hp_resolve(e, gid, t, &hp);
        const char *field = NULL, *want = NULL;
        double v = 0;
        char src[320] = "";
        double max_coeff = 10.0; /* Lamb steps by lr * trust ratio <= max_coeff (partition_lamb.c) */
        if (k == ZERO_OPTIM_LAMB) zero__config_double(e->cfg, "optimizer.params.max_coeff", &max_coeff);
        if (!(hp.lr >= 0 && hp.lr <= HP_FLT_MAX)) {
            field = "lr", v = hp.lr, want = "a number in [0, 3.40282e+38] (a finite 32-bit float)";
            lr_source(e, gid, t, src, sizeof src);
        } else if (k == ZERO_OPTIM_LAMB && !(hp.lr * max_coeff <= HP_FLT_MAX)) {
            field = "lr", v = hp.lr, want = "an lr whose product with optimizer.params.max_coeff is a finite 32-bit "
                                            "float (Lamb steps by lr * trust ratio)";
            lr_source(e, gid, t, src, sizeof src);
        } else if (!(hp.weight_decay >= 0 && hp.weight_decay <= HP_FLT_MAX &&
                     (double)(float)hp.lr * (double)(float)hp.weight_decay <= HP_FLT_MAX)) {
            field = "weight_decay", v = hp.weight_decay;
            want = "a number >= 0 whose product with the lr is a finite 32-bit float";
            const zero__group_hp *ghp = zero__group_hp_of(e, gid);
            snprintf(src, sizeof src, "%s, lr %g",
                     override_of(e, gid, offsetof(zero__hp_override, weight_decay)) ? "set by zero_set_hparams"
                     : ghp && ghp->weight_decay >= 0                                 ? "set by zero_set_group"
                                                                                      : "optimizer.params.weight_decay",
                     hp.lr);
        } else if (uses_betas(k) && !(hp.beta1 >= 0 && (float)hp.beta1 < 1.0f && hp.beta2 >= 0 &&
                                      (float)hp.beta2 < 1.0f)) {
            const int one = !(hp.beta1 >= 0 && (float)hp.beta1 < 1.0f);
            field = one ? "beta1" : "beta2", v = one ? hp.beta1 : hp.beta2;
            want = "a number in [0, 1) as a 32-bit float";
            snprintf(src, sizeof src, "%s",
                     override_of(e, gid, one ? offsetof(zero__hp_override, beta1) : offsetof(zero__hp_override, beta2))
                         ? "set by zero_set_hparams"
                         : "optimizer.params.betas or scheduler OneCycle's momentum");
        } else if (uses_eps(k) && !(hp.eps >= HP_FLT_MIN && hp.eps <= HP_FLT_MAX)) {
            field = "eps", v = hp.eps, want = "a number in [1.17549e-38, 3.40282e+38] (a normal 32-bit float)";
            snprintf(src, sizeof src, "%s",
                     override_of(e, gid, offsetof(zero__hp_override, eps)) ? "set by zero_set_hparams"
                                                                           : "optimizer.params.eps");
        }
        if (field)
            return zero__error(e, ZERO_ERR_STATE,
                               "zero_step: optimizer step %llu of param group %d (%s) would run with %s = %g (%s), "
                               "expected %s; the step was not taken and no weight changed",
                               (unsigned long long)t, (int)gid, zero__config_optim_name(k), field, v, src, want);
    }
    return ZERO_OK;
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
    char why[512];
    if (!zero__struct_in(&r, h, h->struct_size, sizeof r, "zero_hparams", why, sizeof why))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_hparams: %s", why);
    if (r.group < 0 && r.group != ZERO_ALL_GROUPS)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "zero_set_hparams: group %d is neither a group id (>= 0) "
                                                         "nor ZERO_ALL_GROUPS", (int)r.group);
    struct {
        const char *name;
        double v;
        double lo, hi; /* valid: lo <= v <= hi (betas: below 1 as a float) */
    } f[5] = {{"lr", r.lr, 0, HP_FLT_MAX},
              {"weight_decay", r.weight_decay, 0, HP_FLT_MAX},
              {"beta1", r.beta1, 0, 1},
              {"beta2", r.beta2, 0, 1},
              {"eps", r.eps, HP_FLT_MIN, HP_FLT_MAX}};
    /* the bounds are the fp32 kernels' (zero_optim_scalars): a beta that
     * rounds to 1 in fp32, or an lr above FLT_MAX, is Inf / NaN there */
    for (int k = 0; k < 5; k++) {
        double v = f[k].v;
        if (sentinel(v)) continue;
        const int beta = k == 2 || k == 3;
        if (!(v >= f[k].lo) || !(beta ? (float)v < 1.0f : v <= f[k].hi) || !isfinite(v))
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                               "zero_set_hparams: %s = %g is invalid (expected %s, or ZERO_HPARAM_KEEP / "
                               "ZERO_HPARAM_DEFAULT)",
                               f[k].name, v,
                               beta     ? "a number in [0, 1) as a 32-bit float"
                               : k == 4 ? "a number in [1.17549e-38, 3.40282e+38] (a normal 32-bit float)"
                                        : "a number in [0, 3.40282e+38] (a finite 32-bit float)");
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
