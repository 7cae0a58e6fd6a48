/* Shared boundary-step services (partition_step.c); contracts in
 * abi/zero_plugin.h next to the zero_services_v1 fields of the same names.
 * Engine step thread only. */
#ifndef ZERO_CORE_PARTITION_STEP_H
#define ZERO_CORE_PARTITION_STEP_H
#include "zero_plugin.h"

zero_status zero__svc_grad_norm(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                zero_grad_norm *out);
zero_status zero__svc_part_step(zero_core *c, const zero_part_step *ps, float grad_mul);
zero_status zero__svc_boundary_step(zero_core *c, const zero_part_step *ps, const zero_step_ctx *ctx,
                                    zero_step_report *rep);
zero_status zero__svc_allgather_shares(zero_core *c, zero_comm *comm, void *flat, zero_dtype dt);
/* Placement and partition checkpoints (partition_ckpt.c). */
zero_status zero__svc_params_place(zero_core *c, void *flat, zero_dtype dt, const char *who);
zero_status zero__svc_master_init(zero_core *c, const zero_part_step *ps, const void *params);
zero_status zero__svc_ckpt_shard(zero_core *c, const char *dir, const char *prefix, const zero_part_step *ps,
                                 void *params, int write);
zero_status zero__svc_ckpt_agree(zero_core *c, zero_comm *comm, zero_status local, const char *dir,
                                 const char *who);
struct zero_engine;

/* (issue 31) Around the plugin's step, on the engine's step thread (the
 * thread grad_norm runs on, per its contract):
 *  - zero__ps_step_begin(e, drop): drop = 1 asks the grad_norm service to
 *    read this step as an overflow whatever the gradients hold, so that
 *    the plugin drops the accumulation window through its ordinary
 *    overflow path (every plugin clears its gradients after it) and moves
 *    no weight; zero_step uses it to refuse or skip a micro-step whose
 *    gradients the ranks did not agree on (core/api.c, settle_missing).
 *  - zero__ps_step_end(): 1 if grad_norm ran during the step (so a drop
 *    request was honoured), 0 if the plugin never called it.
 *  - zero__ps_nonfinite_text(): after a step that found a non-finite
 *    gradient, which rank(s) found it and in which param ("" otherwise);
 *    the same text on every rank (agreed in the overflow's path only). */
void zero__ps_step_begin(const struct zero_engine *e, int drop);
int zero__ps_step_end(void);
const char *zero__ps_nonfinite_text(void);
#endif
