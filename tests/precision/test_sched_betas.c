/* OneCycle momentum cycling (white box: the core's zero__schedule_betas on
 * an engine built from a config), against the values computed here from
 * DeepSpeed's OneCycle: constructor min_moms = (cycle_min_mom, 0.99) for
 * step 1; then, at last_batch_iteration i = t - 2, beta1 = max_mom -
 * (max_mom - min_mom) * scale(i + 1) over the cycle and max_mom after it
 * (decay_mom_rate 0), beta2 0.99; cycle_momentum false, or an optimizer
 * without betas (SGD), keeps the configured betas.  A decay_mom_rate > 0
 * (DeepSpeed: max_mom * (1 + decay_mom_rate * interval), which passes 1)
 * is refused at engine creation (issue 31; tests/config/test_config_ranges.c
 * has the message).  One process, ZERO_COMM_SELF. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "engine.h"

static zero_engine *make(const char *json) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = "stage0";
    char err[512] = "";
    zero_engine *e = NULL;
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "zero_engine_create: %s", err);
    return e;
}

static double want_beta1(int t) { /* min 0.85, max 0.95, up 4, down 6, no momentum decay */
    int i = t - 2;
    if (i < 0) return 0.85;
    if (i < 10) {
        double b = i + 1, x = b / 10.0 - floor(b / 10.0);
        double s = x <= 0.4 ? x / 0.4 : (x - 1) / (0.4 - 1);
        return 0.95 - 0.1 * s;
    }
    return 0.95;
}

int main(void) {
    static const char *cycle =
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.7, 0.8]}}, "
        "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1, "
        "\"cycle_first_step_size\": 4, \"cycle_second_step_size\": 6, \"decay_step_size\": 2, "
        "\"cycle_min_mom\": 0.85, \"cycle_max_mom\": 0.95, \"decay_mom_rate\": 0}}}";
    zero_engine *e = make(cycle);
    if (e) {
        for (int t = 1; t <= 16; t++) {
            double b1, b2;
            zero__schedule_betas(e, (uint64_t)t, &b1, &b2);
            CHECK(fabs(b1 - want_beta1(t)) <= 1e-12 && b2 == 0.99, "step %d: betas (%.17g, %g), expected (%.17g, 0.99)",
                  t, b1, b2, want_beta1(t));
        }
        zero_engine_destroy(e);
    }
    {   /* momentum decay drives beta1 past 1 (0.95 * 1.1 at step 13): refused */
        zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
        o.config_json = "{\"optimizer\": {\"type\": \"AdamW\"}, \"scheduler\": {\"type\": \"OneCycle\", "
                        "\"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1, \"cycle_first_step_size\": 4, "
                        "\"cycle_second_step_size\": 6, \"decay_step_size\": 2, \"cycle_max_mom\": 0.95, "
                        "\"decay_mom_rate\": 0.1}}}";
        o.comm_kind = ZERO_COMM_SELF;
        o.plugin = "stage0";
        char err[512] = "";
        zero_engine *bad = NULL;
        CHECK(zero_engine_create(&o, &bad, err, sizeof err) == ZERO_ERR_CONFIG && !bad, "decay_mom_rate 0.1 accepted");
        CHECK(strstr(err, "scheduler.params.decay_mom_rate") != NULL, "error \"%s\" does not name the key", err);
    }
    static const char *off[2] = {
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.7, 0.8]}}, "
        "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1, "
        "\"cycle_momentum\": false}}}",
        "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01}}, "
        "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1}}}"};
    for (int k = 0; k < 2; k++) {
        e = make(off[k]);
        if (!e) continue;
        const zero_run_config *rc = zero__engine_of((zero_core *)e)->rc;
        for (int t = 1; t <= 5; t++) {
            double b1, b2;
            zero__schedule_betas(e, (uint64_t)t, &b1, &b2);
            CHECK(b1 == rc->beta1 && b2 == rc->beta2, "%s: step %d betas moved", k ? "SGD" : "cycle_momentum false", t);
        }
        zero_engine_destroy(e);
    }
    return check_finish();
}
