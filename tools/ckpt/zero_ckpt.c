/* zero-ckpt: inspect, verify and consolidate libzero checkpoints offline
 * (docs/checkpoints.md).  Reads through the library's own manifest parser
 * and verifying reader (core/ckpt), so it accepts exactly what zero_load
 * accepts.
 *
 *   zero-ckpt info DIR [--json]      what a checkpoint holds
 *   zero-ckpt verify DIR             what zero_load checks (ckpt_validate.h: the manifest's
 *                                    checksum, offsets, completeness, every core blob
 *                                    against the manifest), then every chunk of every
 *                                    file against its CRC-32C
 *   zero-ckpt consolidate DIR OUT    full fp32 parameters as one safetensors file
 *   zero-ckpt client-state DIR OUT   (1.7) the host's client state (zero_save_options.
 *                                    client_state), verified, into OUT ("-": stdout);
 *                                    exit 3 when the checkpoint has none
 *   zero-ckpt convert SRC DST --ranks M [--plugin T]
 *                                    reshard offline: DST holds the checkpoint as
 *                                    plugin T (default: SRC's) at M ranks would
 *                                    have saved it (manifest, checksums, latest);
 *                                    M is the data-parallel size (per pipeline
 *                                    stage: the pipeline split is kept)
 *
 * DIR is a checkpoint directory (with manifest.json) or a root whose
 * `latest` names one.  consolidate streams tensor by tensor: it holds one
 * tensor (fp32) plus a 1 MiB chunk and a 256 KiB conversion piece, never
 * the model.  convert streams too: per output blob, pieces of 256 Ki
 * elements read through the verifying reader (ckpt_source.h, the same
 * mapping a resharding zero_load uses) and appended with their chunk
 * checksums (zero__ck_blob_begin/put/end).  An output inside the
 * checkpoint being read (or, for consolidate, the same file as one of its
 * files) is refused, naming both paths; nothing is written through a link.
 * Exit status 0 on success, 1 on
 * a damaged checkpoint, 2 on usage or I/O errors and refused conversions, 3
 * from client-state on a checkpoint without one. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_engine.h"
#include "ckpt_source.h"
#include "ckpt_validate.h"
#include "config.h"
#include "layout.h"
#include "zero.h"

static int usage(void) {
    fprintf(stderr,
            "usage: zero-ckpt info DIR [--json]\n"
            "       zero-ckpt verify DIR\n"
            "       zero-ckpt consolidate DIR OUT.safetensors\n"
            "       zero-ckpt convert SRC DST --ranks M [--plugin stage0|stage1|stage2|stage1-pp]\n"
            "       zero-ckpt client-state DIR OUT|-   (the host's client state, verified; exit 3: none)\n"
            "         (M: the data-parallel size; a pipeline checkpoint keeps its stages)\n"
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
        json_object_set_new(o, "optimizer", json_string(zero__ck_optim_name(m->optim)));
        json_object_set_new(o, "manifest_version", json_integer(m->version));
        json_object_set_new(o, "reshardable", json_boolean(m->reshardable));
        json_object_set_new(o, "params", json_integer(m->nparams));
        json_object_set_new(o, "numel", json_integer((json_int_t)numel));
        json_object_set_new(o, "largest_param_numel", json_integer((json_int_t)largest));
        json_object_set_new(o, "files", json_integer(m->nfiles));
        json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(o, "client_state_bytes",
                            m->client ? json_integer((json_int_t)m->client->bytes) : json_null()); /* (1.7) */
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
            json_t *sh = json_array(); /* (1.8) as registered, else [numel] */
            if (m->params[i].has_shape)
                for (uint32_t k = 0; k < m->params[i].ndim; k++)
                    json_array_append_new(sh, json_integer((json_int_t)m->params[i].shape[k]));
            else json_array_append_new(sh, json_integer((json_int_t)m->params[i].numel));
            json_object_set_new(p, "shape", sh);
            json_array_append_new(ps, p);
        }
        json_object_set_new(o, "param_list", ps);
        json_t *xs = json_array(); /* (libzero 1.10) the expert groups as the manifest records them */
        for (uint32_t x = 0; x < m->nexperts; x++) {
            json_t *sets = json_object();
            for (uint32_t k = 0; k < m->experts[x].nsets; k++) {
                json_t *names = json_array();
                for (uint32_t q = 0; q < m->experts[x].nnames; q++)
                    json_array_append_new(names, json_string(m->experts[x].sets[k].names[q]));
                char key[16];
                snprintf(key, sizeof key, "%d", (int)m->experts[x].sets[k].color);
                json_object_set_new(sets, key, names);
            }
            json_t *xo = json_pack("{s:i,s:o}", "group", (int)m->experts[x].group, "names_by_color", sets);
            if (m->pp_stages > 1) json_object_set_new(xo, "pp_stage", json_integer(m->experts[x].pp_stage)); /* (1.13) */
            json_array_append_new(xs, xo);
        }
        json_object_set_new(o, "experts", xs);
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
    printf("format       %d%s\n", m->version,
           m->version == ZERO__CK_VERSION_LEGACY
               ? " (libzero 1.5.1 or older: the manifest has no checksum of its own; verify says what it cannot check)"
               : ", the manifest's own CRC-32C verified");
    printf("step         global %llu, micro %u, skipped %llu; next lr %g; loss scale %g\n",
           (unsigned long long)m->st.global_step, m->st.micro_step, (unsigned long long)m->st.skipped_steps, m->st.lr,
           m->st.ls_scale);
    printf("model        %u parameters, %llu elements (%s), largest %llu; optimizer %s with %u state arrays\n",
           m->nparams, (unsigned long long)numel, zero__ck_dtype_name(m->model_dtype), (unsigned long long)largest,
           zero__ck_optim_name(m->optim), m->nstate);
    printf("files        %u, %.1f MiB; %s\n", m->nfiles, (double)bytes / 1048576.0,
           m->reshardable ? (m->pp_stages > 1 ? "reshardable (loads at another data-parallel size or pipeline split)"
                             : m->nexperts ? "reshardable (loads at any world size into stage1/2/3/offload, experts by name)"
                                           : "reshardable (loads at any world size into stage0/1/2/3/offload)")
                          : "loads only into the same plugin and world size");
    for (uint32_t x = 0; x < m->nexperts; x++) { /* (libzero 1.10; the pipeline stage since 1.13) */
        char stage[40] = "";
        if (m->pp_stages > 1) snprintf(stage, sizeof stage, " of pipeline stage %d", (int)m->experts[x].pp_stage);
        printf("experts      group %d%s: %u parameters on each of %u expert-data-parallel groups (colors) of %d "
               "ranks; %s, ...\n",
               (int)m->experts[x].group, stage, m->experts[x].nnames, m->experts[x].nsets,
               m->world / (int)m->experts[x].nsets, m->experts[x].sets[0].names[0]);
    }
    if (m->client) /* (1.7) zero_save_options.client_state */
        printf("client state %llu bytes (%s; zero_client_state after zero_load)\n",
               (unsigned long long)m->client->bytes, m->client->file);
    return 0;
}

