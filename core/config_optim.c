/* optimizer{type, params, param_groups} and scheduler{type, params}, with
 * DeepSpeed's semantics: type names are case-insensitive for optimizers
 * (DeepSpeed lower-cases them), "Adam" means decoupled weight decay unless
 * adam_w_mode is false (deepspeed/runtime/engine.py), and each optimizer's
 * defaults are those of the DeepSpeed/torch class it stands for. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "near_name.h"

enum { T_ADAM = 1, T_ADAMW = 2, T_SGD = 4, T_LION = 8, T_ADAGRAD = 16, T_LAMB = 32, T_ONEBIT = 64, T_ALL = 127 };

typedef struct optim_type {
    const char *name; /* canonical spelling */
    unsigned bit;
    zero_optim_kind kind;
    double lr, beta1, beta2, eps; /* the class's defaults */
} optim_type;

static const optim_type optim_types[] = {
    {"Adam", T_ADAM, ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8}, /* FusedAdam, adam_w_mode=True */
    {"AdamW", T_ADAMW, ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8},
    {"SGD", T_SGD, ZERO_OPTIM_SGD, 1e-3, 0.0, 0.0, 0.0},        /* torch.optim.SGD */
    {"Lion", T_LION, ZERO_OPTIM_LION, 1e-3, 0.9, 0.999, 0.0},   /* FusedLion */
    {"Adagrad", T_ADAGRAD, ZERO_OPTIM_ADAGRAD, 1e-2, 0.0, 0.0, 1e-10},
    {"Lamb", T_LAMB, ZERO_OPTIM_LAMB, 1e-3, 0.9, 0.999, 1e-8},  /* FusedLamb */
    /* deepspeed/runtime/fp16/onebit/adam.py: Adam without bias correction,
     * weight decay added to the update (decoupled: p -= lr * (m / (sqrt(v)
     * + eps) + wd * p)), the momentum all-reduced 1-bit compressed after
     * freeze_step.  Only the contrib plugin "onebit" runs it
     * (zero__config_optim_plugin); the Adam part is the core's AdamW. */
    {"OneBitAdam", T_ONEBIT, ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8},
};
#define N_OPTIM_TYPES (sizeof optim_types / sizeof optim_types[0])

const char *zero__config_optim_name(zero_optim_kind k) {
    switch (k) {
    case ZERO_OPTIM_ADAMW: return "AdamW";
    case ZERO_OPTIM_ADAM: return "Adam (adam_w_mode false, L2 decay)";
    case ZERO_OPTIM_SGD: return "SGD";
    case ZERO_OPTIM_LION: return "Lion";
    case ZERO_OPTIM_ADAGRAD: return "Adagrad";
    case ZERO_OPTIM_LAMB: return "Lamb";
    }
    return "unknown";
}

/* DeepSpeed optimizers that libzero refuses: their point is compressed
 * communication (or muP scaling), which a plain fp32 Adam would silently
 * replace by a different algorithm.  (OneBitAdam is implemented, by the
 * contrib plugin "onebit" only.) */
typedef struct refused_type {
    const char *name;
    const char *why; /* what is missing and what to run instead */
} refused_type;
static const refused_type refused_types[] = {
    {"ZeroOneAdam",
     "0/1 Adam (Lu et al. 2022) needs local steps -- parameters that differ between ranks until a compressed "
     "sync -- and a variance refreshed on an exponentially spaced schedule, which the plugin \"onebit\" does not "
     "do; run \"OneBitAdam\" with the plugin \"onebit\" (1-bit compressed momentum after a full-precision "
     "warm-up, one compressed all-reduce per step)"},
    {"OneBitLamb",
     "1-bit LAMB (Li et al. 2021) needs LAMB's per-layer trust ratios frozen at the end of the warm-up and "
     "rescaled from the fresh variance after it, which the plugin \"onebit\" does not do; run \"OneBitAdam\" "
     "with the plugin \"onebit\" for compressed communication, or \"Lamb\" uncompressed"},
    {"MuAdam", "the muP optimizers are out of scope"},
    {"MuAdamW", "the muP optimizers are out of scope"},
    {"MuSGD", "the muP optimizers are out of scope"},
};

typedef struct param_key {
    const char *name;
    unsigned types; /* optimizer types that use it */
} param_key;

