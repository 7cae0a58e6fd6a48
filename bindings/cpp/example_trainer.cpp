// Example C++17 trainer on zero.hpp: a linear model y = W x + b fitted to a
// fixed teacher by mean squared error, the host's own std::vectors as the
// parameters (host-owned, stage 0/1/2/offload) or gathered (stage 3); W is
// registered as a stacked tensor of its rows, each row's gradient reported
// as soon as it is computed (ABI 1.1).
//
//   example_trainer [plugin] [steps] [ckpt] (default: stage2, 60 steps, no checkpoint)
//   mpirun -np 2 example_trainer stage1
//
// Every rank sees different samples; libzero averages the gradients.  The
// trainer exits 0 only if the loss fell below a tenth of its start, the
// errors it provokes arrive as zero::error with status and message, a
// gather guard returns the same values as the host's tensor, and
// params_write makes the last rank's values for b every rank's.  With a
// checkpoint root it also saves there with a client state (the host's own
// bytes: here its step counter and data position), loads it back and
// checks that the bytes and the parameters came back.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "zero.hpp"

namespace {
constexpr int DIN = 8, DOUT = 4, MB = 16;

float teacher(int o, int k) { return std::sin(0.7f * (float)(o * DIN + k) + 0.3f); }
float input(long sample, int k) { return std::cos(0.37f * (float)(sample * DIN + k) + 0.11f * (float)k); }

std::string config(const std::string &plugin) {
    int stage = plugin.size() == 6 && plugin.compare(0, 5, "stage") == 0 ? plugin[5] - '0' : 2;
    std::string off = plugin == "offload" ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "";
    return "{\"train_micro_batch_size_per_gpu\": " + std::to_string(MB) +
           ", \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.05,"
           " \"weight_decay\": 0.0}}, \"zero_optimization\": {\"stage\": " + std::to_string(stage) + off + "}}";
}
}  // namespace