/* Exactly what zero_load checks before it restores anything (the manifest
 * as a whole and every rank's core blob, ckpt_validate.h), plus every
 * chunk of every file; a version-1 manifest is verified with a warning
 * saying what it cannot show. */
static int cmd_verify(const zero__ck_manifest *m, const char *dir) {
    char err[2048];
    if (zero__ck_manifest_validate(m, err, sizeof err)) {
        printf("BAD  %s\n%s: the manifest does not describe a valid checkpoint\n", err, dir);
        return 1;
    }
    const char *note = zero__ck_legacy_note(m);
    if (note) printf("WARNING  %s\n", note);
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    char *buf = malloc((size_t)m->chunk_bytes);
    int bad = 0;
    const uint32_t nall = zero__ck_nrecords(m); /* (1.7) the client state too, one record past the shards */
    for (uint32_t i = 0; r && buf && i < nall; i++) {
        const zero__ck_file *f = &m->files[i];
        for (uint64_t off = 0; off < f->bytes; off += m->chunk_bytes) {
            uint64_t n = f->bytes - off < m->chunk_bytes ? f->bytes - off : m->chunk_bytes;
            if (zero__ck_read(r, f, off, buf, n, err, sizeof err)) {
                printf("BAD  %s\n", err);
                bad++;
                break;
            }
        }
        if (!bad && !strcmp(f->blob, "core") && zero__ck_core_verify(r, m, f->rank, f->pp_stage, err, sizeof err)) {
            printf("BAD  %s\n", err);
            bad++;
        }
    }
    uint64_t total = zero__ck_reader_bytes(r);
    zero__ck_reader_close(r);
    free(buf);
    if (bad) {
        printf("%s: %d of %u files damaged\n", dir, bad, nall);
        return 1;
    }
    printf("%s: OK, %u files, %llu bytes verified\n", dir, nall, (unsigned long long)total);
    return 0;
}

/* ------------------------------------------------------------ outputs */

/* An output written inside the checkpoint being read would replace or add
 * to what is read (a shard overwritten mid-read, a stray file or directory
 * in it): refused before anything is written, naming both paths.  `where`
 * is followed as the writer follows it (mkdir -p, or the directory a file
 * is renamed into).  1: refused (message printed). */
static int refuse_inside(const char *cmd, const char *out, const char *where, const char *dir) {
    char shown[8192], rdir[PATH_MAX];
    int in = zero__ck_path_within(where, dir, shown, sizeof shown);
    if (in < 0) {
        fprintf(stderr, "zero-ckpt %s: cannot resolve %s: %s\n", cmd, where, strerror(errno));
        return 1;
    }
    if (!in) return 0;
    if (!realpath(dir, rdir)) snprintf(rdir, sizeof rdir, "%s", dir);
    fprintf(stderr,
            "zero-ckpt %s: the output %s (in %s) is inside the checkpoint being read, %s (%s); nothing written, "
            "write it elsewhere\n",
            cmd, out, shown, dir, rdir);
    return 1;
}

/* An existing output that is (a link to, or a hard link of) a file of the
 * checkpoint -- a shard, manifest.json, the root's latest.  1: refused. */
