/* Agreement on a checkpoint step's outcome, with the failing rank's message
 * (see ckpt_engine.h).  Two small collectives: the lowest failing global
 * rank, then its status and message broadcast from it. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_engine.h"
#include "engine.h"

zero_status zero__ck_agree(struct zero_engine *e, zero_status local, const char *what) {
    zero_comm *g = e->global ? e->global : e->world;
    const int me = zero__comm_rank(g), n = zero__comm_size(g);
    /* a rank that failed only because another did (ckpt_agree told it so)
     * yields to the rank that failed first-hand: its message is the useful one */
    const int echo = e->ck_echo;
    e->ck_echo = 0;
    double who = local == ZERO_OK ? (double)INT_MAX : echo ? (double)(n + me) : (double)me;
    zero_status cs = zero__allreduce(g, &who, 1, ZERO_DTYPE_F64, ZERO_OP_MIN);
    if (cs != ZERO_OK) return local != ZERO_OK ? local : cs;
    if (who == (double)INT_MAX) return ZERO_OK;
    const int root = (int)who % n;
    struct {
        int64_t status;
        char msg[2048];
    } b;
    memset(&b, 0, sizeof b);
    if (me == root) {
        b.status = local;
        size_t n = strlen(e->last_error);
        if (n >= sizeof b.msg) n = sizeof b.msg - 1; /* a longer message is cut: still names rank and cause */
        memcpy(b.msg, e->last_error, n);
    }
    cs = zero__broadcast(g, &b, sizeof b, ZERO_DTYPE_U8, root);
    if (local != ZERO_OK && (!echo || root == me)) return local; /* keeps its own, first-hand message */
    if (cs != ZERO_OK) return cs;
    return zero__error(e, (zero_status)b.status, "%s failed on another rank: %s", what, b.msg);
}

int zero__ck_file_name(const struct zero_engine *e, const char *name, char *out, size_t n) {
    int w = e->pp_stages > 1 ? snprintf(out, n, "%s.pp%d.rank%d.bin", name, e->pp_stage, e->rank)
                             : snprintf(out, n, "%s.rank%d.bin", name, e->rank);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}
