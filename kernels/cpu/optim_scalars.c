/* Per-step optimizer scalars and state counts (see optim.h). */
#include <math.h>

#include "optim.h"

uint32_t zero__optim_state_count(zero_optim_kind k, double momentum) {
    switch (k) {
    case ZERO_OPTIM_ADAMW:
    case ZERO_OPTIM_ADAM:
    case ZERO_OPTIM_LAMB: return 2;
    case ZERO_OPTIM_SGD: return momentum != 0.0 ? 1 : 0;
    case ZERO_OPTIM_LION:
    case ZERO_OPTIM_ADAGRAD: return 1;
    default: return 0;
    }
}

int zero__optim_supported(zero_optim_kind k) {
    return k == ZERO_OPTIM_ADAMW || k == ZERO_OPTIM_ADAM || k == ZERO_OPTIM_SGD || k == ZERO_OPTIM_LION ||
           k == ZERO_OPTIM_ADAGRAD;
}

zero_optim_scalars zero__optim_scalars(zero_optim_kind k, double lr, double beta1, double beta2,
                                       double eps, double weight_decay, double momentum, int nesterov,
                                       int bias_correction, uint64_t t) {
    (void)k;
    zero_optim_scalars s;
    s.lr = (float)lr;
    s.beta1 = (float)beta1;
    s.beta2 = (float)beta2;
    s.eps = (float)eps;
    s.weight_decay = (float)weight_decay;
    s.momentum = (float)momentum;
    s.nesterov = nesterov != 0;
    s.first_step = t <= 1;
    /* Every derived scalar is computed in double from the configured values,
     * as torch.optim computes it in Python floats, and rounded once to fp32:
     *   1 - beta1, 1 - beta2, 1 - lr*weight_decay (torch.optim.AdamW,
     *   lion-pytorch), step_size = lr / (1 - beta1^t) and
     *   sqrt(1 - beta2^t) (torch.optim.Adam/AdamW).
     * LAMB keeps its reciprocal corrections bc1 and bc2_sqrt.  A value
     * beyond the fp32 range rounds to +-Inf (IEEE 754 conversion). */
    s.one_minus_beta1 = (float)(1.0 - beta1);
    s.one_minus_beta2 = (float)(1.0 - beta2);
    s.decay = (float)(1.0 - lr * weight_decay);
    if (bias_correction && t >= 1) {
        double td = (double)t;
        double c1 = 1.0 - pow(beta1, td), c2 = 1.0 - pow(beta2, td);
        s.step_size = (float)(lr / c1);
        s.bc2_root = (float)sqrt(c2);
        s.bc1 = (float)(1.0 / c1);
        s.bc2_sqrt = (float)(1.0 / sqrt(c2));
    } else {
        s.step_size = s.lr;
        s.bc2_root = 1.0f;
        s.bc1 = 1.0f;
        s.bc2_sqrt = 1.0f;
    }
    return s;
}
