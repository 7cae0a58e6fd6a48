/* White-box checks of the checkpoint primitives (core/ckpt):
 *  - CRC-32C: the standard check value ("123456789" -> 0xe3069283) from the
 *    dispatched (SSE4.2) and the table implementation, which also agree on
 *    every length 0..300 at every alignment, and chaining;
 *  - the manifest parser refuses, by name, what would make a reader
 *    over-read or misplace data: ranges outside the flat space, range
 *    lengths that disagree with the byte count, a wrong number of chunk
 *    checksums, a file name with a '/', another format version. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ckpt_manifest.h"
#include "crc32c.h"

static const char *GOOD =
    "{\"format\": \"libzero-checkpoint\", \"version\": 1, \"tag\": \"t\", \"plugin\": \"stage1\","
    " \"library_version\": \"x\", \"abi_version\": 10002, \"stage\": 1, \"world_size\": 2, \"pp_stages\": 1,"
    " \"reshardable\": 1, \"model_dtype\": \"fp32\", \"optimizer\": 0, \"optimizer_states\": 2,"
    " \"chunk_bytes\": 1048576,"
    " \"state\": {\"global_step\": 3, \"skipped_steps\": 0, \"micro_step\": 0, \"lr\": 0.1,"
    "   \"loss_scaler\": {\"dynamic\": 0, \"scale\": 1.0, \"min_scale\": 1.0, \"window\": 1000, \"hysteresis\": 2,"
    "   \"cur_hysteresis\": 2, \"consecutive_hysteresis\": 0, \"cur_iter\": 0, \"last_overflow_iter\": -1}},"
    " \"layouts\": [{\"pp_stage\": 0, \"align\": 16, \"flat_numel\": 64, \"part_numel\": 32}],"
    " \"params\": [{\"name\": \"w\", \"numel\": 40, \"dtype\": \"fp32\", \"group\": 0, \"pp_stage\": 0,"
    "   \"flat_offset\": 0}],"
    " \"files\": [{\"file\": \"FILE\", \"blob\": \"stage1.params\", \"rank\": 1, \"pp_stage\": 0,"
    "   \"bytes\": BYTES, \"crc32c\": \"CRC\", \"kind\": \"params\", \"dtype\": \"fp32\", \"ranges\": [[32, HI]]}]}";

/* GOOD with FILE, BYTES, CRC, HI replaced; parse; expect failure naming `want` (NULL: success). */
static void try_parse(const char *file, const char *bytes, const char *crc, const char *hi, const char *version,
                      const char *want) {
    char text[4096], *o = text;
    for (const char *p = GOOD; *p;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (!strncmp(p, "FILE", 4)) rep = file, skip = 4;
        else if (!strncmp(p, "BYTES", 5)) rep = bytes, skip = 5;
        else if (!strncmp(p, "CRC", 3)) rep = crc, skip = 3;
        else if (!strncmp(p, "HI", 2)) rep = hi, skip = 2;
        else if (!strncmp(p, "\"version\": 1", 12)) rep = version, skip = 12;
        if (rep) {
            o += sprintf(o, "%s", rep);
            p += skip;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    char err[512] = "";
    zero__ck_manifest *m = zero__ck_manifest_parse(text, strlen(text), err, sizeof err);
    if (!want) {
        CHECK(m != NULL, "good manifest refused: %s", err);
        if (m) CHECK(m->nfiles == 1 && m->files[0].bytes == 128 && m->files[0].ranges[0].flat_hi == 64, "fields");
    } else {
        CHECK(m == NULL, "accepted a manifest with %s", want);
        CHECK(strstr(err, want) != NULL, "error '%s' does not say '%s'", err, want);
        printf("refused: %s\n", err);
    }
    zero__ck_manifest_free(m);
}

int main(void) {
    const char *s = "123456789";
    CHECK(zero__crc32c(0, s, 9) == 0xe3069283u, "crc32c check value: %08x", zero__crc32c(0, s, 9));
    CHECK(zero__crc32c_portable(0, s, 9) == 0xe3069283u, "table crc32c check value");
    CHECK(zero__crc32c(zero__crc32c(0, s, 4), s + 4, 5) == 0xe3069283u, "chained crc32c");
    unsigned char buf[512];
    for (int i = 0; i < 512; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (int a = 0; a < 8; a++)
        for (int n = 0; n <= 300; n++)
            CHECK(zero__crc32c(0, buf + a, (size_t)n) == zero__crc32c_portable(0, buf + a, (size_t)n),
                  "hw and table differ at offset %d length %d", a, n);
    try_parse("p.rank1.bin", "128", "00000000", "64", "\"version\": 1", NULL);
    try_parse("p.rank1.bin", "128", "00000000", "65", "\"version\": 1", "outside the flat space");
    try_parse("p.rank1.bin", "132", "00000000", "64", "\"version\": 1", "are not 132 bytes");
    try_parse("p.rank1.bin", "128", "0000000000000000", "64", "\"version\": 1", "expected 1 checksums");
    try_parse("../p.rank1.bin", "128", "00000000", "64", "\"version\": 1", "not a plain file name");
    try_parse("p.rank1.bin", "128", "00000000", "64", "\"version\": 2", "format version 2");
    try_parse("p.rank1.bin", "-5", "00000000", "64", "\"version\": 1", "bytes");
    return check_finish();
}
