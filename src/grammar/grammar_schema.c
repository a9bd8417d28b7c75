/* JSON Schema -> GBNF, compact whitespace.
 *
 * Each keyword is enforced by the grammar, checked afterwards by the
 * validator (validate.c: uniqueItems, multipleOf, bounds on non-integers,
 * lengths next to a pattern or format, oneOf's "exactly one", real
 * calendar dates), an annotation, or refused with its JSON path.  The
 * grammar may be narrower than the schema (objects hold their properties
 * in the schema's order, required ones first; no property beyond those
 * listed unless additionalProperties allows it), never wider.
 *
 * Objects, arrays and $ref targets become rules ($ref targets by name, so
 * recursion is a rule calling itself); everything else is an inline
 * expression.  allOf (and anyOf/oneOf next to sibling keywords) merges the
 * parts into one schema first. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/schema_internal.h"

#define MAX_NEST 64
#define MAX_RULES 20000
#define MAX_BOUND 1000000000000000LL /* integer bounds: 16 digits at most */
#define MAX_LEN_GRAMMAR 1000         /* longer length limits are left to the validator */

/* ---- growable strings ---- */

void sp_gstr_addn(struct sp_gstr *s, const char *t, size_t n)
{
    if (s->failed)
        return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->failed = true;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    if (n)
        memcpy(s->p + s->n, t, n);
    s->n += n;
    s->p[s->n] = '\0';
}

void sp_gstr_add(struct sp_gstr *s, const char *t) { sp_gstr_addn(s, t, strlen(t)); }

void sp_jpath_init(struct sp_jpath *p)
{
    snprintf(p->s, sizeof p->s, "$");
    p->len = 1;
}

size_t sp_jpath_push(struct sp_jpath *p, const char *fmt, ...)
{
    size_t old = p->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->s + old, sizeof p->s - old, fmt, ap);
    va_end(ap);
    if (n > 0)
        p->len = old + (size_t)n < sizeof p->s ? old + (size_t)n : sizeof p->s - 1;
    return old;
}

void sp_jpath_pop(struct sp_jpath *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

void sp_gstr_addf(struct sp_gstr *s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        s->failed = true;
        return;
    }
    sp_gstr_addn(s, buf, (size_t)n);
}

/* ---- the fixed part of every schema grammar ----
 * json-char has no \\u escapes of surrogates: a lone one is not valid JSON
 * text to jansson. */

#define BASE_RULES \
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n" \
    "json-object ::= \"{\" ( json-string \":\" json-value ( \",\" json-string \":\" json-value )* )? \"}\"\n" \
    "json-array ::= \"[\" ( json-value ( \",\" json-value )* )? \"]\"\n" \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n" \
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] hex hex hex " \
    "| [dD] [0-7] hex hex ) )\n" \
    "hex ::= [0-9a-fA-F]\n" \
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n" \
    "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n" \
    "json-bool ::= \"true\" | \"false\"\n"
static const char base_rules[] = BASE_RULES;

const char *sp_grammar_json_object_gbnf(void) { return "root ::= json-object\n" BASE_RULES; }

static const struct {
    const char *name, *gbnf;
} formats[] = {
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"},
    {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
             "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {"date-time", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) "
                  "\"T\" ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                  "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {"uuid", "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}"},
    /* a bounded subset: a 1-32 character local part, two or three domain labels */
    {"email", "[a-zA-Z0-9_+-] ( [a-zA-Z0-9._+-]{0,30} [a-zA-Z0-9_+-] )? \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} "
              "( \".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} )? \".\" [a-zA-Z]{2,12}"},
};

const char *sp_schema_format_gbnf(const char *format)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(formats[i].name, format))
            return formats[i].gbnf;
    return NULL;
}

/* ---- the compiler ---- */

struct memo {
    const json_t *node;
    char name[24];
};

struct sc {
    json_t *root;
    struct sp_gstr rules;
    struct sp_jpath path;
    bool failed;
    uint32_t n_rules;
    struct memo *memo;
    size_t n_memo, cap_memo;
    int depth;
    json_t *owned;   /* merged schemas made here, kept alive until the end */
};

static void fail(struct sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct sc *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sp_error_set(SP_ERR_ARG, "json schema: %s at %s", msg, c->path.s);
    c->failed = true;
}

/* A GBNF literal for raw bytes. */
static void gbnf_lit(struct sp_gstr *o, const char *s, size_t n)
{
    sp_gstr_add(o, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            sp_gstr_addf(o, "\\%c", ch);
        else if (ch == '\n')
            sp_gstr_add(o, "\\n");
        else if (ch < 0x20 || ch == 0x7F)
            sp_gstr_addf(o, "\\x%02X", ch);
        else
            sp_gstr_addn(o, (const char *)&ch, 1);
    }
    sp_gstr_add(o, "\"");
}

