/* Shared by the JSON Schema compiler, the regex translator and the
 * validator (internal to src/grammar). */
#ifndef SP_GRAMMAR_SCHEMA_INTERNAL_H
#define SP_GRAMMAR_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

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
 * pattern (regex.c).  Returns NULL, or what the subset lacks. */
const char *sp_regex_to_gbnf(const char *pattern, size_t len, struct sp_gstr *out);

/* The node a local reference ("#", "#/$defs/a", JSON pointer escapes)
 * names inside root, or NULL (validate.c). */
struct json_t;
const struct json_t *sp_schema_resolve(const struct json_t *root, const char *ref);

/* Formats (grammar_schema.c, validate.c): the GBNF of a format's contents, NULL
 * for an unknown format. */
const char *sp_schema_format_gbnf(const char *format);

#endif
