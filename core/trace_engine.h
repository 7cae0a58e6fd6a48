/* The engine's side of the tracer (trace_engine.c, docs/trace.md). */
#ifndef ZERO_CORE_TRACE_ENGINE_H
#define ZERO_CORE_TRACE_ENGINE_H
#include "zero_plugin.h"
struct zero_engine;
/* After the config is parsed: start tracing if ZERO_TRACE or trace.path
 * asks for it.  ZERO_ERR_CONFIG for a malformed trace section. */
zero_status zero__trace_engine_start(struct zero_engine *e);
/* In zero_engine_destroy, after the communicators are freed (their
 * progress threads joined): drop the engine's reference; the last one
 * writes the rank's file (a failure goes to stderr). */
void zero__trace_engine_stop(struct zero_engine *e);
#endif