/* The compact JSON text of a value, as a GBNF literal. */
static void json_lit(struct sc *c, struct sp_gstr *o, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        o->failed = true;
        return;
    }
    gbnf_lit(o, t, strlen(t));
    free(t);
    (void)c;
}

static const char *const enforced[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf",
    "$ref", "$defs", "definitions", "uniqueItems", "multipleOf",
};
static const char *const annotations[] = {
    "title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated",
    "readOnly", "writeOnly",
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i]))
            return true;
    return false;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool check_keywords(struct sc *c, const json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!in_list(k, enforced, N_OF(enforced)) && !in_list(k, annotations, N_OF(annotations))) {
            fail(c, "unsupported keyword '%.60s' (it can be neither enforced nor checked)", k);
            return false;
        }
    }
    return true;
}

static void gen(struct sc *c, const json_t *s, struct sp_gstr *o);

static const char *new_rule_name(struct sc *c, char *buf, size_t cap, const char *prefix)
{
    snprintf(buf, cap, "%s%u", prefix, c->n_rules++);
    if (c->n_rules > MAX_RULES)
        fail(c, "the schema needs more than %d grammar rules", MAX_RULES);
    return buf;
}

static void emit_rule(struct sc *c, const char *name, const struct sp_gstr *body)
{
    sp_gstr_addf(&c->rules, "%s ::= ", name);
    sp_gstr_addn(&c->rules, body->p ? body->p : "\"\"", body->p ? body->n : 2);
    sp_gstr_add(&c->rules, "\n");
}

/* Local $ref -> the schema it points at, or NULL (failure set). */
static const json_t *resolve(struct sc *c, const char *ref)
{
    if (!ref || ref[0] != '#') {
        fail(c, "$ref '%.80s' is not local (only '#...' references are supported)", ref ? ref : "");
        return NULL;
    }
    if (ref[1] && ref[1] != '/') {
        fail(c, "$ref '%.80s': anchors are not supported", ref);
        return NULL;
    }
    const json_t *t = sp_schema_resolve(c->root, ref);
    if (!t)
        fail(c, "$ref '%.80s' points at nothing", ref);
    return t;
}

static const json_t *deref(struct sc *c, const json_t *s)
{
    for (int hops = 0; json_is_object(s) && json_is_string(json_object_get(s, "$ref")); hops++) {
        if (hops > 32) {
            fail(c, "$ref chain longer than 32");
            return NULL;
        }
        if (json_object_size(s) > 1)
            return s; /* a $ref with siblings: not a plain alias */
        s = resolve(c, json_string_value(json_object_get(s, "$ref")));
    }
    return s;
}

/* ---- allOf: one schema from several ---- */

static json_t *merge_into(struct sc *c, json_t *dst, const json_t *src, int depth);

static bool merge_key(struct sc *c, json_t *dst, const char *k, const json_t *v, int depth)
{
    json_t *have = json_object_get(dst, k);
    if (!have)
        return json_object_set(dst, k, (json_t *)v) == 0;
    if (!strcmp(k, "required")) {
        if (!json_is_array(have) || !json_is_array(v))
            return true; /* the type check below refuses */
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            bool dup = false;
            size_t j;
            json_t *y;
            json_array_foreach(have, j, y) dup |= json_equal(x, y);
            if (!dup)
                json_array_append(have, x);
        }
        return true;
    }
    if (!strcmp(k, "properties") && json_is_object(have) && json_is_object(v)) {
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)v, pk, pv) {
            json_t *old = json_object_get(have, pk);
            if (!old) {
                json_object_set(have, pk, pv);
            } else if (!json_equal(old, pv)) {
                json_t *m = json_object();
                if (!m || !merge_into(c, m, deref(c, old), depth + 1) || !merge_into(c, m, deref(c, pv), depth + 1)) {
                    json_decref(m);
                    return false;
                }
                json_object_set_new(have, pk, m);
            }
        }
        return true;
    }
    if (!strcmp(k, "additionalProperties") && (json_is_false(have) || json_is_false(v))) {
        json_object_set_new(dst, k, json_false());
        return true;
    }
    if (json_equal(have, v))
        return true;
    if (!strcmp(k, "type") && json_is_string(have) && json_is_string(v)) {
        if ((!strcmp(json_string_value(have), "integer") && !strcmp(json_string_value(v), "number")) ||
            (!strcmp(json_string_value(have), "number") && !strcmp(json_string_value(v), "integer"))) {
            json_object_set_new(dst, k, json_string("integer"));
            return true;
        }
        fail(c, "unsatisfiable schema: allOf requires both type '%s' and '%s'", json_string_value(have),
             json_string_value(v));
        return false;
    }
    if (in_list(k, annotations, N_OF(annotations)))
        return true;
    fail(c, "allOf parts that both set '%.40s' differently are not supported", k);
    return false;
}

