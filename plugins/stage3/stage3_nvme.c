/* The NVMe tile file of stage3 with offload_optimizer.device "nvme"
 * (ZeRO-Infinity): the fp32 master and optimizer states of this rank's
 * partition, tile by tile (tile k's array a at offset (k * narr + a) *
 * tile_bytes), in one unlinked temporary file under nvme_path (nothing is
 * left behind, even after a crash).
 *
 * I/O: POSIX AIO (glibc's aio_read/aio_write: every array of a tile in
 * flight at once; no extra Debian package), with O_DIRECT and
 * ZERO__S3_NVME_ALIGN-aligned buffers, offsets and sizes so that the tiles
 * bypass the page cache as DeepSpeed's libaio swapper does.  File systems
 * that refuse O_DIRECT (tmpfs, some overlay mounts) get buffered I/O and one
 * warning.  liburing would save the AIO helper threads; it is not a
 * dependency of libzero yet. */

#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stage3_tiers.h"

/* glibc's POSIX AIO runs the requests of one file descriptor one after the
 * other (one helper thread per descriptor), so every array of a tile, read
 * or write, gets a descriptor of its own (dup: the same open file, O_DIRECT
 * included) and the requests of a tile and of its neighbours really are in
 * flight together. */
#define NVME_MAX_FDS 16
struct zero__s3_nvme {
    int fd;
    int fds[NVME_MAX_FDS];
    int nfds;
    int direct;
    uint32_t narr;
    size_t tile_bytes;
    char err[200];
};

