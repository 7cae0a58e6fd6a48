/* Where the loader tests' plugin variants are, and whether one is still
 * mapped: shared by test_loader.c (static archive) and test_loader_engine.c
 * (libzero.so).  Header-only.  Not thread-safe (static path buffer). */
#ifndef ZERO_TESTS_LOADER_PATHS_H
#define ZERO_TESTS_LOADER_PATHS_H
#include <dlfcn.h>
#include <stdio.h>

/* "<dir>/libzero-plugin-loader-<variant>.so" in a static buffer, valid
 * until the next call. */
static inline const char *loader_plugin_path(const char *dir, const char *variant) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/libzero-plugin-loader-%s.so", dir, variant);
    return buf;
}

/* Is the library at path loaded in this process (RTLD_NOLOAD)? */
static inline int loader_still_loaded(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}
#endif
