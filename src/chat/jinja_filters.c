/* Filters, tests and methods of the Jinja2 subset, matching jinja2 3.x and
 * HF transformers' tojson (ensure_ascii=False, keys unsorted), each found by
 * name in a table of {name, function}.  Unicode case mapping comes from
 * utf8proc. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "chat/jinja_filters.h"

/* ---- argument access ------------------------------------------------------------ */
static bool arg(const struct jargs *a, size_t i, const char *kw, struct jval *out)
{
    for (size_t k = 0; k < a->nkw; k++)
        if (!strcmp(a->kwn[k], kw)) {
            *out = a->kw[k];
            return true;
        }
    if (i < a->npos) {
        *out = a->pos[i];
        return true;
    }
    return false;
}

static int check_args(struct jctx *c, const struct jnode *at, const char *what,
                      const struct jargs *a, size_t maxpos, const char *const *kws)
{
    if (a->npos > maxpos)
        return jerr(c, at, "%s: too many arguments", what);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (const char *const *w = kws; w && *w; w++)
            if (!strcmp(*w, a->kwn[k]))
                ok = true;
        if (!ok)
            return jerr(c, at, "%s: unexpected keyword argument '%s'", what, a->kwn[k]);
    }
    return 0;
}

static int need_str(struct jctx *c, const struct jnode *at, const char *what, struct jval v)
{
    if (v.t != JV_STR)
        return jerr(c, at, "%s: expected a string, got %s", what, jv_type_name(v));
    return 0;
}

static struct jval listv(struct jlist *l) { struct jval v = { .t = JV_LIST }; v.u.l = l; return v; }
/* Results of jinja2 filters that return Python generators/iterators: always
 * true, no len(), not JSON-serialisable, not subscriptable. */
static struct jval genv(struct jlist *l) { l->gen = true; return listv(l); }

/* A generator filter applied to something it cannot iterate: jinja2 raises
 * only when the generator is consumed, so hand back a poisoned generator. */
static int lazy_fail(struct jctx *c, struct jval v, const char *msg, struct jval *out)
{
    struct jlist *l = jlist_new(c, 0);
    char *m = jarena_alloc(&c->arena, 160);
    if (!l || !m)
        return jerr_pos(c, 0, 0, "template exceeded the memory limit");
    snprintf(m, 160, msg, jv_type_name(v));
    l->poison = m;
    *out = genv(l);
    return 0;
}

static bool iterable(struct jval v)
{
    return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
}

/* ---- string helpers -------------------------------------------------------------- */
/* Python str.isspace() for one code point. */
static bool u_space(int32_t cp)
{
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* Decodes one code point at p[i]; invalid bytes decode as themselves. */
static size_t u_next(const char *p, size_t n, size_t i, int32_t *cp)
{
    utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), cp);
    if (r <= 0) {
        *cp = -1;
        return 1;
    }
    return (size_t)r;
}

static bool in_chars(int32_t cp, const char *p, size_t i, size_t len, struct jval chars)
{
    if (chars.t != JV_STR)
        return u_space(cp);
    size_t cl = len;
    (void)i;
    for (size_t k = 0; k < chars.u.s.n;) {
        int32_t x;
        size_t l = u_next(chars.u.s.p, chars.u.s.n, k, &x);
        if (x == cp && (cp >= 0 || (l == cl && !memcmp(chars.u.s.p + k, p, l))))
            return true;
        k += l;
    }
    return false;
}

/* Python str.strip/lstrip/rstrip (chars: a str, or none for whitespace). */
static struct jval str_strip(struct jval s, struct jval chars, bool left, bool right)
{
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    if (left)
        while (a < b) {
            int32_t cp;
            size_t l = u_next(p, b, a, &cp);
            if (!in_chars(cp, p + a, a, l, chars))
                break;
            a += l;
        }
    if (right)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80)
                st--;
            int32_t cp;
            size_t l = u_next(p, b, st, &cp);
            if (st + l != b) { /* invalid sequence: treat last byte alone */
                st = b - 1;
                cp = -1;
                l = 1;
            }
            if (!in_chars(cp, p + st, st, l, chars))
                break;
            b = st;
        }
    return jv_strn(p + a, b - a);
}

/* Sets *out to v (a str) with its case mapped: mode 'u' upper, 'l' lower,
 * 'c' capitalize, 't' Python's str.title, 'j' the jinja title filter. */
static int jstr_case(struct jctx *c, struct jval v, char mode, struct jval *out)
{
    struct jbuf b = { 0 };
    bool prev_cased = false, at_word = true;
    if (jbuf_put(c, &b, "", 0))
        return -1;
    for (size_t i = 0; i < v.u.s.n;) {
        int32_t cp, m;
        size_t l = u_next(v.u.s.p, v.u.s.n, i, &cp);
        if (cp < 0) {
            if (jbuf_put(c, &b, v.u.s.p + i, 1))
                return -1;
            i += l;
            prev_cased = false;
            continue;
        }
        switch (mode) {
        case 'u': m = utf8proc_toupper(cp); break;
        case 'l': m = utf8proc_tolower(cp); break;
        case 'c': m = i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
        case 't': m = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp); break;
        default: /* jinja title: words start after runs of [-\s({[<] */
            m = at_word ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
            break;
        }
        utf8proc_category_t cat = utf8proc_category(cp);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                     cat == UTF8PROC_CATEGORY_LT;
        at_word = u_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t el = utf8proc_encode_char(m, enc);
        if (jbuf_put(c, &b, (const char *)enc, (size_t)el))
            return -1;
        i += l;
    }
    *out = jv_strn(b.p, b.n);
    return 0;
}

static int str_replace(struct jctx *c, const struct jnode *at, struct jval s, struct jval old,
                       struct jval new, int64_t count, struct jval *out)
{
    struct jbuf b = { 0 };
    if (need_str(c, at, "replace", old) || need_str(c, at, "replace", new) || jbuf_put(c, &b, "", 0))
        return -1;
    size_t i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* Python inserts `new` before every character and at the end. */
        while (count < 0 || done < count) {
            if (jbuf_put(c, &b, new.u.s.p, new.u.s.n))
                return -1;
            done++;
            if (i >= s.u.s.n)
                break;
            size_t j = i + 1;
            while (j < s.u.s.n && ((unsigned char)s.u.s.p[j] & 0xC0) == 0x80)
                j++;
            if (jbuf_put(c, &b, s.u.s.p + i, j - i))
                return -1;
            i = j;
        }
    } else {
        while (i <= s.u.s.n && (count < 0 || done < count)) {
            const char *hit = memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n);
            if (!hit)
                break;
            size_t h = (size_t)(hit - s.u.s.p);
            if (jbuf_put(c, &b, s.u.s.p + i, h - i) || jbuf_put(c, &b, new.u.s.p, new.u.s.n))
                return -1;
            i = h + old.u.s.n;
            done++;
        }
    }
    if (i < s.u.s.n && jbuf_put(c, &b, s.u.s.p + i, s.u.s.n - i))
        return -1;
    *out = jv_strn(b.p, b.n);
    return 0;
}

