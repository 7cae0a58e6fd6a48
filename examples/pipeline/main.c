/* zero-pipeline-demo: the demo's character-level model trained with
 * pipeline parallelism x ZeRO stage 1 (libzero plugin stage1-pp).
 *
 *   mpirun -np 4 zero-pipeline-demo --config examples/pipeline/pp2.json
 *
 * runs 2 pipeline stages (pipeline.stages in the config) x 2 data-parallel
 * replicas, M = gradient_accumulation_steps micro-batches per step in a 1F1B
 * schedule (--schedule gpipe for GPipe).  Same flags, step log and
 * --summary JSON as zero-demo (examples/demo), plus
 *   --schedule 1f1b|gpipe   pipeline schedule (default 1f1b)
 *   --dump-params FILE      rank 0 writes every parameter, fp32, in
 *                           registration order (for exact comparisons)
 * With pipeline.stages = 1 it is the unpipelined model (any plugin): the
 * reference the pipelined runs must match.
 *
 * Written against the public ABI only (zero.h); see pipe.h for the rank
 * layout and README.md for the whole story. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "pipe.h"
#include "report.h"
#include "run_common.h" /* zero-demo's model shape, step log and report: the two binaries' summaries compare */

/* Tags stay far below the 32767 MPI guarantees: micro-batch m uses 2m, 2m+1. */
enum { VAL_CHUNK = 256, VAL_TAG = 8000, DUMP_TAG = 20000 };

typedef struct pipe_flags {
    pipe_schedule schedule;
    const char *dump_path;
} pipe_flags;

/* Take our own flags out of argv (the rest goes to the demo's parser).
 * Returns 0, or -1 with a message. */
