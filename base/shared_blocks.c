/* Host blocks other processes of this node can map (see shared_blocks.h).
 *
 * The registry is a small array (a block is >= 1 MiB, so a process holds
 * tens to hundreds of them) searched linearly: a lookup happens once per
 * collective, not per element. */
#include "shared_blocks.h"
#include "env.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct block {
    char *base;
    size_t len;
    int fd;
    uint64_t ino;
} block;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static block *reg;
static size_t reg_n, reg_cap;
static atomic_int enabled;

/* Descriptors the registry may hold: a quarter of the soft limit, at most
 * 1024, so that the host keeps the rest. */
static size_t fd_budget(void) {
    struct rlimit rl;
    size_t lim = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < lim)
        lim = (size_t)(rl.rlim_cur / 4);
    return lim;
}

void zero__shared_blocks_enable(void) {
    int shm = 1;
    if (zero__env_flag("ZERO_COMM_SHM", &shm) == 1 && !shm) return;
    atomic_store(&enabled, 1);
}

int zero__shared_blocks_enabled(void) { return atomic_load(&enabled); }

void *zero__shared_block_alloc(size_t len) {
    if (!atomic_load(&enabled) || len == 0) return NULL;
    pthread_mutex_lock(&reg_lock);
    int room = reg_n < fd_budget();
    if (room && reg_n == reg_cap) {
        size_t cap = reg_cap ? 2 * reg_cap : 32;
        block *r = realloc(reg, cap * sizeof *r);
        if (r) {
            reg = r;
            reg_cap = cap;
        } else {
            room = 0;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (!room) return NULL;
    /* MFD_CLOEXEC: an exec'd child must not inherit our buffers */
    int fd = memfd_create("libzero-block", MFD_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0 && fstat(fd, &st) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    block b = {p, len, fd, (uint64_t)st.st_ino};
    pthread_mutex_lock(&reg_lock);
    if (reg_n < reg_cap) {
        reg[reg_n++] = b;
        p = b.base;
    } else { /* another thread took the last entry meanwhile */
        munmap(p, len);
        close(fd);
        p = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
    return p;
}

int zero__shared_block_free(void *p) {
    if (!p) return 0;
    block b = {0};
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n; ++i)
        if (reg[i].base == (char *)p) {
            b = reg[i];
            reg[i] = reg[--reg_n];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    if (!found) return 0;
    munmap(b.base, b.len);
    close(b.fd);
    return 1;
}

int zero__shared_block_find(const void *p, size_t bytes, zero__shared_ref *out) {
    const char *c = p;
    int found = 0;
    if (!c) return 0;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n; ++i) {
        const block *b = &reg[i];
        if (c >= b->base && c <= b->base + b->len && bytes <= (size_t)(b->base + b->len - c)) {
            out->pid = (int32_t)getpid();
            out->fd = b->fd;
            out->ino = b->ino;
            out->offset = (uint64_t)(c - b->base);
            out->length = b->len;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return found;
}