static json_t *merge_into(struct sc *c, json_t *dst, const json_t *src, int depth)
{
    if (!src || c->failed)
        return NULL;
    if (depth > MAX_NEST) {
        fail(c, "allOf nested deeper than %d", MAX_NEST);
        return NULL;
    }
    if (json_is_true(src))
        return dst;
    if (!json_is_object(src)) {
        fail(c, json_is_false(src) ? "unsatisfiable schema: allOf with false" : "allOf part is not a schema");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)src, k, v) {
        if (!strcmp(k, "allOf")) {
            size_t i;
            json_t *part;
            if (!json_is_array(v)) {
                fail(c, "allOf must be an array");
                return NULL;
            }
            json_array_foreach(v, i, part) if (!merge_into(c, dst, deref(c, part), depth + 1)) return NULL;
        } else if (!strcmp(k, "$ref") && json_object_size(src) > 1) {
            if (!merge_into(c, dst, resolve(c, json_string_value(v)), depth + 1))
                return NULL;
        } else if (!merge_key(c, dst, k, v, depth)) {
            return NULL;
        }
    }
    return dst;
}

/* A merged copy of s without `without` (NULL: none), then `part` on top;
 * owned by c. */
static const json_t *merged(struct sc *c, const json_t *s, const char *without, const json_t *part)
{
    json_t *m = json_object();
    if (!m) {
        fail(c, "out of memory");
        return NULL;
    }
    json_array_append_new(c->owned, m);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (without && !strcmp(k, without))
            continue;
        if (!strcmp(k, "allOf") || (!strcmp(k, "$ref") && json_object_size(s) > 1)) {
            json_t *one = json_object();
            json_object_set(one, k, v);
            bool ok = merge_into(c, m, one, 0) != NULL;
            json_decref(one);
            if (!ok)
                return NULL;
        } else if (!merge_key(c, m, k, v, 0)) {
            return NULL;
        }
    }
    if (part && !merge_into(c, m, deref(c, part), 0))
        return NULL;
    return m;
}

/* ---- integers in a range ---- */

static int n_digits(long long x)
{
    int n = 1;
    while (x >= 10) {
        x /= 10;
        n++;
    }
    return n;
}

static long long pow10ll(int n)
{
    long long p = 1;
    while (n-- > 0)
        p *= 10;
    return p;
}

