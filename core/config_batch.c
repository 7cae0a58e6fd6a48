/* Batch-size arithmetic: train_batch_size = micro * gas * world.
 *
 * Mirrors DeepSpeed's _set_batch_related_parameters: whichever of the three
 * is missing is derived from the others; with only one given the missing
 * factor defaults to 1 (gas first, then micro).  DeepSpeed refuses a config
 * with none of them; libzero runs it as micro = gas = 1 so that a host can
 * start from an empty config. */
#include <inttypes.h>

#include "config_internal.h"

#define TB "train_batch_size"
#define MB "train_micro_batch_size_per_gpu"
#define GA "gradient_accumulation_steps"

static int product(zero__cfg_ctx *ctx, int64_t a, int64_t b, int64_t *out) {
    if (__builtin_mul_overflow(a, b, out))
        return zero__cfg_fail(ctx, "%s: %" PRId64 " * %" PRId64 " overflows a 64-bit integer", TB, a, b);
    return 0;
}

/* train_batch_size given with one factor: derive the other as
 * train / (given * world), which must divide exactly. */
static int derive(zero__cfg_ctx *ctx, int world, int64_t train, const char *given_key, int64_t given,
                  const char *derived_key, int64_t *out) {
    int64_t gw;
    if (product(ctx, given, world, &gw)) return -1;
    if (train % gw != 0)
        return zero__cfg_fail(ctx,
                              "%s: got %" PRId64 ", expected a multiple of %s (%" PRId64
                              ") * world size (%d) = %" PRId64 " so that %s can be derived",
                              TB, train, given_key, given, world, gw, derived_key);
    *out = train / gw;
    return 0;
}

int zero__cfg_batch(zero__cfg_ctx *ctx, int world, int64_t train, int64_t micro, int64_t gas,
                    zero_run_config *rc) {
    int64_t w = world, p;
    if (world < 1) return zero__cfg_fail(ctx, "world size %d: expected at least 1", world);

    if (train > 0 && micro > 0 && gas > 0) {
        if (product(ctx, micro, gas, &p) || product(ctx, p, w, &p)) return -1;
        if (p != train)
            return zero__cfg_fail(ctx,
                                  "%s: got %" PRId64 ", expected %s (%" PRId64 ") * %s (%" PRId64
                                  ") * world size (%d) = %" PRId64,
                                  TB, train, MB, micro, GA, gas, world, p);
    } else if (train > 0 && micro > 0) {
        if (derive(ctx, world, train, MB, micro, GA, &gas)) return -1;
    } else if (train > 0 && gas > 0) {
        if (derive(ctx, world, train, GA, gas, MB, &micro)) return -1;
    } else if (train > 0) {
        gas = 1;
        if (train % w != 0)
            return zero__cfg_fail(ctx,
                                  "%s: got %" PRId64 ", expected a multiple of the world size (%d) so that "
                                  "%s can be derived (%s defaults to 1)",
                                  TB, train, world, MB, GA);
        micro = train / w;
    } else {
        /* No train_batch_size: it is the product of the others, default 1 each. */
        if (micro <= 0) micro = 1;
        if (gas <= 0) gas = 1;
        if (product(ctx, micro, gas, &p) || product(ctx, p, w, &train)) return -1;
    }
    if (gas > INT32_MAX)
        return zero__cfg_fail(ctx, "%s: derived %" PRId64 ", expected at most %d", GA, gas, INT32_MAX);
    rc->train_batch_size = train;
    rc->micro_batch_per_gpu = micro;
    rc->grad_accum_steps = gas;
    return 0;
}