/* Python str.split(sep=None, maxsplit=-1). */
static int str_split(struct jctx *c, const struct jnode *at, struct jval s, struct jval sep,
                     int64_t maxsplit, struct jval *out)
{
    struct jlist *l = jlist_new(c, 0);
    if (!l)
        return -1;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    if (sep.t == JV_NONE || sep.t == JV_UNDEF) {
        for (;;) {
            int32_t cp;
            while (i < n) {
                size_t k = u_next(p, n, i, &cp);
                if (!u_space(cp))
                    break;
                i += k;
            }
            if (i >= n)
                break;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                size_t e = n; /* rest, with trailing whitespace stripped */
                struct jval rest = str_strip(jv_strn(p + i, e - i), jv_none(), false, true);
                if (jlist_push(c, l, rest))
                    return -1;
                break;
            }
            while (j < n) {
                size_t k = u_next(p, n, j, &cp);
                if (u_space(cp))
                    break;
                j += k;
            }
            if (jlist_push(c, l, jv_strn(p + i, j - i)))
                return -1;
            i = j;
        }
    } else {
        if (need_str(c, at, "split", sep))
            return -1;
        if (sep.u.s.n == 0)
            return jerr(c, at, "split(): empty separator");
        for (;;) {
            const char *hit = (maxsplit < 0 || (int64_t)l->n < maxsplit)
                                  ? memmem(p + i, n - i, sep.u.s.p, sep.u.s.n) : NULL;
            size_t e = hit ? (size_t)(hit - p) : n;
            if (jlist_push(c, l, jv_strn(p + i, e - i)))
                return -1;
            if (!hit)
                break;
            i = e + sep.u.s.n;
        }
    }
    *out = listv(l);
    return 0;
}

static bool str_affix(struct jval s, struct jval x, bool prefix)
{
    if (x.t != JV_STR || x.u.s.n > s.u.s.n)
        return false;
    const char *p = prefix ? s.u.s.p : s.u.s.p + s.u.s.n - x.u.s.n;
    return memcmp(p, x.u.s.p, x.u.s.n) == 0;
}

/* The row of `name` in a table whose rows start with their name, or NULL. */
static const void *jfind(const void *rows, size_t n, size_t size, const char *name)
{
    for (size_t i = 0; i < n; i++, rows = (const char *)rows + size)
        if (!strcmp(*(const char *const *)rows, name))
            return rows;
    return NULL;
}
#define JFIND(table, name) \
    ((const __typeof__((table)[0]) *)jfind((table), sizeof(table) / sizeof((table)[0]), sizeof((table)[0]), (name)))

/* ---- tests ------------------------------------------------------------------------- */
struct jtest;
typedef int (*jtest_fn)(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                        const struct jargs *a, bool *out);
struct jtest {
    const char *name;
    jtest_fn fn;
    unsigned mode; /* what the function needs to tell its names apart */
};

/* The test's argument (`value`); an error when there is none. */
static int test_arg(struct jctx *c, const struct jnode *at, const struct jtest *t, const struct jargs *a,
                    struct jval *x)
{
    if (!arg(a, 0, "value", x))
        return jerr(c, at, "test '%s' needs an argument", t->name);
    return 0;
}

#define JT(x) (1u << (x))

/* mode: the set of value types that pass */
static int test_type(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                     const struct jargs *a, bool *out)
{
    *out = (t->mode & JT(v.t)) != 0;
    return 0;
}

/* mode: 1 for `true`, 0 for `false` */
static int test_bool(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                     const struct jargs *a, bool *out)
{
    *out = v.t == JV_BOOL && v.u.b == (t->mode != 0);
    return 0;
}

/* str(value).islower()/.isupper() (mode 'l', 'u'): some cased character,
 * none of the other case */
static int test_case(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                     const struct jargs *a, bool *out)
{
    struct jval s;
    bool lower = t->mode == 'l', any = false, bad = false;
    if (jv_stringify(c, v, &s))
        return -1;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        i += u_next(s.u.s.p, s.u.s.n, i, &cp);
        if (cp < 0)
            continue;
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat == UTF8PROC_CATEGORY_LT || cat == (lower ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL))
            bad = true;
        else if (cat == (lower ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU))
            any = true;
    }
    *out = any && !bad;
    return 0;
}

/* ==, and != when mode has JT_NOT; sameas (JT_SAME) also wants equal types */
enum { JT_NOT = 1, JT_SAME = 2 };
static int test_eq(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                   const struct jargs *a, bool *out)
{
    struct jval x;
    if (test_arg(c, at, t, a, &x))
        return -1;
    *out = jv_equal(v, x) && (!(t->mode & JT_SAME) || v.t == x.t);
    *out ^= (t->mode & JT_NOT) != 0;
    return 0;
}

/* <, <=, >, >= by mode */
enum { JT_LESS = 1, JT_OREQUAL = 2 };
static int test_order(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                      const struct jargs *a, bool *out)
{
    struct jval x;
    if (test_arg(c, at, t, a, &x))
        return -1;
    if (v.t == JV_UNDEF || x.t == JV_UNDEF)
        return jerr(c, at, "undefined value in comparison");
    int r = jv_compare(v, x);
    if (r == -2)
        return jerr(c, at, "comparison not supported between '%s' and '%s'", jv_type_name(v), jv_type_name(x));
    const bool orequal = t->mode & JT_OREQUAL;
    if (r == 2)
        *out = false;
    else if (t->mode & JT_LESS)
        *out = orequal ? r <= 0 : r < 0;
    else
        *out = orequal ? r >= 0 : r > 0;
    return 0;
}

/* value % n == (1 for odd, else 0) with Python's modulo; n = 2, or the
 * argument for divisibleby (mode 'd'; 'o' odd, 'e' even) */
