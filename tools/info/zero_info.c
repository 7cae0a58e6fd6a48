/* zero-info: what this libzero build is and what it can load (like
 * DeepSpeed's ds_report).  Prints the library and ABI versions, the comm and
 * device backends compiled in, the plugin search path in order, and every
 * plugin found on it with its file, name, ABI version and description;
 * plugins the loader would refuse are listed with the loader's reason.
 * Exit status: 0, or 1 with --strict when some plugin file is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader.h"
#include "zero.h"
#include "zero_plugin.h"

#define PREFIX "libzero-plugin-"
#define SUFFIX ".so"


/* Plugin names already printed: an earlier directory shadows a later one,
 * exactly as the loader's first-match rule does. */
static char **g_seen;
static size_t g_nseen, g_capseen;

static const char *seen_in(const char *name) {
    for (size_t i = 0; i < g_nseen; i += 2)
        if (strcmp(g_seen[i], name) == 0) return g_seen[i + 1];
    return NULL;
}

static void remember(const char *name, const char *path) {
    if (g_nseen + 2 > g_capseen) {
        size_t nc = g_capseen ? g_capseen * 2 : 32;
        char **n = realloc(g_seen, nc * sizeof *n);
        if (!n) return;
        g_seen = n;
        g_capseen = nc;
    }
    g_seen[g_nseen++] = strdup(name);
    g_seen[g_nseen++] = strdup(path);
}

static void caps_text(uint32_t caps, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s%s", caps ? "" : "-", (caps & ZERO_PLUGIN_CAP_PARTITIONS_PARAMS) ? "partitions-params " : "",
             (caps & ZERO_PLUGIN_CAP_PIPELINE) ? "pipeline " : "", (caps & ZERO_PLUGIN_CAP_OFFLOAD) ? "offload " : "");
}

/* List one directory; returns the number of refused plugin files. */
static int list_dir(const char *dir) {
    /* The loader's own listing: the not-found message names the same plugins. */
    char **names = zero__plugin_dir_names(dir);
    if (!names) {
        printf("  %s  (not present)\n", dir);
        return 0;
    }
    printf("  %s\n", dir);
    size_t n = 0;
    while (names[n]) ++n;
    int refused = 0;
    for (size_t i = 0; i < n; ++i) {
        char path[4096], err[4096] = "";
        const char *name = names[i];
        snprintf(path, sizeof path, "%s/" PREFIX "%s" SUFFIX, dir, name);
        const char *winner = seen_in(name);
        zero__plugin p;
        zero_status s = zero__plugin_load(path, &p, err, sizeof err);
        if (s == ZERO_OK) {
            char caps[128];
            caps_text(p.table->caps, caps, sizeof caps);
            printf("    %-14s ABI %u.%u  caps %s\n", p.table->name, p.table->abi_major, p.table->abi_minor, caps);
            printf("    %-14s %s\n", "", p.table->description ? p.table->description : "(no description)");
            if (winner)
                printf("    %-14s file %s  [shadowed by %s]\n", "", path, winner);
            else
                printf("    %-14s file %s\n", "", path);
            if (strcmp(p.table->name, name) != 0)
                printf("    %-14s note: loaded by name \"%s\" but calls itself \"%s\"\n", "", name, p.table->name);
            zero__plugin_unload(&p);
        } else {
            ++refused;
            printf("    %-14s REFUSED (%s)\n", name, zero_status_string(s));
            printf("    %-14s %s\n", "", err);
        }
        if (!winner) remember(name, path);
    }
    if (n == 0) printf("    (no plugins)\n");
    zero__plugin_dirs_free(names);
    return refused;
}

/* <dir of this executable>/ZERO_INFO_REL_PLUGIN_DIR, canonical, if it exists. */
static int installed_plugin_dir(char *buf, size_t len) {
#ifdef ZERO_INFO_REL_PLUGIN_DIR
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    char joined[8192];
    snprintf(joined, sizeof joined, "%s/%s", exe, ZERO_INFO_REL_PLUGIN_DIR);
    char *real = realpath(joined, NULL);
    if (!real) return 0;
    int ok = strlen(real) < len;
    if (ok) snprintf(buf, len, "%s", real);
    free(real);
    return ok;
#else
    (void)buf;
    (void)len;
    return 0;
#endif
}

int main(int argc, char **argv) {
    int strict = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--strict") == 0) {
            strict = 1;
        } else {
            printf("usage: %s [--strict]\n  --strict  exit 1 if any plugin file on the path is refused\n",
                   argv[0]);
            return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
        }
    }
    uint32_t abi = zero_abi_version();
    printf("libzero %s\n", zero_version_string());
    printf("  host ABI          %u.%u\n", abi / 10000, abi % 10000);
    printf("  plugin ABI        %d.%d (table symbol %s)\n", ZERO_PLUGIN_ABI_MAJOR, ZERO_PLUGIN_ABI_MINOR,
           ZERO_PLUGIN_SYMBOL_V1);

    printf("backends built in\n");
    printf("  comm              self, host (1.5: the host's callbacks)");
#ifdef ZERO_HAVE_MPI
    printf(", mpi");
#endif
#ifdef ZERO_HAVE_NCCL
    printf(", nccl");
#endif
    printf("\n  device            cpu");
#ifdef ZERO_HAVE_CUDA
    printf(", cuda");
#endif
    printf("\n  cpu kernels       ");
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    printf("this CPU: avx2 %s, avx512f %s", __builtin_cpu_supports("avx2") ? "yes" : "no",
           __builtin_cpu_supports("avx512f") ? "yes" : "no");
#else
    printf("scalar");
#endif
#ifdef ZERO_HAVE_OPENMP
    printf("; OpenMP on");
#endif
    printf("\n");

    printf("environment\n");
    const char *vars[] = {"ZERO_PLUGIN_PATH", "ZERO_PLUGIN", "ZERO_LOG_LEVEL"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
        const char *v = getenv(vars[i]);
        printf("  %-17s %s\n", vars[i], v ? v : "(unset)");
    }

    printf("plugin search path (first match wins)\n");
    char **dirs = zero__plugin_dirs();
    if (!dirs) {
        printf("  (out of memory)\n");
        return 1;
    }
    /* zero-info carries the loader statically, so it cannot see where an
     * installed libzero.so is; an installed libzero.so searches
     * <libdir>/zero/plugins next to itself, which for an installed zero-info
     * is <bindir>/../<libdir>/zero/plugins.  Show it where libzero would. */
    char installed[4096];
    int have_installed = installed_plugin_dir(installed, sizeof installed);
    for (char **d = dirs; *d; ++d)
        if (have_installed && strcmp(*d, installed) == 0) have_installed = 0;
    int refused = 0;
    for (char **d = dirs; *d; ++d) {
        if (have_installed && strcmp(*d, ZERO_INSTALL_PLUGIN_DIR) == 0) {
            refused += list_dir(installed);
            have_installed = 0;
        }
        refused += list_dir(*d);
    }
    zero__plugin_dirs_free(dirs);
    for (size_t i = 0; i < g_nseen; ++i) free(g_seen[i]);
    free(g_seen);
    return strict && refused ? 1 : 0;
}