/* Same-length digit strings x..y (both n digits). */
static void digits_range(struct sp_gstr *o, const char *x, const char *y, int n)
{
    if (n == 0) {
        sp_gstr_add(o, "\"\"");
        return;
    }
    if (n == 1) {
        if (x[0] == y[0])
            sp_gstr_addf(o, "\"%c\"", x[0]);
        else
            sp_gstr_addf(o, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        sp_gstr_addf(o, "\"%c\" ", x[0]);
        digits_range(o, x + 1, y + 1, n - 1);
        return;
    }
    bool x_low = strspn(x + 1, "0") == (size_t)(n - 1), y_high = strspn(y + 1, "9") == (size_t)(n - 1);
    if (x_low && y_high) {
        sp_gstr_addf(o, "[%c-%c] [0-9]{%d}", x[0], y[0], n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n - 1);
    memset(zeros, '0', (size_t)n - 1);
    nines[n - 1] = zeros[n - 1] = '\0';
    sp_gstr_add(o, "( ");
    char lo = x[0], hi = y[0];
    if (!x_low) {
        sp_gstr_addf(o, "\"%c\" ", x[0]);
        digits_range(o, x + 1, nines, n - 1);
        sp_gstr_add(o, " | ");
        lo++;
    }
    if (!y_high)
        hi--;
    if (lo <= hi)
        sp_gstr_addf(o, "[%c-%c] [0-9]{%d} | ", lo, hi, n - 1);
    if (!y_high) {
        sp_gstr_addf(o, "\"%c\" ", y[0]);
        digits_range(o, zeros, y + 1, n - 1);
    } else {
        o->n -= 3; /* drop the last " | " */
        o->p[o->n] = '\0';
    }
    sp_gstr_add(o, " )");
}

/* x as exactly len digits (leading zeros); len <= 20. */
static void pad_digits(char *out, long long x, int len)
{
    for (int i = len - 1; i >= 0; i--) {
        out[i] = (char)('0' + x % 10);
        x /= 10;
    }
    out[len] = '\0';
}

/* Non-negative a..b (b < 0: unbounded). */
static void nonneg_range(struct sp_gstr *o, long long a, long long b)
{
    int la = n_digits(a), lb = b < 0 ? 16 : n_digits(b);
    bool first = true;
    sp_gstr_add(o, "( ");
    for (int len = la; len <= lb; len++) {
        long long lo = len == la ? a : pow10ll(len - 1);
        long long hi = (b >= 0 && len == lb) ? b : pow10ll(len) - 1;
        if (len == 1 && lo == 0 && hi >= 0 && len != la)
            lo = 1;
        if (lo > hi)
            continue;
        char xs[24], ys[24];
        pad_digits(xs, lo, len);
        pad_digits(ys, hi, len);
        if (!first)
            sp_gstr_add(o, " | ");
        first = false;
        digits_range(o, xs, ys, len);
    }
    sp_gstr_add(o, " )");
}

/* Integers lo..hi; has_lo/has_hi false for unbounded sides. */
static void int_range(struct sp_gstr *o, bool has_lo, long long lo, bool has_hi, long long hi)
{
    if (!has_lo && !has_hi) {
        sp_gstr_add(o, "json-int");
        return;
    }
    sp_gstr_add(o, "( ");
    bool any = false;
    /* negative part: -(max(1,-hi) .. -lo) */
    if (!has_lo || lo < 0) {
        long long mag_lo = has_hi && hi < 0 ? -hi : 1, mag_hi = has_lo ? -lo : -1;
        sp_gstr_add(o, "\"-\" ");
        nonneg_range(o, mag_lo, mag_hi);
        any = true;
    }
    if (!has_hi || hi >= 0) {
        if (any)
            sp_gstr_add(o, " | ");
        nonneg_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sp_gstr_add(o, " )");
}

/* Reads an integer bound: *has set when present.  Fractions round inward. */
static bool int_bounds(struct sc *c, const json_t *s, bool *has_lo, long long *lo, bool *has_hi, long long *hi)
{
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    *has_lo = *has_hi = false;
    *lo = *hi = 0;
    for (int k = 0; k < 4; k++) {
        json_t *v = json_object_get(s, keys[k]);
        if (!v)
            continue;
        if (!json_is_number(v)) {
            fail(c, "'%s' must be a number", keys[k]);
            return false;
        }
        double d = json_number_value(v);
        if (!(fabs(d) <= (double)MAX_BOUND)) {
            fail(c, "'%s' %g is beyond the 16-digit integers the grammar spells", keys[k], d);
            return false;
        }
        long long x;
        if (k < 2) {
            x = k == 0 ? (long long)ceil(d) : (long long)floor(d) + 1;
            if (!*has_lo || x > *lo)
                *lo = x;
            *has_lo = true;
        } else {
            x = k == 2 ? (long long)floor(d) : (long long)ceil(d) - 1;
            if (!*has_hi || x < *hi)
                *hi = x;
            *has_hi = true;
        }
    }
    if (*has_lo && *has_hi && *lo > *hi) {
        fail(c, "unsatisfiable schema: no integer lies between the minimum and the maximum");
        return false;
    }
    return true;
}

/* ---- keywords with sizes ---- */

static bool read_count(struct sc *c, const json_t *s, const char *k, long long *out)
{
    json_t *v = json_object_get(s, k);
    if (!v)
        return false;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(c, "'%s' must be a non-negative integer", k);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

/* ---- types ---- */

static void gen_string(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    long long mn = 0, mx = -1;
    read_count(c, s, "minLength", &mn);
    read_count(c, s, "maxLength", &mx);
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minLength %lld > maxLength %lld", mn, mx);
        return;
    }
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (fmt) {
        const char *g = json_is_string(fmt) ? sp_schema_format_gbnf(json_string_value(fmt)) : NULL;
        if (!g) {
            fail(c, "unsupported keyword 'format' value '%.40s' (supported: date, time, date-time, uuid, email)",
                 json_is_string(fmt) ? json_string_value(fmt) : "?");
            return;
        }
        if (pat) {
            fail(c, "'pattern' together with 'format' is not supported");
            return;
        }
        sp_gstr_addf(o, "( \"\\\"\" ( %s ) \"\\\"\" )", g); /* lengths: checked by the validator */
        return;
    }
    if (pat) {
        if (!json_is_string(pat)) {
            fail(c, "'pattern' must be a string");
            return;
        }
        sp_gstr_add(o, "( \"\\\"\" ");
        const char *why = sp_regex_to_gbnf(json_string_value(pat), json_string_length(pat), o);
        if (why) {
            fail(c, "unsupported keyword 'pattern' value '%.60s': %s", json_string_value(pat), why);
            return;
        }
        sp_gstr_add(o, " \"\\\"\" )");
        return;
    }
    if (mn > MAX_LEN_GRAMMAR)
        mn = MAX_LEN_GRAMMAR; /* the validator checks the rest */
    if (mx > MAX_LEN_GRAMMAR)
        mx = -1;
    if (mn == 0 && mx < 0)
        sp_gstr_add(o, "json-string");
    else if (mx < 0)
        sp_gstr_addf(o, "( \"\\\"\" json-char{%lld,} \"\\\"\" )", mn);
    else
        sp_gstr_addf(o, "( \"\\\"\" json-char{%lld,%lld} \"\\\"\" )", mn, mx);
}

static void gen_array(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    long long mn = 0, mx = -1;
    read_count(c, s, "minItems", &mn);
    read_count(c, s, "maxItems", &mx);
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minItems %lld > maxItems %lld", mn, mx);
        return;
    }
    if (mn > 1000 || mx > 1000) {
        fail(c, "minItems/maxItems above 1000 are not supported");
        return;
    }
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (prefix && !json_is_array(prefix)) {
        fail(c, "'prefixItems' must be an array");
        return;
    }
    size_t k = prefix ? json_array_size(prefix) : 0;
    char name[24];
    new_rule_name(c, name, sizeof name, "arr");
    struct sp_gstr body = {0};
    struct sp_gstr item = {0};
    if (json_is_false(items))
        mx = mx < 0 || (size_t)mx > k ? (long long)k : mx;
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minItems %lld but at most %lld items allowed", mn, mx);
        goto done;
    }
    if (!items || json_is_true(items) || json_is_false(items)) {
        sp_gstr_add(&item, "json-value");
    } else {
        size_t old = sp_jpath_push(&c->path, ".items");
        gen(c, items, &item);
        sp_jpath_pop(&c->path, old);
    }
    sp_gstr_add(&body, "\"[\" ");
    /* prefix items: the first min(mn, k) required, then each optional */
    size_t open = 0;
    for (size_t i = 0; i < k && (mx < 0 || (long long)i < mx); i++) {
        bool req = (long long)i < mn;
        if (!req) {
            sp_gstr_add(&body, "( ");
            open++;
        }
        if (i)
            sp_gstr_add(&body, "\",\" ");
        size_t old = sp_jpath_push(&c->path, ".prefixItems[%zu]", i);
        gen(c, json_array_get(prefix, i), &body);
        sp_jpath_pop(&c->path, old);
        sp_gstr_add(&body, " ");
    }
    /* then items beyond the prefix: counts adjusted */
    long long rmn = mn > (long long)k ? mn - (long long)k : 0;
    long long rmx = mx < 0 ? -1 : (mx > (long long)k ? mx - (long long)k : 0);
    if (rmx != 0 && !(json_is_false(items) && k)) {
        char count[48];
        if (k) { /* ( "," item ){rmn,rmx} */
            if (rmx < 0)
                snprintf(count, sizeof count, "{%lld,}", rmn);
            else
                snprintf(count, sizeof count, "{%lld,%lld}", rmn, rmx);
            sp_gstr_add(&body, "( \",\" ");
            sp_gstr_addn(&body, item.p, item.n);
            sp_gstr_add(&body, " )");
            sp_gstr_add(&body, count);
        } else { /* item ( "," item ){rmn-1,rmx-1}, all optional when rmn is 0 */
            long long lo = rmn > 0 ? rmn - 1 : 0;
            if (rmx < 0)
                snprintf(count, sizeof count, "{%lld,}", lo);
            else
                snprintf(count, sizeof count, "{%lld,%lld}", lo, rmx - 1);
            if (rmn == 0)
                sp_gstr_add(&body, "( ");
            sp_gstr_addn(&body, item.p, item.n);
            sp_gstr_add(&body, " ( \",\" ");
            sp_gstr_addn(&body, item.p, item.n);
            sp_gstr_add(&body, " )");
            sp_gstr_add(&body, count);
            if (rmn == 0)
                sp_gstr_add(&body, " )?");
        }
        sp_gstr_add(&body, " ");
    }
    while (open--)
        sp_gstr_add(&body, ")? ");
    sp_gstr_add(&body, "\"]\"");
    if (item.failed || body.failed)
        fail(c, "out of memory");
    emit_rule(c, name, &body);
    sp_gstr_add(o, name);
done:
    free(item.p);
    free(body.p);
}

static void gen_object(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        fail(c, "'properties' must be an object");
        return;
    }
    if (req && !json_is_array(req)) {
        fail(c, "'required' must be an array of strings");
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) {
        if (!json_is_string(r)) {
            fail(c, "'required' must be an array of strings");
            return;
        }
        if (!json_object_get(props, json_string_value(r)) && json_is_false(addl)) {
            fail(c, "unsatisfiable schema: required property '%.60s' is not allowed (additionalProperties is "
                 "false)", json_string_value(r));
            return;
        }
    }
    char name[24];
    new_rule_name(c, name, sizeof name, "obj");
    /* key/value expressions: required ones (in `required` order), then optional ones */
    size_t n = json_object_size(props) + json_array_size(req);
    struct sp_gstr *kv = calloc(n ? n : 1, sizeof *kv);
    bool *is_req = calloc(n ? n : 1, 1);
    struct sp_gstr body = {0}, extra = {0};
    size_t n_kv = 0, n_req = 0;
    if (!kv || !is_req) {
        fail(c, "out of memory");
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)props, k, v) {
            bool rq = false;
            json_array_foreach(req, i, r) rq |= !strcmp(json_string_value(r), k);
            if (rq != (pass == 0))
                continue;
            json_t *key = json_string(k);
            json_lit(c, &kv[n_kv], key);
            json_decref(key);
            sp_gstr_add(&kv[n_kv], " \":\" ");
            size_t old = sp_jpath_push(&c->path, ".properties.%.80s", k);
            gen(c, v, &kv[n_kv]);
            sp_jpath_pop(&c->path, old);
            is_req[n_kv++] = rq;
            n_req += rq;
        }
    }
    /* required names without a property schema: any value */
    json_array_foreach(req, i, r) {
        if (json_object_get(props, json_string_value(r)))
            continue;
        json_lit(c, &kv[n_kv], r);
        sp_gstr_add(&kv[n_kv], " \":\" json-value");
        is_req[n_kv++] = true;
        n_req++;
    }
    /* move the extra required ones before the optional ones */
    for (size_t a = 0; a < n_kv; a++)
        for (size_t b = a + 1; b < n_kv; b++)
            if (!is_req[a] && is_req[b]) {
                struct sp_gstr t = kv[a];
                kv[a] = kv[b];
                kv[b] = t;
                is_req[a] = true;
                is_req[b] = false;
            }
    bool more = addl && !json_is_false(addl);
    if (more) {
        sp_gstr_add(&extra, "json-string \":\" ");
        if (json_is_true(addl)) {
            sp_gstr_add(&extra, "json-value");
        } else {
            size_t old = sp_jpath_push(&c->path, ".additionalProperties");
            gen(c, addl, &extra);
            sp_jpath_pop(&c->path, old);
        }
    }
    sp_gstr_add(&body, "\"{\" ");
    for (size_t a = 0; a < n_req; a++) {
        if (a)
            sp_gstr_add(&body, "\",\" ");
        sp_gstr_addn(&body, kv[a].p, kv[a].n);
        sp_gstr_add(&body, " ");
    }
    /* optional ones: a rule per suffix, "a non-empty subset of kv[j..] in order" */
    if (n_kv > n_req) {
        char first[24] = "";
        char next[24] = "";
        for (size_t j = n_kv; j-- > n_req;) {
            char nm[24];
            new_rule_name(c, nm, sizeof nm, "opt");
            struct sp_gstr b = {0};
            sp_gstr_addn(&b, kv[j].p, kv[j].n);
            if (next[0])
                sp_gstr_addf(&b, " ( \",\" %s )? | %s", next, next);
            emit_rule(c, nm, &b);
            free(b.p);
            snprintf(next, sizeof next, "%s", nm);
        }
        snprintf(first, sizeof first, "%s", next);
        if (n_req)
            sp_gstr_addf(&body, "( \",\" %s )? ", first);
        else
            sp_gstr_addf(&body, "%s? ", first);
    }
    if (more) {
        if (n_kv) {
            sp_gstr_add(&body, "( \",\" ");
            sp_gstr_addn(&body, extra.p, extra.n);
            sp_gstr_add(&body, " )* ");
        } else {
            sp_gstr_add(&body, "( ");
            sp_gstr_addn(&body, extra.p, extra.n);
            sp_gstr_add(&body, " ( \",\" ");
            sp_gstr_addn(&body, extra.p, extra.n);
            sp_gstr_add(&body, " )* )? ");
        }
    }
    sp_gstr_add(&body, "\"}\"");
    if (body.failed || extra.failed)
        fail(c, "out of memory");
    emit_rule(c, name, &body);
    sp_gstr_add(o, name);
