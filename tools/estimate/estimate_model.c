/* Model descriptions for zero-estimate (see estimate.h). */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"

/* number with an optional suffix: scale * 10^3k (or 2^10k with 'i') */
static double parse_scaled(const char *s, int bytes) {
    if (!s || !*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    while (*end == ' ') end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1e3; end++; break;
    case 'M': mul = 1e6; end++; break;
    case 'B': if (!bytes) { mul = 1e9; end++; } break; /* 7.5B parameters; "B" alone is bytes otherwise */
    case 'G': mul = 1e9; end++; break;
    case 'T': mul = 1e12; end++; break;
    default: break;
    }
    if (bytes && mul > 1 && *end == 'i') { /* KiB, GiB: powers of two */
        mul = mul == 1e3 ? 1024.0 : mul == 1e6 ? 1048576.0 : mul == 1e9 ? 1073741824.0 : 1099511627776.0;
        end++;
    }
    if (bytes && toupper((unsigned char)*end) == 'B') end++;
    return *end ? -1 : v * mul;
}

uint64_t est_parse_count(const char *s) {
    double v = parse_scaled(s, 0);
    return v < 1 ? 0 : (uint64_t)llround(v);
}

uint64_t est_parse_bytes(const char *s) {
    double v = parse_scaled(s, 1);
    return v < 1 ? 0 : (uint64_t)llround(v);
}

static int add_in(est_model *m, uint32_t *cap, uint64_t numel, int32_t group) {
    if (m->n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 64;
        uint64_t *v = realloc(m->numel, nc * sizeof *v);
        if (!v) return -1;
        m->numel = v;
        int32_t *g = realloc(m->group, nc * sizeof *g);
        if (!g) return -1;
        m->group = g;
        *cap = nc;
    }
    m->group[m->n] = group;
    m->numel[m->n++] = numel;
    m->total += numel;
    if (group) m->expert += numel;
    else m->dense += numel;
    return 0;
}

static int add(est_model *m, uint32_t *cap, uint64_t numel) { return add_in(m, cap, numel, 0); }

int est_model_gpt(est_model *m, uint32_t L, uint64_t h, uint64_t V, uint64_t S) {
    memset(m, 0, sizeof *m);
    if (!L || !h || !V || !S) return -1;
    uint32_t cap = 0;
    int bad = add(m, &cap, V * h) | add(m, &cap, S * h);
    for (uint32_t l = 0; l < L && !bad; l++) {
        const uint64_t t[12] = {h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * 4 * h, 4 * h, 4 * h * h, h};
        for (int i = 0; i < 12; i++) bad |= add(m, &cap, t[i]);
    }
    bad |= add(m, &cap, h) | add(m, &cap, h);
    snprintf(m->what, sizeof m->what, "GPT (layers %u, hidden %llu, vocab %llu, sequence %llu), %u tensors", L,
             (unsigned long long)h, (unsigned long long)V, (unsigned long long)S, m->n);
    return bad ? -1 : 0;
}

int est_model_gpt_moe(est_model *m, uint32_t L, uint64_t h, uint64_t V, uint64_t S, uint64_t experts, uint64_t ep,
                      uint64_t every) {
    memset(m, 0, sizeof *m);
    if (!L || !h || !V || !S || !experts || !ep || !every || experts % ep) return -1;
    uint32_t cap = 0;
    int bad = add(m, &cap, V * h) | add(m, &cap, S * h);
    uint32_t moe_layers = 0;
    for (uint32_t l = 0; l < L && !bad; l++) {
        const uint64_t attn[8] = {h, h, h * 3 * h, 3 * h, h * h, h, h, h}; /* ln1, qkv, proj, ln2 */
        for (int i = 0; i < 8; i++) bad |= add(m, &cap, attn[i]);
        const uint64_t mlp[4] = {h * 4 * h, 4 * h, 4 * h * h, h};
        if ((l + 1) % every) {
            for (int i = 0; i < 4; i++) bad |= add(m, &cap, mlp[i]);
            continue;
        }
        moe_layers++;
        bad |= add(m, &cap, h * experts); /* the gate: every rank routes to every expert */
        for (uint64_t x = 0; x < experts / ep; x++)
            for (int i = 0; i < 4; i++) bad |= add_in(m, &cap, mlp[i], 1);
    }
    bad |= add(m, &cap, h) | add(m, &cap, h);
    m->ep = ep;
    m->xgroup = 1;
    snprintf(m->what, sizeof m->what,
             "GPT-MoE (layers %u, hidden %llu, vocab %llu, sequence %llu; %u MoE layers of %llu experts, "
             "expert-parallel %llu: %llu experts per rank), %u tensors per rank",
             L, (unsigned long long)h, (unsigned long long)V, (unsigned long long)S, moe_layers,
             (unsigned long long)experts, (unsigned long long)ep, (unsigned long long)(experts / ep), m->n);
    return bad ? -1 : 0;
}