static int test_mod(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                    const struct jargs *a, bool *out)
{
    const bool odd = t->mode == 'o';
    struct jval d = jv_int(2);
    if (t->mode == 'd' && !arg(a, 0, "value", &d))
        return jerr(c, at, "divisibleby needs an argument");
    bool vn = v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT;
    bool dn = d.t == JV_INT || d.t == JV_BOOL || d.t == JV_FLOAT;
    if (!vn || !dn)
        return jerr(c, at, "test '%s' needs numbers", t->name);
    if (v.t != JV_FLOAT && d.t != JV_FLOAT) {
        int64_t i = v.t == JV_INT ? v.u.i : v.u.b, k = d.t == JV_INT ? d.u.i : d.u.b;
        if (k == 0)
            return jerr(c, at, "integer division or modulo by zero");
        int64_t r = k == -1 ? 0 : i % k;
        if (r != 0 && ((r < 0) != (k < 0)))
            r += k;
        *out = r == (odd ? 1 : 0);
    } else {
        double fv = v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
        double fk = d.t == JV_FLOAT ? d.u.f : d.t == JV_INT ? (double)d.u.i : d.u.b;
        if (fk == 0)
            return jerr(c, at, "float modulo by zero");
        double r = fmod(fv, fk);
        if (r != 0 && ((r < 0) != (fk < 0)))
            r += fk;
        *out = r == (odd ? 1.0 : 0.0);
    }
    return 0;
}

/* whether a filter (mode 'f') or test ('t') of that name exists */
static int test_known(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                      const struct jargs *a, bool *out)
{
    char nm[64];
    *out = false;
    if (v.t == JV_STR && v.u.s.n < sizeof(nm)) {
        memcpy(nm, v.u.s.p, v.u.s.n);
        nm[v.u.s.n] = 0;
        *out = t->mode == 'f' ? jfilter_known(nm) : jtest_known(nm);
    }
    return 0;
}

static int test_in(struct jctx *c, const struct jnode *at, const struct jtest *t, struct jval v,
                   const struct jargs *a, bool *out)
{
    struct jval x;
    if (test_arg(c, at, t, a, &x))
        return -1;
    if (x.t == JV_STR) {
        if (v.t != JV_STR)
            return jerr(c, at, "'in <string>' requires string as left operand");
        *out = v.u.s.n == 0 || memmem(x.u.s.p, x.u.s.n, v.u.s.p, v.u.s.n);
    } else if (x.t == JV_LIST) {
        *out = false;
        for (size_t i = 0; i < x.u.l->n && !*out; i++)
            *out = jv_equal(v, x.u.l->v[i]);
    } else if (x.t == JV_DICT || x.t == JV_NS) {
        *out = jdict_get(x.u.d, v) != NULL;
    } else if (x.t == JV_UNDEF) {
        *out = false;
    } else {
        return jerr(c, at, "argument of type '%s' is not iterable", jv_type_name(x));
    }
    return 0;
}

/* jinja2's built-in tests, all implemented */
static const struct jtest jtests[] = {
    {"!=", test_eq, JT_NOT},
    {"<", test_order, JT_LESS},
    {"<=", test_order, JT_LESS | JT_OREQUAL},
    {"==", test_eq, 0},
    {">", test_order, 0},
    {">=", test_order, JT_OREQUAL},
    {"boolean", test_type, JT(JV_BOOL)},
    /* Undefined defines __call__ (to raise) */
    {"callable", test_type, JT(JV_MACRO) | JT(JV_FUNC) | JT(JV_UNDEF)},
    {"defined", test_type, ~JT(JV_UNDEF)},
    {"divisibleby", test_mod, 'd'},
    {"eq", test_eq, 0},
    {"equalto", test_eq, 0},
    {"escaped", test_type, 0},
    {"even", test_mod, 'e'},
    {"false", test_bool, 0},
    {"filter", test_known, 'f'},
    {"float", test_type, JT(JV_FLOAT)},
    {"ge", test_order, JT_OREQUAL},
    {"greaterthan", test_order, 0},
    {"gt", test_order, 0},
    {"in", test_in, 0},
    {"integer", test_type, JT(JV_INT)},
    {"iterable", test_type, JT(JV_STR) | JT(JV_LIST) | JT(JV_DICT) | JT(JV_UNDEF)},
    {"le", test_order, JT_LESS | JT_OREQUAL},
    {"lessthan", test_order, JT_LESS},
    {"lower", test_case, 'l'},
    {"lt", test_order, JT_LESS},
    {"mapping", test_type, JT(JV_DICT)},
    {"ne", test_eq, JT_NOT},
    {"none", test_type, JT(JV_NONE)},
    {"number", test_type, JT(JV_INT) | JT(JV_FLOAT) | JT(JV_BOOL)},
    {"odd", test_mod, 'o'},
    {"sameas", test_eq, JT_SAME},
    {"sequence", test_type, JT(JV_STR) | JT(JV_LIST) | JT(JV_DICT) | JT(JV_UNDEF)},
    {"string", test_type, JT(JV_STR)},
    {"test", test_known, 't'},
    {"true", test_bool, 1},
    {"undefined", test_type, JT(JV_UNDEF)},
    {"upper", test_case, 'u'},
};

bool jtest_known(const char *name) { return JFIND(jtests, name) != NULL; }

int jtest_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                const struct jargs *a, bool *out)
{
    const struct jtest *t = JFIND(jtests, name);
    if (!t)
        return jerr(c, at, "no test named '%s'", name);
    return t->fn(c, at, t, v, a, out);
}
/* ---- filters ----------------------------------------------------------------------- */
/* Item attribute for selectattr/map: "a.b" walks nested attributes, and
 * integer parts index. */
static int attr_path(struct jctx *c, const struct jnode *at, struct jval item, struct jval attr,
                     struct jval *out)
{
    if (attr.t == JV_INT)
        return jv_getitem(c, at, item, attr, out);
    if (need_str(c, at, "attribute", attr))
        return -1;
    const char *p = attr.u.s.p, *e = p + attr.u.s.n;
    struct jval cur = item;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        size_t len = (size_t)((dot ? dot : e) - p);
        char *nm = jarena_alloc(&c->arena, len + 1);
        if (!nm)
            return jerr(c, at, "template exceeded the memory limit");
        memcpy(nm, p, len);
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++)
            if (nm[i] < '0' || nm[i] > '9')
                digits = false;
        struct jval key = digits ? jv_int(strtoll(nm, NULL, 10)) : jv_strn(nm, len);
        if (cur.t == JV_UNDEF)
            return jerr(c, at, "undefined value has no attribute '%s'", nm);
        /* jinja2's environment.getitem: item lookup, falling back to attribute. */
        if (jv_getitem(c, at, cur, key, &cur))
            return -1;
        if (!dot)
            break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