static int refuse_same_file(const char *cmd, const char *out, const zero__ck_manifest *m, const char *dir,
                            const char *arg) {
    struct stat o, f;
    if (stat(out, &o) != 0) return 0; /* does not exist yet */
    char path[8192];
    for (uint32_t i = 0; i <= m->nfiles + 1; i++) {
        if (i < m->nfiles) snprintf(path, sizeof path, "%s/%s", dir, m->files[i].file);
        else if (i == m->nfiles) snprintf(path, sizeof path, "%s/manifest.json", dir);
        else snprintf(path, sizeof path, "%s/latest", arg);
        if (stat(path, &f) == 0 && f.st_dev == o.st_dev && f.st_ino == o.st_ino) {
            fprintf(stderr, "zero-ckpt %s: the output %s is the same file as %s of the checkpoint being read; "
                            "nothing written, write it elsewhere\n",
                    cmd, out, path);
            return 1;
        }
    }
    snprintf(path, sizeof path, "%s/%s", dir, m->client ? m->client->file : ZERO__CK_CLIENT_FILE); /* (1.7) */
    if (stat(path, &f) == 0 && f.st_dev == o.st_dev && f.st_ino == o.st_ino) {
        fprintf(stderr, "zero-ckpt %s: the output %s is the same file as %s of the checkpoint being read; nothing "
                        "written, write it elsewhere\n",
                cmd, out, path);
        return 1;
    }
    return 0;
}

/* (1.7) The client state's bytes, verified chunk by chunk, into OUT ("-":
 * stdout).  Exit 3 when the checkpoint has none. */
static int cmd_client_state(const zero__ck_manifest *m, const char *dir, const char *arg, const char *out) {
    if (!m->client) {
        fprintf(stderr, "zero-ckpt client-state: %s has no client state (saved without one, or by libzero < 1.8)\n",
                dir);
        return 3;
    }
    const int to_stdout = !strcmp(out, "-");
    char parent[4096];
    const char *slash = strrchr(out, '/');
    if (slash == out) snprintf(parent, sizeof parent, "/");
    else if (slash) snprintf(parent, sizeof parent, "%.*s", (int)(slash - out), out);
    else snprintf(parent, sizeof parent, ".");
    if (!to_stdout && (refuse_inside("client-state", out, parent, dir) ||
                       refuse_same_file("client-state", out, m, dir, arg)))
        return 2;
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    char *buf = malloc((size_t)m->chunk_bytes), err[2048];
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    FILE *f = stdout;
    if (!to_stdout) { /* never through a link at the temp name (as consolidate) */
        const int fd = zero__ck_open_new(tmp);
        f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (!f && fd >= 0) close(fd), unlink(tmp);
    }
    int rc = r && buf && f ? 0 : 2;
    if (rc) fprintf(stderr, "zero-ckpt client-state: %s\n", f ? "out of memory" : strerror(errno));
    for (uint64_t off = 0; !rc && off < m->client->bytes; off += m->chunk_bytes) {
        const uint64_t left = m->client->bytes - off, n = left < m->chunk_bytes ? left : m->chunk_bytes;
        if (zero__ck_read(r, m->client, off, buf, n, err, sizeof err)) {
            fprintf(stderr, "zero-ckpt client-state: %s\n", err);
            rc = 1;
        } else if (fwrite(buf, 1, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "zero-ckpt client-state: writing %s: %s\n", to_stdout ? "stdout" : tmp, strerror(errno));
            rc = 2;
        }
    }
    if (f && !to_stdout && fclose(f) != 0 && !rc) {
        fprintf(stderr, "zero-ckpt client-state: writing %s: %s\n", tmp, strerror(errno));
        rc = 2;
    }
    if (to_stdout && fflush(stdout) != 0 && !rc) rc = 2;
    if (!to_stdout && f) {
        if (!rc && rename(tmp, out) != 0) {
            fprintf(stderr, "zero-ckpt client-state: cannot move %s to %s: %s\n", tmp, out, strerror(errno));
            rc = 2;
        }
        if (rc) unlink(tmp); /* a damaged client state leaves no output behind */
    }
    zero__ck_reader_close(r);
    free(buf);
    if (!rc && !to_stdout)
        printf("%s: the client state of %s, %llu bytes, verified\n", out, dir, (unsigned long long)m->client->bytes);
    return rc;
}

/* A tensor consolidate writes: a parameter, or one expert of an expert
 * group (xi >= 0: read from the ranks of `color`). */
typedef struct cons_entry {
    const zero__ck_param *p;
    const char *name;
    int xi;
    int32_t color;
} cons_entry;

/* safetensors: u64 LE header length, JSON header (padded with spaces to a
 * multiple of 8), then the tensors' bytes in header order.  arg: the path
 * given (DIR or its root), for the output checks. */