int est_model_manifest(est_model *m, const char *path, char *err, size_t err_len) {
    memset(m, 0, sizeof *m);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(err, err_len, "%s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    json_t *arr = json_object_get(root, "params");
    if (!json_is_array(arr)) arr = json_object_get(root, "tensors");
    if (!json_is_array(arr)) {
        snprintf(err, err_len, "%s: expected an array \"params\" (or \"tensors\") of {\"numel\" | \"shape\"}", path);
        json_decref(root);
        return -1;
    }
    uint32_t cap = 0;
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        json_t *n = json_object_get(it, "numel"), *shape = json_object_get(it, "shape");
        uint64_t numel = 0;
        if (json_is_integer(n) && json_integer_value(n) >= 0) {
            numel = (uint64_t)json_integer_value(n);
        } else if (json_is_array(shape)) {
            numel = 1;
            size_t k;
            json_t *d;
            json_array_foreach(shape, k, d) numel *= json_is_integer(d) ? (uint64_t)json_integer_value(d) : 0;
        } else {
            snprintf(err, err_len, "%s: params[%zu] has neither \"numel\" nor \"shape\"", path, i);
            json_decref(root);
            est_model_free(m);
            return -1;
        }
        json_t *g = json_object_get(it, "group");
        if (add_in(m, &cap, numel, json_is_integer(g) ? (int32_t)json_integer_value(g) : 0)) {
            snprintf(err, err_len, "out of memory");
            json_decref(root);
            est_model_free(m);
            return -1;
        }
    }
    /* (1.10) a mixture of experts: which group holds this rank's experts,
     * and over how many colors (the expert-parallel size) */
    json_t *xs = json_object_get(root, "experts");
    if (json_is_array(xs) && json_array_size(xs) > 0) {
        json_t *x = json_array_get(xs, 0), *sets = json_object_get(x, "sets");
        if (json_array_size(xs) > 1 || !json_is_integer(json_object_get(x, "group")) || !json_is_array(sets) ||
            json_array_size(sets) < 1) {
            snprintf(err, err_len, "%s: \"experts\": zero-estimate plans one expert group with its \"sets\"", path);
            json_decref(root);
            est_model_free(m);
            return -1;
        }
        m->xgroup = (int32_t)json_integer_value(json_object_get(x, "group"));
        m->ep = json_array_size(sets);
        m->dense = m->expert = 0;
        for (uint32_t k = 0; k < m->n; k++) {
            if (m->group[k] == m->xgroup) m->expert += m->numel[k];
            else m->dense += m->numel[k];
        }
    } else {
        for (uint32_t k = 0; k < m->n; k++) m->group[k] = 0; /* dense: every group planned alike */
    }
    json_decref(root);
    if (m->ep)
        snprintf(m->what, sizeof m->what, "manifest %s (mixture of experts, expert-parallel %llu), %u tensors per rank",
                 path, (unsigned long long)m->ep, m->n);
    else
        snprintf(m->what, sizeof m->what, "manifest %s, %u tensors", path, m->n);
    return 0;
}

void est_model_free(est_model *m) {
    free(m->numel);
    free(m->group);
    m->numel = NULL;
    m->group = NULL;
    m->n = 0;
}