struct jfilter;
typedef int (*jfilter_fn)(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                          const struct jargs *a, struct jval *out);
struct jfilter {
    const char *name;
    jfilter_fn fn; /* NULL: a jinja2 filter that is not implemented */
    unsigned mode; /* what the function needs to tell its names apart */
};

enum { JF_MARKUP = 1 };

/* string, and safe (Markup(value): a string from now on, marked so `+` escapes a plain str) */
static int filter_string(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    if (jv_stringify(c, v, out))
        return -1;
    out->markup = f->mode == JF_MARKUP;
    return 0;
}

static int filter_trim(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                       const struct jargs *a, struct jval *out)
{
    struct jval x = jv_none(), s;
    arg(a, 0, "chars", &x);
    if (jv_stringify(c, v, &s))
        return -1;
    if (x.t != JV_NONE && need_str(c, at, "trim", x))
        return -1;
    *out = str_strip(s, x, true, true);
    return 0;
}

/* length and count */
static int filter_length(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    switch (v.t) {
    case JV_STR: *out = jv_int((int64_t)jutf8_len(v.u.s.p, v.u.s.n)); return 0;
    case JV_LIST:
        if (v.u.l->gen)
            return jerr(c, at, "object of type 'generator' has no len()");
        *out = jv_int((int64_t)v.u.l->n);
        return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: return jerr(c, at, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static int filter_tojson(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    static const char *const kws[] = { "ensure_ascii", "indent", "separators", "sort_keys", NULL };
    struct jval ea = jv_bool(false), ind = jv_none(), sep = jv_none(), sk = jv_bool(false);
    if (check_args(c, at, "tojson", a, 4, kws))
        return -1;
    arg(a, 0, "ensure_ascii", &ea);
    arg(a, 1, "indent", &ind);
    arg(a, 2, "separators", &sep);
    arg(a, 3, "sort_keys", &sk);
    if (jv_truthy(ea) || sep.t != JV_NONE || jv_truthy(sk))
        return jerr(c, at, "tojson: ensure_ascii, separators and sort_keys are not supported");
    if (ind.t != JV_NONE && (ind.t != JV_INT || ind.u.i < 0 || ind.u.i > 64))
        return jerr(c, at, "tojson: indent must be an integer from 0 to 64");
    struct jbuf b = { 0 };
    if (jbuf_put(c, &b, "", 0) ||
        jv_to_json(c, at, v, ind.t == JV_INT ? (int)ind.u.i : -1, 0, &b))
        return -1;
    *out = jv_strn(b.p, b.n);
    return 0;
}

/* upper, lower, capitalize, title: mode is jstr_case's */
static int filter_case(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                       const struct jargs *a, struct jval *out)
{
    struct jval s;
    if (jv_stringify(c, v, &s))
        return -1;
    return jstr_case(c, s, (char)f->mode, out);
}

/* default and d */
static int filter_default(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                          const struct jargs *a, struct jval *out)
{
    struct jval dv = jv_strn("", 0), bo = jv_bool(false);
    arg(a, 0, "default_value", &dv);
    arg(a, 1, "boolean", &bo);
    *out = (v.t == JV_UNDEF || (jv_truthy(bo) && !jv_truthy(v))) ? dv : v;
    return 0;
}

static int filter_join(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                       const struct jargs *a, struct jval *out)
{
    struct jval sep = jv_strn("", 0), attr = jv_none(), x;
    struct jlist *items;
    arg(a, 0, "d", &sep);
    arg(a, 1, "attribute", &attr);
    if (jv_stringify(c, sep, &sep) || jv_iterate(c, at, v, &items))
        return -1;
    struct jbuf b = { 0 };
    if (jbuf_put(c, &b, "", 0))
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        x = items->v[i];
        if (attr.t != JV_NONE && attr_path(c, at, x, attr, &x))
            return -1;
        if ((i && jbuf_put(c, &b, sep.u.s.p, sep.u.s.n)) || jv_to_str(c, x, &b))
            return -1;
    }
    *out = jv_strn(b.p, b.n);
    return 0;
}

static int filter_replace(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                          const struct jargs *a, struct jval *out)
{
    struct jval cnt = jv_none(), s;
    if (a->npos < 2)
        return jerr(c, at, "replace needs two arguments");
    arg(a, 2, "count", &cnt);
    if (jv_stringify(c, v, &s))
        return -1;
    return str_replace(c, at, s, a->pos[0], a->pos[1], cnt.t == JV_INT ? cnt.u.i : -1, out);
}

/* dict.items() as (key, value) tuples: a generator, as the filter gives */
static int filter_items(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                        const struct jargs *a, struct jval *out)
{
    struct jlist *l;
    if (v.t == JV_UNDEF) {
        if (!(l = jlist_new(c, 0)))
            return -1;
        *out = genv(l);
        return 0;
    }
    if (v.t != JV_DICT)
        return lazy_fail(c, v, "can only get item pairs from a mapping, not %s", out);
    if (!(l = jlist_new(c, v.u.d->n)))
        return -1;
    for (size_t i = 0; i < v.u.d->n; i++) {
        struct jlist *pair = jlist_new(c, 2);
        if (!pair)
            return -1;
        pair->tuple = true;
        pair->v[0] = v.u.d->k[i];
        pair->v[1] = v.u.d->v[i];
        pair->n = 2;
        l->v[l->n++] = listv(pair);
    }
    *out = genv(l);
    return 0;
}

/* Orders two dictionary keys as Python orders them (strings by code point:
 * UTF-8 bytes; case folded to ASCII lower case unless case_sensitive;
 * numbers by value); other kinds of keys compare equal (stable order). */
static int dictsort_cmp(struct jval x, struct jval y, bool case_sensitive)
{
    if (x.t == JV_STR && y.t == JV_STR) {
        for (size_t i = 0; i < x.u.s.n && i < y.u.s.n; i++) {
            unsigned char cx = (unsigned char)x.u.s.p[i], cy = (unsigned char)y.u.s.p[i];
            if (!case_sensitive) {
                cx = cx >= 'A' && cx <= 'Z' ? (unsigned char)(cx + 32) : cx;
                cy = cy >= 'A' && cy <= 'Z' ? (unsigned char)(cy + 32) : cy;
            }
            if (cx != cy)
                return cx < cy ? -1 : 1;
        }
        return x.u.s.n < y.u.s.n ? -1 : x.u.s.n > y.u.s.n;
    }
    if ((x.t == JV_INT || x.t == JV_FLOAT) && (y.t == JV_INT || y.t == JV_FLOAT)) {
        double a = x.t == JV_INT ? (double)x.u.i : x.u.f, b = y.t == JV_INT ? (double)y.u.i : y.u.f;
        return a < b ? -1 : a > b;
    }
    return 0;
}

/* dictsort(case_sensitive=false, by='key', reverse=false): a mapping's
 * (key, value) pairs ordered by key (a stable insertion sort: mappings in
 * templates are small).  by='value' is refused. */
static int filter_dictsort(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                           const struct jargs *a, struct jval *out)
{
    static const char *const kws[] = {"case_sensitive", "by", "reverse", NULL};
    struct jval cs = {.t = JV_BOOL}, by = {.t = JV_UNDEF}, rev = {.t = JV_BOOL};
    if (check_args(c, at, "dictsort", a, 3, kws))
        return -1;
    arg(a, 0, "case_sensitive", &cs);
    arg(a, 1, "by", &by);
    arg(a, 2, "reverse", &rev);
    if (by.t != JV_UNDEF && !(by.t == JV_STR && by.u.s.n == 3 && !memcmp(by.u.s.p, "key", 3)))
        return jerr(c, at, "dictsort: only by='key' is supported");
    if (v.t != JV_DICT)
        return jerr(c, at, "dictsort: can only sort a mapping");
    if (filter_items(c, at, f, v, a, out))
        return -1;
    struct jlist *l = out->u.l;
    const bool sensitive = cs.t == JV_BOOL && cs.u.b, reverse = rev.t == JV_BOOL && rev.u.b;
    for (size_t i = 1; i < l->n; i++) {
        struct jval p = l->v[i];
        size_t j = i;
        for (; j > 0; j--) {
            int d = dictsort_cmp(l->v[j - 1].u.l->v[0], p.u.l->v[0], sensitive);
            if (reverse ? d >= 0 : d <= 0)
                break;
            l->v[j] = l->v[j - 1];
        }
        l->v[j] = p;
    }
    return 0;
}

/* first and last (mode 'f', 'l') */
static int filter_end(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                      const struct jargs *a, struct jval *out)
{
    struct jlist *items;
    if (f->mode == 'l' && v.t == JV_LIST && v.u.l->gen)
        return jerr(c, at, "'generator' object is not reversible");
    if (jv_iterate(c, at, v, &items))
        return -1;
    if (items->n == 0)
        *out = jv_undef(NULL);
    else
        *out = items->v[f->mode == 'f' ? 0 : items->n - 1];
    return 0;
}

static int filter_list(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                       const struct jargs *a, struct jval *out)
{
    struct jlist *items;
    if (jv_iterate(c, at, v, &items))
        return -1;
    struct jlist *l = jlist_new(c, items->n);
    if (!l)
        return -1;
    if (items->n)
        memcpy(l->v, items->v, items->n * sizeof(struct jval));
    l->n = items->n;
    *out = listv(l);
    return 0;
}

static int filter_reverse(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                          const struct jargs *a, struct jval *out)
{
    struct jlist *items;
    if (jv_iterate(c, at, v, &items))
        return -1;
    if (v.t == JV_STR) {
        struct jbuf b = { 0 };
        if (jbuf_put(c, &b, "", 0))
            return -1;
        for (size_t i = items->n; i-- > 0;)
            if (jbuf_put(c, &b, items->v[i].u.s.p, items->v[i].u.s.n))
                return -1;
        *out = jv_strn(b.p, b.n);
        return 0;
    }
    struct jlist *l = jlist_new(c, items->n);
    if (!l)
        return -1;
    for (size_t i = items->n; i-- > 0;)
        l->v[l->n++] = items->v[i];
    *out = genv(l);
    return 0;
}

/* select, reject, selectattr, rejectattr */
enum { JF_SELECT = 1, JF_BY_ATTR = 2 };
static int filter_select(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    const bool by_attr = f->mode & JF_BY_ATTR, select = f->mode & JF_SELECT;
    struct jlist *items, *res;
    if (!(res = jlist_new(c, 0)))
        return -1;
    if (!jv_truthy(v)) { /* jinja2: `if value:` guards the iteration */
        *out = genv(res);
        return 0;
    }
    if (!iterable(v))
        return lazy_fail(c, v, "'%s' object is not iterable", out);
    if (jv_iterate(c, at, v, &items))
        return -1;
    size_t first = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1)
        return jerr(c, at, "%s needs an attribute name", f->name);
    struct jval testname = jv_undef(NULL);
    bool have_test = a->npos > first;
    if (have_test) {
        testname = a->pos[first];
        if (need_str(c, at, f->name, testname))
            return -1;
    }
    char tn[64];
    if (have_test) {
        if (testname.u.s.n >= sizeof(tn))
            return jerr(c, at, "no test named '%.*s'", 20, testname.u.s.p);
        memcpy(tn, testname.u.s.p, testname.u.s.n);
        tn[testname.u.s.n] = 0;
    }
    struct jargs ta = { 0 };
    if (have_test) {
        ta.pos = a->pos + first + 1;
        ta.npos = a->npos - first - 1;
    }
    for (size_t i = 0; i < items->n; i++) {
        struct jval x = items->v[i];
        bool ok;
        if (++c->steps > SP_CHAT_MAX_STEPS)
            return jerr(c, at, "template exceeded the work limit");
        if (by_attr && attr_path(c, at, items->v[i], a->pos[0], &x))
            return -1;
        if (have_test) {
            if (jtest_apply(c, at, tn, x, &ta, &ok))
                return -1;
        } else {
            ok = jv_truthy(x);
        }
        if (ok == select && jlist_push(c, res, items->v[i]))
            return -1;
    }
    *out = genv(res);
    return 0;
}

static int filter_map(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                      const struct jargs *a, struct jval *out)
{
    struct jval attr, dflt = jv_undef(NULL), x;
    struct jlist *items;
    bool have_default = arg(a, 99, "default", &dflt);
    if (!jv_truthy(v)) /* jinja2: `if value:` guards the iteration */
        v = jv_undef(NULL);
    if (!iterable(v))
        return lazy_fail(c, v, "'%s' object is not iterable", out);
    if (jv_iterate(c, at, v, &items))
        return -1;
    struct jlist *l = jlist_new(c, items->n);
    if (!l)
        return -1;
    bool by_attr = arg(a, 99, "attribute", &attr);
    char fname[64];
    struct jargs fa = { 0 };
    if (!by_attr) {
        if (a->npos < 1 || a->pos[0].t != JV_STR || a->pos[0].u.s.n >= sizeof(fname))
            return jerr(c, at, "map needs a filter name or attribute=");
        memcpy(fname, a->pos[0].u.s.p, a->pos[0].u.s.n);
        fname[a->pos[0].u.s.n] = 0;
        fa.pos = a->pos + 1;
        fa.npos = a->npos - 1;
    }
    for (size_t i = 0; i < items->n; i++) {
        if (++c->steps > SP_CHAT_MAX_STEPS)
            return jerr(c, at, "template exceeded the work limit");
        if (by_attr) {
            if (attr_path(c, at, items->v[i], attr, &x))
                return -1;
            if (x.t == JV_UNDEF && have_default)
                x = dflt;
        } else if (jfilter_apply(c, at, fname, items->v[i], &fa, &x)) {
            return -1;
        }
        l->v[l->n++] = x;
    }
    *out = genv(l);
    return 0;
}

static int filter_unique(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    struct jval cs = jv_bool(false);
    struct jlist *items;
    arg(a, 0, "case_sensitive", &cs);
    if (!iterable(v))
        return lazy_fail(c, v, "'%s' object is not iterable", out);
    if (jv_iterate(c, at, v, &items))
        return -1;
    struct jlist *l = jlist_new(c, 0), *keys = jlist_new(c, 0);
    if (!l || !keys)
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        struct jval k = items->v[i];
        if (k.t == JV_STR && !jv_truthy(cs) && jstr_case(c, k, 'l', &k) < 0)
            return -1;
        bool seen = false;
        for (size_t j = 0; j < keys->n && !seen; j++) {
            if (++c->steps > SP_CHAT_MAX_STEPS)
                return jerr(c, at, "template exceeded the work limit");
            seen = jv_equal(keys->v[j], k);
        }
        if (!seen && (jlist_push(c, keys, k) || jlist_push(c, l, items->v[i])))
            return -1;
    }
    *out = genv(l);
    return 0;
}

