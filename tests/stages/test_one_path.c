/* The README's lifecycle, compiled and run (issue 34 item 9): one host code
 * path that trains with every plugin unchanged.  It uses what the README
 * shows: a tied weight (one parameter read twice, both gradient
 * contributions added into its one buffer), a stacked tensor (L layers'
 * slices in one array, gradients reported slice by slice), zero_gather into
 * a struct of void * in registration order, an "eval" phase that gathers
 * between steps, zero_set_hparams for the host's own lr schedule, and
 * gradient accumulation 2.  The gradients are synthetic but depend on every
 * gathered weight, the rank and the step, so a gather that handed out wrong
 * values would change the result.  Every plugin must end bitwise equal to
 * stage0 at the same rank count.
 *   mpirun -np N stages_test_one_path */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "host_util.h"
#include "zero.h"

enum { V = 37, C = 11, L = 3, STEPS = 6, GAS = 2 };

static void init_vals(float *x, size_t n, uint64_t salt) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(0.1 * th_u11(salt * 1000003u + i));
}

/* One plugin's run; the final weights (gathered on every rank) in out. */
static int run(const char *plugin, float *out, int rank) {
    static const char json[] =
        "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
        " \"gradient_clipping\": 1.0,"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
        " \"zero_optimization\": {\"reduce_bucket_size\": 64, \"stage3_param_persistence_threshold\": 0}}";
    zero_engine *e = NULL;
    char err[1024] = "";
    zero_status s = th_engine_create(json, plugin, 0, NULL, NULL, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s: %s", plugin, err);
    if (s != ZERO_OK) return -1;

    float *wte_init = malloc(sizeof(float) * V * C), *attn_init = malloc(sizeof(float) * L * C * C);
    init_vals(wte_init, (size_t)V * C, 1);
    init_vals(attn_init, (size_t)L * C * C, 2);
    zero_param *p_wte = NULL, *p_attn = NULL;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "wte";
    d.data = wte_init;
    d.numel = (uint64_t)V * C;
    CHECK_EQ_INT(zero_register_param(e, &d, &p_wte), ZERO_OK);
    d.name = "h.attn.w";
    d.data = attn_init;
    d.numel = (uint64_t)L * C * C;
    CHECK_EQ_INT(zero_register_stacked(e, &d, L, &p_attn), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    free(wte_init); /* libzero copied them */
    free(attn_init);

    struct { void *wte, *attn; } w;
    zero_param *all[] = {p_wte, p_attn};
    for (int step = 0; step < STEPS; step++) {
        zero_hparams h = ZERO_HPARAMS_INIT; /* the host's own schedule: lr halves every 2 steps */
        h.lr = 0.01 / (double)(1 << (step / 2));
        CHECK_EQ_INT(zero_set_hparams(e, &h), ZERO_OK);
        for (int micro = 0; micro < GAS; micro++) {
            CHECK_EQ_INT(zero_set_phase(e, "train"), ZERO_OK);
            CHECK_EQ_INT(zero_gather(e, all, 2, (void **)&w), ZERO_OK);
            const float *wte = w.wte, *attn = w.attn;
            /* "activations": a function of every weight, the rank and the micro-step */
            float act[C];
            const int tok = (rank * 7 + step * 3 + micro) % V;
            for (int c = 0; c < C; c++) act[c] = wte[tok * C + c];
            for (int l = 0; l < L; l++)
                for (int c = 0; c < C; c++) act[c] += 0.05f * attn[(size_t)l * C * C + (size_t)c * C + (size_t)(c + l) % C];
            /* the tied weight's second use: "output projection" row scores */
            float score = 0;
            for (int c = 0; c < C; c++) score += wte[((tok + 5) % V) * C + c] * act[c];
            CHECK_EQ_INT(zero_release(e, all, 2), ZERO_OK);

            /* backward, last layer first: the stacked tensor slice by slice ... */
            for (int l = L - 1; l >= 0; l--) {
                CHECK_EQ_INT(zero_gather(e, &p_attn, 1, &w.attn), ZERO_OK);
                const float *al = (const float *)w.attn + (size_t)l * C * C;
                void *gb = NULL;
                CHECK_EQ_INT(zero_slice_grad_buffer(e, p_attn, (uint32_t)l, &gb), ZERO_OK);
                float *g = gb;
                for (int i = 0; i < C * C; i++) g[i] += 0.01f * act[i % C] * score + 0.001f * al[i];
                CHECK_EQ_INT(zero_release(e, &p_attn, 1), ZERO_OK);
                CHECK_EQ_INT(zero_on_slice_ready(e, p_attn, (uint32_t)l, NULL), ZERO_OK);
            }
            /* ... then the tied weight: both uses ADD into its one buffer, one ready */
            void *gb = NULL;
            CHECK_EQ_INT(zero_grad_buffer(e, p_wte, &gb), ZERO_OK);
            float *g = gb;
            for (int c = 0; c < C; c++) g[tok * C + c] += 0.02f * act[c];                /* embedding use */
            for (int c = 0; c < C; c++) g[((tok + 5) % V) * C + c] += 0.03f * act[c] * score; /* projection use */
            CHECK_EQ_INT(zero_on_grad_ready(e, p_wte, NULL), ZERO_OK);
            zero_step_result r = ZERO_STEP_RESULT_INIT;
            CHECK_EQ_INT(zero_step(e, NULL, &r), ZERO_OK);
            CHECK(r.taken == (micro == GAS - 1), "%s: step %d micro %d taken %d", plugin, step, micro, r.taken);
        }
        /* evaluation between steps: its own phase (stage 3 records its own gather order) */
        CHECK_EQ_INT(zero_set_phase(e, "eval"), ZERO_OK);
        CHECK_EQ_INT(zero_gather(e, all, 2, (void **)&w), ZERO_OK);
        CHECK_EQ_INT(zero_release(e, all, 2), ZERO_OK);
    }
    CHECK_EQ_INT(zero_set_phase(e, "train"), ZERO_OK);
    CHECK_EQ_INT(zero_gather(e, all, 2, (void **)&w), ZERO_OK);
    memcpy(out, w.wte, sizeof(float) * V * C);
    memcpy(out + V * C, w.attn, sizeof(float) * L * C * C);
    CHECK_EQ_INT(zero_release(e, all, 2), ZERO_OK);
    zero_engine_destroy(e);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    th_set_comm(MPI_COMM_WORLD);
    const size_t n = (size_t)V * C + (size_t)L * C * C;
    float *ref = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));
    static const char *const plugins[] = {"stage0", "stage1", "stage2", "stage3", "offload"};
    for (size_t k = 0; k < sizeof plugins / sizeof *plugins; k++) {
        if (run(plugins[k], k == 0 ? ref : got, rank) != 0) continue;
        if (k == 0) continue;
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        CHECK(diff == 0, "%s: %zu of %zu weights differ from stage0 (rank %d of %d)", plugins[k], diff, n, rank,
              world);
    }
    /* the run moved the weights (a path that trained nothing would pass the comparison) */
    float *init = calloc(n, sizeof(float));
    init_vals(init, (size_t)V * C, 1);
    init_vals(init + V * C, (size_t)L * C * C, 2);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) moved += ref[i] != init[i];
    CHECK(moved > n / 2, "stage0 changed only %zu of %zu weights", moved, n);
    if (rank == 0) printf("one host path: 5 plugins at N = %d, %zu weights, %zu moved\n", world, n, moved);
    free(ref);
    free(got);
    free(init);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
