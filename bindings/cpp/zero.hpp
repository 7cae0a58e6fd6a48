// zero.hpp -- header-only C++17 RAII wrapper of libzero's host ABI (zero.h).
//
//   zero::engine e(zero::options{}.config_path("ds_config.json"));
//   std::vector<float> w(n);                         // the host's tensor ...
//   zero::param pw = e.register_param("w", w.data(), w.size(), {.host_owned = true});
//   e.params_done();
//   for (;;) {
//       float *g = e.grad_buffer<float>(pw);         // ADD the gradient here
//       ...; e.on_grad_ready(pw);
//       zero_step_result r = e.step();               // ... is updated in place
//   }
//   { auto g = e.gather({pw}); use(g.get<float>(0)); } // stage 3: released at scope exit
//
// Every failing call throws zero::error (status code, its name, and
// libzero's rank-prefixed message).  An engine is move-only and destroyed
// (collectively) by its destructor.  Params are handles owned by their
// engine: copyable, valid while the engine lives.
#ifndef ZERO_HPP
#define ZERO_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "zero.h"

namespace zero {

/// A libzero call failed.
class error : public std::runtime_error {
  public:
    error(zero_status s, std::string message, const std::string &call)
        : std::runtime_error(call + ": " + zero_status_string(s) + ": " + message), status_(s),
          message_(std::move(message)) {}
    /// The zero_status code (ZERO_ERR_CONFIG, ...).
    zero_status status() const noexcept { return status_; }
    /// Static text of the code ("ZERO_ERR_CONFIG: ...").
    const char *status_name() const noexcept { return zero_status_string(status_); }
    /// libzero's message, "rank R: ...".
    const std::string &message() const noexcept { return message_; }

  private:
    zero_status status_;
    std::string message_;
};

/// Engine options (zero_engine_options) with chainable setters.  Strings are
/// copied by zero_engine_create; the options object only needs to outlive
/// the constructor call.
class options {
  public:
    options() : o_(ZERO_ENGINE_OPTIONS_INIT) {}
    options &config_json(std::string s) { json_ = std::move(s); return *this; }
    options &config_path(std::string s) { path_ = std::move(s); return *this; }
    options &plugin(std::string s) { plugin_ = std::move(s); return *this; }
    /// kind: ZERO_COMM_AUTO / MPI / NCCL / SELF / HOST (1.5); comm: &my_mpi_comm, &my_zero_host_comm etc.
    /// (borrowed: must outlive the engine)
    options &comm(zero_comm_kind kind, void *comm = nullptr) { o_.comm_kind = kind; o_.comm = comm; return *this; }
    options &device(zero_device_kind kind, int index = ZERO_DEVICE_INDEX_AUTO, void *stream = nullptr) {
        o_.device_kind = kind; o_.device_index = index; o_.stream = stream; return *this;
    }
    options &log(zero_log_fn fn, void *user) { o_.log_fn = fn; o_.log_user = user; return *this; }
    zero_engine_options get() const {
        zero_engine_options o = o_;
        o.config_json = json_.empty() ? nullptr : json_.c_str();
        o.config_path = path_.empty() ? nullptr : path_.c_str();
        o.plugin = plugin_.empty() ? nullptr : plugin_.c_str();
        return o;
    }

  private:
    zero_engine_options o_;
    std::string json_, path_, plugin_;
};

/// A registered parameter (non-owning handle).
struct param {
    zero_param *handle = nullptr;
    std::size_t numel = 0;
    zero_dtype dtype = ZERO_DTYPE_F32;
    explicit operator bool() const noexcept { return handle != nullptr; }
};

/// Registration options beyond name / data / numel.
struct param_options {
    int group = 0;
    bool host_owned = false;   ///< ZERO_PARAM_HOST_OWNED: `data` is the parameter, updated in place at each step
    void *grad = nullptr;      ///< optional host-owned gradient buffer
    zero_device_kind device = ZERO_DEVICE_CPU;
    /// (libzero >= 1.8, ABI 1.7) the tensor's sizes, recorded in checkpoints (product = numel); empty: flat
    std::vector<std::uint64_t> shape;
};

template <class T> constexpr zero_dtype dtype_of();
template <> constexpr zero_dtype dtype_of<float>() { return ZERO_DTYPE_F32; }

class engine;

/// Params gathered by engine::gather; released (zero_release) when it goes
/// out of scope.  Move-only.
class gather_guard {
  public:
    gather_guard(gather_guard &&o) noexcept : e_(std::exchange(o.e_, nullptr)), ps_(std::move(o.ps_)),
                                              layers_(std::move(o.layers_)), ptrs_(std::move(o.ptrs_)) {}
    gather_guard(const gather_guard &) = delete;
    gather_guard &operator=(const gather_guard &) = delete;
    gather_guard &operator=(gather_guard &&) = delete;
    ~gather_guard() { release_noexcept(); }
    /// Full-tensor pointer of the i-th gathered param, or of the i-th slice for engine::gather_slices
    /// (read-only).
    template <class T = void> const T *get(std::size_t i) const { return static_cast<const T *>(ptrs_.at(i)); }
    std::size_t size() const noexcept { return ptrs_.size(); }
    /// Release now (throws on failure; the destructor then does nothing).
    inline void release();

