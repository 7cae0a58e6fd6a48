/* offload with bf16 and fp16 models (issue 5 with issue 7's mixed-precision
 * host, tests/precision/prec_host.c), one mpirun per N:
 *  - offload with stage-1 / stage-2 partitioning is BITWISE equal to stage1
 *    / stage2 of the same precision (gas 1 and 2): the host master starts as
 *    the exact widening of the 16-bit params, the gradient crosses to the
 *    host unchanged, the same CPU kernel steps it, and the new weights are
 *    rounded to the model dtype (RNE) on the host before they cross back,
 *    exactly as the stages' fused copy-out rounds them;
 *  - at gas 1 both equal stage0 within 1e-5 (relative L2), and a repeated
 *    run is bitwise identical;
 *  - fp16 overflow injection: offload skips the same steps with the same
 *    loss-scale sequence, norms and results as stage2.
 * Usage: test_offload_precision [steps] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "../precision/prec_host.h"

static int rank_ = 0, world_ = 1;

static const char *dtname(zero_dtype dt) { return dt == ZERO_DTYPE_BF16 ? "bf16" : "fp16"; }

static int ran(const prec_out *o, const char *label) {
    CHECK(o->status == ZERO_OK, "N=%d %s failed: %s", world_, label, o->error);
    return o->status == ZERO_OK && o->params;
}

static void equivalence(zero_dtype dt, int steps, int gas) {
    prec_cfg c = prec_default_cfg();
    c.dtype = dt;
    c.steps = steps;
    c.gas = gas;
    prec_out ref;
    prec_run(&c, &ref);
    if (!ran(&ref, "stage0")) return;
    for (int stage = 1; stage <= 2; stage++) {
        prec_cfg cs = c, co = c;
        cs.plugin = stage == 1 ? "stage1" : "stage2";
        cs.stage = stage;
        co.plugin = "offload";
        co.stage = stage;
        prec_out st, of, again;
        prec_run(&cs, &st);
        prec_run(&co, &of);
        prec_run(&co, &again);
        char label[96];
        snprintf(label, sizeof label, "%s gas%d offload stage-%d", dtname(dt), gas, stage);
        if (ran(&st, cs.plugin) && ran(&of, label) && ran(&again, label)) {
            int same = memcmp(of.params, st.params, of.numel * sizeof(float)) == 0;
            int rep = memcmp(of.params, again.params, of.numel * sizeof(float)) == 0;
            double d0 = prec_rel_l2(of.params, ref.params, of.numel);
            if (rank_ == 0)
                printf("N=%d %-26s vs %s: %s; vs stage0 rel L2 %.3e; repeat %s\n", world_, label, cs.plugin,
                       same ? "bitwise identical" : "DIFFERENT", d0, rep ? "bitwise identical" : "DIFFERENT");
            CHECK(same, "N=%d %s: not bitwise equal to %s (rel L2 %.3e)", world_, label, cs.plugin,
                  prec_rel_l2(of.params, st.params, of.numel));
            CHECK(rep, "N=%d %s: repeated run differs", world_, label);
            if (gas == 1) CHECK(d0 <= 1e-5, "N=%d %s vs stage0: rel L2 %.3e", world_, label, d0);
            int taken = 0;
            for (int s = 0; s < of.nsteps; s++) taken += of.taken[s];
            CHECK_EQ_INT(taken, steps);
        }
        prec_free(&st);
        prec_free(&of);
        prec_free(&again);
    }
    prec_free(&ref);
}

static void overflow_like_stage2(void) {
    prec_cfg c = prec_default_cfg();
    c.dtype = ZERO_DTYPE_F16;
    c.steps = 14;
    c.stage = 2;
    c.fp16_json = "{\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 8, \"loss_scale_window\": 3, "
                  "\"hysteresis\": 2, \"min_loss_scale\": 1}";
    c.inject_mask = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8) | (1u << 10);
    prec_cfg co = c;
    c.plugin = "stage2";
    co.plugin = "offload";
    prec_out s2, of;
    prec_run(&c, &s2);
    prec_run(&co, &of);
    if (ran(&s2, "stage2 fp16 overflow") && ran(&of, "offload fp16 overflow")) {
        int ok = of.nsteps == s2.nsteps, skipped = 0;
        for (int s = 0; ok && s < of.nsteps; s++) {
            ok &= of.overflow[s] == s2.overflow[s] && of.taken[s] == s2.taken[s] && of.scale[s] == s2.scale[s] &&
                  of.norm[s] == s2.norm[s];
            skipped += of.overflow[s];
        }
        if (rank_ == 0) printf("N=%d fp16 overflow injection: offload skipped %d of %d steps, %s stage2\n", world_,
                               skipped, of.nsteps, ok ? "same sequence as" : "DIFFERENT from");
        CHECK(ok, "N=%d rank %d: offload's overflow/scale/norm sequence differs from stage2's", world_, rank_);
        CHECK(skipped == 5, "N=%d: %d skipped steps, 5 injected", world_, skipped);
        CHECK(memcmp(of.params, s2.params, of.numel * sizeof(float)) == 0,
              "N=%d: offload after overflows not bitwise equal to stage2", world_);
    }
    prec_free(&s2);
    prec_free(&of);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    const zero_dtype dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    for (int d = 0; d < 2; d++)
        for (int gas = 1; gas <= 2; gas++) equivalence(dts[d], steps, gas);
    overflow_like_stage2();
    return check_mpi_finish();
}
