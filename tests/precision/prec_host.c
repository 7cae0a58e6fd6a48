/* See prec_host.h. */
#include "prec_host.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_util.h"
#include "optim_math.h" /* the library's RNE conversions, header-only: the host converts like a real one would */

static const size_t SIZES[PREC_NPARAMS] = {7, 300, 1031, 64, 2500, 1};

size_t prec_param_numel(int i) { return SIZES[i]; }
size_t prec_total_numel(void) {
    size_t n = 0;
    for (int i = 0; i < PREC_NPARAMS; i++) n += SIZES[i];
    return n;
}

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static double u01(uint64_t x) { return (double)(mix(x) >> 11) * (1.0 / 9007199254740992.0); }
static uint64_t key(uint64_t s, int i, size_t k, uint64_t salt) {
    return mix(s * 0x100000001b3ull + salt) ^ ((uint64_t)i << 40) ^ (uint64_t)k;
}

double prec_init(int i, size_t k) { return 0.5 * (2.0 * u01(key(0, i, k, 77)) - 1.0); }
double prec_sample_a(uint64_t s, int i, size_t k) { return 0.5 + u01(key(s, i, k, 1)); }
double prec_sample_t(uint64_t s, int i, size_t k) { return 2.0 * u01(key(s, i, k, 2)) - 1.0; }

double prec_rel_l2(const float *a, const float *b, size_t n) { return th_rel_l2(a, b, n); }

prec_cfg prec_default_cfg(void) {
    prec_cfg c;
    memset(&c, 0, sizeof c);
    c.plugin = "stage0";
    c.stage = 0;
    c.dtype = ZERO_DTYPE_F32;
    c.steps = 30;
    c.gas = 2;
    c.mb = 2;
    return c;
}