  private:
    friend class engine;
    gather_guard(zero_engine *e, std::vector<zero_param *> ps, std::vector<std::uint32_t> layers = {})
        : e_(e), ps_(std::move(ps)), layers_(std::move(layers)), ptrs_(ps_.size()) {}
    zero_status release_call(zero_engine *e) noexcept {
        return layers_.empty() ? zero_release(e, ps_.data(), ps_.size())
                               : zero_release_slices(e, ps_.data(), layers_.data(), ps_.size());
    }
    void release_noexcept() noexcept {
        if (e_) release_call(e_);
        e_ = nullptr;
    }
    zero_engine *e_;
    std::vector<zero_param *> ps_;
    std::vector<std::uint32_t> layers_; /* empty: whole params (zero_gather); else one layer per param */
    std::vector<void *> ptrs_;
};

/// One libzero engine (zero_engine_create ... zero_engine_destroy).
class engine {
  public:
    explicit engine(const options &opts) {
        zero_engine_options o = opts.get();
        char err[8192] = "";
        zero_status s = zero_engine_create(&o, &e_, err, sizeof err);
        if (s != ZERO_OK) throw error(s, err, "zero_engine_create");
    }
    engine(engine &&o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    engine &operator=(engine &&o) noexcept {
        if (this != &o) {
            zero_engine_destroy(e_);
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    engine(const engine &) = delete;
    engine &operator=(const engine &) = delete;
    ~engine() { zero_engine_destroy(e_); }

    zero_engine *get() const noexcept { return e_; }
    int rank() const noexcept { return zero_rank(e_); }
    int world_size() const noexcept { return zero_world_size(e_); }
    std::string plugin_name() const { return zero_plugin_name(e_); }
    double loss_scale() const noexcept { return zero_loss_scale(e_); }
    std::string last_error() const { return zero_last_error(e_); }

    /// Register `numel` elements at `data` (read at params_done, or with
    /// host_owned the parameter itself, which must then be writable).
    template <class T>
    param register_param(const std::string &name, T *data, std::size_t numel, const param_options &po = {},
                         zero_dtype dtype = dtype_of<std::remove_cv_t<T>>()) {
        zero_param_desc d = desc(name, data, numel, po, dtype);
        param p;
        check(zero_register_param(e_, &d, &p.handle), "zero_register_param(" + name + ")");
        p.numel = numel;
        p.dtype = dtype;
        return p;
    }
    /// A stacked tensor of `layers` equal slices (zero_register_stacked): `numel` is the whole stack.
    template <class T>
    param register_stacked(const std::string &name, T *data, std::size_t numel, std::uint32_t layers,
                           const param_options &po = {}, zero_dtype dtype = dtype_of<std::remove_cv_t<T>>()) {
        zero_param_desc d = desc(name, data, numel, po, dtype);
        param p;
        check(zero_register_stacked(e_, &d, layers, &p.handle), "zero_register_stacked(" + name + ")");
        p.numel = numel;
        p.dtype = dtype;
        return p;
    }
    /// Where to ADD slice `layer`'s gradient; then on_slice_ready(p, layer).
    template <class T = float> T *slice_grad_buffer(const param &p, std::uint32_t layer) {
        void *buf = nullptr;
        check(zero_slice_grad_buffer(e_, p.handle, layer, &buf), "zero_slice_grad_buffer");
        return static_cast<T *>(buf);
    }
    void on_slice_ready(const param &p, std::uint32_t layer, void *stream = nullptr) {
        check(zero_on_slice_ready(e_, p.handle, layer, stream), "zero_on_slice_ready");
    }
    void params_done() { check(zero_params_done(e_), "zero_params_done"); }
    /// Options of param group `group`, before params_done.  expert_color: ZERO_GROUP_DENSE, or >= 0 for a
    /// mixture-of-experts group partitioned over the ranks that give it the same color (docs/moe.md).
    void set_group(int group, double lr_scale = 1.0, double weight_decay = -1.0,
                   std::int32_t expert_color = ZERO_GROUP_DENSE) {
        zero_group_desc g = ZERO_GROUP_DESC_INIT;
        g.group = group;
        g.lr_scale = lr_scale;
        g.weight_decay = weight_decay;
        g.expert_color = expert_color;
        check(zero_set_group(e_, &g), "zero_set_group");
    }
    /// Hyper-parameters for the next steps (fields of h: ZERO_HPARAM_KEEP / _DEFAULT or values).
    void set_hparams(const zero_hparams &h) { check(zero_set_hparams(e_, &h), "zero_set_hparams"); }
    void set_lr(double lr, int group = ZERO_ALL_GROUPS) {
        zero_hparams h = ZERO_HPARAMS_INIT;
        h.group = group;
        h.lr = lr;
        set_hparams(h);
    }
    void set_phase(const std::string &phase) { check(zero_set_phase(e_, phase.c_str()), "zero_set_phase"); }

    /// libzero's persistent full copy of p (zero_param_storage; below stage 3), read-only, valid until
    /// the engine dies, rewritten by step() and load(): a zero-copy alternative to host-owned params.
    template <class T = float> const T *storage(const param &p) const {
        void *buf = nullptr;
        check(zero_param_storage(e_, p.handle, &buf), "zero_param_storage");
        return static_cast<const T *>(buf);
    }
    /// Where to ADD p's gradient this micro-step.
    template <class T = float> T *grad_buffer(const param &p) {
        void *buf = nullptr;
        check(zero_grad_buffer(e_, p.handle, &buf), "zero_grad_buffer");
        return static_cast<T *>(buf);
    }
    void on_grad_ready(const param &p, void *stream = nullptr) {
        check(zero_on_grad_ready(e_, p.handle, stream), "zero_on_grad_ready");
    }
    zero_step_result step(void *stream = nullptr) {
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        a.stream = stream;
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        check(zero_step(e_, &a, &r), "zero_step");
        return r;
    }
    /// Gather params (stage 3 all-gathers); released when the guard dies.
    gather_guard gather(std::initializer_list<param> ps) { return gather(std::vector<param>(ps)); }
    gather_guard gather(const std::vector<param> &ps) {
        std::vector<zero_param *> hs;
        hs.reserve(ps.size());
        for (const param &p : ps) hs.push_back(p.handle);
        gather_guard g(nullptr, std::move(hs));
        check(zero_gather(e_, g.ps_.data(), g.ps_.size(), g.ptrs_.data()), "zero_gather");
        g.e_ = e_;
        return g;
    }
    /// Gather single layers of stacked params (zero_gather_slices, libzero >= 1.6): slices[i] is
    /// {param, layer}; get(i) points at numel / layers elements.  Stage 3 all-gathers only those slices,
    /// other stages point into the full tensor.  Released (zero_release_slices) when the guard dies.
    gather_guard gather_slices(const std::vector<std::pair<param, std::uint32_t>> &slices) {
        std::vector<zero_param *> hs;
        std::vector<std::uint32_t> ls;
        hs.reserve(slices.size());
        ls.reserve(slices.size());
        for (const auto &sl : slices) {
            hs.push_back(sl.first.handle);
            ls.push_back(sl.second);
        }
        if (ls.empty()) return gather_guard(nullptr, {}, {});
        gather_guard g(nullptr, std::move(hs), std::move(ls));
        check(zero_gather_slices(e_, g.ps_.data(), g.layers_.data(), g.ps_.size(), g.ptrs_.data()),
              "zero_gather_slices");
        g.e_ = e_;
        return g;
    }
    /// (libzero >= 1.10, ABI 1.10) Set params' values between accumulation windows (zero_params_write):
    /// DeepSpeed's GatheredParameters(modifier_rank=root).  values[i]: params[i].numel elements of its dtype
    /// (device memory on a CUDA engine), read on the rank at place `root` of each param's data-parallel
    /// group only; the other ranks may pass nullptr entries, or no values at all.  Every copy libzero keeps
    /// (shards, fp32 masters, offload tiers) and every host-owned tensor then holds the root's values on
    /// every rank; optimizer states stay.  Collective: the ranks of a group pass the same params in the same
    /// order.  Inside an accumulation window, or with params gathered, ZERO_ERR_STATE on every rank.
    ///   e.params_write({pb}, {e.rank() == 0 ? new_b.data() : nullptr}, 0);
    void params_write(const std::vector<param> &ps, const std::vector<const void *> &values, int root) {
        if (!values.empty() && values.size() != ps.size())
            throw error(ZERO_ERR_INVALID_ARGUMENT,
                        std::to_string(ps.size()) + " params but " + std::to_string(values.size()) +
                            " values (one per param, nullptr where this rank is not the root, or none)",
                        "zero_params_write");
        std::vector<zero_param *> hs;
        hs.reserve(ps.size());
        for (const param &p : ps) hs.push_back(p.handle);
        check(zero_params_write(e_, hs.data(), values.empty() ? nullptr : values.data(), hs.size(), root),
              "zero_params_write");
    }
    void save(const std::string &dir) { check(zero_save(e_, dir.c_str()), "zero_save"); }
    /// zero_save_ex (libzero >= 1.8, ABI 1.7 for the client state): a tag ("" = "step-<N>"), keep_last,
    /// and the host's own bytes saved with the checkpoint (global rank 0's; client_state() after load).
    void save(const std::string &dir, const std::string &tag, std::uint32_t keep_last = 0,
              const std::vector<unsigned char> &client_state = {}) {
        zero_save_options o = ZERO_SAVE_OPTIONS_INIT;
        o.tag = tag.empty() ? nullptr : tag.c_str();
        o.keep_last = keep_last;
        o.client_state = client_state.empty() ? nullptr : client_state.data();
        o.client_state_bytes = client_state.size();
        check(zero_save_ex(e_, dir.c_str(), &o), "zero_save_ex");
    }
    void load(const std::string &dir) { check(zero_load(e_, dir.c_str()), "zero_load"); }
    /// (libzero >= 1.9, ABI 1.8) load(dir) or, weights_only, the checkpoint's parameters alone (any world size,
    /// plugin or micro-step wrote it); the optimizer starts over: states zero, step 0, schedule from the start.
    void load(const std::string &dir, bool weights_only) {
        zero_load_options o = ZERO_LOAD_OPTIONS_INIT;
        o.weights_only = weights_only ? 1u : 0u;
        check(zero_load_ex(e_, dir.c_str(), &o), "zero_load_ex");
    }
    /// The client state of the checkpoint the last load() read (a copy; empty when it had none).
    std::vector<unsigned char> client_state() const {
        const void *data = nullptr;
        std::uint64_t n = 0;
        check(zero_client_state(e_, &data, &n), "zero_client_state");
        const auto *b = static_cast<const unsigned char *>(data);
        return n ? std::vector<unsigned char>(b, b + n) : std::vector<unsigned char>();
    }
    /// Step state and batch geometry (zero_engine_info_get, libzero >= 1.8 / ABI 1.7).
    zero_engine_info info() const {
        zero_engine_info i = ZERO_ENGINE_INFO_INIT;
        check(zero_engine_info_get(e_, &i), "zero_engine_info_get");
        return i;
    }
    zero_memory_stats memory_stats() const {
        zero_memory_stats m = ZERO_MEMORY_STATS_INIT;
        check(zero_memory_stats_get(e_, &m), "zero_memory_stats_get");
        return m;
    }

  private:
    static zero_param_desc desc(const std::string &name, const void *data, std::size_t numel, const param_options &po,
                                zero_dtype dtype) {
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name.c_str();
        d.data = data;
        d.numel = numel;
        d.dtype = dtype;
        d.device = po.device;
        d.grad = po.grad;
        d.group = po.group;
        d.flags = po.host_owned ? ZERO_PARAM_HOST_OWNED : 0u;
        d.shape = po.shape.empty() ? nullptr : po.shape.data(); // borrowed: po outlives the register call
        d.ndim = static_cast<std::uint32_t>(po.shape.size());
        return d;
    }
    void check(zero_status s, const std::string &call) const {
        if (s != ZERO_OK) throw error(s, zero_last_error(e_), call);
    }
    zero_engine *e_ = nullptr;
};

inline void gather_guard::release() {
    zero_engine *e = std::exchange(e_, nullptr);
    if (!e) return;
    zero_status s = release_call(e);
    if (s != ZERO_OK) throw error(s, zero_last_error(e), layers_.empty() ? "zero_release" : "zero_release_slices");
}

}  // namespace zero
#endif  // ZERO_HPP
