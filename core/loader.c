/* Plugin loader (core/loader.h): finds and opens the library; which table
 * revision it exports is plugin_abi.c's business.
 *
 * RTLD_NOW so that an unresolved symbol fails here, with dlerror's text,
 * instead of at the first call deep inside a training step; RTLD_LOCAL so
 * that two plugins (or a plugin and the host) never see each other's
 * symbols.  Every failure path dlclose()s, so a refused plugin leaves
 * nothing behind and the process can load another one. */
#include "loader.h"
#include "crc32c.h"
#include "log.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef ZERO_INSTALL_PLUGIN_DIR
#define ZERO_INSTALL_PLUGIN_DIR "/usr/local/lib/zero/plugins"
#endif
#ifndef ZERO_BUILD_PLUGIN_DIR
#define ZERO_BUILD_PLUGIN_DIR "plugins"
#endif



static void set_err(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int push_dir(char ***v, size_t *n, size_t *cap, const char *s, size_t len) {
    if (len == 0) return 0; /* "a::b" or a trailing ':' — an empty entry is not "." */
    for (size_t i = 0; i < *n; ++i) /* keep the first occurrence: it wins anyway */
        if (strlen((*v)[i]) == len && strncmp((*v)[i], s, len) == 0) return 0;
    if (*n + 2 > *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        char **nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
        *cap = nc;
    }
    char *d = dup_range(s, len);
    if (!d) return -1;
    (*v)[(*n)++] = d;
    (*v)[*n] = NULL;
    return 0;
}

/* "<dir of libzero.so>/zero/plugins" when this code runs from libzero.so
 * (not when it is linked statically into a program).  Returns 1 if set. */
static int self_plugin_dir(char *buf, size_t len) {
    Dl_info info;
    if (!dladdr((void *)&self_plugin_dir, &info) || !info.dli_fname) return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    const char *base = slash ? slash + 1 : info.dli_fname;
    if (!slash || strncmp(base, "libzero.so", 10) != 0) return 0;
    int n = snprintf(buf, len, "%.*s/zero/plugins", (int)(slash - info.dli_fname), info.dli_fname);
    return n > 0 && (size_t)n < len;
}

char **zero__plugin_dirs(void) {
    char **v = NULL;
    size_t n = 0, cap = 0;
    const char *env = getenv("ZERO_PLUGIN_PATH");
    if (env) {
        const char *p = env;
        for (;;) {
            const char *colon = strchr(p, ':');
            size_t len = colon ? (size_t)(colon - p) : strlen(p);
            if (push_dir(&v, &n, &cap, p, len) != 0) goto oom;
            if (!colon) break;
            p = colon + 1;
        }
    }
    /* The install dir relative to where libzero.so actually is, so that an
     * install moved to another prefix (or `cmake --install --prefix X`)
     * still finds its own plugins; then the prefix configured at build time. */
    char self_dir[4096];
    if (self_plugin_dir(self_dir, sizeof self_dir) &&
        push_dir(&v, &n, &cap, self_dir, strlen(self_dir)) != 0)
        goto oom;
    if (push_dir(&v, &n, &cap, ZERO_INSTALL_PLUGIN_DIR, strlen(ZERO_INSTALL_PLUGIN_DIR)) != 0) goto oom;
    if (push_dir(&v, &n, &cap, ZERO_BUILD_PLUGIN_DIR, strlen(ZERO_BUILD_PLUGIN_DIR)) != 0) goto oom;
    return v;
oom:
    zero__plugin_dirs_free(v);
    return NULL;
}

void zero__plugin_dirs_free(char **dirs) {
    if (!dirs) return;
    for (char **d = dirs; *d; ++d) free(*d);
    free(dirs);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char **zero__plugin_dir_names(const char *dir) {
    static const char prefix[] = "libzero-plugin-", suffix[] = ".so";
    const size_t lp = sizeof prefix - 1, ls = sizeof suffix - 1;
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return NULL;
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        size_t l = strlen(ent->d_name);
        if (l <= lp + ls || strncmp(ent->d_name, prefix, lp) != 0 || strcmp(ent->d_name + l - ls, suffix) != 0)
            continue;
        /* push_dir also drops duplicates; one directory has none, but it
         * keeps the array NULL-terminated after every entry. */
        if (push_dir(&v, &n, &cap, ent->d_name + lp, l - lp - ls) != 0) break;
    }
    closedir(d);
    if (!v) { /* an empty directory: an empty list, not "cannot open" */
        v = calloc(1, sizeof *v);
        if (!v) return NULL;
    }
    qsort(v, n, sizeof *v, cmp_name);
    return v;
}

/* Append the plugins on the search path, once each (sorted per directory,
 * in search order), so a misspelt name shows what exists.  At most
 * MAX_LISTED names: a crowded ZERO_PLUGIN_PATH directory must not push the
 * searched paths that follow out of the caller's buffer. */
#define MAX_LISTED 32
static void append_available(char *err, size_t len, char **dirs) {
    char **seen = NULL;
    size_t nseen = 0, capseen = 0;
    for (char **d = dirs; *d; ++d) {
        char **names = zero__plugin_dir_names(*d);
        if (!names) continue;
        for (char **nm = names; *nm; ++nm) {
            size_t before = nseen;
            if (push_dir(&seen, &nseen, &capseen, *nm, strlen(*nm)) != 0) break;
            if (nseen != before && nseen <= MAX_LISTED) zero__appendf(err, len, "%s%s", nseen == 1 ? "" : ", ", *nm);
        }
        zero__plugin_dirs_free(names);
    }
    if (nseen == 0) zero__appendf(err, len, "(none)");
    else if (nseen > MAX_LISTED) zero__appendf(err, len, " and %zu more", nseen - MAX_LISTED);
    zero__plugin_dirs_free(seen);
}

static int is_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n >= 3 && strcmp(s + n - 3, ".so") == 0);
}

