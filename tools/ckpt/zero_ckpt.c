/* zero-ckpt: inspect, verify and consolidate libzero checkpoints offline
 * (docs/checkpoints.md).  Reads through the library's own manifest parser
 * and verifying reader (core/ckpt), so it accepts exactly what zero_load
 * accepts.
 *
 *   zero-ckpt info DIR [--json]      what a checkpoint holds
 *   zero-ckpt verify DIR             every chunk of every file against its CRC-32C
 *   zero-ckpt consolidate DIR OUT    full fp32 parameters as one safetensors file
 *
 * DIR is a checkpoint directory (with manifest.json) or a root whose
 * `latest` names one.  consolidate streams tensor by tensor: it holds one
 * tensor (fp32) plus a 1 MiB chunk and a 256 KiB conversion piece, never
 * the model.  Exit status 0 on success, 1 on a damaged checkpoint, 2 on
 * usage or I/O errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_source.h"
#include "zero.h"

static int usage(void) {
    fprintf(stderr,
            "usage: zero-ckpt info DIR [--json]\n"
            "       zero-ckpt verify DIR\n"
            "       zero-ckpt consolidate DIR OUT.safetensors\n"
            "DIR: a checkpoint directory (manifest.json) or a root whose 'latest' names one\n");
    return 2;
}

/* DIR or DIR/<latest>, and its manifest. */
static zero__ck_manifest *open_ckpt(const char *path, char *dir, size_t dn) {
    char p[4500], *text = NULL, err[1024];
    size_t len = 0;
    snprintf(dir, dn, "%s", path);
    snprintf(p, sizeof p, "%s/manifest.json", path);
    if (zero__ck_slurp(p, (size_t)256 << 20, &text, &len) != 0) {
        char *latest = NULL;
        size_t ll = 0;
        snprintf(p, sizeof p, "%s/latest", path);
        if (zero__ck_slurp(p, 4096, &latest, &ll) != 0) {
            fprintf(stderr, "zero-ckpt: no checkpoint in %s (neither manifest.json nor latest)\n", path);
            return NULL;
        }
        while (ll && (latest[ll - 1] == '\n' || latest[ll - 1] == ' ')) latest[--ll] = 0;
        if (!ll || strchr(latest, '/')) {
            fprintf(stderr, "zero-ckpt: %s/latest does not name a checkpoint directory\n", path);
            free(latest);
            return NULL;
        }
        if (snprintf(dir, dn, "%s/%s", path, latest) >= (int)dn) {
            fprintf(stderr, "zero-ckpt: path too long\n");
            free(latest);
            return NULL;
        }
        free(latest);
        snprintf(p, sizeof p, "%s/manifest.json", dir);
        if (zero__ck_slurp(p, (size_t)256 << 20, &text, &len) != 0) {
            fprintf(stderr, "zero-ckpt: cannot read %s: %s\n", p, strerror(errno));
            return NULL;
        }
    }
    zero__ck_manifest *m = zero__ck_manifest_parse(text, len, err, sizeof err);
    free(text);
    if (!m) fprintf(stderr, "zero-ckpt: %s: %s\n", dir, err);
    return m;
}

static int cmd_info(const zero__ck_manifest *m, const char *dir, int as_json) {
    uint64_t bytes = 0, numel = 0, largest = 0;
    for (uint32_t i = 0; i < m->nfiles; i++) bytes += m->files[i].bytes;
    for (uint32_t i = 0; i < m->nparams; i++) {
        numel += m->params[i].numel;
        if (m->params[i].numel > largest) largest = m->params[i].numel;
    }
    if (as_json) {
        json_t *o = json_object();
        json_object_set_new(o, "dir", json_string(dir));
        json_object_set_new(o, "tag", json_string(m->tag));
        json_object_set_new(o, "plugin", json_string(m->plugin));
        json_object_set_new(o, "stage", json_integer(m->stage));
        json_object_set_new(o, "world_size", json_integer(m->world));
        json_object_set_new(o, "pp_stages", json_integer(m->pp_stages));
        json_object_set_new(o, "model_dtype", json_string(zero__ck_dtype_name(m->model_dtype)));
        json_object_set_new(o, "global_step", json_integer((json_int_t)m->st.global_step));
        json_object_set_new(o, "micro_step", json_integer(m->st.micro_step));
        json_object_set_new(o, "skipped_steps", json_integer((json_int_t)m->st.skipped_steps));
        json_object_set_new(o, "lr", json_real(m->st.lr));
        json_object_set_new(o, "loss_scale", json_real(m->st.ls_scale));
        json_object_set_new(o, "reshardable", json_boolean(m->reshardable));
        json_object_set_new(o, "params", json_integer(m->nparams));
        json_object_set_new(o, "numel", json_integer((json_int_t)numel));
        json_object_set_new(o, "largest_param_numel", json_integer((json_int_t)largest));
        json_object_set_new(o, "files", json_integer(m->nfiles));
        json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(o, "library_version", json_string(m->library_version));
        json_object_set_new(o, "abi_version", json_integer(m->abi_version));
        json_t *ps = json_array();
        for (uint32_t i = 0; i < m->nparams; i++) {
            json_t *p = json_object();
            json_object_set_new(p, "name", json_string(m->params[i].name));
            json_object_set_new(p, "numel", json_integer((json_int_t)m->params[i].numel));
            json_object_set_new(p, "dtype", json_string(zero__ck_dtype_name(m->params[i].dtype)));
            json_object_set_new(p, "group", json_integer(m->params[i].group));
            json_object_set_new(p, "pp_stage", json_integer(m->params[i].pp_stage));
            json_array_append_new(ps, p);
        }
        json_object_set_new(o, "param_list", ps);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s ? s : "{}");
        free(s);
        json_decref(o);
        return 0;
    }
    printf("checkpoint   %s\n", dir);
    printf("tag          %s\n", m->tag);
    printf("written by   libzero %s (ABI %d.%d), plugin %s (stage %d), %d ranks x %d pipeline stages\n",
           m->library_version, m->abi_version / 10000, m->abi_version % 10000, m->plugin, m->stage, m->world,
           m->pp_stages);
    printf("step         global %llu, micro %u, skipped %llu; next lr %g; loss scale %g\n",
           (unsigned long long)m->st.global_step, m->st.micro_step, (unsigned long long)m->st.skipped_steps, m->st.lr,
           m->st.ls_scale);
    printf("model        %u parameters, %llu elements (%s), largest %llu; optimizer %d with %u state arrays\n",
           m->nparams, (unsigned long long)numel, zero__ck_dtype_name(m->model_dtype), (unsigned long long)largest,
           m->optim, m->nstate);
    printf("files        %u, %.1f MiB; %s\n", m->nfiles, (double)bytes / 1048576.0,
           m->reshardable ? "reshardable (loads at any world size into stage0/1/2/3/offload)"
                          : "loads only into the same plugin and world size");
    return 0;
}