/* jinja2 does s + "\n": only a str works */
static int filter_indent(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval s,
                         const struct jargs *a, struct jval *out)
{
    static const char *const kws[] = { "width", "first", "blank", NULL };
    struct jval w = jv_int(4), first = jv_bool(false), blank = jv_bool(false);
    char ind[256];
    size_t indn;
    if (s.t != JV_STR)
        return jerr(c, at, "indent: expected a string, got %s", jv_type_name(s));
    if (check_args(c, at, "indent", a, 3, kws))
        return -1;
    arg(a, 0, "width", &w);
    arg(a, 1, "first", &first);
    arg(a, 2, "blank", &blank);
    if (w.t == JV_STR) {
        if (w.u.s.n >= sizeof(ind))
            return jerr(c, at, "indent: width too long");
        memcpy(ind, w.u.s.p, w.u.s.n);
        indn = w.u.s.n;
    } else if (w.t == JV_INT) {
        indn = w.u.i < 0 ? 0 : w.u.i > 200 ? 200 : (size_t)w.u.i;
        memset(ind, ' ', indn);
    } else {
        return jerr(c, at, "indent: width must be an int or a string");
    }
    struct jbuf b = { 0 };
    if (jbuf_put(c, &b, "", 0))
        return -1;
    if (jv_truthy(first) && jbuf_put(c, &b, ind, indn))
        return -1;
    /* s + "\n" split into lines (Python splitlines over \n, \r\n, \r, \v, \f,
     * \x1c-\x1e, U+0085, U+2028, U+2029), rejoined with "\n" + indent. */
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    bool first_line = true;
    for (;;) {
        size_t st = i, brk = 0;
        while (i < n) {
            unsigned char ch = (unsigned char)p[i];
            if (ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f' || (ch >= 0x1c && ch <= 0x1e)) {
                brk = (ch == '\r' && i + 1 < n && p[i + 1] == '\n') ? 2 : 1;
                break;
            }
            if (ch == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) { brk = 2; break; }
            if (ch == 0xe2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
                ((unsigned char)p[i + 2] == 0xa8 || (unsigned char)p[i + 2] == 0xa9)) { brk = 3; break; }
            i++;
        }
        size_t len = i - st;
        if (!first_line) {
            if (jbuf_put(c, &b, "\n", 1))
                return -1;
            if ((len > 0 || jv_truthy(blank)) && jbuf_put(c, &b, ind, indn))
                return -1;
        }
        if (jbuf_put(c, &b, p + st, len))
            return -1;
        first_line = false;
        if (i >= n)
            break; /* the appended "\n" ends the last line */
        i += brk; /* a trailing break leaves one more (empty) line */
    }
    *out = jv_strn(b.p, b.n);
    return 0;
}


