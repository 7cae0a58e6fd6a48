/* Memory table and --summary JSON for the demo (see report.h). */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CUR = 0, PEAK = ZERO_NTIERS * ZERO_MEM_NTAGS, CUR_TOT = 2 * ZERO_NTIERS * ZERO_MEM_NTAGS,
       PEAK_TOT = CUR_TOT + ZERO_NTIERS };

void demo_mem_pack(const zero_memory_stats *s, uint64_t out[DEMO_MEM_WORDS]) {
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        for (int g = 0; g < ZERO_MEM_NTAGS; ++g) {
            out[CUR + t * ZERO_MEM_NTAGS + g] = s->current[t][g];
            out[PEAK + t * ZERO_MEM_NTAGS + g] = s->peak[t][g];
        }
        out[CUR_TOT + t] = s->current_total[t];
        out[PEAK_TOT + t] = s->peak_total[t];
    }
}

static const char *tier_name(int t) { return t == ZERO_TIER_DEVICE ? "device" : "host"; }

void demo_memory_print(FILE *f, int world, const uint64_t *mem) {
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        int any = 0;
        for (int r = 0; r < world; ++r) any |= mem[(size_t)r * DEMO_MEM_WORDS + PEAK_TOT + t] != 0;
        if (!any && t != ZERO_TIER_DEVICE) continue; /* host tier only matters with offload */
        fprintf(f, "memory (%s tier, KiB, current/peak):\n%-5s", tier_name(t), "rank");
        for (int g = 0; g < ZERO_MEM_NTAGS; ++g) fprintf(f, " %15s", zero_mem_tag_name(g));
        fprintf(f, " %15s\n", "total");
        for (int r = 0; r < world; ++r) {
            const uint64_t *m = mem + (size_t)r * DEMO_MEM_WORDS;
            fprintf(f, "%-5d", r);
            for (int g = 0; g < ZERO_MEM_NTAGS; ++g) {
                char cell[40];
                snprintf(cell, sizeof cell, "%.1f/%.1f", m[CUR + t * ZERO_MEM_NTAGS + g] / 1024.0,
                         m[PEAK + t * ZERO_MEM_NTAGS + g] / 1024.0);
                fprintf(f, " %15s", cell);
            }
            char cell[40];
            snprintf(cell, sizeof cell, "%.1f/%.1f", m[CUR_TOT + t] / 1024.0, m[PEAK_TOT + t] / 1024.0);
            fprintf(f, " %15s\n", cell);
        }
    }
}

/* JSON has no NaN/inf: a diverged run records null instead of losing the entry. */
static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *double_array(const double *v, long n) {
    json_t *a = json_array();
    for (long i = 0; i < n; ++i) json_array_append_new(a, jreal(v[i]));
    return a;
}

static json_t *rank_memory(int rank, const uint64_t *m) {
    json_t *o = json_object();
    json_object_set_new(o, "rank", json_integer(rank));
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        json_t *tier = json_object(), *cur = json_object(), *peak = json_object();
        for (int g = 0; g < ZERO_MEM_NTAGS; ++g) {
            json_object_set_new(cur, zero_mem_tag_name(g), json_integer((json_int_t)m[CUR + t * ZERO_MEM_NTAGS + g]));
            json_object_set_new(peak, zero_mem_tag_name(g), json_integer((json_int_t)m[PEAK + t * ZERO_MEM_NTAGS + g]));
        }
        json_object_set_new(tier, "current", cur);
        json_object_set_new(tier, "peak", peak);
        json_object_set_new(tier, "current_total", json_integer((json_int_t)m[CUR_TOT + t]));
        json_object_set_new(tier, "peak_total", json_integer((json_int_t)m[PEAK_TOT + t]));
        json_object_set_new(o, tier_name(t), tier);
    }
    return o;
}

