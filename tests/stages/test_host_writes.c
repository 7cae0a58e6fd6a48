/* (1.7.4) A C host that writes parameters after zero_params_done, against
 * the contract (core/host_writes.h): a ZERO_PARAM_HOST_OWNED tensor (the
 * step's writeback overwrote it), libzero's own copy through zero_gather's
 * pointer below stage 3 (fp32 went on from it, bf16 and offload lost it),
 * a stage-3 gathered parameter (lost at zero_release, or at N = 1 stepped
 * on).  zero_step refuses the
 * boundary instead.  Under mpirun with N ranks, for stage0, stage1, stage2
 * and offload, fp32 and bf16 params, gradient accumulation 1 and 2 (the
 * write then lands inside the window):
 *  - the host writes on the last rank only: zero_step returns
 *    ZERO_ERR_STATE on every rank, that rank naming the param (and the
 *    element), the others saying that another rank found one; no weight
 *    moved (libzero's values the same before and after); a second zero_step
 *    is refused again (the write still stands);
 *  - the window was kept: the host puts libzero's values back (a tensor)
 *    or loads the checkpoint of step 1 (libzero's copy: its old values are
 *    nowhere else) and calls zero_step again, which trains on; the run ends
 *    bitwise where a run without the write (with the same load) ends;
 *  - what the default (sampled) check finds: every element rewritten
 *    (loading weights), a contiguous unaligned run of 4160 bytes in the
 *    middle, the first element, the last element; one element in the
 *    middle away from the sampled lines is found only with
 *    ZERO_CHECK_HOST_WRITES=full, and with =off nothing is refused and the
 *    write is overwritten by the step (the old behaviour, on request);
 *  - stage 3: a write into a gathered parameter (a scratch copy, or at
 *    N = 1 libzero's own storage) is refused the same way until a load;
 *    (1.7.7) so is a write into a slice of a stacked param gathered with
 *    zero_gather_slices (stage 3; stage 2's slices are its copy);
 *  - no false alarm: plain training, and zero_save + zero_load between
 *    two steps, in every run.
 * Usage: test_host_writes (under mpirun, any N). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/bf16.h"
#include "../common/host_util.h"
#include "../common/mpi_check.h"

enum { NP = 3, STEPS = 4, EPISODE = 2 /* the optimizer step before which the host writes */ };
static const size_t kNumel[NP] = {3001, 20000, 7}; /* p1: 80 KB in fp32, many 4 KiB strides; odd sizes */

static int rank_ = 0, world_ = 1;
static char ckdir_[256];

typedef enum { W_NONE, W_ALL, W_RUN, W_FIRST, W_LAST, W_MIDDLE, W_GATHER, W_SLICE } write_kind;
static const char *const kWriteName[] = {"no write",          "every element",     "an unaligned 4160-byte run",
                                         "the first element", "the last element",  "one middle element",
                                         "through zero_gather", "through zero_gather_slices"};
/* W_SLICE: p1 is registered stacked, LAYERS slices, and slice SLICE written */
enum { LAYERS = 4, SLICE = 2 };

typedef struct run_cfg {
    const char *plugin;
    int bf16, gas;
    write_kind write;
    const char *mode; /* ZERO_CHECK_HOST_WRITES; NULL: unset */
    int refused;      /* expected: the write is found */
    int plain;        /* params registered without ZERO_PARAM_HOST_OWNED */
    int load;         /* W_GATHER's reference: gather, zero_load and step at the episode, no write */
    int stacked;      /* p1 registered with zero_register_stacked; the episode gathers its slice SLICE */
} run_cfg;

static size_t esize(const run_cfg *c) { return c->bf16 ? 2 : 4; }

/* The host's own write into p1 (on the last rank only). */
static void host_write(const run_cfg *c, unsigned char *t) {
    const size_t n = kNumel[1] * esize(c);
    switch (c->write) {
    case W_ALL: memset(t, 0x3c, n); break; /* "loaded weights" */
    case W_RUN: memset(t + n / 2 + 1, 0x3c, 4160); break;
    case W_FIRST: t[1] ^= 0x40; break;
    case W_LAST: t[n - 1] ^= 0x40; break;
    case W_MIDDLE: t[3 * 4096 + 1000] ^= 0x40; break; /* between two sampled lines */
    case W_NONE:
    case W_GATHER:
    case W_SLICE: break; /* not the tensor: see run() */
    }
}

