/* Memory tiers of the offload plugin, per rank (issue 5), with DeepSpeed's
 * default reduce_bucket_size (5e8, clamped by the engine to the model):
 *   device tier: params 4Psi + gradients (stage-2 partitioning: the
 *     partition 4Psi/N plus bucket staging <= model/4; stage-1: the full flat
 *     gradient 4Psi) and NO master or optimizer state;
 *   host tier: fp32 master 4Psi/N + Adam m and v 8Psi/N + the landing
 *     buffer of the gradient copy 4Psi/N, and nothing else;
 * each within bounded alignment padding, and exactly:
 *   host master == host grads == optim / 2 == device params / N, and for
 *   stage-2 partitioning the device tier is stage2's minus its optimizer
 *   state (same params, partition and buckets).
 * Run under mpirun with N = 1, 2 and 4. */
#include <mpi.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"

#define DEV ZERO_TIER_DEVICE
#define HOST ZERO_TIER_HOST

static int rank_ = 0, world_ = 1;

static double cur(const host_run_out *o, int tier, int tag) { return (double)o->mem.current[tier][tag]; }

static void in_range(double v, double lo, double hi, const char *what) {
    CHECK(v >= lo && v <= hi, "N=%d %s = %.0f bytes, expected in [%.0f, %.0f]", world_, what, v, lo, hi);
}

static void print_row(const char *name, const host_run_out *o) {
    if (rank_ != 0) return;
    printf("  %-16s dev: params %7.0f grads %7.0f buckets %6.0f master %6.0f optim %7.0f | host: master %6.0f "
           "grads %6.0f optim %7.0f | totals dev %7.0f host %7.0f\n",
           name, cur(o, DEV, ZERO_MEM_PARAMS), cur(o, DEV, ZERO_MEM_GRADS), cur(o, DEV, ZERO_MEM_BUCKETS),
           cur(o, DEV, ZERO_MEM_MASTER), cur(o, DEV, ZERO_MEM_OPTIM), cur(o, HOST, ZERO_MEM_MASTER),
           cur(o, HOST, ZERO_MEM_GRADS), cur(o, HOST, ZERO_MEM_OPTIM), (double)o->mem.current_total[DEV],
           (double)o->mem.current_total[HOST]);
}

