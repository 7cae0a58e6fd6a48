/* Equivalence of the stage plugins (DESIGN.md section 9), run under mpirun
 * with N ranks; one process runs every configuration so CI pays one MPI
 * start-up per N:
 *  - stage0 on N ranks == one process (ZERO_COMM_SELF) on the concatenated
 *    batch, for accumulation 1 and 4 (relative L2 <= 1e-6);
 *  - stage1 and stage2, overlap on and off == stage0 (relative L2 <= 1e-6);
 *  - the same run repeated is bitwise identical;
 *  - hooks in a shuffled (rank-dependent) order, from two threads, with
 *    host-owned gradient buffers, or with contiguous_gradients off give
 *    bitwise the same parameters (buckets are static and launched in order);
 *  - one reduction pass per boundary (stage 0/1) or per micro-step (stage 2).
 * Usage: test_equivalence [steps] */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "mlp_host.h"
#include "run_compare.h"

static int rank_ = 0, world_ = 1;
static const double TOL = 1e-6;

static int ran(const host_run_out *o, const char *label) {
    CHECK(o->status == ZERO_OK, "%s failed: %s", label, o->error);
    return o->status == ZERO_OK;
}

static void expect_close(const host_run_out *a, const host_run_out *b, const char *what) {
    host_expect_close(a, b, what, TOL, 48);
}