zero__s3_nvme *zero__s3_nvme_open(zero__s3 *s, const char *key, const char *dir, uint64_t ntiles, uint32_t narr,
                                  size_t tile_bytes) {
    const zero_services *svc = s->svc;
    zero__s3_nvme *f = calloc(1, sizeof *f);
    if (!f) {
        svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: out of memory");
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libzero-stage3-rank%d-XXXXXX", dir, s->rank);
    int fd = mkstemp(path);
    if (fd < 0) {
        svc->error(s->c, ZERO_ERR_IO, "stage3: %s nvme_path '%s': cannot create the NVMe file there: %s", key, dir,
                   strerror(errno));
        free(f);
        return NULL;
    }
    /* O_DIRECT on the open file; EINVAL where the file system refuses it */
    int flags = fcntl(fd, F_GETFL);
    f->direct = flags >= 0 && fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
    if (f->direct) { /* some file systems accept the flag and refuse the I/O: probe one aligned block */
        void *probe = NULL;
        if (posix_memalign(&probe, ZERO__S3_NVME_ALIGN, ZERO__S3_NVME_ALIGN) == 0) {
            memset(probe, 0, ZERO__S3_NVME_ALIGN);
            if (pwrite(fd, probe, ZERO__S3_NVME_ALIGN, 0) != (ssize_t)ZERO__S3_NVME_ALIGN) {
                f->direct = 0;
                fcntl(fd, F_SETFL, flags);
            }
            free(probe);
        }
    }
    if (!f->direct)
        svc->log(s->c, ZERO_LOG_WARN,
                 "stage3: %s nvme_path '%s' refuses O_DIRECT (%s; tmpfs does): its NVMe file goes through the page "
                 "cache",
                 key, dir, strerror(errno));
    unlink(path); /* the file lives as long as the descriptor */
    const off_t size = (off_t)(ntiles * narr * tile_bytes);
    if (ftruncate(fd, size) != 0) {
        svc->error(s->c, ZERO_ERR_IO, "stage3: %s nvme_path '%s': cannot size the NVMe file to %lld bytes: %s",
                   key, dir, (long long)size, strerror(errno));
        close(fd);
        free(f);
        return NULL;
    }
    f->fd = fd;
    f->narr = narr;
    f->tile_bytes = tile_bytes;
    f->fds[0] = fd;
    f->nfds = 1;
    while (f->nfds < (int)(2 * narr) && f->nfds < NVME_MAX_FDS) { /* (a failed dup only costs parallelism) */
        int d = dup(fd);
        if (d < 0) break;
        f->fds[f->nfds++] = d;
    }
    return f;
}

int zero__s3_nvme_io_start(zero__s3_nvme *f, uint64_t k, void *const *bufs, int write, zero__s3_nvme_batch *b) {
    struct aiocb *cb = b->cb;
    uint32_t n = f->narr < 8 ? f->narr : 8;
    memset(b, 0, sizeof *b);
    b->k = k;
    b->write = write;
    for (uint32_t a = 0; a < n; a++) {
        cb[a].aio_fildes = f->fds[((write ? f->narr : 0) + a) % (uint32_t)f->nfds];
        cb[a].aio_offset = (off_t)((k * f->narr + a) * f->tile_bytes);
        cb[a].aio_buf = bufs[a];
        cb[a].aio_nbytes = f->tile_bytes;
        int r = write ? aio_write(&cb[a]) : aio_read(&cb[a]);
        if (r != 0) {
            snprintf(f->err, sizeof f->err, "%s of tile %llu: %s", write ? "aio_write" : "aio_read",
                     (unsigned long long)k, strerror(errno));
            b->n = a;
            zero__s3_nvme_io_wait(f, b); /* let the issued ones finish: their buffers are ours */
            b->n = 0;
            return -1;
        }
        b->n = a + 1;
    }
    return 0;
}

int zero__s3_nvme_io_wait(zero__s3_nvme *f, zero__s3_nvme_batch *b) {
    const struct aiocb *list[8];
    for (uint32_t a = 0; a < b->n; a++) list[a] = &b->cb[a];
    int rc = 0;
    for (uint32_t a = 0; a < b->n; a++) {
        int e;
        while ((e = aio_error(&b->cb[a])) == EINPROGRESS) aio_suspend(list, (int)b->n, NULL);
        ssize_t got = aio_return(&b->cb[a]);
        if (e != 0 || got != (ssize_t)f->tile_bytes) {
            if (!rc)
                snprintf(f->err, sizeof f->err, "%s of tile %llu, array %u: %s", b->write ? "write" : "read",
                         (unsigned long long)b->k, a, e ? strerror(e) : "short transfer");
            rc = -1;
        }
    }
    b->n = 0;
    return rc;
}

int zero__s3_nvme_io(zero__s3_nvme *f, uint64_t k, void *const *bufs, int write) {
    zero__s3_nvme_batch b;
    if (zero__s3_nvme_io_start(f, k, bufs, write, &b) != 0) return -1;
    return zero__s3_nvme_io_wait(f, &b);
}

const char *zero__s3_nvme_error(const zero__s3_nvme *f) { return f ? f->err : ""; }
int zero__s3_nvme_direct(const zero__s3_nvme *f) { return f && f->direct; }

void zero__s3_nvme_close(zero__s3_nvme *f) {
    if (!f) return;
    for (int i = 0; i < f->nfds; i++) close(f->fds[i]);
    free(f);
}

/* ---- byte ranges (offload_param.device "nvme": the 16-bit shard file) ------
 * The shard is one contiguous run of bytes in the file (element e at e *
 * esize), so a parameter's piece or a step tile is any byte range.  With
 * O_DIRECT only whole aligned blocks move: a range is read as the aligned
 * blocks covering it (the caller's data then starts `off % ALIGN` into the
 * buffer), and written the same way after the partial blocks at its two ends
 * were read back in (read-modify-write; ranges are written one at a time, so
 * the neighbours' bytes are current). */

static uint64_t down(uint64_t x) { return x / ZERO__S3_NVME_ALIGN * ZERO__S3_NVME_ALIGN; }
static uint64_t up(uint64_t x) { return (x + ZERO__S3_NVME_ALIGN - 1) / ZERO__S3_NVME_ALIGN * ZERO__S3_NVME_ALIGN; }

static int full_pio(zero__s3_nvme *f, void *buf, size_t len, uint64_t off, int write) {
    size_t done = 0;
    while (done < len) {
        ssize_t r = write ? pwrite(f->fd, (char *)buf + done, len - done, (off_t)(off + done))
                          : pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(f->err, sizeof f->err, "%s of %zu bytes at offset %llu: %s", write ? "write" : "read", len - done,
                     (unsigned long long)(off + done), r < 0 ? strerror(errno) : "short read (end of file)");
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

int zero__s3_nvme_read_start(zero__s3_nvme *f, uint64_t off, size_t len, void *buf, zero__s3_nvme_rd *rd) {
    memset(&rd->cb, 0, sizeof rd->cb);
    rd->cb.aio_fildes = f->fd;
    rd->cb.aio_offset = (off_t)down(off);
    rd->cb.aio_buf = buf;
    rd->cb.aio_nbytes = (size_t)(up(off + len) - down(off));
    rd->active = aio_read(&rd->cb) == 0;
    return rd->active ? 0 : -1; /* the caller falls back to zero__s3_nvme_read_range */
}

int zero__s3_nvme_read_finish(zero__s3_nvme *f, zero__s3_nvme_rd *rd) {
    if (!rd->active) return 0;
    const struct aiocb *list[1] = {&rd->cb};
    int e;
    while ((e = aio_error(&rd->cb)) == EINPROGRESS) aio_suspend(list, 1, NULL);
    ssize_t got = aio_return(&rd->cb);
    rd->active = 0;
    if (e != 0 || got != (ssize_t)rd->cb.aio_nbytes) {
        snprintf(f->err, sizeof f->err, "read of %zu bytes at offset %llu: %s", rd->cb.aio_nbytes,
                 (unsigned long long)rd->cb.aio_offset, e ? strerror(e) : "short read (end of file)");
        return -1;
    }
    return 0;
}

int zero__s3_nvme_read_range(zero__s3_nvme *f, uint64_t off, size_t len, void *buf) {
    return full_pio(f, buf, (size_t)(up(off + len) - down(off)), down(off), 0);
}

int zero__s3_nvme_write_range(zero__s3_nvme *f, uint64_t off, size_t len, void *data) {
    const uint64_t a0 = down(off), a1 = up(off + len);
    char *b = (char *)data - (off - a0); /* the aligned block the data sits in */
    if (a0 == a1) return 0;
    if (off != a0 || off + len != a1) {
        /* the partial end blocks: the bytes around the range come from the file */
        char tmp[2 * ZERO__S3_NVME_ALIGN + ZERO__S3_NVME_ALIGN];
        char *blk = (char *)(((uintptr_t)tmp + ZERO__S3_NVME_ALIGN - 1) & ~(uintptr_t)(ZERO__S3_NVME_ALIGN - 1));
        if (off != a0) {
            if (full_pio(f, blk, ZERO__S3_NVME_ALIGN, a0, 0) != 0) return -1;
            memcpy(b, blk, (size_t)(off - a0));
        }
        const uint64_t last = a1 - ZERO__S3_NVME_ALIGN, end = off + len;
        if (end != a1) {
            if (full_pio(f, blk, ZERO__S3_NVME_ALIGN, last, 0) != 0) return -1;
            memcpy(b + (end - a0), blk + (end - last), (size_t)(a1 - end));
        }
    }
    return full_pio(f, b, (size_t)(a1 - a0), a0, 1);
}

size_t zero__s3_nvme_range_bytes(size_t len) { return (size_t)up(len) + 2 * ZERO__S3_NVME_ALIGN; }

int zero__s3_nvme_truncate(zero__s3_nvme *f, uint64_t bytes) { return ftruncate(f->fd, (off_t)bytes); }
