/* A finished output checked against its JSON Schema (in the internal form,
 * schema_norm.c): every validation keyword, including those no grammar
 * enforces (uniqueItems, multipleOf, not, if/then/else, dependencies,
 * contains, property counts, unevaluated*, bounds on non-integers, lengths
 * beside a pattern, oneOf's "exactly one", calendar dates, formats the
 * grammar only approximates).  Patterns run with PCRE2 (UTF mode,
 * searching as JSON Schema's patterns do).  Any JSON whitespace and any key
 * order are fine: the text is parsed first.
 *
 * unevaluatedProperties/unevaluatedItems need to know what the schema's
 * other keywords evaluated: check() fills a `struct seen` (a flag per key
 * of the object, or per item of the array) when its caller asks, and the
 * in-place applicators ($ref, allOf, anyOf, oneOf, if/then/else,
 * dependentSchemas) add what their passing subschemas evaluated. */
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
    const struct sp_schema *sch;
    char *why;
    size_t cap, n;
    int n_fail;
    int quiet;       /* inside trials (anyOf, not, if, contains): failures are not reported */
    int depth;
    bool nomem;
    struct sp_jpath path;
};

/* What was evaluated of one instance: flag[i] for key i of `keys` (the
 * object's keys, sorted) or for item i. */
struct seen {
    const char **keys;
    size_t n;
    uint8_t *flag;
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

/* ---- seen sets ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A seen set for x (an object or an array); keys shared with `like` when
 * given.  false: out of memory. */
static bool seen_init(struct vc *c, struct seen *t, const json_t *x, const struct seen *like)
{
    memset(t, 0, sizeof *t);
    t->n = json_is_object(x) ? json_object_size(x) : json_array_size(x);
    t->flag = calloc(t->n ? t->n : 1, 1);
    if (like) {
        t->keys = like->keys;
    } else if (json_is_object(x)) {
        t->keys = malloc((t->n ? t->n : 1) * sizeof *t->keys);
        if (t->keys) {
            size_t i = 0;
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)x, k, v) t->keys[i++] = k;
            qsort(t->keys, t->n, sizeof *t->keys, cmp_str);
        }
    }
    if (!t->flag || (json_is_object(x) && !t->keys)) {
        c->nomem = true;
        return false;
    }
    return true;
}

static void seen_free(struct seen *t, bool own_keys)
{
    free(t->flag);
    if (own_keys)
        free(t->keys);
}

static void seen_key(struct seen *t, const char *k)
{
    if (!t || !t->keys)
        return;
    const char **hit = bsearch(&k, t->keys, t->n, sizeof *t->keys, cmp_str);
    if (hit)
        t->flag[hit - t->keys] = 1;
}

static void seen_item(struct seen *t, size_t i)
{
    if (t && i < t->n)
        t->flag[i] = 1;
}

static void seen_merge(struct seen *dst, const struct seen *src)
{
    if (dst)
        for (size_t i = 0; i < dst->n; i++)
            dst->flag[i] |= src->flag[i];
}

/* ---- values ---- */

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

