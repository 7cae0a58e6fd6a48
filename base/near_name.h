/* Near-miss names: how far apart two names are, for "did you mean ...?"
 * in the messages about an unknown config key (core/config_value.c,
 * config_optim.c) or environment variable (env.c).  Pure, thread-safe. */
#ifndef ZERO_BASE_NEAR_NAME_H
#define ZERO_BASE_NEAR_NAME_H

/* Optimal string alignment distance between a and b: insertions,
 * deletions, substitutions and swaps of neighbours count 1 each.  Names of
 * 64 bytes or more are 99 (never near). */
int zero__edit_distance(const char *a, const char *b);

/* Is `cand` a likely intended spelling of `name`: within 2 edits (within 1
 * for names of 5 characters or fewer, where 2 edits make most names
 * alike)? */
int zero__near_name(const char *name, const char *cand);
#endif
