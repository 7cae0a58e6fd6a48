/* One run of the memory sweep (tests/memory/memory_sweep.py): a synthetic
 * model of about --numel fp32 parameters in 8 layers (a weight of ~1/8 of
 * the model and a 64-element bias each, so no param is large next to the
 * model, as in real networks), trained for --steps optimizer steps with
 * DeepSpeed's default buffer sizes (reduce_bucket_size 5e8,
 * stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9: all far
 * above what these models need, the DeepSpeedExamples #123 situation) by the
 * host loop a trainer runs: forward gathers each layer, backward gathers it
 * again, adds its gradients and hands them in top layer first, zero_step.
 *
 * Prints one JSON line (rank 0; every figure is the maximum over ranks):
 *   plugin, world, numel, dev_peak and host_peak (zero_memory_stats
 *   peak_total per tier), other_peak (host tier, ZERO_MEM_OTHER: comm
 *   scratch), rss_growth (bytes: VmHWM at the end minus VmRSS just before
 *   zero_engine_create, the peak reset through /proc/self/clear_refs), and
 *   digest (sum of the final params, to see every plugin trained the same).
 * Usage: memory_sweep_host PLUGIN NUMEL STEPS [LAYERS]
 * PLUGIN may also be stage3-offload (stage 3 with offload_optimizer cpu),
 * stage3-offload-param (and offload_param cpu) or stage3-nvme (offload_param
 * cpu, offload_optimizer nvme under $ZERO_SWEEP_NVME or /tmp) or
 * stage3-nvme-param (both offloads nvme, offload_param buffer_count 3):
 * plugin stage3, issue 20.  The JSON line also has host_params_peak and
 * host_grads_peak (host tier, ZERO_MEM_PARAMS / ZERO_MEM_GRADS).  The JSON line also has step_ms, the median time of a training
 * iteration (gathers, gradients, zero_step) after the first.
 * LAYERS (default 8) sets the depth; ZERO_SWEEP_ZO is JSON text appended to
 * the zero_optimization object (", \"key\": value ..."). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_util.h"
#include "zero.h"

#define MAX_NL 4096
#define BIAS 64

static long proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = atol(line + kl + 1);
            break;
        }
    fclose(f);
    return v;
}

static void reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f); /* reset the peak resident set size to the current one */
    fclose(f);
}

static int die(const char *what, zero_status s, const char *err) {
    fprintf(stderr, "memory_sweep_host: %s: %s %s\n", what, zero_status_string(s), err ? err : "");
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}