/* int and float of an undefined value raise; others fall back to `default` */
static int filter_int(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                      const struct jargs *a, struct jval *out)
{
    struct jval dflt = jv_int(0);
    if (v.t == JV_UNDEF)
        return jerr(c, at, "undefined value converted to a number");
    arg(a, 0, "default", &dflt);
    if (v.t == JV_INT) *out = v;
    else if (v.t == JV_BOOL) *out = jv_int(v.u.b);
    else if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = jv_int((int64_t)v.u.f);
    else if (v.t == JV_STR) {
        char buf[64];
        struct jval t = str_strip(v, jv_none(), true, true);
        char *end;
        if (t.u.s.n == 0 || t.u.s.n >= sizeof(buf)) {
            *out = dflt;
            return 0;
        }
        memcpy(buf, t.u.s.p, t.u.s.n);
        buf[t.u.s.n] = 0;
        long long iv = strtoll(buf, &end, 10);
        if (*end == 0) {
            *out = jv_int(iv);
        } else {
            double dv = strtod(buf, &end);
            *out = (*end == 0 && isfinite(dv) && fabs(dv) < 9.2e18) ? jv_int((int64_t)dv) : dflt;
        }
    } else *out = dflt;
    return 0;
}

static int filter_float(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                        const struct jargs *a, struct jval *out)
{
    struct jval dflt = jv_float(0.0);
    if (v.t == JV_UNDEF)
        return jerr(c, at, "undefined value converted to a number");
    arg(a, 0, "default", &dflt);
    if (v.t == JV_FLOAT) *out = v;
    else if (v.t == JV_INT) *out = jv_float((double)v.u.i);
    else if (v.t == JV_BOOL) *out = jv_float(v.u.b);
    else if (v.t == JV_STR && v.u.s.n < 64) {
        char buf[64], *end;
        memcpy(buf, v.u.s.p, v.u.s.n);
        buf[v.u.s.n] = 0;
        double dv = strtod(buf, &end);
        *out = (v.u.s.n && *end == 0) ? jv_float(dv) : dflt;
    } else *out = dflt;
    return 0;
}

