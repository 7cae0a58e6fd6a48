/* zero_set_hparams settings in checkpoints: the manifest's "state.hparams"
 * array, one object per zero_set_hparams target (a group id, or -1 for
 * ZERO_ALL_GROUPS) with the fields it overrides ("lr", "weight_decay",
 * "beta1", "beta2", "eps"; a field not overridden is absent).  Written from
 * global rank 0's settings (hosts set the same values on every rank, like
 * the lr they schedule).  A manifest without the key (written by libzero
 * before 1.4) leaves the engine's settings as they are.
 * Threads: engine step thread, inside zero_save / zero_load. */
#ifndef ZERO_CKPT_HPARAMS_H
#define ZERO_CKPT_HPARAMS_H
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine.h"

/* The engine's overrides as a JSON array (new reference; NULL: out of memory). */
json_t *zero__ck_hparams_json(const struct zero_engine *e);

/* Parse "state.hparams" of a manifest root.  *out (malloc'd, caller frees)
 * and *n receive the overrides; *present is 0 when the key is absent (then
 * *out is NULL).  Every value is checked (types, group >= -1, ranges as
 * zero_set_hparams accepts them); on error returns -1 with a message naming
 * the field in err. */
int zero__ck_hparams_parse(json_t *root, zero__hp_override **out, uint32_t *n, int *present, char *err,
                           size_t errn);
#endif
