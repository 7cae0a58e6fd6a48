/* LR schedules (issue 7): the lr reported by zero_step for each optimizer
 * step equals the value computed here, independently, from DeepSpeed's
 * documented formulas (deepspeed/runtime/lr_schedules.py) and its calling
 * convention: the engine calls scheduler.step() after every optimizer step
 * taken, and the constructor puts the starting lr in place, so step t
 * (1-based) runs at last_batch_iteration i = t - 2, step 1 at the
 * constructor's value.  One process (ZERO_COMM_SELF), fp32, SGD. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "prec_host.h"

#define STEPS 16

typedef double (*lr_fn)(int t);

static double warmup_log(int t) { /* min 0.01, max 0.1, 10 warm-up steps */
    int i = t - 2;
    if (i < 0) return 0.01;
    return i < 10 ? 0.01 + 0.09 * log(i + 1.0) / log(10.0) : 0.1;
}
static double warmup_linear(int t) {
    int i = t - 2;
    if (i < 0) return 0.01;
    return i < 10 ? 0.01 + 0.09 * i / 10.0 : 0.1;
}
static double warmup_decay(int t) { /* total 12, min 0, max 0.1, 4 steps, linear */
    int i = t - 2;
    if (i < 0) return 0.0;
    if (i < 4) return 0.1 * i / 4.0;
    double g = (12.0 - i) / 8.0;
    return 0.1 * (g > 0 ? g : 0);
}
static double warmup_cosine(int t) { /* optimizer lr 0.2, total 12, 4 steps linear, min ratio 0.1, cos min 0.01 */
    int i = t - 2 < 0 ? 0 : t - 2;
    if (i < 4) return 0.2 * (0.1 + 0.9 * i / 4.0);
    double r = 0.01 + 0.99 * (1 + cos(M_PI * (i - 4 + 1) / 8.0)) / 2;
    return 0.2 * (r > 0 ? r : 0);
}
static double one_cycle(int t) { /* min 0.01, max 0.1, up 4, down 6, decay rate 0.5 every 2 */
    int i = t - 2;
    if (i < 10) {
        double b = i + 1, x = b / 10.0 - floor(b / 10.0);
        double s = x <= 0.4 ? x / 0.4 : (x - 1) / (0.4 - 1);
        return 0.01 + 0.09 * s;
    }
    return 0.01 / (1 + 0.5 * (i - 10 + 1) / 2.0);
}
static double warmup_resumed(int t) { /* WarmupLR linear resumed at last_batch_iteration 5 */
    if (t == 1) return 0.2;            /* the constructor leaves optimizer.params.lr */
    int i = 5 + t - 1;
    return i < 10 ? 0.01 + 0.09 * i / 10.0 : 0.1;
}
static double range_test(int t) { return 0.01 * (1 + 2.0 * (t - 1) / 3.0); }
static double range_test_stair(int t) { return 0.01 * (1 + 2.0 * floor((t - 1) / 3.0)); }

typedef struct sched_case {
    const char *name;
    const char *json;
    lr_fn want;
} sched_case;

static const sched_case CASES[] = {
    {"WarmupLR log",
     "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.01, \"warmup_max_lr\": 0.1, "
     "\"warmup_num_steps\": 10}}",
     warmup_log},
    {"WarmupLR linear",
     "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.01, \"warmup_max_lr\": 0.1, "
     "\"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}}",
     warmup_linear},
    {"WarmupLR resumed at 5",
     "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.01, \"warmup_max_lr\": 0.1, "
     "\"warmup_num_steps\": 10, \"warmup_type\": \"linear\", \"last_batch_iteration\": 5}}",
     warmup_resumed},
    {"WarmupDecayLR",
     "\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 12, \"warmup_max_lr\": 0.1, "
     "\"warmup_num_steps\": 4, \"warmup_type\": \"linear\"}}",
     warmup_decay},
    {"WarmupCosineLR",
     "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 12, \"warmup_num_steps\": 4, "
     "\"warmup_min_ratio\": 0.1, \"cos_min_ratio\": 0.01, \"warmup_type\": \"linear\"}}",
     warmup_cosine},
    {"OneCycle",
     "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1, "
     "\"cycle_first_step_size\": 4, \"cycle_second_step_size\": 6, \"decay_lr_rate\": 0.5, \"decay_step_size\": 2, "
     "\"cycle_momentum\": false}}",
     one_cycle},
    {"LRRangeTest",
     "\"scheduler\": {\"type\": \"LRRangeTest\", \"params\": {\"lr_range_test_min_lr\": 0.01, "
     "\"lr_range_test_step_size\": 3, \"lr_range_test_step_rate\": 2.0}}",
     range_test},
    {"LRRangeTest staircase",
     "\"scheduler\": {\"type\": \"LRRangeTest\", \"params\": {\"lr_range_test_min_lr\": 0.01, "
     "\"lr_range_test_step_size\": 3, \"lr_range_test_step_rate\": 2.0, \"lr_range_test_staircase\": true}}",
     range_test_stair},
};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        prec_cfg c = prec_default_cfg();
        c.self_comm = 1;
        c.gas = 1;
        c.steps = STEPS;
        c.optimizer_json = "{\"type\": \"SGD\", \"params\": {\"lr\": 0.2}}";
        c.extra_json = CASES[k].json;
        prec_out o;
        prec_run(&c, &o);
        CHECK(o.status == ZERO_OK, "%s: %s", CASES[k].name, o.error);
        if (o.status == ZERO_OK) {
            CHECK_EQ_INT(o.nsteps, STEPS);
            printf("%-22s", CASES[k].name);
            for (int s = 0; s < o.nsteps; s++) {
                double want = CASES[k].want(s + 1);
                printf(" %.4g", o.lr[s]);
                CHECK(fabs(o.lr[s] - want) <= 1e-12 * fmax(1.0, fabs(want)), "%s step %d: lr %.17g, expected %.17g",
                      CASES[k].name, s + 1, o.lr[s], want);
            }
            printf("\n");
        }
        prec_free(&o);
    }
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
