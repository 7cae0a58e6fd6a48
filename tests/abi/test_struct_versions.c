/* (1.7.7) Versioned input structs, one process (ZERO_COMM_SELF):
 *  - a struct from a NEWER header (struct_size past ours) whose extra bytes
 *    are all zero is accepted: a host built tomorrow that sets no new field
 *    runs with today's library;
 *  - one whose extra bytes are set is refused with ZERO_ERR_INVALID_ARGUMENT
 *    and a message naming the struct, the byte and the newer header, for
 *    every input struct: zero_engine_options, zero_param_desc,
 *    zero_group_desc, zero_hparams, zero_step_args, zero_save_options,
 *    zero_load_options (1.8), zero_plan_request (zero_host_comm:
 *    tests/stages/test_host_comm.c);
 *  - a struct_size past any struct (garbage) is refused without reading it;
 *  - every reserved field documented "must be 0" is checked, so that a later
 *    ABI can give it a meaning;
 *  - a refused call changes nothing: the engine trains on, no checkpoint is
 *    written by a refused save. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "zero.h"

/* a struct as a newer header would lay it out: ours, then a new field */
#define NEWER(T) struct { T s; uint64_t added; }

static const char *CONFIG = "{\"train_micro_batch_size_per_gpu\": 1,"
                            " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0}}}";

static void quiet(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)user, (void)lvl, (void)rank, (void)msg;
}

static zero_engine_options options(void) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = CONFIG;
    o.plugin = "stage0";
    o.comm_kind = ZERO_COMM_SELF;
    o.log_fn = quiet;
    return o;
}

/* zero_engine_create with o: its status, err in msg */
static zero_status create(const zero_engine_options *o, zero_engine **e, char *msg, size_t len) {
    msg[0] = '\0';
    zero_status s = zero_engine_create(o, e, msg, len);
    if (s != ZERO_OK) CHECK(*e == NULL, "a refused zero_engine_create returned an engine");
    return s;
}

static void expect_refused(zero_status s, const char *msg, const char *needle, const char *what) {
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT && msg && strstr(msg, needle), "%s: got %s '%s', expected "
          "ZERO_ERR_INVALID_ARGUMENT with '%s'", what, zero_status_string(s), msg ? msg : "", needle);
    printf("refused: %-34s %s\n", what, msg ? msg : "");
}

static void engine_options(void) {
    char msg[1024];
    zero_engine *e = NULL;
    NEWER(zero_engine_options) n = {options(), 0};
    n.s.struct_size = sizeof n;
    zero_status s = create(&n.s, &e, msg, sizeof msg);
    CHECK(s == ZERO_OK, "newer options, new field zero: %s", msg);
    zero_engine_destroy(e);

    n.added = 1;
    s = create(&n.s, &e, msg, sizeof msg);
    expect_refused(s, msg, "zero_engine_options.struct_size is", "options: new field set");
    char byte[64];
    snprintf(byte, sizeof byte, "byte %zu is set", sizeof(zero_engine_options));
    CHECK_STR_CONTAINS(msg, byte);
    CHECK_STR_CONTAINS(msg, "newer libzero header");

    zero_engine_options o = options();
    o.struct_size = 1u << 20; /* garbage: nothing past ours is read */
    s = create(&o, &e, msg, sizeof msg);
    expect_refused(s, msg, "more than any libzero struct", "options: struct_size garbage");

    o = options();
    o.reserved0 = 7;
    s = create(&o, &e, msg, sizeof msg);
    expect_refused(s, msg, "reserved0 (7) and reserved1 (0) must be 0", "options: reserved0");
    o = options();
    o.reserved1 = -1;
    s = create(&o, &e, msg, sizeof msg);
    expect_refused(s, msg, "reserved1 (-1) must be 0", "options: reserved1");
}

static float w0[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w1[5] = {-1, -2, -3, -4, -5};

static zero_param_desc desc(const char *name, const float *data, uint64_t numel) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = name;
    d.data = data;
    d.numel = numel;
    return d;
}

/* An engine with w0 and w1 registered (the refused descriptors in between
 * register nothing: the layout is the two params, checked by stepping). */