static int cmd_verify(const zero__ck_manifest *m, const char *dir) {
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    char *buf = malloc((size_t)m->chunk_bytes), err[2048];
    int bad = 0;
    for (uint32_t i = 0; r && buf && i < m->nfiles; i++) {
        const zero__ck_file *f = &m->files[i];
        for (uint64_t off = 0; off < f->bytes; off += m->chunk_bytes) {
            uint64_t n = f->bytes - off < m->chunk_bytes ? f->bytes - off : m->chunk_bytes;
            if (zero__ck_read(r, f, off, buf, n, err, sizeof err)) {
                printf("BAD  %s\n", err);
                bad++;
                break;
            }
        }
    }
    uint64_t total = zero__ck_reader_bytes(r);
    zero__ck_reader_close(r);
    free(buf);
    if (bad) {
        printf("%s: %d of %u files damaged\n", dir, bad, m->nfiles);
        return 1;
    }
    printf("%s: OK, %u files, %llu bytes verified\n", dir, m->nfiles, (unsigned long long)total);
    return 0;
}

/* safetensors: u64 LE header length, JSON header (padded with spaces to a
 * multiple of 8), then the tensors' bytes in header order. */
static int cmd_consolidate(const zero__ck_manifest *m, const char *dir, const char *out) {
    uint64_t largest = 0, off = 0;
    json_t *h = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(meta, "libzero_tag", json_string(m->tag));
    char step[32];
    snprintf(step, sizeof step, "%llu", (unsigned long long)m->st.global_step);
    json_object_set_new(meta, "global_step", json_string(step));
    json_object_set_new(h, "__metadata__", meta);
    for (uint32_t i = 0; i < m->nparams; i++) {
        const zero__ck_param *p = &m->params[i];
        if (json_object_get(h, p->name)) {
            fprintf(stderr, "zero-ckpt: parameter name '%s' appears twice\n", p->name);
            json_decref(h);
            return 2;
        }
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        json_array_append_new(shape, json_integer((json_int_t)p->numel));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += p->numel * 4;
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_object_set_new(t, "dtype", json_string("F32"));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", offs);
        json_object_set_new(h, p->name, t);
        if (p->numel > largest) largest = p->numel;
    }
    char *hs = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    FILE *f = hs ? fopen(tmp, "wb") : NULL;
    float *buf = malloc(largest ? largest * 4 : 4);
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    if (!f || !buf || !r) {
        fprintf(stderr, "zero-ckpt: cannot write %s: %s\n", tmp, strerror(errno));
        if (f) fclose(f), unlink(tmp);
        free(hs), free(buf), zero__ck_reader_close(r);
        return 2;
    }
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hs, 1, hl, f) == hl;
    for (size_t k = hl; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
    free(hs);
    char err[2048] = "";
    int damaged = 0;
    for (uint32_t i = 0; ok && i < m->nparams; i++) {
        const zero__ck_param *p = &m->params[i];
        if (zero__ck_read_elems(r, p->pp_stage, ZERO__CK_MASTER, p->flat_offset, p->flat_offset + p->numel, buf,
                                ZERO_DTYPE_F32, err, sizeof err)) {
            damaged = 1;
            break;
        }
        ok = fwrite(buf, 4, (size_t)p->numel, f) == p->numel;
    }
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    zero__ck_reader_close(r);
    free(buf);
    if (damaged || !ok || rename(tmp, out) != 0) {
        unlink(tmp);
        fprintf(stderr, "zero-ckpt: %s\n", damaged ? err : strerror(errno));
        return damaged ? 1 : 2;
    }
    printf("%s: %u tensors, %llu fp32 values from %s (step %llu)\n", out, m->nparams,
           (unsigned long long)(off / 4), dir, (unsigned long long)m->st.global_step);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    char dir[4096];
    zero__ck_manifest *m = open_ckpt(argv[2], dir, sizeof dir);
    if (!m) return 1;
    int rc;
    if (!strcmp(argv[1], "info")) rc = cmd_info(m, dir, argc > 3 && !strcmp(argv[3], "--json"));
    else if (!strcmp(argv[1], "verify")) rc = cmd_verify(m, dir);
    else if (!strcmp(argv[1], "consolidate") && argc == 4) rc = cmd_consolidate(m, dir, argv[3]);
    else rc = usage();
    zero__ck_manifest_free(m);
    return rc;
}
