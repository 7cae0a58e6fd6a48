/* The plugin-table functions shared by the flat-layout strategies that
 * differ only in how their gradient is reduced (stage0, stage1, stage2):
 * each of those files is a spec (reduction mode, replication, checkpoint
 * names), a create that binds it, and its table.  Built on plugin_glue.h;
 * includes only abi/ headers, like any third-party plugin.
 *
 * Ownership: zero__flat_plugin_create allocates the state, the table's
 * destroy (zero__flat_plugin_destroy) frees it and everything it holds.
 * The spec must outlive the state (a static const in the plugin).
 * Threading: as the plugin ABI says -- grad_buffer / on_grad_ready are
 * thread-safe for distinct params, everything else runs on the engine's
 * step thread. */
#ifndef ZERO_FLAT_PLUGIN_H
#define ZERO_FLAT_PLUGIN_H
#include "plugin_glue.h"

typedef struct zero__flat_plugin_spec {
    const char *name;       /* error messages and the checkpoint blob prefix */
    const char *grads_blob; /* checkpoint name of the gradient buffer ("<name>.<grads_blob>") */
    zero_bucket_mode mode;  /* ALLREDUCE / SCATTER_INPLACE: a flat window sum reduced at the boundary;
                               SCATTER: a partition accumulator reduced every micro-step */
    int replicated;         /* every rank steps everything (stage 0) */
} zero__flat_plugin_spec;

zero_status zero__flat_plugin_create(const zero_services *svc, const zero__flat_plugin_spec *spec, void **state);
zero_status zero__flat_plugin_params_done(void *state);
zero_status zero__flat_plugin_grad_buffer(void *state, zero_param_info *p, void **buf);
zero_status zero__flat_plugin_on_grad_ready(void *state, zero_param_info *p, void *stream);
/* Every micro-step: reduce what is left; at the boundary norm, clip, step,
 * gradient cleared and shares all-gathered (zero__flat_boundary). */
zero_status zero__flat_plugin_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep);
/* Sharded checkpoint incl. the window's gradient, so a save in the middle
 * of an accumulation window resumes exactly; load agrees on the read status
 * on every rank before the all-gather. */
zero_status zero__flat_plugin_save(void *state, const char *dir);
zero_status zero__flat_plugin_load(void *state, const char *dir);
void zero__flat_plugin_destroy(void *state);
#endif
/* The table's plan entry (ABI 1.2) for `spec`: what params_done and the
 * bucket engine will allocate (zero__flat_plan), plus the per-param
 * gradient temporaries when they are used. */
zero_status zero__flat_plugin_plan(const zero_plan_services *ps, const zero__flat_plugin_spec *spec);
