/* Configs that would destroy the model are refused, naming the key (issue
 * 31, item 3), and what is accepted is safe over its whole domain:
 *  - a table of configs whose values leave fp32's range (lr / weight_decay
 *    1e39), make a schedule divide by zero (OneCycle cycle_first_step_size
 *    0, LRRangeTest lr_range_test_step_size 0), grow it past FLT_MAX
 *    (LRRangeTest's rate, WarmupCosineLR's ratios), drive a momentum to 1
 *    (OneCycle decay_mom_rate, betas that round to 1 in fp32) or make eps,
 *    the loss scale or the predivide factor vanish: each ZERO_ERR_CONFIG
 *    with the key path first;
 *  - a sweep of accepted schedules (every type, warm-up kind, edge
 *    parameter and resume point) over steps 1..1100, the branch points
 *    beyond and far ones up to 2^64 - 1: lr finite, >= 0 and a finite
 *    fp32, lr * weight_decay finite in fp32, betas in [0, 1) as fp32;
 *  - config files that are not regular files (/dev/zero, a FIFO with no
 *    writer, a directory, /dev/null) or larger than the 64 MiB cap return
 *    ZERO_ERR_CONFIG naming the path, promptly (the ctest has a TIMEOUT; a
 *    FIFO open used to block forever and /dev/zero to grow without bound). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

static char ERR[2048];

static const char *as_str(const char *s) { return s; }

typedef struct bad_case {
    const char *json;
    const char *prefix; /* the error must start with it (the key path) */
    const char *also;   /* and contain this, or NULL */
} bad_case;

#define ADAM(p) "{\"optimizer\":{\"type\":\"AdamW\",\"params\":{" p "}}}"
#define SCHED(t, p) "{\"scheduler\":{\"type\":\"" t "\",\"params\":{" p "}}}"