static zero_engine *engine_with_params(zero_param **p) {
    char msg[1024];
    zero_engine *e = NULL;
    zero_engine_options o = options();
    if (create(&o, &e, msg, sizeof msg) != ZERO_OK) {
        CHECK(0, "engine: %s", msg);
        return NULL;
    }
    zero_param_desc d = desc("w0", w0, 8);
    CHECK(zero_register_param(e, &d, &p[0]) == ZERO_OK, "w0: %s", zero_last_error(e));

    struct { const char *field; zero_param_desc d; } bad[4];
    for (int i = 0; i < 4; i++) bad[i].d = desc("bad", w1, 5);
    bad[0].field = "reserved0", bad[0].d.reserved0 = 1;
    bad[1].field = "reserved1", bad[1].d.reserved1 = 1;
    bad[2].field = "reserved2", bad[2].d.reserved2 = 1;
    bad[3].field = "struct_size garbage", bad[3].d.struct_size = 100000;
    for (int i = 0; i < 4; i++) {
        zero_param *x = NULL;
        zero_status s = zero_register_param(e, &bad[i].d, &x);
        char what[64];
        snprintf(what, sizeof what, "param_desc: %s", bad[i].field);
        expect_refused(s, zero_last_error(e), i < 3 ? "reserved0/1/2 are" : "more than any libzero struct", what);
        CHECK(x == NULL, "%s: a param came back", what);
    }
    NEWER(zero_param_desc) n = {desc("w1", w1, 5), 5};
    n.s.struct_size = sizeof n;
    zero_param *x = NULL;
    expect_refused(zero_register_param(e, &n.s, &x), zero_last_error(e), "zero_param_desc.struct_size is",
                   "param_desc: new field set");
    CHECK(zero_register_stacked(e, &n.s, 5, &x) == ZERO_ERR_INVALID_ARGUMENT, "register_stacked took a newer desc");
    n.added = 0;
    CHECK(zero_register_param(e, &n.s, &p[1]) == ZERO_OK, "w1 (newer desc, new field zero): %s", zero_last_error(e));

    NEWER(zero_group_desc) g = {ZERO_GROUP_DESC_INIT, 1};
    g.s.struct_size = sizeof g;
    expect_refused(zero_set_group(e, &g.s), zero_last_error(e), "zero_group_desc.struct_size is",
                   "group_desc: new field set");
    g.added = 0;
    CHECK(zero_set_group(e, &g.s) == ZERO_OK, "group (newer, new field zero): %s", zero_last_error(e));
    CHECK(zero_params_done(e) == ZERO_OK, "params_done: %s", zero_last_error(e));
    return e;
}

/* one micro-step with gradient 1 everywhere */
static zero_status step(zero_engine *e, zero_param **p, const zero_step_args *args) {
    for (int i = 0; i < 2; i++) {
        void *g = NULL;
        if (zero_grad_buffer(e, p[i], &g) != ZERO_OK) return ZERO_ERR_INTERNAL;
        for (uint64_t k = 0; k < (i ? 5u : 8u); k++) ((float *)g)[k] += 1.0f;
        if (zero_on_grad_ready(e, p[i], NULL) != ZERO_OK) return ZERO_ERR_INTERNAL;
    }
    return zero_step(e, args, NULL);
}

static void engine_calls(void) {
    zero_param *p[2] = {NULL, NULL};
    zero_engine *e = engine_with_params(p);
    if (!e) return;

    NEWER(zero_hparams) h = {ZERO_HPARAMS_INIT, 1};
    h.s.struct_size = sizeof h;
    h.s.lr = 0.5;
    expect_refused(zero_set_hparams(e, &h.s), zero_last_error(e), "zero_hparams.struct_size is",
                   "hparams: new field set");

    NEWER(zero_step_args) a = {ZERO_STEP_ARGS_INIT, 1};
    a.s.struct_size = sizeof a;
    zero_status s = step(e, p, &a.s);
    expect_refused(s, zero_last_error(e), "zero_step_args.struct_size is", "step_args: new field set");
    zero_step_args r = ZERO_STEP_ARGS_INIT;
    r.reserved0 = 3;
    /* the gradients of the refused micro-step are still held: step again
     * without adding (zero_step alone) */
    expect_refused(zero_step(e, &r, NULL), zero_last_error(e), "zero_step_args.reserved0 is 3",
                   "step_args: reserved0");
    a.added = 0;
    CHECK(zero_step(e, &a.s, NULL) == ZERO_OK, "step (newer args, new field zero): %s", zero_last_error(e));
    /* lr stayed 0.01 (the refused zero_set_hparams changed nothing), one
     * AdamW step with gradient 1 moves each weight by lr */
    void *ptr[2];
    CHECK(zero_gather(e, p, 2, ptr) == ZERO_OK, "gather: %s", zero_last_error(e));
    CHECK_NEAR(((float *)ptr[0])[0], 1.0 - 0.01, 1e-6);
    CHECK_NEAR(((float *)ptr[1])[4], -5.0 - 0.01, 1e-6);
    CHECK(zero_release(e, p, 2) == ZERO_OK, "release: %s", zero_last_error(e));

    char dir[] = "/tmp/zero-struct-versions-XXXXXX";
    const char *made = mkdtemp(dir);
    CHECK(made != NULL, "mkdtemp %s", dir);
    if (made) {
        NEWER(zero_save_options) so = {ZERO_SAVE_OPTIONS_INIT, 1};
        so.s.struct_size = sizeof so;
        so.s.tag = "refused";
        expect_refused(zero_save_ex(e, dir, &so.s), zero_last_error(e), "zero_save_options.struct_size is",
                       "save_options: new field set");
        char path[128];
        struct stat st;
        snprintf(path, sizeof path, "%s/refused", dir);
        CHECK(stat(path, &st) != 0, "a refused save wrote %s", path);
        so.added = 0;
        so.s.tag = "kept";
        CHECK(zero_save_ex(e, dir, &so.s) == ZERO_OK, "save (newer options, new field zero): %s",
              zero_last_error(e));
        snprintf(path, sizeof path, "%s/kept", dir);
        CHECK(stat(path, &st) == 0, "no checkpoint at %s", path);
        NEWER(zero_load_options) lo = {ZERO_LOAD_OPTIONS_INIT, 1}; /* (1.8) */
        lo.s.struct_size = sizeof lo;
        lo.s.weights_only = 1;
        expect_refused(zero_load_ex(e, path, &lo.s), zero_last_error(e), "zero_load_options.struct_size is",
                       "load_options: new field set");
        lo.added = 0;
        CHECK(zero_load_ex(e, path, &lo.s) == ZERO_OK, "load (newer options, new field zero): %s", zero_last_error(e));
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "rm %s", dir);
    }
    zero_engine_destroy(e);
}

