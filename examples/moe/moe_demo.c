/* zero-moe-demo: the demo's character-level language model with a
 * mixture-of-experts layer, trained with libzero's expert groups (ABI 1.3).
 * Written against the public ABI only (zero.h), like examples/demo, whose
 * model math (model.c), data (data.c) and precision helpers it reuses.
 *
 *   bytes --embed--> x0 --dense+tanh--> h1 --gate (dense, softmax, top-1 e)-->
 *   h2 = p_e * tanh(h1 We + be)  (expert e: a dense+tanh layer)
 *   --dense--> logits --softmax/cross-entropy--> loss
 *
 * Experts are sharded over ranks: with E experts rank r holds expert r % E;
 * the E consecutive ranks {E*(r/E) .. E*(r/E)+E-1} form an expert-parallel
 * group that exchanges tokens (MPI_Alltoallv, the host's own
 * communication), and the ranks holding the same expert form its
 * expert-data-parallel group: zero_group_desc.expert_color = r % E.  libzero
 * reduces and partitions dense gradients over every rank and each expert's
 * over its expert-DP group; the global gradient norm counts each expert once.
 *
 * Every step prints the global-batch mean loss; at the end rank 0 prints the
 * tiled optimizer step's fp32 temporaries (zero_memory_stats, 1.3) against a
 * whole-partition upcast.  --check: exit non-zero unless the loss fell and the
 * step's peak fp32 temporary is at most one tile (x 4 bytes).
 *
 * A failed libzero or MPI call aborts the job (MPI_Abort), as in the demo. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "precision.h"
#include "zero.h"

enum { P_EMB, P_W1, P_B1, P_GW, P_GB, P_W3, P_B3, P_EW, P_EB, NP };
static const char *const pname[NP] = {"embed.weight", "hidden1.weight", "hidden1.bias", "gate.weight", "gate.bias",
                                      "out.weight",   "out.bias",       "expert.weight", "expert.bias"};

typedef struct moe {
    zero_engine *e;
    MPI_Comm ep;           /* this rank's expert-parallel group (token exchange) */
    int rank, world, experts, expert; /* expert: the one this rank holds */
    demo_dims d;
    zero_dtype dtype;
    zero_param *p[NP];
    uint64_t n[NP];
    float *w[NP], *g[NP];  /* fp32 copies of the gathered params; fp32 gradients of the micro-batch */
} moe;