/* Deterministic gradients of micro-step s (different on each rank). */
static void report_grads(const run_cfg *c, zero_engine *e, zero_param **h, int s) {
    for (int i = NP - 1; i >= 0; i--) {
        void *g = NULL;
        CHECK_EQ_INT(zero_grad_buffer(e, h[i], &g), ZERO_OK);
        for (size_t k = 0; g && k < kNumel[i]; k++) {
            const float v = 0.01f * (float)th_u11(((uint64_t)s << 40) ^ ((uint64_t)i << 32) ^ (k * 31 + (uint64_t)rank_));
            if (c->bf16) ((uint16_t *)g)[k] = th_to_bf16(v);
            else ((float *)g)[k] = v;
        }
        CHECK_EQ_INT(zero_on_grad_ready(e, h[i], NULL), ZERO_OK);
    }
}

/* libzero's values of every param, raw bytes, one after another. */
static void libzero_values(const run_cfg *c, zero_engine *e, zero_param **h, unsigned char *out) {
    void *ptr[NP] = {0};
    CHECK_EQ_INT(zero_gather(e, h, NP, ptr), ZERO_OK);
    for (int i = 0; i < NP; i++) {
        if (ptr[i]) memcpy(out, ptr[i], kNumel[i] * esize(c));
        out += kNumel[i] * esize(c);
    }
    CHECK_EQ_INT(zero_release(e, h, NP), ZERO_OK);
}

static size_t total_bytes(const run_cfg *c) { return (kNumel[0] + kNumel[1] + kNumel[2]) * esize(c); }

/* The boundary of optimizer step EPISODE, the host's write made at the
 * window's first micro-step (saved: the tensor before it): the refusal (or
 * not), the repair and the step. */
static void episode(const run_cfg *c, zero_engine *e, zero_param **h, unsigned char **t, const unsigned char *saved,
                    const char *what) {
    const int writer = rank_ == world_ - 1;
    const size_t n1 = kNumel[1] * esize(c);
    unsigned char *before = malloc(total_bytes(c)), *after = malloc(total_bytes(c));
    if (c->mode) setenv("ZERO_CHECK_HOST_WRITES", c->mode, 1);
    else unsetenv("ZERO_CHECK_HOST_WRITES");
    libzero_values(c, e, h, before);
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    zero_status s = zero_step(e, NULL, &r);
    if (c->refused) {
        CHECK(s == ZERO_ERR_STATE, "%s: zero_step gave %s, want ZERO_ERR_STATE", what, zero_status_string(s));
        const char *msg = zero_last_error(e);
        if (writer && c->write == W_ALL && !c->bf16 && c->gas == 1 && !strcmp(c->plugin, "stage2"))
            printf("rank %d, %s: %s\n", rank_, what, msg); /* what a host reads */
        if (writer) {
            CHECK(strstr(msg, "param 'p1'") && strstr(msg, "written by the host after zero_params_done") &&
                      strstr(msg, "element ") && strstr(msg, "no weight moved"),
                  "%s: the writer's message: %s", what, msg);
            /* (1.13) one changed byte: the element holding it and both of its values, whichever of its
             * bytes changed (byte 1: inside element 0) */
            if (c->write == W_FIRST || c->write == W_LAST || c->write == W_MIDDLE) {
                const size_t es = esize(c), byte = c->write == W_FIRST ? 1 : c->write == W_LAST ? n1 - 1 : 3 * 4096 + 1000;
                const size_t el = byte / es;
                float hv, lv;
                if (c->bf16) {
                    uint16_t a, b;
                    memcpy(&a, t[1] + el * es, 2), memcpy(&b, saved + el * es, 2);
                    hv = th_from_bf16(a), lv = th_from_bf16(b);
                } else {
                    memcpy(&hv, t[1] + el * es, 4), memcpy(&lv, saved + el * es, 4);
                }
                char want[200];
                snprintf(want, sizeof want, "element %zu is %.9g in the host's tensor but %.9g in libzero's copy", el,
                         (double)hv, (double)lv);
                CHECK(strstr(msg, want) != NULL, "%s: the writer's message lacks '%s': %s", what, want, msg);
            }
        } else {
            CHECK(strstr(msg, "another rank found a parameter written by its host") != NULL,
                  "%s: another rank's message: %s", what, msg);
        }
        libzero_values(c, e, h, after);
        CHECK(memcmp(before, after, total_bytes(c)) == 0, "%s: a weight moved in the refused step", what);
        CHECK(zero_step(e, NULL, &r) == ZERO_ERR_STATE, "%s: the second zero_step was not refused", what);
        /* the host takes libzero's values back, and the kept window trains on */
        memcpy(t[1], saved, n1);
        s = zero_step(e, NULL, &r);
        CHECK(s == ZERO_OK && r.taken, "%s: zero_step after the repair: %s (taken %d)", what, zero_last_error(e),
              (int)r.taken);
    } else {
        CHECK(s == ZERO_OK && r.taken, "%s: zero_step refused (not expected): %s", what, zero_last_error(e));
        /* not found: the step's writeback replaced the host's write with libzero's values */
        libzero_values(c, e, h, after);
        CHECK(memcmp(t[1], after + kNumel[0] * esize(c), n1) == 0, "%s: the host's tensor is not libzero's after the "
              "step", what);
    }
    unsetenv("ZERO_CHECK_HOST_WRITES");
    free(before);
    free(after);
}

