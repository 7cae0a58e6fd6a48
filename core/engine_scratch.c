/* Backend scratch (ring temporaries, device staging, NCCL and quantization
 * buffers) counted in the engine's memory stats.  Apart from api.c because
 * the comm backends call it, and a backend that called into the host entry
 * points would tie them in a loop (tools/check-loops.py). */
#include "engine.h"

void zero__engine_note_scratch(struct zero_engine *e, zero_mem_tier tier, int64_t delta) {
    if (e && e->mem) zero__mem_note(e->mem, tier, ZERO_MEM_OTHER, delta);
}
