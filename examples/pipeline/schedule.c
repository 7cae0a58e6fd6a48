/* The pipeline schedules: the order in which one stage runs the forward and
 * backward passes of a step's M micro-batches.
 *
 * 1F1B (PipeDream-flush, what DeepSpeed and Megatron run): stage s first
 * runs min(P - s - 1, M) forwards to fill the pipe, then alternates one
 * forward and one backward, then drains the remaining backwards.  At most
 * P - s micro-batches' activations are alive on stage s.
 * GPipe: all M forwards, then all M backwards (M activations alive).
 * Both give the same gradients: the schedule only reorders independent
 * micro-batches, and libzero sums them in a full local buffer with no
 * communication until the last one (stage1-pp).
 *
 * Sends are nonblocking (completed at the end of the step) and receives
 * blocking: with 1F1B, stage s may be sending micro-batch m+1's activation
 * while stage s+1 sends m's gradient back; blocking sends could deadlock
 * there. */
#include <stdio.h>

#include "pipe.h"

static void fill(pipe_trainer *t, pipe_slot *s, const demo_corpus *c, uint64_t seed, long step, int m) {
    /* Global micro-step step*M + m, this DP rank's share of its samples:
     * the same draw the unpipelined demo makes on DP rank dp_rank. */
    uint64_t micro_step = (uint64_t)step * (uint64_t)t->nmicro + (uint64_t)m;
    demo_batch_fill(c, t->d.ctx, seed, micro_step, t->dp_rank * t->micro, t->micro, s->tok, s->tgt);
}

static void forward(pipe_trainer *t, const demo_corpus *c, uint64_t seed, long step, int m) {
    pipe_slot *s = &t->slots[m];
    fill(t, s, c, seed, step, m);
    s->loss = 0.0;
    pipe_forward(t, s, t->micro, m, zero_loss_scale(t->e));
}

static void backward(pipe_trainer *t, int m, zero_step_result *res) {
    pipe_backward(t, &t->slots[m], t->micro, m);
    PIPE_ZCALL(t, zero_step(t->e, NULL, res));
    if (res->boundary != (m == t->nmicro - 1)) {
        char msg[160];
        snprintf(msg, sizeof msg, "boundary %d after micro-batch %d of %d: gradient_accumulation_steps must be M",
                 res->boundary, m + 1, t->nmicro);
        pipe_die(t, "zero_step", msg);
    }
}

double pipe_train_step(pipe_trainer *t, const demo_corpus *c, uint64_t seed, long step, zero_step_result *res) {
    const int M = t->nmicro;
    int warm = t->schedule == PIPE_GPIPE ? M : t->stages - t->stage - 1;
    if (warm > M) warm = M;
    for (int m = 0; m < warm; ++m) forward(t, c, seed, step, m);
    for (int i = 0; i < M - warm; ++i) {
        forward(t, c, seed, step, warm + i);
        backward(t, i, res);
    }
    for (int m = M - warm; m < M; ++m) backward(t, m, res);
    pipe_wait_sends(t);
    double sum = 0.0;
    for (int m = 0; m < M; ++m) sum += t->slots[m].loss;
    return sum;
}