static float to_f32(const void *p, zero_dtype dt, size_t k) {
    if (dt == ZERO_DTYPE_F32) return ((const float *)p)[k];
    uint16_t h = ((const uint16_t *)p)[k];
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_f32(h) : zero_f16_to_f32(h);
}
static void from_f32(void *p, zero_dtype dt, size_t k, float v) {
    if (dt == ZERO_DTYPE_F32)
        ((float *)p)[k] = v;
    else
        ((uint16_t *)p)[k] = dt == ZERO_DTYPE_BF16 ? zero_f32_to_bf16(v) : zero_f32_to_f16(v);
}
static size_t esize(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

static int failed(prec_out *o, zero_status s, const char *what, const zero_engine *e) {
    if (s == ZERO_OK) return 0;
    if (o->status == ZERO_OK) {
        o->status = s;
        snprintf(o->error, sizeof o->error, "%s: %s (%s)", what, zero_status_string(s), e ? zero_last_error(e) : "");
    }
    return 1;
}

/* Gather every param widened to fp32 into dst (registration order). */
static zero_status gather_all(zero_engine *e, zero_param **h, zero_dtype dt, float *dst) {
    void *ptrs[PREC_NPARAMS];
    zero_status s = zero_gather(e, h, PREC_NPARAMS, ptrs);
    if (s != ZERO_OK) return s;
    size_t off = 0;
    for (int i = 0; i < PREC_NPARAMS; i++)
        for (size_t k = 0; k < SIZES[i]; k++) dst[off++] = to_f32(ptrs[i], dt, k);
    return zero_release(e, h, PREC_NPARAMS);
}

static void make_config(const prec_cfg *c, int world, char *buf, size_t n) {
    char prec[256] = "";
    if (c->dtype == ZERO_DTYPE_BF16) snprintf(prec, sizeof prec, "\"bf16\": {\"enabled\": true}, ");
    if (c->dtype == ZERO_DTYPE_F16)
        snprintf(prec, sizeof prec, "\"fp16\": %s, ",
                 c->fp16_json ? c->fp16_json : "{\"enabled\": true, \"initial_scale_power\": 12}");
    snprintf(buf, n,
             "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, "
             "\"gradient_accumulation_steps\": %d, %s"
             "\"optimizer\": %s, "
             "\"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 700, \"overlap_comm\": true, "
             "\"stage3_param_persistence_threshold\": 100%s%s}%s%s}",
             c->mb * c->gas * world, c->mb, c->gas, prec,
             c->optimizer_json ? c->optimizer_json
                               : "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}",
             c->stage, c->zero_extra_json ? ", " : "", c->zero_extra_json ? c->zero_extra_json : "",
             c->extra_json ? ", " : "", c->extra_json ? c->extra_json : "");
}

void prec_run(const prec_cfg *c, prec_out *o) {
    memset(o, 0, sizeof *o);
    int rank = 0, world = 1;
    if (!c->self_comm) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
    }
    const zero_dtype dt = c->dtype;
    const size_t total = prec_total_numel();
    o->numel = total;
    char json[2048];
    make_config(c, world, json, sizeof json);
    zero_engine *e = NULL;
    zero_status s = th_engine_create(json, c->plugin, c->self_comm, NULL, NULL, &e, o->error, sizeof o->error);
    if (s != ZERO_OK) {
        o->status = s;
        return;
    }
    zero_param *h[PREC_NPARAMS];
    void *init[PREC_NPARAMS];
    for (int i = 0; i < PREC_NPARAMS && o->status == ZERO_OK; i++) {
        init[i] = malloc(SIZES[i] * esize(dt));
        for (size_t k = 0; k < SIZES[i]; k++) from_f32(init[i], dt, k, (float)prec_init(i, k));
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i];
        d.numel = SIZES[i];
        d.dtype = dt;
        d.group = i % 2; /* two param groups */
        failed(o, zero_register_param(e, &d, &h[i]), "zero_register_param", e);
    }
    if (o->status == ZERO_OK) failed(o, zero_params_done(e), "zero_params_done", e);
    for (int i = 0; i < PREC_NPARAMS; i++) free(init[i]);
    float *w = malloc(total * sizeof(float)), *g = malloc(total * sizeof(float));
    o->params = malloc(total * sizeof(float));
    o->params_step1 = malloc(total * sizeof(float));
    uint64_t micro = 0;
    int first = 0;
    if (c->load_at > 0 && o->status == ZERO_OK) { /* resume: the data continues where the saved run was */
        failed(o, zero_load(e, c->ckpt_dir), "zero_load", e);
        first = c->load_at;
        micro = (uint64_t)first * (uint64_t)c->gas;
    }
    for (int step = first; step < c->steps && step < PREC_MAX_STEPS && o->status == ZERO_OK; step++) {
        o->scale_before[step] = zero_loss_scale(e);
        for (int m = 0; m < c->gas && o->status == ZERO_OK; m++, micro++) {
            if (failed(o, gather_all(e, h, dt, w), "zero_gather", e)) break;
            if (step == 1 && m == 0) memcpy(o->params_step1, w, total * sizeof(float)); /* after step 0 */
            const double scale = zero_loss_scale(e);
            /* fp32 gradient of (scale * mean loss) over this rank's samples */
            memset(g, 0, total * sizeof(float));
            for (int si = 0; si < c->mb; si++) {
                uint64_t smp = micro * (uint64_t)(world * c->mb) + (uint64_t)(rank * c->mb + si);
                size_t off = 0;
                for (int i = 0; i < PREC_NPARAMS; i++)
                    for (size_t k = 0; k < SIZES[i]; k++, off++)
                        g[off] += (float)(prec_sample_a(smp, i, k) * ((double)w[off] - prec_sample_t(smp, i, k)));
            }
            for (size_t k = 0; k < total; k++) g[k] = (float)((double)g[k] / c->mb * scale);
            if (m == c->gas - 1 && ((c->inject_mask >> step) & 1u) && rank == step % world)
                g[3 + SIZES[0]] = (step & 1) ? NAN : INFINITY; /* one element of p1, one rank */
            /* backward order: last param first; ADD into libzero's buffer */
            size_t offs[PREC_NPARAMS], off = 0;
            for (int i = 0; i < PREC_NPARAMS; i++) offs[i] = off, off += SIZES[i];
            for (int i = PREC_NPARAMS - 1; i >= 0 && o->status == ZERO_OK; i--) {
                void *buf = NULL;
                if (failed(o, zero_grad_buffer(e, h[i], &buf), "zero_grad_buffer", e)) break;
                for (size_t k = 0; k < SIZES[i]; k++)
                    from_f32(buf, dt, k, to_f32(buf, dt, k) + g[offs[i] + k]);
                failed(o, zero_on_grad_ready(e, h[i], NULL), "zero_on_grad_ready", e);
            }
            if (o->status != ZERO_OK) break;
            zero_step_result r = ZERO_STEP_RESULT_INIT;
            s = zero_step(e, NULL, &r);
            if (m == c->gas - 1) {
                o->step_status[step] = s;
                o->taken[step] = r.taken;
                o->overflow[step] = r.overflow;
                o->norm[step] = r.grad_norm;
                o->scale[step] = r.loss_scale;
                o->lr[step] = r.lr;
                o->nsteps = step + 1;
            }
            if (s == ZERO_ERR_LOSS_SCALE) goto done;
            if (failed(o, s, "zero_step", e)) break;
        }
        if (c->save_at > 0 && step + 1 == c->save_at && o->status == ZERO_OK)
            failed(o, zero_save(e, c->ckpt_dir), "zero_save", e);
    }
    if (o->status == ZERO_OK) failed(o, gather_all(e, h, dt, o->params), "zero_gather (final)", e);
    if (o->status == ZERO_OK && c->steps == 1) memcpy(o->params_step1, o->params, total * sizeof(float));
    o->mem.struct_size = sizeof o->mem;
    if (o->status == ZERO_OK) failed(o, zero_memory_stats_get(e, &o->mem), "zero_memory_stats_get", e);
done:
    free(w);
    free(g);
    zero_engine_destroy(e);
}

void prec_free(prec_out *o) {
    free(o->params);
    free(o->params_step1);
    o->params = o->params_step1 = NULL;
}
