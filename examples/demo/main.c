/* zero-demo: a character-level language model trained with libzero.
 *
 * A small but real C trainer written against the public ABI only (zero.h):
 * the host owns the model code (model.c, forward and backward by hand),
 * libzero owns the parameters, gradients' reduction and the optimizer.
 * The ZeRO stage comes from the DeepSpeed config or --plugin; this file does
 * not change between stages:
 *   - every use of a parameter, in forward and in backward, is bracketed by
 *     zero_gather / zero_release per layer (no-ops below stage 3);
 *   - backward runs from the top layer down and, as soon as a layer's
 *     gradients are final, adds them into zero_grad_buffer() and fires
 *     zero_on_grad_ready(), so libzero reduces them while the lower layers'
 *     backward goes on;
 *   - zero_step() once per micro-batch; libzero knows the accumulation
 *     boundary.
 * MPI is the host's: rank/size, the data shard, results gathered to rank 0.
 *
 * Mixed precision comes from the config (bf16.enabled / fp16.enabled): the
 * parameters are registered in that dtype and libzero keeps them and their
 * gradients so; the model math stays fp32 (precision.h converts at the
 * boundaries: gathered weights are widened into fp32 copies, fp32 gradients
 * are added into libzero's 16-bit buffers with one rounding per element),
 * and the fp16 loss is scaled by zero_loss_scale().
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "device.h"
#include "model.h"
#include "options.h"
#include "precision.h"
#include "report.h"
#include "run_common.h"
#include "zero.h"

/* Validation runs in chunks of this many positions. */
enum { VAL_CHUNK = 256 };

typedef struct trainer {
    zero_engine *e;
    MPI_Comm comm;
    int rank, world;
    demo_dims d;
    zero_param *p[DEMO_NPARAMS];
    int cap;                   /* batch capacity of the buffers below */
    uint8_t *tok, *tgt;
    float *x0, *h1, *h2, *logits; /* activations; logits become dlogits in backward */
    float *dx0, *dh1, *dh2;
    float *scratch;
    zero_dtype dtype;             /* model dtype (config) */
    float *wf[DEMO_NPARAMS];      /* 16-bit model: fp32 copies of gathered params */
    float *gf[DEMO_NPARAMS];      /* 16-bit model: fp32 gradient of the micro-batch */
    int on_device;                /* --device cuda: libzero's buffers are device memory */
    void *stage[DEMO_NPARAMS];    /* on_device: host copy of a gathered param, model dtype */
    void *gstage[DEMO_NPARAMS];   /* on_device: host copy of libzero's gradient buffer, model dtype
                                   * (apart from stage: backward still reads the weights after
                                   * handing in the gradient) */
} trainer;

/* A failed libzero call is fatal for the job: report it and take every rank
 * down (MPI_Abort) rather than leave the others waiting in a collective. */
static void die_zero(trainer *t, const char *what, zero_status s) {
    fprintf(stderr, "[rank %d] %s failed: %s: %s\n", t->rank, what, zero_status_string(s),
            t->e ? zero_last_error(t->e) : "");
    demo_abort_after_report(t->comm);
}
#define ZCALL(t, call)                                   \
    do {                                                 \
        zero_status zs_ = (call);                        \
        if (zs_ != ZERO_OK) die_zero((t), #call, zs_);   \
    } while (0)

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "zero-demo: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void buffers_alloc(trainer *t, int cap) {
    const demo_dims *d = &t->d;
    int widest = d->vocab > d->hidden1 ? d->vocab : d->hidden1;
    if (d->hidden2 > widest) widest = d->hidden2;
    t->cap = cap;
    t->tok = xcalloc((size_t)cap * d->ctx, 1);
    t->tgt = xcalloc((size_t)cap, 1);
    t->x0 = xcalloc((size_t)cap * d->ctx * d->embed, sizeof(float));
    t->dx0 = xcalloc((size_t)cap * d->ctx * d->embed, sizeof(float));
    t->h1 = xcalloc((size_t)cap * d->hidden1, sizeof(float));
    t->dh1 = xcalloc((size_t)cap * d->hidden1, sizeof(float));
    t->h2 = xcalloc((size_t)cap * d->hidden2, sizeof(float));
    t->dh2 = xcalloc((size_t)cap * d->hidden2, sizeof(float));
    t->logits = xcalloc((size_t)cap * d->vocab, sizeof(float));
    t->scratch = xcalloc((size_t)widest, sizeof(float));
}

