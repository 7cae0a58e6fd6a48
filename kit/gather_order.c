/* Gather orders of the kit's gather engine: a list of param indices in the
 * order the host gathered them during one micro-step, plus the two tables
 * prefetch and the reuse-distance rule need (next use of the same param;
 * prefix sums of numel, so "elements gathered between two positions" is
 * one subtraction); and the table of phases, each with its parked order.
 * Engine thread only; uses nothing else of the engine. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "gather_internal.h"

int zero_kit__trace_push(zero_kit__trace *t, uint32_t idx) {
    if (t->len == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        uint32_t *ni = realloc(t->idx, nc * sizeof *ni);
        if (!ni) return -1;
        t->idx = ni;
        t->cap = nc;
    }
    t->idx[t->len++] = idx;
    t->valid = 0;
    return 0;
}

int zero_kit__trace_finish(zero_kit__trace *t, const zero_kit__gp *params, uint32_t nparams) {
    free(t->next);
    free(t->prefix);
    t->next = malloc((t->len ? t->len : 1) * sizeof *t->next);
    t->prefix = malloc((t->len + 1) * sizeof *t->prefix);
    int64_t *last = malloc((nparams ? nparams : 1) * sizeof *last);
    if (!t->next || !t->prefix || !last) {
        free(last);
        t->valid = 0;
        return -1;
    }
    for (uint32_t i = 0; i < nparams; i++) last[i] = -1;
    /* Walk backwards so last[] holds the next position of each param. */
    for (size_t k = t->len; k-- > 0;) {
        t->next[k] = last[t->idx[k]];
        last[t->idx[k]] = (int64_t)k;
    }
    t->prefix[0] = 0;
    for (size_t k = 0; k < t->len; k++) t->prefix[k + 1] = t->prefix[k] + params[t->idx[k]].numel;
    free(last);
    t->valid = 1;
    return 0;
}

void zero_kit__trace_clear(zero_kit__trace *t) {
    t->len = 0;
    t->valid = 0;
}

void zero_kit__trace_free(zero_kit__trace *t) {
    free(t->idx);
    free(t->next);
    free(t->prefix);
    memset(t, 0, sizeof *t);
}

void zero_kit__trace_swap(zero_kit__trace *a, zero_kit__trace *b) {
    zero_kit__trace tmp = *a;
    *a = *b;
    *b = tmp;
}

const char *zero_kit__unit_name(const zero_kit_gather *g, int64_t idx, char *buf, size_t len) {
    if (idx < 0 || idx >= (int64_t)g->nparams)
        snprintf(buf, len, "(nothing)");
    else if (g->params[idx].layer == UINT32_MAX)
        snprintf(buf, len, "%s", g->params[idx].info->name);
    else
        snprintf(buf, len, "%s[layer %u]", g->params[idx].info->name, g->params[idx].layer);
    return buf;
}

const char *zero_kit__phase_name(const zero_kit_gather *g) {
    return g->phases && g->cur_phase < g->nphases ? g->phases[g->cur_phase].name : "train";
}

int zero_kit__phase_find_or_add(zero_kit_gather *g, const char *phase, uint32_t *at) {
    for (uint32_t i = 0; i < g->nphases; i++)
        if (strcmp(g->phases[i].name, phase) == 0) {
            *at = i;
            return 0;
        }
    if (g->nphases >= ZERO_KIT__MAX_PHASES) return -1;
    memset(&g->phases[g->nphases], 0, sizeof g->phases[0]);
    strncpy(g->phases[g->nphases].name, phase, sizeof g->phases[0].name - 1);
    *at = g->nphases++;
    return 0;
}

void zero_kit__phases_free(zero_kit_gather *g) {
    for (uint32_t i = 0; g->phases && i < g->nphases; i++) zero_kit__trace_free(&g->phases[i].trace);
    free(g->phases);
    g->phases = NULL;
    g->nphases = 0;
}
