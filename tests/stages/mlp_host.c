/* Test host: see mlp_host.h.  Uses only abi/zero.h and MPI. */
#include "mlp_host.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_util.h"

typedef struct model_shape {
    int din, h, dout, nlin;
} model_shape;

static model_shape shape_of(int model) {
    model_shape s = {29, 31, 7, 9}; /* 8099 params, largest 961 */
    if (model == HOST_MODEL_10K) s = (model_shape){29, 33, 7, 10}; /* 10205 params, largest 1089 */
    return s;
}
static int layer_in(const model_shape *s, int l) { return l == 0 ? s->din : s->h; }
static int layer_out(const model_shape *s, int l) { return l == s->nlin - 1 ? s->dout : s->h; }

size_t host_model_numel(int model, uint32_t *nparams, size_t *max_param) {
    model_shape s = shape_of(model);
    size_t n = 1, mx = 1;
    for (int l = 0; l < s.nlin; l++) {
        size_t w = (size_t)layer_in(&s, l) * layer_out(&s, l);
        n += w + (size_t)layer_out(&s, l);
        if (w > mx) mx = w;
    }
    if (nparams) *nparams = (uint32_t)(2 * s.nlin + 1);
    if (max_param) *max_param = mx;
    return n;
}


host_run_cfg host_default_cfg(void) {
    host_run_cfg c;
    memset(&c, 0, sizeof c);
    c.plugin = "stage0";
    c.model = HOST_MODEL_SMALL;
    c.steps = 30;
    c.gas = 1;
    c.mb = 3;
    c.overlap = 1;
    c.contiguous = 1;
    c.bucket = 1500;
    c.order = HOST_ORDER_NATURAL;
    c.threads = 1;
    c.skip_param = -1;
    c.zero_param = -1;
    c.data_rank = -1;
    c.data_world = -1;
    c.save_after = -1;
    c.resume_from = -1;
    c.stage = -1;
    c.config_lr = 0.001;
    c.hp_lr = -1.0;
    return c;
}

double host_rel_l2(const float *a, const float *b, size_t n) { return th_rel_l2(a, b, n); }

/* ------------------------------------------------------------------ run */

typedef struct run_state {
    const host_run_cfg *cfg;
    host_run_out *out;
    model_shape s;
    zero_engine *e;
    uint32_t np;
    zero_param **h;
    size_t *numel;
    float **grad;      /* host-computed gradient of the micro-step */
    float **host_grad; /* registered host-owned buffers (host_grad mode) */
    float **host_param; /* ZERO_PARAM_HOST_OWNED parameter arrays (host_owned mode) */
    int *order;
    int last_micro;    /* current micro-step is the window's last */
    pthread_mutex_t err_mu;
} run_state;

static void fail(run_state *r, zero_status s, const char *what) {
    pthread_mutex_lock(&r->err_mu);
    if (r->out->status == ZERO_OK) {
        r->out->status = s;
        snprintf(r->out->error, sizeof r->out->error, "%s: %s (%s)", what, zero_status_string(s),
                 r->e ? zero_last_error(r->e) : "");
    }
    pthread_mutex_unlock(&r->err_mu);
}

static void log_cb(void *user, zero_log_level lvl, int rank, const char *msg) {
    host_run_out *o = user;
    (void)rank;
    if (lvl == ZERO_LOG_WARN) {
        if (o->warnings++ == 0) snprintf(o->first_warning, sizeof o->first_warning, "%s", msg);
    }
    if (lvl == ZERO_LOG_ERROR) fprintf(stderr, "[zero rank %d] ERROR: %s\n", rank, msg);
}

