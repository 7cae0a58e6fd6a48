/* The plugin ABI's revisions, in one place (abi/zero_plugin.h, "Evolution").
 *
 * A plugin exports zero_plugin_v4 (plugin ABI 1.8 on), zero_plugin_v3
 * (1.7), zero_plugin_v2 (1.6) or zero_plugin_v1 (1.0-1.5).  This file is
 * the only part of libzero that knows there is more than one: at load it turns whatever table a plugin exports into the
 * current zero_plugin_table_v4 (zero__plugin.table), at create it hands the
 * plugin the services table of its own revision, and it adopts the structs
 * plugins pass to services (zero_bucket_spec, zero_part_step,
 * zero_opt_range, zero_quant_spec), whose older, shorter layouts get their
 * documented defaults.  The rest of the core reads the current types,
 * complete, and checks no version or struct_size of a plugin's. */
#ifndef ZERO_CORE_PLUGIN_ABI_H
#define ZERO_CORE_PLUGIN_ABI_H
#include <stddef.h>
#include "zero_plugin.h"

struct zero_engine;

/* A loaded plugin.  Owned by whoever loaded it (zero__plugin_unload in
 * loader.c frees `adapted` and closes dl); may be copied by value, but
 * unloaded once. */
typedef struct zero__plugin {
    void *dl;                          /* dlopen handle */
    const zero_plugin_table_v4 *table; /* the current face: the plugin's own, or `adapted` */
    zero_plugin_table_v4 *adapted;     /* malloc'd for an older revision, else NULL */
    const zero_plugin_table_v1 *v1;    /* a revision-1 plugin's own table, else NULL */
    const void *symbol;                /* the exported table inside the library (build id) */
    int revision;                      /* 1, 2, 3 or 4 */
    zero_services_v1 services_v1;      /* a revision-1 plugin's services, filled by zero__plugin_create */
    char path[4096];                   /* file actually loaded */
} zero__plugin;

/* Find the newest table revision `dl` exports, check it (ABI major, a minor
 * not newer than this library's, table size, name, required entries) and
 * fill out->table / adapted / v1 / symbol / revision (not dl or path).
 * Errors (message in err, naming `path`): ZERO_ERR_PLUGIN_SYMBOL (no
 * table, or entries missing), ZERO_ERR_PLUGIN_ABI (another major, a newer
 * minor or revision, a corrupt size), ZERO_ERR_OUT_OF_MEMORY; on error
 * nothing is allocated.  Thread-safe (no shared state). */
zero_status zero__plugin_adopt(void *dl, const char *path, zero__plugin *out, char *err, size_t err_len);

/* Free what zero__plugin_adopt allocated (NULL-safe); leaves dl alone. */
void zero__plugin_adopt_free(zero__plugin *p);

/* Call the plugin's create with the services table of its revision: e->svc
 * (revision 2), or e->plugin.services_v1, filled here from e->svc.  Engine thread, once
 * per engine, after zero__services_init. */
zero_status zero__plugin_create(struct zero_engine *e, void **state);

/* The services entries that take a struct from the plugin: adopt it
 * (older, shorter layouts get their defaults; a struct shorter than its
 * 1.0 layout is refused with ZERO_ERR_INVALID_ARGUMENT and the last error
 * set), then call the core.  zero__services_init installs them. */
void zero__plugin_abi_services(zero_services_v2 *s);

/* zero_bucket_spec as the core reads it: *out complete, from a plugin's
 * spec of any revision.  0, or -1 if spec is NULL or shorter than 1.0's
 * (then *out is untouched).  Pure; any thread.  (Also the planner's
 * buckets_bytes, which a plugin of either revision calls.) */
int zero__adopt_bucket_spec(const zero_bucket_spec *spec, zero_bucket_spec *out);
#endif
