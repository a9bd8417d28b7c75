/* A finished output checked against its JSON Schema: every keyword the
 * compiler accepts (grammar_schema.c), including those no grammar enforces
 * (uniqueItems, multipleOf, bounds on non-integers, lengths beside a
 * pattern, oneOf's "exactly one", calendar dates).  Patterns run with PCRE2
 * (UTF mode, searching as JSON Schema's patterns do). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/schema_internal.h"

#define MAX_FAILURES 4
#define MAX_DEPTH 256

struct vc {
    const json_t *root;
    char *why;
    size_t cap, n;
    int n_fail;
    int quiet;       /* inside anyOf/oneOf trials: failures are not reported */
    int depth;
    struct sp_jpath path;
};

static void report(struct vc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(struct vc *c, const char *fmt, ...)
{
    if (c->quiet)
        return;
    c->n_fail++;
    if (c->n_fail > MAX_FAILURES || !c->why || c->n + 1 >= c->cap)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int k = snprintf(c->why + c->n, c->cap - c->n, "%s%s: %s", c->n ? "; " : "", c->path.s, msg);
    if (k > 0)
        c->n = c->n + (size_t)k < c->cap ? c->n + (size_t)k : c->cap - 1;
}

const json_t *sp_schema_resolve(const json_t *root, const char *ref)
{
    if (!ref || ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return NULL;
    const json_t *cur = root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof tok - 1) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                tok[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            cur = *end || idx < 0 ? NULL : json_array_get(cur, (size_t)idx);
        } else {
            cur = NULL;
        }
    }
    return cur;
}

/* JSON Schema equality: numbers by value (1 == 1.0). */
static bool same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !same(v, w))
                return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static bool is_type(const json_t *x, const char *t)
{
    if (!strcmp(t, "string")) return json_is_string(x);
    if (!strcmp(t, "number")) return json_is_number(x);
    if (!strcmp(t, "integer"))
        return json_is_integer(x) || (json_is_real(x) && floor(json_real_value(x)) == json_real_value(x));
    if (!strcmp(t, "boolean")) return json_is_boolean(x);
    if (!strcmp(t, "null")) return json_is_null(x);
    if (!strcmp(t, "object")) return json_is_object(x);
    if (!strcmp(t, "array")) return json_is_array(x);
    return false;
}

static size_t codepoints(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static bool valid_date(const char *s, size_t n)
{
    if (n != 10 || s[4] != '-' || s[7] != '-')
        return false;
    int y = digits(s, 4), m = digits(s + 5, 2), d = digits(s + 8, 2);
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 0 || m < 1 || m > 12 || d < 1)
        return false;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= mdays[m - 1] + (m == 2 && leap);
}

static bool valid_time(const char *s, size_t n)
{
    if (n < 9 || s[2] != ':' || s[5] != ':')
        return false;
    int h = digits(s, 2), mi = digits(s + 3, 2), se = digits(s + 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60)
        return false;
    size_t i = 8;
    if (i < n && s[i] == '.') {
        size_t j = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == j)
            return false;
    }
    if (i + 1 == n && (s[i] == 'Z' || s[i] == 'z'))
        return true;
    if (i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
        int oh = digits(s + i + 1, 2), om = digits(s + i + 4, 2);
        return oh >= 0 && oh <= 23 && om >= 0 && om <= 59;
    }
    return false;
}

static bool valid_format(const char *f, const char *s, size_t n)
{
    if (!strcmp(f, "date"))
        return valid_date(s, n);
    if (!strcmp(f, "time"))
        return valid_time(s, n);
    if (!strcmp(f, "date-time"))
        return n > 11 && (s[10] == 'T' || s[10] == 't') && valid_date(s, 10) && valid_time(s + 11, n - 11);
    if (!strcmp(f, "uuid")) {
        if (n != 36)
            return false;
        for (size_t i = 0; i < n; i++) {
            bool dash = i == 8 || i == 13 || i == 18 || i == 23;
            char ch = s[i];
            bool hexd = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
            if (dash ? ch != '-' : !hexd)
                return false;
        }
        return true;
    }
    if (!strcmp(f, "email")) {
        const char *at = memchr(s, '@', n);
        if (!at || at == s || memchr(at + 1, '@', n - (size_t)(at - s) - 1))
            return false;
        const char *dot = memchr(at + 1, '.', n - (size_t)(at - s) - 1);
        return dot && dot > at + 1 && dot < s + n - 1;
    }
    return false;
}