static json_t *build(const demo_report *r) {
    json_t *o = json_object();
    json_object_set_new(o, "plugin", json_string(r->plugin ? r->plugin : ""));
    json_object_set_new(o, "world_size", json_integer(r->world));
    json_object_set_new(o, "config_path", r->config_path ? json_string(r->config_path) : json_null());
    json_object_set(o, "config", r->config ? r->config : json_null());
    json_object_set_new(o, "data_path", json_string(r->data_path));
    json_object_set_new(o, "train_bytes", json_integer((json_int_t)r->train_bytes));
    json_object_set_new(o, "val_bytes", json_integer((json_int_t)r->val_bytes));
    json_object_set_new(o, "steps", json_integer(r->steps));
    json_object_set_new(o, "micro_batch_per_rank", json_integer(r->micro_batch));
    json_object_set_new(o, "gradient_accumulation_steps", json_integer(r->grad_accum));
    json_object_set_new(o, "global_batch", json_integer((json_int_t)r->micro_batch * r->grad_accum * r->world));
    json_object_set_new(o, "seed", json_integer((json_int_t)r->seed));
    json_t *model = json_object();
    json_object_set_new(model, "type", json_string("char-MLP"));
    json_object_set_new(model, "context", json_integer(r->dims.ctx));
    json_object_set_new(model, "embed", json_integer(r->dims.embed));
    json_object_set_new(model, "hidden", json_pack("[ii]", r->dims.hidden1, r->dims.hidden2));
    json_object_set_new(model, "vocab", json_integer(r->dims.vocab));
    json_object_set_new(model, "num_params", json_integer((json_int_t)r->num_params));
    json_object_set_new(o, "model", model);
    json_object_set_new(o, "losses", double_array(r->losses, r->steps));
    json_object_set_new(o, "lrs", double_array(r->lrs, r->steps));
    json_object_set_new(o, "grad_norms", double_array(r->grad_norms, r->steps));
    json_object_set_new(o, "step_time_ms", double_array(r->step_ms, r->steps));
    json_object_set_new(o, "mean_step_time_ms", jreal(r->mean_step_ms));
    json_object_set_new(o, "skipped_steps", json_integer(r->skipped_steps));
    json_object_set_new(o, "final_loss", jreal(r->steps > 0 ? r->losses[r->steps - 1] : 0.0));
    json_object_set_new(o, "val_loss", jreal(r->val_loss));
    json_object_set_new(o, "val_tokens", json_integer((json_int_t)r->val_tokens));
    json_t *dig = json_object(), *per = json_object();
    json_object_set_new(dig, "sum", jreal(r->digest_sum));
    json_object_set_new(dig, "sumsq", jreal(r->digest_sumsq));
    json_object_set_new(dig, "abssum", jreal(r->digest_abssum));
    char bits[17];
    snprintf(bits, sizeof bits, "%016llx", (unsigned long long)r->digest_bits);
    json_object_set_new(dig, "bits", json_string(bits));
    for (int p = 0; p < DEMO_NPARAMS; ++p)
        json_object_set_new(per, demo_param_name(p),
                            json_pack("{s:o,s:o}", "sum", jreal(r->param_sum[p]), "sumsq", jreal(r->param_sumsq[p])));
    json_object_set_new(dig, "params", per);
    json_object_set_new(o, "digest", dig);
    json_t *mem = json_array();
    for (int k = 0; k < r->world; ++k) json_array_append_new(mem, rank_memory(k, r->mem + (size_t)k * DEMO_MEM_WORDS));
    json_object_set_new(o, "memory", mem);
    json_object_set_new(o, "comm",
                        json_pack("{s:o,s:o,s:I,s:I,s:I}", "exposed_seconds", jreal(r->comm_exposed_s), "total_seconds",
                                  jreal(r->comm_total_s), "bytes_reduced", (json_int_t)r->comm_bytes_reduced,
                                  "bytes_gathered", (json_int_t)r->comm_bytes_gathered, "allgather_calls",
                                  (json_int_t)r->comm_allgather_calls));
    return o;
}

int demo_summary_write(const demo_report *r, const char *path, char *err, size_t err_len) {
    json_t *o = build(r);
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!o || !tmp) {
        json_decref(o);
        free(tmp);
        snprintf(err, err_len, "out of memory building the summary");
        return -1;
    }
    snprintf(tmp, n, "%s.tmp", path);
    /* 17 significant digits: the digest must round-trip exactly. */
    int rc = json_dump_file(o, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (rc != 0 || rename(tmp, path) != 0) {
        snprintf(err, err_len, "cannot write summary %s: %s", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
