/* The ZeRO paper's model-state formula and number formats (estimate.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "estimate.h"

double est_paper_bytes_per_param(int stage, double n, double k, double pb, double gb) {
    switch (stage) {
    case 0: return pb + gb + k;
    case 1: return pb + gb + k / n;
    case 2: return pb + (gb + k) / n;
    default: return (pb + gb + k) / n;
    }
}

static void strip_zeros(char *s) {
    if (!strchr(s, '.')) return;
    size_t n = strlen(s);
    while (n && s[n - 1] == '0') s[--n] = '\0';
    if (n && s[n - 1] == '.') s[--n] = '\0';
}

void est_fmt_paper_gb(double gb, char *out, size_t len) {
    if (gb >= 100) {
        snprintf(out, len, "%.0f", floor(gb + 1e-9));
        return;
    }
    int d = gb > 0 ? 2 - (int)floor(log10(gb)) : 2; /* 3 significant digits ... */
    if (d > 2) d = 2;                                /* ... at most 2 decimals */
    if (d < 0) d = 0;
    const double p = pow(10, d);
    snprintf(out, len, "%.*f", d, floor(gb * p + 0.5 + 1e-9) / p); /* half up: 41.25 -> 41.3 */
    strip_zeros(out);
}

void est_fmt_paper_params(double billions, char *out, size_t len) {
    if (billions >= 512) {
        snprintf(out, len, "%.1f", billions / 1024);
        strip_zeros(out);
        strncat(out, "T", len - strlen(out) - 1);
        return;
    }
    snprintf(out, len, "%.1f", billions);
    strip_zeros(out);
    strncat(out, "B", len - strlen(out) - 1);
}

void est_fmt_gb(double bytes, double unit, char *out, size_t len) {
    double gb = bytes / unit;
    if (gb >= 100)
        snprintf(out, len, "%.0f", gb);
    else if (gb >= 0.01 || gb == 0)
        snprintf(out, len, "%.3g", gb);
    else
        snprintf(out, len, "%.2e", gb);
}
