/* Ranks agree at engine creation (engine_agree.h, issue 31).
 *
 * Why here and why first: a plugin's params_done may split communicators
 * (stage 3's MPI_Comm_split) and every plugin issues its own collectives in
 * its own order.  Ranks that loaded different plugins (a node with another
 * ZERO_PLUGIN, another build, another install), parsed different configs
 * or run with different communication settings (ZERO_COMM_CHUNK_KB on one
 * node only: mpirun forwards no variable to other nodes without -x)
 * then wait in collectives that never match -- past any timeout, since
 * MPI_Comm_split has none -- or, worse, match by accident and train on
 * wrong values.  So, before the plugin's create, every rank publishes one
 * fixed-size record (plugin name, build id, plugin ABI, libzero version,
 * config digest, comm settings, its load outcome) and the job checks they
 * are equal.
 *
 * Cost when they agree: one allreduce of two 64-bit words (MAX of the
 * record hash and of its complement = max and min at once).  Only when they
 * differ: an allgather of the records, so that every rank names every side,
 * and for a config difference two broadcasts of the canonical config text
 * from one rank of each side, so that every rank names the first differing
 * key and both values.  All of it on e->global, bounded by the comm timeout. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_agree.h"

#define REC_NAME 64
#define REC_BUILD 72
#define REC_WHY 320
#define REC_COMM 224
#define TEXT_CAP ((uint64_t)1 << 20) /* a config longer than this is compared by digest only */
#define MAX_SIDES 4                   /* sides named in one message; more are counted */

typedef struct agree_rec {
    int32_t status;             /* this rank's plugin load status */
    uint32_t abi_major, abi_minor; /* the plugin table's ABI (0.0: none loaded) */
    uint32_t core_abi;          /* zero_abi_version() of this libzero */
    uint64_t cfg_digest;        /* FNV-1a 64 of zero__config_canonical */
    char plugin[REC_NAME];      /* the table's name; the requested name when none is loaded */
    char build[REC_BUILD];      /* zero__plugin_build_id */
    char core[32];              /* libzero's version string */
    char what[48];              /* what failed: "load plugin 'x'", "parse its config" */
    char why[REC_WHY];          /* the failure's message, cut */
    char comm[REC_COMM];        /* zero__comm_settings of the global communicator */
} agree_rec;

#ifndef ZERO_VERSION_STRING
#define ZERO_VERSION_STRING "unknown"
#endif

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static void make_record(const zero_engine *e, const char *requested, zero_status load_status, const char *load_msg,
                        const char *canon, agree_rec *r) {
    memset(r, 0, sizeof *r); /* the hash covers every byte, padding included */
    const zero_plugin_table *t = e->plugin.table;
    r->status = load_status;
    r->core_abi = zero_abi_version();
    r->cfg_digest = canon ? fnv(0xcbf29ce484222325ULL, canon, strlen(canon)) : 0;
    snprintf(r->plugin, sizeof r->plugin, "%s", t && t->name ? t->name : requested ? requested : "");
    if (t) {
        r->abi_major = t->abi_major;
        r->abi_minor = t->abi_minor;
        zero__plugin_build_id(&e->plugin, r->build, sizeof r->build);
    }
    snprintf(r->core, sizeof r->core, "%s", ZERO_VERSION_STRING);
    zero__comm_settings(e->global ? e->global : e->world, r->comm, sizeof r->comm);
    if (load_status != ZERO_OK) {
        snprintf(r->what, sizeof r->what, "load plugin '%.32s'", requested ? requested : "?");
        snprintf(r->why, sizeof r->why, "%s", load_msg ? load_msg : "");
    }
}

/* ---- naming the sides ---- */

typedef int (*same_fn)(const agree_rec *a, const agree_rec *b);

static int same_plugin(const agree_rec *a, const agree_rec *b) {
    return !strcmp(a->plugin, b->plugin) && !strcmp(a->build, b->build) && a->abi_major == b->abi_major &&
           a->abi_minor == b->abi_minor && a->core_abi == b->core_abi && !strcmp(a->core, b->core);
}
static int same_config(const agree_rec *a, const agree_rec *b) { return a->cfg_digest == b->cfg_digest; }
static int same_comm(const agree_rec *a, const agree_rec *b) { return !strcmp(a->comm, b->comm); }

