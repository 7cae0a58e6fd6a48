/* Version queries and static names: the parts of the host ABI that need no
 * engine.  Everything here is constant data, so thread-safe. */
#include "zero.h"

#ifndef ZERO_VERSION_STRING
#define ZERO_VERSION_STRING "unknown"
#endif

ZERO_API const char *zero_status_string(zero_status s) {
    /* Stable texts: hosts may print or log them, tests compare prefixes. */
    switch (s) {
    case ZERO_OK: return "ZERO_OK: success";
    case ZERO_ERR_INVALID_ARGUMENT: return "ZERO_ERR_INVALID_ARGUMENT: invalid argument or handle";
    case ZERO_ERR_CONFIG: return "ZERO_ERR_CONFIG: invalid configuration";
    case ZERO_ERR_PLUGIN_NOT_FOUND: return "ZERO_ERR_PLUGIN_NOT_FOUND: plugin not found or could not be loaded";
    case ZERO_ERR_PLUGIN_ABI: return "ZERO_ERR_PLUGIN_ABI: plugin built for an incompatible ABI";
    case ZERO_ERR_PLUGIN_SYMBOL: return "ZERO_ERR_PLUGIN_SYMBOL: plugin table symbol or function missing";
    case ZERO_ERR_PLUGIN_INIT: return "ZERO_ERR_PLUGIN_INIT: plugin initialization failed";
    case ZERO_ERR_OUT_OF_MEMORY: return "ZERO_ERR_OUT_OF_MEMORY: out of memory";
    case ZERO_ERR_COMM: return "ZERO_ERR_COMM: communication failed";
    case ZERO_ERR_MISMATCH: return "ZERO_ERR_MISMATCH: ranks disagree";
    case ZERO_ERR_STATE: return "ZERO_ERR_STATE: call out of order";
    case ZERO_ERR_UNSUPPORTED: return "ZERO_ERR_UNSUPPORTED: not supported by this build or plugin";
    case ZERO_ERR_IO: return "ZERO_ERR_IO: file I/O failed";
    case ZERO_ERR_TIMEOUT: return "ZERO_ERR_TIMEOUT: other ranks did not answer within the comm timeout";
    case ZERO_ERR_LOSS_SCALE: return "ZERO_ERR_LOSS_SCALE: loss scale reached min_loss_scale";
    case ZERO_ERR_DEVICE: return "ZERO_ERR_DEVICE: device error";
    case ZERO_ERR_INTERNAL: return "ZERO_ERR_INTERNAL: internal error";
    case ZERO_ERR_DUPLICATE: return "ZERO_ERR_DUPLICATE: duplicate call";
    default: return "ZERO_ERR_UNKNOWN: unknown status code";
    }
}

ZERO_API uint32_t zero_abi_version(void) { return (uint32_t)ZERO_ABI_VERSION; }

ZERO_API const char *zero_version_string(void) { return ZERO_VERSION_STRING; }

ZERO_API const char *zero_mem_tag_name(zero_mem_tag t) {
    static const char *const names[ZERO_MEM_NTAGS] = {
        "params", "grads", "master", "optim", "buckets", "gather", "other"};
    if (t < 0 || t >= ZERO_MEM_NTAGS) return "unknown";
    return names[t];
}
