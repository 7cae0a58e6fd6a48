/* A weights-only load (ABI 1.8, zero_load_options.weights_only;
 * docs/checkpoints.md "Weights only"), one mpirun of W ranks:
 *
 *  1. saved: stage2, AdamW, 2 accumulation steps, 3 optimizer steps and
 *     then half a window (the save sits at micro-step 1), with a client
 *     state; the saver's parameters V are kept;
 *  2. equals a new run: for each (plugin, optimizer) below an engine that
 *     registered other initial values and loads the weights only has V
 *     bitwise at once, with step, skipped and micro-step 0 and the
 *     client state, and 3 steps later the parameters of an engine that
 *     registered V as initial values and took the same 3 steps -- its
 *     optimizer states were zero (momentum, Adam's moments) and its
 *     step counter restarted (WarmupLR's lr, Adam's bias correction):
 *       stage3 + SGD with momentum (another optimizer than the saver's),
 *       stage2 + AdamW (the saver's plugin and world size: still not its
 *       optimizer states),
 *       offload + AdamW after 2 steps of its own (a run in progress
 *       starts over too),
 *       stage3 with the optimizer's tiles (of 100) on NVMe and the parameter
 *       shard in host memory, AdamW, after a step of its own (the states
 *       are zeroed through the tiles),
 *       stage1 + Adam on the first ceil(W/2) ranks (another world size);
 *  3. bf16: a bf16 stage2 checkpoint loaded weights-only by bf16 stage3:
 *     the 16-bit parameters are the saver's, the steps 0;
 *  4. refused, each on every rank at once with nothing loaded (the
 *     parameters stay as they were): weights_only 2 on the last rank (its
 *     message says why, the others name it); a newer header's options
 *     with a field set; ranks that disagree on weights_only; another
 *     model's checkpoint (a parameter named differently).
 * Usage: test_ckpt_weights DIR   (under mpirun -np W) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"

static int rank_, world_;

enum { NP = 4 };
static const size_t numel_[NP] = {1000, 7, 333, 1};
static const char *const names_[NP] = {"p0", "p1", "p2", "p3"};

#define WARMUP "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.02, " \
               "\"warmup_num_steps\": 5}}"
#define CONFIG(stage, optim, extra)                                                                                 \
    "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": " #stage "}, "                      \
    "\"optimizer\": " optim extra "}"
#define ADAMW "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.02, \"weight_decay\": 0.01}}"
#define ADAM "{\"type\": \"Adam\", \"params\": {\"lr\": 0.02}}"
#define SGD "{\"type\": \"SGD\", \"params\": {\"lr\": 0.02, \"momentum\": 0.9}}"

typedef struct model {
    zero_engine *e;
    zero_param *h[NP];
    void *w[NP];
    size_t es; /* bytes per element */
    uint64_t t; /* micro-steps taken: the gradients' key */
} model;

static size_t total_numel(void) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += numel_[i];
    return n;
}

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* An engine over comm with the NP params; init (total_numel floats, or
 * NULL: values from `seed`) as the initial values.  names: NULL = names_. */
static int model_open(model *m, const char *plugin, const char *json, MPI_Comm comm, const float *init,
                      uint64_t seed, int bf16, const char *const *names) {
    memset(m, 0, sizeof *m);
    m->es = bf16 ? 2 : 4;
    char err[1024];
    th_set_comm(comm);
    zero_status s = th_engine_create(json, plugin, 0, NULL, NULL, &m->e, err, sizeof err);
    th_set_comm(MPI_COMM_WORLD);
    CHECK(s == ZERO_OK, "%s", err);
    if (s != ZERO_OK) return 0;
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        m->w[i] = malloc(numel_[i] * m->es);
        for (size_t k = 0; k < numel_[i]; k++) {
            const float v = init ? init[off + k] : (float)th_u11(seed * 1000003 + (uint64_t)i * 100000 + k);
            if (bf16) ((uint16_t *)m->w[i])[k] = bf16_of(v);
            else ((float *)m->w[i])[k] = v;
        }
        off += numel_[i];
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = (names ? names : names_)[i];
        d.data = m->w[i];
        d.numel = numel_[i];
        d.dtype = bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        CHECK_EQ_INT(zero_register_param(m->e, &d, &m->h[i]), ZERO_OK);
    }
    CHECK(zero_params_done(m->e) == ZERO_OK, "params_done: %s", zero_last_error(m->e));
    return 1;
}