int main(int argc, char **argv) {
    std::string plugin = argc > 1 ? argv[1] : "stage2";
    int steps = argc > 2 ? std::atoi(argv[2]) : 60;
    int failures = 0;
    try {
        zero::engine e(zero::options{}.config_json(config(plugin)).plugin(plugin));
        // an error crosses as an exception with libzero's status and message (made while `e`
        // lives: libzero finalizes an MPI it initialised when its last engine goes)
        try {
            zero::engine bad(zero::options{}.config_json(config("stage1")).plugin("no-such-plugin"));
            std::fprintf(stderr, "a missing plugin did not throw\n");
            failures++;
        } catch (const zero::error &ex) {
            if (ex.status() != ZERO_ERR_PLUGIN_NOT_FOUND || ex.message().find("no-such-plugin") == std::string::npos) {
                std::fprintf(stderr, "unexpected error: %s\n", ex.what());
                failures++;
            }
        }

        const bool stage3 = plugin == "stage3";
        std::vector<float> W(DOUT * DIN, 0.0f), b(DOUT, 0.0f);
        zero::param_options owned;
        owned.host_owned = !stage3;  // stage 3 keeps only a shard: gather instead
        // W as a stack of DOUT rows (ABI 1.1): each row's gradient is reported on its own
        zero::param_options wo = owned;
        wo.shape = {DOUT, DIN};  // recorded in checkpoints (zero-ckpt consolidate writes W as 4 x 8)
        zero::param pw = e.register_stacked("W", W.data(), W.size(), DOUT, wo);
        zero::param_options bo = owned;
        bo.group = 1;
        zero::param pb = e.register_param("b", b.data(), b.size(), bo);
        e.params_done();

        double first = -1, last = -1;
        for (int step = 0; step < steps; step++) {
            const float *w = W.data(), *bb = b.data();
            zero::gather_guard g = e.gather({pw, pb});  // no-op below stage 3
            if (stage3) w = g.get<float>(0), bb = g.get<float>(1);
            float *gb = e.grad_buffer<float>(pb);  // ADD into these
            double loss = 0;
            for (int o = DOUT - 1; o >= 0; o--) {  // row by row, last first
                float *gw = e.slice_grad_buffer<float>(pw, (std::uint32_t)o);  // row o of W's gradient
                for (int s = 0; s < MB; s++) {
                    long sample = ((long)step * e.world_size() + e.rank()) * MB + s;
                    float x[DIN];
                    for (int k = 0; k < DIN; k++) x[k] = input(sample, k);
                    float y = bb[o], t = 0;
                    for (int k = 0; k < DIN; k++) y += w[o * DIN + k] * x[k], t += teacher(o, k) * x[k];
                    float d = (y - t) / (float)(MB * DOUT);
                    loss += 0.5 * (double)(y - t) * (y - t) / (MB * DOUT);
                    for (int k = 0; k < DIN; k++) gw[k] += d * x[k];
                    gb[o] += d;
                }
                e.on_slice_ready(pw, (std::uint32_t)o);
            }
            g.release();
            e.on_grad_ready(pb);
            zero_step_result r = e.step();
            if (first < 0) first = loss;
            last = loss;
            if (e.rank() == 0 && (step % 20 == 0 || step == steps - 1))
                std::printf("%s step %3d  loss %.6f  grad norm %.4f  lr %g\n", e.plugin_name().c_str(), step, loss,
                            r.grad_norm, r.lr);
        }
        if (!(last < 0.1 * first)) {
            std::fprintf(stderr, "loss did not fall: %g -> %g\n", first, last);
            failures++;
        }
        e.set_phase("check");  // another gather order than training's: stage 3 records it apart, no warning
        {  // one row of W at a time (zero_gather_slices, libzero >= 1.6): stage 3 all-gathers only that row
            zero::gather_guard whole = e.gather({pw});
            for (std::uint32_t o = DOUT; o-- > 0;) {
                zero::gather_guard row = e.gather_slices({{pw, o}});
                bool same = true;
                for (int k = 0; k < DIN; k++) same = same && row.get<float>(0)[k] == whole.get<float>(0)[o * DIN + k];
                if (!same) {
                    std::fprintf(stderr, "row %u of W from gather_slices differs from the whole gather\n", o);
                    failures++;
                    break;
                }
            }
        }
        if (!stage3) {  // the host's vectors are the parameters; libzero's own copy agrees
            zero::gather_guard g = e.gather({pw});
            const float *own = e.storage<float>(pw);
            for (std::size_t i = 0; i < W.size(); i++)
                if (g.get<float>(0)[i] != W[i] || own[i] != W[i]) {
                    std::fprintf(stderr, "host-owned W[%zu] differs from zero_gather / zero_param_storage\n", i);
                    failures++;
                    break;
                }
        } else {
            try {
                e.storage<float>(pw);
                std::fprintf(stderr, "stage 3 handed out a full copy\n");
                failures++;
            } catch (const zero::error &ex) {
                if (ex.status() != ZERO_ERR_UNSUPPORTED) failures++;
            }
        }
        {  // (libzero >= 1.10) the last rank's values for b become every rank's -- DeepSpeed's
           // GatheredParameters(modifier_rank=...); the other ranks' values are not read
            const int root = e.world_size() - 1;
            std::vector<float> mine(DOUT);
            for (int o = 0; o < DOUT; o++) mine[o] = 0.25f * (float)(o + 1) + (float)e.rank();
            e.params_write({pb}, {e.rank() == root ? mine.data() : nullptr}, root);
            zero::gather_guard g = e.gather({pb});
            bool same = true;
            for (int o = 0; o < DOUT; o++) {
                const float want = 0.25f * (float)(o + 1) + (float)root;
                same = same && g.get<float>(0)[o] == want && (stage3 || b[o] == want);
            }
            if (!same) {
                std::fprintf(stderr, "params_write: b is not rank %d's values on rank %d\n", root, e.rank());
                failures++;
            }
        }
        if (argc > 3) {  // a checkpoint with the host's own state in it (libzero >= 1.8)
            const std::string state = "step=" + std::to_string(steps) + " samples=" + std::to_string((long)steps * MB);
            std::vector<float> before;
            {
                zero::gather_guard g = e.gather({pw});
                before.assign(g.get<float>(0), g.get<float>(0) + W.size());
            }
            e.save(argv[3], "final", 1, std::vector<unsigned char>(state.begin(), state.end()));
            if (!e.client_state().empty()) {  // nothing loaded yet
                std::fprintf(stderr, "client_state() before any load is not empty\n");
                failures++;
            }
            e.load(argv[3]);
            if (e.info().global_step != (std::uint64_t)steps) {  // the checkpoint's step, before any step
                std::fprintf(stderr, "info().global_step %llu after the load, saved at %d\n",
                             (unsigned long long)e.info().global_step, steps);
                failures++;
            }
            std::vector<unsigned char> back = e.client_state();
            zero::gather_guard g = e.gather({pw});
            bool same = std::string(back.begin(), back.end()) == state;
            for (std::size_t i = 0; same && i < W.size(); i++) same = g.get<float>(0)[i] == before[i];
            if (!same) {
                std::fprintf(stderr, "the checkpoint's client state or W did not come back\n");
                failures++;
            } else if (e.rank() == 0) {
                std::printf("checkpoint %s/final: client state \"%s\" and W came back\n", argv[3], state.c_str());
            }
            g.release();
            e.load(argv[3], true);  // (libzero >= 1.9) the weights alone: W again, the optimizer from step 0
            zero::gather_guard w = e.gather({pw});
            same = e.info().global_step == 0;
            for (std::size_t i = 0; same && i < W.size(); i++) same = w.get<float>(0)[i] == before[i];
            if (!same) {
                std::fprintf(stderr, "a weights-only load: step %llu (expected 0) or W differs\n",
                             (unsigned long long)e.info().global_step);
                failures++;
            }
        }
        zero_memory_stats m = e.memory_stats();
        if (e.rank() == 0)
            std::printf("%s: loss %.6f -> %.6f, peak model-state bytes %llu\n", plugin.c_str(), first, last,
                        (unsigned long long)m.peak_total[ZERO_TIER_DEVICE] + m.peak_total[ZERO_TIER_HOST]);
    } catch (const zero::error &ex) {
        std::fprintf(stderr, "zero::error: %s (status %d)\n", ex.what(), (int)ex.status());
        return 1;
    }
    return failures ? 1 : 0;
}
