/* Near-miss names: how far apart two names are, for "did you mean ...?"
 * in the messages about an unknown config key (core/config_value.c,
 * config_optim.c) or environment variable (env.c).  Pure, thread-safe. */
#ifndef ZERO_BASE_NEAR_NAME_H
#define ZERO_BASE_NEAR_NAME_H

/* Optimal string alignment distance between a and b: insertions,
 * deletions, substitutions and swaps of neighbours count 1 each.  Names of
 * 64 bytes or more are 99 (never near). */
int zero__edit_distance(const char *a, const char *b);

/* Walking candidates for the one `name` most likely meant: returns cand if
 * it is near name -- within 2 edits, within 1 for names of 5 characters or
 * fewer (where 2 edits make most names alike) -- and nearer than `best`
 * (NULL: none yet), else best.  The first of equally near candidates stays. */
const char *zero__nearer(const char *name, const char *cand, const char *best);
#endif
