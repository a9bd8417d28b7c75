/* JSON Schema -> GBNF.
 *
 * The schema is read in the internal form (schema_norm.c: every draft,
 * validation keywords only).  Each keyword is enforced by the grammar or
 * checked afterwards by the validator (validate.c), which sees every
 * output: the grammar may be wider than the schema where the validator
 * narrows it (uniqueItems, multipleOf, not, if/then/else, dependencies,
 * contains, property counts, bounds on non-integers, patterns the regex
 * subset lacks, long lengths), and narrower where that keeps it small
 * (no property beyond those listed unless additionalProperties,
 * patternProperties or minProperties asks for more; extra properties come
 * where the object may end: among the listed ones after the last required
 * one; numbers of at most 16 digits).
 *
 * Objects hold their properties in the schema's `properties` order, each
 * optional one skippable where it stands: a chain of rules, one per
 * property ("the rest, after something was written"), and the object's
 * alternatives "the first property written is i" up to the first required
 * one: linear in the number of properties.
 *
 * Whitespace is compact (none) unless the grammar is made flexible: then
 * any JSON whitespace may stand between tokens (not before or after the
 * value: a model that wants to go on after it would write whitespace
 * forever).
 *
 * Objects, arrays, object chains and $ref targets become rules ($ref
 * targets by name, so recursion is a rule calling itself); everything else
 * is an inline expression.  allOf, a $ref beside other keywords and
 * if/then/else are merged into one schema (schema_merge.c); anyOf/oneOf
 * take their siblings into each alternative. */
#include <ctype.h>
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
/* Lengths and counts of items or properties up to this are spelled out by
 * the grammar (a copy of the item, or of a character's automaton, per
 * position); larger maxima are left to the validator and larger minima are
 * enforced up to this. */
#define MAX_COUNT_GRAMMAR 256
/* String positions spelled out in one schema (each about 14 automaton
 * states, and a walk of the vocabulary when bound) ... */
#define MAX_SPELLED_CHARS 2048
/* ... and copies of an array's item or an object's unlisted property (a
 * call of the item's rule, a few states, or a copy of a small one: an
 * integer is about 18).  Counts past these
 * budgets are the validator's: a maximum is dropped, a minimum enforced as
 * far as the budget goes, so no count makes a schema's automaton grow past
 * a few tens of thousands of states. */
#define MAX_SPELLED_ITEMS 1024
/* Character positions the patterns of one schema spell (a repetition's
 * copies counted: `^[a-z]{1,255}$` is 255); a pattern past the budget is
 * the validator's, as one beyond the regex subset is. */
#define MAX_SPELLED_PATTERN 8192

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
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) {
        s->failed = true;
    } else if ((size_t)n < sizeof buf) {
        sp_gstr_addn(s, buf, (size_t)n);
    } else { /* longer: formatted again into a buffer of its size */
        char *pad = malloc((size_t)n + 1);
        if (!pad) {
            s->failed = true;
        } else {
            vsnprintf(pad, (size_t)n + 1, fmt, again);
            sp_gstr_addn(s, pad, (size_t)n);
            free(pad);
        }
    }
    va_end(again);
}

/* ---- the fixed part of every schema grammar ----
 * json-char has no \\u escapes of surrogates: a lone one is not valid JSON
 * text to jansson; json-number's exponent has two digits (1e826 is not a
 * double).  W is the whitespace between tokens: nothing, or
 * json-ws. */

#define BASE_RULES(W) \
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n" \
    "json-object ::= \"{\" " W " ( json-string " W " \":\" " W " json-value ( " W " \",\" " W " json-string " W \
    " \":\" " W " json-value )* " W " )? \"}\"\n" \
    "json-array ::= \"[\" " W " ( json-value ( " W " \",\" " W " json-value )* " W " )? \"]\"\n" \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n" \
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] hex hex hex " \
    "| [dD] [0-7] hex hex ) )\n" \
    "hex ::= [0-9a-fA-F]\n" \
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n" \
    "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n" \
    "json-bool ::= \"true\" | \"false\"\n" \
    "json-key-rest ::= json-char* \"\\\"\"\n" \
    "json-key-more ::= ( \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] hex hex hex | [dD] [0-7] hex hex ) ) " \
    "| [^\\x00-\\x7F] ) json-key-rest\n"
static const char base_compact[] = BASE_RULES("");
/* The ends of a key that is none of an object's listed names: called from
 * every node of the names' trie, so built once, not at every node. */
const char *const sp_schema_called_rules[] = {"json-key-rest", "json-key-more", NULL};
static const char base_flex[] = BASE_RULES("json-ws") "json-ws ::= [ \\t\\n\\r]*\n";

const char *sp_grammar_json_object_gbnf(void) { return "root ::= json-object\n" BASE_RULES(""); }

/* ---- the compiler ---- */

struct memo {
    const json_t *node;
    char name[24];
};

struct sc {
    const struct sp_schema *sch;
    struct sp_gstr rules;
    struct sp_jpath path;
    bool failed;
    sp_status st;    /* of the failure */
    const char *w;   /* between tokens: " " or " json-ws " */
    uint32_t n_rules;
    struct memo *memo;
    size_t n_memo, cap_memo;
    struct sp_gstr keys;     /* per key rule made: its name, '\0', its names joined by '\n', '\0' */
    int depth;
    bool closed;     /* SP_SCHEMA_CLOSED */
    uint32_t spelled; /* string positions spelled so far (MAX_SPELLED_CHARS) */
    uint32_t copies;  /* item and property copies spelled so far (MAX_SPELLED_ITEMS) */
    double patterns;  /* pattern positions spelled so far (MAX_SPELLED_PATTERN) */
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
    c->st = sp_error_set(SP_ERR_ARG, "json schema: %s at %s", msg, c->path.s);
    c->failed = true;
}

