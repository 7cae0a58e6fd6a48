/* Plugin loader: dlopen(RTLD_NOW|RTLD_LOCAL) and ABI checks. */
#ifndef ZERO_CORE_LOADER_H
#define ZERO_CORE_LOADER_H
#include <stddef.h>
#include "zero_plugin.h"

typedef struct zero__plugin {
    void *dl;                           /* dlopen handle */
    const zero_plugin_table_v1 *table;
    char path[4096];                    /* file actually loaded */
} zero__plugin;

/* Resolve `name_or_path`: contains '/' or ends in ".so" -> loaded as given;
 * otherwise libzero-plugin-<name>.so searched on $ZERO_PLUGIN_PATH
 * (colon-separated), then the install plugin dir, then the build tree.
 * Errors (message in err): ZERO_ERR_PLUGIN_NOT_FOUND listing every path tried,
 * ZERO_ERR_PLUGIN_SYMBOL, ZERO_ERR_PLUGIN_ABI naming both versions. On error
 * nothing stays loaded. */
zero_status zero__plugin_load(const char *name_or_path, zero__plugin *out, char *err, size_t err_len);
void zero__plugin_unload(zero__plugin *p);

/* Directories searched for plugins, in order, as a NULL-terminated array of
 * malloc'd strings (free with zero__plugin_dirs_free).  Used by zero-info. */
char **zero__plugin_dirs(void);
void zero__plugin_dirs_free(char **dirs);
#endif