static void model_close(model *m) {
    zero_engine_destroy(m->e);
    for (int i = 0; i < NP; i++) free(m->w[i]);
}

/* `micro` micro-steps; the gradient depends on the micro-step, not the rank */
static void model_train(model *m, int micro) {
    for (int t = 0; t < micro; t++, m->t++) {
        for (int i = 0; i < NP; i++) {
            void *g = NULL;
            CHECK_EQ_INT(zero_grad_buffer(m->e, m->h[i], &g), ZERO_OK);
            for (size_t k = 0; g && k < numel_[i]; k++) {
                const float v = (float)th_u11(m->t * 7919 + (uint64_t)i * 131 + k);
                if (m->es == 2) ((uint16_t *)g)[k] = bf16_of(v);
                else ((float *)g)[k] = v;
            }
            CHECK_EQ_INT(zero_on_grad_ready(m->e, m->h[i], NULL), ZERO_OK);
        }
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        CHECK(zero_step(m->e, &a, NULL) == ZERO_OK, "step: %s", zero_last_error(m->e));
    }
}

/* Every parameter's bytes (zero_gather: collective at stage 3), concatenated. */
static unsigned char *model_bytes(model *m) {
    unsigned char *v = calloc(total_numel(), m->es);
    void *ptrs[NP];
    CHECK_EQ_INT(zero_gather(m->e, m->h, NP, ptrs), ZERO_OK);
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        memcpy(v + off, ptrs[i], numel_[i] * m->es);
        off += numel_[i] * m->es;
    }
    CHECK_EQ_INT(zero_release(m->e, m->h, NP), ZERO_OK);
    return v;
}

static void expect_steps(model *m, const char *what) {
    zero_engine_info in = ZERO_ENGINE_INFO_INIT;
    CHECK_EQ_INT(zero_engine_info_get(m->e, &in), ZERO_OK);
    CHECK(in.global_step == 0 && in.skipped_steps == 0 && in.micro_step == 0,
          "%s: rank %d: after a weights-only load step %llu, skipped %llu, micro-step %u (expected 0, 0, 0)", what,
          rank_, (unsigned long long)in.global_step, (unsigned long long)in.skipped_steps, in.micro_step);
}

static zero_status load_weights(model *m, const char *dir, uint32_t weights_only) {
    zero_load_options o = ZERO_LOAD_OPTIONS_INIT;
    o.weights_only = weights_only;
    return zero_load_ex(m->e, dir, &o);
}

static const char client_[] = "step 7, epoch 2";

/* Case 2 for one (plugin, config) on comm: loaded vs registered (rjson:
 * the reference's config, NULL = json; another NVMe path). */
static void equals_new_run_2(const char *what, const char *plugin, const char *json, const char *rjson, MPI_Comm comm,
                             const char *dir, const float *v, int own_steps) {
    if (comm == MPI_COMM_NULL) return;
    model b, r;
    if (!model_open(&b, plugin, json, comm, NULL, 77, 0, NULL)) return;
    if (!model_open(&r, plugin, rjson ? rjson : json, comm, v, 0, 0, NULL)) {
        model_close(&b);
        return;
    }
    model_train(&b, own_steps); /* a run in progress: its states and counters must go */
    zero_status s = load_weights(&b, dir, 1);
    CHECK(s == ZERO_OK, "%s: rank %d: weights-only load: %s", what, rank_, zero_last_error(b.e));
    unsigned char *got = model_bytes(&b);
    CHECK(!memcmp(got, v, total_numel() * 4), "%s: rank %d: the loaded parameters are not the saver's", what, rank_);
    free(got);
    expect_steps(&b, what);
    const void *cs = NULL;
    uint64_t n = 0;
    CHECK(zero_client_state(b.e, &cs, &n) == ZERO_OK && n == sizeof client_ && cs && !memcmp(cs, client_, n),
          "%s: rank %d: the client state was not read (%llu bytes)", what, rank_, (unsigned long long)n);
    b.t = r.t = 1000; /* the same gradients from here on */
    model_train(&b, 3);
    model_train(&r, 3);
    unsigned char *x = model_bytes(&b), *y = model_bytes(&r);
    size_t diff = 0;
    for (size_t k = 0; k < total_numel(); k++) diff += memcmp(x + 4 * k, y + 4 * k, 4) != 0;
    CHECK(diff == 0, "%s: rank %d: 3 steps after the weights-only load, %zu of %zu values differ from a run that "
          "registered the same weights", what, rank_, diff, total_numel());
    if (rank_ == 0 && diff == 0) printf("  %s: loaded = saver's, 3 steps later = a new run from them, bitwise\n", what);
    free(x), free(y);
    model_close(&b);
    model_close(&r);
}

