/* See host_util.h. */
#include "host_util.h"

#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double th_u11(uint64_t key) {
    uint64_t z = key + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static MPI_Comm th_comm = MPI_COMM_NULL;
void th_set_comm(MPI_Comm comm) { th_comm = comm; }
static const zero_host_comm *th_host = NULL;
void th_set_host_comm(const zero_host_comm *hc) { th_host = hc; }

zero_status th_engine_create(const char *json, const char *plugin, int self_comm, zero_log_fn log_fn,
                             void *log_user, zero_engine **e, char *err, size_t errlen) {
    MPI_Comm comm = th_comm != MPI_COMM_NULL ? th_comm : MPI_COMM_WORLD; /* read during zero_engine_create only */
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = plugin;
    o.comm_kind = self_comm ? ZERO_COMM_SELF : th_host ? ZERO_COMM_HOST : ZERO_COMM_MPI;
    o.comm = self_comm ? NULL : th_host ? (void *)th_host : (void *)&comm;
    o.log_fn = log_fn;
    o.log_user = log_user;
    char msg[900] = "";
    *e = NULL;
    zero_status s = zero_engine_create(&o, e, msg, sizeof msg);
    if (s != ZERO_OK) {
        *e = NULL;
        if (err && errlen) snprintf(err, errlen, "zero_engine_create: %s", msg);
    }
    return s;
}

zero_status th_gather_all_f32(zero_engine *e, zero_param *const *h, uint32_t np, const size_t *numel, float *dst) {
    void **ptrs = calloc(np ? np : 1, sizeof *ptrs);
    if (!ptrs) return ZERO_ERR_OUT_OF_MEMORY;
    zero_status s = zero_gather(e, h, np, ptrs);
    if (s == ZERO_OK) {
        size_t off = 0;
        for (uint32_t i = 0; i < np; i++) {
            memcpy(dst + off, ptrs[i], numel[i] * sizeof(float));
            off += numel[i];
        }
        zero_release(e, h, np);
    }
    free(ptrs);
    return s;
}

void th_remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    char f[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        if (unlink(f) != 0) th_remove_dir(f); /* a directory */
    }
    closedir(d);
    rmdir(path);
}

void th_ckpt_latest(const char *root, char *out, size_t n) {
    char p[4096], tag[512] = "";
    snprintf(p, sizeof p, "%s/latest", root);
    FILE *f = fopen(p, "r");
    out[0] = 0;
    if (!f) return;
    if (fgets(tag, sizeof tag, f)) {
        tag[strcspn(tag, "\n")] = 0;
        snprintf(out, n, "%s/%s", root, tag);
    }
    fclose(f);
}

void th_mkdtemp_bcast(char *templ, int size) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0 && !mkdtemp(templ)) templ[0] = 0;
    MPI_Bcast(templ, size, MPI_CHAR, 0, MPI_COMM_WORLD);
}