static void nomem(struct sc *c)
{
    if (!c->failed)
        c->st = sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
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
static void json_lit(struct sp_gstr *o, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        o->failed = true;
        return;
    }
    gbnf_lit(o, t, strlen(t));
    free(t);
}

static void gen(struct sc *c, const json_t *s, struct sp_gstr *o);

/* An enum or const value: its compact JSON text, with the whitespace the
 * grammar allows between the tokens of an object or array (flexible: any,
 * as everywhere else in the value). */
static void value_lit(struct sc *c, struct sp_gstr *o, const json_t *v)
{
    if (!strcmp(c->w, " ") || (!json_is_object(v) && !json_is_array(v))) {
        json_lit(o, v);
        return;
    }
    bool obj = json_is_object(v);
    sp_gstr_addf(o, "( \"%c\"%s", obj ? '{' : '[', c->w);
    size_t i = 0;
    const char *k;
    json_t *e;
    if (obj) {
        json_object_foreach((json_t *)v, k, e) {
            json_t *key = json_string(k);
            if (i++)
                sp_gstr_addf(o, "%s\",\"%s", c->w, c->w);
            if (key)
                json_lit(o, key);
            else
                o->failed = true;
            json_decref(key);
            sp_gstr_addf(o, "%s\":\"%s", c->w, c->w);
            value_lit(c, o, e);
        }
    } else {
        json_array_foreach(v, i, e) {
            if (i)
                sp_gstr_addf(o, "%s\",\"%s", c->w, c->w);
            value_lit(c, o, e);
        }
    }
    sp_gstr_addf(o, "%s\"%c\" )", c->w, obj ? '}' : ']');
}

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

/* A merge of s (less `without`) and parts, owned by c; NULL when failed,
 * or (quiet) when no value satisfies it. */
static const json_t *merged(struct sc *c, const json_t *s, const char *const *without, const json_t *const *parts,
                            size_t n_parts, bool quiet)
{
    const char *empty = NULL;
    const json_t *m = sp_schema_merge(c->sch, c->owned, s, without, parts, n_parts, &empty);
    if (!m) {
        nomem(c);
        return NULL;
    }
    if (empty) {
        if (!quiet)
            fail(c, "unsatisfiable schema: %s", empty);
        return NULL;
    }
    return c->failed ? NULL : m;
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
            /* a bound beyond the 16 digits the grammar spells: loose on
             * the far side (the validator checks it), empty on the near */
            if ((k < 2) == (d < 0))
                continue;
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

static long long count(const json_t *s, const char *k, long long none)
{
    const json_t *v = json_object_get(s, k);
    return json_is_integer(v) ? (long long)json_integer_value(v) : none;
}

/* The grammar's share of a count range mn..mx (mx < 0: none), one copy
 * spelled per position, charged to *used of a budget of cap: the range
 * exactly when its maximum is within MAX_COUNT_GRAMMAR and the budget;
 * else no maximum and the minimum as far as both go.  The validator checks
 * the whole range. */
static void grammar_counts(long long *mn, long long *mx, uint32_t *used, uint32_t cap)
{
    long long left = *used < cap ? (long long)(cap - *used) : 0;
    if (*mx >= 0 && *mx <= MAX_COUNT_GRAMMAR && *mx <= left) {
        *used += (uint32_t)*mx;
        return;
    }
    *mx = -1;
    if (*mn > MAX_COUNT_GRAMMAR)
        *mn = MAX_COUNT_GRAMMAR;
    if (*mn > left)
        *mn = left;
    *used += (uint32_t)*mn;
}

/* A pattern's GBNF (sp_regex_to_gbnf), charged to the schema's budget:
 * NULL, or why the grammar leaves it to the validator. */
static const char *pattern_gbnf(struct sc *c, const char *pattern, size_t len, struct sp_gstr *out)
{
    double spelled = 0;
    const char *why = sp_regex_to_gbnf(pattern, len, out, &spelled);
    if (!why && c->patterns + spelled > MAX_SPELLED_PATTERN)
        return "past the schema's budget of pattern positions";
    if (!why)
        c->patterns += spelled;
    return why;
}

/* ---- types ---- */

static void gen_string(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    long long mn = count(s, "minLength", 0), mx = count(s, "maxLength", -1);
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minLength %lld > maxLength %lld", mn, mx);
        return;
    }
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    const struct sp_schema_format *f = fmt ? sp_schema_format_find(json_string_value(fmt)) : NULL;
    if (f) { /* lengths, and a pattern beside it: checked by the validator */
        sp_gstr_addf(o, "( \"\\\"\" ( %s ) \"\\\"\" )", f->gbnf);
        return;
    }
    if (pat) { /* lengths beside it: the validator's; a pattern beyond the subset: too */
        struct sp_gstr rx = {0};
        const char *why = pattern_gbnf(c, json_string_value(pat), json_string_length(pat), &rx);
        if (!why)
            sp_gstr_addf(o, "( \"\\\"\" %s \"\\\"\" )", rx.p ? rx.p : "");
        else if (rx.failed)
            nomem(c);
        free(rx.p);
        if (!why || rx.failed)
            return;
    }
    grammar_counts(&mn, &mx, &c->spelled, MAX_SPELLED_CHARS);
    if (mn == 0 && mx < 0)
        sp_gstr_add(o, "json-string");
    else if (mx < 0)
        sp_gstr_addf(o, "( \"\\\"\" json-char{%lld,} \"\\\"\" )", mn);
    else
        sp_gstr_addf(o, "( \"\\\"\" json-char{%lld,%lld} \"\\\"\" )", mn, mx);
}

