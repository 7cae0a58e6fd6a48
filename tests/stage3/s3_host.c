/* Test host for the stage3 plugin: see s3_host.h.  Uses only abi/zero.h
 * and MPI. */
#include "s3_host.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_util.h"

s3_cfg s3_default_cfg(void) {
    s3_cfg c;
    memset(&c, 0, sizeof c);
    c.plugin = "stage3";
    c.steps = 30;
    c.gas = 1;
    c.mb = 3;
    c.din = 13;
    c.h = 29;
    c.dout = 5;
    c.nlin = 4; /* 13*29 + 29 + 2*(29*29 + 29) + 29*5 + 5 = 2286 params */
    c.prefetch = -1;
    c.persist = 0;
    c.max_live = -1;
    c.reuse = -1;
    c.bucket = 700;
    c.overlap = 1;
    c.clip = 1.0;
    c.perturb_step = -1;
    c.diverge_rank = -1;
    c.diverge_micro = 1;
    c.short_rank = -1;
    return c;
}


typedef struct run {
    const s3_cfg *c;
    s3_out *out;
    zero_engine *e;
    zero_param **h;
    uint32_t np;
    size_t *numel;
    float **act;   /* act[l]: mb x width(l) inputs of layer l; act[nlin] = output */
    float *dz, *da;
} run;

static int lin(const s3_cfg *c, int l) { return l == 0 ? c->din : c->h; }
static int lout(const s3_cfg *c, int l) { return l == c->nlin - 1 ? c->dout : c->h; }

static void fail(run *r, zero_status s, const char *what) {
    if (r->out->status != ZERO_OK) return;
    r->out->status = s;
    snprintf(r->out->error, sizeof r->out->error, "%s: %s", what, zero_last_error(r->e));
}

static void log_cb(void *user, zero_log_level lvl, int rank, const char *msg) {
    s3_out *o = user;
    if (lvl == ZERO_LOG_WARN) {
        if (!o->warnings) snprintf(o->first_warning, sizeof o->first_warning, "%s", msg);
        o->warnings++;
        if (strstr(msg, "gather order")) o->order_warnings++;
    }
    const char *g = strstr(msg, "param gathers:");
    if (g) sscanf(msg, "stage3: %llu param gathers: %llu prefetched, %llu already resident", &o->gathers,
                  &o->gathers_prefetched, &o->gathers_resident);
    if (lvl <= ZERO_LOG_WARN) fprintf(stderr, "[zero rank %d] %s: %s\n", rank, lvl == ZERO_LOG_ERROR ? "ERROR" : "WARN", msg);
}

static void make_config(const s3_cfg *c, char *buf, size_t n) {
    char extra[512] = "";
    size_t off = 0;
#define KEY(name, v) \
    if ((v) >= 0) off += (size_t)snprintf(extra + off, sizeof extra - off, "\"%s\": %lld, ", name, (long long)(v))
    KEY("stage3_prefetch_bucket_size", c->prefetch);
    KEY("stage3_param_persistence_threshold", c->persist);
    KEY("stage3_max_live_parameters", c->max_live);
    KEY("stage3_max_reuse_distance", c->reuse);
    KEY("reduce_bucket_size", c->bucket);
#undef KEY
    int stage = c->plugin[0] && c->plugin[5] >= '0' && c->plugin[5] <= '3' ? c->plugin[5] - '0' : 0;
    snprintf(buf, n,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"gradient_clipping\": %g,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"betas\": [0.9, 0.999],"
             " \"eps\": 1e-8, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d, %s\"overlap_comm\": %s}}",
             c->mb, c->gas, c->clip, stage, extra, c->overlap ? "true" : "false");
}

/* Sample g: inputs uniform, targets a fixed smooth function of them. */
static void sample(const s3_cfg *c, uint64_t g, float *x, float *t) {
    for (int i = 0; i < c->din; i++) x[i] = (float)th_u11((g << 16) + (uint64_t)i);
    for (int j = 0; j < c->dout; j++) {
        double acc = 0;
        for (int i = 0; i < c->din; i++) acc += x[i] * th_u11(0xabcdefull + (uint64_t)(j * 97 + i));
        t[j] = (float)tanh(acc);
    }
}

