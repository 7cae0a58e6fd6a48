/* Corpus loading and batch sampling for the demo (see data.h). */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int append_file(const char *path, demo_corpus *c, size_t *cap, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (c->n == *cap) {
            size_t ncap = *cap ? *cap * 2 : (size_t)1 << 16;
            uint8_t *nb = realloc(c->bytes, ncap);
            if (!nb) {
                fclose(f);
                snprintf(err, err_len, "out of memory reading %s", path);
                return -1;
            }
            c->bytes = nb;
            *cap = ncap;
        }
        size_t got = fread(c->bytes + c->n, 1, *cap - c->n, f);
        c->n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, err_len, "read error on %s", path);
        return -1;
    }
    c->nfiles++;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int load_dir(const char *dir, demo_corpus *c, size_t *cap, char *err, size_t err_len) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_len, "cannot open directory %s: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t nn = 0, ncap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        if (nn == ncap) {
            ncap = ncap ? ncap * 2 : 32;
            char **nb = realloc(names, ncap * sizeof *nb);
            if (!nb) { rc = -1; break; }
            names = nb;
        }
        names[nn] = strdup(de->d_name);
        if (!names[nn]) { rc = -1; break; }
        nn++;
    }
    closedir(d);
    if (rc) snprintf(err, err_len, "out of memory listing %s", dir);
    if (!rc) qsort(names, nn, sizeof *names, cmp_names);
    for (size_t i = 0; i < nn && !rc; ++i) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        /* lstat: skip symlinks (GPL -> GPL-3 would duplicate text and leak
         * training data into the held-out tail). */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        rc = append_file(path, c, cap, err, err_len);
    }
    for (size_t i = 0; i < nn; ++i) free(names[i]);
    free(names);
    return rc;
}

int demo_corpus_load(const char *path, demo_corpus *c, char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    size_t cap = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_len, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = S_ISDIR(st.st_mode) ? load_dir(path, c, &cap, err, err_len)
                                 : append_file(path, c, &cap, err, err_len);
    if (rc == 0 && c->n < 1024) {
        snprintf(err, err_len, "corpus %s too small (%zu bytes; need at least 1024)", path, c->n);
        rc = -1;
    }
    if (rc) {
        demo_corpus_free(c);
        return -1;
    }
    c->n_train = c->n - c->n / 20; /* hold out the last 5% */
    return 0;
}

void demo_corpus_free(demo_corpus *c) {
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void fill_at(const demo_corpus *c, int ctx, size_t p, uint8_t *tok, uint8_t *tgt) {
    memcpy(tok, c->bytes + p - (size_t)ctx, (size_t)ctx);
    *tgt = c->bytes[p];
}

void demo_batch_fill(const demo_corpus *c, int ctx, uint64_t seed, uint64_t micro_step, int first,
                     int count, uint8_t *tok, uint8_t *tgt) {
    const uint64_t span = (uint64_t)(c->n_train - (size_t)ctx);
    const uint64_t base = mix64(mix64(seed) ^ micro_step);
    for (int i = 0; i < count; ++i) {
        uint64_t j = (uint64_t)(first + i);
        size_t p = (size_t)ctx + (size_t)(mix64(base + j) % span);
        fill_at(c, ctx, p, tok + (size_t)i * ctx, tgt + i);
    }
}

void demo_val_fill(const demo_corpus *c, int ctx, size_t first, int count, uint8_t *tok,
                   uint8_t *tgt) {
    for (int i = 0; i < count; ++i)
        fill_at(c, ctx, c->n_train + first + (size_t)i, tok + (size_t)i * ctx, tgt + i);
}