/* What stat() says a path is, in words, or NULL for a regular file. */
static const char *not_regular(const struct stat *st) {
    if (S_ISREG(st->st_mode)) return NULL;
    if (S_ISFIFO(st->st_mode)) return "a FIFO";
    if (S_ISDIR(st->st_mode)) return "a directory";
    if (S_ISCHR(st->st_mode)) return "a character device";
    if (S_ISBLK(st->st_mode)) return "a block device";
    if (S_ISSOCK(st->st_mode)) return "a socket";
    return "not a regular file";
}

/* A plugin must be a regular file (symlinks to one are fine): dlopen of a
 * FIFO blocks until a writer appears -- forever, in zero_engine_create --
 * and a device or directory gives a confusing dlerror.  1: a regular file;
 * 0: nothing there (errno ENOENT/ENOTDIR); -1: something else, err says
 * what (ZERO_ERR_PLUGIN_NOT_FOUND).  A file swapped between this stat and
 * the dlopen is not caught: this guards against mistakes, not an attacker
 * who can write the plugin directory. */
static int regular_file(const char *path, char *err, size_t len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        set_err(err, len, "plugin %s could not be loaded: stat: %s", path, strerror(errno));
        return -1;
    }
    const char *what = not_regular(&st);
    if (!what) return 1;
    set_err(err, len, "plugin %s is %s, not a regular file: a plugin must be a shared library "
                      "(libzero-plugin-<name>.so)", path, what);
    return -1;
}

/* dlopen + dlsym + checks for one concrete file. */
static zero_status open_file(const char *path, zero__plugin *out, char *err, size_t len) {
    /* A bare "x.so" is dlopen's to search (LD_LIBRARY_PATH, the cache):
     * only a path with a '/' names one file that stat can check. */
    if (strchr(path, '/')) {
        const int reg = regular_file(path, err, len);
        if (reg < 0) return ZERO_ERR_PLUGIN_NOT_FOUND;
        if (reg == 0) {
            set_err(err, len, "plugin %s could not be loaded: %s", path, strerror(errno));
            return ZERO_ERR_PLUGIN_NOT_FOUND;
        }
    }
    dlerror(); /* clear */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        set_err(err, len, "plugin %s could not be loaded: %s", path, why ? why : "unknown dlopen error");
        return ZERO_ERR_PLUGIN_NOT_FOUND;
    }
    /* Which table revision, checked and adapted to the current one. */
    zero_status s = zero__plugin_adopt(dl, path, out, err, len);
    if (s != ZERO_OK) {
        dlclose(dl);
        return s;
    }
    out->dl = dl;
    snprintf(out->path, sizeof out->path, "%s", path);
    return ZERO_OK;
}