static bool pattern_matches(struct vc *c, const char *pat, size_t plen, const char *s, size_t n)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, plen, PCRE2_UTF, &err, &off, NULL);
    if (!re) {
        report(c, "pattern '%.60s' does not compile", pat);
        return false;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static bool check(struct vc *c, const json_t *s, const json_t *x);

static bool check_number(struct vc *c, const json_t *s, const json_t *x)
{
    bool ok = true;
    double v = json_number_value(x);
    json_t *k;
    if ((k = json_object_get(s, "minimum")) && json_is_number(k) && v < json_number_value(k)) {
        report(c, "%g is less than the minimum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "maximum")) && json_is_number(k) && v > json_number_value(k)) {
        report(c, "%g is more than the maximum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "exclusiveMinimum")) && json_is_number(k) && v <= json_number_value(k)) {
        report(c, "%g is not more than the exclusive minimum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "exclusiveMaximum")) && json_is_number(k) && v >= json_number_value(k)) {
        report(c, "%g is not less than the exclusive maximum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "multipleOf")) && json_is_number(k) && json_number_value(k) > 0) {
        double m = json_number_value(k);
        bool multiple;
        if (json_is_integer(x) && json_is_integer(k))
            multiple = json_integer_value(x) % json_integer_value(k) == 0;
        else {
            double q = v / m;
            multiple = isfinite(q) && fabs(q - nearbyint(q)) <= 1e-9 * fmax(1.0, fabs(q));
        }
        if (!multiple) {
            report(c, "%g is not a multiple of %g", v, m);
            ok = false;
        }
    }
    return ok;
}

static bool check_string(struct vc *c, const json_t *s, const json_t *x)
{
    bool ok = true;
    const char *str = json_string_value(x);
    size_t n = json_string_length(x), cps = codepoints(str, n);
    json_t *k;
    if ((k = json_object_get(s, "minLength")) && json_is_integer(k) && (json_int_t)cps < json_integer_value(k)) {
        report(c, "string of %zu characters is shorter than minLength %lld", cps, (long long)json_integer_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "maxLength")) && json_is_integer(k) && (json_int_t)cps > json_integer_value(k)) {
        report(c, "string of %zu characters is longer than maxLength %lld", cps, (long long)json_integer_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "pattern")) && json_is_string(k) &&
        !pattern_matches(c, json_string_value(k), json_string_length(k), str, n)) {
        report(c, "'%.60s' does not match the pattern '%.60s'", str, json_string_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "format")) && json_is_string(k) && !valid_format(json_string_value(k), str, n)) {
        report(c, "'%.60s' is not a valid %s", str, json_string_value(k));
        ok = false;
    }
    return ok;
}

static bool check_array(struct vc *c, const json_t *s, const json_t *x)
{
    bool ok = true;
    size_t n = json_array_size(x);
    json_t *v;
    if ((v = json_object_get(s, "minItems")) && json_is_integer(v) && (json_int_t)n < json_integer_value(v)) {
        report(c, "%zu items, fewer than minItems %lld", n, (long long)json_integer_value(v));
        ok = false;
    }
    if ((v = json_object_get(s, "maxItems")) && json_is_integer(v) && (json_int_t)n > json_integer_value(v)) {
        report(c, "%zu items, more than maxItems %lld", n, (long long)json_integer_value(v));
        ok = false;
    }
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    for (size_t i = 0; i < n; i++) {
        const json_t *sub = NULL;
        if (json_is_array(prefix) && i < json_array_size(prefix))
            sub = json_array_get(prefix, i);
        else
            sub = items;
        if (!sub)
            continue;
        size_t old = sp_jpath_push(&c->path, "[%zu]", i);
        ok &= check(c, sub, json_array_get(x, i));
        sp_jpath_pop(&c->path, old);
    }
    if (json_is_true(json_object_get(s, "uniqueItems")))
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (same(json_array_get(x, i), json_array_get(x, j))) {
                    report(c, "items %zu and %zu are equal (uniqueItems)", i, j);
                    ok = false;
                    i = n;
                    break;
                }
    return ok;
}

static bool check_object(struct vc *c, const json_t *s, const json_t *x)
{
    bool ok = true;
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) {
        if (json_is_string(r) && !json_object_get(x, json_string_value(r))) {
            report(c, "required property '%.60s' is missing", json_string_value(r));
            ok = false;
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)x, k, v) {
        const json_t *sub = json_object_get(props, k);
        if (!sub)
            sub = addl;
        if (!sub)
            continue;
        size_t old = sp_jpath_push(&c->path, ".%.80s", k);
        if (json_is_false(sub)) {
            report(c, "property not allowed (additionalProperties is false)");
            ok = false;
        } else {
            ok &= check(c, sub, v);
        }
        sp_jpath_pop(&c->path, old);
    }
    return ok;
}

/* How many of the schemas in `arr` x satisfies (quietly). */
static size_t count_matching(struct vc *c, const json_t *arr, const json_t *x)
{
    size_t n = 0, i;
    json_t *sub;
    c->quiet++;
    json_array_foreach(arr, i, sub) n += check(c, sub, x);
    c->quiet--;
    return n;
}

static bool check(struct vc *c, const json_t *s, const json_t *x)
{
    if (json_is_true(s))
        return true;
    if (json_is_false(s)) {
        report(c, "no value is allowed here");
        return false;
    }
    if (!json_is_object(s))
        return true;
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        report(c, "schema references nest deeper than %d", MAX_DEPTH);
        return false;
    }
    bool ok = true;
    json_t *k;
    if ((k = json_object_get(s, "$ref")) && json_is_string(k)) {
        const json_t *t = sp_schema_resolve(c->root, json_string_value(k));
        ok &= t ? check(c, t, x) : false;
    }
    if ((k = json_object_get(s, "type"))) {
        bool any = false;
        if (json_is_string(k)) {
            any = is_type(x, json_string_value(k));
        } else {
            size_t i;
            json_t *t;
            json_array_foreach(k, i, t) any |= json_is_string(t) && is_type(x, json_string_value(t));
        }
        if (!any) {
            char *dump = json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY);
            report(c, "wrong type (expected %s)", dump ? dump : "?");
            free(dump);
            c->depth--;
            return false;
        }
    }
    if ((k = json_object_get(s, "const")) && !same(k, x)) {
        report(c, "not the constant value");
        ok = false;
    }
    if ((k = json_object_get(s, "enum")) && json_is_array(k)) {
        bool in = false;
        size_t i;
        json_t *e;
        json_array_foreach(k, i, e) in |= same(e, x);
        if (!in) {
            report(c, "not one of the enum values");
            ok = false;
        }
    }
    if (json_is_number(x))
        ok &= check_number(c, s, x);
    else if (json_is_string(x))
        ok &= check_string(c, s, x);
    else if (json_is_array(x))
        ok &= check_array(c, s, x);
    else if (json_is_object(x))
        ok &= check_object(c, s, x);
    if ((k = json_object_get(s, "allOf")) && json_is_array(k)) {
        size_t i;
        json_t *sub;
        json_array_foreach(k, i, sub) ok &= check(c, sub, x);
    }
    if ((k = json_object_get(s, "anyOf")) && json_is_array(k) && !count_matching(c, k, x)) {
        report(c, "matches none of anyOf");
        ok = false;
    }
    if ((k = json_object_get(s, "oneOf")) && json_is_array(k)) {
        size_t m = count_matching(c, k, x);
        if (m != 1) {
            report(c, m ? "matches %zu of oneOf (exactly one is allowed)" : "matches none of oneOf", m);
            ok = false;
        }
    }
    c->depth--;
    return ok;
}

sp_status sp_grammar_validate(const char *schema, size_t schema_len, const char *text, size_t len,
                              char *why, size_t cap)
{
    json_error_t jerr;
    struct vc c = {0};
    if (why && cap)
        why[0] = '\0';
    c.why = why;
    c.cap = cap;
    sp_jpath_init(&c.path);
    json_t *s = json_loadb(schema ? schema : "", schema ? schema_len : 0, 0, &jerr);
    if (!s)
        return sp_error_set(SP_ERR_ARG, "json schema: not valid JSON: %s", jerr.text);
    json_t *x = json_loadb(text ? text : "", text ? len : 0, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    sp_status st = SP_OK;
    if (!x) {
        report(&c, "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        st = SP_ERR_ARG;
    } else {
        c.root = s;
        if (!check(&c, s, x))
            st = SP_ERR_ARG;
    }
    if (st != SP_OK)
        sp_error_set(SP_ERR_ARG, "output does not match the schema: %s", why && why[0] ? why : "invalid");
    json_decref(x);
    json_decref(s);
    return st;
}