/* Deliver param i's gradient of this micro-step to libzero. */
static void fire(run_state *r, int i) {
    const host_run_cfg *c = r->cfg;
    if (r->last_micro && i == c->skip_param) return;
    int zero = r->last_micro && i == c->zero_param;
    zero_status s;
    if (c->host_grad) {
        if (zero)
            memset(r->host_grad[i], 0, r->numel[i] * sizeof(float));
        else
            memcpy(r->host_grad[i], r->grad[i], r->numel[i] * sizeof(float));
    } else {
        void *buf = NULL;
        if ((s = zero_grad_buffer(r->e, r->h[i], &buf)) != ZERO_OK) {
            fail(r, s, "zero_grad_buffer");
            return;
        }
        float *g = buf;
        if (!zero)
            for (size_t k = 0; k < r->numel[i]; k++) g[k] += r->grad[i][k]; /* ADD, never overwrite */
    }
    if ((s = zero_on_grad_ready(r->e, r->h[i], NULL)) != ZERO_OK) fail(r, s, "zero_on_grad_ready");
}

typedef struct fire_job {
    run_state *r;
    int part, nparts;
} fire_job;

static void *fire_thread(void *arg) {
    fire_job *j = arg;
    for (uint32_t k = 0; k < j->r->np; k++)
        if ((int)(k % (uint32_t)j->nparts) == j->part) fire(j->r, j->r->order[k]);
    return NULL;
}

/* Forward + backward on the local shard of global micro-step gm; grads into
 * r->grad (mean over local samples). */
static void compute_grads(run_state *r, float *const *p, uint64_t gm, int drank, int dworld) {
    const model_shape *s = &r->s;
    const int mb = r->cfg->mb, L = s->nlin;
    /* activations: a[0] = input, a[l+1] = output of layer l (pre-gain for the last: z) */
    float *a[16];
    for (int l = 0; l <= L; l++) a[l] = calloc((size_t)mb * (l == 0 ? s->din : layer_out(s, l - 1)), sizeof(float));
    for (int si = 0; si < mb; si++) {
        uint64_t g = gm * (uint64_t)(mb * dworld) + (uint64_t)(drank * mb + si);
        for (int k = 0; k < s->din; k++) a[0][si * s->din + k] = (float)th_u11(g * 1000003ull + (uint64_t)k);
    }
    for (int l = 0; l < L; l++) {
        int in = layer_in(s, l), o = layer_out(s, l);
        const float *W = p[2 * l], *b = p[2 * l + 1];
        for (int si = 0; si < mb; si++)
            for (int j = 0; j < o; j++) {
                float z = b[j];
                for (int k = 0; k < in; k++) z += W[j * in + k] * a[l][si * in + k];
                a[l + 1][si * o + j] = (l == L - 1) ? z : tanhf(z);
            }
    }
    const float gain = p[2 * L][0];
    for (uint32_t i = 0; i < r->np; i++) memset(r->grad[i], 0, r->numel[i] * sizeof(float));
    float *dz = calloc((size_t)mb * s->h + (size_t)mb * s->dout, sizeof(float));
    float *da = calloc((size_t)mb * s->h, sizeof(float));
    for (int si = 0; si < mb; si++)
        for (int j = 0; j < s->dout; j++) {
            double acc = 0;
            for (int k = 0; k < s->din; k++) acc += a[0][si * s->din + k] * 0.5 * th_u11(7777777ull * (j + 1) + k);
            float t = (float)tanh(acc);
            float z = a[L][si * s->dout + j];
            float dy = (gain * z - t) / (float)mb;
            r->grad[2 * L][0] += dy * z;
            dz[si * s->dout + j] = dy * gain;
        }
    for (int l = L - 1; l >= 0; l--) {
        int in = layer_in(s, l), o = layer_out(s, l);
        const float *W = p[2 * l];
        float *dW = r->grad[2 * l], *db = r->grad[2 * l + 1];
        for (int si = 0; si < mb; si++)
            for (int j = 0; j < o; j++) {
                float d = dz[si * o + j];
                db[j] += d;
                for (int k = 0; k < in; k++) dW[j * in + k] += d * a[l][si * in + k];
            }
        if (l == 0) break;
        for (int si = 0; si < mb; si++)
            for (int k = 0; k < in; k++) {
                float acc = 0;
                for (int j = 0; j < o; j++) acc += W[j * in + k] * dz[si * o + j];
                float act = a[l][si * in + k];
                da[si * in + k] = acc * (1.0f - act * act);
            }
        memcpy(dz, da, (size_t)mb * in * sizeof(float));
    }
    free(dz);
    free(da);
    for (int l = 0; l <= L; l++) free(a[l]);
}

