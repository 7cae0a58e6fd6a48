/* See run_common.h. */
#include "run_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const demo_dims demo_default_dims = {.ctx = 8, .embed = 24, .hidden1 = 256, .hidden2 = 256, .vocab = DEMO_VOCAB};

zero_engine *demo_engine_create(const demo_options *opt, MPI_Comm *comm, int rank) {
    char err[1024] = "";
    zero_engine_options eo = ZERO_ENGINE_OPTIONS_INIT;
    eo.config_path = opt->config_path;
    eo.comm_kind = ZERO_COMM_MPI;
    eo.comm = comm;
    if (opt->device_cuda) {
        /* On the GPU: one per local rank, NCCL over MPI_COMM_WORLD (the
         * demo's communicator is a duplicate of it); or, with --comm mpi,
         * the demo's MPI communicator behind libzero's staging layer, which
         * lets several ranks share one GPU (NCCL refuses that). */
        eo.device_kind = ZERO_DEVICE_CUDA;
        eo.device_index = ZERO_DEVICE_INDEX_AUTO;
        if (!opt->comm_mpi) {
            eo.comm_kind = ZERO_COMM_AUTO;
            eo.comm = NULL;
        }
    }
    eo.plugin = opt->plugin;
    zero_engine *e = NULL;
    zero_status s = zero_engine_create(&eo, &e, err, sizeof err);
    if (s != ZERO_OK) {
        fprintf(stderr, "[rank %d] zero_engine_create failed: %s: %s\n", rank, zero_status_string(s), err);
        demo_abort_after_report(*comm);
    }
    return e;
}

void demo_abort_after_report(MPI_Comm comm) {
    fflush(stdout);
    fflush(stderr);
    const struct timespec pause = {0, 300 * 1000 * 1000}; /* long enough for a peer's fprintf, short for a human */
    nanosleep(&pause, NULL);
    MPI_Abort(comm, 1);
}