static int filter_abs(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                      const struct jargs *a, struct jval *out)
{
    if (v.t == JV_INT && v.u.i != INT64_MIN) *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.u.f));
    else if (v.t == JV_BOOL) *out = jv_int(v.u.b);
    else return jerr(c, at, "bad operand type for abs(): '%s'", jv_type_name(v));
    return 0;
}

/* e, escape and forceescape: HTML-escaped str(value) */
static int filter_escape(struct jctx *c, const struct jnode *at, const struct jfilter *f, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    struct jval s;
    struct jbuf b = { 0 };
    if (jv_stringify(c, v, &s) || jbuf_put(c, &b, "", 0))
        return -1;
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char *r = NULL;
        switch (s.u.s.p[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        }
        if (r ? jbuf_puts(c, &b, r) : jbuf_put(c, &b, s.u.s.p + i, 1))
            return -1;
    }
    *out = jv_strn(b.p, b.n);
    return 0;
}

/* jinja2's built-in filters.  Every name here compiles; the ones without a
 * function fail only when executed, as an unknown name does inside an
 * if/conditional expression in jinja2. */
static const struct jfilter jfilters[] = {
    {"abs", filter_abs, 0},
    {"attr", NULL, 0},
    {"batch", NULL, 0},
    {"capitalize", filter_case, 'c'},
    {"center", NULL, 0},
    {"count", filter_length, 0},
    {"d", filter_default, 0},
    {"default", filter_default, 0},
    {"dictsort", filter_dictsort, 0},
    {"e", filter_escape, 0},
    {"escape", filter_escape, 0},
    {"filesizeformat", NULL, 0},
    {"first", filter_end, 'f'},
    {"float", filter_float, 0},
    {"forceescape", filter_escape, 0},
    {"format", NULL, 0},
    {"groupby", NULL, 0},
    {"indent", filter_indent, 0},
    {"int", filter_int, 0},
    {"items", filter_items, 0},
    {"join", filter_join, 0},
    {"last", filter_end, 'l'},
    {"length", filter_length, 0},
    {"list", filter_list, 0},
    {"lower", filter_case, 'l'},
    {"map", filter_map, 0},
    {"max", NULL, 0},
    {"min", NULL, 0},
    {"pprint", NULL, 0},
    {"random", NULL, 0},
    {"reject", filter_select, 0},
    {"rejectattr", filter_select, JF_BY_ATTR},
    {"replace", filter_replace, 0},
    {"reverse", filter_reverse, 0},
    {"round", NULL, 0},
    {"safe", filter_string, JF_MARKUP},
    {"select", filter_select, JF_SELECT},
    {"selectattr", filter_select, JF_SELECT | JF_BY_ATTR},
    {"slice", NULL, 0},
    {"sort", NULL, 0},
    {"string", filter_string, 0},
    {"striptags", NULL, 0},
    {"sum", NULL, 0},
    {"title", filter_case, 'j'},
    {"tojson", filter_tojson, 0},
    {"trim", filter_trim, 0},
    {"truncate", NULL, 0},
    {"unique", filter_unique, 0},
    {"upper", filter_case, 'u'},
    {"urlencode", NULL, 0},
    {"urlize", NULL, 0},
    {"wordcount", NULL, 0},
    {"wordwrap", NULL, 0},
    {"xmlattr", NULL, 0},
};

bool jfilter_known(const char *name) { return JFIND(jfilters, name) != NULL; }

int jfilter_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                  const struct jargs *a, struct jval *out)
{
    const struct jfilter *f = JFIND(jfilters, name);
    if (!f)
        return jerr(c, at, "no filter named '%s'", name);
    if (!f->fn)
        return jerr(c, at, "filter '%s' is not supported", name);
    return f->fn(c, at, f, v, a, out);
}

/* ---- methods ------------------------------------------------------------------------ */
struct jmethod;
typedef int (*jmethod_fn)(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                          const struct jargs *a, struct jval *out);
struct jmethod {
    const char *name;
    jmethod_fn fn;
    unsigned mode; /* what the function needs to tell its names apart */
};

/* strip, lstrip, rstrip (mode 'b', 'l', 'r') */
static int str_m_strip(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                       const struct jargs *a, struct jval *out)
{
    struct jval x = jv_none();
    arg(a, 0, "chars", &x);
    if (x.t != JV_NONE && need_str(c, at, m->name, x))
        return -1;
    *out = str_strip(obj, x, m->mode != 'r', m->mode != 'l');
    return 0;
}

static int str_m_split(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                       const struct jargs *a, struct jval *out)
{
    struct jval x = jv_none(), ms = jv_int(-1);
    arg(a, 0, "sep", &x);
    arg(a, 1, "maxsplit", &ms);
    if (ms.t != JV_INT)
        return jerr(c, at, "split(): maxsplit must be an integer");
    return str_split(c, at, obj, x, ms.u.i, out);
}

/* startswith, endswith (mode 1, 0): a str or a tuple of them */
static int str_m_affix(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                       const struct jargs *a, struct jval *out)
{
    bool hit = false;
    if (a->npos != 1)
        return jerr(c, at, "%s() takes one argument", m->name);
    struct jval x = a->pos[0];
    if (x.t == JV_LIST && x.u.l->tuple) {
        for (size_t i = 0; i < x.u.l->n; i++) {
            if (need_str(c, at, m->name, x.u.l->v[i]))
                return -1;
            hit = hit || str_affix(obj, x.u.l->v[i], m->mode);
        }
    } else {
        if (need_str(c, at, m->name, x))
            return -1;
        hit = str_affix(obj, x, m->mode);
    }
    *out = jv_bool(hit);
    return 0;
}

/* upper, lower, title, capitalize: mode is jstr_case's */
static int str_m_case(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                      const struct jargs *a, struct jval *out)
{
    return jstr_case(c, obj, (char)m->mode, out);
}

