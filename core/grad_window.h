/* Missing gradients, agreed across ranks (issue 31; grad_window.c,
 * docs/reliability.md): what each rank was not given in an accumulation
 * window, and the verdict every rank reaches at the window's boundary. */
#ifndef ZERO_CORE_GRAD_WINDOW_H
#define ZERO_CORE_GRAD_WINDOW_H
#include <stddef.h>

#include "zero.h"

struct zero_engine;

/* The verdict of a window: train on (zeros delivered where allowed), skip
 * the step (ZERO_OK, taken = 0), refuse it (ZERO_ERR_STATE), or hold it
 * (ZERO_ERR_STATE, the window kept for a retry: some rank refused the
 * step's hyper-parameters or found a host-owned tensor its host wrote); the
 * same on every rank. */
enum { MG_PROCEED = 0, MG_SKIP = 1, MG_REFUSE = 2, MG_HOLD = 3 };

/* Called by zero_step once per micro-step, after the host's hooks and
 * before the plugin's step, on the engine thread.  hp_refused: this rank
 * refused the step's hyper-parameters (zero__hp_check_step, boundary
 * only); it is agreed in the same all-reduce, and any rank's refusal makes
 * the verdict MG_HOLD everywhere, the window untouched; host_written (1.7.4):
 * this rank found a ZERO_PARAM_HOST_OWNED tensor written by its host
 * (zero__host_owned_check, boundary only), agreed and held the same way;
 * args_refused (1.8): this rank refused its zero_step_args (a newer
 * header's field set, reserved0 not 0), agreed and held the same way at a
 * boundary.  Delivers every gradient
 * this rank was not given as zeros to the plugin (so every bucket
 * collective is issued on every rank, in order) and records it in e->gwin;
 * at the window's boundary agrees the window over the ranks (collective:
 * one small all-reduce when nothing is missing anywhere) and sets *verdict
 * (and, unless MG_PROCEED, the reason in why[len], the same text on every
 * rank).  Returns the first failure (delivery or agreement); the caller
 * then ends the micro-step. */
zero_status zero__grads_settle(struct zero_engine *e, int hp_refused, int host_written, int args_refused,
                               int *verdict, char *why, size_t len);

/* (1.7.5) zero_load discards the window it finds: every param not reported
 * in this micro-step is delivered as zeros, as zero_step would, so that each
 * rank issues every bucket collective in order, but nothing is recorded as
 * missing.  Returns the first failure.  Engine thread, every rank. */
zero_status zero__grads_fill_unrecorded(struct zero_engine *e);
/* (1.7.5) Forget what the window record holds (zero_load: the window it
 * described is gone).  NULL-safe record. */
void zero__grad_window_drop(struct zero_engine *e);
/* Params reported (a stacked one: any slice) since the last zero_step that
 * ended a micro-step, or held by a refused one; *first (may be NULL) the
 * first one's name.  Reads the ready flags: call with no hook running. */
uint32_t zero__grads_reported(const struct zero_engine *e, const char **first);
/* Free e->gwin (NULL-safe); zero_engine_destroy. */
void zero__grad_window_free(struct zero_engine *e);
#endif