static const param_key param_keys[] = {
    {"lr", T_ALL},
    {"weight_decay", T_ALL},
    {"betas", T_ADAM | T_ADAMW | T_LION | T_LAMB | T_ONEBIT},
    {"eps", T_ADAM | T_ADAMW | T_ADAGRAD | T_LAMB | T_ONEBIT},
    {"adam_w_mode", T_ADAM | T_ADAMW},
    {"bias_correction", T_ADAM | T_ADAMW | T_LAMB | T_ONEBIT},
    {"amsgrad", T_ADAM | T_ADAMW | T_LAMB | T_ONEBIT},
    {"torch_adam", T_ADAM | T_ADAMW},
    {"momentum", T_SGD},
    {"nesterov", T_SGD},
    {"dampening", T_SGD},
    {"max_coeff", T_LAMB},
    {"min_coeff", T_LAMB},
    {"max_grad_norm", T_LAMB},
    {"lr_decay", T_ADAGRAD},
    {"initial_accumulator_value", T_ADAGRAD},
    {"freeze_step", T_ONEBIT},       /* read by the plugin (cfg_int) */
    {"cuda_aware", T_ONEBIT},        /* DeepSpeed's transport choices: libzero's comm layer decides */
    {"comm_backend_name", T_ONEBIT},
    {NULL, 0}};

#define OP "optimizer.params"

/* Warn about params the chosen type does not use, or nobody knows. */
static void check_params(zero__cfg_ctx *ctx, const json_t *params, const optim_type *t) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)params, key, v) {
        const param_key *k = param_keys;
        while (k->name && strcmp(k->name, key) != 0) ++k;
        const char *near = NULL; /* (1.7.5) the nearest known key, for a misspelt one */
        for (const param_key *c = param_keys; !k->name && c->name; ++c) near = zero__nearer(key, c->name, near);
        if (!k->name && near)
            zero__cfg_warn(ctx, OP ".%s: unknown key, ignored (did you mean %s?)", key, near);
        else if (!k->name)
            zero__cfg_warn(ctx, OP ".%s: unknown key, ignored", key);
        else if (!(k->types & t->bit))
            zero__cfg_warn(ctx, OP ".%s: not used by optimizer type %s, ignored", key, t->name);
    }
}

static int parse_betas(zero__cfg_ctx *ctx, const json_t *params, zero_run_config *rc) {
    const json_t *b = json_object_get(params, "betas");
    char val[96];
    double b0, b1;
    if (!b || json_is_null(b)) return 0;
    if (json_is_string(b) && strcmp(json_string_value(b), "auto") == 0) {
        zero__cfg_warn(ctx, OP ".betas: \"auto\" is resolved by the Hugging Face Trainer or the DeepSpeed "
                            "autotuner, not by libzero; using the default");
        return 0;
    }
    if (!json_is_array(b) || json_array_size(b) != 2 || !json_is_number(json_array_get(b, 0)) ||
        !json_is_number(json_array_get(b, 1)))
        goto bad;
    b0 = json_number_value(json_array_get(b, 0));
    b1 = json_number_value(json_array_get(b, 1));
    if (!(b0 >= 0.0 && b0 < 1.0 && b1 >= 0.0 && b1 < 1.0)) goto bad;
    if ((float)b0 >= 1.0f || (float)b1 >= 1.0f) { /* the kernels run with fp32 betas */
        zero__cfg_describe(b, val, sizeof val);
        return zero__cfg_fail(ctx, OP ".betas: got %s, expected two numbers in [0, 1) as 32-bit floats: %.17g "
                                      "rounds to 1 in fp32, where the moment never forgets",
                              val, (float)b0 >= 1.0f ? b0 : b1);
    }
    rc->beta1 = b0;
    rc->beta2 = b1;
    return 0;
bad:
    zero__cfg_describe(b, val, sizeof val);
    return zero__cfg_fail(ctx, OP ".betas: got %s, expected two numbers in [0, 1)", val);
}

static const zero__cfg_key group_keys[] = {{"lr", ZERO__KEY_USED, NULL, NULL},
                                           {"lr_scale", ZERO__KEY_USED, NULL, NULL},
                                           {"weight_decay", ZERO__KEY_USED, NULL, NULL},
                                           {NULL, 0, NULL, NULL}};

