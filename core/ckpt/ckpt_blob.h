/* Checkpoint blobs: one named blob per rank, <dir>/<name>.rank<R>.bin
 * (with a pipeline <name>.pp<S>.rank<R>.bin), written to a temp file,
 * fsync'ed and renamed (ckpt_io.c).  Inside zero_save each blob's size,
 * chunk checksums and (after ckpt_shard) contents go into the manifest;
 * inside zero_load each read is checked against the manifest and verified.
 * A device buffer goes through one host bounce buffer, so a checkpoint
 * moves between CPU and GPU runs.  The ckpt_write / ckpt_read /
 * ckpt_reshard services; the core calls them by name.  Step thread, inside
 * zero_save / zero_load. */
#ifndef ZERO_CORE_CKPT_BLOB_H
#define ZERO_CORE_CKPT_BLOB_H
#include <stddef.h>
#include "zero_plugin.h"

zero_status zero__ckpt_blob_write(zero_core *c, const char *dir, const char *name, const void *buf, size_t bytes);
zero_status zero__ckpt_blob_read(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes);
/* Nonzero inside a load that reshards (another world size, plugin or layout). */
int zero__ckpt_blob_reshard(zero_core *c);
#endif
