/* Gather-order traces of the stage3 plugin: a list of param indices in the
 * order the host gathered them during one micro-step, plus the two tables
 * prefetch and the reuse-distance rule need (next use of the same param;
 * prefix sums of numel, so "elements gathered between two positions" is
 * one subtraction). */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"

int zero__s3_trace_push(zero__s3_trace *t, uint32_t idx) {
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

int zero__s3_trace_finish(zero__s3_trace *t, const zero__s3 *s) {
    free(t->next);
    free(t->prefix);
    t->next = malloc((t->len ? t->len : 1) * sizeof *t->next);
    t->prefix = malloc((t->len + 1) * sizeof *t->prefix);
    int64_t *last = malloc((s->nparams ? s->nparams : 1) * sizeof *last);
    if (!t->next || !t->prefix || !last) {
        free(last);
        t->valid = 0;
        return -1;
    }
    for (uint32_t i = 0; i < s->nparams; i++) last[i] = -1;
    /* Walk backwards so last[] holds the next position of each param. */
    for (size_t k = t->len; k-- > 0;) {
        t->next[k] = last[t->idx[k]];
        last[t->idx[k]] = (int64_t)k;
    }
    t->prefix[0] = 0;
    for (size_t k = 0; k < t->len; k++) t->prefix[k + 1] = t->prefix[k] + s->params[t->idx[k]].info->numel;
    free(last);
    t->valid = 1;
    return 0;
}

void zero__s3_trace_clear(zero__s3_trace *t) {
    t->len = 0;
    t->valid = 0;
}

void zero__s3_trace_free(zero__s3_trace *t) {
    free(t->idx);
    free(t->next);
    free(t->prefix);
    memset(t, 0, sizeof *t);
}

void zero__s3_trace_swap(zero__s3_trace *a, zero__s3_trace *b) {
    zero__s3_trace tmp = *a;
    *a = *b;
    *b = tmp;
}
