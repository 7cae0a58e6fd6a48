/* stage3 memory per rank:
 *  - params + grads + master + optimizer state = (4+4+8) * part_numel for
 *    fp32 AdamW (no master: the fp32 shard is its own master), and
 *    part_numel * N exceeds Psi only by the layout padding, which the test
 *    bounds by (nparams + ngroups * N) * align;
 *  - gather buffers never above stage3_max_live_parameters during training;
 *  - peak of stage3 <= peak of stage2 (N >= 2) on a demo-sized model (8
 *    layers of width 96, ~70k params) with a bounded prefetch.
 * Usage: test_stage3_memory   (under mpirun -np N) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "s3_host.h"

#define ALIGN 16 /* elements: the engine's param alignment (core/api.c) */
#define NGROUPS 2 /* weights, biases */

static uint64_t model_state(const zero_memory_stats *m) {
    return m->current[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS] + m->current[ZERO_TIER_DEVICE][ZERO_MEM_GRADS] +
           m->current[ZERO_TIER_DEVICE][ZERO_MEM_MASTER] + m->current[ZERO_TIER_DEVICE][ZERO_MEM_OPTIM];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* 1. the formula */
    s3_cfg c = s3_default_cfg();
    c.steps = 3;
    c.prefetch = 2 * 29 * 29;
    c.max_live = 3 * 29 * 29;
    c.reuse = 0;
    s3_out o;
    s3_run(&c, &o);
    CHECK(o.status == ZERO_OK, "%s (%s)", zero_status_string(o.status), o.error);
    if (o.status == ZERO_OK) {
        const zero_memory_stats *m = &o.mem_after_done;
        uint64_t params = m->current[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS];
        uint64_t part = params / 4;
        CHECK(params % 4 == 0, "param shard is not whole fp32 elements");
        CHECK_EQ_INT(m->current[ZERO_TIER_DEVICE][ZERO_MEM_GRADS], 4 * part);
        CHECK_EQ_INT(m->current[ZERO_TIER_DEVICE][ZERO_MEM_MASTER], 0);
        CHECK_EQ_INT(m->current[ZERO_TIER_DEVICE][ZERO_MEM_OPTIM], 8 * part);
        CHECK_EQ_INT(model_state(m), 16 * part);
        uint64_t psi = o.numel, pad_bound = ((uint64_t)o.nparams + (uint64_t)NGROUPS * world) * ALIGN;
        CHECK(part * world >= psi, "shards cover %llu < Psi %llu elements", (unsigned long long)(part * world),
              (unsigned long long)psi);
        CHECK(part * world - psi <= pad_bound, "padding %llu elements > bound %llu",
              (unsigned long long)(part * world - psi), (unsigned long long)pad_bound);
        /* unchanged by training: no full copy appears later */
        CHECK_EQ_INT(model_state(&o.mem), 16 * part);
        uint64_t gpeak = o.mem.peak[ZERO_TIER_DEVICE][ZERO_MEM_GATHER];
        CHECK(gpeak <= (uint64_t)c.max_live * 4, "gather peak %llu bytes > max_live %lld elements",
              (unsigned long long)gpeak, c.max_live);
        CHECK(gpeak > 0, "no gather buffer accounted");
        if (rank == 0)
            printf("Psi %llu, part %llu x %d ranks: model state %llu bytes/rank (16 Psi/N = %.0f), gather peak %llu\n",
                   (unsigned long long)psi, (unsigned long long)part, world,
                   (unsigned long long)model_state(m), 16.0 * (double)psi / world, (unsigned long long)gpeak);
    }
    s3_out_free(&o);

    /* 2. stage3 peak <= stage2 peak on a demo-sized model */
    s3_cfg d = s3_default_cfg();
    d.steps = 3;
    d.din = 48;
    d.h = 96;
    d.dout = 64;
    d.nlin = 8;
    d.bucket = 4096;
    s3_cfg d2 = d;
    d2.plugin = "stage2";
    s3_out o2, o3;
    s3_run(&d2, &o2);
    CHECK(o2.status == ZERO_OK, "stage2: %s (%s)", zero_status_string(o2.status), o2.error);
    d.prefetch = 96 * 96;            /* one layer ahead */
    d.max_live = 2 * 96 * 96 + 1024; /* the layer in use + the next one + persistent biases */
    d.persist = 100;                 /* biases stay gathered */
    d.reuse = 0;
    s3_run(&d, &o3);
    CHECK(o3.status == ZERO_OK, "stage3: %s (%s)", zero_status_string(o3.status), o3.error);
    if (o2.status == ZERO_OK && o3.status == ZERO_OK) {
        uint64_t p2 = o2.mem.peak_total[ZERO_TIER_DEVICE], p3 = o3.mem.peak_total[ZERO_TIER_DEVICE];
        if (rank == 0)
            printf("demo-sized model (Psi %zu), N=%d: peak stage2 %llu bytes, stage3 %llu bytes (%.2fx)\n", o3.numel,
                   world, (unsigned long long)p2, (unsigned long long)p3, (double)p3 / (double)p2);
        for (int t = 0; t < ZERO_MEM_NTAGS && rank == 0; t++)
            printf("  %-8s peak stage2 %8llu  stage3 %8llu\n", zero_mem_tag_name(t),
                   (unsigned long long)o2.mem.peak[ZERO_TIER_DEVICE][t], (unsigned long long)o3.mem.peak[ZERO_TIER_DEVICE][t]);
        CHECK(p3 <= p2, "stage3 peak %llu > stage2 peak %llu", (unsigned long long)p3, (unsigned long long)p2);
        CHECK(o3.mem.peak[ZERO_TIER_DEVICE][ZERO_MEM_GATHER] <= (uint64_t)d.max_live * 4, "gather peak above max_live");
    }
    s3_out_free(&o2);
    s3_out_free(&o3);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