/* "rank 3" / "ranks 0-1,4": the ranks q of 0..n-1 for which in(ctx, q)
 * holds, into out (cut with "..." when long).  Both the record sides and
 * the pipeline.stages sides are named with it. */
typedef int (*member_fn)(const void *ctx, int q);
static void rank_list(int n, member_fn in, const void *ctx, char *out, size_t len) {
    int count = 0;
    for (int r = 0; r < n; r++) count += in(ctx, r);
    size_t used = (size_t)snprintf(out, len, "rank%s ", count > 1 ? "s" : "");
    int sep = 0;
    for (int r = 0; r < n && used + 8 < len; r++) {
        if (!in(ctx, r) || (r > 0 && in(ctx, r - 1))) continue;
        int end = r;
        while (end + 1 < n && in(ctx, end + 1)) end++;
        used += (size_t)snprintf(out + used, len - used, end > r ? "%s%d-%d" : "%s%d", sep ? "," : "", r, end);
        sep = 1;
    }
    if (used + 8 >= len && len > 4) snprintf(out + len - 4, 4, "...");
}

typedef struct like_rec {
    const agree_rec *recs;
    int first;
    same_fn same;
} like_rec;
static int is_like_rec(const void *ctx, int q) {
    const like_rec *l = ctx;
    return l->same(&l->recs[q], &l->recs[l->first]);
}

/* The ranks whose record is like recs[first] by `same`. */
static void side_ranks(const agree_rec *recs, int n, int first, same_fn same, char *out, size_t len) {
    const like_rec l = {recs, first, same};
    rank_list(n, is_like_rec, &l, out, len);
}

/* The first rank of each side, in rank order: up to `max`; returns how
 * many sides there are. */
static int sides(const agree_rec *recs, int n, same_fn same, int *firsts, int max) {
    int k = 0;
    for (int r = 0; r < n; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = same(&recs[q], &recs[r]);
        if (seen) continue;
        if (k < max) firsts[k] = r;
        k++;
    }
    return k;
}


static int same_core(const agree_rec *a, const agree_rec *b) {
    return a->core_abi == b->core_abi && !strcmp(a->core, b->core);
}

/* "ranks 0-1 load plugin 'stage2' (build 1a2b..., plugin ABI 1.5), ranks
 * 2-3 load plugin 'stage3' (...)"; libzero's version too when it differs. */
static void plugin_sides(const agree_rec *recs, int n, char *msg, size_t len) {
    int first[MAX_SIDES];
    const int k = sides(recs, n, same_plugin, first, MAX_SIDES);
    const int cores = sides(recs, n, same_core, NULL, 0); /* counts only */
    zero__appendf(msg, len, "ranks loaded different plugins: ");
    for (int i = 0; i < k && i < MAX_SIDES; i++) {
        const agree_rec *r = &recs[first[i]];
        char who[160], core[96] = "";
        side_ranks(recs, n, first[i], same_plugin, who, sizeof who);
        if (cores > 1)
            snprintf(core, sizeof core, ", libzero %s ABI %u.%u", r->core, r->core_abi / 10000, r->core_abi % 10000);
        const int one = !strncmp(who, "rank ", 5);
        zero__appendf(msg, len, "%s%s %s plugin '%s' (build %s, plugin ABI %u.%u%s)", i ? ", " : "", who,
                one ? "loads" : "load", r->plugin,
                r->build[0] ? r->build : "unknown", r->abi_major, r->abi_minor, core);
    }
    if (k > MAX_SIDES) zero__appendf(msg, len, " and %d more variant(s)", k - MAX_SIDES);
    zero__appendf(msg, len, "; every rank must load the same plugin build");
}

/* "ranks run with different communication settings: ZERO_COMM_CHUNK_KB
 * is 8 on rank 0 but 512 on ranks 1-2": the first NAME whose value differs
 * between the first two sides (the settings list the same names in the
 * same order on every rank of one libzero build). */
