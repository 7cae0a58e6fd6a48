/* libzero plugin kit -- what every in-tree strategy is built from, installed
 * for outside authors (docs/plugin-kit.md walks through writing one).
 *
 *   #include "zero_kit.h"        find_package(zero) + zero::kit,
 *                                or pkg-config zero-kit (-lzero_kit)
 *
 * zero_kit_glue.h  create, accounted allocation, gradient hand-in, bucket
 *                  specs and per-communicator bucket sets, the parameter
 *                  map over the world layout, checkpoint blobs, planning;
 * zero_kit_flat.h  the flat data-parallel engine: a flat model state and
 *                  its boundary step / checkpoint / plan, and whole
 *                  strategies as presets (stage0, stage1, stage2 and
 *                  stage1-pp are presets of it);
 * zero_kit_gather.h the stage-3 gather engine: recorded per-phase order,
 *                  prefetch, reuse distance, persistence threshold, the
 *                  pool and its budget, around a strategy's fetch callback
 *                  (stage3, MiCS and ZeRO++ gather on it;
 *                  docs/plugin-kit-gather.md).
 *
 * The kit includes only the ABI headers and calls only the services table;
 * it is linked statically into the plugin (libzero_kit.a), never into
 * libzero.  Every function documents who owns what, for how long, and which
 * threads may call it (conventions at the top of zero_kit_glue.h). */
#ifndef ZERO_KIT_H
#define ZERO_KIT_H
#include "zero_kit_glue.h"
#include "zero_kit_flat.h"
#include "zero_kit_gather.h"
#endif /* ZERO_KIT_H */