done:
    for (size_t a = 0; kv && a < n_kv; a++)
        free(kv[a].p);
    free(kv);
    free(is_req);
    free(body.p);
    free(extra.p);
}

static void gen_type(struct sc *c, const json_t *s, const char *t, struct sp_gstr *o)
{
    if (!strcmp(t, "string")) {
        gen_string(c, s, o);
    } else if (!strcmp(t, "integer")) {
        bool hl, hh;
        long long lo, hi;
        if (int_bounds(c, s, &hl, &lo, &hh, &hi))
            int_range(o, hl, lo, hh, hi);
    } else if (!strcmp(t, "number")) {
        /* bounds: the integer part within them, no exponent; the exact
         * bound (a fraction past it) is left to the validator */
        bool hl, hh;
        long long lo, hi;
        bool any = json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                   json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum");
        if (!any) {
            sp_gstr_add(o, "json-number");
        } else if (int_bounds(c, s, &hl, &lo, &hh, &hi)) {
            sp_gstr_add(o, "( ");
            int_range(o, hl, lo, hh, hi);
            sp_gstr_add(o, " ( \".\" [0-9]{1,6} )? )");
        } else if (!strstr(sp_error_message(), "16-digit")) {
            c->failed = false; /* no integer in between (0.1..0.9): any number, then the validator */
            sp_gstr_add(o, "json-number");
        }
    } else if (!strcmp(t, "boolean")) {
        sp_gstr_add(o, "json-bool");
    } else if (!strcmp(t, "null")) {
        sp_gstr_add(o, "\"null\"");
    } else if (!strcmp(t, "object")) {
        gen_object(c, s, o);
    } else if (!strcmp(t, "array")) {
        gen_array(c, s, o);
    } else {
        fail(c, "unknown type '%.40s'", t);
    }
}