static void gen_number(struct sc *c, const json_t *s, bool integer, struct sp_gstr *o)
{
    bool hl, hh;
    long long lo, hi;
    if (integer) {
        if (int_bounds(c, s, &hl, &lo, &hh, &hi))
            int_range(o, hl, lo, hh, hi);
        return;
    }
    /* bounds: the integer part as written (the value truncated toward
     * zero: 0.5 is "0.5" under minimum 0.3, -2.4 "-2.4" above -2.5) within
     * theirs, no exponent; the exact bound (a fraction past it) is left to
     * the validator.  Values between -1 and 0 are written "-0.x": that
     * integer part is allowed when the bounds leave room there. */
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    bool any = false, neg_lo = true, neg_hi = true;
    for (int k = 0; k < 4; k++)
        any |= json_object_get(s, keys[k]) != NULL;
    json_t *t = any ? json_deep_copy(s) : NULL;
    for (int k = 0; t && k < 4; k++) {
        json_t *v = json_object_get(t, keys[k]);
        if (!json_is_number(v))
            continue;
        double d = json_number_value(v), ip = trunc(d);
        bool excl = k % 2, at_int = d == ip;
        if (k < 2) {
            neg_lo &= d < 0;
            ip += excl && at_int && d < 0; /* above -2: -1.9 */
        } else {
            neg_hi &= d > -1;
            if (d < 0 || (excl && d == 0))
                ip = ip == 0 ? -1 : ip; /* below -0.25: "-0.5" (the "-0" part), "-1.5" */
            else
                ip -= excl && at_int; /* below 1: 0.99 */
        }
        json_t *b = fabs(d) <= (double)MAX_BOUND ? json_integer((json_int_t)ip) : json_real(d);
        /* exclusive or not, the integer part at the bound is allowed */
        if (!b || json_object_set_new(t, keys[k & 2], b) || (excl && json_object_del(t, keys[k])))
            nomem(c);
    }
    const json_t *tl = json_object_get(t, "minimum"), *th = json_object_get(t, "maximum");
    if (!any) {
        sp_gstr_add(o, "json-number");
    } else if (!t) {
        nomem(c);
    } else if (neg_lo && neg_hi && json_is_integer(tl) && json_is_integer(th) &&
               json_integer_value(tl) > json_integer_value(th)) {
        sp_gstr_add(o, "( \"-0\" ( \".\" [0-9]{1,16} )? )"); /* between -1 and 0 only */
    } else if (int_bounds(c, t, &hl, &lo, &hh, &hi)) {
        sp_gstr_add(o, "( ( ");
        int_range(o, hl, lo, hh, hi);
        sp_gstr_addf(o, "%s ) ( \".\" [0-9]{1,16} )? )", neg_lo && neg_hi ? " | \"-0\"" : "");
    }
    json_decref(t);
}

/* Items after "[" W (or after a prefix of items, each followed by W):
 * `item W ( "," W item W ){mn-1,mx-1}`, or with a prefix before them
 * `( "," W item W ){mn,mx}` (mx < 0: no maximum). */
static void gen_items(struct sc *c, const char *item, size_t n, long long mn, long long mx, bool after_prefix,
                      struct sp_gstr *o)
{
    char cnt[48];
    long long lo = after_prefix ? mn : (mn > 0 ? mn - 1 : 0);
    long long hi = after_prefix || mx < 0 ? mx : mx - 1;
    if (hi < 0)
        snprintf(cnt, sizeof cnt, "{%lld,}", lo);
    else
        snprintf(cnt, sizeof cnt, "{%lld,%lld}", lo, hi);
    if (!after_prefix) {
        sp_gstr_add(o, "( ");
        sp_gstr_addn(o, item, n);
        sp_gstr_add(o, c->w);
    }
    sp_gstr_addf(o, "( \",\"%s", c->w);
    sp_gstr_addn(o, item, n);
    sp_gstr_addf(o, "%s)%s", c->w, cnt);
    if (!after_prefix)
        sp_gstr_addf(o, " )%s", mn == 0 ? "?" : "");
}

static void gen_array(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    long long mn = count(s, "minItems", 0), mx = count(s, "maxItems", -1);
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minItems %lld > maxItems %lld", mn, mx);
        return;
    }
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (!items)
        items = json_object_get(s, "unevaluatedItems");
    size_t k = json_array_size(prefix);
    char name[24];
    new_rule_name(c, name, sizeof name, "arr");
    struct sp_gstr body = {0}, item = {0};
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
    grammar_counts(&mn, &mx, &c->copies, MAX_SPELLED_ITEMS);
    sp_gstr_addf(&body, "\"[\"%s", c->w);
    /* prefix items: the first min(mn, k) required, then each optional */
    size_t open = 0;
    for (size_t i = 0; i < k && (mx < 0 || (long long)i < mx); i++) {
        if ((long long)i >= mn) {
            sp_gstr_add(&body, "( ");
            open++;
        }
        if (i)
            sp_gstr_addf(&body, "\",\"%s", c->w);
        size_t old = sp_jpath_push(&c->path, ".prefixItems[%zu]", i);
        gen(c, json_array_get(prefix, i), &body);
        sp_jpath_pop(&c->path, old);
        sp_gstr_add(&body, c->w);
    }
    /* then items beyond the prefix: counts adjusted */
    long long rmn = mn > (long long)k ? mn - (long long)k : 0;
    long long rmx = mx < 0 ? -1 : (mx > (long long)k ? mx - (long long)k : 0);
    if (rmx != 0 && !(json_is_false(items) && k) && !item.failed) {
        if (strchr(item.p, ' ')) { /* an expression: a rule, so that its copies share it when large */
            char in[64];
            snprintf(in, sizeof in, "%s-item", name);
            emit_rule(c, in, &item);
            item.n = 0;
            sp_gstr_add(&item, in);
        }
        gen_items(c, item.p, item.n, rmn, rmx, k > 0, &body);
        sp_gstr_add(&body, " ");
    }
    while (open--)
        sp_gstr_add(&body, ")? ");
    sp_gstr_add(&body, "\"]\"");
    if (item.failed || body.failed)
        nomem(c);
    emit_rule(c, name, &body);
    sp_gstr_add(o, name);
