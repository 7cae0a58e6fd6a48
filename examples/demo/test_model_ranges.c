/* Built only in an AddressSanitizer build (tools/sanitize-check.sh): the
 * dense kernels of model.c run their loops uninstrumented there and check
 * each operand's whole range at the call instead.  This program hands one
 * kernel one operand a float short (argv[1] names which; "none": every
 * operand its full size) so that the test sees ASan's report come from
 * that check, and nothing when the sizes are right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

enum { B = 3, IN = 5, OUT = 7 };

/* n floats, or n - 1 when `short_by_one`. */
static float *buf(size_t n, int short_by_one) {
    if (short_by_one) n -= 1;
    float *p = malloc(n * sizeof *p);
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = 0.25f;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s none|forward.w|backward_params.dw|backward_input.dx\n", argv[0]);
        return 2;
    }
    const char *cut = argv[1];
    float *x = buf(B * IN, 0), *y = buf(B * OUT, 0), *dy = buf(B * OUT, 0), *scratch = buf(OUT, 0);
    float *db = buf(OUT, 0), *bias = buf(OUT, 0), *w2 = buf(IN * OUT, 0);
    float *w = buf(IN * OUT, !strcmp(cut, "forward.w"));
    float *dw = buf(IN * OUT, !strcmp(cut, "backward_params.dw"));
    float *dx = buf(B * IN, !strcmp(cut, "backward_input.dx"));
    demo_dense_forward(B, IN, OUT, x, w, bias, y, 1);
    demo_dense_backward_params(B, IN, OUT, x, y, dy, dw, db, 1, scratch);
    demo_dense_backward_input(B, IN, OUT, dy, w2, dx);
    printf("model ranges: every kernel ran, y[0] = %g, dx[0] = %g\n", (double)y[0], (double)dx[0]);
    free(x), free(y), free(dy), free(scratch), free(db), free(bias), free(w), free(w2), free(dw), free(dx);
    return 0;
}
