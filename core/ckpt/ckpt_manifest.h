/* The checkpoint manifest (manifest.json): what a checkpoint holds, parsed
 * and built without an engine, so that zero_load and tools/zero-ckpt share
 * one reader.  Format reference: docs/checkpoints.md.
 *
 * Every number read from a manifest is checked before use (types, ranges,
 * sums of range lengths against byte counts, chunk-checksum counts against
 * sizes): a damaged or foreign manifest is a named error, never an
 * over-read.  A parsed manifest owns all of its strings and arrays (free
 * with zero__ck_manifest_free).  Pure; not shared between threads. */
#ifndef ZERO_CKPT_MANIFEST_H
#define ZERO_CKPT_MANIFEST_H
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "zero_plugin.h"

#define ZERO__CK_FORMAT "libzero-checkpoint"
/* The manifest format this library writes.  Version 2 (issue 31)
 * carries its own checksum ZERO__CK_SUM_KEY and core blobs of version 2;
 * version 1 (libzero 1.2 to 1.5.1) has neither and is still read, with a
 * warning naming what could not be checked (zero__ck_manifest_validate). */
#define ZERO__CK_VERSION 2
#define ZERO__CK_VERSION_LEGACY 1
/* CRC-32C (8 lowercase hex digits) of the manifest's canonical form: the
 * document without this key, json_dumps(JSON_SORT_KEYS | JSON_COMPACT). */
#define ZERO__CK_SUM_KEY "manifest_crc32c"
#define ZERO__CK_CHUNK ((uint64_t)1 << 20) /* bytes per checksummed chunk */
#define ZERO__CK_HEADER 16               /* blob header: "ZEROCKB1" + payload bytes (u64 LE) */
#define ZERO__CK_MAGIC "ZEROCKB1"
/* The client state's record (zero_save_options.client_state, 1.7): the
 * manifest's "client_state", one opaque blob of global rank 0. */
#define ZERO__CK_CLIENT_BLOB "client_state"
#define ZERO__CK_CLIENT_FILE "client_state.rank0.bin"

/* What a blob's payload is, for resharding and consolidation: the owned
 * ranges of the model-dtype parameters, of the fp32 master, or of an
 * optimizer state; OPAQUE blobs (core state, gradients) are only read back
 * by the same plugin at the same world size. */
enum { ZERO__CK_OPAQUE = -1, ZERO__CK_PARAMS = 0, ZERO__CK_MASTER = 1, ZERO__CK_STATE0 = 2 };

typedef struct zero__ck_range {
    uint64_t flat_lo, flat_hi; /* saver's flat space */
} zero__ck_range;

typedef struct zero__ck_file {
    char *file;          /* name inside the checkpoint directory */
    char *blob;          /* blob name as the plugin gave it ("stage2.master") */
    int32_t rank;        /* data-parallel rank that wrote it */
    int32_t pp_stage;
    uint64_t bytes;      /* payload bytes (the file is ZERO__CK_HEADER + bytes long) */
    uint32_t nchunks;    /* ceil(bytes / chunk_bytes) */
    uint32_t *crc;       /* CRC-32C of each chunk */
    int32_t kind;        /* ZERO__CK_* */
    zero_dtype dtype;    /* element type of a non-opaque payload */
    uint32_t nranges;
    zero__ck_range *ranges; /* payload = these flat ranges concatenated */
} zero__ck_file;

typedef struct zero__ck_param {
    char *name;
    uint64_t numel;
    zero_dtype dtype;
    int32_t group;
    int32_t pp_stage;
    uint64_t flat_offset; /* in the saver's layout of its pipeline stage */
    /* (1.8) "shape" as recorded (has_shape 0: absent); [numel] when the host
     * gave none; its product is numel (checked) */
    int32_t has_shape;
    uint32_t ndim;
    uint64_t shape[ZERO_MAX_NDIM];
} zero__ck_param;

typedef struct zero__ck_layout {
    int32_t pp_stage;
    uint64_t align, flat_numel, part_numel;
    /* the layout groups' first elements ("groups": who owns what; with
     * round_robin_gradients one per stripe); ngroups 0 = not recorded */
    uint32_t ngroups;
    uint64_t *group_begin;
} zero__ck_layout;

/* (libzero 1.10) One expert group (zero_group_desc.expert_color) of the
 * saving run: which ranks held which experts.  "experts" in the manifest;
 * a checkpoint without it (dense, or written before 1.10) has none. */
typedef struct zero__ck_expert_set {
    int32_t color;  /* the expert-data-parallel group's color */
    char **names;   /* its ranks' names of the group's params, registration order (nnames) */
} zero__ck_expert_set;

