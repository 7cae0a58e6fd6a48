/* Memory accounting of the stage plugins, per rank, with DeepSpeed's default
 * reduce_bucket_size (5e8 elements) so that a small model must not pay for
 * it (DeepSpeedExamples issue 123):
 *  - optimizer state = 8*Psi/N bytes (fp32 Adam, params are the master) for
 *    stages 1 and 2, 8*Psi for stage 0, plus bounded alignment padding;
 *  - stage 2's persistent gradient bytes = its partition (4*Psi/N) plus the
 *    bucket buffers (at most a quarter of the model);
 *  - peak(stage2) <= peak(stage1) <= peak(stage0), on the ~8k test model and
 *    on a 10k-param model;
 *  - contiguous_gradients off costs a transient per-param buffer, no more.
 * Run under mpirun with N = 2 and 4. */
#include <mpi.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "mlp_host.h"

#define DEV ZERO_TIER_DEVICE

static int rank_ = 0, world_ = 1;

static void check_model(int model, const char *mname) {
    uint32_t nparams = 0;
    size_t maxp = 0;
    const double psi = (double)host_model_numel(model, &nparams, &maxp);
    /* each param starts 16-aligned (<= 15 lost), each of the 2 groups is
     * padded to a multiple of 16*N */
    const double pad = 15.0 * nparams + 2.0 * 16.0 * world_;
    const double N = world_;
    const char *plugins[3] = {"stage0", "stage1", "stage2"};
    host_run_out o[3];
    for (int s = 0; s < 3; s++) {
        host_run_cfg c = host_default_cfg();
        c.model = model;
        c.plugin = plugins[s];
        c.steps = 2;
        c.bucket = -1; /* DeepSpeed default 5e8 */
        host_run(&c, &o[s]);
        CHECK(o[s].status == ZERO_OK, "%s %s: %s", mname, plugins[s], o[s].error);
    }
    if (rank_ == 0) {
        printf("%s model, Psi = %.0f, N = %d (bytes per rank)\n", mname, psi, world_);
        printf("  %-7s %10s %10s %10s %10s %12s\n", "plugin", "params", "grads", "optim", "buckets", "peak total");
        for (int s = 0; s < 3; s++)
            printf("  %-7s %10llu %10llu %10llu %10llu %12llu\n", plugins[s],
                   (unsigned long long)o[s].mem.current[DEV][ZERO_MEM_PARAMS],
                   (unsigned long long)o[s].mem.current[DEV][ZERO_MEM_GRADS],
                   (unsigned long long)o[s].mem.current[DEV][ZERO_MEM_OPTIM],
                   (unsigned long long)o[s].mem.current[DEV][ZERO_MEM_BUCKETS],
                   (unsigned long long)o[s].mem.peak_total[DEV]);
    }
    const double optim0 = (double)o[0].mem.current[DEV][ZERO_MEM_OPTIM];
    CHECK(optim0 >= 8 * psi && optim0 <= 8 * (psi + pad), "%s stage0 optim %.0f not in [8Psi, 8(Psi+pad)]", mname,
          optim0);
    for (int s = 1; s < 3; s++) {
        double optim = (double)o[s].mem.current[DEV][ZERO_MEM_OPTIM];
        CHECK(optim >= 8 * psi / N && optim <= 8 * (psi + pad) / N, "%s %s optim %.0f not in [8Psi/N, 8(Psi+pad)/N] = [%.0f, %.0f]",
              mname, plugins[s], optim, 8 * psi / N, 8 * (psi + pad) / N);
    }
    CHECK_EQ_INT(o[0].mem.peak[DEV][ZERO_MEM_BUCKETS], 0); /* in-place modes stage nothing */
    CHECK_EQ_INT(o[1].mem.peak[DEV][ZERO_MEM_BUCKETS], 0);
    double g1 = (double)o[1].mem.current[DEV][ZERO_MEM_GRADS];
    CHECK(g1 >= 4 * psi && g1 <= 4 * (psi + pad), "%s stage1 grads %.0f: expected the full flat gradient", mname, g1);
    double g2 = (double)o[2].mem.current[DEV][ZERO_MEM_GRADS], b2 = (double)o[2].mem.current[DEV][ZERO_MEM_BUCKETS];
    CHECK(g2 >= 4 * psi / N && g2 <= 4 * (psi + pad) / N, "%s stage2 grads %.0f: expected the partition only", mname,
          g2);
    CHECK(o[2].mem.peak[DEV][ZERO_MEM_GRADS] == o[2].mem.current[DEV][ZERO_MEM_GRADS],
          "%s stage2: gradient memory beyond the partition was allocated (contiguous)", mname);
    CHECK(b2 > 0 && b2 <= 4 * (psi + pad) / 4, "%s stage2 bucket buffers %.0f bytes: expected (0, model/4]", mname, b2);
    CHECK(o[2].mem.peak[DEV][ZERO_MEM_BUCKETS] == o[2].mem.current[DEV][ZERO_MEM_BUCKETS],
          "%s stage2: the slot pool grew in natural hook order", mname);
    unsigned long long p0 = o[0].mem.peak_total[DEV], p1 = o[1].mem.peak_total[DEV], p2 = o[2].mem.peak_total[DEV];
    CHECK(p2 <= p1 && p1 <= p0, "%s: peaks stage2 %llu, stage1 %llu, stage0 %llu are not ordered", mname, p2, p1, p0);

    /* contiguous_gradients off: one param's temporary at a time, freed */
    host_run_cfg c = host_default_cfg();
    c.model = model;
    c.plugin = "stage2";
    c.steps = 2;
    c.bucket = -1;
    c.contiguous = 0;
    host_run_out nc;
    host_run(&c, &nc);
    CHECK(nc.status == ZERO_OK, "%s stage2 non-contiguous: %s", mname, nc.error);
    double cur = (double)nc.mem.current[DEV][ZERO_MEM_GRADS], pk = (double)nc.mem.peak[DEV][ZERO_MEM_GRADS];
    CHECK(cur == g2, "%s non-contiguous: persistent grads %.0f != partition %.0f", mname, cur, g2);
    CHECK(pk > cur && pk <= cur + 4.0 * (double)(maxp + 16), "%s non-contiguous: peak grads %.0f, expected partition + one param",
          mname, pk);
    if (rank_ == 0)
        printf("  stage2 contiguous_gradients=false: grads peak %.0f (partition %.0f + one param's temporary)\n", pk,
               cur);
    for (int s = 0; s < 3; s++) host_run_free(&o[s]);
    host_run_free(&nc);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    check_model(HOST_MODEL_SMALL, "test");
    check_model(HOST_MODEL_10K, "10k");
    return check_mpi_finish();
}