done:
    free(item.p);
    free(body.p);
}

/* ---- objects ---- */

struct prop {
    struct sp_gstr kv;   /* key W ":" W value */
    bool required;
};

/* Whether no value satisfies s in the way an object's member schemas say
 * "never present": false, or `not` of true or {} (WashingtonPost's
 * `"referent": {"not": {}}`). */
static bool never(const json_t *s)
{
    const json_t *k = json_object_get(s, "not");
    return json_is_false(s) || json_is_true(k) || (json_is_object(k) && !json_object_size(k));
}

/* Names of at most this many bytes, plain printable ASCII but '"' and
 * '\\', are kept out of the key of an unlisted property by the grammar;
 * others only by the validator. */
#define MAX_EXCLUDED_NAME 64

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The rest of a key (after its opening quote) that is none of the sorted
 * names[lo, hi), which share their first d bytes: a trie spelled as one
 * nested expression, linear in the names' bytes.  At each node: close the
 * key unless a name ends here, go on with a byte some name has next, or
 * take any other character and then anything (another ASCII character is
 * one byte set at the node; an escape or a wider character is one call,
 * json-key-more, so a node is a few states, not a UTF-8 automaton). */
static void key_except(struct sp_gstr *o, char **names, size_t lo, size_t hi, size_t d)
{
    bool ends = false;
    sp_gstr_add(o, "( ");
    size_t i = lo;
    if (i < hi && !names[i][d]) { /* sorted: an ending name comes first */
        ends = true;
        i++;
    }
    bool alt = false;
    if (!ends) {
        sp_gstr_add(o, "\"\\\"\"");
        alt = true;
    }
    bool other[128] = {false};
    for (unsigned ch = 0x20; ch < 0x80; ch++)
        other[ch] = ch != '"' && ch != '\\';
    while (i < hi) {
        unsigned char ch = (unsigned char)names[i][d];
        size_t j = i;
        while (j < hi && (unsigned char)names[j][d] == ch)
            j++;
        if (isalnum(ch))
            sp_gstr_addf(o, "%s\"%c\" ", alt ? " | " : "", ch);
        else
            sp_gstr_addf(o, "%s\"\\x%02X\" ", alt ? " | " : "", ch);
        key_except(o, names, i, j, d + 1);
        other[ch & 0x7F] = false;
        alt = true;
        i = j;
    }
    sp_gstr_add(o, alt ? " | [" : "[");
    for (unsigned ch = 0x20; ch < 0x80; ch++) {
        if (!other[ch] || (ch > 0x20 && other[ch - 1]))
            continue;
        unsigned last = ch;
        while (last + 1 < 0x80 && other[last + 1])
            last++;
        if (isalnum(ch) && isalnum(last))
            sp_gstr_addf(o, last > ch ? "%c-%c" : "%c", ch, last);
        else
            sp_gstr_addf(o, last > ch ? "\\x%02X-\\x%02X" : "\\x%02X", ch, last);
    }
    sp_gstr_add(o, "] json-key-rest | json-key-more )");
}

/* A key that is none of the properties s lists or requires (those the
 * grammar can spell: MAX_EXCLUDED_NAME), into o. */
static void gen_unlisted_key(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    const json_t *pl = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    size_t cap = json_object_size(pl) + json_array_size(req), n = 0, i;
    char **names = malloc((cap ? cap : 1) * sizeof *names);
    if (!names) {
        nomem(c);
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)pl, k, v) names[n++] = (char *)k;
    json_array_foreach(req, i, v) names[n++] = (char *)json_string_value(v);
    size_t m = 0;
    for (i = 0; i < n; i++) {
        bool plain = names[i] && strlen(names[i]) <= MAX_EXCLUDED_NAME;
        for (const char *p = names[i]; plain && *p; p++)
            plain = *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\';
        if (plain)
            names[m++] = names[i];
    }
    qsort(names, m, sizeof *names, cmp_str);
    size_t u = 0;
    for (i = 0; i < m; i++)
        if (!u || strcmp(names[u - 1], names[i]))
            names[u++] = names[i];
    struct sp_gstr set = {0};
    for (i = 0; i < u; i++)
        sp_gstr_addf(&set, "%s\n", names[i]);
    const char *found = NULL;
    for (size_t at = 0; set.p && at < c->keys.n && !found;) { /* the same names before: the same rule */
        const char *nm = c->keys.p + at, *ns = nm + strlen(nm) + 1;
        if (!strcmp(ns, set.p))
            found = nm;
        at = (size_t)(ns - c->keys.p) + strlen(ns) + 1;
    }
    if (set.failed)
        nomem(c);
    if (!u) {
        sp_gstr_add(o, "json-string");
    } else if (found) {
        sp_gstr_add(o, found);
    } else { /* a rule: the object names it twice, and minimizing it merges the key's ends */
        struct sp_gstr body = {0};
        char name[24];
        new_rule_name(c, name, sizeof name, "key");
        sp_gstr_addn(&c->keys, name, strlen(name) + 1);
        sp_gstr_addn(&c->keys, set.p, set.n + 1);
        if (c->keys.failed)
            nomem(c);
        sp_gstr_add(&body, "\"\\\"\" ");
        key_except(&body, names, 0, u, 0);
        if (body.failed)
            nomem(c);
        emit_rule(c, name, &body);
        free(body.p);
        sp_gstr_add(o, name);
    }
    free(set.p);
    free(names);
}

