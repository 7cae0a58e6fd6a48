/* The vector step loops, written once for every x86 SIMD width.
 *
 * A template, not an ordinary header: optim_step_avx2.c and
 * optim_step_avx512.c each define the vector vocabulary below and then
 * include this file, which expands into that ISA's loops and its entry
 * point.  Each macro maps to exactly one intrinsic, so every ISA runs the
 * same IEEE operations in the same order as optim_math.h (mul, add, sqrt,
 * div, never an FMA): bitwise equal to the scalar kernel, which the variant
 * tests check.  No include guard on purpose (included once per ISA file).
 * Every function here is reentrant and thread-safe: it reads and writes only
 * the arrays of its zero__step_args (borrowed for the call; the caller
 * keeps ranges of concurrent calls disjoint) and allocates nothing.
 *
 * The includer defines:
 *   ZS_V                  vector of ZS_W floats (__m256, __m512)
 *   ZS_W                  its width in elements
 *   ZS_FN, ZS_INLINE      target attributes of the entry point / the loops
 *   ZS_ENTRY              the entry point's name (zero__optim_step_<isa>)
 *   ZS_SET1(x) ZS_LOAD(p) ZS_STORE(p, v) ZS_ADD ZS_SUB ZS_MUL ZS_DIV ZS_SQRT
 *   enum OUT_NONE/OUT_F32/OUT_BF16/OUT_F16 and
 *   store_out(void *out, int kind, size_t i, ZS_V p): the copy-out in the
 *     model dtype (the only ISA-specific logic: bf16/fp16 narrowing). */

/* AdamW (decoupled) and Adam (L2) in one body; `adamw` and `l2` are
 * compile-time constants at each call site. */
ZS_INLINE size_t adam_loop(const zero__step_args *a, size_t lo, size_t hi, int adamw, int l2, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const ZS_V gm = ZS_SET1(a->grad_mul);
    const ZS_V decay = ZS_SET1(s->decay);
    const ZS_V wd = ZS_SET1(s->weight_decay);
    const ZS_V b1 = ZS_SET1(s->beta1), omb1 = ZS_SET1(s->one_minus_beta1);
    const ZS_V b2 = ZS_SET1(s->beta2), omb2 = ZS_SET1(s->one_minus_beta2);
    const ZS_V eps = ZS_SET1(s->eps), step = ZS_SET1(s->step_size), bc2r = ZS_SET1(s->bc2_root);
    float *restrict pp = a->master, *restrict mp = a->state0, *restrict vp = a->state1;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + ZS_W <= hi; i += ZS_W) {
        ZS_V g = ZS_MUL(ZS_LOAD(gp + i), gm);
        ZS_V p = ZS_LOAD(pp + i);
        if (l2) g = ZS_ADD(g, ZS_MUL(wd, p));
        if (adamw) p = ZS_MUL(p, decay);
        ZS_V m = ZS_ADD(ZS_MUL(b1, ZS_LOAD(mp + i)), ZS_MUL(omb1, g));
        ZS_V v = ZS_ADD(ZS_MUL(b2, ZS_LOAD(vp + i)), ZS_MUL(ZS_MUL(omb2, g), g));
        ZS_V denom = ZS_ADD(ZS_DIV(ZS_SQRT(v), bc2r), eps);
        p = ZS_SUB(p, ZS_DIV(ZS_MUL(step, m), denom));
        ZS_STORE(pp + i, p);
        ZS_STORE(mp + i, m);
        ZS_STORE(vp + i, v);
        store_out(a->out, out_kind, i, p);
    }
    return i;
}

/* SGD; momentum / nesterov / first_step / decay are uniform per call. */
ZS_INLINE size_t sgd_loop(const zero__step_args *a, size_t lo, size_t hi, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const ZS_V gm = ZS_SET1(a->grad_mul), wd = ZS_SET1(s->weight_decay);
    const ZS_V mom = ZS_SET1(s->momentum), lr = ZS_SET1(s->lr);
    const int use_wd = s->weight_decay != 0.0f, use_mom = s->momentum != 0.0f;
    float *restrict pp = a->master, *restrict bp = a->state0;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + ZS_W <= hi; i += ZS_W) {
        ZS_V p = ZS_LOAD(pp + i);
        ZS_V d = ZS_MUL(ZS_LOAD(gp + i), gm);
        if (use_wd) d = ZS_ADD(d, ZS_MUL(wd, p));
        if (use_mom) {
            ZS_V b = s->first_step ? d : ZS_ADD(ZS_MUL(mom, ZS_LOAD(bp + i)), d);
            ZS_STORE(bp + i, b);
            d = s->nesterov ? ZS_ADD(d, ZS_MUL(mom, b)) : b;
        }
        p = ZS_SUB(p, ZS_MUL(lr, d));
        ZS_STORE(pp + i, p);
        store_out(a->out, out_kind, i, p);
    }
    return i;
}

static int out_kind_of(const zero__step_args *a) {
    if (!a->out) return OUT_NONE;
    switch (a->out_dt) {
    case ZERO_DTYPE_F32: return a->out == (void *)a->master ? OUT_NONE : OUT_F32;
    case ZERO_DTYPE_BF16: return OUT_BF16;
    case ZERO_DTYPE_F16: return OUT_F16;
    default: return OUT_NONE;
    }
}

/* Expand a loop for each copy-out kind so each gets its own tight code. */
#define BY_OUT(call_with_kind)                                      \
    switch (ok) {                                                   \
    case OUT_F32: done = call_with_kind(OUT_F32); break;            \
    case OUT_BF16: done = call_with_kind(OUT_BF16); break;          \
    case OUT_F16: done = call_with_kind(OUT_F16); break;            \
    default: done = call_with_kind(OUT_NONE); break;                \
    }

ZS_FN void ZS_ENTRY(const zero__step_args *a, size_t lo, size_t hi) {
    const int ok = out_kind_of(a);
    const int l2 = a->s.weight_decay != 0.0f;
    size_t done = lo;
    switch (a->kind) {
    case ZERO_OPTIM_ADAMW:
#define ADAMW(k) adam_loop(a, lo, hi, 1, 0, k)
        BY_OUT(ADAMW)
        break;
    case ZERO_OPTIM_ADAM:
        if (l2) {
#define ADAM_L2(k) adam_loop(a, lo, hi, 0, 1, k)
            BY_OUT(ADAM_L2)
        } else {
#define ADAM_NOWD(k) adam_loop(a, lo, hi, 0, 0, k)
            BY_OUT(ADAM_NOWD)
        }
        break;
    case ZERO_OPTIM_SGD:
#define SGD(k) sgd_loop(a, lo, hi, k)
        BY_OUT(SGD)
        break;
    default: break; /* Lion, Adagrad: scalar below */
    }
    if (done < hi) zero__optim_step_scalar(a, done, hi);
}
