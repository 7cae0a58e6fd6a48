/* Test helper: recompute a manifest's own checksum (manifest_crc32c) after a
 * test edited manifest.json on purpose, with the library's canonical form
 * (zero__ck_manifest_seal), so that a test reaches the check behind the
 * checksum: the core blob cross-checks, the layout rules, completeness.
 * Deliberately not a zero-ckpt subcommand: a user's manifest is never
 * re-sealed by libzero's tools.
 *
 *   ckpt_reseal MANIFEST.json        exit 0, or 1 with the reason */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt_manifest.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ckpt_reseal MANIFEST.json\n");
        return 2;
    }
    json_error_t je;
    json_t *root = json_load_file(argv[1], JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fprintf(stderr, "ckpt_reseal: %s: %s\n", argv[1], je.text);
        return 1;
    }
    int rc = zero__ck_manifest_seal(root) != 0 ||
             json_dump_file(root, argv[1], JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0;
    if (rc) fprintf(stderr, "ckpt_reseal: cannot rewrite %s\n", argv[1]);
    json_decref(root);
    return rc;
}