/* The expression of one property beyond those listed (patternProperties,
 * additionalProperties, or any when the object lists none), into *extra;
 * false when no such property may appear. */
static bool gen_extra(struct sc *c, const json_t *s, size_t n_listed, struct sp_gstr *extra)
{
    const json_t *pats = json_object_get(s, "patternProperties"), *addl = json_object_get(s, "additionalProperties");
    const json_t *names = json_object_get(s, "propertyNames");
    if (!addl)
        addl = json_object_get(s, "unevaluatedProperties");
    bool any = false;
    if (json_is_false(names))
        return false;
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)pats, pk, pv) {
        if (never(pv)) /* keys it matches are forbidden: the validator's */
            continue;
        struct sp_gstr key = {0};
        const char *why = pattern_gbnf(c, pk, strlen(pk), &key);
        sp_gstr_addf(extra, "%s( \"\\\"\" %s \"\\\"\"%s\":\"%s", any ? " | " : "", why ? "json-char*" : key.p,
                     c->w, c->w);
        free(key.p);
        size_t old = sp_jpath_push(&c->path, ".patternProperties.%.80s", pk);
        gen(c, pv, extra);
        sp_jpath_pop(&c->path, old);
        sp_gstr_add(extra, " )");
        any = true;
    }
    /* no word on the others: any other key, any value (JSON Schema's
     * default); closed: only the listed ones, unless the object needs more */
    bool open = addl ? !never(addl)
                     : !c->closed || (!n_listed && !pats) || count(s, "minProperties", 0) > (long long)n_listed;
    if (open) {
        sp_gstr_add(extra, any ? " | ( " : "( ");
        if (json_is_object(names)) {
            static const char *const none[] = {NULL};
            json_t *str = json_pack("{s:s}", "type", "string");
            const json_t *parts[1] = {str};
            const json_t *m = str ? merged(c, names, none, parts, 1, false) : NULL;
            json_decref(str);
            size_t old = sp_jpath_push(&c->path, ".propertyNames");
            gen(c, m, extra);
            sp_jpath_pop(&c->path, old);
        } else {
            gen_unlisted_key(c, s, extra);
        }
        sp_gstr_addf(extra, "%s\":\"%s", c->w, c->w);
        if (!addl || json_is_true(addl)) {
            sp_gstr_add(extra, "json-value");
        } else {
            size_t old = sp_jpath_push(&c->path, ".additionalProperties");
            gen(c, addl, extra);
            sp_jpath_pop(&c->path, old);
        }
        sp_gstr_add(extra, " )");
        any = true;
    }
    return any;
}

/* The listed properties in the schema's order, then required names that
 * no property lists.  Returns how many, *props allocated. */
static size_t gen_props(struct sc *c, const json_t *s, struct prop **props)
{
    const json_t *pl = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    size_t n = 0, cap = json_object_size(pl) + json_array_size(req), i;
    json_t *r;
    *props = calloc(cap ? cap : 1, sizeof **props);
    if (!*props) {
        nomem(c);
        return 0;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)pl, k, v) {
        struct prop *p = &(*props)[n++];
        json_array_foreach(req, i, r) p->required |= !strcmp(json_string_value(r), k);
        if (never(v)) { /* never present */
            if (p->required) {
                fail(c, "unsatisfiable schema: required property '%.60s' can have no value", k);
                return n;
            }
            n--;
            continue;
        }
        json_t *key = json_string(k);
        json_lit(&p->kv, key);
        json_decref(key);
        sp_gstr_addf(&p->kv, "%s\":\"%s", c->w, c->w);
        size_t old = sp_jpath_push(&c->path, ".properties.%.80s", k);
        gen(c, v, &p->kv);
        sp_jpath_pop(&c->path, old);
    }
    json_array_foreach(req, i, r) {
        const char *name = json_string_value(r);
        bool dup = json_object_get(pl, name) != NULL;
        for (size_t j = 0; j < i && !dup; j++)
            dup = !strcmp(json_string_value(json_array_get(req, j)), name);
        if (dup)
            continue;
        if (json_is_false(addl) && !json_object_get(s, "patternProperties")) {
            fail(c, "unsatisfiable schema: required property '%.60s' is not allowed (additionalProperties is "
                 "false)", name);
            return n;
        }
        struct prop *p = &(*props)[n++];
        p->required = true;
        json_lit(&p->kv, r);
        sp_gstr_addf(&p->kv, "%s\":\"%s", c->w, c->w);
        if (json_is_object(addl))
            gen(c, addl, &p->kv);
        else
            sp_gstr_add(&p->kv, "json-value");
    }
    return n;
}