/* The type implied by the keywords present, or NULL (any value). */
static const char *implied_type(const json_t *s)
{
    static const struct {
        const char *key, *type;
    } hints[] = {
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"minLength", "string"}, {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"},
        {"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"}, {"multipleOf", "number"},
    };
    const char *t = NULL;
    for (size_t i = 0; i < N_OF(hints); i++)
        if (json_object_get(s, hints[i].key)) {
            if (t && strcmp(t, hints[i].type))
                return NULL;
            t = hints[i].type;
        }
    return t;
}

static void gen_alternatives(struct sc *c, const json_t *s, const char *key, struct sp_gstr *o)
{
    const json_t *alts = json_object_get(s, key);
    if (!json_is_array(alts) || !json_array_size(alts)) {
        fail(c, "'%s' must be a non-empty array", key);
        return;
    }
    /* sibling keywords (other than annotations and $defs) apply to every alternative */
    bool siblings = false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) siblings |= strcmp(k, key) && strcmp(k, "$defs") &&
                                                      strcmp(k, "definitions") &&
                                                      !in_list(k, annotations, N_OF(annotations));
    sp_gstr_add(o, "( ");
    size_t i;
    json_t *alt;
    json_array_foreach(alts, i, alt) {
        if (i)
            sp_gstr_add(o, " | ");
        size_t old = sp_jpath_push(&c->path, ".%s[%zu]", key, i);
        gen(c, siblings ? merged(c, s, key, alt) : alt, o);
        sp_jpath_pop(&c->path, old);
    }
    sp_gstr_add(o, " )");
}

