/* onebit: DeepSpeed's OneBitAdam (1-bit Adam, Tang et al. 2021) as a
 * contrib strategy on the installed plugin kit.
 *
 * Warm-up (the first freeze_step optimizer steps): exactly stage 0 --
 * gradients all-reduced by the bucket engine, the core's boundary step
 * (AdamW without bias correction, which is what OnebitAdam's update is),
 * every rank steps everything.  Then the variance is frozen and the
 * gradients are no longer reduced: each rank folds its own mean gradient
 * into the momentum, m = b1 m + (1 - b1) g, the momentum is all-reduced
 * 1-bit compressed with error feedback on the worker and the server side
 * (onebit_comm.c), and every rank applies
 *     x -= lr * (m / (sqrt(v_frozen) + eps) + wd * x)
 * through the core's optimizer kernel (so the scheduler's lr, per-group
 * lr / weight decay and the core's AdamW rounding apply): the kernel is
 * given the states (m / b1, v_frozen / b2) and a zero gradient, so that its
 * moments come out as (m, v_frozen).
 *
 * Host memory, fp32 and bf16 models, no pipeline, no expert groups; checkpoints
 * resume bitwise at the same world size and reshard to others (ob_load). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onebit.h"

#define WHO "onebit"

typedef struct onebit {
    const zero_services *svc;
    zero_core *c;
    zero_kit_flat f;
    zero_kit_bsets bs;   /* warm-up: stage 0's all-reducing buckets over f.grads */
    int64_t freeze_step; /* optimizer.params.freeze_step (DeepSpeed's default 100000) */
    int frozen;          /* the current window runs compressed */
    int pending;         /* resharded load: the phase is decided at the first boundary (the step is not known
                            inside load); that window's gradients are all-reduced, as in the warm-up */
    float *vfrozen;      /* the variance frozen at the switch (flat) */
    onebit_car car;
    float *probe;        /* 4 x 16 floats: per-group betas (see group_betas) */
    float *sk;           /* 2 + ONEBIT_SKETCH floats: overflow flag, squared local norm, count sketch */
    uint64_t compressed_steps;
    int exact;           /* ZERO_ONEBIT_EXACT=1: exact momentum average (measurement only) */
    int contiguous;      /* the host writes into f.grads itself (fp32 model); else per-param bf16
                            temporaries (p->plugin_data), widened into f.grads when ready */
    int tmps;            /* plugin_data holds those temporaries (cleared at params_done) */
} onebit;

/* What create and plan refuse alike (error is svc->error or ps->error). */
typedef zero_status (*ob_error_fn)(zero_core *c, zero_status s, const char *fmt, ...);
static zero_status check_config(zero_core *c, const zero_run_config *rc, const char *type, ob_error_fn error) {
    if (!type || strcasecmp(type, "OneBitAdam") != 0)
        return error(c, ZERO_ERR_CONFIG,
                     WHO ": optimizer.type is %s%s%s, expected \"OneBitAdam\": this plugin is 1-bit Adam "
                         "(run other optimizers with stage0..3)",
                     type ? "\"" : "", type ? type : "absent", type ? "\"" : "");
    if (rc->model_dtype == ZERO_DTYPE_F16)
        return error(c, ZERO_ERR_UNSUPPORTED,
                     WHO ": the model dtype is fp16 (fp16.enabled); 1-bit Adam here runs fp32 and bf16 models "
                         "(fp16's loss scaling is not implemented for the compressed phase)");
    if (zero_kit_grad_dtype(rc) != ZERO_DTYPE_F32)
        return error(c, ZERO_ERR_UNSUPPORTED,
                     WHO ": data_types.grad_accum_dtype is not fp32; 1-bit Adam here accumulates gradients in fp32");
    if (!(rc->beta1 > 0.0) || !(rc->beta2 > 0.0))
        return error(c, ZERO_ERR_CONFIG,
                     WHO ": optimizer.params.betas [%g, %g]: 1-bit Adam needs both betas > 0 (the frozen "
                         "update runs the kernel on m / beta1, v / beta2)",
                     rc->beta1, rc->beta2);
    return ZERO_OK;
}

