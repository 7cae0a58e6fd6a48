/* Transition shim (see plugin_glue.h): the glue's code is the plugin kit's
 * now (kit/kit_glue.c, linked into every in-tree plugin as zero::kit);
 * this file stays only because plugins/stage3's source list names it. */
#include "plugin_glue.h"

typedef int zero__plugin_glue_shim; /* a translation unit must declare something */
