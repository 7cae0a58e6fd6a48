/* Compiled by check_headers.sh as C99, C11, C++11 and C++20 with -Wall
 * -Wextra -pedantic -Werror: the public headers must be self-contained and
 * usable from C and C++ hosts alike, including every *_INIT macro (C++
 * before C++20 has no designated initializers). */
#include "zero_plugin.h" /* first: must include what it needs */
#include "zero.h"        /* and be idempotent */

static int uses_services(const zero_services_v1 *svc) {
    return ZERO_SERVICES_HAS(svc, ckpt_read) ? 1 : 0;
}

int main(void) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_group_desc g = ZERO_GROUP_DESC_INIT;
    zero_step_args a = ZERO_STEP_ARGS_INIT;
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    zero_memory_stats m = ZERO_MEMORY_STATS_INIT;
    zero_comm_stats c = ZERO_COMM_STATS_INIT;
    zero_services_v1 svc;
    svc.struct_size = (uint32_t)sizeof svc;
    int ok = o.struct_size == sizeof o && d.struct_size == sizeof d && g.struct_size == sizeof g &&
             a.struct_size == sizeof a && r.struct_size == sizeof r && m.struct_size == sizeof m &&
             c.struct_size == sizeof c && uses_services(&svc) == 1;
    return ok ? 0 : 1;
}