static void check_model(int model, const char *mname) {
    uint32_t nparams = 0;
    size_t maxp = 0;
    const double psi = (double)host_model_numel(model, &nparams, &maxp);
    const double N = world_;
    /* each param starts 16-aligned (<= 15 lost), each of the 2 groups is
     * padded to a multiple of 16*N (the layout's documented alignment) */
    const double pad = 15.0 * nparams + 2.0 * 16.0 * N;
    host_run_out s2, of[2];
    host_run_cfg c = host_default_cfg();
    c.model = model;
    c.steps = 2;
    c.bucket = -1; /* DeepSpeed default 5e8 */
    c.plugin = "stage2";
    host_run(&c, &s2);
    CHECK(s2.status == ZERO_OK, "%s stage2: %s", mname, s2.error);
    for (int k = 0; k < 2; k++) {
        host_run_cfg oc = c;
        oc.plugin = "offload";
        oc.offload = 1;
        oc.stage = k + 1;
        host_run(&oc, &of[k]);
        CHECK(of[k].status == ZERO_OK, "%s offload stage-%d: %s", mname, k + 1, of[k].error);
    }
    if (rank_ == 0) printf("%s model, Psi = %.0f, N = %d (bytes per rank)\n", mname, psi, world_);
    print_row("stage2", &s2);
    print_row("offload stage-1", &of[0]);
    print_row("offload stage-2", &of[1]);

    for (int k = 0; k < 2; k++) {
        const host_run_out *o = &of[k];
        char what[96];
        /* device tier: parameters and gradients only */
        snprintf(what, sizeof what, "%s offload stage-%d device params", mname, k + 1);
        in_range(cur(o, DEV, ZERO_MEM_PARAMS), 4 * psi, 4 * (psi + pad), what);
        CHECK_EQ_INT(o->mem.peak[DEV][ZERO_MEM_MASTER], 0);
        CHECK_EQ_INT(o->mem.peak[DEV][ZERO_MEM_OPTIM], 0);
        snprintf(what, sizeof what, "%s offload stage-%d device grads", mname, k + 1);
        if (k == 0) {
            in_range(cur(o, DEV, ZERO_MEM_GRADS), 4 * psi, 4 * (psi + pad), what);
            CHECK_EQ_INT(o->mem.peak[DEV][ZERO_MEM_BUCKETS], 0); /* in place: no staging */
        } else {
            in_range(cur(o, DEV, ZERO_MEM_GRADS), 4 * psi / N, 4 * (psi + pad) / N, what);
            double b = cur(o, DEV, ZERO_MEM_BUCKETS);
            if (world_ > 1) {
                snprintf(what, sizeof what, "%s offload stage-2 device buckets", mname);
                in_range(b, 1, (psi + pad), what); /* (0, model/4] in bytes: 4*(psi+pad)/4 */
            } else {
                CHECK(b == 0, "N=1: nothing to reduce, no staging expected (%.0f)", b);
            }
            /* the device keeps exactly stage2's params, partition and buckets */
            double s2_dev_wo_optim = (double)s2.mem.current_total[DEV] - cur(&s2, DEV, ZERO_MEM_OPTIM);
            CHECK((double)o->mem.current_total[DEV] == s2_dev_wo_optim,
                  "N=%d %s: offload device total %.0f != stage2 device total minus its optimizer state %.0f", world_,
                  mname, (double)o->mem.current_total[DEV], s2_dev_wo_optim);
            CHECK(cur(&s2, DEV, ZERO_MEM_OPTIM) > 0, "stage2 has no optimizer state?");
        }
        /* host tier: master + Adam + gradient landing buffer */
        const double m = cur(o, HOST, ZERO_MEM_MASTER);
        snprintf(what, sizeof what, "%s offload stage-%d host master", mname, k + 1);
        in_range(m, 4 * psi / N, 4 * (psi + pad) / N, what);
        snprintf(what, sizeof what, "%s offload stage-%d host optim", mname, k + 1);
        in_range(cur(o, HOST, ZERO_MEM_OPTIM), 8 * psi / N, 8 * (psi + pad) / N, what);
        CHECK(cur(o, HOST, ZERO_MEM_OPTIM) == 2 * m, "host optim %.0f != 2 x master %.0f", cur(o, HOST, ZERO_MEM_OPTIM),
              m);
        CHECK(cur(o, HOST, ZERO_MEM_GRADS) == m, "host grads %.0f != master %.0f", cur(o, HOST, ZERO_MEM_GRADS), m);
        CHECK(cur(o, DEV, ZERO_MEM_PARAMS) == N * m, "device params %.0f != N x host master %.0f",
              cur(o, DEV, ZERO_MEM_PARAMS), N * m);
        /* the host tier also holds the MPI ring scratch (ZERO_MEM_OTHER,
         * docs/memory.md): the model states are the rest */
        const double states = (double)o->mem.current_total[HOST] - cur(o, HOST, ZERO_MEM_OTHER);
        CHECK(states == 4 * m, "host model states %.0f != master+optim+grads %.0f", states, 4 * m);
        CHECK((double)o->mem.peak_total[HOST] <= states + (double)o->mem.peak[HOST][ZERO_MEM_OTHER],
              "host tier peaked above its steady state plus comm scratch");
        in_range(states, 16 * psi / N, 16 * (psi + pad) / N, "host model states (16Psi/N)");
    }
    /* stage-1 partitioning's device gradient is stage1's full flat buffer */
    CHECK(cur(&of[0], DEV, ZERO_MEM_GRADS) == cur(&of[0], DEV, ZERO_MEM_PARAMS),
          "offload stage-1: device grads %.0f != flat params %.0f", cur(&of[0], DEV, ZERO_MEM_GRADS),
          cur(&of[0], DEV, ZERO_MEM_PARAMS));
    /* what offload buys: the device peak falls by the optimizer state */
    CHECK(of[1].mem.peak_total[DEV] < s2.mem.peak_total[DEV], "offload device peak %llu not below stage2's %llu",
          (unsigned long long)of[1].mem.peak_total[DEV], (unsigned long long)s2.mem.peak_total[DEV]);
    host_run_free(&s2);
    host_run_free(&of[0]);
    host_run_free(&of[1]);

    /* contiguous_gradients off: one param's device temporary at a time */
    host_run_cfg nc = c;
    nc.plugin = "offload";
    nc.offload = 1;
    nc.stage = 2;
    nc.contiguous = 0;
    host_run_out o;
    host_run(&nc, &o);
    CHECK(o.status == ZERO_OK, "%s offload non-contiguous: %s", mname, o.error);
    double g = cur(&o, DEV, ZERO_MEM_GRADS), pk = (double)o.mem.peak[DEV][ZERO_MEM_GRADS];
    CHECK(g >= 4 * psi / N && g <= 4 * (psi + pad) / N, "non-contiguous: persistent device grads %.0f", g);
    CHECK(pk > g && pk <= g + 4.0 * (double)(maxp + 16), "non-contiguous: device grads peak %.0f vs partition %.0f", pk,
          g);
    host_run_free(&o);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    check_model(HOST_MODEL_SMALL, "test");
    check_model(HOST_MODEL_10K, "10k");
    return check_mpi_finish();
}
