/* A whole file into memory, for tests that read texts (manifests, docs,
 * sources).  Header-only.  Returns a NUL-terminated malloc'ed copy the
 * caller frees, or NULL when the file cannot be opened or memory runs out;
 * a short read gives an empty string. */
#ifndef ZERO_TESTS_SLURP_H
#define ZERO_TESTS_SLURP_H
#include <stdio.h>
#include <stdlib.h>

static inline char *th_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}
#endif