static void test_refused(void) {
    static const bad_case cases[] = {
        /* values outside fp32: a double 1e39 is Inf in the kernels */
        {ADAM("\"lr\":1e39"), "optimizer.params.lr: got 1e39, expected a number >= 0 and at most 3.40282e+38",
         "32-bit float"},
        {ADAM("\"weight_decay\":1e39"), "optimizer.params.weight_decay: got 1e39", "at most 3.40282e+38"},
        {ADAM("\"eps\":1e39"), "optimizer.params.eps: got 1e39", "at most 3.40282e+38"},
        {ADAM("\"eps\":0"), "optimizer.params.eps: got 0, expected a number > 0", NULL},
        {ADAM("\"eps\":-1e-8"), "optimizer.params.eps: got -1e-8", NULL},
        {ADAM("\"eps\":1e-45"), "optimizer.params.eps: got 1e-45", "normal 32-bit float"},
        /* JSON has no Inf: an overflowing literal is invalid JSON */
        {ADAM("\"eps\":1e400"), "config text: invalid JSON", NULL},
        {ADAM("\"betas\":[0.9,1.0]"), "optimizer.params.betas: got [0.9,1.0], expected two numbers in [0, 1)", NULL},
        {ADAM("\"betas\":[1.5,0.999]"), "optimizer.params.betas: got [1.5,0.999]", NULL},
        {ADAM("\"betas\":[-0.1,0.999]"), "optimizer.params.betas: got [-0.1,0.999]", NULL},
        {ADAM("\"betas\":[0.9,0.99999999999]"), "optimizer.params.betas: got [0.9,0.99999999999]",
         "rounds to 1 in fp32"},
        {"{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"momentum\":1.5}}}",
         "optimizer.params.momentum: got 1.5, expected a number >= 0 and <= 1", NULL},
        {"{\"optimizer\":{\"type\":\"Lamb\",\"params\":{\"min_coeff\":5,\"max_coeff\":1}}}",
         "optimizer.params.min_coeff: got 5 with max_coeff 1", NULL},
        {"{\"optimizer\":{\"type\":\"Lamb\",\"params\":{\"lr\":1e37,\"max_coeff\":100}}}",
         "optimizer.params.max_coeff: got 100", "Lamb steps by lr * trust ratio"},
        {"{\"optimizer\":{\"type\":\"Adam\",\"param_groups\":[{\"lr_scale\":1e39}]}}",
         "optimizer.param_groups[0].lr_scale: got 1e39", "at most 3.40282e+38"},
        {"{\"gradient_predivide_factor\":1e-39}", "gradient_predivide_factor: got 1e-39", "reciprocal"},
        {"{\"gradient_predivide_factor\":1e39}", "gradient_predivide_factor: got 1e39", NULL},
        {"{\"fp16\":{\"enabled\":true,\"loss_scale\":1e39}}", "fp16.loss_scale: got 1e39", "at most 3.40282e+38"},
        {"{\"fp16\":{\"enabled\":true,\"loss_scale\":1e-40}}", "fp16.loss_scale: got 1e-40", "1/scale"},
        {"{\"fp16\":{\"enabled\":true,\"min_loss_scale\":1e-40}}", "fp16.min_loss_scale: got 1e-40", "1/scale"},
        /* schedules that divide by zero */
        {SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_first_step_size\":0"),
         "scheduler.params.cycle_first_step_size: got 0, expected an integer >= 1", "divides"},
        {SCHED("LRRangeTest", "\"lr_range_test_step_size\":0"),
         "scheduler.params.lr_range_test_step_size: got 0, expected an integer >= 1", "divides"},
        /* schedules that leave fp32's range */
        {SCHED("WarmupLR", "\"warmup_max_lr\":1e39"), "scheduler.params.warmup_max_lr: got 1e39",
         "at most 3.40282e+38"},
        {SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":1e39"), "scheduler.params.cycle_max_lr: got 1e39",
         NULL},
        {SCHED("LRRangeTest", "\"lr_range_test_min_lr\":1,\"lr_range_test_step_size\":1,"
                              "\"lr_range_test_step_rate\":1e30"),
         "scheduler.params.lr_range_test_step_rate: got 1e+30", "by step 2^64"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":1e30}},"
         "\"scheduler\":{\"type\":\"WarmupCosineLR\",\"params\":{\"total_num_steps\":100,\"warmup_min_ratio\":1e20}}}",
         "scheduler.params.warmup_min_ratio: got 1e+20", "optimizer.params.lr 1e+30"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":1e30}},"
         "\"scheduler\":{\"type\":\"WarmupCosineLR\",\"params\":{\"total_num_steps\":100,\"cos_min_ratio\":1e20}}}",
         "scheduler.params.cos_min_ratio: got 1e+20", NULL},
        /* lr * weight_decay: 1 - lr * wd reaches the kernels in fp32 */
        {ADAM("\"lr\":1e30,\"weight_decay\":1e30"), "optimizer.params.weight_decay: got 1e+30",
         "overflows a 32-bit float"},
        {"{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"weight_decay\":1e30}},"
         "\"scheduler\":{\"type\":\"WarmupLR\",\"params\":{\"warmup_max_lr\":1e10}}}",
         "optimizer.params.weight_decay: got 1e+30", "scheduler WarmupLR"},
        /* momenta that reach 1 */
        {SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_max_mom\":1.0"),
         "scheduler.params.cycle_max_mom: got 1.0, expected a number in [0, 1)", NULL},
        {SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_min_mom\":0.999999999999"),
         "scheduler.params.cycle_min_mom: got 0.999999999999", "rounds to 1"},
        {SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_first_step_size\":4,"
                           "\"decay_step_size\":2,\"cycle_max_mom\":0.95,\"decay_mom_rate\":0.1"),
         "scheduler.params.decay_mom_rate: got 0.1 with cycle_max_mom 0.95 and decay_step_size 2",
         "reaching 1 by step 11"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        zero__config *c = NULL;
        ERR[0] = '\0';
        zero_status s = zero__config_parse(cases[i].json, NULL, 1, &c, NULL, NULL, ERR, sizeof ERR);
        CHECK(s == ZERO_ERR_CONFIG && c == NULL, "config %s: status %d, expected ZERO_ERR_CONFIG", cases[i].json, s);
        CHECK(strncmp(ERR, cases[i].prefix, strlen(cases[i].prefix)) == 0,
              "config %s:\n  error \"%s\"\n  does not start with \"%s\"", cases[i].json, ERR, cases[i].prefix);
        if (cases[i].also) CHECK_STR_CONTAINS(as_str(ERR), cases[i].also);
        zero__config_free(c);
    }
}

/* The same keys at their edges are accepted: the refusals are not wider
 * than the ranges. */