int main(int argc, char **argv) {
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const int NL = argc == 5 ? atoi(argv[4]) : 8;
    if ((argc != 4 && argc != 5) || NL < 1 || NL > MAX_NL) {
        if (rank == 0) fprintf(stderr, "usage: memory_sweep_host PLUGIN NUMEL STEPS [LAYERS <= %d]\n", MAX_NL);
        MPI_Finalize();
        return 2;
    }
    const char *plugin = argv[1];
    const int pnvme = !strcmp(plugin, "stage3-nvme-param");
    const int nvme = !strcmp(plugin, "stage3-nvme") || pnvme;
    const int off3 = !strncmp(plugin, "stage3-offload", 14) || nvme,
              off3p = !strcmp(plugin, "stage3-offload-param") || nvme;
    char oo[512];
    snprintf(oo, sizeof oo, ", \"offload_optimizer\": {\"device\": \"%s\"%s%s%s}", nvme ? "nvme" : "cpu",
             nvme ? ", \"nvme_path\": \"" : "", nvme ? (getenv("ZERO_SWEEP_NVME") ? getenv("ZERO_SWEEP_NVME") : "/tmp") : "",
             nvme ? "\"" : "");
    char op[512];
    snprintf(op, sizeof op, ", \"offload_param\": {\"device\": \"nvme\", \"buffer_count\": 3, \"nvme_path\": \"%s\"}",
             getenv("ZERO_SWEEP_NVME") ? getenv("ZERO_SWEEP_NVME") : "/tmp");
    const char *zo_extra = getenv("ZERO_SWEEP_ZO") ? getenv("ZERO_SWEEP_ZO") : "";
    const long long total = atoll(argv[2]);
    const int steps = atoi(argv[3]);
    size_t wn = total / NL > 2 * BIAS ? (size_t)(total / NL - BIAS) : BIAS;
    size_t numel[2 * MAX_NL];
    for (int l = 0; l < NL; l++) {
        numel[2 * l] = wn;
        numel[2 * l + 1] = BIAS;
    }
    /* initial values: one host buffer for every param, allocated (and
     * touched) before the baseline so that it is not counted as growth */
    float *init = malloc(wn * sizeof(float));
    if (!init) return die("malloc", ZERO_ERR_OUT_OF_MEMORY, NULL);
    for (size_t i = 0; i < wn; i++) init[i] = (float)th_u11(i) * 0.01f;

    char json[2048];
    int stage = !strcmp(plugin, "offload") ? 2 : plugin[5] - '0';
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"weight_decay\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d%s%s%s}}",
             stage, !strcmp(plugin, "offload") || off3 ? oo : "",
             pnvme ? op : off3p ? ", \"offload_param\": {\"device\": \"cpu\"}" : "", zo_extra);
    if (off3) plugin = "stage3";
    MPI_Barrier(MPI_COMM_WORLD);
    reset_hwm();
    const long rss0 = proc_status_kb("VmRSS");

    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = th_engine_create(json, plugin, 0, NULL, NULL, &e, err, sizeof err);
    if (s != ZERO_OK) return die("engine", s, err);
    zero_param *h[2 * MAX_NL];
    for (int i = 0; i < 2 * NL; i++) {
        char name[32];
        snprintf(name, sizeof name, i % 2 ? "layer%d.bias" : "layer%d.weight", i / 2);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init;
        d.numel = numel[i];
        d.group = 0;
        if ((s = zero_register_param(e, &d, &h[i])) != ZERO_OK) return die("register", s, zero_last_error(e));
    }
    if ((s = zero_params_done(e)) != ZERO_OK) return die("params_done", s, zero_last_error(e));

    double step_s[64];
    for (int st = 0; st < steps; st++) {
        const double t0 = MPI_Wtime();
        void *ptr[2];
        for (int l = 0; l < NL; l++) { /* forward */
            if ((s = zero_gather(e, &h[2 * l], 2, ptr)) != ZERO_OK) return die("gather", s, zero_last_error(e));
            if ((s = zero_release(e, &h[2 * l], 2)) != ZERO_OK) return die("release", s, zero_last_error(e));
        }
        for (int l = NL - 1; l >= 0; l--) { /* backward, top layer first */
            if ((s = zero_gather(e, &h[2 * l], 2, ptr)) != ZERO_OK) return die("gather", s, zero_last_error(e));
            for (int k = 0; k < 2; k++) {
                float *g = NULL;
                if ((s = zero_grad_buffer(e, h[2 * l + k], (void **)&g)) != ZERO_OK)
                    return die("grad_buffer", s, zero_last_error(e));
                const float *w = ptr[k];
                for (size_t i = 0; i < numel[2 * l + k]; i++) g[i] += 0.1f * w[i] + 1e-3f * (float)(rank + 1);
                if ((s = zero_on_grad_ready(e, h[2 * l + k], NULL)) != ZERO_OK)
                    return die("grad_ready", s, zero_last_error(e));
            }
            if ((s = zero_release(e, &h[2 * l], 2)) != ZERO_OK) return die("release", s, zero_last_error(e));
        }
        zero_step_result res;
        memset(&res, 0, sizeof res);
        res.struct_size = sizeof res;
        if ((s = zero_step(e, NULL, &res)) != ZERO_OK) return die("step", s, zero_last_error(e));
        if (st < 64) step_s[st] = MPI_Wtime() - t0;
    }
    double step_ms = 0; /* median of the iterations after the first (insertion sort: a handful) */
    {
        int n = steps < 64 ? steps : 64, k0 = n > 1 ? 1 : 0;
        for (int i = k0 + 1; i < n; i++)
            for (int j = i; j > k0 && step_s[j] < step_s[j - 1]; j--) {
                double t = step_s[j];
                step_s[j] = step_s[j - 1];
                step_s[j - 1] = t;
            }
        if (n > k0) step_ms = 1e3 * step_s[k0 + (n - k0) / 2];
    }
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(e, &ms);
    double digest = 0;
    {
        void *ptr[1];
        for (int i = 0; i < 2 * NL; i++) {
            if ((s = zero_gather(e, &h[i], 1, ptr)) != ZERO_OK) return die("gather", s, zero_last_error(e));
            const float *w = ptr[0];
            for (size_t j = 0; j < numel[i]; j++) digest += w[j];
            zero_release(e, &h[i], 1);
        }
    }
    const long hwm = proc_status_kb("VmHWM");
    zero_engine_destroy(e);
    free(init);
    unsigned long long v[6] = {ms.peak_total[ZERO_TIER_DEVICE], ms.peak_total[ZERO_TIER_HOST],
                               ms.peak[ZERO_TIER_HOST][ZERO_MEM_OTHER],
                               hwm > rss0 && rss0 >= 0 ? (unsigned long long)(hwm - rss0) * 1024ull : 0ull,
                               ms.peak[ZERO_TIER_HOST][ZERO_MEM_PARAMS], ms.peak[ZERO_TIER_HOST][ZERO_MEM_GRADS]};
    unsigned long long m[6];
    MPI_Reduce(v, m, 6, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && getenv("ZERO_SWEEP_TAGS"))
        for (int g = 0; g < ZERO_MEM_NTAGS; g++)
            fprintf(stderr, "  rank 0 device peak %-8s %llu\n", zero_mem_tag_name(g),
                    (unsigned long long)ms.peak[ZERO_TIER_DEVICE][g]);
    if (rank == 0)
        printf("{\"plugin\": \"%s\", \"world\": %d, \"numel\": %lld, \"dev_peak\": %llu, \"host_peak\": %llu, "
               "\"other_peak\": %llu, \"rss_growth\": %llu, \"digest\": %.9g, \"step_ms\": %.3f, "
               "\"host_params_peak\": %llu, \"host_grads_peak\": %llu}\n",
               argv[1], world, total, m[0], m[1], m[2], m[3], digest, step_ms, m[4], m[5]);
    MPI_Finalize();
    return 0;
}