static void make_config(const host_run_cfg *c, char *buf, size_t n) {
    char bucket[64] = "";
    if (c->bucket > 0) snprintf(bucket, sizeof bucket, "\"reduce_bucket_size\": %lld, ", c->bucket);
    int stage = c->plugin[0] && c->plugin[5] >= '0' && c->plugin[5] <= '3' ? c->plugin[5] - '0' : 0;
    if (c->stage >= 0) stage = c->stage;
    const char *offload = c->offload ? "\"offload_optimizer\": {\"device\": \"cpu\"}, " : "";
    snprintf(buf, n,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"gradient_clipping\": 1.0,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %.17g, \"betas\": [0.9, 0.999],"
             " \"eps\": 1e-8, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d, %s%s\"overlap_comm\": %s, \"contiguous_gradients\": %s,"
             " \"strict_grads\": %s%s%s}}",
             c->mb, c->gas, c->config_lr, stage, bucket, offload, c->overlap ? "true" : "false",
             c->contiguous ? "true" : "false", c->strict ? "true" : "false",
             c->once_per_window ? ", \"reduce_once_per_window\": true" : "",
             c->round_robin ? ", \"round_robin_gradients\": true" : "");
}

static void shuffle(int *v, uint32_t n, uint64_t seed) {
    for (uint32_t k = n; k > 1; k--) {
        uint32_t j = (uint32_t)((th_u11(seed * 7919u + k) + 1.0) * 0.5 * k);
        if (j >= k) j = k - 1;
        int t = v[k - 1];
        v[k - 1] = v[j];
        v[j] = t;
    }
}

/* One micro-step: forward/backward, then every param's hook. */
static void micro_step(run_state *r, uint64_t gm, int m, int drank, int dworld) {
    const host_run_cfg *c = r->cfg;
    if (c->host_owned) {
        /* the host's own tensors are the parameters: no gather */
        compute_grads(r, r->host_param, gm, drank, dworld);
    } else {
        void **ptrs = calloc(r->np, sizeof *ptrs);
        zero_status s = zero_gather(r->e, r->h, r->np, ptrs);
        if (s != ZERO_OK) {
            free(ptrs);
            fail(r, s, "zero_gather");
            return;
        }
        compute_grads(r, (float *const *)ptrs, gm, drank, dworld);
        zero_release(r->e, r->h, r->np);
        free(ptrs);
    }
    r->last_micro = (m == c->gas - 1);
    /* natural backward order: last registered (output side) first */
    for (uint32_t k = 0; k < r->np; k++) r->order[k] = (int)(r->np - 1 - k);
    if (c->order == HOST_ORDER_SHUFFLED) shuffle(r->order, r->np, gm * 1000u + (uint64_t)zero_rank(r->e) + 1);
    if (c->threads > 1) {
        pthread_t th[8];
        fire_job jobs[8];
        int nt = c->threads > 8 ? 8 : c->threads;
        for (int t = 0; t < nt; t++) {
            jobs[t] = (fire_job){r, t, nt};
            pthread_create(&th[t], NULL, fire_thread, &jobs[t]);
        }
        for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    } else {
        fire_job j = {r, 0, 1};
        fire_thread(&j);
    }
}