static void test_edges_accepted(void) {
    static const char *good[] = {
        ADAM("\"lr\":3.4e38"),
        ADAM("\"eps\":1.2e-38,\"betas\":[0,0.9999999]"),
        "{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"momentum\":1}}}",
        /* SGD has no betas: OneCycle does not cycle them, so the decay is harmless */
        "{\"optimizer\":{\"type\":\"SGD\",\"params\":{\"lr\":0.1}},\"scheduler\":{\"type\":\"OneCycle\",\"params\":"
        "{\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"decay_step_size\":2,\"decay_mom_rate\":0.1}}}",
        SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_momentum\":false,"
                          "\"decay_step_size\":2,\"decay_mom_rate\":0.1"),
        SCHED("OneCycle", "\"cycle_min_lr\":0.001,\"cycle_max_lr\":0.01,\"cycle_first_step_size\":1,"
                          "\"cycle_second_step_size\":0"),
        SCHED("LRRangeTest", "\"lr_range_test_step_size\":1,\"lr_range_test_step_rate\":1000"),
        "{\"gradient_predivide_factor\":8e37}",
        "{\"fp16\":{\"enabled\":true,\"loss_scale\":3e38,\"min_loss_scale\":1.2e-38}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; ++i) {
        zero__config *c = NULL;
        zero_status s = zero__config_parse(good[i], NULL, 1, &c, NULL, NULL, ERR, sizeof ERR);
        CHECK(s == ZERO_OK, "config %s refused: %s", good[i], ERR);
        zero__config_free(c);
    }
}

/* Every value a step can run with, for every step t the sweep visits. */
static void sweep(const char *json) {
    zero__config *c = NULL;
    zero_status s = zero__config_parse(json, NULL, 1, &c, NULL, NULL, ERR, sizeof ERR);
    CHECK(s == ZERO_OK, "sweep config %s refused: %s", json, ERR);
    if (s != ZERO_OK) return;
    const zero_run_config *rc = zero__config_run(c);
    /* past 1100: the branch points of the counts below (1000, 2000, 4000) */
    static const uint64_t far[] = {1999, 2000, 2001, 2002, 2003, 3999, 4000, 4001, 4002, 4003, 10000,         100000,          1000000,        1000000000ull,
                                   4294967296ull, 9007199254740992ull, 9223372036854775808ull,
                                   UINT64_MAX - 1, UINT64_MAX};
    int bad = 0;
    for (size_t k = 0; k < 1100 + sizeof far / sizeof far[0] && bad < 3; k++) {
        const uint64_t t = k < 1100 ? k + 1 : far[k - 1100];
        const double lr = zero__config_sched_lr(c, t);
        double b1, b2;
        zero__config_sched_betas(c, t, &b1, &b2);
        const int ok = isfinite(lr) && lr >= 0 && lr <= FLT_MAX &&
                       (double)(float)lr * (double)(float)rc->weight_decay <= FLT_MAX && b1 >= 0 &&
                       (float)b1 < 1.0f && b2 >= 0 && (float)b2 < 1.0f;
        CHECK(ok, "%s: step %llu: lr %g, betas (%g, %g)", json, (unsigned long long)t, lr, b1, b2);
        bad += !ok;
    }
    zero__config_free(c);
}