static bool pattern_matches(struct vc *c, const char *pat, const char *s, size_t n)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    if (!re) { /* schema_norm.c compiled it once already: memory */
        c->nomem = true;
        return false;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static json_int_t count_of(const json_t *s, const char *k, json_int_t none)
{
    const json_t *v = json_object_get(s, k);
    return json_is_integer(v) ? json_integer_value(v) : none;
}

static bool check(struct vc *c, const json_t *s, const json_t *x, struct seen *ev);

/* A quiet trial: does x satisfy s?  Evaluations go to ev when it passes. */
static bool trial(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    struct seen t;
    bool ok;
    c->quiet++;
    if (ev && seen_init(c, &t, x, ev)) {
        ok = check(c, s, x, &t);
        if (ok)
            seen_merge(ev, &t);
        seen_free(&t, false);
    } else {
        ok = check(c, s, x, NULL);
    }
    c->quiet--;
    return ok;
}

static bool check_number(struct vc *c, const json_t *s, const json_t *x)
{
    bool ok = true;
    double v = json_number_value(x);
    json_t *k;
    if ((k = json_object_get(s, "minimum")) && v < json_number_value(k)) {
        report(c, "%g is less than the minimum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "maximum")) && v > json_number_value(k)) {
        report(c, "%g is more than the maximum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "exclusiveMinimum")) && v <= json_number_value(k)) {
        report(c, "%g is not more than the exclusive minimum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "exclusiveMaximum")) && v >= json_number_value(k)) {
        report(c, "%g is not less than the exclusive maximum %g", v, json_number_value(k));
        ok = false;
    }
    if ((k = json_object_get(s, "multipleOf"))) {
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
    json_int_t lim;
    if ((lim = count_of(s, "minLength", -1)) >= 0 && (json_int_t)cps < lim) {
        report(c, "string of %zu characters is shorter than minLength %lld", cps, (long long)lim);
        ok = false;
    }
    if ((lim = count_of(s, "maxLength", -1)) >= 0 && (json_int_t)cps > lim) {
        report(c, "string of %zu characters is longer than maxLength %lld", cps, (long long)lim);
        ok = false;
    }
    if ((k = json_object_get(s, "pattern")) && !pattern_matches(c, json_string_value(k), str, n)) {
        report(c, "'%.60s' does not match the pattern '%.60s'", str, json_string_value(k));
        ok = false;
    }
    const struct sp_schema_format *f;
    if ((k = json_object_get(s, "format")) && (f = sp_schema_format_find(json_string_value(k))) &&
        !f->check(str, n)) {
        report(c, "'%.60s' is not a valid %s", str, f->name);
        ok = false;
    }
    return ok;
}

static bool check_array(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    bool ok = true;
    size_t n = json_array_size(x);
    json_int_t lim;
    if ((lim = count_of(s, "minItems", -1)) >= 0 && (json_int_t)n < lim) {
        report(c, "%zu items, fewer than minItems %lld", n, (long long)lim);
        ok = false;
    }
    if ((lim = count_of(s, "maxItems", -1)) >= 0 && (json_int_t)n > lim) {
        report(c, "%zu items, more than maxItems %lld", n, (long long)lim);
        ok = false;
    }
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    size_t k = json_array_size(prefix);
    for (size_t i = 0; i < n; i++) {
        const json_t *sub = i < k ? json_array_get(prefix, i) : items;
        if (!sub)
            continue;
        size_t old = sp_jpath_push(&c->path, "[%zu]", i);
        ok &= check(c, sub, json_array_get(x, i), NULL);
        sp_jpath_pop(&c->path, old);
        seen_item(ev, i);
    }
    const json_t *has = json_object_get(s, "contains");
    if (has) {
        json_int_t mn = count_of(s, "minContains", 1), mx = count_of(s, "maxContains", -1), m = 0;
        for (size_t i = 0; i < n; i++)
            if (trial(c, has, json_array_get(x, i), NULL)) {
                m++;
                seen_item(ev, i);
            }
        if (m < mn) {
            report(c, m ? "%lld items match 'contains', fewer than %lld" : "no item matches 'contains'",
                   (long long)m, (long long)mn);
            ok = false;
        }
        if (mx >= 0 && m > mx) {
            report(c, "%lld items match 'contains', more than maxContains %lld", (long long)m, (long long)mx);
            ok = false;
        }
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

static bool check_object(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    bool ok = true;
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *pats = json_object_get(s, "patternProperties"), *addl = json_object_get(s, "additionalProperties");
    const json_t *names = json_object_get(s, "propertyNames"), *dreq = json_object_get(s, "dependentRequired");
    size_t i, n = json_object_size(x);
    json_t *r;
    json_int_t lim;
    json_array_foreach(req, i, r) {
        if (!json_object_get(x, json_string_value(r))) {
            report(c, "required property '%.60s' is missing", json_string_value(r));
            ok = false;
        }
    }
    if ((lim = count_of(s, "minProperties", -1)) >= 0 && (json_int_t)n < lim) {
        report(c, "%zu properties, fewer than minProperties %lld", n, (long long)lim);
        ok = false;
    }
    if ((lim = count_of(s, "maxProperties", -1)) >= 0 && (json_int_t)n > lim) {
        report(c, "%zu properties, more than maxProperties %lld", n, (long long)lim);
        ok = false;
    }
    const char *k, *pk;
    json_t *v, *pv;
    json_object_foreach((json_t *)dreq, pk, pv) {
        if (!json_object_get(x, pk))
            continue;
        json_array_foreach(pv, i, r) if (!json_object_get(x, json_string_value(r))) {
            report(c, "property '%.60s' is required when '%.60s' is present", json_string_value(r), pk);
            ok = false;
        }
    }
    json_object_foreach((json_t *)x, k, v) {
        size_t old = sp_jpath_push(&c->path, ".%.80s", k);
        bool matched = false;
        const json_t *sub = json_object_get(props, k);
        if (sub) {
            ok &= check(c, sub, v, NULL);
            matched = true;
        }
        json_object_foreach((json_t *)pats, pk, pv) {
            if (pattern_matches(c, pk, k, strlen(k))) {
                ok &= check(c, pv, v, NULL);
                matched = true;
            }
        }
        if (!matched && addl) {
            if (json_is_false(addl)) {
                report(c, "property not allowed (additionalProperties is false)");
                ok = false;
            } else {
                ok &= check(c, addl, v, NULL);
            }
            matched = true;
        }
        if (names) {
            json_t *key = json_string(k);
            if (!key) {
                c->nomem = true;
            } else if (!trial(c, names, key, NULL)) {
                report(c, "the name does not match propertyNames");
                ok = false;
            }
            json_decref(key);
        }
        if (matched)
            seen_key(ev, k);
        sp_jpath_pop(&c->path, old);
    }
    return ok;
}

/* unevaluatedProperties/unevaluatedItems: what nothing else evaluated. */
static bool check_unevaluated(struct vc *c, const json_t *s, const json_t *x, struct seen *t)
{
    bool ok = true;
    const json_t *up = json_object_get(s, "unevaluatedProperties"), *ui = json_object_get(s, "unevaluatedItems");
    if (up && json_is_object(x)) {
        for (size_t i = 0; i < t->n; i++) {
            if (t->flag[i])
                continue;
            size_t old = sp_jpath_push(&c->path, ".%.80s", t->keys[i]);
            if (json_is_false(up)) {
                report(c, "property not allowed (unevaluatedProperties is false)");
                ok = false;
            } else {
                ok &= check(c, up, json_object_get(x, t->keys[i]), NULL);
            }
            sp_jpath_pop(&c->path, old);
            t->flag[i] = 1;
        }
    }
    if (ui && json_is_array(x)) {
        for (size_t i = 0; i < t->n; i++) {
            if (t->flag[i])
                continue;
            size_t old = sp_jpath_push(&c->path, "[%zu]", i);
            if (json_is_false(ui)) {
                report(c, "item not allowed (unevaluatedItems is false)");
                ok = false;
            } else {
                ok &= check(c, ui, json_array_get(x, i), NULL);
            }
            sp_jpath_pop(&c->path, old);
            t->flag[i] = 1;
        }
    }
    return ok;
}

/* allOf, anyOf, oneOf, not, if/then/else, dependentSchemas. */
static bool check_applicators(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    bool ok = true;
    const json_t *k;
    size_t i;
    json_t *sub;
    if ((k = json_object_get(s, "allOf")))
        json_array_foreach(k, i, sub) ok &= check(c, sub, x, ev);
    if ((k = json_object_get(s, "anyOf"))) {
        size_t m = 0;
        json_array_foreach(k, i, sub) m += trial(c, sub, x, ev); /* every passing one annotates */
        if (!m) {
            report(c, "matches none of anyOf");
            ok = false;
        }
    }
    if ((k = json_object_get(s, "oneOf"))) {
        size_t m = 0, which = 0;
        json_array_foreach(k, i, sub) if (trial(c, sub, x, NULL)) {
            m++;
            which = i;
        }
        if (m != 1) {
            report(c, m ? "matches %zu of oneOf (exactly one is allowed)" : "matches none of oneOf", m);
            ok = false;
        } else if (ev) {
            trial(c, json_array_get(k, which), x, ev);
        }
    }
    if ((k = json_object_get(s, "not")) && trial(c, k, x, NULL)) {
        report(c, "matches the schema of 'not'");
        ok = false;
    }
    if ((k = json_object_get(s, "if"))) {
        const json_t *then = json_object_get(s, "then"), *els = json_object_get(s, "else");
        if (trial(c, k, x, ev)) {
            if (then && !check(c, then, x, ev)) {
                report(c, "matches 'if' but not 'then'");
                ok = false;
            }
        } else if (els && !check(c, els, x, ev)) {
            report(c, "matches neither 'if' nor 'else'");
            ok = false;
        }
    }
    if ((k = json_object_get(s, "dependentSchemas")) && json_is_object(x)) {
        const char *pk;
        json_object_foreach((json_t *)k, pk, sub) if (json_object_get(x, pk)) ok &= check(c, sub, x, ev);
    }
    return ok;
}

static bool check_node(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    bool ok = true;
    json_t *k;
    if (json_object_get(s, "$ref"))
        ok &= check(c, sp_schema_target(c->sch, s), x, ev);
    if ((k = json_object_get(s, "type"))) {
        bool any = false;
        if (json_is_string(k)) {
            any = is_type(x, json_string_value(k));
        } else {
            size_t i;
            json_t *t;
            json_array_foreach(k, i, t) any |= is_type(x, json_string_value(t));
        }
        if (!any) {
            char *dump = json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY);
            report(c, "wrong type (expected %s)", dump ? dump : "?");
            free(dump);
            return false;
        }
    }
    if ((k = json_object_get(s, "const")) && !same(k, x)) {
        report(c, "not the constant value");
        ok = false;
    }
    if ((k = json_object_get(s, "enum"))) {
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
        ok &= check_array(c, s, x, ev);
    else if (json_is_object(x))
        ok &= check_object(c, s, x, ev);
    return check_applicators(c, s, x, ev) && ok;
}

static bool check(struct vc *c, const json_t *s, const json_t *x, struct seen *ev)
{
    if (json_is_true(s))
        return true;
    if (json_is_false(s)) {
        report(c, "no value is allowed here");
        return false;
    }
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        report(c, "schema references nest deeper than %d", MAX_DEPTH);
        return false;
    }
    bool ok;
    bool uneval = (json_object_get(s, "unevaluatedProperties") && json_is_object(x)) ||
                  (json_object_get(s, "unevaluatedItems") && json_is_array(x));
    if (uneval) { /* this node needs its own account of what was evaluated */
        struct seen t;
        if (!seen_init(c, &t, x, ev)) {
            ok = false;
        } else {
            ok = check_node(c, s, x, &t);
            ok &= check_unevaluated(c, s, x, &t);
            seen_merge(ev, &t);
        }
        seen_free(&t, !ev);
    } else {
        ok = check_node(c, s, x, ev);
    }
    c->depth--;
    return ok;
}

sp_status sp_grammar_validate(const char *schema, size_t schema_len, const char *text, size_t len,
                              char *why, size_t cap)
{
    json_error_t jerr;
    struct vc c = {0};
    struct sp_schema *sch = NULL;
    if (why && cap)
        why[0] = '\0';
    c.why = why;
    c.cap = cap;
    sp_jpath_init(&c.path);
    sp_status st = sp_schema_load(schema, schema_len, &sch);
    if (st != SP_OK)
        return st;
    c.sch = sch;
    json_t *x = json_loadb(text ? text : "", text ? len : 0, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!x) {
        report(&c, "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        st = SP_ERR_ARG;
    } else if (!check(&c, sp_schema_root(sch), x, NULL)) {
        st = SP_ERR_ARG;
    }
    if (c.nomem)
        st = sp_error_set(SP_ERR_NOMEM, "output validation: out of memory");
    else if (st != SP_OK)
        sp_error_set(SP_ERR_ARG, "output does not match the schema: %s", why && why[0] ? why : "invalid");
    json_decref(x);
    sp_schema_free(sch);
    return st;
}