static void die(const moe *m, const char *what, zero_status s) {
    fprintf(stderr, "[rank %d] %s failed: %s: %s\n", m->rank, what, zero_status_string(s),
            m->e ? zero_last_error(m->e) : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define ZCALL(m, call)                                 \
    do {                                               \
        zero_status zs_ = (call);                      \
        if (zs_ != ZERO_OK) die((m), #call, zs_);      \
    } while (0)

/* Every buffer the demo allocates lives until the end of the run: they are
 * recorded here and released together by free_all() (so leak checkers see
 * a clean exit without one free per buffer). */
static void **allocs;
static size_t nallocs, capallocs;

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (p && nallocs == capallocs) {
        size_t cap = capallocs ? 2 * capallocs : 64;
        void **a = realloc(allocs, cap * sizeof *a);
        if (!a) {
            free(p);
            p = NULL;
        } else {
            allocs = a;
            capallocs = cap;
        }
    }
    if (!p) {
        fprintf(stderr, "zero-moe-demo: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    allocs[nallocs++] = p;
    return p;
}

/* A buffer the caller frees itself (setup's initial values). */
static void *tmp_calloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "zero-moe-demo: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void free_all(void) {
    for (size_t i = 0; i < nallocs; i++) free(allocs[i]);
    free(allocs);
    allocs = NULL;
    nallocs = capallocs = 0;
}

static uint64_t numel(const moe *m, int k) {
    const demo_dims *d = &m->d;
    switch (k) {
    case P_EMB: return demo_param_numel(d, DEMO_P_EMB);
    case P_W1: return demo_param_numel(d, DEMO_P_W1);
    case P_B1: return demo_param_numel(d, DEMO_P_B1);
    case P_GW: return (uint64_t)d->hidden1 * (uint64_t)m->experts;
    case P_GB: return (uint64_t)m->experts;
    case P_W3: return demo_param_numel(d, DEMO_P_W3);
    case P_B3: return demo_param_numel(d, DEMO_P_B3);
    case P_EW: return demo_param_numel(d, DEMO_P_W2);
    default: return demo_param_numel(d, DEMO_P_B2);
    }
}

/* Deterministic initial values: the demo's for the shared layers, the
 * demo's hidden-2 layer (seeded per expert) for each expert, a small gate. */
static void init_param(const moe *m, int k, uint64_t seed, float *out) {
    static const int demo_of[NP] = {DEMO_P_EMB, DEMO_P_W1, DEMO_P_B1, -1, -1, DEMO_P_W3, DEMO_P_B3, DEMO_P_W2, DEMO_P_B2};
    if (demo_of[k] >= 0) {
        demo_init_param(&m->d, demo_of[k], k >= P_EW ? seed + 7919u * (uint64_t)(m->expert + 1) : seed, out);
        return;
    }
    for (uint64_t i = 0; i < m->n[k]; i++) out[i] = k == P_GW ? 0.05f * sinf(0.7f * (float)i + (float)seed) : 0.0f;
}

static void setup(moe *m, const char *config, const char *plugin, uint64_t seed) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    MPI_Comm comm = MPI_COMM_WORLD;
    o.config_path = config;
    o.plugin = plugin;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    char err[1024] = "";
    zero_status s = zero_engine_create(&o, &m->e, err, sizeof err);
    if (s != ZERO_OK) {
        fprintf(stderr, "[rank %d] zero_engine_create failed: %s\n", m->rank, err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* group 1: the experts, partitioned over the ranks holding the same one */
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    g.group = 1;
    g.expert_color = m->expert;
    ZCALL(m, zero_set_group(m->e, &g));
    float *init[NP];
    for (int k = 0; k < NP; k++) {
        m->n[k] = numel(m, k);
        init[k] = tmp_calloc(m->n[k], sizeof(float));
        init_param(m, k, seed, init[k]);
        m->w[k] = xcalloc(m->n[k], sizeof(float));
        m->g[k] = xcalloc(m->n[k], sizeof(float));
        void *data = init[k];
        if (m->dtype != ZERO_DTYPE_F32) {
            data = tmp_calloc(m->n[k], 2);
            demo_narrow(init[k], data, m->dtype, m->n[k]);
        }
        char name[64];
        if (k >= P_EW)
            snprintf(name, sizeof name, "expert%d.%s", m->expert, k == P_EW ? "weight" : "bias");
        else
            snprintf(name, sizeof name, "%s", pname[k]);
        zero_param_desc pd = ZERO_PARAM_DESC_INIT;
        pd.name = name;
        pd.data = data;
        pd.numel = m->n[k];
        pd.dtype = m->dtype;
        pd.group = k >= P_EW ? 1 : 0;
        ZCALL(m, zero_register_param(m->e, &pd, &m->p[k]));
        if (data != init[k]) { /* keep the registered buffer until params_done */
            free(init[k]);
            init[k] = data;
        }
    }
    ZCALL(m, zero_params_done(m->e));
    for (int k = 0; k < NP; k++) free(init[k]);
}

/* Gather every param into its fp32 copy (the demo's layers are small). */
static void gather_all(moe *m) {
    for (int k = 0; k < NP; k++) {
        void *ptr;
        ZCALL(m, zero_gather(m->e, &m->p[k], 1, &ptr));
        demo_widen(ptr, m->dtype, m->w[k], m->n[k]);
        ZCALL(m, zero_release(m->e, &m->p[k], 1));
    }
}

/* Hand param k's fp32 gradient to libzero (ADD into its buffer) and fire. */
static void hand_in(moe *m, int k) {
    void *buf;
    ZCALL(m, zero_grad_buffer(m->e, m->p[k], &buf));
    demo_add_rounded(buf, m->dtype, m->g[k], m->n[k]);
    ZCALL(m, zero_on_grad_ready(m->e, m->p[k], NULL));
    memset(m->g[k], 0, m->n[k] * sizeof(float));
}

/* rows of `width` floats, packed by destination, exchanged over the
 * expert-parallel group: send counts in rows, receive counts returned. */
static void exchange(const moe *m, const float *send, const int *scount, float *recv, const int *rcount, int width) {
    int sd[64], rd[64], sc[64], rc[64];
    int so = 0, ro = 0;
    for (int j = 0; j < m->experts; j++) {
        sc[j] = scount[j] * width;
        rc[j] = rcount[j] * width;
        sd[j] = so;
        rd[j] = ro;
        so += sc[j];
        ro += rc[j];
    }
    MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, m->ep);
}

typedef struct acts {
    int cap;
    uint8_t *tok, *tgt;
    float *x0, *h1, *gate, *h2, *logits, *dh1, *dh2, *dx0, *tmp, *scratch;
    float *sendx, *recvx, *yexp, *yback, *dyin, *dxin; /* token exchange */
    int *choice, *order;
    float *p, *dp;
} acts;

static double micro_step(moe *m, acts *a, const demo_corpus *c, int b, uint64_t seed, uint64_t step) {
    const demo_dims *d = &m->d;
    const int H1 = d->hidden1, H2 = d->hidden2, E = m->experts, V = d->vocab, IN = d->ctx * d->embed;
    demo_batch_fill(c, d->ctx, seed, step, m->rank * b, b, a->tok, a->tgt);
    gather_all(m);
    /* forward: embedding, hidden 1, gate */
    demo_embed_forward(d, b, a->tok, m->w[P_EMB], a->x0);
    demo_dense_forward(b, IN, H1, a->x0, m->w[P_W1], m->w[P_B1], a->h1, 1);
    demo_dense_forward(b, H1, E, a->h1, m->w[P_GW], m->w[P_GB], a->gate, 0);
    int scount[64] = {0}, rcount[64];
    for (int i = 0; i < b; i++) { /* softmax over experts, top-1 */
        float *z = a->gate + (size_t)i * E, mx = z[0];
        int best = 0;
        for (int j = 1; j < E; j++)
            if (z[j] > z[best]) best = j;
        mx = z[best];
        float sum = 0.0f;
        for (int j = 0; j < E; j++) sum += (z[j] = expf(z[j] - mx));
        for (int j = 0; j < E; j++) z[j] /= sum;
        a->choice[i] = best;
        a->p[i] = z[best];
        scount[best]++;
    }
    /* pack h1 rows by expert (stable), send each to its expert's holder */
    int off[64], at = 0;
    for (int j = 0; j < E; j++) {
        off[j] = at;
        at += scount[j];
    }
    for (int i = 0; i < b; i++) {
        a->order[i] = off[a->choice[i]]++;
        memcpy(a->sendx + (size_t)a->order[i] * H1, a->h1 + (size_t)i * H1, (size_t)H1 * sizeof(float));
    }
    MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, m->ep);
    int R = 0;
    for (int j = 0; j < E; j++) R += rcount[j];
    if (R > a->cap * E) {
        fprintf(stderr, "zero-moe-demo: token buffer overflow\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    exchange(m, a->sendx, scount, a->recvx, rcount, H1);
    /* this rank's expert on the tokens routed to it */
    demo_dense_forward(R, H1, H2, a->recvx, m->w[P_EW], m->w[P_EB], a->yexp, 1);
    exchange(m, a->yexp, rcount, a->yback, scount, H2);
    for (int i = 0; i < b; i++)
        for (int o = 0; o < H2; o++) a->h2[(size_t)i * H2 + o] = a->p[i] * a->yback[(size_t)a->order[i] * H2 + o];
    demo_dense_forward(b, H2, V, a->h2, m->w[P_W3], m->w[P_B3], a->logits, 0);
    const double loss = demo_softmax_xent(b, V, a->logits, a->tgt, a->logits, zero_loss_scale(m->e));
    /* backward: output layer, handed in at once */
    demo_dense_backward_params(b, H2, V, a->h2, a->logits, a->logits, m->g[P_W3], m->g[P_B3], 0, a->scratch);
    hand_in(m, P_W3);
    hand_in(m, P_B3);
    demo_dense_backward_input(b, H2, V, a->logits, m->w[P_W3], a->dh2);
    /* through the expert: d(expert out) = p * dh2 (back to the holder), dp = dh2 . expert out */
    for (int i = 0; i < b; i++) {
        float s = 0.0f;
        for (int o = 0; o < H2; o++) {
            const float y = a->yback[(size_t)a->order[i] * H2 + o], g = a->dh2[(size_t)i * H2 + o];
            s += g * y;
            a->sendx[(size_t)a->order[i] * H2 + o] = a->p[i] * g;
        }
        a->dp[i] = s;
    }
    exchange(m, a->sendx, scount, a->dyin, rcount, H2);
    demo_dense_backward_params(R, H1, H2, a->recvx, a->yexp, a->dyin, m->g[P_EW], m->g[P_EB], 1, a->scratch);
    hand_in(m, P_EW); /* every micro-step, also with no token routed here (a zero gradient) */
    hand_in(m, P_EB);
    demo_dense_backward_input(R, H1, H2, a->dyin, m->w[P_EW], a->dxin);
    exchange(m, a->dxin, rcount, a->sendx, scount, H1);
    for (int i = 0; i < b; i++) memcpy(a->dh1 + (size_t)i * H1, a->sendx + (size_t)a->order[i] * H1, (size_t)H1 * sizeof(float));
    /* gate: d gate logit j = dp * p_e (delta_je - p_j) */
    for (int i = 0; i < b; i++) {
        float *z = a->gate + (size_t)i * E; /* probabilities now; becomes d logits */
        const float pe = a->p[i];
        for (int j = 0; j < E; j++) z[j] = a->dp[i] * pe * ((j == a->choice[i] ? 1.0f : 0.0f) - z[j]);
    }
    demo_dense_backward_params(b, H1, E, a->h1, a->gate, a->gate, m->g[P_GW], m->g[P_GB], 0, a->scratch);
    hand_in(m, P_GW);
    hand_in(m, P_GB);
    demo_dense_backward_input(b, H1, E, a->gate, m->w[P_GW], a->tmp);
    for (size_t i = 0; i < (size_t)b * H1; i++) a->dh1[i] += a->tmp[i];
    /* hidden 1 and the embedding */
    demo_dense_backward_params(b, IN, H1, a->x0, a->h1, a->dh1, m->g[P_W1], m->g[P_B1], 1, a->scratch);
    hand_in(m, P_W1);
    hand_in(m, P_B1);
    demo_dense_backward_input(b, IN, H1, a->dh1, m->w[P_W1], a->dx0);
    demo_embed_backward(d, b, a->tok, a->dx0, m->g[P_EMB]);
    hand_in(m, P_EMB);
    return loss;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    moe m;
    memset(&m, 0, sizeof m);
    MPI_Comm_rank(MPI_COMM_WORLD, &m.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m.world);
    const char *config = NULL, *plugin = NULL, *data = "/usr/share/common-licenses";
    long steps = 40;
    int check = 0, quiet = 0, digest = 0, micro = 8, gas = 2, shift = 0, weights_only = 0;
    const char *save_dir = NULL, *load_dir = NULL;
    m.experts = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
        else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) plugin = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--experts") && i + 1 < argc) m.experts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--micro-batch") && i + 1 < argc) micro = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--grad-accum") && i + 1 < argc) gas = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--bf16")) m.dtype = ZERO_DTYPE_BF16;
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--digest")) digest = 1;
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) save_dir = argv[++i];
        else if (!strcmp(argv[i], "--load") && i + 1 < argc) load_dir = argv[++i];
        else if (!strcmp(argv[i], "--weights-only")) weights_only = 1;
        else if (!strcmp(argv[i], "--expert-shift") && i + 1 < argc) shift = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else {
            if (m.rank == 0)
                fprintf(stderr, "usage: zero-moe-demo --config FILE [--plugin NAME] [--steps N] [--experts E] "
                                "[--micro-batch B --grad-accum G (must match the config)] [--bf16 (the config "
                                "enables bf16)] [--data PATH] [--check] [--quiet] [--digest] [--save DIR] [--load DIR "
                                "[--weights-only]] [--expert-shift S]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (m.experts < 1 || m.experts > 64 || m.world % m.experts != 0) {
        if (m.rank == 0) fprintf(stderr, "zero-moe-demo: --experts must divide the world size (%d)\n", m.world);
        MPI_Finalize();
        return 2;
    }
    /* --expert-shift S: rank r holds expert (r + S) % E (another assignment of the same experts) */
    m.expert = (m.rank + (shift % m.experts + m.experts)) % m.experts;
    MPI_Comm_split(MPI_COMM_WORLD, m.rank / m.experts, m.rank, &m.ep); /* expert-parallel group */
    m.d = (demo_dims){.ctx = 8, .embed = 24, .hidden1 = 256, .hidden2 = 256, .vocab = DEMO_VOCAB};
    demo_corpus corpus;
    char err[512];
    if (demo_corpus_load(data, &corpus, err, sizeof err) != 0) {
        fprintf(stderr, "zero-moe-demo: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const uint64_t seed = 1234;
    setup(&m, config, plugin, seed);
    acts a;
    memset(&a, 0, sizeof a);
    const int cap = micro, H = m.d.hidden1 > m.d.hidden2 ? m.d.hidden1 : m.d.hidden2;
    const size_t rows = (size_t)cap * (size_t)m.experts; /* an expert may receive every token of its group */
    a.cap = cap;
    a.tok = xcalloc((size_t)cap * m.d.ctx, 1);
    a.tgt = xcalloc((size_t)cap, 1);
    a.x0 = xcalloc((size_t)cap * m.d.ctx * m.d.embed, 4);
    a.dx0 = xcalloc((size_t)cap * m.d.ctx * m.d.embed, 4);
    a.h1 = xcalloc((size_t)cap * m.d.hidden1, 4);
    a.dh1 = xcalloc((size_t)cap * m.d.hidden1, 4);
    a.tmp = xcalloc((size_t)cap * m.d.hidden1, 4);
    a.gate = xcalloc((size_t)cap * m.experts, 4);
    a.h2 = xcalloc((size_t)cap * m.d.hidden2, 4);
    a.dh2 = xcalloc((size_t)cap * m.d.hidden2, 4);
    a.logits = xcalloc((size_t)cap * m.d.vocab, 4);
    a.scratch = xcalloc((size_t)(m.d.vocab > H ? m.d.vocab : H), 4);
    a.sendx = xcalloc(rows * H, 4);
    a.recvx = xcalloc(rows * H, 4);
    a.yexp = xcalloc(rows * H, 4);
    a.yback = xcalloc(rows * H, 4);
    a.dyin = xcalloc(rows * H, 4);
    a.dxin = xcalloc(rows * H, 4);
    a.choice = xcalloc((size_t)cap, sizeof(int));
    a.order = xcalloc((size_t)cap, sizeof(int));
    a.p = xcalloc((size_t)cap, 4);
    a.dp = xcalloc((size_t)cap, 4);
    /* --load: a checkpoint of any world size and expert assignment (each
     * rank's experts found by name); the data resumes where it stopped */
    long start = 0;
    if (load_dir) {
        zero_load_options lo = ZERO_LOAD_OPTIONS_INIT;
        lo.weights_only = weights_only;
        ZCALL(&m, zero_load_ex(m.e, load_dir, &lo));
        zero_engine_info info = ZERO_ENGINE_INFO_INIT;
        ZCALL(&m, zero_engine_info_get(m.e, &info));
        start = (long)(info.global_step + info.skipped_steps);
        if (m.rank == 0 && !quiet) printf("loaded %s%s at step %ld\n", load_dir, weights_only ? " (weights)" : "", start);
    }
    double first = 0.0, last = 0.0, timed = 0.0; /* seconds of the steps after the first (warm-up) */
    uint64_t ms = (uint64_t)start * (uint64_t)gas;
    for (long s = start; s < steps; s++) {
        const double t0 = MPI_Wtime();
        double sum = 0.0;
        zero_step_result res = ZERO_STEP_RESULT_INIT;
        for (int k = 0; k < gas; k++) {
            sum += micro_step(&m, &a, &corpus, micro, seed, ms++);
            ZCALL(&m, zero_step(m.e, NULL, &res));
        }
        double loss = sum / gas, global = 0.0;
        MPI_Allreduce(&loss, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        global /= m.world;
        if (s == start) first = global;
        else timed += MPI_Wtime() - t0;
        last = global;
        if (m.rank == 0 && !quiet && (s % 10 == 0 || s == steps - 1))
            printf("step %4ld loss %.4f grad_norm %.4f lr %.3g%s\n", s + 1, global, res.grad_norm, res.lr,
                   res.taken ? "" : " (skipped)");
    }
    /* the tiled step's fp32 temporaries, the largest over ranks */
    zero_memory_stats st = ZERO_MEMORY_STATS_INIT;
    ZCALL(&m, zero_memory_stats_get(m.e, &st));
    unsigned long long mine[4] = {st.step_fp32_peak_bytes, st.step_tile_max_numel, st.step_untiled_numel,
                                  st.peak_total[ZERO_TIER_DEVICE]},
                       mx[4];
    MPI_Allreduce(mine, mx, 4, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    double slowest = 0.0; /* the slowest rank's mean step: what the job waits for */
    MPI_Allreduce(&timed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int ok = last < first && mx[0] <= mx[1] * 4;
    if (m.rank == 0) {
        printf("final: loss %.4f (first %.4f), %d ranks, %d experts, expert-DP groups of %d, plugin %s\n", last, first,
               m.world, m.experts, m.world / m.experts, zero_plugin_name(m.e));
        printf("tiled step: peak fp32 temporary %llu bytes (largest tile %llu elements) vs %llu bytes for one "
               "whole-partition upcast: %.1f%% saved\n",
               mx[0], mx[1], mx[2] * 4, mx[2] ? 100.0 * (1.0 - (double)mx[0] / (double)(mx[2] * 4)) : 0.0);
        if (steps - start > 1)
            printf("timing: mean step %.3f ms over steps %ld-%ld (the slowest rank), device peak %llu bytes (the "
                   "largest rank)\n",
                   1e3 * slowest / (double)(steps - start - 1), start + 2, steps, mx[3]);
    }
    if (save_dir) ZCALL(&m, zero_save(m.e, save_dir));
    if (digest) { /* FNV-1a of every rank's final parameters (its own experts included), rank order */
        uint64_t h = 0xcbf29ce484222325ULL;
        for (int i = 0; i < NP; i++) {
            void *w = NULL;
            ZCALL(&m, zero_gather(m.e, &m.p[i], 1, &w));
            const unsigned char *b = w;
            for (size_t k = 0; k < (size_t)m.n[i] * (m.dtype == ZERO_DTYPE_F32 ? 4 : 2); k++) {
                h ^= b[k];
                h *= 0x100000001b3ULL;
            }
            ZCALL(&m, zero_release(m.e, &m.p[i], 1));
        }
        uint64_t *all = m.rank == 0 ? xcalloc((size_t)m.world, sizeof *all) : NULL;
        MPI_Gather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (m.rank == 0) {
            printf("digest:");
            for (int r = 0; r < m.world; r++) printf(" %016llx", (unsigned long long)all[r]);
            printf("\n");
        }
    }
    zero_engine_destroy(m.e);
    demo_corpus_free(&corpus);
    free_all();
    MPI_Comm_free(&m.ep);
    MPI_Finalize();
    return check && !ok ? 1 : 0;
}
