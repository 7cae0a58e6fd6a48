/* zero-estimate: per-rank memory of each plugin over world sizes, before
 * any allocation.  Two tables, always labelled apart:
 *   - the ZeRO paper's model-state formula (2 + 2 + K bytes per parameter,
 *     partitioned by stage; Table 1), and
 *   - libzero's plan: every byte the plugin will allocate through the
 *     accountant (zero_plan), including buckets, gather buffers and, for
 *     offload, the host tier.
 * With --budget: the largest model that fits a per-rank budget (Table 2's
 * theoretical maxima for the formula; binary search over zero_plan for
 * libzero).  --json prints exact bytes.  docs/planner.md. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "zero.h"

#define MAXL 32

typedef struct opts {
    est_model model;
    uint64_t ranks[MAXL];
    int nranks;
    const char *plugins[MAXL];
    int nplugins;
    uint64_t mp[MAXL];
    int nmp;
    const char *config_path;
    const char *dtype;      /* fp16 (default), bf16, fp32 */
    const char *grad_dtype; /* NULL: libzero's default (fp32 accumulation); "model": the paper's 2 bytes */
    double k;
    const char *unit;       /* unit of the libzero plan table: GB (default), MB, GiB, MiB, KiB */
    double unit_bytes;
    uint64_t budget;
    int json;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: zero-estimate MODEL [--ranks 1,4,16,64,256,1024]\n"
            "                     [--plugins stage0,stage1,stage2,stage3,offload,stage3+offload]\n"
            "                     [--config ds_config.json] [--dtype fp16|bf16|fp32] [--grad-dtype model|fp32]\n"
            "                     [--k 12] [--budget 32GB [--mp 1,2,4]] [--unit GB|MB|kB|GiB|MiB|KiB] [--json]\n"
            "MODEL: --params 7.5e9 | --params 7.5B | --gpt LAYERS,HIDDEN,VOCAB,SEQ |\n"
            "       --layers L --hidden H --vocab V --seq S | --manifest checkpoint-manifest.json\n"
            "       with the GPT shape, --moe EXPERTS,EP[,EVERY]: every EVERY-th layer (default 2) has EXPERTS\n"
            "       experts in place of its MLP, EP-way expert parallel (a rank holds EXPERTS/EP of them,\n"
            "       partitioned over N/EP ranks; N not divisible by EP is shown as n/a)\n");
}

static int parse_list(const char *s, uint64_t *out, int max) {
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t && n < max; t = strtok(NULL, ",")) {
        uint64_t v = est_parse_count(t);
        if (!v) return -1;
        out[n++] = v;
    }
    return n;
}

/* The config every plan uses: the user's (or an empty one) with the
 * dtype, gradient dtype and optimizer the options ask for.  Batch keys are
 * dropped (they are checked against a world size; planning needs none). */