/* An object: "{" W A W "}" where A, "the properties", is one of
 *   kv_i b_{i+1}  for each i up to the first required property r (the
 *                 first one written is i: those before it are skipped),
 *   X E b_0       when unlisted properties may appear and no property is
 *                 required (unlisted ones first),
 *   nothing       when no property is required;
 * and b_i, "the properties from i on, after something was written", is
 *   ( W "," W kv_i )? b_{i+1}  (optional i)   W "," W kv_i b_{i+1}  (required i)
 *   ""  (i = n).
 * X is one unlisted property (gen_extra) and E, "more of them", is
 * ( W "," W X )*: with unlisted properties allowed, E follows every kv_i
 * from the last required property on, so they stand in any gap where the
 * object may end (all of them when nothing is required).  Not before a
 * required one: a model writing unlisted keys could write them forever
 * where "}" is not yet allowed.  An unlisted key is none of the listed
 * names (the key's trie), so a listed property is written only in its
 * place.  b_1 .. b_L (L = min(r + 1, n))
 * are rules, b_L spelling the rest of the chain; with a required first
 * property and no unlisted ones b_1 is spelled inside A.  kv_i is a rule
 * where it is named twice.  A map (no property listed) is X E with E's
 * count bounded by minProperties/maxProperties. */
static void gen_object(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    struct prop *props = NULL;
    struct sp_gstr extra = {0}, body = {0}, tail = {0}, inl = {0};
    size_t n = gen_props(c, s, &props);
    bool more = !c->failed && gen_extra(c, s, n, &extra);
    char name[24];
    if (c->failed)
        goto done;
    new_rule_name(c, name, sizeof name, "obj");
    size_t r = 0;
    while (r < n && !props[r].required)
        r++;
    size_t last = r + 1 < n ? r + 1 : n;
    /* a map (no property listed): its size bounds the extras */
    long long mn = n ? 0 : count(s, "minProperties", 0), mx = n ? -1 : count(s, "maxProperties", -1);
    if (mx >= 0 && mn > mx) {
        fail(c, "unsatisfiable schema: minProperties %lld > maxProperties %lld", mn, mx);
        goto done;
    }
    grammar_counts(&mn, &mx, &c->copies, MAX_SPELLED_ITEMS);
    if (mx == 0)
        more = false;
    bool gaps = more && n > 0; /* unlisted properties in the gaps where the object may end */
    size_t rl = n; /* the last required property (n: none) */
    for (size_t i = 0; i < n; i++)
        if (props[i].required)
            rl = i;
    char xn[64];
    if (more) { /* X, a rule: named in several places, its copies call it */
        snprintf(xn, sizeof xn, "%s-x", name);
        emit_rule(c, xn, &extra);
        extra.n = 0;
        sp_gstr_add(&extra, xn);
    }
    if (gaps) {
        sp_gstr_addf(&tail, "(%s\",\"%s%s )*", c->w, c->w, xn);
        snprintf(xn, sizeof xn, "%s-e", name);
        emit_rule(c, xn, &tail);
        for (size_t i = rl < n ? rl : 0; i < n; i++)
            sp_gstr_addf(&props[i].kv, " %s", xn);
        tail.n = 0;
        sp_gstr_add(&tail, "\"\"");
    } else if (more && mx > 0) {
        sp_gstr_addf(&tail, "(%s\",\"%s%s ){%lld,%lld}", c->w, c->w, extra.p, mn > 1 ? mn - 1 : 0, mx - 1);
    } else if (more) {
        sp_gstr_addf(&tail, "(%s\",\"%s%s ){%lld,}", c->w, c->w, extra.p, mn > 1 ? mn - 1 : 0);
    } else {
        sp_gstr_add(&tail, "\"\"");
    }
    bool lead = gaps && rl == n; /* unlisted properties first: X E b_0 */
    for (size_t i = lead ? 0 : 1; i <= r && i < n; i++) { /* kv_i named twice */
        char kvn[64];
        snprintf(kvn, sizeof kvn, "%s-kv%zu", name, i);
        emit_rule(c, kvn, &props[i].kv);
        props[i].kv.n = 0;
        sp_gstr_add(&props[i].kv, kvn);
    }
    bool inline_b1 = r == 0 && !lead;
    for (size_t j = last; j >= 1; j--) {
        struct sp_gstr b = {0};
        for (size_t i = j; i < (j == last ? n : j + 1); i++)
            sp_gstr_addf(&b, props[i].required ? "%s\",\"%s%s " : "(%s\",\"%s%s )? ", c->w, c->w, props[i].kv.p);
        if (j == last)
            sp_gstr_addn(&b, tail.p, tail.n);
        else
            sp_gstr_addf(&b, "%s-b%zu", name, j + 1);
        if (inline_b1) { /* b_1, named once */
            inl = b;
            break;
        }
        char bn[64];
        snprintf(bn, sizeof bn, "%s-b%zu", name, j);
        emit_rule(c, bn, &b);
        free(b.p);
    }
    sp_gstr_addf(&body, "\"{\"%s( ", c->w);
    for (size_t i = 0; i <= r && i < n; i++) {
        if (i)
            sp_gstr_add(&body, " | ");
        sp_gstr_addn(&body, props[i].kv.p, props[i].kv.n);
        if (inline_b1)
            sp_gstr_addf(&body, " %s", inl.p);
        else
            sp_gstr_addf(&body, " %s-b%zu", name, i + 1);
    }
    if (lead)
        sp_gstr_addf(&body, " | %s %s-e %s%s\",\"%s%s%s %s-b1", extra.p, name, props[0].required ? "" : "(",
                     c->w, c->w, props[0].kv.p, props[0].required ? "" : " )?", name);
    if (r == n) { /* nothing required: extras first, or nothing at all */
        if (more && !gaps)
            sp_gstr_addf(&body, "%s %s", extra.p, tail.p);
        if (!more || n || mn == 0)
            sp_gstr_add(&body, n || more ? " | \"\"" : "\"\"");
    }
    sp_gstr_addf(&body, " )%s\"}\"", c->w);
    if (body.failed || extra.failed || tail.failed || inl.failed)
        nomem(c);
    emit_rule(c, name, &body);
    sp_gstr_add(o, name);
done:
    for (size_t i = 0; props && i < n; i++)
        free(props[i].kv.p);
    free(props);
    free(extra.p);
    free(body.p);
    free(tail.p);
    free(inl.p);
}

