/* Plugin loader: dlopen(RTLD_NOW|RTLD_LOCAL) and ABI checks. */
#ifndef ZERO_CORE_LOADER_H
#define ZERO_CORE_LOADER_H
#include <stddef.h>
#include "plugin_abi.h" /* zero__plugin: the table in its current revision */


/* Resolve `name_or_path`: contains '/' or ends in ".so" -> loaded as given;
 * otherwise libzero-plugin-<name>.so searched on $ZERO_PLUGIN_PATH
 * (colon-separated), then the install plugin dir, then the build tree.
 * Errors (message in err): ZERO_ERR_PLUGIN_NOT_FOUND listing the plugins that
 * exist on the search path and every path tried,
 * ZERO_ERR_PLUGIN_SYMBOL, ZERO_ERR_PLUGIN_ABI naming both versions. On error
 * nothing stays loaded. */
zero_status zero__plugin_load(const char *name_or_path, zero__plugin *out, char *err, size_t err_len);
void zero__plugin_unload(zero__plugin *p);

/* The build identity of a loaded plugin into out (n bytes): the hex of its
 * ELF NT_GNU_BUILD_ID note (found with dl_iterate_phdr in the mapped
 * object), or "crc32c:<8 hex>" of its file when it has no such note, or ""
 * when neither can be read.  Two ranks that print the same identity run the
 * same code.  Thread-safe. */
void zero__plugin_build_id(const zero__plugin *p, char *out, size_t n);

/* Directories searched for plugins, in order, as a NULL-terminated array of
 * malloc'd strings (free with zero__plugin_dirs_free).  Used by zero-info. */
char **zero__plugin_dirs(void);
void zero__plugin_dirs_free(char **dirs);

/* The plugin names (libzero-plugin-<name>.so, without prefix and suffix) in
 * one directory, sorted, as a NULL-terminated array freed with
 * zero__plugin_dirs_free; NULL when the directory cannot be opened.  The
 * files are not loaded.  Used by zero-info and the not-found message. */
char **zero__plugin_dir_names(const char *dir);
#endif
