/* zero-estimate internals (tools/estimate): a model as a tensor list, the
 * ZeRO paper's model-state formula and its number formatting.  Single
 * threaded; every function is pure except where it says it reads a file.
 * Arrays returned are malloc'd and owned by the caller. */
#ifndef ZERO_ESTIMATE_H
#define ZERO_ESTIMATE_H
#include <stddef.h>
#include <stdint.h>

typedef struct est_model {
    uint64_t *numel;   /* tensor sizes in registration order (NULL: a bare count) */
    uint32_t n;
    uint64_t total;    /* sum of numel, or the bare count */
    char what[256];    /* how the model was described, for the header line */
    /* (1.9) a mixture of experts (est_model_gpt_moe): the param group of
     * each tensor (0 dense, 1 this rank's experts; NULL: all dense), the
     * expert-parallel size and the elements of each kind on one rank */
    int32_t *group;
    uint64_t ep;
    uint64_t dense, expert;
    int32_t xgroup;    /* the expert group's id (1 for --moe; a manifest's own) */
} est_model;

/* "7.5e9", "7.5B", "1T", "350M", "125k", "187136" -> count; 0 on a bad string. */
uint64_t est_parse_count(const char *s);
/* "32GB", "32G", "80GiB", "1.5TB", "1e9" (bytes) -> bytes; 0 on a bad string. */
uint64_t est_parse_bytes(const char *s);
/* GPT-2/llm.c shapes: wte (vocab x hidden), wpe (seq x hidden), per layer
 * ln1 w/b, attn qkv w/b, attn proj w/b, ln2 w/b, mlp fc w/b (4h), mlp
 * proj w/b, then the final ln w/b.  Returns 0, or -1 on bad dims. */
int est_model_gpt(est_model *m, uint32_t layers, uint64_t hidden, uint64_t vocab, uint64_t seq);
/* (1.9) The same GPT with DeepSpeed-MoE's layers: every `every`-th layer
 * (the 2nd, 4th, ... for every = 2) has `experts` experts in place of its
 * MLP (fc w/b, proj w/b each) and a gate (hidden x experts, dense), spread
 * over `ep` expert-parallel ranks: one rank registers the dense tensors
 * and experts / ep experts (group 1, partitioned over world / ep ranks).
 * ep must divide experts.  Returns 0, or -1 on bad dims. */
int est_model_gpt_moe(est_model *m, uint32_t layers, uint64_t hidden, uint64_t vocab, uint64_t seq, uint64_t experts,
                      uint64_t ep, uint64_t every);
/* A checkpoint manifest (reads the file): a JSON object with an array
 * "params" (or "tensors") whose entries have "numel" or "shape" (and
 * optionally "group").  (1.10) A libzero manifest of a mixture of experts
 * has "experts" (one group of them; its number of colors is the
 * expert-parallel size): the params are rank 0's, dense and its own
 * experts, planned as --moe plans them.  Returns 0, or -1 with the reason
 * in err. */
int est_model_manifest(est_model *m, const char *path, char *err, size_t err_len);
void est_model_free(est_model *m);

/* The paper's per-rank model-state bytes per parameter, mixed precision
 * (2-byte params and gradients, K bytes of optimizer state): stage 0
 * 2 + 2 + K, stage 1 2 + 2 + K/N, stage 2 2 + (2 + K)/N, stage 3
 * (2 + 2 + K)/N.  `pb`/`gb`: param and gradient bytes (2 for the paper). */
double est_paper_bytes_per_param(int stage, double n, double k, double pb, double gb);

/* Table 1's number format (GB): >= 100 shown as an integer (truncated, as
 * the paper prints 4187 for 4187.5 and 513 for 513.5); below 100 rounded
 * half up to 3 significant digits and at most 2 decimals (41.3, 1.88,
 * 0.47, 0.12), trailing zeros dropped. */
void est_fmt_paper_gb(double gb, char *out, size_t len);
/* Table 2's parameter counts: billions with one decimal, dropped when .0
 * (7.6B, 14.4B, 128B); from 512B on in T of 1024B, as the paper prints
 * 0.5T, 1T and 2T for 4 x, 8 x and 16 x 128B. */
void est_fmt_paper_params(double billions, char *out, size_t len);
/* bytes / unit with three significant digits, for libzero's plans. */
void est_fmt_gb(double bytes, double unit, char *out, size_t len);
#endif
