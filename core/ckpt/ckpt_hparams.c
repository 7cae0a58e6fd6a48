/* zero_set_hparams settings saved in and restored from the manifest
 * (ckpt_hparams.h): without them a resumed run would step with the
 * config's hyper-parameters until the host set its own again, and its
 * first steps would differ from the run that saved. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_hparams.h"

static const char *const FIELD[5] = {"lr", "weight_decay", "beta1", "beta2", "eps"};

static double *slot(zero__hp_override *o, int k) {
    double *s[5] = {&o->lr, &o->weight_decay, &o->beta1, &o->beta2, &o->eps};
    return s[k];
}

json_t *zero__ck_hparams_json(const struct zero_engine *e) {
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < e->nhp_over; i++) {
        zero__hp_override o = e->hp_over[i];
        json_t *x = json_object();
        if (!x || json_array_append_new(a, x) != 0) {
            json_decref(a);
            return NULL;
        }
        json_object_set_new(x, "group", json_integer(o.group));
        for (int k = 0; k < 5; k++)
            if (*slot(&o, k) >= 0) json_object_set_new(x, FIELD[k], json_real(*slot(&o, k)));
    }
    return a;
}

/* The ranges zero_set_hparams accepts (hparams.c). */
static int valid(int k, double v) {
    if (!isfinite(v) || v < 0) return 0;
    if (k == 2 || k == 3) return v < 1;
    if (k == 4) return v > 0;
    return 1;
}

int zero__ck_hparams_parse(json_t *root, zero__hp_override **out, uint32_t *n, int *present, char *err,
                           size_t errn) {
    *out = NULL;
    *n = 0;
    *present = 0;
    json_t *a = json_object_get(json_object_get(root, "state"), "hparams");
    if (!a) return 0;
    if (!json_is_array(a) || json_array_size(a) > 65536) {
        snprintf(err, errn, "state.hparams: expected an array of at most 65536 entries");
        return -1;
    }
    size_t cnt = json_array_size(a);
    zero__hp_override *v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        snprintf(err, errn, "state.hparams: out of memory");
        return -1;
    }
    for (size_t i = 0; i < cnt; i++) {
        json_t *x = json_array_get(a, i);
        json_t *g = json_object_get(x, "group");
        if (!json_is_object(x) || !json_is_integer(g) || json_integer_value(g) < ZERO_ALL_GROUPS ||
            json_integer_value(g) > INT32_MAX) {
            snprintf(err, errn, "state.hparams[%zu].group: expected an integer >= -1", i);
            free(v);
            return -1;
        }
        v[i].group = (int32_t)json_integer_value(g);
        for (size_t j = 0; j < i; j++)
            if (v[j].group == v[i].group) {
                snprintf(err, errn, "state.hparams[%zu]: group %d appears twice", i, (int)v[i].group);
                free(v);
                return -1;
            }
        for (int k = 0; k < 5; k++) {
            json_t *f = json_object_get(x, FIELD[k]);
            *slot(&v[i], k) = -1.0;
            if (!f) continue;
            if (!json_is_number(f) || !valid(k, json_number_value(f))) {
                snprintf(err, errn, "state.hparams[%zu].%s: not a valid value", i, FIELD[k]);
                free(v);
                return -1;
            }
            *slot(&v[i], k) = json_number_value(f);
        }
    }
    *out = v;
    *n = (uint32_t)cnt;
    *present = 1;
    return 0;
}