static zero_status ob_create(const zero_services *svc, void **state) {
    zero_core *c = svc->core;
    const zero_run_config *rc = svc->config(c);
    const char *type = NULL;
    if (svc->cfg_string(c, "optimizer.type", &type) != 1) type = NULL;
    zero_status cs = check_config(c, rc, type, svc->error);
    if (cs != ZERO_OK) return cs;
    zero_status st = zero_kit_create(svc, sizeof(onebit), ZERO_KIT_REFUSE_PIPELINE, WHO, state);
    if (st != ZERO_OK) return st;
    onebit *s = *state;
    s->svc = svc;
    s->c = c;
    s->freeze_step = 100000; /* DeepSpeed's default */
    int64_t fs;
    if (svc->cfg_int(c, "optimizer.params.freeze_step", &fs) == 1) s->freeze_step = fs;
    const char *ex = getenv("ZERO_ONEBIT_EXACT");
    s->exact = ex && strcmp(ex, "1") == 0;
    return ZERO_OK;
}

/* A CUDA engine's device tier is GPU memory, which this plugin's host code
 * cannot touch: the quantized collectives refuse device buffers, so one on
 * a single-rank communicator tells (no traffic). */
static zero_status refuse_device(onebit *s) {
    const zero_services *svc = s->svc;
    zero_comm *self = NULL;
    zero_status st = svc->comm_split(svc->comm_world(s->c), svc->comm_rank(svc->comm_world(s->c)), 0, &self);
    if (st != ZERO_OK) return st;
    float *probe = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, 64 * sizeof(float));
    if (!probe) {
        svc->comm_free(self);
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": out of memory");
    }
    const size_t counts[1] = {64};
    zero_quant_spec q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.bits = 8;
    st = svc->allgather_quantized(self, probe, counts, ZERO_DTYPE_F32, &q);
    svc->mem_free(s->c, probe);
    svc->comm_free(self);
    if (st == ZERO_ERR_UNSUPPORTED)
        return svc->error(s->c, ZERO_ERR_UNSUPPORTED,
                          WHO ": this engine keeps its model state in device (CUDA) memory; 1-bit Adam here runs on "
                              "host memory only (a CPU engine)");
    return st;
}

static zero_status ob_params_done(void *state) {
    onebit *s = state;
    const zero_services *svc = s->svc;
    const zero_layout *L = svc->layout(s->c);
    zero_status st = refuse_device(s);
    if (st != ZERO_OK) return st;
    if (svc->optim_state_count(s->c) != 2)
        return svc->error(s->c, ZERO_ERR_INTERNAL, WHO ": expected Adam's two optimizer states, the core has %u",
                          svc->optim_state_count(s->c));
    st = zero_kit_flat_init(&s->f, svc, 1, L->flat_numel, ZERO_INDEX_FLAT, WHO);
    if (st != ZERO_OK) return st;
    /* as stage0 decides (kit_dp.c): a bf16 model's fp32 gradient slots are
     * filled from per-param bf16 temporaries */
    s->contiguous = s->f.gdtype == s->f.dtype;
    if (!s->contiguous) {
        for (uint32_t i = 0; i < svc->nparams(s->c); i++) svc->param(s->c, i)->plugin_data = NULL;
        s->tmps = 1;
    }
    zero_bucket_spec spec =
        zero_kit_flat_bucket_spec(&s->f, ZERO_BUCKETS_ALLREDUCE, NULL, s->contiguous, s->f.grads);
    if ((st = zero_kit_bsets_create(&s->bs, svc, &spec)) != ZERO_OK) return st;
    s->vfrozen = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, L->flat_numel, sizeof(float));
    s->probe = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, 64, sizeof(float));
    s->sk = zero_kit_alloc_n(svc, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, 2 + ONEBIT_SKETCH, sizeof(float));
    if (!s->vfrozen || !s->probe || !s->sk)
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": cannot allocate the frozen variance");
    if ((st = onebit_car_init(&s->car, svc, svc->comm_world(s->c), L->flat_numel, WHO)) != ZERO_OK) return st;
    s->frozen = s->freeze_step <= 0;
    svc->log(s->c, ZERO_LOG_INFO,
             WHO ": %llu elements, %d ranks: Adam warm-up for %lld steps, then the momentum all-reduced as 1 bit "
                 "per element + one fp32 scale per %u (%zu bytes per rank and chunk)",
             (unsigned long long)L->flat_numel, s->car.n, (long long)s->freeze_step, ONEBIT_BLOCK, s->car.msg);
    return ZERO_OK;
}