/* Hooks fired from a helper thread (threaded_hooks): the ABI lets the host
 * call zero_on_grad_ready from other threads while this one goes on to
 * gather the next layer. */
typedef struct hook_job {
    run *r;
    int l;
    zero_status st;
} hook_job;

static void *hook_thread(void *arg) {
    hook_job *j = arg;
    j->st = zero_on_grad_ready(j->r->e, j->r->h[2 * j->l], NULL);
    if (j->st == ZERO_OK) j->st = zero_on_grad_ready(j->r->e, j->r->h[2 * j->l + 1], NULL);
    return NULL;
}

static zero_status gather_layer(run *r, int l, float **w, float **b) {
    void *p[2];
    zero_status s = zero_gather(r->e, &r->h[2 * l], 2, p);
    if (s != ZERO_OK) return s;
    *w = p[0];
    *b = p[1];
    return ZERO_OK;
}

/* One micro-step: forward layer by layer (gather, compute, release), loss,
 * backward in reverse (gather again, grads into zero_grad_buffer, hooks,
 * input gradient, release). */
static void micro_step(run *r, uint64_t gm, int step, int micro) {
    const s3_cfg *c = r->c;
    const int L = c->nlin, mb = c->mb;
    int rank = zero_rank(r->e), world = zero_world_size(r->e);
    float *tgt = malloc((size_t)mb * c->dout * sizeof(float));
    for (int si = 0; si < mb; si++)
        sample(c, gm * (uint64_t)(world * mb) + (uint64_t)(rank * mb + si), r->act[0] + si * c->din,
               tgt + si * c->dout);
    zero_status s;
    /* Order perturbation: gather everything up front once (a new order). */
    if (step == c->perturb_step && micro == 0) {
        void **p = calloc(r->np, sizeof *p);
        if ((s = zero_gather(r->e, r->h, r->np, p)) != ZERO_OK) fail(r, s, "zero_gather (perturb)");
        else zero_release(r->e, r->h, r->np);
        free(p);
    }
    for (int l = 0; l < L && r->out->status == ZERO_OK; l++) {
        int ll = l;
        float *W, *B;
        if (gm == (uint64_t)c->diverge_micro && rank == c->diverge_rank && l < 2) {
            if (c->diverge_extra && l == 0) { /* one gather more than the other ranks */
                if ((s = gather_layer(r, 0, &W, &B)) != ZERO_OK) {
                    fail(r, s, "zero_gather (extra)");
                    break;
                }
                zero_release(r->e, &r->h[0], 2);
            } else if (!c->diverge_extra) {
                ll = 1 - l; /* swaps layers 0 and 1 */
            }
        }
        if ((s = gather_layer(r, ll, &W, &B)) != ZERO_OK) {
            fail(r, s, "zero_gather");
            break;
        }
        if (ll != l) {
            /* Divergent rank, and stage3 had no reason to communicate yet
             * (params resident): it verifies later, at the latest in
             * zero_step.  Carry on with the right layer meanwhile. */
            zero_release(r->e, &r->h[2 * ll], 2);
            if ((s = gather_layer(r, l, &W, &B)) != ZERO_OK) {
                fail(r, s, "zero_gather");
                break;
            }
        }
        int in = lin(c, l), o = lout(c, l);
        if (c->read_after_release && l == 0) zero_release(r->e, &r->h[0], 2);
        for (int si = 0; si < mb; si++)
            for (int j = 0; j < o; j++) {
                double acc = B[j];
                for (int k = 0; k < in; k++) acc += (double)W[j * in + k] * r->act[l][si * in + k];
                r->act[l + 1][si * o + j] = l == L - 1 ? (float)acc : (float)tanh(acc);
            }
        if (!(c->read_after_release && l == 0)) zero_release(r->e, &r->h[2 * l], 2);
    }
    /* loss: mean over samples of sum of squared errors */
    double loss = 0;
    for (int si = 0; si < mb && r->out->status == ZERO_OK; si++)
        for (int j = 0; j < c->dout; j++) {
            float d = r->act[L][si * c->dout + j] - tgt[si * c->dout + j];
            loss += (double)d * d / mb;
            r->dz[si * c->dout + j] = 2.0f * d / (float)mb;
        }
    r->out->last_loss = loss;
    if (!isfinite(loss)) r->out->nan_loss = 1;
    pthread_t threads[64];
    hook_job jobs[64];
    int started[64] = {0};
    memset(jobs, 0, sizeof jobs);
    for (int l = L - 1; l >= 0 && r->out->status == ZERO_OK; l--) {
        float *W, *B, *gW, *gB;
        if ((s = gather_layer(r, l, &W, &B)) != ZERO_OK) {
            fail(r, s, "zero_gather (backward)");
            break;
        }
        int in = lin(c, l), o = lout(c, l);
        if ((s = zero_grad_buffer(r->e, r->h[2 * l], (void **)&gW)) != ZERO_OK ||
            (s = zero_grad_buffer(r->e, r->h[2 * l + 1], (void **)&gB)) != ZERO_OK) {
            fail(r, s, "zero_grad_buffer");
            break;
        }
        for (int si = 0; si < mb; si++)
            for (int j = 0; j < o; j++) {
                float d = r->dz[si * o + j];
                gB[j] += d;
                for (int k = 0; k < in; k++) gW[j * in + k] += d * r->act[l][si * in + k];
            }
        if (c->threaded_hooks) {
            jobs[l] = (hook_job){r, l, ZERO_OK};
            started[l] = pthread_create(&threads[l], NULL, hook_thread, &jobs[l]) == 0;
            if (!started[l]) hook_thread(&jobs[l]);
        } else if ((s = zero_on_grad_ready(r->e, r->h[2 * l], NULL)) != ZERO_OK ||
                   (s = zero_on_grad_ready(r->e, r->h[2 * l + 1], NULL)) != ZERO_OK) {
            fail(r, s, "zero_on_grad_ready");
            break;
        }
        if (l > 0) {
            for (int si = 0; si < mb; si++)
                for (int k = 0; k < in; k++) {
                    float acc = 0;
                    for (int j = 0; j < o; j++) acc += W[j * in + k] * r->dz[si * o + j];
                    float a = r->act[l][si * in + k];
                    r->da[si * in + k] = acc * (1.0f - a * a);
                }
            memcpy(r->dz, r->da, (size_t)mb * in * sizeof(float));
        }
        zero_release(r->e, &r->h[2 * l], 2);
    }
    for (int l = 0; l < L && c->threaded_hooks; l++) {
        if (started[l]) pthread_join(threads[l], NULL);
        if (jobs[l].st != ZERO_OK) fail(r, jobs[l].st, "zero_on_grad_ready (hook thread)");
        started[l] = 0;
        jobs[l].st = ZERO_OK;
    }
    free(tgt);
}