typedef struct zero__ck_experts {
    int32_t group;        /* the param group id */
    int32_t pp_stage;     /* (1.13) the pipeline stage whose group it is ("pp_stage", absent: 0) */
    int32_t *colors;      /* world entries: the color of each data-parallel rank (file.rank) */
    uint32_t nnames;      /* params of the group on every rank (the manifest's params of that group) */
    uint32_t nsets;       /* distinct colors */
    zero__ck_expert_set *sets;
} zero__ck_experts;

/* Step state of the core (identical on every rank; checked at save). */
typedef struct zero__ck_state {
    uint64_t global_step, skipped_steps;
    uint32_t micro_step;
    double lr;
    /* loss scaler (zero__scaler's fields) */
    int32_t ls_dynamic, ls_window, ls_delayed_shift, ls_cur_hysteresis, ls_consecutive;
    double ls_scale, ls_min_scale;
    int64_t ls_cur_iter, ls_last_overflow_iter;
} zero__ck_state;

typedef struct zero__ck_manifest {
    int32_t version; /* ZERO__CK_VERSION, or ZERO__CK_VERSION_LEGACY: no checksum of its own */
    char *tag, *plugin, *library_version;
    int32_t abi_version;
    int32_t stage, world, pp_stages, reshardable;
    zero_dtype model_dtype;
    int32_t optim;
    uint32_t nstate;
    uint64_t chunk_bytes;
    zero__ck_state st;
    uint32_t nparams, nlayouts, nfiles;
    zero__ck_param *params;
    zero__ck_layout *layouts;
    zero__ck_file *files;
    /* (1.7) the host's client state (zero_save_options.client_state):
     * &files[nfiles] (one slot past the files, so a reader serves it), or
     * NULL when the checkpoint has none; not counted in nfiles */
    const zero__ck_file *client;
    json_t *root; /* the parsed document (config, scheduler: shown by zero-ckpt info) */
    /* (libzero 1.10) the expert groups, in the params' group order */
    uint32_t nexperts;
    zero__ck_experts *experts;
} zero__ck_manifest;

/* Parse manifest text (len bytes, not necessarily NUL-terminated): the
 * syntax, types and ranges of every field, and for version 2 the manifest's
 * own checksum (before anything else is read: a damaged manifest is named
 * as such).  What the fields mean together (offsets against the layout,
 * completeness, core blobs) is zero__ck_manifest_validate's (ckpt_validate.h).
 * On error returns NULL with a message naming the field in err. */
zero__ck_manifest *zero__ck_manifest_parse(const char *text, size_t len, char *err, size_t errn);
void zero__ck_manifest_free(zero__ck_manifest *m);

/* The checksum of a manifest document (ZERO__CK_SUM_KEY ignored): 0, or -1
 * when the document cannot be serialised (out of memory). */
int zero__ck_manifest_crc(json_t *root, uint32_t *out);
/* Set ZERO__CK_SUM_KEY of a document about to be written (zero_save,
 * zero-ckpt convert): 0, or -1 out of memory. */
int zero__ck_manifest_seal(json_t *root);
/* CRC-32C of the canonical form of root's "state.hparams" ("null" when
 * absent): what a version-2 core blob records of them. */
uint32_t zero__ck_hparams_digest(json_t *root);

const char *zero__ck_dtype_name(zero_dtype dt);
/* "AdamW", "Adam", "SGD", "Lion", "Adagrad", "LAMB"; "?" for others. */
const char *zero__ck_optim_name(int32_t optim);
size_t zero__ck_dtype_size(zero_dtype dt); /* model dtypes; 0 for others */
/* "params", "master", "state<k>"; "opaque". */
const char *zero__ck_kind_name(int32_t kind, char *buf, size_t n);

/* JSON of one file record (new reference), as the saving rank describes it. */
json_t *zero__ck_file_json(const zero__ck_file *f);

/* The file records a reader serves: the files and (1.7) the client
 * state's record after them, files[0 .. zero__ck_nrecords(m)). */
static inline uint32_t zero__ck_nrecords(const zero__ck_manifest *m) { return m->nfiles + (m->client ? 1u : 0u); }

/* Find the file with this blob name written by (rank, pp_stage), or NULL. */
const zero__ck_file *zero__ck_find(const zero__ck_manifest *m, const char *blob, int rank, int pp_stage);
/* The layout record of a pipeline stage, or NULL. */
const zero__ck_layout *zero__ck_layout_of(const zero__ck_manifest *m, int pp_stage);
/* (libzero 1.10) Index in m->experts of param group `group` of pipeline
 * stage `pp_stage` (1.13; 0 without a pipeline), or -1 (dense). */
int zero__ck_expert_index(const zero__ck_manifest *m, int32_t group, int32_t pp_stage);
#endif
