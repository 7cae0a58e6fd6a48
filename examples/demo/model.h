/* The demo's character-level language model: forward and backward by hand.
 *
 *   bytes x[t-k..t-1] --embed--> x0 (k*E) --dense+tanh--> h1 --dense+tanh--> h2
 *                     --dense--> logits (256) --softmax/cross-entropy--> loss
 *
 * The math knows nothing about libzero: every function takes the parameter
 * and gradient pointers it needs, so the trainer can bracket each layer with
 * zero_gather/zero_release and hand gradients to zero_grad_buffer, and the
 * finite-difference test can drive the same code on plain arrays.
 *
 * The element type is a compile-time parameter so that the gradient-check
 * test can also build this file in double precision (tight finite
 * differences) next to the float build the trainer uses:
 *   DEMO_REAL   element type (default float)
 *   DEMO_SUFFIX appended to every function name (default empty)
 * The first part of this header (dims, param ids) is type-independent and
 * include-guarded; the function declarations may be included once per type.
 *
 * Thread-safety: all functions are pure over their arguments (no globals);
 * concurrent calls on disjoint outputs are safe.  Nothing here allocates
 * except where stated; callers own every buffer. */
#ifndef DEMO_MODEL_COMMON_H
#define DEMO_MODEL_COMMON_H
#include <stddef.h>
#include <stdint.h>

#define DEMO_VOCAB 256 /* byte-level vocabulary */

/* Shape of the model. */
typedef struct demo_dims {
    int ctx;     /* k: previous characters seen */
    int embed;   /* E: embedding width per character */
    int hidden1; /* width of the first tanh layer */
    int hidden2; /* width of the second tanh layer */
    int vocab;   /* output classes (DEMO_VOCAB) */
} demo_dims;

/* Parameters in registration order (= forward order). Dense weights are
 * stored [in][out] so that the forward pass and the weight gradient are
 * contiguous axpy loops over `out`. */
enum {
    DEMO_P_EMB = 0, /* [vocab][embed] */
    DEMO_P_W1,      /* [ctx*embed][hidden1] */
    DEMO_P_B1,      /* [hidden1] */
    DEMO_P_W2,      /* [hidden1][hidden2] */
    DEMO_P_B2,      /* [hidden2] */
    DEMO_P_W3,      /* [hidden2][vocab] */
    DEMO_P_B3,      /* [vocab] */
    DEMO_NPARAMS
};

/* Layers as the trainer gathers them: layer l uses params
 * [demo_layer_first[l], demo_layer_first[l] + demo_layer_count[l]). */
enum { DEMO_NLAYERS = 4 };
static const int demo_layer_first[DEMO_NLAYERS] = {DEMO_P_EMB, DEMO_P_W1, DEMO_P_W2, DEMO_P_W3};
static const int demo_layer_count[DEMO_NLAYERS] = {1, 2, 2, 2};

/* Element count of parameter `which` (0 for an unknown id). */
static inline uint64_t demo_param_numel(const demo_dims *d, int which) {
    switch (which) {
    case DEMO_P_EMB: return (uint64_t)d->vocab * (uint64_t)d->embed;
    case DEMO_P_W1: return (uint64_t)d->ctx * (uint64_t)d->embed * (uint64_t)d->hidden1;
    case DEMO_P_B1: return (uint64_t)d->hidden1;
    case DEMO_P_W2: return (uint64_t)d->hidden1 * (uint64_t)d->hidden2;
    case DEMO_P_B2: return (uint64_t)d->hidden2;
    case DEMO_P_W3: return (uint64_t)d->hidden2 * (uint64_t)d->vocab;
    case DEMO_P_B3: return (uint64_t)d->vocab;
    default: return 0;
    }
}

/* The shape of parameter `which` as stored ([in][out] for the dense
 * weights, above) into dims[0..1]; returns ndim (libzero records it in
 * checkpoints: zero-ckpt consolidate writes each tensor with it). */
static inline uint32_t demo_param_shape(const demo_dims *d, int which, uint64_t dims[2]) {
    switch (which) {
    case DEMO_P_EMB: dims[0] = (uint64_t)d->vocab, dims[1] = (uint64_t)d->embed; return 2;
    case DEMO_P_W1: dims[0] = (uint64_t)d->ctx * (uint64_t)d->embed, dims[1] = (uint64_t)d->hidden1; return 2;
    case DEMO_P_W2: dims[0] = (uint64_t)d->hidden1, dims[1] = (uint64_t)d->hidden2; return 2;
    case DEMO_P_W3: dims[0] = (uint64_t)d->hidden2, dims[1] = (uint64_t)d->vocab; return 2;
    default: dims[0] = demo_param_numel(d, which); return 1;
    }
}

