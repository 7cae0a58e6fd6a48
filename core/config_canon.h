/* The config in a canonical form that ranks can compare, and the first
 * difference between two such forms (config_canon.c).  Its own header so
 * that the engine agreement (engine_agree.c) depends on it and it on
 * nothing above the config. */
#ifndef ZERO_CORE_CONFIG_CANON_H
#define ZERO_CORE_CONFIG_CANON_H
#include <stddef.h>

#include "config.h"

/* The parsed config as canonical JSON text (sorted keys, compact, reals
 * with 17 digits), without the keys that may differ between nodes (the
 * nvme_path keys, trace, zero_optimization.plugin: see config_canon.c).
 * malloc'd (free()); NULL when out of memory.  Pure. */
char *zero__config_canonical(const zero__config *c);

/* The first difference between two canonical texts, keys in sorted order,
 * depth first: 1 with its dotted path ("optimizer.params.lr", arrays as
 * "[i]") and both values as compact JSON (or "absent") in path/va/vb;
 * 0 when equal or either text is not JSON.  Pure. */
int zero__config_first_diff(const char *a, const char *b, char *path, size_t plen, char *va, char *vb,
                            size_t vlen);
#endif