static int str_m_replace(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                         const struct jargs *a, struct jval *out)
{
    if (a->npos < 2)
        return jerr(c, at, "replace() needs two arguments");
    struct jval cnt = jv_int(-1);
    arg(a, 2, "count", &cnt);
    if (cnt.t != JV_INT)
        return jerr(c, at, "replace(): count must be an integer");
    return str_replace(c, at, obj, a->pos[0], a->pos[1], cnt.u.i, out);
}

static int str_m_join(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                      const struct jargs *a, struct jval *out)
{
    struct jlist *items;
    struct jbuf b = { 0 };
    if (a->npos != 1)
        return jerr(c, at, "join() takes one argument");
    if (jv_iterate(c, at, a->pos[0], &items) || jbuf_put(c, &b, "", 0))
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (need_str(c, at, "join", items->v[i]))
            return -1;
        if ((i && jbuf_put(c, &b, obj.u.s.p, obj.u.s.n)) ||
            jbuf_put(c, &b, items->v[i].u.s.p, items->v[i].u.s.n))
            return -1;
    }
    *out = jv_strn(b.p, b.n);
    return 0;
}

/* find (mode 'f': code point index or -1) and count (non-overlapping) */
static int str_m_search(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                        const struct jargs *a, struct jval *out)
{
    if (a->npos != 1)
        return jerr(c, at, "%s() takes one argument", m->name);
    if (need_str(c, at, m->name, a->pos[0]))
        return -1;
    struct jval y = a->pos[0];
    if (m->mode == 'f') {
        const char *h = y.u.s.n ? memmem(obj.u.s.p, obj.u.s.n, y.u.s.p, y.u.s.n) : obj.u.s.p;
        *out = jv_int(h ? (int64_t)jutf8_len(obj.u.s.p, (size_t)(h - obj.u.s.p)) : -1);
        return 0;
    }
    int64_t k = 0;
    if (y.u.s.n == 0) {
        k = (int64_t)jutf8_len(obj.u.s.p, obj.u.s.n) + 1;
    } else {
        for (size_t i = 0; i + y.u.s.n <= obj.u.s.n;) {
            const char *h = memmem(obj.u.s.p + i, obj.u.s.n - i, y.u.s.p, y.u.s.n);
            if (!h)
                break;
            k++;
            i = (size_t)(h - obj.u.s.p) + y.u.s.n;
        }
    }
    *out = jv_int(k);
    return 0;
}

static const struct jmethod str_methods[] = {
    {"capitalize", str_m_case, 'c'},
    {"count", str_m_search, 'c'},
    {"endswith", str_m_affix, 0},
    {"find", str_m_search, 'f'},
    {"join", str_m_join, 0},
    {"lower", str_m_case, 'l'},
    {"lstrip", str_m_strip, 'l'},
    {"replace", str_m_replace, 0},
    {"rstrip", str_m_strip, 'r'},
    {"split", str_m_split, 0},
    {"startswith", str_m_affix, 1},
    {"strip", str_m_strip, 'b'},
    {"title", str_m_case, 't'},
    {"upper", str_m_case, 'u'},
};

static int dict_m_get(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                      const struct jargs *a, struct jval *out)
{
    if (a->npos < 1 || a->npos > 2)
        return jerr(c, at, "get() takes one or two arguments");
    struct jval *v = jdict_get(obj.u.d, a->pos[0]);
    *out = v ? *v : a->npos == 2 ? a->pos[1] : jv_none();
    return 0;
}

/* dict_items: a sized view, unlike the filter's generator */
static int dict_m_items(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                        const struct jargs *a, struct jval *out)
{
    if (filter_items(c, at, NULL, obj, a, out))
        return -1;
    out->u.l->gen = false;
    return 0;
}

/* keys, values (mode 'k', 'v') */
static int dict_m_list(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                       const struct jargs *a, struct jval *out)
{
    struct jlist *l = jlist_new(c, obj.u.d->n);
    if (!l)
        return -1;
    for (size_t i = 0; i < obj.u.d->n; i++)
        l->v[l->n++] = m->mode == 'k' ? obj.u.d->k[i] : obj.u.d->v[i];
    *out = listv(l);
    return 0;
}

static const struct jmethod dict_methods[] = {
    {"get", dict_m_get, 0},
    {"items", dict_m_items, 0},
    {"keys", dict_m_list, 'k'},
    {"values", dict_m_list, 'v'},
};

static int loop_m_cycle(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                        const struct jargs *a, struct jval *out)
{
    if (a->npos == 0)
        return jerr(c, at, "no items for cycling given");
    *out = a->pos[obj.u.loop->i % a->npos];
    return 0;
}

static const struct jmethod loop_methods[] = {
    {"cycle", loop_m_cycle, 0},
};

/* the sandbox refuses list methods that modify the list */
static int list_m_unsafe(struct jctx *c, const struct jnode *at, const struct jmethod *m, struct jval obj,
                         const struct jargs *a, struct jval *out)
{
    return jerr(c, at, "access to attribute '%s' of 'list' object is unsafe", m->name);
}

static const struct jmethod list_methods[] = {
    {"append", list_m_unsafe, 0}, {"clear", list_m_unsafe, 0}, {"extend", list_m_unsafe, 0},
    {"insert", list_m_unsafe, 0}, {"pop", list_m_unsafe, 0},   {"remove", list_m_unsafe, 0},
    {"reverse", list_m_unsafe, 0}, {"sort", list_m_unsafe, 0},
};

int jmethod_call(struct jctx *c, const struct jnode *at, struct jval obj, const char *name,
                 const struct jargs *a, struct jval *out)
{
    const struct jmethod *m = NULL;
    switch (obj.t) {
    case JV_STR: m = JFIND(str_methods, name); break;
    case JV_DICT: m = JFIND(dict_methods, name); break;
    case JV_LOOP: m = JFIND(loop_methods, name); break;
    case JV_LIST: m = JFIND(list_methods, name); break;
    default: break;
    }
    if (m)
        return m->fn(c, at, m, obj, a, out);
    if (obj.t == JV_DICT) {
        struct jval *v = jdict_gets(obj.u.d, name);
        if (v && (v->t == JV_MACRO || v->t == JV_FUNC))
            return jerr(c, at, "calling functions stored in dicts is not supported");
    }
    return jerr(c, at, "'%s' object has no attribute '%s'", jv_type_name(obj), name);
}