static void buffers_free(trainer *t) {
    void *bufs[] = {t->tok, t->tgt, t->x0, t->dx0, t->h1, t->dh1, t->h2, t->dh2, t->logits, t->scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) free(bufs[i]);
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        free(t->wf[k]);
        free(t->gf[k]);
        free(t->stage[k]);
        free(t->gstage[k]);
    }
}

/* --device cuda: a failed copy is fatal for the job, as a failed libzero call. */
static void dev_copy(trainer *t, int to_device, void *dst, const void *src, size_t bytes) {
    char err[256];
    int rc = to_device ? demo_dev_upload(dst, src, bytes, err, sizeof err)
                       : demo_dev_download(dst, src, bytes, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "[rank %d] zero-demo --device cuda: %s\n", t->rank, err);
        MPI_Abort(t->comm, 1);
    }
}

/* ---- parameters ------------------------------------------------------- */

static void register_params(trainer *t, uint64_t seed) {
    void *init[DEMO_NPARAMS];
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        uint64_t n = demo_param_numel(&t->d, k);
        float *f = xcalloc(n, sizeof(float));
        demo_init_param(&t->d, k, seed, f);
        init[k] = f;
        if (t->dtype != ZERO_DTYPE_F32) { /* register the rounded values; keep fp32 copies for the math */
            init[k] = xcalloc(n, demo_dtype_size(t->dtype));
            demo_narrow(f, init[k], t->dtype, n);
            free(f);
            t->wf[k] = xcalloc(n, sizeof(float));
        }
        if (t->dtype != ZERO_DTYPE_F32) t->gf[k] = xcalloc(n, sizeof(float));
        if (t->on_device) {
            t->stage[k] = xcalloc(n, demo_dtype_size(t->dtype));
            t->gstage[k] = xcalloc(n, demo_dtype_size(t->dtype));
        }
        zero_param_desc desc = ZERO_PARAM_DESC_INIT;
        desc.name = demo_param_name(k);
        desc.data = init[k];
        desc.numel = n;
        desc.dtype = t->dtype;
        uint64_t dims[2];
        desc.ndim = demo_param_shape(&t->d, k, dims); /* (ABI 1.7) recorded in checkpoints */
        desc.shape = dims;
        ZCALL(t, zero_register_param(t->e, &desc, &t->p[k]));
    }
    ZCALL(t, zero_params_done(t->e));
    /* libzero copied the initial values; from here on it owns the storage. */
    for (int k = 0; k < DEMO_NPARAMS; ++k) free(init[k]);
}

/* Layer l's params, gathered: w[0] weight, w[1] bias (if any).  In stage 3
 * a gather is collective, so every rank must run the same sequence of them:
 * all loops around forward() have the same trip count on every rank. */
static void layer_acquire(trainer *t, int l, float **w) {
    const int first = demo_layer_first[l], n = demo_layer_count[l];
    void *ptrs[2];
    ZCALL(t, zero_gather(t->e, &t->p[first], (size_t)n, ptrs));
    for (int i = 0; i < n; ++i) {
        if (t->on_device) { /* the math runs on the CPU: bring the weights over */
            const int k = first + i;
            dev_copy(t, 0, t->stage[k], ptrs[i], demo_param_numel(&t->d, k) * demo_dtype_size(t->dtype));
            ptrs[i] = t->stage[k];
        }
        w[i] = ptrs[i];
        if (t->dtype != ZERO_DTYPE_F32) { /* the math reads an fp32 copy */
            demo_widen(ptrs[i], t->dtype, t->wf[first + i], demo_param_numel(&t->d, first + i));
            w[i] = t->wf[first + i];
        }
    }
}

