/* Shared by the JSON Schema compiler, the regex translator and the
 * validator (internal to src/grammar). */
#ifndef SP_GRAMMAR_SCHEMA_INTERNAL_H
#define SP_GRAMMAR_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* A growable string; `failed` once an allocation failed (then p may be
 * incomplete and later appends do nothing). */
struct sp_gstr {
    char *p;
    size_t n, cap;
    bool failed;
};
void sp_gstr_add(struct sp_gstr *s, const char *t);
void sp_gstr_addn(struct sp_gstr *s, const char *t, size_t n);
void sp_gstr_addf(struct sp_gstr *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A JSON path ("$.a[2]") kept while walking a schema or a value:
 * sp_jpath_init sets "$"; sp_jpath_push appends a step (cut at the
 * buffer's end) and returns the length to give sp_jpath_pop, which goes
 * back to it.  s is always NUL-terminated. */
struct sp_jpath {
    char s[512];
    size_t len;
};
void sp_jpath_init(struct sp_jpath *p);
size_t sp_jpath_push(struct sp_jpath *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sp_jpath_pop(struct sp_jpath *p, size_t old);

/* Appends a GBNF fragment for the contents of a JSON string matching the
 * pattern (regex.c); *spelled (when not NULL): how many character
 * positions it spells, each repetition's copies counted.  Returns NULL, or
 * what the subset lacks. */
const char *sp_regex_to_gbnf(const char *pattern, size_t len, struct sp_gstr *out, double *spelled);

/* ---- schemas in the internal form (schema_norm.c) ----
 * A schema of any draft, converted: only validation keywords, in 2020-12's
 * spelling, their values checked; references resolved. */
struct json_t;
struct sp_schema;
sp_status sp_schema_load(const char *text, size_t len, struct sp_schema **out);
void sp_schema_free(struct sp_schema *s);
const struct json_t *sp_schema_root(const struct sp_schema *s);
/* The schema the `$ref` of node names (node holds one), never NULL for a
 * node of s that holds a $ref. */
const struct json_t *sp_schema_target(const struct sp_schema *s, const struct json_t *node);
/* Is k a validation keyword of some draft? */
bool sp_schema_is_keyword(const char *k);
/* Does the pattern compile (PCRE2, UTF)? */
bool sp_schema_pattern_ok(const char *pattern);

static inline uint64_t sp_schema_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* ---- merging (schema_merge.c) ----
 * One schema from base (less the keys in the NULL-terminated `without`)
 * and parts: their intersection where the keywords allow it, else the
 * first value (the validator checks the schema itself).  The nodes made
 * are kept by `owned` (a JSON array).  *empty: why no value satisfies it,
 * or NULL.  NULL on out of memory (error set). */
const struct json_t *sp_schema_merge(const struct sp_schema *sch, struct json_t *owned, const struct json_t *base,
                                     const char *const *without, const struct json_t *const *parts,
                                     size_t n_parts, const char **empty);

/* ---- formats (schema_formats.c) ---- */
struct sp_schema_format {
    const char *name;
    const char *gbnf;                        /* the string's contents */
    bool (*check)(const char *s, size_t n);  /* the format itself */
};
const struct sp_schema_format *sp_schema_format_find(const char *name);
bool sp_schema_format_known(const char *name);
/* The names, ", "-separated, into buf; returns the length. */
size_t sp_schema_format_list(char *buf, size_t cap);
/* Rules the formats' GBNF uses besides the base rules. */
extern const char sp_schema_format_rules[];
/* Rules of every schema grammar that stay calls (grammar_schema.c). */
extern const char *const sp_schema_called_rules[];

#endif