static zero_status ob_grad_buffer(void *state, zero_param_info *p, void **buf) {
    onebit *s = state;
    if (!s->contiguous) return zero_kit_grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, WHO);
    if (!s->frozen) return s->svc->buckets_grad_slot(zero_kit_bsets_of(&s->bs, p->index), p->index, buf);
    *buf = (float *)s->f.grads + p->flat_offset; /* compressed phase: the local gradient, never reduced */
    return ZERO_OK;
}

static zero_status ob_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    onebit *s = state;
    (void)stream;
    if (!s->frozen)
        return zero_kit_grad_ready(s->svc, zero_kit_bsets_of(&s->bs, p->index), p,
                                   s->contiguous ? NULL : &p->plugin_data);
    /* compressed phase: added into the local gradient (model dtype widened) */
    float *dst = (float *)s->f.grads + p->flat_offset;
    if (!s->contiguous && p->plugin_data) {
        if (!p->grad_is_zero) s->svc->add_into(s->c, dst, p->plugin_data, s->f.dtype, p->numel);
        s->svc->mem_free(s->c, p->plugin_data);
        p->plugin_data = NULL;
    } else if (p->host_grad && !p->grad_is_zero) {
        s->svc->add_into(s->c, dst, p->host_grad, s->f.dtype, p->numel);
    }
    return ZERO_OK;
}

/* The betas the core's kernel uses for layout group g (per-group values
 * set by the host included): one kernel call on a scratch element with
 * m = v = 1 and a zero gradient leaves m = beta1, v = beta2. */
static zero_status group_betas(onebit *s, const zero_layout_group *g, float *b1, float *b2) {
    float *p = s->probe, *m = s->probe + 16, *v = s->probe + 32, *z = s->probe + 48;
    p[0] = 0.0f, m[0] = 1.0f, v[0] = 1.0f, z[0] = 0.0f;
    zero_opt_range r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.flat_lo = g->flat_begin;
    r.flat_hi = g->flat_begin + 1;
    r.master = p;
    r.state[0] = m;
    r.state[1] = v;
    r.grad = z;
    r.grad_mul = 0.0f;
    r.grad_dtype = ZERO_DTYPE_F32;
    zero_status st = s->svc->optim_step(s->c, &r);
    *b1 = m[0];
    *b2 = v[0];
    if (st == ZERO_OK && (!(*b1 > 0.0f) || !(*b2 > 0.0f)))
        return s->svc->error(s->c, ZERO_ERR_CONFIG, WHO ": param group %d has betas [%g, %g]: both must be > 0",
                             (int)g->group_id, (double)*b1, (double)*b2);
    return st;
}

static uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The count sketch of this rank's gradient g[0..P) into sk[0..ONEBIT_SKETCH)
 * (zeroed first): element i adds +-g[i] to one bucket, both drawn from a
 * hash of (i, step) -- the same on every rank, fresh every step so that no
 * pair of elements collides for long.  The sketch is linear: the sum over
 * ranks is the sketch of the summed gradient, and the sum of its squared
 * buckets estimates that gradient's squared norm without bias (Charikar et
 * al. 2002). */