/* W_GATHER (and its reference, c->load): the last rank wrote libzero's copy
 * of p1 through zero_gather's pointer; it cannot be put back (the host has
 * no other copy), so after the refusals the host loads the checkpoint of
 * step 1 and trains on; the reference loads it at the same point. */
static void gather_episode(const run_cfg *c, zero_engine *e, zero_param **h, int s_index, const char *what) {
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    if (!c->load) {
        for (int k = 0; k < 2; k++) { /* refused, and again while the copy differs */
            const zero_status s = zero_step(e, NULL, &r);
            CHECK(s == ZERO_ERR_STATE, "%s: zero_step %d gave %s, want ZERO_ERR_STATE", what, k,
                  zero_status_string(s));
            const char *msg = zero_last_error(e);
            if (rank_ == world_ - 1) {
                if (k == 0 && !c->bf16 && c->plain && (!strcmp(c->plugin, "stage1") || !strcmp(c->plugin, "stage3")))
                    printf("rank %d, %s: %s\n", rank_, what, msg); /* what a host reads */
                /* a host-owned param's tensor no longer matches the copy; a plain one's copy its fingerprint */
                const char *want = !strcmp(c->plugin, "stage3")
                                       ? (c->stacked ? "param 'p1' (its slice 2) was written through the pointer "
                                                       "zero_gather_slices returned"
                                                     : "param 'p1' was written through the pointer zero_gather returned")
                                   : c->plain ? "libzero's copy of param 'p1' changed since libzero last wrote it"
                                              : "param 'p1' is ZERO_PARAM_HOST_OWNED and was written by the host";
                CHECK(strstr(msg, want) && strstr(msg, "zero_gather") && strstr(msg, "no weight moved"),
                      "%s: the writer's message: %s", what, msg);
            } else {
                CHECK(strstr(msg, "another rank found a parameter written by its host") != NULL,
                      "%s: another rank's message: %s", what, msg);
            }
        }
    }
    CHECK(zero_load(e, ckdir_) == ZERO_OK, "%s: zero_load: %s", what, zero_last_error(e));
    /* the load dropped the held micro-step (1.7.5): a new backward */
    report_grads(c, e, h, s_index);
    const zero_status s = zero_step(e, NULL, &r);
    CHECK(s == ZERO_OK && r.taken, "%s: zero_step after zero_load: %s (taken %d)", what, zero_last_error(e),
          (int)r.taken);
}