/* The save at save_after: zero_save, or zero_save_ex with the client state. */
static zero_status save_now(zero_engine *e, const host_run_cfg *c) {
    if (!c->client_state) return zero_save(e, c->ckpt_dir);
    zero_save_options o = ZERO_SAVE_OPTIONS_INIT;
    o.client_state = c->client_state;
    o.client_state_bytes = strlen(c->client_state);
    return zero_save_ex(e, c->ckpt_dir, &o);
}

void host_run(const host_run_cfg *c, host_run_out *out) {
    memset(out, 0, sizeof *out);
    run_state r;
    memset(&r, 0, sizeof r);
    r.cfg = c;
    r.out = out;
    r.s = shape_of(c->model);
    pthread_mutex_init(&r.err_mu, NULL);
    out->numel = host_model_numel(c->model, &r.np, &out->max_param_numel);
    out->nparams = r.np;
    out->last_norm = -1;

    char json[1024];
    make_config(c, json, sizeof json);
    zero_status s = th_engine_create(json, c->plugin, c->self_comm, log_cb, out, &r.e, out->error, sizeof out->error);
    if (s != ZERO_OK) {
        out->status = s;
        return;
    }
    if (c->hp_lr >= 0) {
        zero_hparams hp = ZERO_HPARAMS_INIT;
        hp.lr = c->hp_lr;
        if ((s = zero_set_hparams(r.e, &hp)) != ZERO_OK) fail(&r, s, "zero_set_hparams");
    }
    int drank = c->data_rank >= 0 ? c->data_rank : zero_rank(r.e);
    int dworld = c->data_world > 0 ? c->data_world : zero_world_size(r.e);

    r.h = calloc(r.np, sizeof *r.h);
    r.numel = calloc(r.np, sizeof *r.numel);
    r.grad = calloc(r.np, sizeof *r.grad);
    r.host_grad = calloc(r.np, sizeof *r.host_grad);
    r.host_param = calloc(r.np, sizeof *r.host_param);
    r.order = calloc(r.np, sizeof *r.order);
    float **init = calloc(r.np, sizeof *init);
    zero_group_desc gd = ZERO_GROUP_DESC_INIT;
    gd.group = 1;
    gd.weight_decay = 0.0; /* biases and gain: no decay, as usual */
    if ((s = zero_set_group(r.e, &gd)) != ZERO_OK) fail(&r, s, "zero_set_group");
    for (uint32_t i = 0; i < r.np && out->status == ZERO_OK; i++) {
        int l = (int)i / 2;
        int is_gain = i == r.np - 1, is_w = !is_gain && i % 2 == 0;
        size_t in = is_gain ? 1 : (size_t)layer_in(&r.s, l), o2 = is_gain ? 1 : (size_t)layer_out(&r.s, l);
        r.numel[i] = is_gain ? 1 : is_w ? in * o2 : o2;
        r.grad[i] = calloc(r.numel[i], sizeof(float));
        init[i] = malloc(r.numel[i] * sizeof(float));
        for (size_t k = 0; k < r.numel[i]; k++)
            init[i][k] = is_gain ? 1.0f
                         : is_w  ? (float)(th_u11(((uint64_t)i << 32) + k) / sqrt((double)in))
                                 : (float)(0.01 * th_u11(((uint64_t)i << 32) + k));
        char name[32];
        snprintf(name, sizeof name, is_gain ? "gain" : is_w ? "layer%d.weight" : "layer%d.bias", l);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i]; /* read at zero_params_done */
        d.numel = r.numel[i];
        d.group = is_w ? 0 : 1;
        if (c->host_grad) d.grad = r.host_grad[i] = calloc(r.numel[i], sizeof(float));
        if (c->host_owned) {
            d.flags = ZERO_PARAM_HOST_OWNED;
            d.data = r.host_param[i] = init[i]; /* the host keeps it: libzero writes the updates here */
            init[i] = NULL;
        }
        if ((s = zero_register_param(r.e, &d, &r.h[i])) != ZERO_OK) fail(&r, s, "zero_register_param");
    }
    if (out->status == ZERO_OK && (s = zero_params_done(r.e)) != ZERO_OK) fail(&r, s, "zero_params_done");
    for (uint32_t i = 0; i < r.np; i++) free(init[i]);
    free(init);

    uint64_t gm = 0;
    if (c->resume_from >= 0 && out->status == ZERO_OK) {
        if ((s = zero_load(r.e, c->ckpt_dir)) != ZERO_OK) fail(&r, s, "zero_load");
        gm = (uint64_t)c->resume_from;
    }
    for (; gm < (uint64_t)c->steps * (uint64_t)c->gas && out->status == ZERO_OK; gm++) {
        int m = (int)(gm % (uint64_t)c->gas);
        micro_step(&r, gm, m, drank, dworld);
        if (out->status != ZERO_OK) break;
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        if ((s = zero_step(r.e, NULL, &res)) != ZERO_OK) {
            fail(&r, s, "zero_step");
            break;
        }
        if (res.boundary != (m == c->gas - 1)) fail(&r, ZERO_ERR_INTERNAL, "zero_step: unexpected boundary flag");
        if (res.boundary) out->last_norm = res.grad_norm;
        if (c->on_step) c->on_step(c->on_step_user, gm + 1);
        if (c->host_owned && res.boundary) {
            /* after the step the host's arrays hold exactly what zero_gather gives */
            float *g = malloc(out->numel * sizeof(float));
            if (g && (s = th_gather_all_f32(r.e, r.h, r.np, r.numel, g)) == ZERO_OK) {
                size_t off = 0;
                for (uint32_t i = 0; i < r.np; i++) {
                    if (memcmp(g + off, r.host_param[i], r.numel[i] * sizeof(float)) != 0) {
                        fail(&r, ZERO_ERR_INTERNAL, "host-owned param differs from zero_gather after zero_step");
                        break;
                    }
                    off += r.numel[i];
                }
            } else if (g) {
                fail(&r, s, "zero_gather (host-owned check)");
            }
            free(g);
        }
        if ((int64_t)gm + 1 == c->save_after && (s = save_now(r.e, c)) != ZERO_OK) fail(&r, s, "zero_save");
    }
    if (out->status == ZERO_OK && c->host_owned) {
        /* the final parameters straight from the host's own arrays */
        out->params = malloc(out->numel * sizeof(float));
        size_t off = 0;
        for (uint32_t i = 0; i < r.np; i++) {
            memcpy(out->params + off, r.host_param[i], r.numel[i] * sizeof(float));
            off += r.numel[i];
        }
    } else if (out->status == ZERO_OK) {
        out->params = malloc(out->numel * sizeof(float));
        if ((s = th_gather_all_f32(r.e, r.h, r.np, r.numel, out->params)) != ZERO_OK) fail(&r, s, "zero_gather (final)");
    }
    out->mem.struct_size = sizeof out->mem;
    zero_memory_stats_get(r.e, &out->mem);
    out->comm.struct_size = sizeof out->comm;
    zero_comm_stats_get(r.e, &out->comm);
    zero_engine_destroy(r.e);
    for (uint32_t i = 0; i < r.np; i++) {
        free(r.grad[i]);
        free(r.host_grad[i]);
        free(r.host_param[i]);
    }
    free(r.host_param);
    free(r.h);
    free(r.numel);
    free(r.grad);
    free(r.host_grad);
    free(r.order);
    pthread_mutex_destroy(&r.err_mu);
}

int host_run_on(int n, const host_run_cfg *c, host_run_out *out) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(out, 0, sizeof *out);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &comm);
    if (comm == MPI_COMM_NULL) return 0;
    th_set_comm(comm);
    host_run(c, out);
    th_set_comm(MPI_COMM_NULL);
    MPI_Comm_free(&comm);
    return 1;
}

void host_run_free(host_run_out *out) {
    free(out->params);
    out->params = NULL;
}