static int cmd_consolidate(const zero__ck_manifest *m, const char *dir, const char *arg, const char *out) {
    char parent[4096];
    const char *slash = strrchr(out, '/');
    if (slash == out) snprintf(parent, sizeof parent, "/");
    else if (slash) snprintf(parent, sizeof parent, "%.*s", (int)(slash - out), out);
    else snprintf(parent, sizeof parent, ".");
    if (!slash ? !out[0] : !slash[1]) {
        fprintf(stderr, "zero-ckpt consolidate: the output '%s' names no file\n", out);
        return 2;
    }
    if (refuse_inside("consolidate", out, parent, dir) || refuse_same_file("consolidate", out, m, dir, arg)) return 2;
    /* (libzero 1.10) one tensor per parameter, and per expert of an expert
     * group: each expert-data-parallel group's, under its own name */
    uint32_t ne = 0;
    for (uint32_t i = 0; i < m->nparams; i++) {
        const int xi = zero__ck_expert_index(m, m->params[i].group, m->params[i].pp_stage);
        ne += xi >= 0 ? m->experts[xi].nsets : 1;
    }
    cons_entry *ents = calloc(ne ? ne : 1, sizeof *ents);
    if (!ents) {
        fprintf(stderr, "zero-ckpt: out of memory\n");
        return 2;
    }
    ne = 0;
    for (uint32_t i = 0; i < m->nparams; i++) {
        const zero__ck_param *p = &m->params[i];
        const int xi = zero__ck_expert_index(m, p->group, p->pp_stage);
        if (xi < 0) {
            ents[ne++] = (cons_entry){p, p->name, -1, -1};
            continue;
        }
        uint32_t k = 0; /* its place in the group */
        for (uint32_t j = 0; j < i; j++) k += m->params[j].group == p->group;
        for (uint32_t q = 0; q < m->experts[xi].nsets; q++)
            ents[ne++] = (cons_entry){p, m->experts[xi].sets[q].names[k], xi, m->experts[xi].sets[q].color};
    }
    uint64_t largest = 0, off = 0;
    json_t *h = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(meta, "libzero_tag", json_string(m->tag));
    char step[32];
    snprintf(step, sizeof step, "%llu", (unsigned long long)m->st.global_step);
    json_object_set_new(meta, "global_step", json_string(step));
    json_object_set_new(h, "__metadata__", meta);
    for (uint32_t i = 0; i < ne; i++) {
        const zero__ck_param *p = ents[i].p;
        if (json_object_get(h, ents[i].name)) {
            fprintf(stderr, "zero-ckpt: parameter name '%s' appears twice\n", ents[i].name);
            json_decref(h);
            free(ents);
            return 2;
        }
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        if (p->has_shape) /* (1.8) the host's shape (zero_param_desc.shape), else [numel] */
            for (uint32_t k = 0; k < p->ndim; k++) json_array_append_new(shape, json_integer((json_int_t)p->shape[k]));
        else json_array_append_new(shape, json_integer((json_int_t)p->numel));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += p->numel * 4;
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_object_set_new(t, "dtype", json_string("F32"));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", offs);
        json_object_set_new(h, ents[i].name, t);
        if (p->numel > largest) largest = p->numel;
    }
    char *hs = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    int fd = hs ? zero__ck_open_new(tmp) : -1; /* never through a link at the temp name */
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f && fd >= 0) close(fd), unlink(tmp);
    float *buf = malloc(largest ? largest * 4 : 4);
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    if (!f || !buf || !r) {
        fprintf(stderr, "zero-ckpt: cannot write %s: %s\n", tmp, strerror(errno));
        if (f) fclose(f), unlink(tmp);
        free(hs), free(buf), zero__ck_reader_close(r), free(ents);
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
    for (uint32_t i = 0; ok && i < ne; i++) {
        const zero__ck_param *p = ents[i].p;
        if (zero__ck_read_expert(r, p->pp_stage, ZERO__CK_MASTER, ents[i].xi, ents[i].color, p->flat_offset,
                                 p->flat_offset + p->numel, buf, ZERO_DTYPE_F32, err, sizeof err)) {
            damaged = 1;
            break;
        }
        ok = fwrite(buf, 4, (size_t)p->numel, f) == p->numel;
    }
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    zero__ck_reader_close(r);
    free(buf);
    free(ents);
    if (damaged || !ok || rename(tmp, out) != 0) {
        unlink(tmp);
        fprintf(stderr, "zero-ckpt: %s\n", damaged ? err : strerror(errno));
        return damaged ? 1 : 2;
    }
    printf("%s: %u tensors, %llu fp32 values from %s (step %llu)\n", out, ne,
           (unsigned long long)(off / 4), dir, (unsigned long long)m->st.global_step);
    return 0;
}

/* ------------------------------------------------------------ convert */

/* The flat-layout plugins (the plugin kit's flat engine, kit/kit_dp.c): what each writes
 * per rank, in this order -- core, <name>.params, <name>.master (16-bit
 * models), <name>.state<k>, <name>.<grads> (opaque: the window's gradient,
 * zero at a boundary; part_numel or flat_numel elements of the gradient
 * accumulation dtype).  A converted checkpoint holds exactly these, so
 * zero_load at M ranks takes its native path. */
typedef struct conv_target {
    const char *name, *grads;
    int stage, replicated, grads_part, pipeline;
} conv_target;
static const conv_target TARGETS[] = {
    {"stage0", "grads", 0, 1, 0, 1},
    {"stage1", "grads", 1, 0, 0, 0},
    {"stage2", "part", 2, 0, 1, 0},
    {"stage1-pp", "grads", 1, 0, 0, 1}, /* plugins/stage1-pp: the flat blob set too, per pipeline stage */
};

typedef struct conv_ctx {
    const zero__ck_manifest *m;
    zero__ck_reader *r;
    const char *dir;          /* staging directory */
    const uint64_t *new_off;  /* the target layout's offset of each parameter of pipeline stage pp */
    int pp, npp;              /* the pipeline stage being written, of how many */
    json_t *files;            /* file records of the new manifest */
    void *buf;                /* one piece */
    uint64_t peak_piece_bytes;
} conv_ctx;

enum { CONV_PIECE = 1 << 18 }; /* elements per piece: 1 MiB of fp32 */

static void conv_file_name(const conv_ctx *x, const char *blob, long long rank, char *out, size_t n) {
    if (x->npp > 1) snprintf(out, n, "%s.pp%d.rank%lld.bin", blob, x->pp, rank);
    else snprintf(out, n, "%s.rank%lld.bin", blob, rank);
}

