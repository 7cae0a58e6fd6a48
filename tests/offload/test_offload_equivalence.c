/* Equivalence of the offload plugin (issue 5, DESIGN.md section 9), run
 * under mpirun with N ranks on the stage plugins' test host:
 *  - offload with stage-1 and stage-2 partitioning, accumulation 1 and 4,
 *    trains to the same parameters as stage0 (relative L2 <= 1e-6) and to
 *    BITWISE the same parameters as stage1 / stage2: the host master starts
 *    as a copy of the weights, the CPU optimizer is the same kernel, and the
 *    norm is summed in the same order, so moving the optimizer to the host
 *    must not change a bit;
 *  - the number of reduction passes is stage1's (one per window) or
 *    stage2's (one per micro-step);
 *  - a repeated run is bitwise identical; shuffled hooks from 2 threads,
 *    host-owned gradients, contiguous_gradients off and overlap_comm off
 *    change nothing;
 *  - the config alone (offload_optimizer.device = "cpu", no plugin name)
 *    selects the plugin: its host tier holds the fp32 master.
 * Usage: test_offload_equivalence [steps] */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"
#include "../stages/run_compare.h"

static int rank_ = 0, world_ = 1;
static const double TOL = 1e-6;

static int ran(const host_run_out *o, const char *label) {
    CHECK(o->status == ZERO_OK, "%s failed: %s", label, o->error);
    return o->status == ZERO_OK && o->params;
}

static void expect_close(const host_run_out *a, const host_run_out *b, const char *what) {
    host_expect_close(a, b, what, TOL, 56);
}

static void expect_bitwise(const host_run_out *a, const host_run_out *b, const char *what) {
    host_expect_bitwise(a, b, what, 56);
}

