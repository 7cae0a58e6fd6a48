/* See ckpt_io.h. */
#include "ckpt_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "trace.h"

/* ---------------------------------------------------------------- faults */
static int fault_rank_matches(const char *at, int rank) { return !at || atoi(at + 1) == rank; }

/* ENOSPC for the N-th blob of this process?  Counted only while the hook is set. */
static int fault_enospc(int rank) {
    static int count;
    const char *f = getenv("ZERO_CKPT_FAULT");
    if (!f || strncmp(f, "enospc:", 7)) return 0;
    if (!fault_rank_matches(strchr(f, '@'), rank)) return 0;
    return ++count == atoi(f + 7);
}

/* ENOSPC for the small file `name` (manifest.json, latest)?  Written by
 * global rank 0 (or a tool) only, so "@R" matches rank 0. */
static int fault_enospc_file(const char *name) {
    const char *f = getenv("ZERO_CKPT_FAULT");
    if (!f || strncmp(f, "enospc:", 7)) return 0;
    const char *at = strchr(f, '@');
    size_t n = at ? (size_t)(at - (f + 7)) : strlen(f + 7);
    return fault_rank_matches(at, 0) && n == strlen(name) && !strncmp(f + 7, name, n);
}

void zero__ck_fault_point(const char *point, int rank) {
    const char *f = getenv("ZERO_CKPT_FAULT");
    if (!f || strncmp(f, "pause:", 6)) return;
    const char *at = strchr(f, '@');
    size_t n = at ? (size_t)(at - (f + 6)) : strlen(f + 6);
    if (n != strlen(point) || strncmp(f + 6, point, n) || !fault_rank_matches(at, rank)) return;
    const char *marker = getenv("ZERO_CKPT_FAULT_MARKER");
    if (marker) {
        FILE *m = fopen(marker, "w");
        if (m) {
            fprintf(m, "%ld\n", (long)getpid());
            fclose(m);
        }
    }
    for (int i = 0; i < 1200; i++) { /* the test kills us here; carry on if it does not */
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}

/* ---------------------------------------------------------------- write */
int zero__ck_open_new(const char *path) {
    /* whatever holds the name (a leftover of a killed process with our pid,
     * or a planted link) goes as a name: unlink never follows a link */
    if (unlink(path) != 0 && errno != ENOENT) return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
}

static int put(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int zero__ck_write_blob(const char *dir, const char *file, const void *buf, uint64_t bytes, uint64_t chunk_bytes,
                        int rank, uint32_t **crc, uint32_t *nchunks, char *err, size_t errn) {
    ZERO_TRACE_SCOPE("ckpt.write", "ckpt", "bytes", bytes, NULL, 0);
    char path[4352], tmp[4400];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
        snprintf(err, errn, "checkpoint path too long: %s/%s", dir, file);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const uint64_t nc = (bytes + chunk_bytes - 1) / chunk_bytes;
    uint32_t *c = calloc(nc ? nc : 1, sizeof *c);
    if (!c) {
        snprintf(err, errn, "checkpoint %s: out of memory", path);
        return -1;
    }
    for (uint64_t k = 0; k < nc; k++) {
        uint64_t lo = k * chunk_bytes, n = bytes - lo < chunk_bytes ? bytes - lo : chunk_bytes;
        c[k] = zero__crc32c(0, (const char *)buf + lo, (size_t)n);
    }
    int fd = zero__ck_open_new(tmp);
    if (fd < 0) {
        snprintf(err, errn, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        free(c);
        return -1;
    }
    unsigned char hdr[ZERO__CK_HEADER];
    memcpy(hdr, ZERO__CK_MAGIC, 8);
    for (int i = 0; i < 8; i++) hdr[8 + i] = (unsigned char)(bytes >> (8 * i));
    int ok = put(fd, hdr, sizeof hdr) == 0;
    if (ok && fault_enospc(rank)) {
        (void)put(fd, buf, (size_t)(bytes / 2));
        errno = ENOSPC;
        ok = 0;
    }
    ok = ok && put(fd, buf, (size_t)bytes) == 0;
    int e = ok ? 0 : errno;
    if (ok && fsync(fd) != 0) ok = 0, e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(tmp);
        free(c);
        snprintf(err, errn, "checkpoint: writing %s failed: %s", path, strerror(e));
        return -1;
    }
    *crc = c;
    *nchunks = (uint32_t)nc;
    return 0;
}

/* A blob written piece by piece (tools/zero-ckpt convert): the same file
 * format, durability and chunk checksums as zero__ck_write_blob, with only
 * the caller's piece in memory. */
struct zero__ck_blob_writer {
    char path[4352], tmp[4400];
    int fd;
    uint64_t bytes, done, chunk_bytes;
    uint32_t *crc, nchunks;
    int fault; /* ZERO_CKPT_FAULT=enospc: this blob fails after half its payload */
};

zero__ck_blob_writer *zero__ck_blob_begin(const char *dir, const char *file, uint64_t bytes, uint64_t chunk_bytes,
                                          char *err, size_t errn) {
    zero__ck_blob_writer *w = calloc(1, sizeof *w);
    if (!w || !chunk_bytes) {
        free(w);
        snprintf(err, errn, "checkpoint %s/%s: out of memory", dir, file);
        return NULL;
    }
    if (snprintf(w->path, sizeof w->path, "%s/%s", dir, file) >= (int)sizeof w->path) {
        snprintf(err, errn, "checkpoint path too long: %s/%s", dir, file);
        free(w);
        return NULL;
    }
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", w->path, (long)getpid());
    w->bytes = bytes;
    w->chunk_bytes = chunk_bytes;
    w->fault = fault_enospc(0); /* the tools write as one process */
    w->nchunks = (uint32_t)((bytes + chunk_bytes - 1) / chunk_bytes);
    w->crc = calloc(w->nchunks ? w->nchunks : 1, sizeof *w->crc);
    w->fd = w->crc ? zero__ck_open_new(w->tmp) : -1;
    unsigned char hdr[ZERO__CK_HEADER];
    memcpy(hdr, ZERO__CK_MAGIC, 8);
    for (int i = 0; i < 8; i++) hdr[8 + i] = (unsigned char)(bytes >> (8 * i));
    if (w->fd < 0 || put(w->fd, hdr, sizeof hdr) != 0) {
        snprintf(err, errn, "checkpoint: cannot create %s: %s", w->tmp, w->crc ? strerror(errno) : "out of memory");
        if (w->fd >= 0) close(w->fd), unlink(w->tmp);
        free(w->crc);
        free(w);
        return NULL;
    }
    return w;
}

int zero__ck_blob_put(zero__ck_blob_writer *w, const void *buf, uint64_t n, char *err, size_t errn) {
    ZERO_TRACE_SCOPE("ckpt.write", "ckpt", "bytes", n, NULL, 0);
    if (n > w->bytes - w->done) {
        snprintf(err, errn, "checkpoint %s: %llu bytes more than the %llu declared", w->path,
                 (unsigned long long)(w->done + n - w->bytes), (unsigned long long)w->bytes);
        return -1;
    }
    if (w->fault && w->done + n > w->bytes / 2) {
        snprintf(err, errn, "checkpoint: writing %s failed: %s", w->tmp, strerror(ENOSPC));
        return -1;
    }
    for (uint64_t o = 0; o < n;) { /* each chunk's CRC continued across pieces */
        uint64_t ck = (w->done + o) / w->chunk_bytes, room = (ck + 1) * w->chunk_bytes - (w->done + o);
        uint64_t k = n - o < room ? n - o : room;
        w->crc[ck] = zero__crc32c(w->crc[ck], (const char *)buf + o, (size_t)k);
        o += k;
    }
    if (put(w->fd, buf, (size_t)n) != 0) {
        snprintf(err, errn, "checkpoint: writing %s failed: %s", w->tmp, strerror(errno));
        return -1;
    }
    w->done += n;
    return 0;
}

void zero__ck_blob_abort(zero__ck_blob_writer *w) {
    if (!w) return;
    close(w->fd);
    unlink(w->tmp);
    free(w->crc);
    free(w);
}

int zero__ck_blob_end(zero__ck_blob_writer *w, uint32_t **crc, uint32_t *nchunks, char *err, size_t errn) {
    int e = 0;
    if (w->done != w->bytes) {
        snprintf(err, errn, "checkpoint %s: %llu of %llu bytes written", w->path, (unsigned long long)w->done,
                 (unsigned long long)w->bytes);
        zero__ck_blob_abort(w);
        return -1;
    }
    int ok = fsync(w->fd) == 0;
    if (!ok) e = errno;
    if (close(w->fd) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(w->tmp, w->path) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(w->tmp);
        snprintf(err, errn, "checkpoint: writing %s failed: %s", w->path, strerror(e));
        free(w->crc);
        free(w);
        return -1;
    }
    *crc = w->crc;
    *nchunks = w->nchunks;
    free(w);
    return 0;
}

/* ---------------------------------------------------------------- read */
struct zero__ck_reader {
    char dir[4096];
    const zero__ck_manifest *m;
    int *fd;              /* per manifest file: -2 unopened, -1 failed */
    unsigned char *chunk; /* cached verified chunk */
    const zero__ck_file *cf;
    uint64_t ck;
    uint64_t bytes_read;
};

zero__ck_reader *zero__ck_reader_open(const char *dir, const zero__ck_manifest *m) {
    zero__ck_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->m = m;
    const uint32_t n = zero__ck_nrecords(m); /* the client state: files[nfiles] */
    r->fd = malloc((n ? n : 1) * sizeof *r->fd);
    for (uint32_t i = 0; r->fd && i < n; i++) r->fd[i] = -2; /* before any close: none is open */
    r->chunk = malloc((size_t)m->chunk_bytes);
    if (!r->fd || !r->chunk) {
        zero__ck_reader_close(r);
        return NULL;
    }
    return r;
}

void zero__ck_reader_close(zero__ck_reader *r) {
    if (!r) return;
    for (uint32_t i = 0; r->fd && i < zero__ck_nrecords(r->m); i++)
        if (r->fd[i] >= 0) close(r->fd[i]);
    free(r->fd);
    free(r->chunk);
    free(r);
}

uint64_t zero__ck_reader_bytes(const zero__ck_reader *r) { return r ? r->bytes_read : 0; }
const zero__ck_manifest *zero__ck_reader_manifest(const zero__ck_reader *r) { return r->m; }

static int get(int fd, void *p, size_t n, uint64_t off) {
    char *c = p;
    while (n) {
        ssize_t g = pread(fd, c, n, (off_t)off);
        if (g < 0 && errno == EINTR) continue;
        if (g <= 0) return -1;
        c += g;
        n -= (size_t)g;
        off += (uint64_t)g;
    }
    return 0;
}

static int open_file(zero__ck_reader *r, const zero__ck_file *f, char *err, size_t errn) {
    const size_t i = (size_t)(f - r->m->files);
    if (r->fd[i] >= 0) return r->fd[i];
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", r->dir, f->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errn, "checkpoint: cannot open %s: %s (the manifest lists it)", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    unsigned char hdr[ZERO__CK_HEADER];
    uint64_t len = 0;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != ZERO__CK_HEADER + f->bytes) {
        snprintf(err, errn, "checkpoint: %s holds %lld bytes, the manifest says %llu (truncated or replaced)", path,
                 (long long)sb.st_size, (unsigned long long)(ZERO__CK_HEADER + f->bytes));
        close(fd);
        return -1;
    }
    if (get(fd, hdr, sizeof hdr, 0) != 0 || memcmp(hdr, ZERO__CK_MAGIC, 8) != 0) {
        snprintf(err, errn, "checkpoint: %s is not a libzero checkpoint blob (bad header)", path);
        close(fd);
        return -1;
    }
    for (int k = 0; k < 8; k++) len |= (uint64_t)hdr[8 + k] << (8 * k);
    if (len != f->bytes) {
        snprintf(err, errn, "checkpoint: %s says %llu payload bytes, the manifest %llu (foreign file)", path,
                 (unsigned long long)len, (unsigned long long)f->bytes);
        close(fd);
        return -1;
    }
    r->fd[i] = fd;
    return fd;
}

int zero__ck_read(zero__ck_reader *r, const zero__ck_file *f, uint64_t off, void *dst, uint64_t n, char *err,
                  size_t errn) {
    ZERO_TRACE_SCOPE("ckpt.read", "ckpt", "bytes", n, NULL, 0);
    if (off > f->bytes || n > f->bytes - off) {
        snprintf(err, errn, "checkpoint: %s: bytes [%llu, %llu) requested, it has %llu", f->file,
                 (unsigned long long)off, (unsigned long long)(off + n), (unsigned long long)f->bytes);
        return -1;
    }
    if (!n) return 0;
    int fd = open_file(r, f, err, errn);
    if (fd < 0) return -1;
    const uint64_t cb = r->m->chunk_bytes;
    char *out = dst;
    for (uint64_t k = off / cb; k * cb < off + n; k++) {
        const uint64_t lo = k * cb, len = f->bytes - lo < cb ? f->bytes - lo : cb;
        const uint64_t a = off > lo ? off - lo : 0, b = off + n < lo + len ? off + n - lo : len;
        const int whole = a == 0 && b == len;
        if (!whole && r->cf == f && r->ck == k) { /* cached and verified */
            memcpy(out, r->chunk + a, (size_t)(b - a));
            out += b - a;
            continue;
        }
        unsigned char *buf = whole ? (unsigned char *)out : r->chunk;
        if (!whole) r->cf = NULL;
        if (get(fd, buf, (size_t)len, ZERO__CK_HEADER + lo) != 0) {
            snprintf(err, errn, "checkpoint: %s/%s: read failed at byte %llu: %s", r->dir, f->file,
                     (unsigned long long)lo, strerror(errno));
            return -1;
        }
        r->bytes_read += len;
        uint32_t c = zero__crc32c(0, buf, (size_t)len);
        if (c != f->crc[k]) {
            snprintf(err, errn,
                     "checkpoint: %s/%s is corrupted: bytes [%llu, %llu) have CRC-32C %08x, the manifest says %08x",
                     r->dir, f->file, (unsigned long long)lo, (unsigned long long)(lo + len), c, f->crc[k]);
            return -1;
        }
        if (!whole) {
            r->cf = f;
            r->ck = k;
            memcpy(out, r->chunk + a, (size_t)(b - a));
        }
        out += b - a;
    }
    return 0;
}

/* ---------------------------------------------------------------- small files */
int zero__ck_slurp(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    int bad = !buf || ferror(f) || n > max;
    fclose(f);
    if (bad) {
        free(buf);
        errno = EFBIG;
        return -1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int zero__ck_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int zero__ck_write_atomic(const char *dir, const char *name, const char *text, size_t len, char *err, size_t errn) {
    ZERO_TRACE_SCOPE("ckpt.write", "ckpt", "bytes", len, NULL, 0);
    char path[4352], tmp[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = zero__ck_open_new(tmp);
    if (fd < 0) {
        snprintf(err, errn, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = put(fd, text, len) == 0, e = ok ? 0 : errno;
    if (ok && fault_enospc_file(name)) {
        (void)put(fd, text, len / 2);
        ok = 0, e = ENOSPC;
    }
    if (ok && fsync(fd) != 0) ok = 0, e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (ok && zero__ck_fsync_dir(dir) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(tmp);
        snprintf(err, errn, "checkpoint: writing %s failed: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

int zero__ck_mkdirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The directory is opened with O_NOFOLLOW and emptied through its fd
 * (unlinkat), so neither `dir` nor anything in it is followed: a link
 * inside goes as a link, and a link put in place of `dir` after the lstat
 * fails the open (ELOOP) instead of emptying its target. */
/* "<digits>" from s up to end, at least one digit */
static int digits_to(const char *s, const char *end) {
    if (s >= end) return 0;
    for (; s < end; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

int zero__ck_is_own_name(const char *name) {
    if (!strcmp(name, "manifest.json")) return 1;
    const size_t n = strlen(name);
    const char *tmp = strstr(name, ".tmp."); /* zero__ck_write_atomic's temp names */
    if (tmp && tmp > name && digits_to(tmp + 5, name + n)) return 1;
    if (n < 10 || strcmp(name + n - 4, ".bin")) return 0; /* "x.rank0.bin" */
    const char *end = name + n - 4, *r = end;
    while (r > name && r[-1] >= '0' && r[-1] <= '9') r--;
    return r < end && r - name >= 6 && !strncmp(r - 5, ".rank", 5) && r - 5 > name;
}

int zero__ck_remove_dir(const char *dir) { return zero__ck_remove_dir_kept(dir, NULL); }

int zero__ck_remove_dir_kept(const char *dir, int *kept_out) {
    if (kept_out) *kept_out = 0;
    struct stat sb;
    if (lstat(dir, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(dir); /* a link or file at the name: the name goes, never a target */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int kept = 0, e = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat eb;
        if (fstatat(fd, de->d_name, &eb, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone meanwhile */
        /* a checkpoint has no subdirectories, and what libzero did not name
         * is the host's: left alone */
        if (S_ISDIR(eb.st_mode) || !zero__ck_is_own_name(de->d_name)) {
            kept++, e = ENOTEMPTY;
            continue;
        }
        if (unlinkat(fd, de->d_name, 0) != 0 && errno != ENOENT) kept++, e = errno;
    }
    closedir(d);
    if (kept_out) *kept_out = kept;
    if (kept) return errno = e, -1;
    return rmdir(dir);
}

int zero__ck_is_link(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

/* Nearest existing ancestor of path (path itself if it exists), resolved,
 * into out; shown: out followed by the part of path that does not exist. */
static int resolve_existing(const char *path, char *out, size_t n, char *shown, size_t sn) {
    char p[4096], r[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    const char *rest = ""; /* of path, beyond p */
    struct stat sb;
    while (stat(p, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) return -1;
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == 0) { /* "a/b/" */
            *slash = 0;
            slash = strrchr(p, '/');
        }
        if (!slash) {
            rest = path;
            snprintf(p, sizeof p, ".");
            break;
        }
        if (slash == p) p[1] = 0; /* "/x" -> "/" */
        else *slash = 0;
        rest = path + strlen(p); /* p is a prefix of path */
    }
    if (!realpath(p, r)) return -1;
    snprintf(out, n, "%s", r);
    while (*rest == '/') rest++;
    snprintf(shown, sn, "%s%s%s", r, *rest && strcmp(r, "/") ? "/" : "", rest);
    return 0;
}

int zero__ck_path_within(const char *path, const char *dir, char *shown, size_t n) {
    struct stat d, a;
    char r[PATH_MAX];
    if (stat(dir, &d) != 0 || resolve_existing(path, r, sizeof r, shown, n) != 0) return -1;
    for (;;) { /* r and each of its ancestors against dir, by device and inode (bind mounts too) */
        if (stat(r, &a) == 0 && a.st_dev == d.st_dev && a.st_ino == d.st_ino) return 1;
        char *slash = strrchr(r, '/');
        if (!slash || !strcmp(r, "/")) return 0;
        if (slash == r) r[1] = 0;
        else *slash = 0;
    }
}