static void equals_new_run(const char *what, const char *plugin, const char *json, MPI_Comm comm, const char *dir,
                           const float *v, int own_steps) {
    equals_new_run_2(what, plugin, json, NULL, comm, dir, v, own_steps);
}

/* Case 4: a refused call changes nothing. */
static void refused(model *m, const unsigned char *before, const char *what, zero_status st, const char *needle) {
    CHECK(st == ZERO_ERR_INVALID_ARGUMENT || st == ZERO_ERR_MISMATCH, "%s: rank %d: status %d", what, rank_, (int)st);
    CHECK(needle == NULL || strstr(zero_last_error(m->e), needle), "%s: rank %d: message '%s' lacks '%s'", what, rank_,
          zero_last_error(m->e), needle ? needle : "");
    unsigned char *now = model_bytes(m);
    CHECK(!memcmp(now, before, total_numel() * m->es), "%s: rank %d: the parameters changed", what, rank_);
    free(now);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc < 2) {
        if (rank_ == 0) fprintf(stderr, "usage: test_ckpt_weights DIR\n");
        MPI_Finalize();
        return 2;
    }
    char root[4096], dir[4200], bdir[4200];
    snprintf(root, sizeof root, "%s", argv[1]);
    if (rank_ == 0) th_remove_dir(root);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(dir, sizeof dir, "%s/a", root);
    snprintf(bdir, sizeof bdir, "%s/bf16", root);

    /* 1. the saver: 3 steps and half a window */
    model a;
    float *v = NULL;
    if (model_open(&a, "stage2", "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2, "
                                 "\"zero_optimization\": {\"stage\": 2}, \"optimizer\": " ADAMW "}",
                   MPI_COMM_WORLD, NULL, 1, 0, NULL)) {
        model_train(&a, 7);
        v = (float *)model_bytes(&a);
        zero_save_options so = ZERO_SAVE_OPTIONS_INIT;
        so.tag = "mid-window";
        so.client_state = client_;
        so.client_state_bytes = sizeof client_;
        CHECK(zero_save_ex(a.e, dir, &so) == ZERO_OK, "save: %s", zero_last_error(a.e));
        model_close(&a);
    }

    /* 2. each equals a new run from the saver's weights */
    if (v) {
        equals_new_run("stage3 + SGD momentum (another optimizer)", "stage3", CONFIG(3, SGD, ", " WARMUP),
                       MPI_COMM_WORLD, dir, v, 0);
        equals_new_run("stage2 + AdamW (the saver's plugin and world)", "stage2", CONFIG(2, ADAMW, ", " WARMUP),
                       MPI_COMM_WORLD, dir, v, 0);
        equals_new_run("offload + AdamW after 2 steps of its own", "offload",
                       "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2, "
                       "\"offload_optimizer\": {\"device\": \"cpu\"}}, \"optimizer\": " ADAMW ", " WARMUP "}",
                       MPI_COMM_WORLD, dir, v, 2);
        char nvme[2][4300], cfg[2][9200];
        for (int i = 0; i < 2; i++) {
            snprintf(nvme[i], sizeof nvme[i], "%s/nvme-%c", root, "br"[i]);
            if (rank_ == 0) mkdir(nvme[i], 0755);
            snprintf(cfg[i], sizeof cfg[i],
                     "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, \"sub_group_size\": 100, "
                     "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, "
                     "\"offload_param\": {\"device\": \"cpu\"}}, \"optimizer\": " ADAMW ", " WARMUP "}",
                     nvme[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        equals_new_run_2("stage3, optimizer tiles on NVMe, after a step of its own", "stage3", cfg[0], cfg[1],
                         MPI_COMM_WORLD, dir, v, 1);
        const int k = (world_ + 1) / 2;
        MPI_Comm half;
        MPI_Comm_split(MPI_COMM_WORLD, rank_ < k ? 0 : MPI_UNDEFINED, rank_, &half);
        char what[96];
        snprintf(what, sizeof what, "stage1 + Adam at %d of %d ranks", k, world_);
        equals_new_run(what, "stage1", CONFIG(1, ADAM, ", " WARMUP), half, dir, v, 0);
        if (half != MPI_COMM_NULL) MPI_Comm_free(&half);
    }

    /* 3. bf16 */
    model s, t;
    if (model_open(&s, "stage2", "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, "
                                 "\"zero_optimization\": {\"stage\": 2}, \"optimizer\": " ADAMW "}",
                   MPI_COMM_WORLD, NULL, 2, 1, NULL)) {
        model_train(&s, 3);
        unsigned char *sv = model_bytes(&s);
        CHECK(zero_save(s.e, bdir) == ZERO_OK, "bf16 save: %s", zero_last_error(s.e));
        if (model_open(&t, "stage3", "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, "
                                     "\"zero_optimization\": {\"stage\": 3}, \"optimizer\": " SGD "}",
                       MPI_COMM_WORLD, NULL, 3, 1, NULL)) {
            CHECK(load_weights(&t, bdir, 1) == ZERO_OK, "bf16 weights-only load: %s", zero_last_error(t.e));
            unsigned char *tv = model_bytes(&t);
            CHECK(!memcmp(tv, sv, total_numel() * 2), "bf16: rank %d: the loaded parameters are not the saver's",
                  rank_);
            expect_steps(&t, "bf16");
            model_train(&t, 2);
            free(tv);
            model_close(&t);
        }
        free(sv);
        model_close(&s);
    }

    /* 4. refused, nothing loaded */
    model m;
    if (v && model_open(&m, "stage2", CONFIG(2, ADAMW, ""), MPI_COMM_WORLD, NULL, 5, 0, NULL)) {
        model_train(&m, 1);
        unsigned char *before = model_bytes(&m);
        zero_status st = load_weights(&m, dir, rank_ == world_ - 1 ? 2 : 1);
        refused(&m, before, "weights_only 2 on the last rank", st,
                rank_ == world_ - 1 ? "weights_only is 2" : "refused its zero_load_options");
        struct {
            zero_load_options o;
            uint32_t later; /* a newer header's field */
        } big;
        memset(&big, 0, sizeof big);
        big.o.struct_size = sizeof big;
        big.o.weights_only = 1;
        big.later = 1;
        refused(&m, before, "a newer header's field set", zero_load_ex(m.e, dir, &big.o), "zero_load_options");
        refused(&m, before, "ranks that disagree", load_weights(&m, dir, rank_ == 0), "disagree");
        zero_engine_info in = ZERO_ENGINE_INFO_INIT;
        CHECK(zero_engine_info_get(m.e, &in) == ZERO_OK && in.global_step == 1,
              "rank %d: a refused load changed the step (%llu)", rank_, (unsigned long long)in.global_step);
        free(before);
        model_close(&m);
    }
    static const char *const other[NP] = {"p0", "p1", "q2", "p3"};
    if (v && model_open(&m, "stage3", CONFIG(3, ADAMW, ""), MPI_COMM_WORLD, NULL, 5, 0, other)) {
        unsigned char *before = model_bytes(&m);
        refused(&m, before, "another model", load_weights(&m, dir, 1), "'q2'");
        free(before);
        model_close(&m);
    }
    free(v);
    int bad = check_failures_ != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank_ == 0 && !any) th_remove_dir(root); /* kept for a look when something failed */
    return check_mpi_finish();
}