static void expect_bitwise(const host_run_out *a, const host_run_out *b, const char *what) {
    host_expect_bitwise(a, b, what, 48);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    int steps = argc > 1 ? atoi(argv[1]) : 30;
    char label[128];

    host_run_out s0_gas4, s1_gas4, s2_gas4;
    memset(&s0_gas4, 0, sizeof s0_gas4);
    memset(&s1_gas4, 0, sizeof s1_gas4);
    memset(&s2_gas4, 0, sizeof s2_gas4);
    host_run_out s2_gas1_keep;
    memset(&s2_gas1_keep, 0, sizeof s2_gas1_keep);
    host_run_out s0_gas1_keep;
    memset(&s0_gas1_keep, 0, sizeof s0_gas1_keep);

    const int gas_list[2] = {1, 4};
    for (int gi = 0; gi < 2; gi++) {
        const int gas = gas_list[gi];
        host_run_cfg c = host_default_cfg();
        c.steps = steps;
        c.gas = gas;

        /* one process on the concatenated batch */
        host_run_cfg rc = c;
        rc.self_comm = 1;
        rc.mb = c.mb * world_;
        rc.data_rank = 0;
        rc.data_world = 1;
        host_run_out ref;
        host_run(&rc, &ref);
        ran(&ref, "reference (1 process, concatenated batch)");

        host_run_out s0;
        host_run(&c, &s0);
        snprintf(label, sizeof label, "stage0 gas=%d vs 1 process", gas);
        if (ran(&s0, "stage0")) expect_close(&s0, &ref, label);
        /* gas > 1: every plugin reduces every micro-step (stage 2's sums) */
        CHECK_EQ_INT(s0.comm.reduction_passes, (uint64_t)steps * gas);

        for (int ov = 0; ov <= 1; ov++) {
            const char *plugins[3] = {"stage0", "stage1", "stage2"};
            for (int pi = 0; pi < 3; pi++) {
                if (pi == 0 && ov == 1) continue; /* that is s0 itself */
                host_run_cfg pc = c;
                pc.plugin = plugins[pi];
                pc.overlap = ov;
                host_run_out o;
                host_run(&pc, &o);
                snprintf(label, sizeof label, "%s gas=%d overlap=%d vs stage0", plugins[pi], gas, ov);
                if (ran(&o, label)) expect_close(&o, &s0, label);
                uint64_t want = (uint64_t)steps * gas;
                CHECK(o.comm.reduction_passes == want, "%s: %llu reduction passes, expected %llu", label,
                      (unsigned long long)o.comm.reduction_passes, (unsigned long long)want);
                CHECK(o.comm.exposed_comm_seconds >= 0, "%s: negative exposed time", label);
                if (ov == 1 && gas == 4 && pi == 1) s1_gas4 = o;
                else if (ov == 1 && gas == 4 && pi == 2) s2_gas4 = o;
                else if (ov == 1 && gas == 1 && pi == 2) s2_gas1_keep = o;
                else host_run_free(&o);
            }
        }
        host_run_free(&ref);
        if (gas == 4) s0_gas4 = s0;
        else s0_gas1_keep = s0;
    }

    /* Accumulation 4: stage 0 and 1 form stage 2's window sums, so all
     * three are bitwise equal (docs/determinism.md); with
     * zero_optimization.reduce_once_per_window stage 0/1 sum the window
     * locally and reduce once (steps passes), equal to each other bitwise
     * and to the others to rounding. */
    if (s0_gas4.params && s1_gas4.params && s2_gas4.params) {
        expect_bitwise(&s0_gas4, &s2_gas4, "stage0 gas=4 vs stage2 (bitwise)");
        expect_bitwise(&s1_gas4, &s2_gas4, "stage1 gas=4 vs stage2 (bitwise)");
        host_run_out once[2];
        const char *names[2] = {"stage0", "stage1"};
        for (int k = 0; k < 2; k++) {
            host_run_cfg c = host_default_cfg();
            c.steps = steps;
            c.gas = 4;
            c.plugin = names[k];
            c.once_per_window = 1;
            host_run(&c, &once[k]);
            snprintf(label, sizeof label, "%s gas=4 reduce_once_per_window vs stage0", names[k]);
            if (ran(&once[k], label)) expect_close(&once[k], &s0_gas4, label);
            CHECK(once[k].comm.reduction_passes == (uint64_t)steps, "%s: %llu reduction passes, expected %llu",
                  label, (unsigned long long)once[k].comm.reduction_passes, (unsigned long long)steps);
        }
        if (once[0].params && once[1].params)
            expect_bitwise(&once[1], &once[0], "stage1 vs stage0, both reduce_once_per_window (bitwise)");
        host_run_free(&once[0]);
        host_run_free(&once[1]);
    }

    /* Repeatability and hook-order independence (accumulation 4, overlap on). */
    struct variant {
        const char *what;
        const char *plugin;
        int order, threads, host_grad, contiguous;
        const host_run_out *base;
    } vs[] = {
        {"stage0 repeated", "stage0", HOST_ORDER_NATURAL, 1, 0, 1, &s0_gas4},
        {"stage2 repeated", "stage2", HOST_ORDER_NATURAL, 1, 0, 1, &s2_gas4},
        {"stage1 shuffled hooks", "stage1", HOST_ORDER_SHUFFLED, 1, 0, 1, &s1_gas4},
        {"stage2 shuffled hooks", "stage2", HOST_ORDER_SHUFFLED, 1, 0, 1, &s2_gas4},
        {"stage0 hooks from 2 threads", "stage0", HOST_ORDER_NATURAL, 2, 0, 1, &s0_gas4},
        {"stage2 shuffled hooks from 2 threads", "stage2", HOST_ORDER_SHUFFLED, 2, 0, 1, &s2_gas4},
        {"stage0 host-owned grads", "stage0", HOST_ORDER_NATURAL, 1, 1, 1, &s0_gas4},
        {"stage2 host-owned grads", "stage2", HOST_ORDER_NATURAL, 1, 1, 1, &s2_gas4},
        {"stage2 contiguous_gradients off", "stage2", HOST_ORDER_SHUFFLED, 1, 0, 0, &s2_gas4},
    };
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        host_run_cfg c = host_default_cfg();
        c.steps = steps;
        c.gas = 4;
        c.plugin = vs[k].plugin;
        c.order = vs[k].order;
        c.threads = vs[k].threads;
        c.host_grad = vs[k].host_grad;
        c.contiguous = vs[k].contiguous;
        host_run_out o;
        host_run(&c, &o);
        if (ran(&o, vs[k].what)) expect_bitwise(&o, vs[k].base, vs[k].what);
        host_run_free(&o);
    }

    /* DeepSpeed's default reduce_bucket_size (5e8) on a small model: one
     * clamped bucket set, still equal. */
    {
        host_run_cfg c = host_default_cfg();
        c.steps = steps;
        c.plugin = "stage2";
        c.bucket = -1;
        host_run_out o;
        host_run(&c, &o);
        if (ran(&o, "stage2 default bucket size")) expect_close(&o, &s0_gas1_keep, "stage2 default bucket vs stage0");
        host_run_free(&o);
    }

    /* the runs above really trained: parameters moved away from the init */
    {
        host_run_cfg c = host_default_cfg();
        c.steps = 0;
        host_run_out init;
        host_run(&c, &init);
        if (ran(&init, "0 steps") && s0_gas4.params) {
            double moved = host_rel_l2(s0_gas4.params, init.params, init.numel);
            if (rank_ == 0) printf("N=%d  %-48s rel L2 %.3e\n", world_, "trained vs initial parameters", moved);
            CHECK(moved > 1e-3, "training barely moved the parameters (%.3e)", moved);
        }
        host_run_free(&init);
    }

    host_run_free(&s0_gas4);
    host_run_free(&s1_gas4);
    host_run_free(&s2_gas4);
    host_run_free(&s2_gas1_keep);
    host_run_free(&s0_gas1_keep);
    return check_mpi_finish();
}