static void sketch(const float *g, uint64_t P, uint64_t step, float *sk) {
    double acc[ONEBIT_SKETCH];
    memset(acc, 0, sizeof acc);
    const uint64_t seed = mix64(step * 0x9e3779b97f4a7c15ULL + 0x6f6e65626974ULL);
    for (uint64_t i = 0; i < P; i++) {
        const uint64_t h = mix64(i ^ seed);
        const double x = g[i];
        acc[h & (ONEBIT_SKETCH - 1)] += (h >> 63) ? -x : x;
    }
    for (uint32_t b = 0; b < ONEBIT_SKETCH; b++) sk[b] = (float)acc[b];
}

/* A boundary of the compressed phase.  reduced: f.grads holds the sum over
 * the ranks already (the first window after a resharded load, see
 * ob_step): the same momentum on every rank, nothing to compress. */
static zero_status frozen_boundary(onebit *s, const zero_step_ctx *ctx, zero_step_report *rep, int reduced) {
    const zero_services *svc = s->svc;
    const zero_layout *L = s->f.L;
    const uint64_t P = L->flat_numel;
    float *g = s->f.grads, *x = s->f.master, *m = s->f.state[0], *v = s->f.state[1];
    zero_comm *world = svc->comm_world(s->c);
    const int n = svc->comm_size(world);
    /* One all-reduce agrees on overflow (the gradients are never summed
     * now) and sums the ranks' count sketches: the sketch of the summed
     * gradient, whose norm estimates the norm of the mean gradient that
     * stage 0 reports and clips by.  Clipping each rank's gradient by its
     * own norm instead (DeepSpeed's OnebitAdam after the freeze) clips
     * harder than Adam does -- a local gradient carries the sampling noise
     * the mean averages out -- and on zero-demo (norms ~2, clip 1) trained
     * 0.08 nats behind Adam over 240 compressed steps at N = 4.  Without
     * clipping nothing depends on the norm: no sketch is made or sent, and
     * the reported norm is the root mean square of the ranks' local norms
     * (an over-estimate: each carries its own sampling noise). */
    float *red = s->sk;
    const double ss = svc->sumsq(s->c, g, ZERO_DTYPE_F32, (size_t)P);
    const int sketched = ctx->grad_clip > 0 && n > 1 && !reduced;
    red[0] = svc->nonfinite(s->c, g, ZERO_DTYPE_F32, (size_t)P) || !isfinite(ss) ? 1.0f : 0.0f;
    red[1] = isfinite(ss) ? (float)ss : 0.0f;
    if (sketched) sketch(g, P, ctx->global_step, red + 2);
    zero_status st = svc->allreduce(world, red, sketched ? 2 + ONEBIT_SKETCH : 2, ZERO_DTYPE_F32, ZERO_OP_SUM);
    if (st != ZERO_OK) return st;
    /* local gradient sum -> mean gradient, as if all-reduced (x n / n: the
     * divisor counts every rank's micro-batches) */
    const double ls = ctx->loss_scale > 0 ? ctx->loss_scale : 1.0;
    const double to_mean = (reduced ? 1.0 : (double)n) / (ctx->grad_divisor * ls);
    double est = 0;
    for (uint32_t b = 0; sketched && b < ONEBIT_SKETCH; b++) est += (double)red[2 + b] * red[2 + b];
    if (red[0] > 0 || !isfinite(est)) {
        rep->overflow = 1;
        rep->grad_norm = -1;
        return svc->mem_set(s->c, g, 0, s->f.grad_bytes);
    }
    rep->overflow = 0;
    /* the summed gradient over n ranks is n times the mean; one rank (or
     * an already reduced gradient) has its exact norm */
    rep->grad_norm = reduced    ? sqrt(ss) * to_mean
                     : sketched ? sqrt(est) / n * to_mean
                                : sqrt((double)red[1] / n) * to_mean;
    double mul = to_mean;
    if (ctx->grad_clip > 0 && rep->grad_norm > ctx->grad_clip) mul *= ctx->grad_clip / (rep->grad_norm + 1e-6);
    const float gm = (float)mul;
    for (uint32_t k = 0; k < L->ngroups; k++) {
        const zero_layout_group *G = &L->groups[k];
        float b1, b2;
        if ((st = group_betas(s, G, &b1, &b2)) != ZERO_OK) return st;
        const float omb1 = 1.0f - b1;
        for (uint64_t i = G->flat_begin; i < G->flat_begin + G->numel; i++) m[i] = b1 * m[i] + omb1 * (g[i] * gm);
    }
    if (reduced) { /* every rank holds the same momentum already */
    } else if (s->exact) { /* ZERO_ONEBIT_EXACT=1: the momentum averaged exactly (what the compression costs) */
        if ((st = svc->allreduce(world, m, (size_t)P, ZERO_DTYPE_F32, ZERO_OP_SUM)) != ZERO_OK) return st;
        const float inv = 1.0f / (float)n;
        for (uint64_t i = 0; i < P; i++) m[i] *= inv;
    } else if ((st = onebit_car_run(&s->car, m)) != ZERO_OK) {
        return st;
    }
    for (uint32_t k = 0; k < L->ngroups; k++) {
        const zero_layout_group *G = &L->groups[k];
        float b1, b2;
        if ((st = group_betas(s, G, &b1, &b2)) != ZERO_OK) return st;
        const uint64_t lo = G->flat_begin, hi = G->flat_begin + G->numel;
        for (uint64_t i = lo; i < hi; i++) {
            m[i] = m[i] / b1;
            v[i] = s->vfrozen[i] / b2;
        }
        zero_opt_range r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        r.flat_lo = lo;
        r.flat_hi = hi;
        r.master = x + lo;
        r.state[0] = m + lo;
        r.state[1] = v + lo;
        r.grad = g + lo;
        r.grad_mul = 0.0f; /* the moments come out as (m, v_frozen) */
        r.grad_dtype = ZERO_DTYPE_F32;
        if ((void *)s->f.master != s->f.params) { /* bf16: the new weights rounded into the params */
            r.param_out = (char *)s->f.params + (size_t)lo * s->f.esize;
            r.param_out_dtype = s->f.dtype;
        }
        if (hi > lo && (st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    }
    /* the optimizer state keeps the frozen variance itself, not the
     * kernel's rounding of it: a checkpoint then carries it in state1, the
     * core's sharded blob, which survives resharding (the plugin's own
     * blobs do not) */
    memcpy(v, s->vfrozen, (size_t)P * sizeof(float));
    s->compressed_steps++;
    return svc->mem_set(s->c, g, 0, s->f.grad_bytes);
}

static zero_status ob_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    onebit *s = state;
    const zero_services *svc = s->svc;
    zero_status st;
    if (s->frozen) return ctx->boundary ? frozen_boundary(s, ctx, rep, 0) : ZERO_OK;
    if ((st = zero_kit_bsets_flush(&s->bs)) != ZERO_OK || !ctx->boundary) return st;
    if (s->pending) { /* the first boundary after a resharded load */
        s->pending = 0;
        if ((int64_t)ctx->global_step >= s->freeze_step) {
            /* the saver had frozen the variance already: it is state1 (see
             * frozen_boundary); this window's all-reduced gradient feeds the
             * momentum exactly, the later ones are compressed */
            memcpy(s->vfrozen, s->f.state[1], (size_t)s->f.L->flat_numel * sizeof(float));
            s->frozen = 1;
            svc->log(s->c, ZERO_LOG_INFO, WHO ": step %llu: resumed in the compressed phase (frozen variance from "
                     "the checkpoint's optimizer state)", (unsigned long long)ctx->global_step + 1);
            return frozen_boundary(s, ctx, rep, 1);
        }
    }
    if ((st = zero_kit_flat_boundary(&s->f, ctx, rep)) != ZERO_OK) return st;
    if (!rep->overflow && (int64_t)ctx->global_step + 1 >= s->freeze_step) {
        /* DeepSpeed: after the step where step >= freeze_step the variance is
         * frozen and backward no longer all-reduces */
        memcpy(s->vfrozen, s->f.state[1], (size_t)s->f.L->flat_numel * sizeof(float));
        onebit_car_reset(&s->car);
        s->frozen = 1;
        svc->log(s->c, ZERO_LOG_INFO, WHO ": step %llu: variance frozen, compressed momentum from the next step",
                 (unsigned long long)ctx->global_step + 1);
    }
    return ZERO_OK;
}

/* Checkpoint: the flat state through the core's sharded blobs (params,
 * master, m, v -- v is the frozen variance once frozen, see
 * frozen_boundary) and the window's gradient, plus this plugin's own
 * per-rank blobs -- the phase and both error-feedback buffers -- so that a
 * job resumed at the same world size continues bitwise (DeepSpeed instead
 * resets the errors on load).
 * Resharding (another world size or plugin, ZERO_PLUGIN_CAP_RESHARD): the
 * core's blobs are resharded, the plugin's own are not readable (the
 * contract of ckpt_reshard).  The phase then follows from the step at the
 * first boundary (pending); the error buffers start from zero, with a
 * note: each is the residue of this world size's compression -- worker w's
 * of its own momentum, server j's of chunk j of N -- and is at most one
 * step's compression error, which error feedback re-absorbs within a few
 * steps (DeepSpeed resets them on every load). */
static uint32_t own_blobs(onebit *s, zero_kit_blob *b, int64_t *phase) {
    b[0] = (zero_kit_blob){"phase", phase, sizeof *phase};
    b[1] = (zero_kit_blob){"werr", s->car.werr, (size_t)s->car.padded * sizeof(float)};
    b[2] = (zero_kit_blob){"serr", s->car.serr, (size_t)s->car.chunk * sizeof(float)};
    return 3;
}

static zero_status ob_save(void *state, const char *dir) {
    onebit *s = state;
    zero_status st = zero_kit_flat_ckpt(&s->f, dir, WHO, "grads", 1);
    if (st != ZERO_OK) return st;
    int64_t phase = s->frozen;
    zero_kit_blob b[3];
    const uint32_t nb = own_blobs(s, b, &phase);
    return zero_kit_blobs_io(s->svc, dir, WHO, b, nb, 1);
}

static zero_status ob_load(void *state, const char *dir) {
    onebit *s = state;
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_flat_load(&s->f, dir, WHO, "grads", NULL);
    if (st != ZERO_OK) return st;
    onebit_car_reset(&s->car);
    if (svc->ckpt_reshard(s->c)) {
        s->frozen = 0;
        s->pending = 1;
        if (svc->comm_rank(svc->comm_world(s->c)) == 0)
            svc->log(s->c, ZERO_LOG_INFO,
                     WHO ": resharded load of %s: the worker and server error-feedback buffers start from zero "
                         "(they belong to the saver's ranks and chunks); the phase follows from the step",
                     dir);
        return ZERO_OK;
    }
    int64_t phase = 0;
    zero_kit_blob b[3];
    const uint32_t nb = own_blobs(s, b, &phase);
    st = zero_kit_blobs_io(svc, dir, WHO, b, nb, 0);
    if ((st = zero_kit_blobs_agree(svc, NULL, st, dir, WHO)) != ZERO_OK) return st;
    s->frozen = phase != 0;
    s->pending = 0;
    if (s->frozen) memcpy(s->vfrozen, s->f.state[1], (size_t)s->f.L->flat_numel * sizeof(float));
    return ZERO_OK;
}

/* write_params (plugin ABI 1.8, zero_params_write): every rank holds the
 * whole flat state and was handed the same values, so each writes the
 * param's slot of the flat params and, for a bf16 model, widens it into
 * its replicated fp32 master (zero_kit_flat_write; no communication).  The
 * momentum, the variance and the frozen variance, the error-feedback
 * buffers and the phase are not touched: a write in the compressed phase
 * stays in it. */
static zero_status ob_write_params(void *state, zero_param_info *const *params, size_t n,
                                   const void *const *values) {
    onebit *s = state;
    return zero_kit_flat_write(&s->f, params, n, values);
}

static void ob_destroy(void *state) {
    onebit *s = state;
    if (!s) return;
    if (s->car.svc)
        s->svc->log(s->c, ZERO_LOG_INFO, WHO ": %llu compressed steps; exchanges %llu calls %llu bytes",
                    (unsigned long long)s->compressed_steps, (unsigned long long)s->car.calls,
                    (unsigned long long)s->car.bytes);
    onebit_car_free(&s->car);
    zero_kit_bsets_destroy(&s->bs);
    if (s->tmps) zero_kit_grad_tmps_free(s->svc); /* temporaries never reported ready */
    if (s->vfrozen) s->svc->mem_free(s->c, s->vfrozen);
    if (s->probe) s->svc->mem_free(s->c, s->probe);
    if (s->sk) s->svc->mem_free(s->c, s->sk);
    zero_kit_flat_free(&s->f);
    free(s);
}

/* ABI 1.2: what params_done allocates, without allocating (zero_plan,
 * zero-estimate): stage 0's flat state and buckets (zero_kit_flat_plan),
 * the per-param gradient temporaries of a bf16 model, the frozen variance
 * (a third flat fp32 optimizer array), the betas probe and the sketch, and
 * the compression's error-feedback buffers and sign/scale messages
 * (onebit_car_plan; host tier).  A pipeline is refused as create does. */
static zero_status ob_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    const char *type = NULL;
    if (ps->cfg_string(c, "optimizer.type", &type) != 1) type = NULL;
    zero_status st = check_config(c, rc, type, ps->error);
    if (st != ZERO_OK) return st;
    if (rc->pipeline_stages > 1)
        return ps->error(c, ZERO_ERR_UNSUPPORTED, WHO ": pipeline parallelism is not supported");
    if (ps->optim_state_count(c) != 2)
        return ps->error(c, ZERO_ERR_INTERNAL, WHO ": expected Adam's two optimizer states, the plan has %u",
                         ps->optim_state_count(c));
    const uint64_t P = L->flat_numel;
    zero_kit_flat_plan(ps, 1, P, ZERO_BUCKETS_ALLREDUCE);
    if (zero_kit_grad_dtype(rc) != rc->model_dtype) zero_kit_grad_tmp_plan(ps);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, P * sizeof(float));
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OTHER, (64 + 2 + ONEBIT_SKETCH) * sizeof(float));
    onebit_car_plan(ps, (int)L->world, P);
    return ZERO_OK;
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_GRAD_DTYPES /* fp32 gradients of a bf16 model, as stage0 */
            | ZERO_PLUGIN_CAP_RESHARD, /* model state in the core's sharded blobs (see ob_save) */
    .name = "onebit",
    .description = "1-bit Adam (DeepSpeed OneBitAdam): Adam warm-up, then the momentum all-reduced as signs + "
                   "scales with error feedback",
    .create = ob_create,
    .params_done = ob_params_done,
    .grad_buffer = ob_grad_buffer,
    .on_grad_ready = ob_on_grad_ready,
    .step = ob_step,
    .save = ob_save,
    .load = ob_load,
    .write_params = ob_write_params,
    .destroy = ob_destroy,
    .plan = ob_plan,
};
