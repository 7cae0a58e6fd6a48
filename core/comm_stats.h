/* zero_comm_stats: the communicators plugins make through the services
 * (counted with the engine's world) and the counters-to-stats conversion
 * that zero_comm_stats_get (api.c) and the services' comm_counters
 * (services.c) share.  Its own file so that neither of those two calls
 * into the other for it (tools/check-loops.py). */
#ifndef ZERO_CORE_COMM_STATS_H
#define ZERO_CORE_COMM_STATS_H
#include "comm.h"

struct zero_engine;

/* Is out a zero_comm_stats a caller may be given: non-NULL, and its
 * struct_size at least covers struct_size itself.  Pure. */
int zero__comm_stats_out_ok(const zero_comm_stats *out);
/* ZERO_COMM_STATS_INIT with the call, byte and busy-time fields of c. */
zero_comm_stats zero__comm_stats_of(const zero__comm_counters *c);
/* Copy st into out, no more than out->struct_size bytes (a host built
 * against an older ABI passes a shorter struct); out->struct_size is kept.
 * out must have passed zero__comm_stats_out_ok. */
void zero__comm_stats_copy_out(zero_comm_stats *out, const zero_comm_stats *st);

/* (1.3) Record *out, a communicator a plugin just made from m (split_st is
 * the split's status), in m's engine so that zero_comm_stats counts it.
 * Returns split_st; on out of memory frees *out, sets it NULL and fails.
 * A failed split, a NULL *out (color < 0) or an engine-less m: nothing
 * recorded.  Thread-safe (engine's sub_lock). */
zero_status zero__sub_comm_track(zero_comm *m, zero_status split_st, zero_comm **out);
/* Forget m (a plugin is freeing it), keeping its counters for the engine's
 * totals.  Does not free m.  Thread-safe. */
void zero__sub_comm_retire(zero_comm *m);
/* Add the calls and bytes (not the busy seconds) of every communicator
 * plugins made through the services, live or freed, into *c.  Thread-safe. */
void zero__sub_comms_add_counters(struct zero_engine *e, zero__comm_counters *c);
#endif