static int conv_record(conv_ctx *x, const char *file, const char *blob, int rank, uint64_t bytes, uint32_t *crc,
                       uint32_t nc, int32_t kind, zero_dtype dt, const zero_owned_range *own, uint32_t nown) {
    zero__ck_file f = {0};
    zero__ck_range *rg = NULL;
    f.file = (char *)file;
    f.blob = (char *)blob;
    f.rank = rank;
    f.pp_stage = x->pp;
    f.bytes = bytes;
    f.nchunks = nc;
    f.crc = crc;
    f.kind = kind;
    f.dtype = dt;
    if (kind != ZERO__CK_OPAQUE) {
        rg = calloc(nown ? nown : 1, sizeof *rg);
        if (!rg) return -1;
        for (uint32_t k = 0; k < nown; k++) rg[k] = (zero__ck_range){own[k].flat_lo, own[k].flat_hi};
        f.nranges = nown;
        f.ranges = rg;
    }
    json_array_append_new(x->files, zero__ck_file_json(&f));
    free(rg);
    return 0;
}

/* One blob of rank `rank`: `kind` over the owned ranges (read through the
 * mapping), or `zeros` bytes of zeros (kind OPAQUE). */
static int conv_blob(conv_ctx *x, const char *blob, int rank, int32_t kind, zero_dtype dt, const zero_owned_range *own,
                     uint32_t nown, uint64_t zeros, char *err, size_t errn) {
    char file[300];
    conv_file_name(x, blob, rank, file, sizeof file);
    const size_t es = kind == ZERO__CK_OPAQUE ? 1 : zero__ck_dtype_size(dt);
    uint64_t total = 0;
    if (kind == ZERO__CK_OPAQUE) total = zeros;
    else
        for (uint32_t k = 0; k < nown; k++) total += (own[k].flat_hi - own[k].flat_lo) * es;
    zero__ck_blob_writer *w = zero__ck_blob_begin(x->dir, file, total, x->m->chunk_bytes, err, errn);
    if (!w) return 2;
    if (kind == ZERO__CK_OPAQUE) {
        memset(x->buf, 0, (size_t)CONV_PIECE * 4);
        for (uint64_t o = 0; o < total; o += (uint64_t)CONV_PIECE * 4) {
            uint64_t n = total - o < (uint64_t)CONV_PIECE * 4 ? total - o : (uint64_t)CONV_PIECE * 4;
            if (zero__ck_blob_put(w, x->buf, n, err, errn)) return zero__ck_blob_abort(w), 2;
        }
    }
    for (uint32_t k = 0; kind != ZERO__CK_OPAQUE && k < nown; k++)
        for (uint64_t lo = own[k].flat_lo; lo < own[k].flat_hi; lo += CONV_PIECE) {
            uint64_t hi = own[k].flat_hi - lo < CONV_PIECE ? own[k].flat_hi : lo + CONV_PIECE;
            if (zero__ck_read_mapped(x->r, x->pp, kind, x->new_off, lo, hi, x->buf, dt, err, errn))
                return zero__ck_blob_abort(w), 1;
            if (zero__ck_blob_put(w, x->buf, (hi - lo) * es, err, errn)) return zero__ck_blob_abort(w), 2;
        }
    uint32_t *crc = NULL, nc = 0;
    if (zero__ck_blob_end(w, &crc, &nc, err, errn)) return 2;
    int bad = conv_record(x, file, blob, rank, total, crc, nc, kind, dt, own, nown);
    free(crc);
    if (bad) {
        snprintf(err, errn, "zero-ckpt: out of memory");
        return 2;
    }
    return 0;
}

/* (1.7) The client state (zero_save_options.client_state) into the new
 * checkpoint, the bytes as saved: streamed in pieces through the verifying
 * reader, its record (a new reference) in *rec. */
static int conv_client(conv_ctx *x, json_t **rec, char *err, size_t errn) {
    const zero__ck_file *f = x->m->client;
    zero__ck_blob_writer *w = zero__ck_blob_begin(x->dir, ZERO__CK_CLIENT_FILE, f->bytes, x->m->chunk_bytes, err, errn);
    if (!w) return 2;
    const uint64_t piece = (uint64_t)CONV_PIECE * 4;
    for (uint64_t o = 0; o < f->bytes; o += piece) {
        const uint64_t n = f->bytes - o < piece ? f->bytes - o : piece;
        if (zero__ck_read(x->r, f, o, x->buf, n, err, errn)) return zero__ck_blob_abort(w), 1;
        if (zero__ck_blob_put(w, x->buf, n, err, errn)) return zero__ck_blob_abort(w), 2;
    }
    zero__ck_file c = *f;
    if (zero__ck_blob_end(w, &c.crc, &c.nchunks, err, errn)) return 2;
    *rec = zero__ck_file_json(&c);
    free(c.crc);
    if (!*rec) return snprintf(err, errn, "zero-ckpt: out of memory"), 2;
    return 0;
}

/* The gradient accumulation dtype the target would use, and its layout's
 * ownership (round_robin_gradients and reduce_bucket_size: the engine cuts
 * the same stripes at any world size, core/layout.h): the saver's config
 * (valid at the saver's world size) through the library's own parser. */