static char *build_config(const opts *o, char *err, size_t len) {
    json_error_t je;
    json_t *root = o->config_path ? json_load_file(o->config_path, 0, &je) : json_object();
    if (!root) {
        snprintf(err, len, "%s: %s", o->config_path, je.text);
        return NULL;
    }
    json_object_del(root, "train_batch_size");
    const char *dt = o->dtype ? o->dtype : o->config_path ? NULL : "fp16";
    if (dt) {
        json_object_del(root, "fp16");
        json_object_del(root, "bf16");
        if (strcmp(dt, "fp32") != 0) json_object_set_new(root, dt, json_pack("{s:b}", "enabled", 1));
    }
    if (o->grad_dtype) {
        json_t *d = json_object_get(root, "data_types");
        if (!json_is_object(d)) json_object_set_new(root, "data_types", d = json_object());
        const char *g = strcmp(o->grad_dtype, "model") == 0 ? (dt ? dt : "fp32") : o->grad_dtype;
        json_object_set_new(d, "grad_accum_dtype", json_string(g));
        json_object_set_new(root, "communication_data_type", json_string(g));
    }
    if (!json_object_get(root, "optimizer"))
        json_object_set_new(root, "optimizer", json_pack("{s:s}", "type", "Adam"));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* "stage3+offload" (issue 20): plugin stage3 with the config at stage 3 and
 * offload_optimizer / offload_param on the CPU; NULL for any other name (the
 * config as given).  Returns a string to free. */
static char *offload3_config(const char *cfg, const char *plugin) {
    if (strcmp(plugin, "stage3+offload") != 0) return NULL;
    json_t *root = json_loads(cfg, 0, NULL);
    if (!root) return NULL;
    json_t *zo = json_object_get(root, "zero_optimization");
    if (!json_is_object(zo)) json_object_set_new(root, "zero_optimization", zo = json_object());
    json_object_set_new(zo, "stage", json_integer(3));
    json_object_set_new(zo, "offload_optimizer", json_pack("{s:s}", "device", "cpu"));
    json_object_set_new(zo, "offload_param", json_pack("{s:s}", "device", "cpu"));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* zero_plan for `plugin` on the model (or a bare count) over n ranks. */
static zero_status plan(const char *cfg, const char *plugin, uint64_t n, const est_model *m, uint64_t bare,
                        zero_memory_plan *out, char *err, size_t len) {
    zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
    char *cfg3 = offload3_config(cfg, plugin);
    rq.config_json = cfg3 ? cfg3 : cfg;
    rq.plugin = cfg3 ? "stage3" : plugin;
    rq.world_size = (uint32_t)n;
    const int32_t xg = m ? m->xgroup : 1;
    const uint32_t xs = m && m->ep ? (uint32_t)(n / m->ep) : 0;
    if (bare) {
        rq.total_params = bare;
    } else if (m->numel) {
        rq.nparams = m->n;
        rq.numels = m->numel;
        if (m->ep) { /* (1.9) this rank's experts, over its expert-data-parallel group */
            rq.groups = m->group;
            rq.nexpert_groups = 1;
            rq.expert_groups = &xg;
            rq.expert_dp_sizes = &xs;
        }
    } else {
        rq.total_params = m->total;
    }
    *out = (zero_memory_plan)ZERO_MEMORY_PLAN_INIT;
    zero_status st = zero_plan(&rq, out, err, len);
    free(cfg3);
    return st;
}

/* Which stage the paper's formula uses for a plugin (-1: not in the paper). */
static int paper_stage(const char *plugin) {
    if (!strncmp(plugin, "stage", 5) && plugin[5] >= '0' && plugin[5] <= '3' && !plugin[6]) return plugin[5] - '0';
    if (!strcmp(plugin, "stage1-pp")) return 1;
    return -1;
}

/* Largest bare parameter count whose device-tier plan fits `budget`. */
static uint64_t max_fit(const char *cfg, const char *plugin, uint64_t n, uint64_t budget) {
    zero_memory_plan p;
    char err[512];
    uint64_t lo = 0, hi = 1;
    for (;;) { /* grow until it does not fit */
        if (plan(cfg, plugin, n, NULL, hi, &p, err, sizeof err) != ZERO_OK) return 0;
        if (p.total[ZERO_TIER_DEVICE] > budget) break;
        lo = hi;
        if (hi > (UINT64_MAX >> 2)) return lo;
        hi *= 2;
    }
    while (hi - lo > 1 && (hi - lo) * 1000 > lo) { /* to 0.1 % */
        uint64_t mid = lo + (hi - lo) / 2;
        if (plan(cfg, plugin, n, NULL, mid, &p, err, sizeof err) != ZERO_OK) return lo;
        if (p.total[ZERO_TIER_DEVICE] <= budget) lo = mid;
        else hi = mid;
    }
    return lo;
}

static const char *gb_of(double bytes, double unit, char *buf, size_t len) {
    est_fmt_gb(bytes, unit, buf, len);
    return buf;
}

int main(int argc, char **argv) {
    opts o = {.nranks = 0, .nplugins = 0, .k = 12, .nmp = 0};
    uint64_t L = 0, H = 0, V = 0, S = 0, count = 0, moe[3] = {0, 0, 2};
    int nmoe = 0;
    const char *manifest = NULL;
    char err[2048];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (++i, 1))
        if (ARG("--params")) {
            if (!(count = est_parse_count(v))) return fprintf(stderr, "--params: bad count '%s'\n", v), 2;
        } else if (ARG("--gpt")) {
            unsigned long long l, h, vv, s;
            if (sscanf(v, "%llu,%llu,%llu,%llu", &l, &h, &vv, &s) != 4)
                return fprintf(stderr, "--gpt: expected LAYERS,HIDDEN,VOCAB,SEQ\n"), 2;
            L = l, H = h, V = vv, S = s;
        } else if (ARG("--layers")) L = est_parse_count(v);
        else if (ARG("--hidden")) H = est_parse_count(v);
        else if (ARG("--vocab")) V = est_parse_count(v);
        else if (ARG("--seq")) S = est_parse_count(v);
        else if (ARG("--manifest")) manifest = v;
        else if (ARG("--moe")) {
            if ((nmoe = parse_list(v, moe, 3)) < 2 || !moe[0] || !moe[1] || !moe[2] || moe[0] % moe[1])
                return fprintf(stderr, "--moe: expected EXPERTS,EP[,EVERY], EP dividing EXPERTS (e.g. 8,4 or 64,8,2)\n"), 2;
        }
        else if (ARG("--ranks")) {
            if ((o.nranks = parse_list(v, o.ranks, MAXL)) <= 0) return fprintf(stderr, "--ranks: bad list\n"), 2;
        } else if (ARG("--mp")) {
            if ((o.nmp = parse_list(v, o.mp, MAXL)) <= 0) return fprintf(stderr, "--mp: bad list\n"), 2;
        } else if (ARG("--plugins")) {
            static char buf[1024];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t && o.nplugins < MAXL; t = strtok(NULL, ",")) o.plugins[o.nplugins++] = t;
        } else if (ARG("--config")) o.config_path = v;
        else if (ARG("--dtype")) o.dtype = v;
        else if (ARG("--grad-dtype")) o.grad_dtype = v;
        else if (ARG("--k")) o.k = atof(v);
        else if (ARG("--unit")) o.unit = v;
        else if (ARG("--budget")) {
            if (!(o.budget = est_parse_bytes(v))) return fprintf(stderr, "--budget: bad size '%s'\n", v), 2;
        } else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        else return fprintf(stderr, "zero-estimate: unknown or incomplete option '%s'\n", a), usage(stderr), 2;
#undef ARG
    }
    static const struct { const char *name; double bytes; } units[] = {
        {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}};
    if (!o.unit) o.unit = "GB";
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
        if (!strcmp(o.unit, units[u].name)) o.unit_bytes = units[u].bytes;
    if (o.unit_bytes == 0) return fprintf(stderr, "--unit: GB, MB, kB, GiB, MiB or KiB\n"), 2;
    if (o.dtype && strcmp(o.dtype, "fp16") && strcmp(o.dtype, "bf16") && strcmp(o.dtype, "fp32"))
        return fprintf(stderr, "--dtype: fp16, bf16 or fp32\n"), 2;
    if (manifest) {
        if (est_model_manifest(&o.model, manifest, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 2;
    } else if (L || H || V || S) {
        if ((nmoe ? est_model_gpt_moe(&o.model, (uint32_t)L, H, V, S, moe[0], moe[1], moe[2])
                  : est_model_gpt(&o.model, (uint32_t)L, H, V, S)) != 0)
            return fprintf(stderr, "GPT shape: give layers, hidden, vocab and seq (all > 0)\n"), 2;
    } else if (count) {
        o.model.total = count;
        snprintf(o.model.what, sizeof o.model.what, "%llu parameters (a bare count: tensors of %llu elements)",
                 (unsigned long long)count, (unsigned long long)ZERO_PLAN_TENSOR_NUMEL);
    } else if (!o.budget) {
        return usage(stderr), 2;
    }
    if (nmoe && !o.model.ep)
        return fprintf(stderr, "--moe describes the experts of a GPT shape: give --gpt (or --layers ...) too\n"), 2;
    if (nmoe && o.budget)
        return fprintf(stderr, "--budget searches dense parameter counts; it does not combine with --moe\n"), 2;
    if (!o.nranks) {
        const uint64_t d[] = {1, 4, 16, 64, 256, 1024};
        memcpy(o.ranks, d, sizeof d);
        o.nranks = 6;
    }
    if (!o.nplugins) { /* every one runs expert groups too (ZERO_PLUGIN_CAP_EXPERT_GROUPS; stage0 since 1.13) */
        static const char *d[] = {"stage0", "stage1", "stage2", "stage3", "offload", "stage3+offload"};
        memcpy(o.plugins, d, sizeof d);
        o.nplugins = 6;
    }
    if (!o.nmp) o.mp[o.nmp++] = 1;
    char *cfg = build_config(&o, err, sizeof err);
    if (!cfg) return fprintf(stderr, "%s\n", err), 2;
    /* the formula's parameter and gradient bytes follow the dtype asked for */
    const int fp32 = o.dtype ? !strcmp(o.dtype, "fp32") : 0;
    const double pb = fp32 ? 4 : 2, gb = pb;

    json_t *J = json_object();
    json_object_set_new(J, "config", json_loads(cfg, 0, NULL));
    json_object_set_new(J, "k", json_real(o.k));
    json_t *Jr = json_array();
    for (int r = 0; r < o.nranks; r++) json_array_append_new(Jr, json_integer((json_int_t)o.ranks[r]));
    json_object_set_new(J, "ranks", Jr);
    int failed = 0;
    char c1[64];
    if (o.model.total) {
        json_object_set_new(J, "model", json_pack("{s:s,s:I,s:I}", "description", o.model.what, "params",
                                                 (json_int_t)o.model.total, "tensors", (json_int_t)o.model.n));
        const double psi = (double)o.model.total;
        if (!o.json && o.model.ep)
            printf("model: %s; Psi = %.4g per rank (dense %.4g, this rank's experts %.4g)\n", o.model.what, psi,
                   (double)o.model.dense, (double)o.model.expert);
        else if (!o.json)
            printf("model: %s; Psi = %.4g\n", o.model.what, psi);
        if (!o.json) {
            printf("\nModel states per rank, GB (the ZeRO paper's formula: (%g + %g + K)Psi, K = %g, partitioned by "
                   "stage; Table 1)\n%-20s", pb, gb, o.k, "N_d");
            for (int r = 0; r < o.nranks; r++) printf("%10llu", (unsigned long long)o.ranks[r]);
            printf("\n");
        }
        json_t *Jp = json_object();
        static const char *names[4] = {"stage0 (baseline)", "stage1 (P_os)", "stage2 (P_os+g)", "stage3 (P_os+g+p)"};
        for (int st = 0; st < 4; st++) {
            json_t *row = json_array();
            if (!o.json) printf("%-20s", names[st]);
            for (int r = 0; r < o.nranks; r++) {
                const double n = (double)o.ranks[r];
                /* with experts: the dense part over N ranks, the experts over their N / EP */
                double bytes = o.model.ep ? (double)o.model.dense * est_paper_bytes_per_param(st, n, o.k, pb, gb) +
                                                (double)o.model.expert *
                                                    est_paper_bytes_per_param(st, n / (double)o.model.ep, o.k, pb, gb)
                                          : psi * est_paper_bytes_per_param(st, n, o.k, pb, gb);
                if (o.model.ep && o.ranks[r] % o.model.ep) {
                    if (!o.json) printf("%10s", "n/a");
                    json_array_append_new(row, json_null());
                    continue;
                }
                est_fmt_paper_gb(bytes / 1e9, c1, sizeof c1);
                if (!o.json) printf("%10s", c1);
                json_array_append_new(row, json_pack("{s:f,s:s}", "bytes", bytes, "gb", c1));
            }
            if (!o.json) printf("\n");
            char key[16];
            snprintf(key, sizeof key, "stage%d", st);
            json_object_set_new(Jp, key, row);
        }
        json_object_set_new(J, "paper_model_states", Jp);

        if (!o.json) {
            printf("\nlibzero's plan per rank, %s (every accounted byte: model states, buckets, gather buffers; "
                   "device tier, + host tier where used)\n%-20s", o.unit, "N_d");
            for (int r = 0; r < o.nranks; r++) printf("%10llu", (unsigned long long)o.ranks[r]);
            printf("\n");
        }
        json_t *Jl = json_object();
        for (int pi = 0; pi < o.nplugins; pi++) {
            json_t *row = json_array();
            int host = 0;
            char line[2][1024] = {"", ""};
            for (int r = 0; r < o.nranks; r++) {
                zero_memory_plan p;
                char cell[64], tmp[64];
                if (o.model.ep && o.ranks[r] % o.model.ep) { /* no expert-parallel layout at this N */
                    snprintf(cell, sizeof cell, "%10s", "n/a");
                    strcat(line[0], cell);
                    strcat(line[1], cell);
                    json_array_append_new(row, json_null());
                    continue;
                }
                zero_status s = plan(cfg, o.plugins[pi], o.ranks[r], &o.model, 0, &p, err, sizeof err);
                if (s != ZERO_OK) {
                    fprintf(stderr, "zero-estimate: %s at N = %llu: %s\n", o.plugins[pi],
                            (unsigned long long)o.ranks[r], err);
                    failed = 1;
                    snprintf(cell, sizeof cell, "%10s", "error");
                    strcat(line[0], cell);
                    strcat(line[1], cell);
                    json_array_append_new(row, json_null());
                    continue;
                }
                host |= p.total[ZERO_TIER_HOST] != 0;
                snprintf(cell, sizeof cell, "%10s", gb_of((double)p.total[ZERO_TIER_DEVICE], o.unit_bytes, tmp, sizeof tmp));
                strcat(line[0], cell);
                snprintf(cell, sizeof cell, "%10s", gb_of((double)p.total[ZERO_TIER_HOST], o.unit_bytes, tmp, sizeof tmp));
                strcat(line[1], cell);
                json_t *cell_j = json_object();
                json_object_set_new(cell_j, "ranks", json_integer((json_int_t)o.ranks[r]));
                for (int t = 0; t < ZERO_NTIERS; t++) {
                    json_t *tier = json_object();
                    for (int g = 0; g < ZERO_MEM_NTAGS; g++)
                        json_object_set_new(tier, zero_mem_tag_name(g), json_integer((json_int_t)p.bytes[t][g]));
                    json_object_set_new(tier, "total", json_integer((json_int_t)p.total[t]));
                    json_object_set_new(cell_j, t == ZERO_TIER_DEVICE ? "device" : "host", tier);
                }
                json_array_append_new(row, cell_j);
            }
            if (!o.json) {
                printf("%-20s%s\n", o.plugins[pi], line[0]);
                if (host) printf("%-20s%s\n", "  host tier", line[1]);
            }
            json_object_set_new(Jl, o.plugins[pi], row);
        }
        json_object_set_new(J, "libzero_plan", Jl);
    }

    if (o.budget) {
        json_t *Jb = json_array();
        if (!o.json) {
            printf("\nLargest model whose model states fit %.4g GB per rank (the paper's formula, K = %g; Table 2 "
                   "'theoretical'):\n%-4s %-6s %-6s", (double)o.budget / 1e9, o.k, "MP", "GPUs", "N_d");
            for (int st = 0; st < 4; st++) printf("%10s%d", "stage", st);
            printf("\n");
        }
        for (int mi = 0; mi < o.nmp; mi++)
            for (int r = 0; r < o.nranks; r++) {
                const double n = (double)o.ranks[r], mp = (double)o.mp[mi];
                json_t *e = json_pack("{s:I,s:I,s:I}", "mp", (json_int_t)o.mp[mi], "ranks", (json_int_t)o.ranks[r],
                                      "gpus", (json_int_t)(o.ranks[r] * o.mp[mi]));
                json_t *pp = json_object();
                if (!o.json) printf("%-4llu %-6llu %-6llu", (unsigned long long)o.mp[mi],
                                    (unsigned long long)(o.ranks[r] * o.mp[mi]), (unsigned long long)o.ranks[r]);
                for (int st = 0; st < 4; st++) {
                    /* the paper rounds the MP-1 maximum to 0.1B, then scales by MP */
                    double psi1 = (double)o.budget / est_paper_bytes_per_param(st, n, o.k, pb, gb);
                    double b = mp * round(psi1 / 1e8) / 10;
                    est_fmt_paper_params(b, c1, sizeof c1);
                    if (!o.json) printf("%11s", c1);
                    char key[16];
                    snprintf(key, sizeof key, "stage%d", st);
                    json_object_set_new(pp, key, json_pack("{s:f,s:s}", "params", mp * psi1, "paper", c1));
                }
                if (!o.json) printf("\n");
                json_object_set_new(e, "paper", pp);
                json_array_append_new(Jb, e);
            }
        if (!o.json) {
            printf("\nLargest model libzero's plan fits in %.4g GB per rank (device tier; a bare count, MP = 1):\n"
                   "%-6s", (double)o.budget / 1e9, "N_d");
            for (int pi = 0; pi < o.nplugins; pi++) printf("%12s", o.plugins[pi]);
            printf("\n");
        }
        json_t *Jz = json_array();
        for (int r = 0; r < o.nranks; r++) {
            json_t *row = json_object();
            json_object_set_new(row, "ranks", json_integer((json_int_t)o.ranks[r]));
            if (!o.json) printf("%-6llu", (unsigned long long)o.ranks[r]);
            for (int pi = 0; pi < o.nplugins; pi++) {
                uint64_t m = max_fit(cfg, o.plugins[pi], o.ranks[r], o.budget);
                snprintf(c1, sizeof c1, "%.4gB", (double)m / 1e9);
                if (!o.json) printf("%12s", c1);
                json_object_set_new(row, o.plugins[pi], json_integer((json_int_t)m));
            }
            if (!o.json) printf("\n");
            json_array_append_new(Jz, row);
        }
        json_object_set_new(J, "budget_bytes", json_integer((json_int_t)o.budget));
        json_object_set_new(J, "paper_max_params", Jb);
        json_object_set_new(J, "libzero_max_params", Jz);
    }
    if (o.json) {
        char *s = json_dumps(J, JSON_INDENT(1));
        puts(s);
        free(s);
    }
    json_decref(J);
    free(cfg);
    est_model_free(&o.model);
    (void)paper_stage;
    return failed;
}