static host_run_cfg offload_cfg(int steps, int gas, int stage) {
    host_run_cfg c = host_default_cfg();
    c.steps = steps;
    c.gas = gas;
    c.plugin = "offload";
    c.stage = stage;
    c.offload = 1;
    return c;
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    char label[160];
    host_run_out keep[3]; /* gas 4 references: offload stage-2, stage2, offload stage-1 */
    memset(keep, 0, sizeof keep);

    const int gas_list[2] = {1, 4};
    for (int gi = 0; gi < 2; gi++) {
        const int gas = gas_list[gi];
        host_run_cfg c = host_default_cfg();
        c.steps = steps;
        c.gas = gas;
        host_run_out ref[3]; /* stage0, stage1, stage2 */
        const char *names[3] = {"stage0", "stage1", "stage2"};
        for (int k = 0; k < 3; k++) {
            host_run_cfg rc = c;
            rc.plugin = names[k];
            host_run(&rc, &ref[k]);
            ran(&ref[k], names[k]);
        }
        for (int stage = 1; stage <= 2; stage++) {
            host_run_cfg oc = offload_cfg(steps, gas, stage);
            host_run_out o;
            host_run(&oc, &o);
            snprintf(label, sizeof label, "offload stage-%d gas=%d", stage, gas);
            if (ran(&o, label) && ref[0].params && ref[stage].params) {
                snprintf(label, sizeof label, "offload stage-%d gas=%d vs stage0", stage, gas);
                expect_close(&o, &ref[0], label);
                snprintf(label, sizeof label, "offload stage-%d gas=%d vs stage%d", stage, gas, stage);
                expect_bitwise(&o, &ref[stage], label);
                /* gas > 1: stage-1 partitioning reduces every micro-step too (stage 2's sums, the
                 * default; reduce_once_per_window is checked below) */
                uint64_t want = (uint64_t)steps * gas;
                CHECK(o.comm.reduction_passes == want, "%s: %llu reduction passes, expected %llu", label,
                      (unsigned long long)o.comm.reduction_passes, (unsigned long long)want);
                CHECK(o.mem.current[ZERO_TIER_HOST][ZERO_MEM_MASTER] > 0, "%s: no host master", label);
            }
            if (gas == 4) keep[stage == 2 ? 0 : 2] = o;
            else host_run_free(&o);
        }
        if (gas == 4) keep[1] = ref[2];
        else host_run_free(&ref[2]);
        host_run_free(&ref[0]);
        host_run_free(&ref[1]);
    }

    /* Repeatability and hook-order / buffer-mode independence (gas 4). */
    struct variant {
        const char *what;
        int stage, order, threads, host_grad, contiguous, overlap;
        int base;
    } vs[] = {
        {"offload stage-2 repeated", 2, HOST_ORDER_NATURAL, 1, 0, 1, 1, 0},
        {"offload stage-2 shuffled hooks from 2 threads", 2, HOST_ORDER_SHUFFLED, 2, 0, 1, 1, 0},
        {"offload stage-2 host-owned grads", 2, HOST_ORDER_NATURAL, 1, 1, 1, 1, 0},
        {"offload stage-2 contiguous_gradients off", 2, HOST_ORDER_SHUFFLED, 1, 0, 0, 1, 0},
        {"offload stage-2 overlap_comm off", 2, HOST_ORDER_NATURAL, 1, 0, 1, 0, 0},
        {"offload stage-1 repeated", 1, HOST_ORDER_NATURAL, 1, 0, 1, 1, 2},
        {"offload stage-1 shuffled hooks from 2 threads", 1, HOST_ORDER_SHUFFLED, 2, 0, 1, 1, 2},
        {"offload stage-1 overlap_comm off", 1, HOST_ORDER_NATURAL, 1, 0, 1, 0, 2},
    };
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        host_run_cfg c = offload_cfg(steps, 4, vs[k].stage);
        c.order = vs[k].order;
        c.threads = vs[k].threads;
        c.host_grad = vs[k].host_grad;
        c.contiguous = vs[k].contiguous;
        c.overlap = vs[k].overlap;
        host_run_out o;
        host_run(&c, &o);
        if (ran(&o, vs[k].what) && keep[vs[k].base].params) expect_bitwise(&o, &keep[vs[k].base], vs[k].what);
        host_run_free(&o);
    }

    /* Selected by the config alone: same result as by name, master on the host. */
    {
        host_run_cfg c = offload_cfg(steps, 4, 2);
        c.plugin = "";
        host_run_out o;
        host_run(&c, &o);
        if (ran(&o, "offload from the config") && keep[0].params) {
            expect_bitwise(&o, &keep[0], "offload chosen by the config vs by name");
            CHECK(o.mem.current[ZERO_TIER_HOST][ZERO_MEM_MASTER] > 0,
                  "offload_optimizer.device=cpu did not select the offload plugin (no host master)");
        }
        host_run_free(&o);
    }

    /* gas 4: stage-1 partitioning forms stage 2's sums (bitwise); with
     * zero_optimization.reduce_once_per_window it sums the window locally
     * and reduces once per step, equal to rounding */
    if (keep[0].params && keep[2].params)
        expect_bitwise(&keep[2], &keep[0], "offload stage-1 gas=4 vs offload stage-2 (bitwise)");
    {
        host_run_cfg c = offload_cfg(steps, 4, 1);
        c.once_per_window = 1;
        host_run_out o;
        host_run(&c, &o);
        const char *what = "offload stage-1 gas=4 reduce_once_per_window";
        if (ran(&o, what) && keep[1].params) {
            expect_close(&o, &keep[1], what);
            CHECK(o.comm.reduction_passes == (uint64_t)steps, "%s: %llu reduction passes, expected %llu", what,
                  (unsigned long long)o.comm.reduction_passes, (unsigned long long)steps);
        }
        host_run_free(&o);
    }

    /* stage2 itself keeps nothing on the host: the comparison above is not vacuous */
    /* (the host tier holds only communication scratch: ZERO_MEM_OTHER, docs/memory.md) */
    if (keep[1].params)
        for (int g = 0; g < ZERO_MEM_NTAGS; g++)
            if (g != ZERO_MEM_OTHER) CHECK_EQ_INT(keep[1].mem.peak[ZERO_TIER_HOST][g], 0);

    for (int k = 0; k < 3; k++) host_run_free(&keep[k]);
    return check_mpi_finish();
}