/* Where the backward writes param k's gradient: libzero's buffer itself for
 * fp32 (on a device, a host copy of it that grad_commit uploads whole: the
 * backward then adds into what the buffer holds in the same order as on the
 * CPU -- the embedding adds several samples into one row, and summing them
 * apart first rounded differently once the buffer held an earlier
 * micro-batch), else a zeroed fp32 scratch that grad_commit adds into
 * libzero's. */
static float *grad_target(trainer *t, int k, void *zbuf) {
    if (t->dtype == ZERO_DTYPE_F32) {
        if (!t->on_device) return zbuf;
        dev_copy(t, 0, t->gstage[k], zbuf, demo_param_numel(&t->d, k) * sizeof(float));
        return t->gstage[k];
    }
    memset(t->gf[k], 0, demo_param_numel(&t->d, k) * sizeof(float));
    return t->gf[k];
}

static void grad_commit(trainer *t, int k, void *zbuf) {
    const size_t n = demo_param_numel(&t->d, k);
    if (t->on_device && t->dtype == ZERO_DTYPE_F32) {
        dev_copy(t, 1, zbuf, t->gstage[k], n * sizeof(float)); /* the backward added into the host copy */
    } else if (t->on_device) { /* 16-bit: add the fp32 sum into libzero's buffer through a host copy */
        dev_copy(t, 0, t->gstage[k], zbuf, n * demo_dtype_size(t->dtype));
        demo_add_rounded(t->gstage[k], t->dtype, t->gf[k], n);
        dev_copy(t, 1, zbuf, t->gstage[k], n * demo_dtype_size(t->dtype));
    } else if (t->dtype != ZERO_DTYPE_F32)
        demo_add_rounded(zbuf, t->dtype, t->gf[k], n);
    ZCALL(t, zero_on_grad_ready(t->e, t->p[k], NULL));
}

static void layer_done(trainer *t, int l) {
    ZCALL(t, zero_release(t->e, &t->p[demo_layer_first[l]], (size_t)demo_layer_count[l]));
}

/* ---- forward / backward ----------------------------------------------- */

/* Forward over `batch` samples in t->tok/t->tgt; returns the mean loss.
 * With `grad_scale` > 0, t->logits is replaced by grad_scale * dL/dlogits.
 * batch 0 only gathers and releases (keeps stage-3 ranks in step). */
static double forward(trainer *t, int batch, double grad_scale) {
    const demo_dims *d = &t->d;
    float *w[2];
    layer_acquire(t, 0, w);
    demo_embed_forward(d, batch, t->tok, w[0], t->x0);
    layer_done(t, 0);
    layer_acquire(t, 1, w);
    demo_dense_forward(batch, d->ctx * d->embed, d->hidden1, t->x0, w[0], w[1], t->h1, 1);
    layer_done(t, 1);
    layer_acquire(t, 2, w);
    demo_dense_forward(batch, d->hidden1, d->hidden2, t->h1, w[0], w[1], t->h2, 1);
    layer_done(t, 2);
    layer_acquire(t, 3, w);
    demo_dense_forward(batch, d->hidden2, d->vocab, t->h2, w[0], w[1], t->logits, 0);
    layer_done(t, 3);
    if (batch == 0) return 0.0;
    return demo_softmax_xent(batch, d->vocab, t->logits, t->tgt, grad_scale > 0 ? t->logits : NULL,
                             grad_scale);
}

/* Backward of one dense layer l (x -> y), dy given: parameter gradients go
 * straight into libzero's buffers and are handed over before dx is computed,
 * so their reduction overlaps the rest of backward. */
static void dense_backward(trainer *t, int l, int batch, int in, int out, const float *x, const float *y,
                           float *dy, float *dx, int tanh_act) {
    const int kw = demo_layer_first[l], kb = kw + 1;
    float *w[2];
    void *gw, *gb;
    layer_acquire(t, l, w);
    ZCALL(t, zero_grad_buffer(t->e, t->p[kw], &gw));
    ZCALL(t, zero_grad_buffer(t->e, t->p[kb], &gb));
    demo_dense_backward_params(batch, in, out, x, y, dy, grad_target(t, kw, gw), grad_target(t, kb, gb), tanh_act,
                               t->scratch);
    grad_commit(t, kw, gw);
    grad_commit(t, kb, gb);
    if (dx) demo_dense_backward_input(batch, in, out, dy, w[0], dx);
    layer_done(t, l);
}