static void gen_ref(struct sc *c, const char *ref, struct sp_gstr *o)
{
    const json_t *target = resolve(c, ref);
    if (!target)
        return;
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == target) {
            sp_gstr_add(o, c->memo[i].name);
            return;
        }
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? c->cap_memo * 2 : 16;
        struct memo *m = realloc(c->memo, cap * sizeof *m);
        if (!m) {
            fail(c, "out of memory");
            return;
        }
        c->memo = m;
        c->cap_memo = cap;
    }
    struct memo *m = &c->memo[c->n_memo++];
    m->node = target;
    new_rule_name(c, m->name, sizeof m->name, "ref");
    char name[24];
    snprintf(name, sizeof name, "%s", m->name);
    struct sp_gstr body = {0};
    size_t old = sp_jpath_push(&c->path, " ($ref %.80s)", ref);
    gen(c, target, &body);
    sp_jpath_pop(&c->path, old);
    emit_rule(c, name, &body);
    free(body.p);
    sp_gstr_add(o, name);
}

static void gen(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    if (c->failed || !s)
        return;
    if (json_is_true(s)) {
        sp_gstr_add(o, "json-value");
        return;
    }
    if (json_is_false(s)) {
        fail(c, "unsatisfiable schema: false");
        return;
    }
    if (!json_is_object(s)) {
        fail(c, "a schema must be an object or a boolean");
        return;
    }
    if (++c->depth > MAX_NEST) {
        fail(c, "schema nested deeper than %d", MAX_NEST);
        return;
    }
    if (!check_keywords(c, s))
        goto out;
    const json_t *ref = json_object_get(s, "$ref");
    if (json_object_get(s, "allOf") || (ref && json_object_size(s) > 1 && !json_object_get(s, "$defs") &&
                                        !json_object_get(s, "definitions"))) {
        const json_t *m = merged(c, s, NULL, NULL);
        if (m && (json_object_get(m, "allOf") || json_object_get(m, "$ref")))
            fail(c, "allOf could not be merged");
        else if (m)
            gen(c, m, o);
        goto out;
    }
    if (ref) {
        if (!json_is_string(ref))
            fail(c, "'$ref' must be a string");
        else
            gen_ref(c, json_string_value(ref), o);
        goto out;
    }
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst) {
        json_lit(c, o, cst);
        goto out;
    }
    if (en) {
        if (!json_is_array(en) || !json_array_size(en)) {
            fail(c, json_is_array(en) ? "unsatisfiable schema: empty enum" : "'enum' must be an array");
            goto out;
        }
        sp_gstr_add(o, "( ");
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) {
            if (i)
                sp_gstr_add(o, " | ");
            json_lit(c, o, v);
        }
        sp_gstr_add(o, " )");
        goto out;
    }
    if (json_object_get(s, "anyOf")) {
        gen_alternatives(c, s, "anyOf", o);
        goto out;
    }
    if (json_object_get(s, "oneOf")) {
        gen_alternatives(c, s, "oneOf", o);
        goto out;
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type)) {
        gen_type(c, s, json_string_value(type), o);
    } else if (json_is_array(type)) {
        if (!json_array_size(type)) {
            fail(c, "unsatisfiable schema: 'type' is an empty array");
            goto out;
        }
        sp_gstr_add(o, "( ");
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            if (!json_is_string(t)) {
                fail(c, "'type' must hold strings");
                goto out;
            }
            if (i)
                sp_gstr_add(o, " | ");
            gen_type(c, s, json_string_value(t), o);
        }
        sp_gstr_add(o, " )");
    } else if (type) {
        fail(c, "'type' must be a string or an array of strings");
    } else {
        const char *t = implied_type(s);
        if (t)
            gen_type(c, s, t, o);
        else
            sp_gstr_add(o, "json-value");
    }
