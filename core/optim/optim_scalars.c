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
    /* The corrections are computed in double from the configured betas (as
     * torch does in Python floats) and rounded once to fp32. */
    if (bias_correction && t >= 1) {
        double td = (double)t;
        s.bc1 = (float)(1.0 / (1.0 - pow(beta1, td)));
        s.bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(beta2, td)));
    } else {
        s.bc1 = 1.0f;
        s.bc2_sqrt = 1.0f;
    }
    return s;
}