static void plan_request(void) {
    uint64_t numels[2] = {1000, 10};
    zero_memory_plan out = ZERO_MEMORY_PLAN_INIT;
    NEWER(zero_plan_request) r = {ZERO_PLAN_REQUEST_INIT, 1};
    r.s.struct_size = sizeof r;
    r.s.config_json = CONFIG;
    r.s.plugin = "stage1";
    r.s.world_size = 4;
    r.s.nparams = 2;
    r.s.numels = numels;
    char msg[1024] = "";
    expect_refused(zero_plan(&r.s, &out, msg, sizeof msg), msg, "zero_plan_request.struct_size is",
                   "plan_request: new field set");
    r.added = 0;
    CHECK(zero_plan(&r.s, &out, msg, sizeof msg) == ZERO_OK, "plan (newer request, new field zero): %s", msg);
    r.s.reserved0 = 2;
    expect_refused(zero_plan(&r.s, &out, msg, sizeof msg), msg, "reserved0 must be 0", "plan_request: reserved0");
    r.s.reserved0 = 0;
    /* (1.9) a 1.8 host's request ends before the expert groups: whatever
     * lies past its struct_size is not read (here: a group that would be
     * refused), and it plans as before */
    zero_memory_plan full = ZERO_MEMORY_PLAN_INIT;
    CHECK(zero_plan(&r.s, &full, msg, sizeof msg) == ZERO_OK, "plan (whole request): %s", msg);
    const int32_t gid = 7;
    const uint32_t gsize = 3;
    r.s.nexpert_groups = 1;
    r.s.expert_groups = &gid;
    r.s.expert_dp_sizes = &gsize;
    r.s.struct_size = (uint32_t)offsetof(zero_plan_request, nexpert_groups);
    zero_memory_plan old = ZERO_MEMORY_PLAN_INIT;
    CHECK(zero_plan(&r.s, &old, msg, sizeof msg) == ZERO_OK, "plan (1.8 request): %s", msg);
    CHECK(old.total[ZERO_TIER_DEVICE] == full.total[ZERO_TIER_DEVICE] && old.total[ZERO_TIER_DEVICE] > 0,
          "1.8 request plans %llu device bytes, the same request whole %llu",
          (unsigned long long)old.total[ZERO_TIER_DEVICE], (unsigned long long)full.total[ZERO_TIER_DEVICE]);
    r.s.struct_size = sizeof r.s; /* the same fields read: group 7 names no param, size 3 does not divide 4 */
    expect_refused(zero_plan(&r.s, &out, msg, sizeof msg), msg, "must divide world_size 4",
                   "plan_request: expert group read at 1.9");
    r.s.reserved1 = 1;
    expect_refused(zero_plan(&r.s, &out, msg, sizeof msg), msg, "reserved1 must be 0", "plan_request: reserved1");
}

int main(void) {
    engine_options();
    engine_calls();
    plan_request();
    return check_finish();
}