static int conv_grad_dtype(const zero__ck_manifest *m, zero_dtype *out, int *round_robin, uint64_t *bucket, char *err,
                           size_t errn) {
    json_t *cfg = json_object_get(m->root, "config");
    char *text = cfg && json_is_object(cfg) ? json_dumps(cfg, JSON_COMPACT) : NULL;
    zero__config *c = NULL;
    char perr[1024] = "";
    zero_status st = zero__config_parse(text ? text : "{}", NULL, m->world, &c, NULL, NULL, perr, sizeof perr);
    free(text);
    if (st != ZERO_OK) {
        snprintf(err, errn, "zero-ckpt convert: the checkpoint's config does not parse: %s", perr);
        return -1;
    }
    const zero_run_config *rc = zero__config_run(c);
    *out = rc->grad_accum_dtype;
    *round_robin = rc->round_robin_gradients;
    *bucket = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    zero__config_free(c);
    return 0;
}

__attribute__((format(printf, 1, 2))) static int conv_refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zero-ckpt convert: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static int cmd_convert(const zero__ck_manifest *m, const char *src, const char *dst, long long ranks,
                       const char *plugin) {
    if (refuse_inside("convert", dst, dst, src)) return 2;
    const conv_target *t = NULL;
    if (!plugin) plugin = m->plugin;
    for (size_t i = 0; i < sizeof TARGETS / sizeof TARGETS[0]; i++)
        if (!strcmp(plugin, TARGETS[i].name)) t = &TARGETS[i];
    if (ranks < 1 || ranks > 65536)
        return conv_refuse("--ranks %lld: the target world size must be 1 to 65536", ranks);
    if (!t && (!strcmp(plugin, "stage3") || !strcmp(plugin, "offload")))
        return conv_refuse("plugin '%s' is not a target of convert (it writes stage0, stage1, stage2, stage1-pp); zero_load "
                           "with plugin '%s' reads the original directly (resharding on load)",
                           plugin, plugin);
    if (!t)
        return conv_refuse("unknown plugin '%s' (convert writes stage0, stage1, stage2, stage1-pp)", plugin);
    if (!m->reshardable)
        return conv_refuse("%s: written by plugin '%s', which lacks ZERO_PLUGIN_CAP_RESHARD (its shards are not "
                           "described for resharding); it loads only with plugin '%s' at %d ranks",
                           src, m->plugin, m->plugin, m->world);
    if (m->st.micro_step)
        return conv_refuse("%s: saved in the middle of an accumulation window (micro-step %u); gradients in "
                           "flight are not resharded", src, m->st.micro_step);
    if (m->nexperts) /* (libzero 1.10) a target rank's experts depend on the colors of the run that loads it */
        return conv_refuse("%s: the model has expert groups (param group %d: mixture of experts); zero_load at the "
                           "new world size reads it directly, finding each rank's experts by name",
                           src, (int)m->experts[0].group);
    const int P = m->pp_stages;
    if (P < 1 || P > 4096) return conv_refuse("%s: %d pipeline stages", src, P);
    if (P > 1 && !t->pipeline)
        return conv_refuse("%s: a pipeline checkpoint (%d stages); plugin '%s' cannot run with pipeline "
                           "parallelism (stage0 or stage1-pp can; the split stays %d stages)",
                           src, P, t->name, P);
    for (int S = 0; S < P; S++) {
        if (!zero__ck_layout_of(m, S))
            return conv_refuse("%s: the manifest has no layout of pipeline stage %d", src, S);
        for (int k = -1; k < (int)m->nstate; k++)
            if (!zero__ck_has(m, S, k < 0 ? ZERO__CK_MASTER : ZERO__CK_STATE0 + k))
                return conv_refuse("%s: no shard data of kind %d of pipeline stage %d for resharding", src,
                                   k < 0 ? 1 : k + 2, S);
    }
    char err[10000];
    zero_dtype gdt;
    int round_robin = 0;
    uint64_t bucket = 0;
    if (conv_grad_dtype(m, &gdt, &round_robin, &bucket, err, sizeof err)) return fprintf(stderr, "%s\n", err), 2;
    const zero_dtype mdt = m->model_dtype;
    const size_t ges = zero__ck_dtype_size(gdt);
    if (!ges || !zero__ck_dtype_size(mdt)) return conv_refuse("%s: unsupported dtypes", src);

    /* the target layouts, one per pipeline stage: the same alignment, M
     * (data-parallel) ranks, that stage's parameters in manifest order, and
     * the ownership the engine would build from the same config */
    zero__layout *lay = calloc((size_t)P, sizeof *lay);
    zero__layout_input *in = calloc(m->nparams ? m->nparams : 1, sizeof *in);
    int bad = !lay || !in;
    for (int S = 0; !bad && S < P; S++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < m->nparams; i++)
            if (m->params[i].pp_stage == S) in[n++] = (zero__layout_input){m->params[i].numel, m->params[i].group};
        bad = zero__layout_build_run(&lay[S], in, n, (uint32_t)ranks, 0, zero__ck_layout_of(m, S)->align, round_robin,
                                     bucket) != 0;
    }
    free(in);
    if (bad) {
        for (int S = 0; lay && S < P; S++) zero__layout_free(&lay[S]);
        free(lay);
        return conv_refuse("%s: cannot build the layout of %lld ranks", src, ranks);
    }

    /* staging: DST/<tag>.partial, published as DST/<tag>, then latest */
    char staging[4400], final[4400];
    snprintf(staging, sizeof staging, "%s/%s.partial", dst, m->tag);
    snprintf(final, sizeof final, "%s/%s", dst, m->tag);
    struct stat fsb;
    if (lstat(final, &fsb) == 0) { /* a link there too: nothing is written through it */
        for (int S = 0; S < P; S++) zero__layout_free(&lay[S]);
        free(lay);
        return conv_refuse("%s already exists; convert into an empty or new root", final);
    }
    int kept = 0;
    if (zero__ck_mkdirs(dst) != 0 || (zero__ck_remove_dir_kept(staging, &kept) != 0 && errno != ENOENT) ||
        zero__ck_mkdirs(staging) != 0) {
        if (kept) /* a leftover staging dir holding files that are not a checkpoint's: never deleted */
            fprintf(stderr,
                    "zero-ckpt convert: %s, a staging directory an earlier run left, holds %d file(s) that are not "
                    "a checkpoint's; they were left as they are: move them, or convert into another root\n",
                    staging, kept);
        else
            fprintf(stderr, "zero-ckpt convert: cannot create %s: %s\n", staging, strerror(errno));
        for (int S = 0; S < P; S++) zero__layout_free(&lay[S]);
        free(lay);
        return 2;
    }
    conv_ctx x = {m, zero__ck_reader_open(src, m), staging, NULL, 0, P, json_array(),
                  malloc((size_t)CONV_PIECE * 4), 0};
    uint32_t maxg = 1;
    for (int S = 0; S < P; S++)
        if (lay[S].view.ngroups > maxg) maxg = lay[S].view.ngroups;
    zero_owned_range *own = calloc(maxg, sizeof *own);
    int rc = x.r && x.buf && own && x.files ? 0 : 2;
    if (rc) snprintf(err, sizeof err, "zero-ckpt: out of memory");
    const uint32_t nst = m->nstate;
    char blob[200];
    for (int S = 0; rc == 0 && S < P; S++)
    for (long long r = 0; rc == 0 && r < ranks; r++) {
        const zero_layout *V = &lay[S].view;
        x.pp = S;
        x.new_off = lay[S].param_offset;
        /* the core's step state, as every rank saves it */
        zero__core_blob c;
        zero__ck_core_fill(&c, m, (uint32_t)ranks);
        char file[300];
        conv_file_name(&x, "core", r, file, sizeof file);
        uint32_t *crc = NULL, nc = 0;
        if (zero__ck_write_blob(staging, file, &c, sizeof c, m->chunk_bytes, 0, &crc, &nc, err, sizeof err)) {
            rc = 2;
            break;
        }
        rc = conv_record(&x, file, "core", (int)r, sizeof c, crc, nc, ZERO__CK_OPAQUE, mdt, NULL, 0) ? 2 : 0;
        free(crc);
        uint32_t nown;
        if (t->replicated) {
            own[0] = (zero_owned_range){0, V->flat_numel, 0};
            nown = V->flat_numel ? 1 : 0;
        } else {
            nown = V->flat_numel ? zero__layout_owned(V, (uint32_t)r, 0, V->flat_numel, own, V->ngroups) : 0;
        }
        snprintf(blob, sizeof blob, "%s.params", t->name);
        if (!rc) rc = conv_blob(&x, blob, (int)r, ZERO__CK_PARAMS, mdt, own, nown, 0, err, sizeof err);
        snprintf(blob, sizeof blob, "%s.master", t->name);
        if (!rc && mdt != ZERO_DTYPE_F32)
            rc = conv_blob(&x, blob, (int)r, ZERO__CK_MASTER, ZERO_DTYPE_F32, own, nown, 0, err, sizeof err);
        for (uint32_t k = 0; !rc && k < nst && k < 4; k++) {
            snprintf(blob, sizeof blob, "%s.state%u", t->name, k);
            rc = conv_blob(&x, blob, (int)r, ZERO__CK_STATE0 + (int32_t)k, ZERO_DTYPE_F32, own, nown, 0, err,
                           sizeof err);
        }
        snprintf(blob, sizeof blob, "%s.%s", t->name, t->grads);
        if (!rc)
            rc = conv_blob(&x, blob, (int)r, ZERO__CK_OPAQUE, mdt, NULL, 0,
                           (t->grads_part ? V->part_numel : V->flat_numel) * ges, err, sizeof err);
    }
    json_t *client = NULL;
    if (!rc && m->client) rc = conv_client(&x, &client, err, sizeof err);
    uint64_t read_bytes = zero__ck_reader_bytes(x.r);
    zero__ck_reader_close(x.r);
    free(x.buf);
    free(own);
    /* the manifest: the saver's (state, config, scheduler) with this
     * plugin, world size, layout, parameter offsets and files */
    if (!rc) {
        json_t *doc = json_deep_copy(m->root);
        json_object_set_new(doc, "plugin", json_string(t->name));
        json_object_set_new(doc, "stage", json_integer(t->stage));
        json_object_set_new(doc, "world_size", json_integer(ranks));
        json_object_set_new(doc, "reshardable", json_integer(1));
        json_object_set_new(doc, "library_version", json_string(zero_version_string()));
        json_object_set_new(doc, "abi_version", json_integer(zero_abi_version()));
        json_t *from = json_object();
        json_object_set_new(from, "dir", json_string(src));
        json_object_set_new(from, "plugin", json_string(m->plugin));
        json_object_set_new(from, "world_size", json_integer(m->world));
        json_object_set_new(doc, "converted_from", from);
        json_t *los = json_array(), *ps = json_object_get(doc, "params");
        for (int S = 0; S < P; S++) {
            const zero_layout *V = &lay[S].view;
            json_t *lo = json_object(), *gs = json_array();
            json_object_set_new(lo, "pp_stage", json_integer(S));
            json_object_set_new(lo, "align", json_integer((json_int_t)V->align));
            json_object_set_new(lo, "flat_numel", json_integer((json_int_t)V->flat_numel));
            json_object_set_new(lo, "part_numel", json_integer((json_int_t)V->part_numel));
            for (uint32_t g = 0; g < V->ngroups; g++) {
                json_t *q = json_object();
                json_object_set_new(q, "group_id", json_integer(V->groups[g].group_id));
                json_object_set_new(q, "flat_begin", json_integer((json_int_t)V->groups[g].flat_begin));
                json_object_set_new(q, "numel", json_integer((json_int_t)V->groups[g].numel));
                json_object_set_new(q, "part_numel", json_integer((json_int_t)V->groups[g].part_numel));
                json_array_append_new(gs, q);
            }
            json_object_set_new(lo, "groups", gs);
            json_array_append_new(los, lo);
            /* the manifest's params and m->params are in the same order */
            uint32_t j = 0;
            for (uint32_t i = 0; i < m->nparams && i < json_array_size(ps); i++)
                if (m->params[i].pp_stage == S)
                    json_object_set_new(json_array_get(ps, i), "flat_offset",
                                        json_integer((json_int_t)lay[S].param_offset[j++]));
        }
        json_object_set_new(doc, "layouts", los);
        json_object_set(doc, "files", x.files);
        if (client) json_object_set(doc, "client_state", client); /* the record of the copy written above */
        else json_object_del(doc, "client_state");
        json_object_set_new(doc, "version", json_integer(ZERO__CK_VERSION)); /* its core blobs are version 2 */
        if (zero__ck_manifest_seal(doc) != 0) rc = 2;
        char *text = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        json_decref(doc);
        /* what we wrote must parse as what zero_load reads */
        zero__ck_manifest *check = text ? zero__ck_manifest_parse(text, strlen(text), err, sizeof err) : NULL;
        if (!check || zero__ck_manifest_validate(check, err, sizeof err)) rc = 2; /* and validates as zero_load does */
        zero__ck_manifest_free(check);
        if (!rc && (zero__ck_fsync_dir(staging) != 0 ||
                    zero__ck_write_atomic(staging, "manifest.json", text, strlen(text), err, sizeof err)))
            rc = 2;
        free(text);
        if (!rc && rename(staging, final) != 0) {
            snprintf(err, sizeof err, "cannot move %s to %s: %s", staging, final, strerror(errno));
            rc = 2;
        }
        if (!rc) {
            char line[300];
            int len = snprintf(line, sizeof line, "%s\n", m->tag);
            if (zero__ck_fsync_dir(dst) != 0 || zero__ck_write_atomic(dst, "latest", line, (size_t)len, err, sizeof err))
                rc = 2;
        }
    }
    json_decref(x.files);
    json_decref(client);
    if (rc) {
        zero__ck_remove_dir(staging);
        fprintf(stderr, "zero-ckpt convert: %s\n", err);
        for (int S = 0; S < P; S++) zero__layout_free(&lay[S]);
        free(lay);
        return rc;
    }
    printf("%s: %s x%d -> %s x%lld (step %llu), %llu bytes read from %s\n", final, m->plugin, m->world, t->name,
           ranks, (unsigned long long)m->st.global_step, (unsigned long long)read_bytes, src);
    for (int S = 0; S < P; S++) zero__layout_free(&lay[S]);
    free(lay);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    char dir[4096];
    long long ranks = -1;
    const char *plugin = NULL;
    if (!strcmp(argv[1], "convert")) { /* options first: a bad target is refused before reading anything */
        if (argc < 6) return usage();
        for (int i = 4; i < argc; i++) {
            if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
                char *end = NULL;
                ranks = strtoll(argv[++i], &end, 10);
                if (!*argv[i] || *end) return conv_refuse("--ranks %s: not a number", argv[i]);
            } else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) {
                plugin = argv[++i];
            } else {
                return usage();
            }
        }
        if (ranks == -1) return usage();
    }
    zero__ck_manifest *m = open_ckpt(argv[2], dir, sizeof dir);
    if (!m) return 1;
    int rc;
    /* consolidate and convert read parameters at the manifest's offsets:
     * only from a checkpoint that is valid as a whole (what verify checks) */
    char verr[2048];
    if ((!strcmp(argv[1], "consolidate") || !strcmp(argv[1], "convert")) &&
        zero__ck_manifest_validate(m, verr, sizeof verr) != 0) {
        fprintf(stderr, "zero-ckpt %s: %s: %s\n", argv[1], dir, verr);
        zero__ck_manifest_free(m);
        return 1;
    }
    if (!strcmp(argv[1], "info")) rc = cmd_info(m, dir, argc > 3 && !strcmp(argv[3], "--json"));
    else if (!strcmp(argv[1], "verify")) rc = cmd_verify(m, dir);
    else if (!strcmp(argv[1], "consolidate") && argc == 4) rc = cmd_consolidate(m, dir, argv[2], argv[3]);
    else if (!strcmp(argv[1], "convert")) rc = cmd_convert(m, dir, argv[3], ranks, plugin);
    else if (!strcmp(argv[1], "client-state") && argc == 4) rc = cmd_client_state(m, dir, argv[2], argv[3]);
    else rc = usage();
    zero__ck_manifest_free(m);
    return rc;
}