void demo_run_log_init(demo_run_log *l, long steps) {
    l->steps = steps;
    l->skipped = 0;
    l->losses = calloc((size_t)steps + 1, sizeof(double));
    l->lrs = calloc((size_t)steps + 1, sizeof(double));
    l->grad_norms = calloc((size_t)steps + 1, sizeof(double));
    l->step_ms = calloc((size_t)steps + 1, sizeof(double));
    if (!l->losses || !l->lrs || !l->grad_norms || !l->step_ms) {
        fprintf(stderr, "zero-demo: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void demo_run_log_free(demo_run_log *l) {
    free(l->losses);
    free(l->lrs);
    free(l->grad_norms);
    free(l->step_ms);
}

void demo_run_log_step(demo_run_log *l, long step, double loss, const zero_step_result *res, double ms, int every,
                       int print) {
    l->step_ms[step] = ms;
    l->losses[step] = loss;
    l->lrs[step] = res->lr;
    l->grad_norms[step] = res->grad_norm;
    l->skipped += !res->taken;
    if (print && ((step + 1) % every == 0 || step == 0))
        printf("[Rank 0] step=%ld, skipped=%ld, loss=%.4f, lr=[%.4e], step_time_ms=%.2f, "
               "grad_norm=%.4f, loss_scale=%g\n",
               step + 1, l->skipped, loss, res->lr, ms, res->grad_norm, res->loss_scale);
    fflush(stdout);
}

double demo_run_log_mean_ms(const demo_run_log *l) {
    double mean_ms = 0.0;
    for (long k = 1; k < l->steps; ++k) mean_ms += l->step_ms[k];
    return l->steps > 1 ? mean_ms / (double)(l->steps - 1) : l->step_ms[0];
}

void demo_digest_add(demo_report *r, int k, const float *w, uint64_t n) {
    double s = 0.0, q = 0.0, a = 0.0;
    for (uint64_t j = 0; j < n; ++j) {
        double v = w[j];
        s += v;
        q += v * v;
        a += fabs(v);
    }
    /* the fp64 sums can tie for different parameters; the byte hash cannot
     * (short of a collision): the determinism tests compare it.  Callers
     * add parameters in order 0, 1, ...: parameter 0 restarts the hash. */
    uint64_t h = k == 0 ? 1469598103934665603ull : r->digest_bits;
    const unsigned char *bytes = (const unsigned char *)w;
    for (uint64_t j = 0; j < n * sizeof *w; ++j) h = (h ^ bytes[j]) * 1099511628211ull;
    r->digest_bits = h;
    r->param_sum[k] = s;
    r->param_sumsq[k] = q;
    r->digest_sum += s;
    r->digest_sumsq += q;
    r->digest_abssum += a;
}

uint64_t *demo_mem_gather(zero_engine *e, MPI_Comm comm, int rank, int world) {
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_status s = zero_memory_stats_get(e, &ms);
    if (s != ZERO_OK) {
        fprintf(stderr, "[rank %d] zero_memory_stats_get failed: %s: %s\n", rank, zero_status_string(s),
                zero_last_error(e));
        MPI_Abort(comm, 1);
    }
    uint64_t mine[DEMO_MEM_WORDS];
    demo_mem_pack(&ms, mine);
    uint64_t *all = NULL;
    if (rank == 0 && !(all = calloc((size_t)world * DEMO_MEM_WORDS, sizeof(uint64_t)))) {
        fprintf(stderr, "zero-demo: out of memory\n");
        MPI_Abort(comm, 1);
    }
    MPI_Gather(mine, DEMO_MEM_WORDS, MPI_UINT64_T, all, DEMO_MEM_WORDS, MPI_UINT64_T, 0, comm);
    return all;
}

void demo_print_final(const demo_report *rep, const demo_run_log *l, double mean_ms) {
    char val[96] = "val_loss skipped (--no-validation)";
    if (rep->val_tokens)
        snprintf(val, sizeof val, "val_loss=%.4f over %llu held-out chars", rep->val_loss,
                 (unsigned long long)rep->val_tokens);
    printf("final: loss=%.4f, %s, mean step %.2f ms, skipped %ld, digest sum=%.17g sumsq=%.17g\n",
           l->steps > 0 ? l->losses[l->steps - 1] : 0.0, val, mean_ms, l->skipped, rep->digest_sum,
           rep->digest_sumsq);
}

void demo_report_fill(demo_report *rep, zero_engine *e, int world, const demo_options *opt,
                      const demo_train_config *cfg, const demo_corpus *corpus, int micro, int gas, uint64_t nparams,
                      const demo_run_log *l, double mean_ms, const uint64_t *mem, const zero_comm_stats *cs,
                      int have_cs) {
    rep->plugin = zero_plugin_name(e);
    rep->world = world;
    rep->config_path = opt->config_path;
    rep->config = cfg->root;
    rep->data_path = opt->data_path;
    rep->train_bytes = corpus->n_train;
    rep->val_bytes = corpus->n - corpus->n_train;
    rep->steps = opt->steps;
    rep->micro_batch = micro;
    rep->grad_accum = gas;
    rep->seed = opt->seed;
    rep->dims = demo_default_dims;
    rep->num_params = nparams;
    rep->losses = l->losses;
    rep->lrs = l->lrs;
    rep->grad_norms = l->grad_norms;
    rep->step_ms = l->step_ms;
    rep->skipped_steps = l->skipped;
    rep->mean_step_ms = mean_ms;
    rep->mem = mem;
    rep->comm_exposed_s = have_cs ? cs->exposed_comm_seconds : -1.0;
    rep->comm_total_s = have_cs ? cs->total_comm_seconds : -1.0;
    rep->comm_bytes_reduced = have_cs ? cs->bytes_reduced : 0;
    rep->comm_bytes_gathered = have_cs ? cs->bytes_gathered : 0;
    rep->comm_allgather_calls = have_cs ? cs->allgather_calls : 0;
}

int demo_exit(MPI_Comm *comm, int rc) {
    MPI_Comm_free(comm);
    MPI_Finalize();
    return rc;
}