static void comm_sides(const agree_rec *recs, int n, char *msg, size_t len) {
    int first[2];
    const int k = sides(recs, n, same_comm, first, 2);
    char who_a[160], who_b[160];
    side_ranks(recs, n, first[0], same_comm, who_a, sizeof who_a);
    side_ranks(recs, n, first[1], same_comm, who_b, sizeof who_b);
    const char *a = recs[first[0]].comm, *b = recs[first[1]].comm;
    char name[64] = "", va[64] = "", vb[64] = "";
    while (*a && *b) { /* walk the "NAME=value" tokens of both */
        size_t la = strcspn(a, " "), lb = strcspn(b, " ");
        if (la != lb || strncmp(a, b, la) != 0) {
            size_t na = strcspn(a, "="), nb = strcspn(b, "=");
            if (na > la) na = la;
            if (nb > lb) nb = lb;
            snprintf(name, sizeof name, "%.*s", (int)na, a);
            snprintf(va, sizeof va, "%.*s", (int)(la > na ? la - na - 1 : 0), a + (la > na ? na + 1 : la));
            snprintf(vb, sizeof vb, "%.*s", (int)(lb > nb ? lb - nb - 1 : 0), b + (lb > nb ? nb + 1 : lb));
            break;
        }
        a += la + (a[la] == ' ');
        b += lb + (b[lb] == ' ');
    }
    if (name[0])
        zero__appendf(msg, len, "ranks run with different communication settings: %s is %s on %s but %s on %s", name,
                      va, who_a, vb, who_b);
    else
        zero__appendf(msg, len, "ranks run with different communication settings: '%s' on %s, '%s' on %s",
                      recs[first[0]].comm, who_a, recs[first[1]].comm, who_b);
    if (k > 2) zero__appendf(msg, len, " (and %d more variant(s))", k - 2);
    zero__appendf(msg, len, "; every rank must see the same value (each process reads them from its own "
                            "environment: with mpirun, forward them to every node with -x NAME)");
}

/* ---- the config's first difference ---- */

/* Rank root's canonical text to every rank (*out malloc'd, NULL when the
 * root had none or it was too long).  Collective. */
static zero_status bcast_text(zero_comm *g, int root, const char *mine, char **out) {
    *out = NULL;
    uint64_t len = mine && zero__comm_rank(g) == root ? strlen(mine) : 0;
    if (len > TEXT_CAP) len = 0;
    zero_status s = zero__broadcast(g, &len, 1, ZERO_DTYPE_U64, root);
    if (s != ZERO_OK || len == 0) return s;
    /* Without memory for the text this rank cannot join the broadcast: the
     * others then time out, as on any allocation failure mid-collective. */
    char *buf = calloc(len + 1, 1);
    if (!buf) return ZERO_ERR_OUT_OF_MEMORY;
    if (zero__comm_rank(g) == root) memcpy(buf, mine, len);
    s = zero__broadcast(g, buf, len, ZERO_DTYPE_U8, root);
    *out = buf;
    return s;
}

/* "ranks were given different configs: 'optimizer.params.lr' is 0.001 on
 * ranks 0-1 but 0.002 on ranks 2-3" (or the digests when the texts could
 * not be compared).  Collective: every rank takes this path together. */
