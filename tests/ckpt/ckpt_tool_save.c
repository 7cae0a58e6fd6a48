/* Checkpoints for the tools/zero-ckpt test (ckpt_tool.py):
 *   ckpt_tool_save small DIR   (mpirun -np N) stage3 trains 10 steps at N
 *       ranks and saves into DIR/small; rank 0 writes the gathered fp32
 *       parameters, in registration order, to DIR/small.params.f32 -- what
 *       consolidate must reproduce bitwise;
 *   ckpt_tool_save big DIR     (one process) stage0 registers four 4 Mi-
 *       element tensors and a small one and saves at step 0 into DIR/big,
 *       for the consolidate memory bound (largest tensor 16 MiB, model 64 MiB). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"

static int small(const char *dir, int rank) {
    char ck[512];
    snprintf(ck, sizeof ck, "%s/small", dir);
    host_run_cfg c = host_default_cfg();
    c.plugin = "stage3";
    c.steps = 10;
    c.mb = 4;
    c.ckpt_dir = ck;
    c.save_after = 10;
    host_run_out o;
    host_run(&c, &o);
    CHECK(o.status == ZERO_OK, "stage3 run: %s", o.error);
    if (rank == 0 && o.params) {
        char p[600];
        snprintf(p, sizeof p, "%s/small.params.f32", dir);
        FILE *f = fopen(p, "wb");
        CHECK(f && fwrite(o.params, sizeof(float), o.numel, f) == o.numel, "writing %s", p);
        if (f) fclose(f);
    }
    host_run_free(&o);
    return 0;
}

static int big(const char *dir) {
    zero_engine *e = NULL;
    char err[1024];
    zero_status s = th_engine_create("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\"}}",
                                     "stage0", 1, NULL, NULL, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s", err);
    if (s != ZERO_OK) return 1;
    const size_t n[5] = {(size_t)4 << 20, (size_t)4 << 20, 1000, (size_t)4 << 20, (size_t)4 << 20};
    float *init[5];
    for (int i = 0; i < 5; i++) {
        init[i] = malloc(n[i] * sizeof(float));
        for (size_t k = 0; k < n[i]; k++) init[i][k] = (float)((k * 2654435761u + (size_t)i) % 1000) / 1000.0f;
        char name[32];
        snprintf(name, sizeof name, "big%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i];
        d.numel = n[i];
        zero_param *h;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    }
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    for (int i = 0; i < 5; i++) free(init[i]);
    char ck[512];
    snprintf(ck, sizeof ck, "%s/big", dir);
    s = zero_save(e, ck);
    CHECK(s == ZERO_OK, "zero_save: %s", zero_last_error(e));
    zero_engine_destroy(e);
    return 0;
}

int main(int argc, char **argv) {
    int rank = 0, world = 1;
    check_mpi_init(&argc, &argv, &rank, &world);
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_tool_save small|big DIR\n");
        return 2;
    }
    if (!strcmp(argv[1], "small")) small(argv[2], rank);
    else if (rank == 0) big(argv[2]);
    return check_mpi_finish();
}