/* One run; libzero's final values into out (total_bytes). */
static void run(const run_cfg *c, unsigned char *out) {
    char what[160];
    snprintf(what, sizeof what, "%s %s gas %d, %s%s%s", c->plugin, c->bf16 ? "bf16" : "fp32", c->gas,
             kWriteName[c->write], c->mode ? ", ZERO_CHECK_HOST_WRITES=" : "", c->mode ? c->mode : "");
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, %s"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d}}",
             c->gas, c->bf16 ? "\"bf16\": {\"enabled\": true}, " : "",
             !strcmp(c->plugin, "offload") ? 2 : c->plugin[5] - '0'); /* "stageN" */
    zero_engine *e = NULL;
    char err[1024] = "";
    CHECK(th_engine_create(cfg, c->plugin, 0, NULL, NULL, &e, err, sizeof err) == ZERO_OK, "%s: %s", what, err);
    if (!e) return;
    unsigned char *t[NP];
    zero_param *h[NP];
    for (int i = 0; i < NP; i++) {
        t[i] = malloc(kNumel[i] * esize(c));
        for (size_t k = 0; k < kNumel[i]; k++) {
            const float v = 0.1f * (float)th_u11(((uint64_t)i << 32) | k);
            if (c->bf16) ((uint16_t *)t[i])[k] = th_to_bf16(v);
            else ((float *)t[i])[k] = v;
        }
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = t[i];
        d.numel = kNumel[i];
        d.dtype = c->bf16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F32;
        d.flags = c->plain ? 0 : ZERO_PARAM_HOST_OWNED;
        if (i == 1 && c->stacked) CHECK_EQ_INT(zero_register_stacked(e, &d, LAYERS, &h[i]), ZERO_OK);
        else CHECK_EQ_INT(zero_register_param(e, &d, &h[i]), ZERO_OK);
    }
    CHECK(zero_params_done(e) == ZERO_OK, "%s: %s", what, zero_last_error(e));
    unsigned char *saved = malloc(kNumel[1] * esize(c));
    for (int s = 0; s < STEPS * c->gas; s++) {
        const int step = s / c->gas, last_micro = s % c->gas == c->gas - 1;
        if (step == 1 && s % c->gas == 0) { /* no false alarm after a save and a load */
            CHECK(zero_save(e, ckdir_) == ZERO_OK, "%s: zero_save: %s", what, zero_last_error(e));
            CHECK(zero_load(e, ckdir_) == ZERO_OK, "%s: zero_load: %s", what, zero_last_error(e));
        }
        report_grads(c, e, h, s);
        const int via_gather = c->write == W_GATHER || c->write == W_SLICE || c->load;
        if (step == EPISODE && s % c->gas == 0 && via_gather) { /* gas 2: in the window */
            void *ptr = NULL;
            const uint32_t layer = SLICE;
            if (c->stacked) CHECK_EQ_INT(zero_gather_slices(e, &h[1], &layer, 1, &ptr), ZERO_OK);
            else CHECK_EQ_INT(zero_gather(e, &h[1], 1, &ptr), ZERO_OK);
            if (ptr && c->write != W_NONE && rank_ == world_ - 1)
                memset(ptr, 0x3c, kNumel[1] / (c->stacked ? LAYERS : 1) * esize(c));
            if (c->stacked) CHECK_EQ_INT(zero_release_slices(e, &h[1], &layer, 1), ZERO_OK);
            else CHECK_EQ_INT(zero_release(e, &h[1], 1), ZERO_OK);
        } else if (step == EPISODE && s % c->gas == 0 && c->write != W_NONE) {
            memcpy(saved, t[1], kNumel[1] * esize(c));
            if (rank_ == world_ - 1) host_write(c, t[1]);
        }
        if (step == EPISODE && last_micro && via_gather) {
            gather_episode(c, e, h, s, what);
            continue;
        }
        if (step == EPISODE && last_micro && c->write != W_NONE) {
            episode(c, e, h, t, saved, what);
            continue;
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        CHECK(zero_step(e, NULL, &r) == ZERO_OK, "%s: step %d: %s", what, s, zero_last_error(e));
        CHECK(r.taken == last_micro, "%s: micro-step %d taken %d", what, s, (int)r.taken);
    }
    free(saved);
    libzero_values(c, e, h, out);
    for (int i = 0; i < NP && !c->plain; i++) /* host-owned: the tensors hold them too */
        CHECK(memcmp(t[i], out + (i ? kNumel[0] : 0) * esize(c) + (i > 1 ? kNumel[1] * esize(c) : 0),
                     kNumel[i] * esize(c)) == 0,
              "%s: host-owned tensor p%d differs from libzero's values at the end", what, i);
    for (int i = 0; i < NP; i++) free(t[i]);
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    snprintf(ckdir_, sizeof ckdir_, "/tmp/zero-host-writes-XXXXXX");
    th_mkdtemp_bcast(ckdir_, sizeof ckdir_);
    CHECK(ckdir_[0] != 0, "no temporary directory");
    const char *plugins[] = {"stage0", "stage1", "stage2", "offload"};
    unsigned char *clean = malloc(20000 * 4 * 2), *got = malloc(20000 * 4 * 2);
    for (size_t p = 0; p < sizeof plugins / sizeof plugins[0]; p++)
        for (int bf16 = 0; bf16 <= 1; bf16++)
            for (int gas = 1; gas <= 2; gas++) {
                run_cfg c = {plugins[p], bf16, gas, W_NONE, NULL, 0, 0, 0, 0};
                run(&c, clean);
                /* every write kind with stage2 fp32 gas 1; the others take a full rewrite */
                const int all = !strcmp(plugins[p], "stage2") && !bf16 && gas == 1;
                const run_cfg cases[] = {
                    {plugins[p], bf16, gas, W_ALL, NULL, 1, 0, 0, 0},    {plugins[p], bf16, gas, W_RUN, NULL, 1, 0, 0, 0},
                    {plugins[p], bf16, gas, W_FIRST, NULL, 1, 0, 0, 0},  {plugins[p], bf16, gas, W_LAST, NULL, 1, 0, 0, 0},
                    {plugins[p], bf16, gas, W_MIDDLE, NULL, 0, 0, 0, 0}, {plugins[p], bf16, gas, W_MIDDLE, "full", 1, 0, 0, 0},
                    {plugins[p], bf16, gas, W_ALL, "off", 0, 0, 0, 0},
                };
                for (size_t k = 0; k < (all ? sizeof cases / sizeof cases[0] : 1); k++) {
                    run(&cases[k], got);
                    CHECK(memcmp(got, clean, total_bytes(&c)) == 0,
                          "%s %s gas %d, %s%s%s: the run ends elsewhere than the run without the write",
                          plugins[p], bf16 ? "bf16" : "fp32", gas, kWriteName[cases[k].write],
                          cases[k].mode ? ", ZERO_CHECK_HOST_WRITES=" : "", cases[k].mode ? cases[k].mode : "");
                }
                /* a write through zero_gather's pointer, host-owned params and plain ones, against a
                 * reference that loads the same checkpoint at the same point (gas 1: a load puts the
                 * checkpoint's micro-step back, so inside a window it would start another one) */
                for (int plain = 0; plain <= 1 && gas == 1; plain++) {
                    const run_cfg ref = {plugins[p], bf16, gas, W_NONE, NULL, 0, plain, 1, 0};
                    const run_cfg wrote = {plugins[p], bf16, gas, W_GATHER, NULL, 1, plain, 0, 0};
                    run(&ref, clean);
                    run(&wrote, got);
                    CHECK(memcmp(got, clean, total_bytes(&c)) == 0, "%s %s gas %d, %s params, a write through "
                          "zero_gather: the run ends elsewhere than the reference", plugins[p], bf16 ? "bf16" : "fp32",
                          gas, plain ? "plain" : "host-owned");
                }
            }
    /* stage 3: a write into a gathered parameter (a scratch copy, or at N = 1 libzero's own storage) */
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        const run_cfg ref = {"stage3", bf16, 1, W_NONE, NULL, 0, 1, 1, 0};
        const run_cfg wrote = {"stage3", bf16, 1, W_GATHER, NULL, 1, 1, 0, 0};
        run(&ref, clean);
        run(&wrote, got);
        CHECK(memcmp(got, clean, total_bytes(&ref)) == 0, "stage3 %s: a write into a gathered parameter: the run ends "
              "elsewhere than the reference", bf16 ? "bf16" : "fp32");
    }
    /* (1.7.7) a write into a slice of a stacked param: stage 3's scratch slice (fp32, bf16), and
     * stage 2's, which is its copy (found by the copy's fingerprint, as a write through zero_gather) */
    const struct { const char *plugin; int bf16; } sliced[] = {{"stage3", 0}, {"stage3", 1}, {"stage2", 0}};
    for (size_t k = 0; k < sizeof sliced / sizeof sliced[0]; k++) {
        const run_cfg ref = {sliced[k].plugin, sliced[k].bf16, 1, W_NONE, NULL, 0, 1, 1, 1};
        const run_cfg wrote = {sliced[k].plugin, sliced[k].bf16, 1, W_SLICE, NULL, 1, 1, 0, 1};
        run(&ref, clean);
        run(&wrote, got);
        CHECK(memcmp(got, clean, total_bytes(&ref)) == 0, "%s %s: a write into a gathered slice: the run ends "
              "elsewhere than the reference", sliced[k].plugin, sliced[k].bf16 ? "bf16" : "fp32");
    }
    free(clean);
    free(got);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) th_remove_dir(ckdir_);
    if (rank_ == 0)
        printf("N=%d: host-owned tensors and libzero's copies written by the host are refused at the boundary: ok\n",
               world_);
    return check_mpi_finish();
}
