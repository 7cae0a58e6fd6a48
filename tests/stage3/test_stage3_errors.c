/* stage3 misuse is caught, never a hang or a silent wrong result:
 *  - ranks gathering different params at the same position (a divergent
 *    forward) get ZERO_ERR_MISMATCH on EVERY rank, naming both params;
 *  - a host that reads a param after releasing it reads NaN when poisoning
 *    is on (ZERO_DEBUG_POISON=1, the default of Debug builds), and the
 *    same host trains normally with poisoning off (so the NaN is the
 *    poison, not a bug of the host).
 * Usage: test_stage3_errors   (under mpirun -np N, N >= 2) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "s3_host.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    setenv("ZERO_STAGE3_TIMEOUT_S", "30", 1);

    for (int pf = 0; pf < 2; pf++) {
        s3_cfg c = s3_default_cfg();
        c.steps = 3;
        c.prefetch = pf ? 700 : 0;
        c.diverge_rank = world - 1; /* the last rank swaps layers 0 and 1 in step 1 */
        s3_out o;
        s3_run(&c, &o);
        CHECK(o.status == ZERO_ERR_MISMATCH, "prefetch %d: divergent gather gave %s (%s), expected ZERO_ERR_MISMATCH",
              pf, zero_status_string(o.status), o.error);
        CHECK_STR_CONTAINS(o.error, "layer0.weight");
        CHECK_STR_CONTAINS(o.error, "layer1.weight");
        if (rank == 0) printf("divergent gather (prefetch %d): %s\n", pf, o.error);
        /* every rank failed: nobody got further than the others */
        int failed = o.status == ZERO_ERR_MISMATCH, all = 0;
        MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        CHECK(all == 1, "not every rank reported the mismatch");
        s3_out_free(&o);
    }

    for (int poison = 1; poison >= 0; poison--) {
        setenv("ZERO_DEBUG_POISON", poison ? "1" : "0", 1);
        s3_cfg c = s3_default_cfg();
        c.steps = 2;
        c.read_after_release = 1;
        c.reuse = 0; /* released means released (no keeping for reuse) */
        s3_out o;
        s3_run(&c, &o);
        CHECK(o.status == ZERO_OK, "read-after-release run: %s (%s)", zero_status_string(o.status), o.error);
        if (poison)
            CHECK(o.nan_loss, "poisoning on: reading a released param was not caught (loss %g)", o.last_loss);
        else
            CHECK(!o.nan_loss, "poisoning off: loss is %g, the host itself is broken", o.last_loss);
        s3_out_free(&o);
    }
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
