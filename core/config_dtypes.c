/* data_types.grad_accum_dtype and communication_data_type (DeepSpeed's keys).
 *
 * Why fp32 is libzero's default for both, where DeepSpeed defaults to the
 * model dtype for fp16: stage 0/1 accumulate a window's gradient before the
 * reduction and stage 2/3 after it, so 16-bit accumulation rounds (and, for
 * fp16, overflows) differently per stage, and swapping the plugin changes
 * the run.  With fp32 accumulation every stage forms the same fp32 sums and
 * takes the same overflow decisions.  Setting both to the model dtype gives
 * the 1.0 behaviour (16-bit gradient buffers, half the gradient memory).
 * communication_data_type fp16 / bf16 with fp32 accumulation (issue 14)
 * sends the gradients over the wire in 16 bits.  docs/precision.md has the
 * table. */
#include <string.h>

#include "config_internal.h"

static const zero__cfg_key data_types_keys[] = {
    {"grad_accum_dtype", ZERO__KEY_USED, NULL, NULL},
    {NULL, 0, NULL, NULL}};

static const char *dtype_text(zero_dtype dt) {
    return dt == ZERO_DTYPE_F16 ? "fp16" : dt == ZERO_DTYPE_BF16 ? "bf16" : "fp32";
}

/* obj[key] as a dtype name (DeepSpeed's spellings): 1 found, 0 absent, -1 error. */
static int read_dtype(zero__cfg_ctx *ctx, const json_t *obj, const char *section, const char *key, zero_dtype *out) {
    static const struct { const char *name; zero_dtype dt; } names[] = {
        {"fp32", ZERO_DTYPE_F32}, {"float32", ZERO_DTYPE_F32}, {"fp16", ZERO_DTYPE_F16},
        {"float16", ZERO_DTYPE_F16}, {"bf16", ZERO_DTYPE_BF16}, {"bfp16", ZERO_DTYPE_BF16},
        {"bfloat16", ZERO_DTYPE_BF16}};
    const char *v = NULL;
    char path[256];
    int r = zero__cfg_str(ctx, obj, section, key, &v);
    if (r <= 0) return r;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(v, names[i].name) == 0) {
            *out = names[i].dt;
            return 1;
        }
    zero__cfg_join(path, sizeof path, section, key);
    return zero__cfg_fail(ctx, "%s: got \"%s\", expected one of fp32, fp16, bf16", path, v);
}

int zero__cfg_parse_dtypes(zero__cfg_ctx *ctx, const json_t *root, zero_run_config *rc) {
    const json_t *dt = NULL;
    zero_dtype accum = ZERO_DTYPE_F32, comm = ZERO_DTYPE_F32;
    int have_comm;
    if (zero__cfg_obj(ctx, root, "", "data_types", &dt) < 0) return -1;
    zero__cfg_check_keys(ctx, dt, "data_types", data_types_keys);
    if (read_dtype(ctx, dt, "data_types", "grad_accum_dtype", &accum) < 0 ||
        (have_comm = read_dtype(ctx, root, "", "communication_data_type", &comm)) < 0)
        return -1;
    if (!have_comm) comm = accum;
    /* A 16-bit buffer of another 16-bit format than the model's would round
     * every gradient twice for no saving: fp32 or the model dtype only. */
    if (accum != ZERO_DTYPE_F32 && accum != rc->model_dtype)
        return zero__cfg_fail(ctx, "data_types.grad_accum_dtype: got \"%s\" with a %s model, expected fp32 or %s",
                              dtype_text(accum), dtype_text(rc->model_dtype), dtype_text(rc->model_dtype));
    /* fp32 accumulation: the wire may be 16-bit (issue 14: bf16 or fp16,
     * whatever the model dtype; buckets.c wire_setup), half the bytes of
     * fp32, summed in that dtype as DeepSpeed reduces in
     * communication_data_type, and widened into the fp32 accumulator.
     * 16-bit accumulation: the bucket engine forms fp32 sums and rounds
     * them once into the accumulator's dtype, which is what travels back;
     * another communication dtype would need a second buffer per bucket,
     * which no stage has. */
    if (accum != ZERO_DTYPE_F32 && comm != accum)
        return zero__cfg_fail(ctx, "communication_data_type: got \"%s\" while data_types.grad_accum_dtype is \"%s\", "
                                   "expected \"%s\" (with 16-bit accumulation libzero reduces into the accumulation "
                                   "dtype; fp32 accumulation takes fp32, fp16 or bf16)",
                              dtype_text(comm), dtype_text(accum), dtype_text(accum));
    rc->grad_accum_dtype = accum;
    rc->comm_dtype = comm;
    return 0;
}