/* ---- the rest ---- */

static const char *const type_names[] = {"string", "integer", "number", "boolean", "null", "object", "array"};

static bool lists_type(const json_t *t, const char *name)
{
    if (json_is_string(t))
        return !strcmp(json_string_value(t), name);
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v) if (!strcmp(json_string_value(v), name)) return true;
    return false;
}

static void gen_type(struct sc *c, const json_t *s, const char *t, struct sp_gstr *o)
{
    if (!strcmp(t, "string"))
        gen_string(c, s, o);
    else if (!strcmp(t, "integer") || !strcmp(t, "number"))
        gen_number(c, s, !strcmp(t, "integer"), o);
    else if (!strcmp(t, "boolean"))
        sp_gstr_add(o, "json-bool");
    else if (!strcmp(t, "null"))
        sp_gstr_add(o, "\"null\"");
    else if (!strcmp(t, "object"))
        gen_object(c, s, o);
    else if (!strcmp(t, "array"))
        gen_array(c, s, o);
}

/* The types a value of s may have: `type`, less what `not: {"type": ...}`
 * excludes; without a `type`, the one the keywords present imply, or all.
 * Writes flags over type_names; returns how many. */
static int value_types(const json_t *s, bool *on)
{
    static const struct {
        const char *key, *type;
    } hints[] = {
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"patternProperties", "object"}, {"minProperties", "object"}, {"maxProperties", "object"},
        {"propertyNames", "object"}, {"dependentRequired", "object"}, {"unevaluatedProperties", "object"},
        {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"contains", "array"}, {"uniqueItems", "array"}, {"unevaluatedItems", "array"},
        {"minLength", "string"}, {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"},
        {"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"}, {"multipleOf", "number"},
    };
    const json_t *t = json_object_get(s, "type");
    const char *implied = NULL;
    bool mixed = false;
    if (!t)
        for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
            if (json_object_get(s, hints[i].key)) {
                mixed |= implied && strcmp(implied, hints[i].type);
                implied = hints[i].type;
            }
    const json_t *nt = json_object_get(json_object_get(s, "not"), "type");
    bool not_only_type = nt && json_object_size(json_object_get(s, "not")) == 1;
    int n = 0;
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++) {
        const char *name = type_names[i];
        if (t)
            on[i] = lists_type(t, name) || (!strcmp(name, "integer") && lists_type(t, "number"));
        else
            on[i] = !implied || mixed || !strcmp(implied, name);
        if (not_only_type && (lists_type(nt, name) || (!strcmp(name, "integer") && lists_type(nt, "number"))))
            on[i] = false;
        n += on[i];
    }
    /* a number covers the integers: only one of the two is spelled */
    bool *num = &on[2], *integer = &on[1];
    if (*num && *integer) {
        *integer = false;
        n--;
    }
    return n;
}

static void gen_alternatives(struct sc *c, const json_t *s, const char *key, struct sp_gstr *o)
{
    const json_t *alts = json_object_get(s, key);
    /* sibling keywords apply to every alternative */
    const char *without[] = {key, NULL};
    bool siblings = json_object_size(s) > 1, any = false;
    sp_gstr_add(o, "( ");
    size_t i;
    json_t *alt;
    json_array_foreach(alts, i, alt) {
        size_t old = sp_jpath_push(&c->path, ".%s[%zu]", key, i);
        const json_t *parts[1] = {alt};
        const json_t *a = siblings ? merged(c, s, without, parts, 1, true) : alt;
        if (a && !json_is_false(a)) { /* an alternative no value satisfies is left out */
            if (any)
                sp_gstr_add(o, " | ");
            gen(c, a, o);
            any = true;
        }
        sp_jpath_pop(&c->path, old);
    }
    sp_gstr_add(o, " )");
    if (!any)
        fail(c, "unsatisfiable schema: no alternative of '%s' can be satisfied", key);
}

/* if/then/else: ( s + if + then | s + else ); the validator checks that
 * the second is taken only where `if` fails. */
static void gen_if(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    static const char *const without[] = {"if", "then", "else", NULL};
    const json_t *cond = json_object_get(s, "if"), *then = json_object_get(s, "then");
    const json_t *els = json_object_get(s, "else");
    const json_t *yes[2] = {cond, then ? then : json_true()}, *no[1] = {els ? els : json_true()};
    const json_t *a = then ? merged(c, s, without, yes, 2, true) : NULL;
    const json_t *b = merged(c, s, without, no, 1, true);
    if (c->failed)
        return;
    if (!a && !b) {
        fail(c, "unsatisfiable schema: neither the 'then' nor the 'else' branch can be satisfied");
        return;
    }
    sp_gstr_add(o, "( ");
    if (a)
        gen(c, a, o);
    if (a && b)
        sp_gstr_add(o, " | ");
    if (b)
        gen(c, b, o);
    sp_gstr_add(o, " )");
}

/* A $ref's target as a rule of its own, once per target. */
static void gen_ref(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    const json_t *target = sp_schema_target(c->sch, s);
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == target) {
            sp_gstr_add(o, c->memo[i].name);
            return;
        }
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? c->cap_memo * 2 : 16;
        struct memo *m = realloc(c->memo, cap * sizeof *m);
        if (!m) {
            nomem(c);
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
    size_t old = sp_jpath_push(&c->path, " ($ref %.80s)", json_string_value(json_object_get(s, "$ref")));
    gen(c, target, &body);
    sp_jpath_pop(&c->path, old);
    emit_rule(c, name, &body);
    free(body.p);
    sp_gstr_add(o, name);
}