static void test_sweep(void) {
    static const char *types[] = {"WarmupLR", "WarmupDecayLR"};
    static const char *wt[] = {"log", "linear"};
    static const char *warm[] = {"0", "1", "2", "3", "1000"};
    static const char *total[] = {"0", "1", "5", "1000", "4000", "9223372036854775807"};
    static const char *resume[] = {"-1", "0", "7", "9223372036854775807"};
    char json[1024];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int w = 0; w < 5; w++)
                for (int tt = 0; tt < 6; tt++)
                    for (int r = 0; r < 4; r += 3) {
                        snprintf(json, sizeof json,
                                 "{\"scheduler\":{\"type\":\"%s\",\"params\":{\"warmup_min_lr\":0.5,"
                                 "\"warmup_max_lr\":0.001,\"warmup_type\":\"%s\",\"warmup_num_steps\":%s,"
                                 "\"total_num_steps\":%s,\"last_batch_iteration\":%s}}}",
                                 types[a], wt[b], warm[w], total[tt], resume[r]);
                        sweep(json);
                    }
    static const char *ratios[] = {"0", "0.5", "1", "3"};
    for (int b = 0; b < 2; b++)
        for (int w = 0; w < 5; w++)
            for (int tt = 0; tt < 6; tt++)
                for (int q = 0; q < 4; q++)
                    for (int r = 0; r < 4; r += 3) {
                        snprintf(json, sizeof json,
                                 "{\"optimizer\":{\"type\":\"Adam\",\"params\":{\"lr\":0.01,\"weight_decay\":0.1}},"
                                 "\"scheduler\":{\"type\":\"WarmupCosineLR\",\"params\":{\"warmup_type\":\"%s\","
                                 "\"warmup_num_steps\":%s,\"total_num_steps\":%s,\"warmup_min_ratio\":%s,"
                                 "\"cos_min_ratio\":%s,\"last_batch_iteration\":%s}}}",
                                 wt[b], warm[w], total[tt], ratios[q], ratios[3 - q], resume[r]);
                        sweep(json);
                    }
    static const char *sizes[][2] = {{"1", "0"}, {"1", "1"}, {"4", "6"}, {"2000", "2000"}, {"3", "9223372036854775807"}};
    static const char *decay[][2] = {{"0", "0"}, {"0.5", "2"}, {"1000", "1"}, {"0", "7"}};
    static const char *opt[] = {"AdamW", "Lion", "SGD"};
    for (int z = 0; z < 5; z++)
        for (int d = 0; d < 4; d++)
            for (int o = 0; o < 3; o++)
                for (int r = 0; r < 4; r++) {
                    snprintf(json, sizeof json,
                             "{\"optimizer\":{\"type\":\"%s\",\"params\":{\"lr\":0.01}},"
                             "\"scheduler\":{\"type\":\"OneCycle\",\"params\":{\"cycle_min_lr\":0.002,"
                             "\"cycle_max_lr\":0.3,\"cycle_first_step_size\":%s,\"cycle_second_step_size\":%s,"
                             "\"decay_lr_rate\":%s,\"decay_step_size\":%s,\"cycle_min_mom\":0,"
                             "\"cycle_max_mom\":0.9999999,\"last_batch_iteration\":%s}}}",
                             opt[o], sizes[z][0], sizes[z][1], decay[d][0], decay[d][1], resume[r]);
                    sweep(json);
                }
    static const char *steps[] = {"1", "3", "2000", "9223372036854775807"};
    static const char *rates[] = {"0", "1", "1000", "1e15"};
    for (int z = 0; z < 4; z++)
        for (int q = 0; q < 4; q++)
            for (int st = 0; st < 2; st++)
                for (int r = 0; r < 4; r++) {
                    snprintf(json, sizeof json,
                             "{\"scheduler\":{\"type\":\"LRRangeTest\",\"params\":{\"lr_range_test_min_lr\":0.001,"
                             "\"lr_range_test_step_size\":%s,\"lr_range_test_step_rate\":%s,"
                             "\"lr_range_test_staircase\":%s,\"last_batch_iteration\":%s}}}",
                             steps[z], rates[q], st ? "true" : "false", resume[r]);
                    sweep(json);
                }
    sweep("{}");
    sweep(ADAM("\"lr\":3.4e38,\"betas\":[0,0.9999999]"));
}

/* A file path that is not a regular config file: ZERO_ERR_CONFIG naming
 * it, fast. */
static void refuse_path(const char *path, const char *what) {
    zero__config *c = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    zero_status s = zero__config_parse(NULL, path, 1, &c, NULL, NULL, ERR, sizeof ERR);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(s == ZERO_ERR_CONFIG && c == NULL, "%s: status %d (%s), expected ZERO_ERR_CONFIG", path, s, ERR);
    CHECK(strncmp(ERR, "config file ", 12) == 0 && strstr(ERR, path), "%s: error \"%s\" does not name it", path, ERR);
    CHECK_STR_CONTAINS(as_str(ERR), what);
    CHECK(secs < 5.0, "%s: took %.1f s", path, secs);
    /* the engine peeks pipeline.stages from the same file first: no hang,
     * and 0 (the config did not load: the engine splits nothing) */
    CHECK_EQ_INT(zero__config_peek_pipeline_stages(NULL, path), 0);
    zero__config_free(c);
}

static void test_files(void) {
    refuse_path("/dev/zero", "a character device, expected a regular file");
    refuse_path("/dev/null", "a character device");
    char dir[] = "/tmp/zero-cfg-range-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    refuse_path(dir, "a directory, expected a regular file");
    char fifo[256], big[256];
    snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    refuse_path(fifo, "a FIFO, expected a regular file");
    /* a sparse file just over the cap: refused by size before reading */
    snprintf(big, sizeof big, "%s/big.json", dir);
    FILE *f = fopen(big, "w");
    CHECK(f != NULL, "fopen %s", big);
    if (f) {
        CHECK(ftruncate(fileno(f), ((off_t)64 << 20) + 1) == 0, "ftruncate");
        fclose(f);
        refuse_path(big, "larger than 64 MiB");
        /* exactly at the cap it is read (and then is not JSON) */
        CHECK(truncate(big, (off_t)64 << 20) == 0, "truncate");
        zero__config *c = NULL;
        zero_status s = zero__config_parse(NULL, big, 1, &c, NULL, NULL, ERR, sizeof ERR);
        CHECK(s == ZERO_ERR_CONFIG && strstr(ERR, "invalid JSON"), "64 MiB of NULs: %d %s", s, ERR);
        zero__config_free(c);
    }
    unlink(big);
    unlink(fifo);
    rmdir(dir);
}

int main(void) {
    test_refused();
    test_edges_accepted();
    test_sweep();
    test_files();
    return check_finish();
}
