/* The step cross-checks of zero_save and zero_load (docs/checkpoints.md),
 * one mpirun of 4 ranks:
 *
 *  1. save: rank 0 has run one more micro-step than the others (stage0,
 *     gradient accumulation 2 with reduce_once_per_window: stage 0 then
 *     reduces only at the boundary, so no collective runs in that
 *     micro-step); zero_save fails with
 *     ZERO_ERR_MISMATCH on EVERY rank, naming the step ranges, and nothing
 *     is written (not even the root directory);
 *  2. load: a stage2 x4 checkpoint whose rank-1 core blob says global step
 *     11 while the manifest says 10, with the blob's CRC-32C rewritten in
 *     the manifest and the manifest's own checksum recomputed
 *     (tests/ckpt/ckpt_reseal) so that only the core blob cross-check can
 *     catch it: zero-ckpt verify refuses it (exit 1, it checks what
 *     zero_load checks) and zero_load fails with ZERO_ERR_IO on every rank,
 *     naming the field, both values and the file.
 * Usage: test_ckpt_steps DIR ZERO_CKPT   (under mpirun -np 4) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"

static int rank_, world_;

/* CRC-32C (Castagnoli, reflected 0x82F63B78), bitwise: independent of the
 * library's implementation. */
static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void save_at_different_steps(const char *root) {
    zero_engine *e = NULL;
    char err[1024];
    /* reduce_once_per_window: at gas > 1 stage 0 otherwise reduces every
     * micro-step (docs/determinism.md), and rank 0's lone micro-step would
     * wait in that collective for the others */
    zero_status s = th_engine_create("{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2, "
                                     "\"zero_optimization\": {\"stage\": 0, \"reduce_once_per_window\": true}, "
                                     "\"optimizer\": {\"type\": \"AdamW\"}}",
                                     "stage0", 0, NULL, NULL, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s", err);
    if (s != ZERO_OK) return;
    float w[100];
    for (int i = 0; i < 100; i++) w[i] = (float)i / 100.0f;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = w;
    d.numel = 100;
    zero_param *h;
    CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    if (rank_ == 0) { /* one micro-step inside the window: rank 0 only */
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        zero_step_result r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        CHECK_EQ_INT(zero_step(e, &a, &r), ZERO_OK);
        CHECK(r.boundary == 0, "micro-step 1 of 2 is not a boundary");
    }
    double t0 = MPI_Wtime();
    s = zero_save(e, root);
    const char *msg = zero_last_error(e);
    CHECK(s == ZERO_ERR_MISMATCH, "ranks at different steps: rank %d: zero_save gave %s (%s)", rank_,
          zero_status_string(s), msg);
    CHECK(strstr(msg, "ranks are at different steps") && strstr(msg, "micro_step 0..1") && strstr(msg, "nothing written"),
          "rank %d: message '%s'", rank_, msg);
    CHECK(MPI_Wtime() - t0 < 30, "rank %d took %.1f s", rank_, MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(access(root, F_OK) != 0, "rank %d: %s was created by a refused save", rank_, root);
    if (rank_ == 0) printf("%-40s every rank: %s\n", "save at different micro-steps:", msg);
    zero_engine_destroy(e);
}

static host_run_cfg cfg(void) {
    host_run_cfg c = host_default_cfg();
    c.plugin = "stage2";
    c.steps = 11;
    c.gas = 1;
    c.mb = 3;
    return c;
}

/* Rank 0: core.rank1.bin's global step 10 -> 11 (payload offset 16: after
 * magic and version), its chunk CRC rewritten in the manifest. */
static void rewrite_core_step(const char *ck) {
    char path[1200], man[1200];
    snprintf(path, sizeof path, "%s/core.rank1.bin", ck);
    snprintf(man, sizeof man, "%s/manifest.json", ck);
    FILE *f = fopen(path, "r+b");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    CHECK(f && n > 16 + 24 && !memcmp(buf, "ZEROCKB1", 8), "read %s", path);
    if (!f) return;
    uint64_t step;
    memcpy(&step, buf + 16 + 16, 8);
    CHECK(step == 10, "core.rank1.bin says step %llu, want 10", (unsigned long long)step);
    char old_hex[9], new_hex[9];
    snprintf(old_hex, sizeof old_hex, "%08x", crc32c(buf + 16, n - 16));
    step = 11;
    memcpy(buf + 16 + 16, &step, 8);
    snprintf(new_hex, sizeof new_hex, "%08x", crc32c(buf + 16, n - 16));
    fseek(f, 0, SEEK_SET);
    fwrite(buf, 1, n, f);
    fclose(f);
    /* the manifest: this file's record's "crc32c" */
    FILE *m = fopen(man, "rb");
    static char text[1 << 20];
    size_t len = m ? fread(text, 1, sizeof text - 1, m) : 0;
    if (m) fclose(m);
    text[len] = 0;
    char *rec = strstr(text, "\"core.rank1.bin\"");
    char *c = rec ? strstr(rec, old_hex) : NULL;
    CHECK(c != NULL, "manifest record of core.rank1.bin with crc32c %s", old_hex);
    if (!c) return;
    memcpy(c, new_hex, 8);
    m = fopen(man, "wb");
    fwrite(text, 1, len, m);
    fclose(m);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "\"$CKPT_RESEAL\" '%s'", man); /* the manifest's own checksum, as a buggy writer would */
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void load_with_core_of_another_step(const char *root, const char *tool) {
    host_run_cfg s = cfg();
    s.ckpt_dir = root;
    s.save_after = 10;
    s.steps = 10;
    host_run_out o;
    host_run(&s, &o);
    CHECK(o.status == ZERO_OK, "save: %s", o.error);
    host_run_free(&o);
    char ck[1024];
    th_ckpt_latest(root, ck, sizeof ck);
    if (rank_ == 0) {
        rewrite_core_step(ck);
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "'%s' verify '%s' | grep -q 'BAD.*global_step: 10, but core.rank1.bin.* says 11'",
                 tool, root);
        CHECK(system(cmd) == 0, "zero-ckpt verify does not refuse a core blob at another step by name");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    host_run_cfg r = cfg();
    r.ckpt_dir = root;
    r.resume_from = 10;
    double t0 = MPI_Wtime();
    host_run(&r, &o);
    CHECK(o.status == ZERO_ERR_IO, "core blob at another step: rank %d: load gave %s (%s)", rank_,
          zero_status_string(o.status), o.error);
    CHECK(strstr(o.error, "global_step: 10, but core.rank1.bin (checksummed, rank 1) says 11"),
          "rank %d: message '%s'", rank_, o.error);
    CHECK(MPI_Wtime() - t0 < 30, "rank %d took %.1f s", rank_, MPI_Wtime() - t0);
    if (rank_ == 0) printf("%-40s every rank: %s\n", "load, a core blob at another step:", o.error);
    host_run_free(&o);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc != 3 || world_ != 4) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np 4 test_ckpt_steps DIR ZERO_CKPT\n");
        return check_mpi_finish() + 1;
    }
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/save", argv[1]);
    snprintf(b, sizeof b, "%s/load", argv[1]);
    if (rank_ == 0) th_remove_dir(a), th_remove_dir(b);
    MPI_Barrier(MPI_COMM_WORLD);
    save_at_different_steps(a);
    MPI_Barrier(MPI_COMM_WORLD);
    load_with_core_of_another_step(b, argv[2]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) th_remove_dir(b);
    return check_mpi_finish();
}