static zero_status config_sides(zero_comm *g, const agree_rec *recs, int n, const char *canon,
                                char *msg, size_t len) {
    int first[2];
    const int k = sides(recs, n, same_config, first, 2);
    char *ta = NULL, *tb = NULL;
    zero_status s = bcast_text(g, first[0], canon, &ta);
    if (s == ZERO_OK) s = bcast_text(g, first[1], canon, &tb);
    char who_a[160], who_b[160], path[512] = "", va[160] = "", vb[160] = "";
    side_ranks(recs, n, first[0], same_config, who_a, sizeof who_a);
    side_ranks(recs, n, first[1], same_config, who_b, sizeof who_b);
    if (s == ZERO_OK && zero__config_first_diff(ta, tb, path, sizeof path, va, vb, sizeof va))
        zero__appendf(msg, len, "ranks were given different configs: '%s' is %s on %s but %s on %s", path, va, who_a, vb,
                who_b);
    else
        zero__appendf(msg, len, "ranks were given different configs: digest %016llx on %s, %016llx on %s",
                (unsigned long long)recs[first[0]].cfg_digest, who_a, (unsigned long long)recs[first[1]].cfg_digest,
                who_b);
    if (k > 2) zero__appendf(msg, len, " (and %d more variant(s))", k - 2);
    zero__appendf(msg, len, "; every rank must be given the same config (nvme_path, trace and zero_optimization.plugin "
                      "excepted)");
    free(ta);
    free(tb);
    return s;
}

/* ---- the agreement ---- */

static zero_status comm_failed(zero_engine *e, zero_status s) {
    const char *what = "agreeing with the other ranks on the plugin and the config at zero_engine_create";
    return e->last_error[0] ? zero__error_context(e, s, "%s", what) : zero__error(e, s, "%s failed", what);
}

/* The records differ: say how, on every rank alike (they all hold the same
 * records).  The caller returned already when this rank failed to load. */
static zero_status explain(zero_engine *e, zero_comm *g, const agree_rec *recs, int n, const char *canon) {
    for (int r = 0; r < n; r++)
        if (recs[r].status != ZERO_OK)
            return zero__error(e, (zero_status)recs[r].status, "rank %d could not %s: %s", r, recs[r].what,
                               recs[r].why);
    char *msg = calloc(4096, 1);
    if (!msg) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory naming a disagreement between ranks");
    int first[2];
    zero_status s = ZERO_OK;
    if (sides(recs, n, same_plugin, first, 2) > 1) plugin_sides(recs, n, msg, 4096);
    if (sides(recs, n, same_comm, first, 2) > 1) {
        if (msg[0]) zero__appendf(msg, 4096, "; and ");
        comm_sides(recs, n, msg, 4096);
    }
    if (sides(recs, n, same_config, first, 2) > 1) {
        if (msg[0]) zero__appendf(msg, 4096, "; and ");
        s = config_sides(g, recs, n, canon, msg, 4096);
    }
    s = s == ZERO_OK || !msg[0] ? zero__error(e, ZERO_ERR_MISMATCH, "%s", msg[0] ? msg : "ranks disagree")
                                : zero__error(e, ZERO_ERR_MISMATCH, "%s (naming the key failed: %s)", msg,
                                              zero_status_string(s));
    free(msg);
    return s;
}

/* One agreement round over `mine`; `local`/`local_msg`: this rank's own
 * failure (its first-hand message wins on this rank, set last so that no
 * comm error text overwrites it). */
static zero_status agree(zero_engine *e, agree_rec *mine, const char *canon, zero_status local, const char *local_msg) {
    zero_comm *g = e->global ? e->global : e->world;
    const int n = zero__comm_size(g);
    const uint64_t h = fnv(0xcbf29ce484222325ULL, mine, sizeof *mine);
    uint64_t v[2] = {h, ~h}; /* MAX of both: the largest and (complemented) the smallest hash */
    zero_status s = n > 1 ? zero__allreduce(g, v, 2, ZERO_DTYPE_U64, ZERO_OP_MAX) : ZERO_OK;
    agree_rec *all = NULL;
    if (local != ZERO_OK) {
        /* still join the gather the others start when they see the failure */
        if (s == ZERO_OK && !(v[0] == h && ~v[1] == h) && (all = malloc((size_t)n * sizeof *all)))
            zero__allgather_bytes(g, mine, all, sizeof *mine);
        s = zero__error(e, local, "%s", local_msg && local_msg[0] ? local_msg : zero_status_string(local));
    } else if (s != ZERO_OK) {
        s = comm_failed(e, s);
    } else if (!(v[0] == h && ~v[1] == h)) {
        if (!(all = malloc((size_t)n * sizeof *all)))
            s = zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory naming a disagreement between ranks");
        else if ((s = zero__allgather_bytes(g, mine, all, sizeof *mine)) != ZERO_OK)
            s = comm_failed(e, s);
        else
            s = explain(e, g, all, n, canon);
    }
    free(all);
    return s;
}

