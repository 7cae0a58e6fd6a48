/* Near-miss names (near_name.h). */
#include <string.h>

#include "near_name.h"

int zero__edit_distance(const char *a, const char *b) {
    enum { MAXN = 64 };
    const size_t n = strlen(a), m = strlen(b);
    if (n >= MAXN || m >= MAXN) return 99;
    int d[MAXN][MAXN];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            const int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *zero__nearer(const char *name, const char *cand, const char *best) {
    const int d = zero__edit_distance(name, cand), limit = strlen(name) <= 5 ? 1 : 2;
    if (d > limit) return best;
    return !best || d < zero__edit_distance(name, best) ? cand : best;
}