static void backward(trainer *t, int batch) {
    const demo_dims *d = &t->d;
    dense_backward(t, 3, batch, d->hidden2, d->vocab, t->h2, NULL, t->logits, t->dh2, 0);
    dense_backward(t, 2, batch, d->hidden1, d->hidden2, t->h1, t->h2, t->dh2, t->dh1, 1);
    dense_backward(t, 1, batch, d->ctx * d->embed, d->hidden1, t->x0, t->h1, t->dh1, t->dx0, 1);
    /* The embedding's backward reads only token ids, not the table: no gather. */
    void *ge;
    ZCALL(t, zero_grad_buffer(t->e, t->p[DEMO_P_EMB], &ge));
    demo_embed_backward(d, batch, t->tok, t->dx0, grad_target(t, DEMO_P_EMB, ge));
    grad_commit(t, DEMO_P_EMB, ge);
}

/* ---- evaluation and digest -------------------------------------------- */

/* Mean loss over the whole validation set.  Each rank takes a contiguous
 * shard and walks it in the same number of chunks as every other rank (the
 * last ones may be empty), layer by layer, so stage 3 gathers only a layer
 * at a time here too and the reported peak memory is the training peak.
 * The sums meet in one MPI_Allreduce. */
static double validate(trainer *t, const demo_corpus *c, uint64_t *ntok) {
    const size_t n = c->n - c->n_train, w = (size_t)t->world;
    const size_t lo = n * (size_t)t->rank / w, hi = n * (size_t)(t->rank + 1) / w;
    const size_t nchunks = ((n + w - 1) / w + VAL_CHUNK - 1) / VAL_CHUNK;
    double sum = 0.0;
    /* Forward only: another gather order than training's.  Naming the phase
     * lets stage 3 keep (and prefetch from) one recorded order per phase. */
    ZCALL(t, zero_set_phase(t->e, "eval"));
    for (size_t k = 0; k < nchunks; ++k) {
        size_t i = lo + k * VAL_CHUNK;
        int cnt = i >= hi ? 0 : (int)(hi - i < (size_t)VAL_CHUNK ? hi - i : (size_t)VAL_CHUNK);
        if (cnt) demo_val_fill(c, t->d.ctx, i, cnt, t->tok, t->tgt);
        sum += forward(t, cnt, 0.0) * cnt;
    }
    ZCALL(t, zero_set_phase(t->e, "train"));
    double total = 0.0;
    MPI_Allreduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, t->comm);
    *ntok = n;
    return total / (double)n;
}

/* fp64 sum, sum of squares and sum of |x| of every parameter, read layer by
 * layer through zero_gather (collective in stage 3: every rank runs it).
 * The |x| sum is the scale against which a difference in the plain sum is
 * judged: the sum itself may be near zero. */
static void digest(trainer *t, demo_report *r) {
    r->digest_sum = r->digest_sumsq = r->digest_abssum = 0.0;
    ZCALL(t, zero_set_phase(t->e, "digest"));
    for (int l = 0; l < DEMO_NLAYERS; ++l) {
        float *w[2];
        layer_acquire(t, l, w);
        for (int i = 0; i < demo_layer_count[l]; ++i) {
            const int k = demo_layer_first[l] + i;
            demo_digest_add(r, k, w[i], demo_param_numel(&t->d, k));
        }
        layer_done(t, l);
    }
    ZCALL(t, zero_set_phase(t->e, "train"));
}

/* ---- main ------------------------------------------------------------- */

/* The optimizer step a checkpoint was saved at: state.global_step of its
 * manifest (DIR/manifest.json, or that of the directory DIR/latest names).
 * -1 if unreadable; zero_load reports what is wrong in detail. */
