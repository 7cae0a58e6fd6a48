/* Run-time choice of the step kernel (cpuid, overridable with ZERO_SIMD)
 * and the multi-threaded driver behind zero__optim_step. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif

#include "log.h"
#include "optim_kernels.h"
#include "trace.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
/* CPUID.1:ECX.F16C directly: clang 14's __builtin_cpu_supports does not
 * know the "f16c" feature string (a compile error), gcc's does. */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

static const char *const simd_names[ZERO__SIMD_COUNT] = {"scalar", "avx2", "avx512"};

const char *zero__simd_name(zero__simd v) {
    return (unsigned)v < ZERO__SIMD_COUNT ? simd_names[v] : "unknown";
}

int zero__simd_available(zero__simd v) {
    switch (v) {
    case ZERO__SIMD_SCALAR: return 1;
#if defined(__x86_64__) || defined(__i386__)
    case ZERO__SIMD_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && has_f16c();
    case ZERO__SIMD_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") != 0;
#endif
    default: return 0;
    }
}

zero__step_kernel zero__simd_kernel(zero__simd v) {
    if (!zero__simd_available(v)) return NULL;
    switch (v) {
    case ZERO__SIMD_AVX2: return zero__optim_step_avx2;
    case ZERO__SIMD_AVX512: return zero__optim_step_avx512;
    default: return zero__optim_step_scalar;
    }
}

static pthread_once_t active_once = PTHREAD_ONCE_INIT;
static zero__simd active_variant = ZERO__SIMD_SCALAR;

static void choose_active(void) {
    zero__simd best = ZERO__SIMD_SCALAR;
    for (int v = ZERO__SIMD_COUNT - 1; v > 0; --v)
        if (zero__simd_available((zero__simd)v)) {
            best = (zero__simd)v;
            break;
        }
    active_variant = best;
    const char *env = getenv("ZERO_SIMD");
    if (!env || !*env) return;
    for (int v = 0; v < ZERO__SIMD_COUNT; ++v) {
        if (strcmp(env, simd_names[v]) != 0) continue;
        if (zero__simd_available((zero__simd)v))
            active_variant = (zero__simd)v;
        else
            zero__log(NULL, ZERO_LOG_WARN, "ZERO_SIMD=%s: this CPU cannot run it, using %s", env,
                      simd_names[best]);
        return;
    }
    zero__log(NULL, ZERO_LOG_WARN, "ZERO_SIMD=%s is not one of scalar, avx2, avx512; using %s", env,
              simd_names[best]);
}

zero__simd zero__simd_active(void) {
    pthread_once(&active_once, choose_active);
    return active_variant;
}

/* Below this many elements per thread, waking a thread team costs more
 * than it saves (and small steps are common: one call per owned range). */
#define PAR_MIN_PER_THREAD ((size_t)1 << 17)

static void run_kernel(zero__step_kernel kern, const zero__step_args *a, size_t n) {
#if defined(ZERO_HAVE_OPENMP)
    int want = zero__optim_threads(); /* OMP_NUM_THREADS, else CPUs per rank on this node */
    size_t cap = n / PAR_MIN_PER_THREAD;
    if (cap < (size_t)want) want = (int)(cap > 0 ? cap : 1);
    if (want > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(want)
        {
            size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
            /* chunks are whole cache lines of every stream (64 elements
             * covers a line of the 2-byte copy-out too): no false sharing */
            size_t chunk = ((n + nt - 1) / nt + 63) & ~(size_t)63;
            size_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
            if (t > 0 && ZERO__TRACE_ON()) zero__trace_thread_name("optim worker");
            ZERO_TRACE_SCOPE("optim.tiles", "optim", "elements", hi > lo ? hi - lo : 0, "tiles",
                             hi > lo ? (hi - lo + ZERO_OPTIM_TILE - 1) / ZERO_OPTIM_TILE : 0);
            if (lo < hi) kern(a, lo, hi);
        }
        return;
    }
#endif
    ZERO_TRACE_SCOPE("optim.tiles", "optim", "elements", n, "tiles", (n + ZERO_OPTIM_TILE - 1) / ZERO_OPTIM_TILE);
    kern(a, 0, n);
}

void zero__optim_step_variant(zero__simd v, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                              float *const *state, const float *grad, float grad_mul, void *param_out,
                              zero_dtype out_dt, size_t n) {
    if (n == 0 || !s || !master || !grad || !zero__optim_supported(k)) return;
    uint32_t ns = zero__optim_state_count(k, s->momentum);
    if (ns > 0 && (!state || !state[0] || (ns > 1 && !state[1]))) return;
    zero__step_args a;
    a.kind = k;
    a.s = *s;
    a.master = master;
    a.state0 = ns > 0 ? state[0] : NULL;
    a.state1 = ns > 1 ? state[1] : NULL;
    a.grad = grad;
    a.grad_mul = grad_mul;
    a.out = param_out;
    a.out_dt = out_dt;
    zero__step_kernel kern = zero__simd_kernel(v);
    run_kernel(kern ? kern : zero__optim_step_scalar, &a, n);
}
