/* One pipeline stage: its layers, params, and the forward/backward of one
 * micro-batch with the activation exchange (see pipe.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"

void pipe_die(pipe_trainer *t, const char *what, const char *detail) {
    fprintf(stderr, "[rank %d] %s failed: %s\n", t->grank, what, detail ? detail : "");
    MPI_Abort(t->comm, 1);
}

static void *xcalloc(pipe_trainer *t, size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) pipe_die(t, "calloc", "out of memory");
    return p;
}

/* Earlier stages take the remainder: stage s starts at ceil(s * L / P). */
void pipe_layers_of_stage(int stages, int s, int *lo, int *hi) {
    *lo = (s * DEMO_NLAYERS + stages - 1) / stages;
    *hi = ((s + 1) * DEMO_NLAYERS + stages - 1) / stages;
}

int pipe_stage_of_layer(int stages, int l) {
    for (int s = 0; s < stages; ++s) {
        int lo, hi;
        pipe_layers_of_stage(stages, s, &lo, &hi);
        if (l >= lo && l < hi) return s;
    }
    return -1;
}

int pipe_stage_of_param(int stages, int k) {
    for (int l = 0; l < DEMO_NLAYERS; ++l)
        if (k >= demo_layer_first[l] && k < demo_layer_first[l] + demo_layer_count[l])
            return pipe_stage_of_layer(stages, l);
    return -1;
}

int pipe_act_width(const demo_dims *d, int i) {
    switch (i) {
    case 1: return d->ctx * d->embed;
    case 2: return d->hidden1;
    case 3: return d->hidden2;
    case 4: return d->vocab;
    default: return 0;
    }
}

void pipe_buffers_alloc(pipe_trainer *t, int cap) {
    const int nslots = t->nmicro + 1;
    int widest = 0;
    for (int i = 1; i < PIPE_NACT; ++i)
        if (pipe_act_width(&t->d, i) > widest) widest = pipe_act_width(&t->d, i);
    t->cap = cap;
    t->slots = xcalloc(t, (size_t)nslots, sizeof *t->slots);
    for (int k = 0; k < nslots; ++k) {
        pipe_slot *s = &t->slots[k];
        s->tok = xcalloc(t, (size_t)cap * t->d.ctx, 1);
        s->tgt = xcalloc(t, (size_t)cap, 1);
        for (int i = 1; i < PIPE_NACT; ++i) {
            s->act[i] = xcalloc(t, (size_t)cap * pipe_act_width(&t->d, i), sizeof(float));
            s->grad[i] = i == DEMO_NLAYERS ? s->act[i]
                                           : xcalloc(t, (size_t)cap * pipe_act_width(&t->d, i), sizeof(float));
        }
    }
    t->scratch = xcalloc(t, (size_t)widest, sizeof(float));
    t->reqs_cap = 2 * nslots;
    t->reqs = xcalloc(t, (size_t)t->reqs_cap, sizeof *t->reqs);
}

void pipe_buffers_free(pipe_trainer *t) {
    for (int k = 0; t->slots && k < t->nmicro + 1; ++k) {
        pipe_slot *s = &t->slots[k];
        free(s->tok);
        free(s->tgt);
        for (int i = 1; i < PIPE_NACT; ++i) {
            if (s->grad[i] != s->act[i]) free(s->grad[i]);
            free(s->act[i]);
        }
    }
    free(t->slots);
    free(t->scratch);
    free(t->reqs);
    t->slots = NULL;
}

void pipe_register_params(pipe_trainer *t, uint64_t seed) {
    float *init[DEMO_NPARAMS] = {0};
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        if (pipe_stage_of_param(t->stages, k) != t->stage) continue;
        uint64_t n = demo_param_numel(&t->d, k);
        init[k] = xcalloc(t, n, sizeof(float));
        /* The same values the unpipelined demo starts from: init depends
         * only on (seed, param id). */
        demo_init_param(&t->d, k, seed, init[k]);
        zero_param_desc desc = ZERO_PARAM_DESC_INIT;
        desc.name = demo_param_name(k);
        desc.data = init[k];
        desc.numel = n;
        desc.dtype = ZERO_DTYPE_F32;
        PIPE_ZCALL(t, zero_register_param(t->e, &desc, &t->p[k]));
    }
    PIPE_ZCALL(t, zero_params_done(t->e));
    for (int k = 0; k < DEMO_NPARAMS; ++k) free(init[k]);
}

/* ---- point-to-point ----------------------------------------------------- */

static void send_async(pipe_trainer *t, const float *buf, int n, int dst, int tag) {
    if (t->nreq == t->reqs_cap) pipe_die(t, "send_async", "too many sends in flight");
    MPI_Isend(buf, n, MPI_FLOAT, dst, tag, t->comm, &t->reqs[t->nreq++]);
}

static void recv_block(pipe_trainer *t, float *buf, int n, int src, int tag) {
    MPI_Recv(buf, n, MPI_FLOAT, src, tag, t->comm, MPI_STATUS_IGNORE);
}

