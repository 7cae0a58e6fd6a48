/* (ABI 1.5) The host backend's splits and small collectives, white-box
 * (engine-less: engine = NULL), over zero_host_comm callbacks that are MPI
 * calls (tests/common/host_comm_mpi.h).  Under mpirun with N ranks:
 *  - without a split callback: a copy (one color, keys in rank order) and
 *    everyone alone work; a real sub-group fails with ZERO_ERR_UNSUPPORTED
 *    on every rank (what MiCS, ZeRO++ hpZ, MoE and pipelines would hit);
 *  - with split/release: groups of two, sums inside them, every split
 *    communicator released exactly once at free;
 *  - MAX/MIN all-reduces, all-to-all of variable byte counts. */
#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "../common/host_comm_mpi.h"
#include "../common/mpi_check.h"
#include "comm.h"

int main(int argc, char **argv) {
    int rank = 0, P = 1;
    check_mpi_init(&argc, &argv, &rank, &P);
    hcm plain, full;
    hcm_make(&plain, MPI_COMM_WORLD, 0);
    hcm_make(&full, MPI_COMM_WORLD, HCM_ALLTOALL | HCM_SPLIT);
    char err[300] = "";
    zero_comm *w = NULL, *wf = NULL, *sub = NULL;
    CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_HOST, &plain.hc, NULL, &w, err, sizeof err), ZERO_OK);
    CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_HOST, &full.hc, NULL, &wf, err, sizeof err), ZERO_OK);
    if (!w || !wf) return check_mpi_finish();

    /* no split callback: a copy, everyone alone, or a clear refusal */
    CHECK_EQ_INT(zero__comm_split(w, 0, rank, &sub), ZERO_OK);
    CHECK(sub && zero__comm_rank(sub) == rank && zero__comm_size(sub) == P, "copy split");
    double v = rank + 1.0;
    CHECK_EQ_INT(zero__allreduce(sub, &v, 1, ZERO_DTYPE_F64, ZERO_OP_SUM), ZERO_OK);
    CHECK(v == P * (P + 1) / 2.0, "sum over the copy: %g", v);
    zero__comm_free(sub);
    sub = NULL;
    CHECK_EQ_INT(zero__comm_split(w, rank, 0, &sub), ZERO_OK);
    CHECK(sub && zero__comm_size(sub) == 1, "everyone alone");
    zero__comm_free(sub);
    sub = NULL;
    if (P > 2) {
        zero_status s = zero__comm_split(w, rank / 2, rank, &sub);
        CHECK(s == ZERO_ERR_UNSUPPORTED && !sub, "groups of 2 without a split callback: %d", s);
    }

    /* with split/release: groups of two */
    CHECK_EQ_INT(zero__comm_split(wf, rank / 2, rank, &sub), ZERO_OK);
    const int gsize = (rank / 2) * 2 + 1 < P ? 2 : 1;
    CHECK(sub && zero__comm_size(sub) == gsize && zero__comm_rank(sub) == rank % 2, "group of two: %d of %d",
          sub ? zero__comm_rank(sub) : -1, sub ? zero__comm_size(sub) : -1);
    v = rank;
    CHECK_EQ_INT(zero__allreduce(sub, &v, 1, ZERO_DTYPE_F64, ZERO_OP_SUM), ZERO_OK);
    CHECK(v == (gsize == 2 ? 4.0 * (rank / 2) + 1 : rank), "sum in the group of two: %g", v);
    zero_comm *none = (zero_comm *)&v;
    CHECK_EQ_INT(zero__comm_split(wf, rank == 0 ? -1 : 0, rank, &none), ZERO_OK);
    CHECK(rank == 0 ? none == NULL : (none && zero__comm_size(none) == P - 1), "color < 0 gets NULL");
    zero__comm_free(none);
    zero__comm_free(sub);
    CHECK(full.released == (P > 1) + (P > 1 && rank != 0), "released %d split communicators", full.released);

    /* MAX / MIN over the all-gather */
    int64_t mx[2] = {rank, -rank};
    CHECK_EQ_INT(zero__allreduce(w, mx, 2, ZERO_DTYPE_I64, ZERO_OP_MAX), ZERO_OK);
    CHECK(mx[0] == P - 1 && mx[1] == 0, "max %lld %lld", (long long)mx[0], (long long)mx[1]);
    double mn = 10.0 - rank;
    CHECK_EQ_INT(zero__allreduce(w, &mn, 1, ZERO_DTYPE_F64, ZERO_OP_MIN), ZERO_OK);
    CHECK(mn == 10.0 - (P - 1), "min %g", mn);

    /* all-to-all of variable counts: rank r sends r+q+1 bytes of value 16r+q to rank q */
    size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
    unsigned char sb[4096], rb[4096];
    for (int q = 0; q < P && P <= 64; q++) {
        sc[q] = (size_t)(rank + q + 1), sd[q] = so;
        memset(sb + so, 16 * rank + q, sc[q]);
        so += sc[q];
        rc[q] = (size_t)(q + rank + 1), rd[q] = ro;
        ro += rc[q];
    }
    CHECK_EQ_INT(zero__alltoallv_bytes(w, sb, sc, sd, rb, rc, rd), P > 1 ? ZERO_ERR_UNSUPPORTED : ZERO_OK);
    CHECK_EQ_INT(zero__alltoallv_bytes(wf, sb, sc, sd, rb, rc, rd), ZERO_OK);
    int good = 1;
    for (int q = 0; q < P; q++)
        for (size_t i = 0; i < rc[q]; i++) good &= rb[rd[q] + i] == (unsigned char)(16 * q + rank);
    CHECK(good, "alltoallv contents");

    zero__comm_world_free(w);
    zero__comm_world_free(wf);
    return check_mpi_finish();
}