zero_status zero__plugin_load(const char *name_or_path, zero__plugin *out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!out) {
        set_err(err, err_len, "zero__plugin_load: out is NULL");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    if (!name_or_path || !name_or_path[0]) {
        set_err(err, err_len, "no plugin name given");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (is_path(name_or_path)) return open_file(name_or_path, out, err, err_len);

    char **dirs = zero__plugin_dirs();
    if (!dirs) {
        set_err(err, err_len, "out of memory building the plugin search path");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    /* The first existing file wins, even if it then fails to load: silently
     * falling through to another copy would run code the user did not pick. */
    zero_status s = ZERO_ERR_PLUGIN_NOT_FOUND;
    char path[4096];
    int found = 0;
    for (char **d = dirs; *d; ++d) {
        int n = snprintf(path, sizeof path, "%s/libzero-plugin-%s.so", *d, name_or_path);
        if (n < 0 || (size_t)n >= sizeof path) continue;
        /* Anything there counts as found: a FIFO or directory in the first
         * directory is refused by name, not skipped for a later copy. */
        struct stat st;
        if (stat(path, &st) == 0) {
            found = 1;
            s = open_file(path, out, err, err_len);
            break;
        }
    }
    if (!found) {
        set_err(err, err_len, "plugin \"%s\" not found; available: ", name_or_path);
        append_available(err, err_len, dirs);
        zero__appendf(err, err_len, "; searched:");
        for (char **d = dirs; *d; ++d)
            zero__appendf(err, err_len, " %s/libzero-plugin-%s.so%s", *d, name_or_path, d[1] ? "," : "");
        zero__appendf(err, err_len, " (set ZERO_PLUGIN_PATH to a colon-separated list of directories, "
                              "or give the plugin's path)");
    }
    zero__plugin_dirs_free(dirs);
    return s;
}

void zero__plugin_unload(zero__plugin *p) {
    if (!p) return;
    zero__plugin_adopt_free(p);
    if (p->dl) dlclose(p->dl);
    memset(p, 0, sizeof *p);
}

/* ---- build identity (engine_agree.c: ranks must run the same plugin) ---- */

typedef struct bid_find {
    uintptr_t addr;           /* an address inside the object wanted */
    const unsigned char *id;  /* its build-id bytes, or NULL */
    size_t n;
} bid_find;

/* The GNU build-id note in one PT_NOTE segment, or NULL. */
static const unsigned char *note_build_id(const unsigned char *p, const unsigned char *end, size_t align,
                                          size_t *n) {
    while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
        const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(const void *)p;
        const size_t name = (nh->n_namesz + align - 1) & ~(align - 1);
        const size_t desc = (nh->n_descsz + align - 1) & ~(align - 1);
        const unsigned char *nm = p + sizeof *nh;
        if ((size_t)(end - nm) < name + nh->n_descsz) return NULL;
        if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(nm, "GNU", 4) == 0) {
            *n = nh->n_descsz;
            return nm + name;
        }
        if ((size_t)(end - nm) < name + desc) return NULL;
        p = nm + name + desc;
    }
    return NULL;
}

/* dl_iterate_phdr callback: stop at the object whose PT_LOAD holds f->addr. */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    bid_find *f = data;
    int holds = 0;
    for (int i = 0; i < info->dlpi_phnum && !holds; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        holds = ph->p_type == PT_LOAD && f->addr >= lo && f->addr - lo < ph->p_memsz;
    }
    if (!holds) return 0;
    for (int i = 0; i < info->dlpi_phnum && !f->id; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)((uintptr_t)info->dlpi_addr + ph->p_vaddr);
        f->id = note_build_id(p, p + ph->p_memsz, ph->p_align == 8 ? 8 : 4, &f->n);
    }
    return 1;
}

/* CRC-32C of a whole regular file; 0 if it cannot be read. */
static int file_crc(const char *path, uint32_t *crc) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    unsigned char buf[65536];
    uint32_t c = 0;
    for (ssize_t r; ok && (r = read(fd, buf, sizeof buf)) != 0;) {
        if (r < 0) {
            if (errno != EINTR) ok = 0;
            continue;
        }
        c = zero__crc32c(c, buf, (size_t)r);
    }
    close(fd);
    *crc = c;
    return ok;
}

void zero__plugin_build_id(const zero__plugin *p, char *out, size_t n) {
    if (!out || !n) return;
    out[0] = '\0';
    if (!p || !p->symbol) return;
    bid_find f = {(uintptr_t)p->symbol, NULL, 0};
    dl_iterate_phdr(find_build_id, &f);
    if (f.id && f.n) {
        size_t used = 0;
        for (size_t i = 0; i < f.n && used + 3 <= n; i++) used += (size_t)snprintf(out + used, n - used, "%02x", f.id[i]);
        return;
    }
    uint32_t crc = 0;
    if (file_crc(p->path, &crc)) snprintf(out, n, "crc32c:%08x", crc);
}
