/* bench_peers_host: the C trainer of bench/peers (see README.md).
 *
 * Trains the model of peers_mlp.h on the data file of peers_data.h with
 * libzero, the way a C trainer would: parameters registered once (libzero
 * owns them; each layer is used between zero_gather and zero_release, free
 * below stage 3), gradients ADDED into zero_grad_buffer and handed over
 * with zero_on_grad_ready the moment a layer's backward has them (before
 * the layer's input gradient, so the reduction overlaps the rest of
 * backward), zero_step per micro-batch.  Prints one JSON line (rank 0): the
 * slowest rank's median step time after the warm-up, the final loss, each
 * rank's peak RSS and libzero-accounted bytes, bytes communicated per step,
 * CPU milliseconds per step (every thread of the process)
 * and the mean wall_clock_breakdown phases (zero_step_timing_get).
 *
 *   bench_peers_host --write-data FILE [--width 1024 --layers 8 --mb 16 --pool 8]
 *   mpirun -np N bench_peers_host --data FILE --stage 2 [--steps 30 --warmup 5 --mb 16 --overlap 1
 *                                  --bucket 1048576 --round-robin 0 --label zero-stage2]
 *                                 [--plugin NAME] [--zo '"key": value, ...']
 * --plugin loads a strategy by name or path (an outside plugin: zeropp,
 * mics; bench/contrib_netns), --zo adds keys to zero_optimization (e.g.
 * ZeRO++'s switches, mics_shard_size).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "peers_data.h"
#include "peers_mlp.h"
#include "zero.h"

typedef struct opts {
    const char *data, *write_data, *label, *plugin, *zo;
    int width, layers, mb, pool, stage, steps, warmup, overlap, round_robin;
    long long bucket;
} opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bytes both ways through network interface `ifname` so far (its sysfs
 * counters, as the process's network namespace sees them), or -1 when it
 * cannot be read.  bench/contrib_netns names the veth end of host A in
 * PEERS_LINK_IF, so rank 0 (in host A) measures what crossed the link. */
static double link_bytes(const char *ifname) {
    double sum = 0.0;
    for (int k = 0; k < 2; k++) {
        char path[256];
        snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s_bytes", ifname, k ? "rx" : "tx");
        FILE *f = fopen(path, "r");
        unsigned long long v = 0;
        int ok = f && fscanf(f, "%llu", &v) == 1;
        if (f) fclose(f);
        if (!ok) return -1.0;
        sum += (double)v;
    }
    return sum;
}