out:
    c->depth--;
}

sp_status sp_grammar_from_schema(const char *schema, size_t len, char **gbnf)
{
    return sp_grammar_from_schema_as(schema, len, "root", gbnf);
}

sp_status sp_grammar_from_schema_as(const char *schema, size_t len, const char *rule, char **gbnf)
{
    struct sc c = {0};
    json_error_t jerr;
    *gbnf = NULL;
    c.root = json_loadb(schema ? schema : "", schema ? len : 0, JSON_REJECT_DUPLICATES, &jerr);
    if (!c.root)
        return sp_error_set(SP_ERR_ARG, "json schema: not valid JSON: %s (line %d, column %d)", jerr.text,
                            jerr.line, jerr.column);
    c.owned = json_array();
    sp_jpath_init(&c.path);
    struct sp_gstr top = {0};
    if (!json_is_object(c.root) && !json_is_boolean(c.root))
        fail(&c, "a schema must be an object or a boolean");
    gen(&c, c.root, &top);
    if (!c.failed && (top.failed || c.rules.failed))
        fail(&c, "out of memory");
    sp_status st = SP_ERR_ARG;
    if (!c.failed) {
        struct sp_gstr all = {0};
        sp_gstr_addf(&all, "%s ::= ", rule);
        sp_gstr_add(&all, top.p ? top.p : "json-value");
        sp_gstr_add(&all, "\n");
        sp_gstr_addn(&all, c.rules.p ? c.rules.p : "", c.rules.n);
        sp_gstr_add(&all, base_rules);
        if (all.failed) {
            free(all.p);
            st = sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
        } else {
            *gbnf = all.p;
            st = SP_OK;
        }
    }
    free(top.p);
    free(c.rules.p);
    free(c.memo);
    json_decref(c.owned);
    json_decref(c.root);
    return st;
}
