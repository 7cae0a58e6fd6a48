/* See local_rank.h. */
#include "local_rank.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int zero__local_rank(char *src, size_t src_len) {
    /* Most specific first: an Open MPI job launched inside a Slurm
     * allocation has both, and Open MPI's is the rank of this process. */
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end = NULL;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno || *end || r < 0 || r > 1 << 20) continue; /* garbage: try the next launcher's */
        if (src && src_len) snprintf(src, src_len, "%s=%ld", vars[i], r);
        return (int)r;
    }
    if (src && src_len) snprintf(src, src_len, "none");
    return 0;
}