/* CPU seconds of this process, every thread (host, BLAS, libzero's progress
 * thread): on an oversubscribed node the step time is roughly the ranks'
 * summed CPU time over the cores, so this shows work that waiting burns. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, zero_engine *e, zero_status s) {
    fprintf(stderr, "bench_peers_host: %s: %s %s\n", what, zero_status_string(s), e ? zero_last_error(e) : "");
    MPI_Abort(MPI_COMM_WORLD, 2);
}
#define Z(call)                                                 \
    do {                                                        \
        zero_status s_ = (call);                                \
        if (s_ != ZERO_OK) die(#call, e, s_);                   \
    } while (0)

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){NULL, NULL, NULL, NULL, "", 1024, 8, 16, 8, 2, 30, 5, 1, 0, 1048576};
    for (int i = 1; i < argc; i += 2) { /* --flag value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return -1;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--write-data")) o->write_data = v;
        else if (!strcmp(a, "--label")) o->label = v;
        else if (!strcmp(a, "--plugin")) o->plugin = v;
        else if (!strcmp(a, "--zo")) o->zo = v;
        else if (!strcmp(a, "--width")) o->width = atoi(v);
        else if (!strcmp(a, "--layers")) o->layers = atoi(v);
        else if (!strcmp(a, "--mb")) o->mb = atoi(v);
        else if (!strcmp(a, "--pool")) o->pool = atoi(v);
        else if (!strcmp(a, "--stage")) o->stage = atoi(v);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--overlap")) o->overlap = atoi(v);
        else if (!strcmp(a, "--round-robin")) o->round_robin = atoi(v);
        else if (!strcmp(a, "--bucket")) o->bucket = atoll(v);
        else return -1;
    }
    return (o->data || o->write_data) && o->steps > o->warmup ? 0 : -1;
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: see the comment at the top of bench/peers/peers_host.c\n");
        return 2;
    }
    if (o.write_data) {
        if (peers_data_write(o.write_data, o.width, o.layers, 8 * o.mb, o.pool) != 0) {
            perror(o.write_data);
            return 1;
        }
        return 0;
    }
    int provided = 0, rank = 0, world = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    peers_data d;
    char err[512];
    if (peers_data_read(o.data, &d, err, sizeof err) != 0 || world * o.mb > d.rows) {
        fprintf(stderr, "bench_peers_host: %s\n", d.params ? "batch pool too small for N * mb" : err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int W = d.width, L = d.layers, mb = o.mb;

    char json[2048];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": 1, \"steps_per_print\": 1000000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"betas\": [0.9, 0.999], \"eps\": 1e-8,"
             " \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": %s, \"contiguous_gradients\": true,"
             " \"reduce_bucket_size\": %lld, \"allgather_bucket_size\": %lld, \"round_robin_gradients\": %s%s%s}}",
             mb, o.stage, o.overlap ? "true" : "false", o.bucket, o.bucket, o.round_robin ? "true" : "false",
             *o.zo ? ", " : "", o.zo);
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options eo = ZERO_ENGINE_OPTIONS_INIT;
    eo.config_json = json;
    eo.plugin = o.plugin;
    eo.comm_kind = ZERO_COMM_MPI;
    eo.comm = &comm;
    zero_engine *e = NULL;
    Z(zero_engine_create(&eo, &e, err, sizeof err));
    zero_param **pw = calloc((size_t)L, sizeof *pw), **pb = calloc((size_t)L, sizeof *pb);
    size_t off = 0;
    for (int l = 0; l < L; l++) {
        char name[32];
        zero_param_desc pd = ZERO_PARAM_DESC_INIT;
        snprintf(name, sizeof name, "%d.weight", l);
        pd.name = name;
        pd.data = d.params + off;
        pd.numel = (uint64_t)W * (uint64_t)W;
        Z(zero_register_param(e, &pd, &pw[l]));
        off += pd.numel;
        snprintf(name, sizeof name, "%d.bias", l);
        pd.data = d.params + off;
        pd.numel = (uint64_t)W;
        Z(zero_register_param(e, &pd, &pb[l]));
        off += pd.numel;
    }
    Z(zero_params_done(e));
    free(d.params); /* libzero owns the parameters now */
    d.params = NULL;

    const size_t act = (size_t)mb * (size_t)W;
    float *a = malloc((size_t)(L + 1) * act * sizeof(float)), *da = malloc(act * sizeof(float)),
          *dprev = malloc(act * sizeof(float));
    double *times = malloc((size_t)o.steps * sizeof(double));
    double loss = 0.0;
    zero_step_timing t_warm = ZERO_STEP_TIMING_INIT;
    zero_comm_stats c_warm = ZERO_COMM_STATS_INIT;
    double cpu_warm = 0.0, link_warm = -1.0;
    const char *link_if = getenv("PEERS_LINK_IF");
    for (int s = 0; s < o.steps; s++) {
        if (s == o.warmup) {
            Z(zero_step_timing_get(e, ZERO_TIMING_TOTAL, &t_warm));
            Z(zero_comm_stats_get(e, &c_warm));
            cpu_warm = cpu_s();
            if (link_if && rank == 0) link_warm = link_bytes(link_if);
        }
        const size_t row0 = (size_t)(s % d.pool) * (size_t)d.rows + (size_t)rank * (size_t)mb;
        memcpy(a, d.x + row0 * W, act * sizeof(float));
        const float *y = d.y + row0 * W;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        for (int l = 0; l < L; l++) { /* forward */
            zero_param *h[2] = {pw[l], pb[l]};
            void *p[2];
            Z(zero_gather(e, h, 2, p));
            peers_layer_forward(mb, W, p[0], p[1], a + (size_t)l * act, a + (size_t)(l + 1) * act);
            Z(zero_release(e, h, 2));
        }
        loss = peers_mse(mb, W, a + (size_t)L * act, y, da);
        for (int l = L - 1; l >= 0; l--) { /* backward: hand each layer's gradients over at once */
            void *gw, *gb;
            Z(zero_grad_buffer(e, pw[l], &gw));
            Z(zero_grad_buffer(e, pb[l], &gb));
            peers_layer_backward(mb, W, a + (size_t)l * act, a + (size_t)(l + 1) * act, da, gw, gb);
            Z(zero_on_grad_ready(e, pw[l], NULL));
            Z(zero_on_grad_ready(e, pb[l], NULL));
            if (l == 0) break;
            zero_param *h = pw[l];
            void *w;
            Z(zero_gather(e, &h, 1, &w));
            peers_layer_input_grad(mb, W, w, da, dprev);
            Z(zero_release(e, &h, 1));
            float *t = da;
            da = dprev;
            dprev = t;
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        Z(zero_step(e, NULL, &r));
        times[s] = now_s() - t0;
    }
    const int n = o.steps - o.warmup;
    const double cpu_ms = (cpu_s() - cpu_warm) * 1e3 / n; /* per step, this rank */
    qsort(times + o.warmup, (size_t)n, sizeof(double), cmp_d);
    /* p10: the fast end of this rank's steps, what a step costs when no
     * other job took the cores (on a shared machine the median moves with
     * the load; compare both) */
    double med = times[o.warmup + n / 2], p10 = times[o.warmup + n / 10], slowest = 0.0, slowest_p10 = 0.0,
           mean_loss = 0.0;
    MPI_Allreduce(&med, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&p10, &slowest_p10, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&loss, &mean_loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    mean_loss /= world;

    /* FNV-1a over the bytes of every trained parameter, layer by layer: equal
     * hashes = bitwise equal models (tests/peers: stages 0/1/2 agree) */
    uint64_t fnv = 1469598103934665603ull;
    for (int l = 0; l < L; l++) {
        zero_param *h[2] = {pw[l], pb[l]};
        void *p[2];
        Z(zero_gather(e, h, 2, p));
        const size_t nb[2] = {(size_t)W * (size_t)W * sizeof(float), (size_t)W * sizeof(float)};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < nb[k]; i++) fnv = (fnv ^ ((const unsigned char *)p[k])[i]) * 1099511628211ull;
        Z(zero_release(e, h, 2));
    }
    zero_step_timing t = ZERO_STEP_TIMING_INIT;
    zero_comm_stats c = ZERO_COMM_STATS_INIT;
    zero_memory_stats m = ZERO_MEMORY_STATS_INIT;
    Z(zero_step_timing_get(e, ZERO_TIMING_TOTAL, &t));
    Z(zero_comm_stats_get(e, &c));
    Z(zero_memory_stats_get(e, &m));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* per rank: peak RSS MiB, libzero peak bytes (all tiers), bytes communicated per step, CPU ms per step */
    double mine[4] = {(double)ru.ru_maxrss / 1024.0, (double)(m.peak_total[0] + m.peak_total[1]),
                      (double)(c.bytes_reduced + c.bytes_gathered - c_warm.bytes_reduced - c_warm.bytes_gathered) / n,
                      cpu_ms};
    /* rank 0 only: bytes through the named link per measured step (-1: none) */
    const double link_end = link_if && rank == 0 && link_warm >= 0.0 ? link_bytes(link_if) : -1.0;
    const double link_per_step = link_end >= 0.0 ? (link_end - link_warm) / n : -1.0;
    double *all = malloc((size_t)world * 4 * sizeof(double));
    MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        const double k = 1e3 / n;
        printf("{\"mode\": \"%s\", \"world\": %d, \"params\": %zu, \"steps\": %d, \"warmup\": %d, \"step_ms\": %.4f,"
               " \"step_ms_p10\": %.4f, \"params_fnv1a\": \"%016llx\", \"link_bytes_per_step\": %.0f,"
               " \"final_loss\": %.8f, \"peak_rss_mib\": [",
               o.label ? o.label : "zero-c", world, peers_param_count(W, L), o.steps, o.warmup, slowest * 1e3, slowest_p10 * 1e3, (unsigned long long)fnv, link_per_step,
               mean_loss);
        for (int i = 0; i < world; i++) printf("%s%.1f", i ? ", " : "", all[4 * i]);
        printf("], \"zero_bytes\": [");
        for (int i = 0; i < world; i++) printf("%s%.0f", i ? ", " : "", all[4 * i + 1]);
        printf("], \"comm_bytes_per_step\": [");
        for (int i = 0; i < world; i++) printf("%s%.0f", i ? ", " : "", all[4 * i + 2]);
        printf("], \"cpu_ms_per_step\": [");
        for (int i = 0; i < world; i++) printf("%s%.2f", i ? ", " : "", all[4 * i + 3]);
        printf("], \"breakdown_ms\": {\"zero_step\": %.4f, \"exposed_comm\": %.4f, \"reduce\": %.4f, \"norm\": %.4f,"
               " \"optimizer\": %.4f, \"gather\": %.4f, \"copy\": %.4f, \"hooks\": %.4f}}\n",
               (t.step_seconds - t_warm.step_seconds) * k, (t.exposed_comm_seconds - t_warm.exposed_comm_seconds) * k,
               (t.reduce_seconds - t_warm.reduce_seconds) * k, (t.norm_seconds - t_warm.norm_seconds) * k,
               (t.optimizer_seconds - t_warm.optimizer_seconds) * k, (t.gather_seconds - t_warm.gather_seconds) * k,
               (t.copy_seconds - t_warm.copy_seconds) * k, (t.hook_seconds - t_warm.hook_seconds) * k);
        fflush(stdout);
    }
    free(all);
    free(times);
    free(a);
    free(da);
    free(dprev);
    free(pw);
    free(pb);
    peers_data_free(&d);
    zero_engine_destroy(e);
    MPI_Finalize();
    return 0;
}
