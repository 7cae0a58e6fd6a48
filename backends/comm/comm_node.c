/* Which ranks share a node, decided from one table every rank sees.
 *
 * Why not MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): MPI lets each rank
 * compute its node from its own view of its peers' locality, and those
 * views can differ.  Two network-namespace "hosts" on one kernel
 * (bench/contrib_netns) gave ranks 0 and 1 a node of 2 and ranks 2 and 3 a
 * node of 4; Open MPI then crashed in the split itself or paired unrelated
 * messages on the node communicators.  Here every rank publishes a record
 * of its machine (host name and kernel boot id), the records are gathered,
 * and every rank reads the same partition from the same table.
 * Pure functions apart from reading the host name and boot id; no MPI. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "comm_internal.h"

void zero__node_record(char rec[ZERO__NODE_RECORD]) {
    memset(rec, 0, ZERO__NODE_RECORD);
    /* host name first (what MPI calls the processor name) ... */
    if (gethostname(rec, 64) != 0) rec[0] = '\0';
    rec[63] = '\0';
    /* ... then the boot id, so that machines (or containers on different
     * machines) that share a host name, such as "localhost", still differ */
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(rec + 64, ZERO__NODE_RECORD - 64, f)) rec[64] = '\0';
        fclose(f);
    }
}

int zero__node_leader(const char *tbl, int n, int q, int *members, int *local_rank) {
    return zero__node_leader_rows(tbl, ZERO__NODE_RECORD, n, q, members, local_rank);
}

int zero__node_leader_rows(const char *rows, size_t stride, int n, int q, int *members, int *local_rank) {
    const char *mine = rows + (size_t)q * stride;
    int lead = q, count = 0, below = 0;
    for (int p = n - 1; p >= 0; --p)
        if (memcmp(rows + (size_t)p * stride, mine, ZERO__NODE_RECORD) == 0) {
            lead = p;
            ++count;
            below += p < q;
        }
    if (members) *members = count;
    if (local_rank) *local_rank = below;
    return lead;
}