void pipe_wait_sends(pipe_trainer *t) {
    MPI_Waitall(t->nreq, t->reqs, MPI_STATUSES_IGNORE);
    t->nreq = 0;
}

/* ---- layers ------------------------------------------------------------- */

static void layer_gather(pipe_trainer *t, int l, float **w) {
    void *ptrs[2];
    PIPE_ZCALL(t, zero_gather(t->e, &t->p[demo_layer_first[l]], (size_t)demo_layer_count[l], ptrs));
    for (int i = 0; i < demo_layer_count[l]; ++i) w[i] = ptrs[i];
}

static void layer_release(pipe_trainer *t, int l) {
    PIPE_ZCALL(t, zero_release(t->e, &t->p[demo_layer_first[l]], (size_t)demo_layer_count[l]));
}

/* act[l+1] = layer_l(act[l]) for batch samples. */
static void layer_forward(pipe_trainer *t, pipe_slot *s, int l, int batch) {
    /* Initialized: layer_gather fills only demo_layer_count[l] entries, which
     * the optimizer cannot see through PIPE_ZCALL's error path. */
    float *w[2] = {NULL, NULL};
    layer_gather(t, l, w);
    if (l == 0)
        demo_embed_forward(&t->d, batch, s->tok, w[0], s->act[1]);
    else
        demo_dense_forward(batch, pipe_act_width(&t->d, l), pipe_act_width(&t->d, l + 1), s->act[l], w[0], w[1],
                           s->act[l + 1], l < DEMO_NLAYERS - 1);
    layer_release(t, l);
}

/* Gradients of layer l's params from grad[l+1]; grad[l] for l >= 1.  The
 * params' gradients go to libzero as soon as they are final, before dx. */
static void layer_backward(pipe_trainer *t, pipe_slot *s, int l, int batch) {
    if (l == 0) {
        /* The embedding's backward reads only token ids: no gather. */
        void *ge;
        PIPE_ZCALL(t, zero_grad_buffer(t->e, t->p[DEMO_P_EMB], &ge));
        demo_embed_backward(&t->d, batch, s->tok, s->grad[1], ge);
        PIPE_ZCALL(t, zero_on_grad_ready(t->e, t->p[DEMO_P_EMB], NULL));
        return;
    }
    const int in = pipe_act_width(&t->d, l), out = pipe_act_width(&t->d, l + 1), tanh_act = l < DEMO_NLAYERS - 1;
    zero_param *wp = t->p[demo_layer_first[l]], *bp = t->p[demo_layer_first[l] + 1];
    float *w[2] = {NULL, NULL}; /* see layer_forward */
    void *gw, *gb;
    layer_gather(t, l, w);
    PIPE_ZCALL(t, zero_grad_buffer(t->e, wp, &gw));
    PIPE_ZCALL(t, zero_grad_buffer(t->e, bp, &gb));
    demo_dense_backward_params(batch, in, out, s->act[l], tanh_act ? s->act[l + 1] : NULL, s->grad[l + 1], gw, gb,
                               tanh_act, t->scratch);
    PIPE_ZCALL(t, zero_on_grad_ready(t->e, wp, NULL));
    PIPE_ZCALL(t, zero_on_grad_ready(t->e, bp, NULL));
    demo_dense_backward_input(batch, in, out, s->grad[l + 1], w[0], s->grad[l]);
    layer_release(t, l);
}

/* Tags: forward activations even, backward gradients odd, so a forward and
 * a backward message between the same two ranks can never be confused. */
void pipe_forward(pipe_trainer *t, pipe_slot *s, int batch, int tag, double grad_scale) {
    const int lo = t->layer_lo, hi = t->layer_hi;
    if (t->prev >= 0) recv_block(t, s->act[lo], batch * pipe_act_width(&t->d, lo), t->prev, 2 * tag);
    for (int l = lo; l < hi; ++l) layer_forward(t, s, l, batch);
    if (t->next >= 0) {
        send_async(t, s->act[hi], batch * pipe_act_width(&t->d, hi), t->next, 2 * tag);
    } else {
        s->loss = demo_softmax_xent(batch, t->d.vocab, s->act[DEMO_NLAYERS], s->tgt,
                                    grad_scale > 0 ? s->grad[DEMO_NLAYERS] : NULL, grad_scale);
    }
}

void pipe_backward(pipe_trainer *t, pipe_slot *s, int batch, int tag) {
    const int lo = t->layer_lo, hi = t->layer_hi;
    if (t->next >= 0) recv_block(t, s->grad[hi], batch * pipe_act_width(&t->d, hi), t->next, 2 * tag + 1);
    for (int l = hi - 1; l >= lo; --l) layer_backward(t, s, l, batch);
    if (t->prev >= 0) send_async(t, s->grad[lo], batch * pipe_act_width(&t->d, lo), t->prev, 2 * tag + 1);
}
