/* Versioned input structs (leading uint32_t struct_size, append-only) that
 * a host passes in: what of the caller's struct this library can read.
 *
 * A host built against an older header passes a shorter struct: the fields
 * it lacks keep their documented defaults (the caller copies with
 * zero__struct_in over an *_INIT value).  A host built against a NEWER
 * header passes a longer one: if it set a field this library does not know
 * (a nonzero byte past our sizeof), silently ignoring it would run with a
 * setting the host asked to change, so the caller refuses the call, as
 * Linux's copy_struct_from_user() does with E2BIG.  Pure, thread-safe. */
#ifndef ZERO_BASE_STRUCT_IN_H
#define ZERO_BASE_STRUCT_IN_H
#include <stddef.h>

/* The largest struct_size believed: beyond it the value is garbage (a
 * struct never set up) and its tail is not read. */
#define ZERO__STRUCT_SIZE_MAX 4096u

/* Copy min(size, known) bytes of src into dst (which holds the defaults)
 * and check the rest of src: returns 1 when src's bytes past `known` are
 * all zero (or there are none), 0 otherwise -- then msg (msg_len bytes,
 * may be NULL) says which byte, that the host was built against a newer
 * libzero header, and what to do; `what` names the struct in it
 * ("zero_engine_options").  size > ZERO__STRUCT_SIZE_MAX is refused
 * without reading past `known`.  dst is written in either case. */
int zero__struct_in(void *dst, const void *src, size_t size, size_t known, const char *what, char *msg,
                    size_t msg_len);
#endif