/* optimizer.param_groups (libzero extension): per-group overrides, by group id. */
static int parse_groups(zero__cfg_ctx *ctx, const json_t *opt) {
    const json_t *g = json_object_get(opt, "param_groups");
    size_t i;
    json_t *item;
    if (!g || json_is_null(g)) return 0;
    if (!json_is_array(g)) {
        char val[96];
        zero__cfg_describe(g, val, sizeof val);
        return zero__cfg_fail(ctx, "optimizer.param_groups: got %s, expected an array of objects", val);
    }
    json_array_foreach(g, i, item) {
        char path[64], val[96];
        double d;
        snprintf(path, sizeof path, "optimizer.param_groups[%zu]", i);
        if (!json_is_object(item)) {
            zero__cfg_describe(item, val, sizeof val);
            return zero__cfg_fail(ctx, "%s: got %s, expected an object", path, val);
        }
        zero__cfg_check_keys(ctx, item, path, group_keys);
        if (zero__cfg_num(ctx, item, path, "lr", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0", &d) < 0 ||
            zero__cfg_num(ctx, item, path, "lr_scale", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0", &d) < 0 ||
            zero__cfg_num(ctx, item, path, "weight_decay", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0", &d) < 0)
            return -1;
    }
    return 0;
}

static const zero__cfg_key optimizer_keys[] = {{"type", ZERO__KEY_USED, NULL, NULL},
                                               {"params", ZERO__KEY_USED, NULL, NULL},
                                               {"param_groups", ZERO__KEY_USED, NULL, NULL},
                                               {"legacy_fusion", ZERO__KEY_IGNORED, "false", NULL},
                                               {NULL, 0, NULL, NULL}};

static void set_type_defaults(zero_run_config *rc, const optim_type *t) {
    rc->optim = t->kind;
    rc->lr = t->lr;
    rc->beta1 = t->beta1;
    rc->beta2 = t->beta2;
    rc->eps = t->eps;
    rc->weight_decay = 0.0;
    rc->momentum = 0.0;
    rc->nesterov = 0;
    rc->bias_correction = 1;
}

int zero__cfg_parse_optimizer(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc) {
    const json_t *opt, *params, *tv;
    const optim_type *t = NULL;
    const char *type = NULL;
    int32_t flag;
    double d;
    size_t i;

    /* No optimizer section: DeepSpeed would use the client's optimizer;
     * libzero owns the optimizer, so it runs DeepSpeed's default Adam. */
    set_type_defaults(rc, &optim_types[0]);
    if (zero__cfg_obj(ctx, root, "", "optimizer", &opt) < 0) return -1;
    if (!opt) return 0;
    zero__cfg_check_keys(ctx, opt, "optimizer", optimizer_keys);

    tv = json_object_get(opt, "type");
    if (!tv || json_is_null(tv))
        return zero__cfg_fail(ctx, "optimizer.type: missing, expected one of Adam, AdamW, SGD, Lion, Adagrad, Lamb, "
                                   "OneBitAdam");
    if (zero__cfg_str(ctx, opt, "optimizer", "type", &type) < 0) return -1;
    for (i = 0; i < sizeof refused_types / sizeof refused_types[0]; ++i)
        if (strcasecmp(type, refused_types[i].name) == 0)
            return zero__cfg_fail(ctx, "optimizer.type: got \"%s\", expected one of Adam, AdamW, SGD, Lion, Adagrad, "
                                       "Lamb, OneBitAdam: %s is not implemented by libzero (%s)",
                                  type, refused_types[i].name, refused_types[i].why);
    for (i = 0; i < N_OPTIM_TYPES; ++i)
        if (strcasecmp(type, optim_types[i].name) == 0) t = &optim_types[i];
    if (!t)
        return zero__cfg_fail(ctx, "optimizer.type: got \"%s\", expected one of Adam, AdamW, SGD, Lion, Adagrad, "
                                   "Lamb, OneBitAdam (case-insensitive)",
                              type);
    set_type_defaults(rc, t);
    if (t->bit == T_ONEBIT) rc->bias_correction = 0; /* OnebitAdam's update never bias-corrects */

    if (zero__cfg_obj(ctx, opt, "optimizer", "params", &params) < 0) return -1;
    if (params) {
        check_params(ctx, params, t);
        if (zero__cfg_num(ctx, params, OP, "lr", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0", &rc->lr) < 0 ||
            zero__cfg_num(ctx, params, OP, "weight_decay", 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0",
                          &rc->weight_decay) < 0)
            return -1;
        if (t->bit & (T_ADAM | T_ADAMW | T_LION | T_LAMB | T_ONEBIT))
            if (parse_betas(ctx, params, rc) < 0) return -1;
        if (t->bit & (T_ADAM | T_ADAMW | T_ADAGRAD | T_LAMB | T_ONEBIT))
            if (zero__cfg_num(ctx, params, OP, "eps", ZERO__CFG_FLT_MIN, 0, ZERO__CFG_FLT_MAX,
                              "a number > 0 that is a normal 32-bit float (>= 1.17549e-38)", &rc->eps) < 0)
                return -1;
        if (t->bit & (T_ADAM | T_ADAMW | T_LAMB)) {
            if (zero__cfg_bool(ctx, params, OP, "bias_correction", &rc->bias_correction) < 0) return -1;
            flag = 0;
            if (zero__cfg_bool(ctx, params, OP, "amsgrad", &flag) < 0) return -1;
            if (flag)
                return zero__cfg_fail(ctx, OP ".amsgrad: got true, expected false: AMSGrad is not implemented "
                                              "by libzero");
        }
        if (t->bit == T_ONEBIT) {
            int64_t fs = 0;
            const char *name = NULL;
            flag = 0;
            if (zero__cfg_bool(ctx, params, OP, "bias_correction", &flag) < 0) return -1;
            if (flag)
                zero__cfg_warn(ctx, OP ".bias_correction: true has no effect with type OneBitAdam (as in "
                                      "DeepSpeed, whose OnebitAdam never bias-corrects)");
            flag = 0;
            if (zero__cfg_bool(ctx, params, OP, "amsgrad", &flag) < 0) return -1;
            if (flag)
                return zero__cfg_fail(ctx, OP ".amsgrad: got true, expected false: 1-bit Adam has no AMSGrad "
                                              "variant");
            if (zero__cfg_int(ctx, params, OP, "freeze_step", 0, INT64_MAX, "an integer >= 0", &fs) < 0 ||
                zero__cfg_bool(ctx, params, OP, "cuda_aware", &flag) < 0 ||
                zero__cfg_str(ctx, params, OP, "comm_backend_name", &name) < 0)
                return -1;
        }
        if (t->bit & (T_ADAM | T_ADAMW)) {
            flag = 1;
            if (zero__cfg_bool(ctx, params, OP, "adam_w_mode", &flag) < 0) return -1;
            if (!flag && t->bit == T_ADAM) rc->optim = ZERO_OPTIM_ADAM; /* L2 decay added to the gradient */
            if (!flag && t->bit == T_ADAMW)
                zero__cfg_warn(ctx, OP ".adam_w_mode: false has no effect with type AdamW (as in DeepSpeed); "
                                      "weight decay stays decoupled");
            flag = 0;
            if (zero__cfg_bool(ctx, params, OP, "torch_adam", &flag) < 0) return -1;
            if (flag) zero__cfg_warn(ctx, OP ".torch_adam: ignored, libzero always uses its own Adam kernel");
        }
        if (t->bit == T_SGD) {
            /* above 1 the momentum buffer grows geometrically to Inf */
            if (zero__cfg_num(ctx, params, OP, "momentum", 0.0, 0, 1.0, "a number >= 0 and <= 1", &rc->momentum) < 0 ||
                zero__cfg_bool(ctx, params, OP, "nesterov", &rc->nesterov) < 0)
                return -1;
            d = 0;
            if (zero__cfg_num(ctx, params, OP, "dampening", 0.0, 0, HUGE_VAL, "a number >= 0", &d) < 0) return -1;
            if (d != 0) zero__cfg_warn(ctx, OP ".dampening: not implemented by libzero, ignored (0 is used)");
            if (rc->nesterov && rc->momentum <= 0)
                return zero__cfg_fail(ctx, OP ".nesterov: got true with momentum 0, expected momentum > 0 (as "
                                              "torch.optim.SGD requires)");
        }
        if (t->bit == T_LAMB) {
            double hi = 10.0, lo = 0.01; /* FusedLamb's defaults */
            if (zero__cfg_num(ctx, params, OP, "max_coeff", 0.0, 1, ZERO__CFG_FLT_MAX, "a number > 0", &hi) < 0 ||
                zero__cfg_num(ctx, params, OP, "min_coeff", 0.0, 1, ZERO__CFG_FLT_MAX, "a number > 0", &lo) < 0 ||
                zero__cfg_num(ctx, params, OP, "max_grad_norm", 0.0, 0, HUGE_VAL, "a number >= 0", &d) < 0)
                return -1;
            if (lo > hi)
                return zero__cfg_fail(ctx, OP ".min_coeff: got %g with max_coeff %g, expected min_coeff <= max_coeff "
                                              "(the trust ratio is clamped to [min_coeff, max_coeff])",
                                      lo, hi);
        }
        if (t->bit == T_ADAGRAD) {
            d = 0;
            if (zero__cfg_num(ctx, params, OP, "lr_decay", 0.0, 0, HUGE_VAL, "a number >= 0", &d) < 0) return -1;
            if (d != 0) zero__cfg_warn(ctx, OP ".lr_decay: not implemented by libzero, ignored");
            d = 0;
            if (zero__cfg_num(ctx, params, OP, "initial_accumulator_value", 0.0, 0, HUGE_VAL, "a number >= 0", &d) < 0)
                return -1;
            if (d != 0) zero__cfg_warn(ctx, OP ".initial_accumulator_value: not implemented by libzero, ignored");
        }
    }
    return parse_groups(ctx, opt);
}

const char *zero__config_optim_plugin(const zero__config *c) {
    const json_t *opt = c && c->root ? json_object_get(c->root, "optimizer") : NULL;
    const json_t *tv = opt ? json_object_get(opt, "type") : NULL;
    return json_is_string(tv) && strcasecmp(json_string_value(tv), "OneBitAdam") == 0 ? "onebit" : NULL;
}

/* ---- scheduler ----------------------------------------------------------- */

/* P_POS: an integer the schedule divides by (>= 1); P_MOM: a momentum,
 * used as an fp32 beta1 (in [0, 1) there). */
enum { P_NUM, P_INT, P_POS, P_ITER, P_BOOL, P_WARMUP_TYPE, P_MOM };
typedef struct sched_param {
    const char *name;
    int kind;
    int required;
} sched_param;

typedef struct sched_type {
    const char *name;
    const sched_param *params;
} sched_type;

/* deepspeed/runtime/lr_schedules.py: constructor arguments per schedule. */
static const sched_param warmup_lr[] = {{"warmup_min_lr", P_NUM, 0},     {"warmup_max_lr", P_NUM, 0},
                                        {"warmup_num_steps", P_INT, 0},  {"warmup_type", P_WARMUP_TYPE, 0},
                                        {"last_batch_iteration", P_ITER, 0}, {NULL, 0, 0}};
static const sched_param warmup_decay_lr[] = {{"total_num_steps", P_INT, 1},    {"warmup_min_lr", P_NUM, 0},
                                              {"warmup_max_lr", P_NUM, 0},      {"warmup_num_steps", P_INT, 0},
                                              {"warmup_type", P_WARMUP_TYPE, 0}, {"last_batch_iteration", P_ITER, 0},
                                              {NULL, 0, 0}};
static const sched_param warmup_cosine_lr[] = {{"total_num_steps", P_INT, 1},     {"warmup_min_ratio", P_NUM, 0},
                                               {"warmup_num_steps", P_INT, 0},    {"cos_min_ratio", P_NUM, 0},
                                               {"warmup_type", P_WARMUP_TYPE, 0}, {"last_batch_iteration", P_ITER, 0},
                                               {NULL, 0, 0}};
static const sched_param one_cycle[] = {{"cycle_min_lr", P_NUM, 1},
                                        {"cycle_max_lr", P_NUM, 1},
                                        {"decay_lr_rate", P_NUM, 0},
                                        {"cycle_first_step_size", P_POS, 0},
                                        {"cycle_second_step_size", P_INT, 0},
                                        {"cycle_first_stair_count", P_INT, 0},
                                        {"cycle_second_stair_count", P_INT, 0},
                                        {"decay_step_size", P_INT, 0},
                                        {"cycle_momentum", P_BOOL, 0},
                                        {"cycle_min_mom", P_MOM, 0},
                                        {"cycle_max_mom", P_MOM, 0},
                                        {"decay_mom_rate", P_NUM, 0},
                                        {"last_batch_iteration", P_ITER, 0},
                                        {NULL, 0, 0}};
static const sched_param lr_range_test[] = {{"lr_range_test_min_lr", P_NUM, 0},     {"lr_range_test_step_size", P_POS, 0},
                                            {"lr_range_test_step_rate", P_NUM, 0},  {"lr_range_test_staircase", P_BOOL, 0},
                                            {"last_batch_iteration", P_ITER, 0},    {NULL, 0, 0}};

static const sched_type sched_types[] = {{"WarmupLR", warmup_lr},
                                         {"WarmupDecayLR", warmup_decay_lr},
                                         {"WarmupCosineLR", warmup_cosine_lr},
                                         {"OneCycle", one_cycle},
                                         {"LRRangeTest", lr_range_test}};

static const zero__cfg_key scheduler_keys[] = {
    {"type", ZERO__KEY_USED, NULL, NULL}, {"params", ZERO__KEY_USED, NULL, NULL}, {NULL, 0, NULL, NULL}};

#define SP "scheduler.params"

static int check_sched_param(zero__cfg_ctx *ctx, const json_t *params, const sched_type *t, const sched_param *p) {
    const json_t *v = params ? json_object_get(params, p->name) : NULL;
    int64_t i;
    double d;
    int32_t b;
    const char *s;
    int r = 0;
    switch (p->kind) {
    case P_NUM: r = zero__cfg_num(ctx, params, SP, p->name, 0.0, 0, ZERO__CFG_FLT_MAX, "a number >= 0", &d); break;
    case P_INT: r = zero__cfg_int(ctx, params, SP, p->name, 0, INT64_MAX, "an integer >= 0", &i); break;
    case P_POS:
        r = zero__cfg_int(ctx, params, SP, p->name, 1, INT64_MAX, "an integer >= 1 (the schedule divides by it)", &i);
        break;
    case P_MOM:
        r = zero__cfg_num(ctx, params, SP, p->name, 0.0, 0, 1.0, "a number in [0, 1) (it becomes beta1)", &d);
        if (r == 1 && (float)d >= 1.0f) {
            char val[96];
            zero__cfg_describe(v, val, sizeof val);
            return zero__cfg_fail(ctx, SP ".%s: got %s, expected a number in [0, 1) (it becomes beta1)%s", p->name,
                                  val, d < 1.0 ? ": it rounds to 1 as the kernels' 32-bit float" : "");
        }
        break;
    case P_ITER: r = zero__cfg_int(ctx, params, SP, p->name, -1, INT64_MAX, "an integer >= -1", &i); break;
    case P_BOOL: r = zero__cfg_bool(ctx, params, SP, p->name, &b); break;
    case P_WARMUP_TYPE:
        r = zero__cfg_str(ctx, params, SP, p->name, &s);
        if (r == 1 && strcmp(s, "log") != 0 && strcmp(s, "linear") != 0) {
            char val[96];
            zero__cfg_describe(v, val, sizeof val);
            return zero__cfg_fail(ctx, SP ".%s: got %s, expected \"log\" or \"linear\"", p->name, val);
        }
        break;
    }
    if (r < 0) return -1;
    if (r == 0 && p->required)
        return zero__cfg_fail(ctx, SP ".%s: missing, expected %s for scheduler type %s", p->name,
                              p->kind == P_NUM ? "a number >= 0" : p->kind == P_POS ? "an integer >= 1"
                                                                                   : "an integer >= 0",
                              t->name);
    return 0;
}

int zero__cfg_parse_scheduler(zero__cfg_ctx *ctx, const json_t *root, const char **canonical) {
    const json_t *sch, *params, *tv;
    const sched_type *t = NULL;
    const char *type = NULL, *key;
    json_t *v;
    size_t i;

    *canonical = NULL;
    if (zero__cfg_obj(ctx, root, "", "scheduler", &sch) < 0) return -1;
    if (!sch) return 0;
    zero__cfg_check_keys(ctx, sch, "scheduler", scheduler_keys);
    tv = json_object_get(sch, "type");
    if (!tv || json_is_null(tv))
        return zero__cfg_fail(ctx, "scheduler.type: missing, expected one of WarmupLR, WarmupDecayLR, "
                                   "WarmupCosineLR, OneCycle, LRRangeTest");
    if (zero__cfg_str(ctx, sch, "scheduler", "type", &type) < 0) return -1;
    for (i = 0; i < sizeof sched_types / sizeof sched_types[0]; ++i)
        if (strcasecmp(type, sched_types[i].name) == 0) t = &sched_types[i];
    if (!t)
        return zero__cfg_fail(ctx, "scheduler.type: got \"%s\", expected one of WarmupLR, WarmupDecayLR, "
                                   "WarmupCosineLR, OneCycle, LRRangeTest",
                              type);
    if (zero__cfg_obj(ctx, sch, "scheduler", "params", &params) < 0) return -1;
    if (params) {
        json_object_foreach((json_t *)params, key, v) {
            const sched_param *p = t->params;
            while (p->name && strcmp(p->name, key) != 0) ++p;
            if (!p->name) zero__cfg_warn(ctx, SP ".%s: not a parameter of scheduler type %s, ignored", key, t->name);
        }
    }
    for (const sched_param *p = t->params; p->name; ++p)
        if (check_sched_param(ctx, params, t, p) < 0) return -1;
    *canonical = t->name;
    return 0;
}
