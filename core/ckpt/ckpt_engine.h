/* The engine's side of checkpoints: zero_save / zero_load orchestration
 * (ckpt_save.c, ckpt_load.c) and the session state the checkpoint services
 * (services.c ckpt_write/ckpt_read, partition_ckpt.c ckpt_shard) consult
 * while a plugin's save or load runs.  docs/checkpoints.md describes the
 * directory layout, the manifest and the guarantees.
 *
 * Ownership: a session is created and freed by the zero_save / zero_load
 * call that runs it (e->ck_save / e->ck_load are NULL outside those calls).
 * Threads: engine step thread only, like zero_save / zero_load. */
#ifndef ZERO_CKPT_ENGINE_H
#define ZERO_CKPT_ENGINE_H
#include <stddef.h>

#include <jansson.h>

#include "ckpt_source.h"
#include "loss_scaler.h"
#include "zero.h"

struct zero_engine;

typedef struct zero__ck_save {
    char dir[4096];      /* the staging directory the plugin writes into */
    json_t *files;       /* this rank's file records (zero__ck_file_json) */
    uint32_t nblobs;     /* blobs written so far (fault point between_shards) */
    /* set by ckpt_shard for the blob it is about to write, reset after it */
    int32_t kind;
    zero_dtype dtype;
    const zero_owned_range *ranges;
    uint32_t nranges;
} zero__ck_save;

typedef struct zero__ck_load {
    char dir[4096];      /* the checkpoint directory being read */
    zero__ck_manifest *m;
    zero__ck_reader *r;
    int reshard;         /* another world size / plugin / layout wrote it, or weights_only */
    int weights_only;    /* (1.8) zero_load_options.weights_only: params and master only, states zero */
    int *idx;            /* per param of this rank: the manifest param it loads from (check_model) */
    zero__ck_src *src;   /* resharding: where each of this rank's params comes from (ckpt_source.h):
                            its offset here and in the saver's stage, (1.10) the saver's stage (another
                            pipeline split) and an expert's color */
    /* (1.4) the saver's zero_set_hparams settings (ckpt_hparams.h), adopted
     * when the load succeeds; has_hp 0: an older manifest without them */
    struct zero__hp_override *hp;
    uint32_t nhp;
    int has_hp;
} zero__ck_load;

/* The core's own blob "core" on every rank: its step state, checksummed
 * like every blob.  On load (and by zero-ckpt verify) every field is
 * compared with the manifest's (zero__ck_core_check, ckpt_validate.h), so
 * that what the load restores from the manifest -- steps, lr, every loss
 * scaler field, the zero_set_hparams settings -- is what the ranks saved:
 * ranks that disagree, or a manifest changed after the save, are an error,
 * never a silent mix.  Version 1 (libzero <= 1.5.1) ends before hp_digest. */
typedef struct zero__core_blob {
    uint64_t magic, version, global_step, skipped_steps;
    uint32_t micro_step, world;
    double lr;
    zero__scaler scaler;
    /* version 2 */
    uint32_t hp_digest; /* zero__ck_hparams_digest of the manifest (global rank 0's settings) */
    uint32_t reserved;  /* 0 */
} zero__core_blob;
#define ZERO__CORE_BLOB_MAGIC 0x7a65726f636b7074ULL /* "zerockpt" */
#define ZERO__CORE_BLOB_VERSION 2
#define ZERO__CORE_BLOB_V1_BYTES offsetof(zero__core_blob, hp_digest)

/* zero_save_ex / zero_load bodies (collective over every rank of the job). */
/* What zero_save / zero_save_ex ask of a save.  local: this rank's
 * verdict on its own arguments (ZERO_OK, or the error it set), agreed in
 * the save's first collective, so that a refusal on one rank is an error
 * on every rank with nothing written.  client / client_bytes (1.7): the
 * host's client state (borrowed for the call; 0 bytes: none). */
typedef struct zero__ck_save_args {
    const char *tag; /* NULL: "step-<N>" */
    uint32_t keep_last;
    zero_status local;
    const void *client;
    uint64_t client_bytes;
} zero__ck_save_args;
zero_status zero__ckpt_save(struct zero_engine *e, const char *root, const zero__ck_save_args *a);
/* What zero_load / zero_load_ex ask of a load (1.8): weights_only is
 * zero_load_options.weights_only, the same on every rank (zero_load_ex
 * agreed on it before). */
typedef struct zero__ck_load_args {
    int weights_only;
} zero__ck_load_args;
zero_status zero__ckpt_load(struct zero_engine *e, const char *path, const zero__ck_load_args *a);

/* Agree over the whole job (every pipeline stage) on `local`: every rank
 * returns the failing status of the lowest failing rank, with its message
 * ("rank R: ...") -- so an error is named on every rank, never a hang.
 * Collective. */
zero_status zero__ck_agree(struct zero_engine *e, zero_status local, const char *what);

/* File name of blob `name` for this rank: "<name>.rank<R>.bin" or with a
 * pipeline "<name>.pp<S>.rank<R>.bin". */
int zero__ck_file_name(const struct zero_engine *e, const char *name, char *out, size_t n);
#endif
