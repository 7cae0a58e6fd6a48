/* See peers_data.h. */
#include "peers_data.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t peers_param_count(int width, int layers) {
    return (size_t)layers * ((size_t)width * (size_t)width + (size_t)width);
}

/* splitmix64 of a counter: uniform in [-1, 1). */
static float unit(uint64_t stream, uint64_t i) {
    uint64_t z = stream * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static int put(FILE *f, uint64_t stream, size_t n, float scale) {
    float buf[4096];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) buf[j] = scale * unit(stream, i + j);
        if (fwrite(buf, sizeof(float), k, f) != k) return -1;
        i += k;
    }
    return 0;
}

int peers_data_write(const char *path, int width, int layers, int rows, int pool) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int32_t hdr[6] = {PEERS_DATA_MAGIC, width, layers, rows, pool, 0};
    int rc = fwrite(hdr, sizeof hdr, 1, f) == 1 ? 0 : -1;
    /* PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias */
    const float bound = 1.0f / sqrtf((float)width);
    for (int l = 0; l < layers && rc == 0; l++) {
        rc = put(f, 100 + 2 * (uint64_t)l, (size_t)width * (size_t)width, bound);
        if (rc == 0) rc = put(f, 101 + 2 * (uint64_t)l, (size_t)width, bound);
    }
    const size_t batch = (size_t)rows * (size_t)width;
    if (rc == 0) rc = put(f, 1, (size_t)pool * batch, 1.0f);  /* inputs in [-1, 1) */
    if (rc == 0) rc = put(f, 2, (size_t)pool * batch, 0.5f);  /* targets in tanh's range */
    if (fclose(f) != 0) rc = -1;
    return rc;
}

int peers_data_read(const char *path, peers_data *d, char *err, size_t err_len) {
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open %s", path);
        return -1;
    }
    int32_t hdr[6];
    int rc = -1;
    if (fread(hdr, sizeof hdr, 1, f) != 1 || hdr[0] != PEERS_DATA_MAGIC || hdr[1] <= 0 || hdr[2] <= 0 ||
        hdr[3] <= 0 || hdr[4] <= 0) {
        snprintf(err, err_len, "%s: not a bench/peers data file", path);
        goto out;
    }
    d->width = hdr[1], d->layers = hdr[2], d->rows = hdr[3], d->pool = hdr[4];
    size_t np = peers_param_count(d->width, d->layers), nb = (size_t)d->pool * d->rows * d->width;
    d->params = malloc(np * sizeof(float));
    d->x = malloc(nb * sizeof(float));
    d->y = malloc(nb * sizeof(float));
    if (!d->params || !d->x || !d->y || fread(d->params, sizeof(float), np, f) != np ||
        fread(d->x, sizeof(float), nb, f) != nb || fread(d->y, sizeof(float), nb, f) != nb) {
        snprintf(err, err_len, "%s: short file or out of memory", path);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    if (rc) peers_data_free(d);
    return rc;
}

void peers_data_free(peers_data *d) {
    free(d->params);
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}
