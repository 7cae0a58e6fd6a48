/* Ranks agree at engine creation (issue 31): on the plugin (name, build id,
 * plugin ABI), libzero's version and the config, before any plugin code can
 * issue a collective or split a communicator.  engine_agree.c; the config's
 * canonical form and its first difference are config_canon.h's. */
#ifndef ZERO_CORE_ENGINE_AGREE_H
#define ZERO_CORE_ENGINE_AGREE_H
#include <stddef.h>
#include "config.h"
#include "config_canon.h"
#include "zero_plugin.h"

struct zero_engine;

/* Collective over the engine's global communicator (every rank of the job,
 * pipeline stages included), bounded by the comm timeout.  Call once the
 * config is parsed and the plugin `requested` (as resolved: option,
 * $ZERO_PLUGIN or config) was loaded into e->plugin, with load_status and
 * load_msg the loader's outcome; for "auto" with no plugin loaded yet pass
 * ZERO_OK and NULL (zero_params_done agrees again on the one picked).
 * Returns ZERO_OK when every rank loaded the same plugin build under the same
 * ABI and parsed the same config; else, on every rank: the load failure of
 * the first rank that failed (its own message on that rank), or
 * ZERO_ERR_MISMATCH naming both sides (ranks, plugin names and builds, or
 * the first differing config key and both values); or the comm layer's
 * error (ZERO_ERR_TIMEOUT when a rank never arrives).  Engine thread only. */
zero_status zero__engine_agree(struct zero_engine *e, const char *requested, zero_status load_status,
                               const char *load_msg);

/* Before the pipeline split (which every rank of e->global must make
 * alike, and MPI_Comm_split has no timeout): agree on pipeline.stages as
 * each rank's config says (*stages: this rank's peek, 0 when its config did
 * not load).  On return *stages is what every rank splits by: the common
 * value, or 1 when some rank's config did not load (no split; the config
 * parse and zero__engine_agree_failure then name that rank).  Ranks that
 * read different values fail alike with ZERO_ERR_MISMATCH naming both
 * values and their ranks.  Collective over e->global, bounded by the comm
 * timeout.  Engine thread only. */
zero_status zero__engine_agree_stages(struct zero_engine *e, int *stages);

/* This rank failed before it could agree (`what` failed: "parse its
 * config"; msg its message): publish the failure in the same agreement the
 * other ranks run in zero__engine_agree, so that they fail at once naming
 * this rank instead of waiting for the comm timeout.  Returns `status` with
 * msg as this rank's error.  Collective, like zero__engine_agree. */
zero_status zero__engine_agree_failure(struct zero_engine *e, zero_status status, const char *what,
                                       const char *msg);

#endif