static int take_flags(int *argc, char **argv, pipe_flags *f, char *err, size_t err_len) {
    int out = 1;
    f->schedule = PIPE_1F1B;
    f->dump_path = NULL;
    for (int i = 1; i < *argc; ++i) {
        if (!strcmp(argv[i], "--schedule") || !strcmp(argv[i], "--dump-params")) {
            if (i + 1 >= *argc) {
                snprintf(err, err_len, "flag %s needs a value", argv[i]);
                return -1;
            }
            const char *v = argv[++i];
            if (argv[i - 1][2] == 'd') {
                f->dump_path = v;
            } else if (!strcmp(v, "1f1b")) {
                f->schedule = PIPE_1F1B;
            } else if (!strcmp(v, "gpipe")) {
                f->schedule = PIPE_GPIPE;
            } else {
                snprintf(err, err_len, "--schedule: got '%s', expected 1f1b or gpipe", v);
                return -1;
            }
            continue;
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

/* pipeline.stages of the config (1 if absent). */
static int config_stages(const json_t *root) {
    json_t *v = json_object_get(json_object_get(root, "pipeline"), "stages");
    return json_is_integer(v) ? (int)json_integer_value(v) : 1;
}

/* Mean loss over the validation set through the pipeline: each DP group
 * takes a contiguous shard, chunks flow stage to stage (blocking sends: the
 * traffic is one-way), the last stage sums, one MPI_Allreduce. */
static double validate(pipe_trainer *t, const demo_corpus *c, uint64_t *ntok) {
    const size_t n = c->n - c->n_train;
    const size_t lo = n * (size_t)t->dp_rank / (size_t)t->dp_size;
    const size_t hi = n * (size_t)(t->dp_rank + 1) / (size_t)t->dp_size;
    pipe_slot *s = &t->slots[t->nmicro];
    double sum = 0.0;
    int k = 0;
    for (size_t i = lo; i < hi; i += VAL_CHUNK, ++k) {
        int cnt = (int)(hi - i < (size_t)VAL_CHUNK ? hi - i : (size_t)VAL_CHUNK);
        demo_val_fill(c, t->d.ctx, i, cnt, s->tok, s->tgt);
        pipe_forward(t, s, cnt, VAL_TAG + (k & 1), 0.0);
        pipe_wait_sends(t);
        if (t->next < 0) sum += s->loss * cnt;
    }
    double total = 0.0;
    MPI_Allreduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, t->comm);
    *ntok = n;
    return total / (double)n;
}

/* Bring every parameter to global rank 0 (from DP rank 0 of the stage that
 * holds it).  Returns DEMO_NPARAMS arrays on rank 0 (caller frees), NULL
 * elsewhere. */
static float **collect_params(pipe_trainer *t) {
    void *ptrs[DEMO_NPARAMS];
    float **all = NULL;
    if (t->grank == 0) {
        all = calloc(DEMO_NPARAMS, sizeof *all);
        if (!all) pipe_die(t, "collect_params", "out of memory");
    }
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        const int owner = pipe_stage_of_param(t->stages, k) * t->dp_size;
        const int n = (int)demo_param_numel(&t->d, k);
        if (t->grank == 0) {
            all[k] = malloc((size_t)n * sizeof(float));
            if (!all[k]) pipe_die(t, "collect_params", "out of memory");
        }
        if (t->grank == owner) {
            PIPE_ZCALL(t, zero_gather(t->e, &t->p[k], 1, ptrs));
            if (owner == 0) memcpy(all[k], ptrs[0], (size_t)n * sizeof(float));
            else MPI_Send(ptrs[0], n, MPI_FLOAT, 0, DUMP_TAG + k, t->comm);
            PIPE_ZCALL(t, zero_release(t->e, &t->p[k], 1));
        } else if (t->grank == 0) {
            MPI_Recv(all[k], n, MPI_FLOAT, owner, DUMP_TAG + k, t->comm, MPI_STATUS_IGNORE);
        }
    }
    return all;
}

/* Same fp64 digest as zero-demo: per param sum / sumsq / |x|, added in
 * param order. */
static void digest(const demo_dims *d, float **all, demo_report *r) {
    r->digest_sum = r->digest_sumsq = r->digest_abssum = 0.0;
    for (int k = 0; k < DEMO_NPARAMS; ++k) demo_digest_add(r, k, all[k], demo_param_numel(d, k));
}

static int dump_params(const demo_dims *d, float **all, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = 1;
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = (size_t)demo_param_numel(d, k);
        ok &= fwrite(all[k], sizeof(float), n, f) == n;
    }
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* The pipeline's own facts, added to the zero-demo summary: the global
 * batch is micro * M * D (report.c counts every rank as a DP rank), plus
 * the layout and the DP-group comm counters of every rank. */
static int summary_patch(const char *path, const pipe_trainer *t, const char *sched, const uint64_t *comm,
                         char *err, size_t err_len) {
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) {
        snprintf(err, err_len, "cannot reread summary %s: %s", path, je.text);
        return -1;
    }
    json_object_set_new(o, "global_batch", json_integer((json_int_t)t->micro * t->nmicro * t->dp_size));
    json_t *stages = json_array(), *ranks = json_array();
    for (int s = 0; s < t->stages; ++s) {
        int lo, hi;
        pipe_layers_of_stage(t->stages, s, &lo, &hi);
        json_array_append_new(stages, json_pack("[ii]", lo, hi));
    }
    for (int g = 0; g < t->gsize; ++g)
        json_array_append_new(ranks, json_pack("{s:i,s:i,s:i,s:I,s:I,s:I}", "rank", g, "stage", g / t->dp_size,
                                               "dp_rank", g % t->dp_size, "reduction_passes",
                                               (json_int_t)comm[3 * g], "reduce_scatter_calls",
                                               (json_int_t)comm[3 * g + 1], "allreduce_calls",
                                               (json_int_t)comm[3 * g + 2]));
    json_object_set_new(o, "pipeline",
                        json_pack("{s:i,s:i,s:i,s:s,s:s,s:o,s:o}", "stages", t->stages, "data_parallel_size",
                                  t->dp_size, "micro_batches", t->nmicro, "schedule", sched, "rank_layout",
                                  "global rank = stage * data_parallel_size + dp_rank", "stage_layers", stages,
                                  "ranks", ranks));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(o, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (rc != 0 || rename(tmp, path) != 0) {
        snprintf(err, err_len, "cannot rewrite summary %s", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    pipe_trainer T = {0};
    pipe_trainer *t = &T;
    T.d = demo_default_dims;
    MPI_Comm_dup(MPI_COMM_WORLD, &T.comm);
    MPI_Comm_rank(T.comm, &T.grank);
    MPI_Comm_size(T.comm, &T.gsize);
    const int root = T.grank == 0;

    char err[1024] = "";
    pipe_flags pf;
    demo_options opt;
    int prc = take_flags(&argc, argv, &pf, err, sizeof err);
    if (prc == 0) prc = demo_options_parse(argc, argv, &opt, root, err, sizeof err);
    if (prc != 0) {
        if (prc < 0 && root) fprintf(stderr, "zero-pipeline-demo: %s\n", err);
        else if (root) printf("zero-pipeline-demo only: --schedule 1f1b|gpipe, --dump-params FILE\n");
        return demo_exit(&T.comm, prc < 0 ? 2 : 0);
    }
    T.schedule = pf.schedule;
    demo_train_config cfg;
    /* The batch arithmetic needs the DP size, which needs pipeline.stages:
     * read the config once for it, then for real. */
    if (demo_train_config_load(opt.config_path, 1, &cfg, err, sizeof err) == 0) {
        T.stages = cfg.root ? config_stages(cfg.root) : 1;
        demo_train_config_free(&cfg);
    }
    if (T.stages < 1 || T.stages > DEMO_NLAYERS || T.gsize % T.stages != 0) {
        if (root)
            fprintf(stderr, "zero-pipeline-demo: pipeline.stages %d: need 1..%d stages dividing the %d ranks\n",
                    T.stages, DEMO_NLAYERS, T.gsize);
        return demo_exit(&T.comm, 2);
    }
    T.dp_size = T.gsize / T.stages;
    if (demo_train_config_load(opt.config_path, T.dp_size, &cfg, err, sizeof err) != 0) {
        if (root) fprintf(stderr, "zero-pipeline-demo: %s\n", err);
        return demo_exit(&T.comm, 2);
    }
    demo_corpus corpus;
    if (demo_corpus_load(opt.data_path, &corpus, err, sizeof err) != 0) {
        if (root) fprintf(stderr, "zero-pipeline-demo: %s\n", err);
        demo_train_config_free(&cfg);
        return demo_exit(&T.comm, 2);
    }

    /* The whole job's communicator goes to libzero, which splits it into
     * the DP groups itself (pipeline.stages in the config). */
    T.e = demo_engine_create(&opt, &T.comm, T.grank);
    T.stage = T.grank / T.dp_size;
    T.dp_rank = T.grank % T.dp_size;
    if (zero_pipeline_stages(T.e) != T.stages || zero_pipeline_stage(T.e) != T.stage ||
        zero_rank(T.e) != T.dp_rank || zero_world_size(T.e) != T.dp_size) {
        snprintf(err, sizeof err, "libzero placed this rank at stage %d of %d, DP rank %d of %d; expected %d of %d, %d of %d",
                 zero_pipeline_stage(T.e), zero_pipeline_stages(T.e), zero_rank(T.e), zero_world_size(T.e), T.stage,
                 T.stages, T.dp_rank, T.dp_size);
        pipe_die(t, "rank layout", err);
    }
    pipe_layers_of_stage(T.stages, T.stage, &T.layer_lo, &T.layer_hi);
    T.prev = T.stage > 0 ? T.grank - T.dp_size : -1;
    T.next = T.stage < T.stages - 1 ? T.grank + T.dp_size : -1;
    T.micro = cfg.micro_batch;
    T.nmicro = cfg.grad_accum;
    pipe_register_params(t, opt.seed);
    uint64_t nparams = 0;
    for (int k = 0; k < DEMO_NPARAMS; ++k) nparams += demo_param_numel(&T.d, k);
    pipe_buffers_alloc(t, T.micro > VAL_CHUNK ? T.micro : VAL_CHUNK);
    const char *sched = T.schedule == PIPE_GPIPE ? "gpipe" : "1f1b";
    if (root)
        printf("zero-pipeline-demo: plugin %s, %d stage(s) x %d data-parallel rank(s) = %d rank(s), schedule %s, "
               "model %llu params (ctx %d, embed %d, hidden %d-%d), corpus %zu bytes from %d file(s) (train %zu, "
               "val %zu), micro-batch %d x %d micro-batches x %d DP rank(s) = %d samples/step, %ld steps\n",
               zero_plugin_name(T.e), T.stages, T.dp_size, T.gsize, sched, (unsigned long long)nparams, T.d.ctx,
               T.d.embed, T.d.hidden1, T.d.hidden2, corpus.n, corpus.nfiles, corpus.n_train,
               corpus.n - corpus.n_train, T.micro, T.nmicro, T.dp_size, T.micro * T.nmicro * T.dp_size, opt.steps);

    demo_run_log log;
    demo_run_log_init(&log, opt.steps);
    for (long step = 0; step < opt.steps; ++step) {
        MPI_Barrier(T.comm);
        double t0 = MPI_Wtime();
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        double local = pipe_train_step(t, &corpus, opt.seed, step, &res) / T.nmicro;
        const double ms = (MPI_Wtime() - t0) * 1e3;
        /* Mean over the global batch: only the last stage has losses. */
        double mean = 0.0;
        MPI_Allreduce(&local, &mean, 1, MPI_DOUBLE, MPI_SUM, T.comm);
        demo_run_log_step(&log, step, mean / T.dp_size, &res, ms, cfg.steps_per_print, root && !opt.quiet);
    }

    demo_report rep = {0};
    rep.val_loss = validate(t, &corpus, &rep.val_tokens);
    float **all = collect_params(t);

    uint64_t *mem = demo_mem_gather(T.e, T.comm, T.grank, T.gsize);
    zero_comm_stats cs = ZERO_COMM_STATS_INIT;
    int have_cs = zero_comm_stats_get(T.e, &cs) == ZERO_OK;
    uint64_t cmine[3] = {cs.reduction_passes, cs.reduce_scatter_calls, cs.allreduce_calls};
    uint64_t *call = root ? calloc((size_t)T.gsize * 3, sizeof(uint64_t)) : NULL;
    MPI_Gather(cmine, 3, MPI_UINT64_T, call, 3, MPI_UINT64_T, 0, T.comm);

    int rc = 0;
    if (root) {
        digest(&T.d, all, &rep);
        const double mean_ms = demo_run_log_mean_ms(&log);
        demo_print_final(&rep, &log, mean_ms);
        printf("comm per DP group (rank 0): %llu reduction pass(es), %llu reduce-scatter call(s) in %ld step(s)\n",
               (unsigned long long)cs.reduction_passes, (unsigned long long)cs.reduce_scatter_calls, opt.steps);
        demo_memory_print(stdout, T.gsize, mem);
        if (pf.dump_path && dump_params(&T.d, all, pf.dump_path) != 0) {
            fprintf(stderr, "zero-pipeline-demo: cannot write %s\n", pf.dump_path);
            rc = 1;
        }
        if (opt.summary_path) {
            demo_report_fill(&rep, T.e, T.gsize, &opt, &cfg, &corpus, T.micro, T.nmicro, nparams, &log, mean_ms, mem,
                             &cs, have_cs);
            if (demo_summary_write(&rep, opt.summary_path, err, sizeof err) != 0 ||
                summary_patch(opt.summary_path, t, sched, call, err, sizeof err) != 0) {
                fprintf(stderr, "zero-pipeline-demo: %s\n", err);
                rc = 1;
            }
        }
        fflush(stdout);
        for (int k = 0; k < DEMO_NPARAMS; ++k) free(all[k]);
        free(all);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, T.comm);

    free(mem);
    free(call);
    demo_run_log_free(&log);
    pipe_buffers_free(t);
    zero_engine_destroy(T.e);
    demo_corpus_free(&corpus);
    demo_train_config_free(&cfg);
    return demo_exit(&T.comm, rc);
}
