/* A checkpoint is valid only as a whole.  zero__ck_manifest_parse checks
 * each field (and a version-2 manifest's own checksum); this checks what
 * the fields mean together, before a load uses any of them:
 *
 *   - the step state a load restores is finite and in range (lr, loss
 *     scale), the zero_set_hparams settings as zero_set_hparams accepts them;
 *   - each pipeline stage has exactly one layout: alignment a power of two,
 *     layout groups starting at 0, aligned, increasing, inside the flat space;
 *   - every parameter's flat_offset is where the layout rules put it (param
 *     groups in order of first appearance, parameters in registration order,
 *     each at the next aligned element or at the start of the next layout
 *     group), so that no offset is changed, swapped or overlapping;
 *   - the files are complete: every rank x pipeline stage has its core blob
 *     (of the manifest version's size) and the same blob names, kinds and
 *     dtypes as its peers; no file name or (blob, rank, stage) twice; each
 *     shard's ranges are sorted and disjoint, and the shards of each kind
 *     together hold every parameter element.
 *
 * zero_load and zero-ckpt verify both call it (and zero__ck_core_verify on
 * the core blobs they read), so they accept exactly the same checkpoints.
 * Pure apart from the reader; any thread, nothing shared. */
#ifndef ZERO_CKPT_VALIDATE_H
#define ZERO_CKPT_VALIDATE_H
#include <stddef.h>

#include "ckpt_engine.h"
#include "ckpt_io.h"

/* 0, or -1 with the first problem in err ("manifest: params[3] 'w2': ..."). */
int zero__ck_manifest_validate(const zero__ck_manifest *m, char *err, size_t errn);

/* For a version-1 manifest (libzero <= 1.5.1): what could not be checked,
 * for a warning; NULL for a current one. */
const char *zero__ck_legacy_note(const zero__ck_manifest *m);

/* Read the core blob of (rank, pp_stage) through r (chunk checksums
 * verified) and compare every field with the manifest: 0, or -1 with both
 * differing values named in err. */
int zero__ck_core_verify(zero__ck_reader *r, const zero__ck_manifest *m, int rank, int pp_stage, char *err,
                         size_t errn);

/* A version-2 core blob of the manifest's step state (zero-ckpt convert). */
void zero__ck_core_fill(zero__core_blob *c, const zero__ck_manifest *m, uint32_t world);
#endif
