/* Versioned input structs: copy what this library knows, refuse what it
 * would have to ignore (struct_in.h). */
#include "struct_in.h"

#include <stdio.h>
#include <string.h>

#ifndef ZERO_VERSION_STRING
#define ZERO_VERSION_STRING "unknown"
#endif

int zero__struct_in(void *dst, const void *src, size_t size, size_t known, const char *what, char *msg,
                    size_t msg_len) {
    memcpy(dst, src, size < known ? size : known);
    if (size <= known) return 1;
    if (size > ZERO__STRUCT_SIZE_MAX) {
        if (msg && msg_len)
            snprintf(msg, msg_len,
                     "%s.struct_size is %zu, more than any libzero struct (this libzero %s knows %zu bytes of it): "
                     "set it to sizeof(%s) (the *_INIT macro)",
                     what, size, ZERO_VERSION_STRING, known, what);
        return 0;
    }
    const unsigned char *b = src;
    for (size_t i = known; i < size; i++)
        if (b[i] != 0) {
            if (msg && msg_len)
                snprintf(msg, msg_len,
                         "%s.struct_size is %zu but this libzero %s knows only its first %zu bytes, and byte %zu "
                         "is set: the host was built against a newer libzero header and asks for something this "
                         "library cannot do; run it with the libzero it was built against, or leave the newer "
                         "fields at their *_INIT values",
                         what, size, ZERO_VERSION_STRING, known, i);
            return 0;
        }
    return 1;
}