static long checkpoint_step(const char *dir) {
    char path[4200], tag[256] = "";
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *m = json_load_file(path, 0, NULL);
    if (!m) {
        snprintf(path, sizeof path, "%s/latest", dir);
        FILE *f = fopen(path, "r");
        if (!f) return -1;
        if (!fgets(tag, sizeof tag, f)) tag[0] = 0;
        fclose(f);
        tag[strcspn(tag, "\n")] = 0;
        snprintf(path, sizeof path, "%s/%s/manifest.json", dir, tag);
        m = json_load_file(path, 0, NULL);
    }
    json_t *g = json_object_get(json_object_get(m, "state"), "global_step");
    long step = json_is_integer(g) ? (long)json_integer_value(g) : -1;
    json_decref(m);
    return step;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    trainer T = {0};
    trainer *t = &T;
    T.d = demo_default_dims;
    MPI_Comm_dup(MPI_COMM_WORLD, &T.comm);
    MPI_Comm_rank(T.comm, &T.rank);
    MPI_Comm_size(T.comm, &T.world);
    const int root = T.rank == 0;
    if (provided < MPI_THREAD_MULTIPLE && root)
        fprintf(stderr, "zero-demo: warning: MPI gives thread level %d, not MPI_THREAD_MULTIPLE\n", provided);

    char err[1024] = "";
    demo_options opt;
    int prc = demo_options_parse(argc, argv, &opt, root, err, sizeof err);
    if (prc != 0) {
        if (prc < 0 && root) fprintf(stderr, "zero-demo: %s\n", err);
        return demo_exit(&T.comm, prc < 0 ? 2 : 0);
    }
    demo_train_config cfg;
    if (demo_train_config_load(opt.config_path, T.world, &cfg, err, sizeof err) != 0) {
        if (root) fprintf(stderr, "zero-demo: %s\n", err);
        return demo_exit(&T.comm, 2);
    }
    demo_corpus corpus;
    if (demo_corpus_load(opt.data_path, &corpus, err, sizeof err) != 0) {
        if (root) fprintf(stderr, "zero-demo: %s\n", err);
        demo_train_config_free(&cfg);
        return demo_exit(&T.comm, 2);
    }

    if (opt.device_cuda && !demo_dev_built()) {
        if (root) fprintf(stderr, "zero-demo: --device cuda: this demo was built without CUDA\n");
        demo_corpus_free(&corpus);
        demo_train_config_free(&cfg);
        return demo_exit(&T.comm, 2);
    }
    T.e = demo_engine_create(&opt, &T.comm, T.rank);
    T.on_device = opt.device_cuda;
    T.dtype = cfg.dtype;
    register_params(t, opt.seed);
    uint64_t nparams = 0;
    for (int k = 0; k < DEMO_NPARAMS; ++k) nparams += demo_param_numel(&T.d, k);

    const int micro = cfg.micro_batch, gas = cfg.grad_accum;
    buffers_alloc(t, micro > VAL_CHUNK ? micro : VAL_CHUNK);
    if (root)
        printf("zero-demo: plugin %s, %d rank(s), %s model %llu params (ctx %d, embed %d, hidden %d-%d), "
               "corpus %zu bytes from %d file(s) (train %zu, val %zu), micro-batch %d x accumulation %d x "
               "%d rank(s) = %d samples/step, %ld steps\n",
               zero_plugin_name(T.e), T.world,
               T.dtype == ZERO_DTYPE_BF16 ? "bf16" : T.dtype == ZERO_DTYPE_F16 ? "fp16" : "fp32",
               (unsigned long long)nparams, T.d.ctx, T.d.embed, T.d.hidden1,
               T.d.hidden2, corpus.n, corpus.nfiles, corpus.n_train, corpus.n - corpus.n_train, micro, gas,
               T.world, micro * gas * T.world, opt.steps);

    long first = 0;
    if (opt.resume_dir) {
        ZCALL(t, zero_load(T.e, opt.resume_dir)); /* any rank count and plugin (resharded) */
        first = checkpoint_step(opt.resume_dir);
        if (first < 0 || first > opt.steps) {
            if (root) fprintf(stderr, "zero-demo: --resume %s: checkpoint step %ld outside 0..--steps %ld\n",
                              opt.resume_dir, first, opt.steps);
            return demo_exit(&T.comm, 2);
        }
        if (root) printf("zero-demo: resumed from %s at step %ld\n", opt.resume_dir, first);
    }
    if (opt.init_dir) { /* fine-tuning: the weights alone; this run's optimizer and schedule from step 0 */
        zero_load_options lo = ZERO_LOAD_OPTIONS_INIT;
        lo.weights_only = 1;
        ZCALL(t, zero_load_ex(T.e, opt.init_dir, &lo));
        if (root) printf("zero-demo: weights from %s, optimizer and schedule from step 0\n", opt.init_dir);
    }
    zero_save_options so = ZERO_SAVE_OPTIONS_INIT;
    so.keep_last = (uint32_t)opt.keep_last;

    demo_run_log log;
    demo_run_log_init(&log, opt.steps);
    for (long step = first; step < opt.steps; ++step) {
        MPI_Barrier(T.comm); /* so the step time is the slowest rank's, not rank 0's head start */
        double t0 = MPI_Wtime(), local = 0.0;
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        for (int m = 0; m < gas; ++m) {
            uint64_t micro_step = (uint64_t)step * (uint64_t)gas + (uint64_t)m;
            demo_batch_fill(&corpus, T.d.ctx, opt.seed, micro_step, T.rank * micro, micro, T.tok, T.tgt);
            local += forward(t, micro, zero_loss_scale(T.e));
            backward(t, micro);
            ZCALL(t, zero_step(T.e, NULL, &res));
            if (res.boundary != (m == gas - 1)) {
                fprintf(stderr, "[rank %d] zero_step boundary %d at micro-step %d of %d: config mismatch?\n",
                        T.rank, res.boundary, m + 1, gas);
                MPI_Abort(T.comm, 1);
            }
        }
        const double ms = (MPI_Wtime() - t0) * 1e3;
        /* The logged loss is the mean over the global batch (all ranks, all
         * micro-batches), what one process on the whole batch would see. */
        double mean = 0.0;
        local /= gas;
        MPI_Allreduce(&local, &mean, 1, MPI_DOUBLE, MPI_SUM, T.comm);
        demo_run_log_step(&log, step, mean / T.world, &res, ms, cfg.steps_per_print, root && !opt.quiet);
        if (opt.save_dir && (step + 1 == opt.steps || (opt.save_every && (step + 1) % opt.save_every == 0)))
            ZCALL(t, zero_save_ex(T.e, opt.save_dir, &so));
    }

    demo_report rep = {0};
    rep.val_loss = NAN; /* the summary's null */
    if (!opt.no_validation) rep.val_loss = validate(t, &corpus, &rep.val_tokens);
    digest(t, &rep);

    uint64_t *all = demo_mem_gather(T.e, T.comm, T.rank, T.world);
    zero_comm_stats cs = ZERO_COMM_STATS_INIT;
    int have_cs = zero_comm_stats_get(T.e, &cs) == ZERO_OK;

    int rc = 0;
    if (root) {
        const double mean_ms = demo_run_log_mean_ms(&log);
        demo_print_final(&rep, &log, mean_ms);
        if (have_cs)
            printf("comm (rank 0): %.3f s in flight, %.3f s of it exposed (waited for in zero_step), "
                   "%llu reduction passes\n",
                   cs.total_comm_seconds, cs.exposed_comm_seconds, (unsigned long long)cs.reduction_passes);
        demo_memory_print(stdout, T.world, all);
        if (opt.summary_path) {
            demo_report_fill(&rep, T.e, T.world, &opt, &cfg, &corpus, micro, gas, nparams, &log, mean_ms, all, &cs,
                             have_cs);
            if (demo_summary_write(&rep, opt.summary_path, err, sizeof err) != 0) {
                fprintf(stderr, "zero-demo: %s\n", err);
                rc = 1;
            }
        }
        fflush(stdout);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, T.comm);

    free(all);
    demo_run_log_free(&log);
    buffers_free(t);
    zero_engine_destroy(T.e);
    demo_corpus_free(&corpus);
    demo_train_config_free(&cfg);
    return demo_exit(&T.comm, rc);
}