void s3_run(const s3_cfg *c, s3_out *out) {
    memset(out, 0, sizeof *out);
    run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.out = out;
    r.np = (uint32_t)(2 * c->nlin);
    char json[1536];
    make_config(c, json, sizeof json);
    zero_status s = th_engine_create(json, c->plugin, 0, log_cb, out, &r.e, out->error, sizeof out->error);
    if (s != ZERO_OK) {
        out->status = s;
        return;
    }
    r.h = calloc(r.np, sizeof *r.h);
    r.numel = calloc(r.np, sizeof *r.numel);
    r.act = calloc((size_t)c->nlin + 1, sizeof *r.act);
    int wmax = c->din > c->h ? c->din : c->h;
    if (c->dout > wmax) wmax = c->dout;
    for (int l = 0; l <= c->nlin; l++) r.act[l] = calloc((size_t)c->mb * wmax, sizeof(float));
    r.dz = calloc((size_t)c->mb * wmax, sizeof(float));
    r.da = calloc((size_t)c->mb * wmax, sizeof(float));
    zero_group_desc gd = ZERO_GROUP_DESC_INIT;
    gd.group = 1;
    gd.weight_decay = 0.0;
    if ((s = zero_set_group(r.e, &gd)) != ZERO_OK) fail(&r, s, "zero_set_group");
    float **init = calloc(r.np, sizeof *init);
    for (uint32_t i = 0; i < r.np && out->status == ZERO_OK; i++) {
        int l = (int)i / 2, is_w = i % 2 == 0;
        size_t in = (size_t)lin(c, l), o2 = (size_t)lout(c, l);
        r.numel[i] = is_w ? in * o2 : o2;
        out->numel += r.numel[i];
        if (r.numel[i] > out->max_param) out->max_param = r.numel[i];
        init[i] = malloc(r.numel[i] * sizeof(float));
        for (size_t k = 0; k < r.numel[i]; k++)
            init[i][k] = is_w ? (float)(th_u11(((uint64_t)(i + 1) << 32) + k) / sqrt((double)in))
                              : (float)(0.01 * th_u11(((uint64_t)(i + 1) << 32) + k));
        char name[32];
        snprintf(name, sizeof name, is_w ? "layer%d.weight" : "layer%d.bias", l);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i];
        d.numel = r.numel[i];
        d.group = is_w ? 0 : 1;
        if ((s = zero_register_param(r.e, &d, &r.h[i])) != ZERO_OK) fail(&r, s, "zero_register_param");
    }
    out->nparams = r.np;
    if (out->status == ZERO_OK && (s = zero_params_done(r.e)) != ZERO_OK) fail(&r, s, "zero_params_done");
    /* The host's initial values are no longer needed: prove it by wiping them. */
    for (uint32_t i = 0; i < r.np; i++) {
        if (init[i]) memset(init[i], 0xff, r.numel[i] * sizeof(float));
        free(init[i]);
    }
    free(init);
    out->mem_after_done.struct_size = sizeof out->mem_after_done;
    zero_memory_stats_get(r.e, &out->mem_after_done);

    if (out->status == ZERO_OK && c->load && (s = zero_load(r.e, c->ckpt_dir)) != ZERO_OK) fail(&r, s, "zero_load");
    /* One loop over global micro-steps, so that a run may start (resume)
     * and save in the middle of an accumulation window. */
    const uint64_t gas = (uint64_t)c->gas;
    uint64_t gm = c->first_micro > 0 ? (uint64_t)c->first_micro : (uint64_t)c->first_step * gas;
    uint64_t gm_end = (uint64_t)(c->first_step + c->steps) * gas;
    if (c->short_rank >= 0 && c->short_rank == zero_rank(r.e) && gm_end > gm) gm_end--; /* one micro-step fewer */
    for (uint64_t done = 1; gm < gm_end && out->status == ZERO_OK; gm++, done++) {
        int step = (int)(gm / gas), m = (int)(gm % gas);
        micro_step(&r, gm, step, m);
        if (out->status != ZERO_OK) break;
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        if ((s = zero_step(r.e, NULL, &res)) != ZERO_OK) fail(&r, s, "zero_step");
        int save = c->save_after_micro > 0 ? done == (uint64_t)c->save_after_micro
                                           : (c->save_after > 0 && m == c->gas - 1 && step + 1 == c->save_after);
        if (out->status == ZERO_OK && save && (s = zero_save(r.e, c->ckpt_dir)) != ZERO_OK) fail(&r, s, "zero_save");
    }
    out->mem.struct_size = sizeof out->mem; /* before the final gather of everything */
    zero_memory_stats_get(r.e, &out->mem);
    if (out->status == ZERO_OK) {
        out->params = malloc(out->numel * sizeof(float));
        if ((s = th_gather_all_f32(r.e, r.h, r.np, r.numel, out->params)) != ZERO_OK) fail(&r, s, "zero_gather (final)");
    }
    zero_engine_destroy(r.e);
    for (int l = 0; l <= c->nlin; l++) free(r.act[l]);
    free(r.act);
    free(r.dz);
    free(r.da);
    free(r.h);
    free(r.numel);
}

void s3_out_free(s3_out *out) {
    free(out->params);
    out->params = NULL;
}

double s3_rel_l2(const float *a, const float *b, size_t n) { return th_rel_l2(a, b, n); }
