/* zero__local_rank (backends/device/local_rank.c): the GPU that
 * ZERO_DEVICE_INDEX_AUTO picks comes from the launcher's local-rank
 * variable, most specific launcher first; garbage is skipped, none is 0. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "local_rank.h"

static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};

static void clear(void) {
    for (int i = 0; i < 4; ++i) unsetenv(vars[i]);
}

int main(void) {
    char src[64];
    clear();
    CHECK_EQ_INT(zero__local_rank(src, sizeof src), 0);
    CHECK(strstr(src, "none") != NULL, "source: %s", src);

    setenv("LOCAL_RANK", "3", 1); /* torchrun */
    CHECK_EQ_INT(zero__local_rank(src, sizeof src), 3);
    CHECK(strstr(src, "LOCAL_RANK=3") != NULL, "source: %s", src);

    setenv("SLURM_LOCALID", "5", 1); /* Slurm beats a generic LOCAL_RANK */
    CHECK_EQ_INT(zero__local_rank(NULL, 0), 5);

    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "7", 1); /* mpirun inside a Slurm allocation */
    CHECK_EQ_INT(zero__local_rank(src, sizeof src), 7);
    CHECK(strstr(src, "OMPI_COMM_WORLD_LOCAL_RANK") != NULL, "source: %s", src);

    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x7", 1); /* garbage: the next launcher's */
    setenv("MPI_LOCALRANKID", "-2", 1);             /* negative: skipped too */
    CHECK_EQ_INT(zero__local_rank(src, sizeof src), 5);
    CHECK(strstr(src, "SLURM_LOCALID") != NULL, "source: %s", src);

    clear();
    setenv("MPI_LOCALRANKID", "12", 1); /* MPICH / Intel MPI hydra */
    CHECK_EQ_INT(zero__local_rank(NULL, 0) % 8, 4);
    return check_finish();
}