zero_status zero__engine_agree(zero_engine *e, const char *requested, zero_status load_status, const char *load_msg) {
    zero_comm *g = e->global ? e->global : e->world;
    if (zero__comm_size(g) <= 1)
        return load_status == ZERO_OK ? ZERO_OK : zero__error(e, load_status, "%s", load_msg ? load_msg : "");
    char *canon = zero__config_canonical(e->cfg);
    agree_rec *mine = malloc(sizeof *mine);
    if (!mine) {
        free(canon);
        return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory agreeing on the plugin and config");
    }
    make_record(e, requested, load_status, load_msg, canon, mine);
    zero_status s = agree(e, mine, canon, load_status, load_msg);
    if (s == ZERO_OK && zero__comm_rank(g) == 0)
        zero__log(e, ZERO_LOG_DEBUG, "ranks agree: plugin '%s' build %s, config digest %016llx", mine->plugin,
                  mine->build[0] ? mine->build : "-", (unsigned long long)mine->cfg_digest);
    free(mine);
    free(canon);
    return s;
}

typedef struct equal_to {
    const int64_t *v;
    int64_t val;
} equal_to;
static int is_equal_to(const void *ctx, int q) {
    const equal_to *x = ctx;
    return x->v[q] == x->val;
}

/* The ranks q with v[q] == val. */
static void ranks_with(const int64_t *v, int n, int64_t val, char *out, size_t len) {
    const equal_to x = {v, val};
    rank_list(n, is_equal_to, &x, out, len);
}

zero_status zero__engine_agree_stages(zero_engine *e, int *stages) {
    zero_comm *g = e->global ? e->global : e->world;
    const int n = zero__comm_size(g);
    if (n <= 1) {
        if (*stages < 1) *stages = 1;
        return ZERO_OK;
    }
    int64_t mine = *stages, *all = malloc((size_t)n * sizeof *all);
    if (!all) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "out of memory agreeing on pipeline.stages");
    zero_status s = zero__allgather_bytes(g, &mine, all, sizeof mine);
    if (s != ZERO_OK) {
        free(all);
        return e->last_error[0] ? zero__error_context(e, s, "agreeing on pipeline.stages at zero_engine_create")
                                : zero__error(e, s, "agreeing on pipeline.stages at zero_engine_create failed");
    }
    int unread = 0, first_other = -1;
    for (int q = 0; q < n; q++) {
        unread |= all[q] < 1;
        if (all[q] != all[0] && first_other < 0) first_other = q;
    }
    if (unread) { /* the config agreement names the rank whose config did not load */
        *stages = 1;
    } else if (first_other >= 0) {
        char a[160], b[160];
        ranks_with(all, n, all[0], a, sizeof a);
        ranks_with(all, n, all[first_other], b, sizeof b);
        s = zero__error(e, ZERO_ERR_MISMATCH,
                        "ranks were given different configs: 'pipeline.stages' is %lld on %s but %lld on %s; every "
                        "rank must be given the same config (the pipeline split comes before the config "
                        "agreement, so it is agreed on alone)",
                        (long long)all[0], a, (long long)all[first_other], b);
    } else {
        *stages = (int)all[0];
    }
    free(all);
    return s;
}

zero_status zero__engine_agree_failure(zero_engine *e, zero_status status, const char *what, const char *msg) {
    agree_rec *mine = calloc(1, sizeof *mine);
    if (!mine) return zero__error(e, status, "%s", msg ? msg : "");
    mine->status = status;
    mine->core_abi = zero_abi_version();
    snprintf(mine->what, sizeof mine->what, "%s", what);
    snprintf(mine->core, sizeof mine->core, "%s", ZERO_VERSION_STRING);
    snprintf(mine->why, sizeof mine->why, "%s", msg ? msg : "");
    zero_status s = agree(e, mine, NULL, status, msg);
    free(mine);
    return s;
}