static void gen_enum(struct sc *c, const json_t *s, const json_t *values, struct sp_gstr *o)
{
    bool on[sizeof type_names / sizeof type_names[0]];
    bool typed = json_object_get(s, "type") != NULL;
    value_types(s, on);
    bool any = false;
    size_t i;
    json_t *v;
    sp_gstr_add(o, "( ");
    json_array_foreach(values, i, v) {
        /* only values of the allowed types (the validator checks the rest) */
        int ti = json_is_string(v) ? 0 : json_is_integer(v) ? 1 : json_is_real(v) ? 2 : json_is_boolean(v) ? 3
               : json_is_null(v) ? 4 : json_is_object(v) ? 5 : 6;
        bool ok = !typed || on[ti] || (ti == 1 && on[2]) ||
                  (ti == 2 && on[1] && json_real_value(v) == floor(json_real_value(v)));
        if (!ok)
            continue;
        if (any)
            sp_gstr_add(o, " | ");
        value_lit(c, o, v);
        any = true;
    }
    sp_gstr_add(o, " )");
    if (!any)
        fail(c, json_array_size(values) ? "unsatisfiable schema: no enum value has the schema's type"
                                        : "unsatisfiable schema: empty enum");
}

static void gen_node(struct sc *c, const json_t *s, struct sp_gstr *o)
{
    static const char *const none[] = {NULL};
    const json_t *k;
    if (json_object_get(s, "allOf") || (json_object_get(s, "$ref") && json_object_size(s) > 1)) {
        const json_t *m = merged(c, s, none, NULL, 0, false);
        if (m)
            gen(c, m, o);
        return;
    }
    if (json_object_get(s, "$ref")) {
        gen_ref(c, s, o);
        return;
    }
    if ((k = json_object_get(s, "not")) && (json_is_true(k) || (json_is_object(k) && !json_object_size(k)))) {
        fail(c, "unsatisfiable schema: 'not' of a schema every value satisfies");
        return;
    }
    if (json_object_get(s, "if")) {
        gen_if(c, s, o);
        return;
    }
    if ((k = json_object_get(s, "const"))) {
        value_lit(c, o, k);
        return;
    }
    if ((k = json_object_get(s, "enum"))) {
        gen_enum(c, s, k, o);
        return;
    }
    if (json_object_get(s, "anyOf")) {
        gen_alternatives(c, s, "anyOf", o);
        return;
    }
    if (json_object_get(s, "oneOf")) {
        gen_alternatives(c, s, "oneOf", o);
        return;
    }
    bool on[sizeof type_names / sizeof type_names[0]];
    int n = value_types(s, on);
    if (!n) {
        fail(c, "unsatisfiable schema: no type is left");
        return;
    }
    if (n == (int)(sizeof on / sizeof on[0]) - 1 && !json_object_get(s, "type")) {
        sp_gstr_add(o, "json-value"); /* no type: any value (the validator checks the keywords) */
        return;
    }
    sp_gstr_add(o, "( ");
    bool first = true;
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++) {
        if (!on[i])
            continue;
        if (!first)
            sp_gstr_add(o, " | ");
        first = false;
        gen_type(c, s, type_names[i], o);
    }
    sp_gstr_add(o, " )");
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
    if (++c->depth > MAX_NEST)
        fail(c, "schema nested deeper than %d", MAX_NEST);
    else
        gen_node(c, s, o);
    c->depth--;
}

sp_status sp_grammar_from_schema(const char *schema, size_t len, char **gbnf)
{
    return sp_grammar_from_schema_as(schema, len, "root", false, gbnf);
}

sp_status sp_grammar_from_schema_as(const char *schema, size_t len, const char *rule, unsigned opts, char **gbnf)
{
    bool flexible = opts & SP_SCHEMA_FLEX;
    struct sc c = {0};
    struct sp_schema *sch = NULL;
    *gbnf = NULL;
    sp_status st = sp_schema_load(schema, len, &sch);
    if (st != SP_OK)
        return st;
    c.sch = sch;
    c.w = flexible ? " json-ws " : " ";
    c.closed = opts & SP_SCHEMA_CLOSED;
    c.owned = json_array();
    sp_jpath_init(&c.path);
    struct sp_gstr top = {0};
    if (!c.owned)
        nomem(&c);
    gen(&c, sp_schema_root(sch), &top);
    if (!c.failed && (top.failed || c.rules.failed))
        nomem(&c);
    st = SP_ERR_ARG;
    if (!c.failed) {
        struct sp_gstr all = {0};
        sp_gstr_addf(&all, "%s ::= ", rule);
        sp_gstr_add(&all, top.p ? top.p : "json-value");
        sp_gstr_add(&all, "\n");
        sp_gstr_addn(&all, c.rules.p ? c.rules.p : "", c.rules.n);
        sp_gstr_add(&all, flexible ? base_flex : base_compact);
        sp_gstr_add(&all, sp_schema_format_rules);
        if (all.failed) {
            free(all.p);
            st = sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
        } else {
            *gbnf = all.p;
            st = SP_OK;
        }
    } else {
        st = c.st;
    }
    free(top.p);
    free(c.rules.p);
    free(c.memo);
    free(c.keys.p);
    json_decref(c.owned);
    sp_schema_free(sch);
    return st;
}
