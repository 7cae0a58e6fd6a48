/* zero_comm_stats' sources: the counters of the communicators plugins made
 * (see comm_stats.h) and their conversion to the public struct. */
#include <stdlib.h>
#include <string.h>

#include "comm_stats.h"
#include "engine.h"

int zero__comm_stats_out_ok(const zero_comm_stats *out) { return out && out->struct_size >= sizeof(uint32_t); }

zero_comm_stats zero__comm_stats_of(const zero__comm_counters *c) {
    zero_comm_stats st = ZERO_COMM_STATS_INIT;
    st.allreduce_calls = c->allreduce_calls;
    st.reduce_scatter_calls = c->reduce_scatter_calls;
    st.allgather_calls = c->allgather_calls;
    st.broadcast_calls = c->broadcast_calls;
    st.other_calls = c->other_calls;
    st.bytes_reduced = c->bytes_reduced;
    st.bytes_gathered = c->bytes_gathered;
    st.total_comm_seconds = c->busy_seconds;
    return st;
}

void zero__comm_stats_copy_out(zero_comm_stats *out, const zero_comm_stats *st) {
    uint32_t size = out->struct_size;
    memcpy(out, st, size < sizeof *st ? size : sizeof *st);
    out->struct_size = size;
}

static void add_counts(zero__comm_counters *c, const zero__comm_counters *x) {
    c->allreduce_calls += x->allreduce_calls;
    c->reduce_scatter_calls += x->reduce_scatter_calls;
    c->allgather_calls += x->allgather_calls;
    c->broadcast_calls += x->broadcast_calls;
    c->other_calls += x->other_calls;
    c->bytes_reduced += x->bytes_reduced;
    c->bytes_gathered += x->bytes_gathered;
}

zero_status zero__sub_comm_track(zero_comm *m, zero_status st, zero_comm **out) {
    struct zero_engine *e = m ? m->engine : NULL;
    if (st != ZERO_OK || !*out || !e) return st;
    pthread_mutex_lock(&e->sub_lock);
    if (e->nsub == e->sub_cap) {
        size_t nc = e->sub_cap ? e->sub_cap * 2 : 8;
        zero_comm **v = realloc(e->sub_comms, nc * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&e->sub_lock);
            zero__comm_free(*out);
            *out = NULL;
            return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "comm_split: out of memory");
        }
        e->sub_comms = v;
        e->sub_cap = nc;
    }
    e->sub_comms[e->nsub++] = *out;
    pthread_mutex_unlock(&e->sub_lock);
    return ZERO_OK;
}

void zero__sub_comm_retire(zero_comm *m) {
    struct zero_engine *e = m ? m->engine : NULL;
    if (!e) return;
    pthread_mutex_lock(&e->sub_lock);
    for (size_t i = 0; i < e->nsub; i++)
        if (e->sub_comms[i] == m) {
            zero__comm_counters x;
            zero__comm_counters_get(m, &x);
            add_counts(&e->sub_retired, &x);
            e->sub_comms[i] = e->sub_comms[--e->nsub];
            break;
        }
    pthread_mutex_unlock(&e->sub_lock);
}

void zero__sub_comms_add_counters(struct zero_engine *e, zero__comm_counters *c) {
    pthread_mutex_lock(&e->sub_lock);
    add_counts(c, &e->sub_retired);
    for (size_t i = 0; i < e->nsub; i++) {
        zero__comm_counters x;
        zero__comm_counters_get(e->sub_comms[i], &x);
        add_counts(c, &x);
    }
    pthread_mutex_unlock(&e->sub_lock);
}