/* Stable parameter names (used as libzero param names and in summaries). */
static inline const char *demo_param_name(int which) {
    static const char *const names[DEMO_NPARAMS] = {"embed.weight", "hidden1.weight", "hidden1.bias",
                                                    "hidden2.weight", "hidden2.bias", "out.weight",
                                                    "out.bias"};
    return (which >= 0 && which < DEMO_NPARAMS) ? names[which] : "?";
}
#endif /* DEMO_MODEL_COMMON_H */

/* ---- type-dependent part: may be included once per DEMO_REAL ---------- */
#ifndef DEMO_REAL
#define DEMO_REAL float
#endif
#ifndef DEMO_SUFFIX
#define DEMO_SUFFIX
#endif
#define DEMO_CAT2_(a, b) a##b
#define DEMO_CAT_(a, b) DEMO_CAT2_(a, b)
#define DEMO_FN(name) DEMO_CAT_(name, DEMO_SUFFIX)

/* Deterministic initial values for parameter `which` (numel elements) from
 * `seed`: identical on every rank, so every world size starts from the same
 * model.  Weights ~ U(-a, a) with variance 1/fan_in (output layer scaled
 * down so the first loss is close to ln 256), biases 0, embeddings U(-1,1). */
void DEMO_FN(demo_init_param)(const demo_dims *d, int which, uint64_t seed, DEMO_REAL *out);

/* x0[b][c*E + e] = emb[tok[b*ctx + c]][e]. */
void DEMO_FN(demo_embed_forward)(const demo_dims *d, int batch, const uint8_t *tok,
                                 const DEMO_REAL *emb, DEMO_REAL *x0);
/* demb[tok][e] += dx0[b][c*E + e]: ADDS into demb (libzero's grad buffers
 * may hold earlier micro-batches). Does not read the embedding itself. */
void DEMO_FN(demo_embed_backward)(const demo_dims *d, int batch, const uint8_t *tok,
                                  const DEMO_REAL *dx0, DEMO_REAL *demb);

/* y[b][o] = act(bias[o] + sum_i x[b][i] w[i][o]); act = tanh if `tanh_act`. */
void DEMO_FN(demo_dense_forward)(int batch, int in, int out, const DEMO_REAL *x, const DEMO_REAL *w,
                                 const DEMO_REAL *bias, DEMO_REAL *y, int tanh_act);
/* First half of a dense layer's backward: the parameter gradients.
 * dy (batch x out) holds dL/dy on entry; with `tanh_act` it is turned into
 * dL/d(pre-activation) in place using y (the forward output).  Then
 * dw += x^T dy and db += sum_b dy (ADDED, each element once, so an
 * accumulated buffer sees one rounding per micro-batch).  `scratch` holds
 * `out` elements.  After this call the layer's gradients are final and the
 * trainer may fire zero_on_grad_ready while it computes dx. */
void DEMO_FN(demo_dense_backward_params)(int batch, int in, int out, const DEMO_REAL *x,
                                         const DEMO_REAL *y, DEMO_REAL *dy, DEMO_REAL *dw,
                                         DEMO_REAL *db, int tanh_act, DEMO_REAL *scratch);
/* Second half: dx[b][i] = sum_o dy[b][o] w[i][o] (overwrites dx), with dy
 * as left by demo_dense_backward_params. */
void DEMO_FN(demo_dense_backward_input)(int batch, int in, int out, const DEMO_REAL *dy,
                                        const DEMO_REAL *w, DEMO_REAL *dx);

/* Mean cross-entropy of softmax(logits) against `targets` over the batch,
 * accumulated in double.  If dlogits is non-NULL it receives
 * grad_scale * dL/dlogits = grad_scale * (softmax - onehot) / batch
 * (grad_scale is the fp16 loss scale; 1 otherwise).  dlogits may alias
 * logits. */
double DEMO_FN(demo_softmax_xent)(int batch, int vocab, const DEMO_REAL *logits, const uint8_t *targets,
                                  DEMO_REAL *dlogits, double grad_scale);
