/* Filters, tests and methods of the Jinja2 subset, matching jinja2 3.x and
 * HF transformers' tojson (ensure_ascii=False, keys unsorted).  Unicode case
 * mapping comes from utf8proc. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/chat.h"
#include "chat/jinja.h"

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

int jstr_case(struct jctx *c, struct jval v, char mode, struct jval *out)
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
    return 1;
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

/* ---- names -------------------------------------------------------------------------- */
/* jinja2's built-in filter and test names.  A name in these lists compiles;
 * the few we do not implement fail only when executed, as an unknown name
 * does inside an if/conditional expression in jinja2. */
static const char *const known_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", NULL,
};
static const char *const known_tests[] = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
    "equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in",
    "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
    "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", NULL,
};

static bool in_list(const char *const *l, const char *name)
{
    for (; *l; l++)
        if (!strcmp(*l, name))
            return true;
    return false;
}

bool jfilter_known(const char *name) { return in_list(known_filters, name); }
bool jtest_known(const char *name) { return in_list(known_tests, name); }

/* ---- tests ------------------------------------------------------------------------- */
int jtest_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                const struct jargs *a, bool *out)
{
    struct jval x = jv_undef(NULL);
    bool have = arg(a, 0, "value", &x);
    if (!strcmp(name, "defined")) *out = v.t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = v.t == JV_UNDEF;
    else if (!strcmp(name, "none")) *out = v.t == JV_NONE;
    else if (!strcmp(name, "string")) *out = v.t == JV_STR;
    else if (!strcmp(name, "mapping")) *out = v.t == JV_DICT;
    else if (!strcmp(name, "iterable")) *out = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *out = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (!strcmp(name, "number")) *out = v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    else if (!strcmp(name, "integer")) *out = v.t == JV_INT;
    else if (!strcmp(name, "float")) *out = v.t == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *out = v.t == JV_BOOL;
    else if (!strcmp(name, "true")) *out = v.t == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false")) *out = v.t == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "callable")) /* Undefined defines __call__ (to raise) */
        *out = v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_UNDEF;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        /* str(value).islower()/.isupper(): some cased character, none of the other case */
        struct jval s;
        bool lower = name[0] == 'l', any = false, bad = false;
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
    } else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
               !strcmp(name, "sameas")) {
        if (!have)
            return jerr(c, at, "test '%s' needs an argument", name);
        *out = jv_equal(v, x);
        if (!strcmp(name, "sameas") && v.t != x.t)
            *out = false;
    } else if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        if (!have)
            return jerr(c, at, "test '%s' needs an argument", name);
        *out = !jv_equal(v, x);
    } else if (!strcmp(name, "lt") || !strcmp(name, "le") || !strcmp(name, "gt") ||
               !strcmp(name, "ge") || !strcmp(name, "lessthan") || !strcmp(name, "greaterthan") ||
               !strcmp(name, "<") || !strcmp(name, "<=") || !strcmp(name, ">") ||
               !strcmp(name, ">=")) {
        /* lt/le/gt/ge as two letters; lessthan == lt, greaterthan == gt */
        bool less = name[0] == 'l' || name[0] == '<';
        bool orequal = (name[1] == 'e' && name[2] == 0) || name[1] == '=';
        if (!have)
            return jerr(c, at, "test '%s' needs an argument", name);
        if (v.t == JV_UNDEF || x.t == JV_UNDEF)
            return jerr(c, at, "undefined value in comparison");
        int r = jv_compare(v, x);
        if (r == -2)
            return jerr(c, at, "comparison not supported between '%s' and '%s'", jv_type_name(v),
                        jv_type_name(x));
        if (r == 2) *out = false;
        else if (less) *out = orequal ? r <= 0 : r < 0;
        else *out = orequal ? r >= 0 : r > 0;
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        /* value % n == (1 for odd, else 0) with Python's modulo */
        bool odd = name[0] == 'o';
        struct jval d = name[0] == 'd' ? x : jv_int(2);
        if (name[0] == 'd' && !have)
            return jerr(c, at, "divisibleby needs an argument");
        bool vn = v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT;
        bool dn = d.t == JV_INT || d.t == JV_BOOL || d.t == JV_FLOAT;
        if (!vn || !dn)
            return jerr(c, at, "test '%s' needs numbers", name);
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
    } else if (!strcmp(name, "escaped")) {
        *out = false;
    } else if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        char nm[64];
        if (v.t != JV_STR || v.u.s.n >= sizeof(nm)) {
            *out = false;
        } else {
            memcpy(nm, v.u.s.p, v.u.s.n);
            nm[v.u.s.n] = 0;
            *out = name[0] == 'f' ? jfilter_known(nm) : jtest_known(nm);
        }
    } else if (!strcmp(name, "in")) {
        if (!have)
            return jerr(c, at, "test 'in' needs an argument");
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
    } else {
        if (jtest_known(name))
            return jerr(c, at, "test '%s' is not supported", name);
        return jerr(c, at, "no test named '%s'", name);
    }
    return 0;
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

static int select_reject(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                         const struct jargs *a, struct jval *out)
{
    bool by_attr = !strcmp(name, "selectattr") || !strcmp(name, "rejectattr");
    bool select = name[0] == 's';
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
        return jerr(c, at, "%s needs an attribute name", name);
    struct jval testname = jv_undef(NULL);
    bool have_test = a->npos > first;
    if (have_test) {
        testname = a->pos[first];
        if (need_str(c, at, name, testname))
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

static int indent_filter(struct jctx *c, const struct jnode *at, struct jval s,
                         const struct jargs *a, struct jval *out)
{
    static const char *const kws[] = { "width", "first", "blank", NULL };
    struct jval w = jv_int(4), first = jv_bool(false), blank = jv_bool(false);
    char ind[256];
    size_t indn;
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

int jfilter_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                  const struct jargs *a, struct jval *out)
{
    struct jval x, s;
    struct jlist *items;
    if (!strcmp(name, "safe")) { /* Markup(value): a string from now on */
        if (jv_stringify(c, v, out))
            return -1;
        out->markup = true;
        return 0;
    }
    if (!strcmp(name, "trim")) {
        x = jv_none();
        arg(a, 0, "chars", &x);
        if (jv_stringify(c, v, &s))
            return -1;
        if (x.t != JV_NONE && need_str(c, at, "trim", x))
            return -1;
        *out = str_strip(s, x, true, true);
        return 0;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
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
    if (!strcmp(name, "tojson")) {
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
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title")) {
        if (jv_stringify(c, v, &s))
            return -1;
        char mode = name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 'c' ? 'c' : 'j';
        return jstr_case(c, s, mode, out) < 0 ? -1 : 0;
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct jval dv = jv_strn("", 0), bo = jv_bool(false);
        arg(a, 0, "default_value", &dv);
        arg(a, 1, "boolean", &bo);
        *out = (v.t == JV_UNDEF || (jv_truthy(bo) && !jv_truthy(v))) ? dv : v;
        return 0;
    }
    if (!strcmp(name, "string"))
        return jv_stringify(c, v, out);
    if (!strcmp(name, "join")) {
        struct jval sep = jv_strn("", 0), attr = jv_none();
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
    if (!strcmp(name, "replace")) {
        struct jval cnt = jv_none();
        if (a->npos < 2)
            return jerr(c, at, "replace needs two arguments");
        arg(a, 2, "count", &cnt);
        if (jv_stringify(c, v, &s))
            return -1;
        return str_replace(c, at, s, a->pos[0], a->pos[1], cnt.t == JV_INT ? cnt.u.i : -1, out);
    }
    if (!strcmp(name, "items")) {
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
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (name[0] == 'l' && v.t == JV_LIST && v.u.l->gen)
            return jerr(c, at, "'generator' object is not reversible");
        if (jv_iterate(c, at, v, &items))
            return -1;
        if (items->n == 0)
            *out = jv_undef(NULL);
        else
            *out = items->v[name[0] == 'f' ? 0 : items->n - 1];
        return 0;
    }
    if (!strcmp(name, "list")) {
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
    if (!strcmp(name, "reverse")) {
        if (v.t == JV_STR) {
            if (jv_iterate(c, at, v, &items))
                return -1;
            struct jbuf b = { 0 };
            if (jbuf_put(c, &b, "", 0))
                return -1;
            for (size_t i = items->n; i-- > 0;)
                if (jbuf_put(c, &b, items->v[i].u.s.p, items->v[i].u.s.n))
                    return -1;
            *out = jv_strn(b.p, b.n);
            return 0;
        }
        if (jv_iterate(c, at, v, &items))
            return -1;
        struct jlist *l = jlist_new(c, items->n);
        if (!l)
            return -1;
        for (size_t i = items->n; i-- > 0;)
            l->v[l->n++] = items->v[i];
        *out = genv(l);
        return 0;
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") ||
        !strcmp(name, "reject"))
        return select_reject(c, at, name, v, a, out);
    if (!strcmp(name, "map")) {
        struct jval attr, dflt = jv_undef(NULL);
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
    if (!strcmp(name, "unique")) {
        struct jval cs = jv_bool(false);
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
    if (!strcmp(name, "indent")) { /* jinja2 does s + "\n": only str works */
        if (v.t != JV_STR)
            return jerr(c, at, "indent: expected a string, got %s", jv_type_name(v));
        return indent_filter(c, at, v, a, out);
    }
    if ((!strcmp(name, "int") || !strcmp(name, "float")) && v.t == JV_UNDEF)
        return jerr(c, at, "undefined value converted to a number");
    if (!strcmp(name, "int")) {
        struct jval dflt = jv_int(0);
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
    if (!strcmp(name, "float")) {
        struct jval dflt = jv_float(0.0);
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
    if (!strcmp(name, "abs")) {
        if (v.t == JV_INT && v.u.i != INT64_MIN) *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.u.f));
        else if (v.t == JV_BOOL) *out = jv_int(v.u.b);
        else return jerr(c, at, "bad operand type for abs(): '%s'", jv_type_name(v));
        return 0;
    }
    if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) {
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
    if (jfilter_known(name))
        return jerr(c, at, "filter '%s' is not supported", name);
    return jerr(c, at, "no filter named '%s'", name);
}

/* ---- methods ------------------------------------------------------------------------ */
int jmethod_call(struct jctx *c, const struct jnode *at, struct jval obj, const char *name,
                 const struct jargs *a, struct jval *out)
{
    struct jval x = jv_none(), y;
    if (obj.t == JV_STR) {
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            arg(a, 0, "chars", &x);
            if (x.t != JV_NONE && need_str(c, at, name, x))
                return -1;
            *out = str_strip(obj, x, name[0] != 'r', name[0] != 'l');
            return 0;
        }
        if (!strcmp(name, "split")) {
            struct jval ms = jv_int(-1);
            arg(a, 0, "sep", &x);
            arg(a, 1, "maxsplit", &ms);
            if (ms.t != JV_INT)
                return jerr(c, at, "split(): maxsplit must be an integer");
            return str_split(c, at, obj, x, ms.u.i, out);
        }
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            bool pre = name[0] == 's', hit = false;
            if (a->npos != 1)
                return jerr(c, at, "%s() takes one argument", name);
            x = a->pos[0];
            if (x.t == JV_LIST && x.u.l->tuple) {
                for (size_t i = 0; i < x.u.l->n; i++) {
                    if (need_str(c, at, name, x.u.l->v[i]))
                        return -1;
                    hit = hit || str_affix(obj, x.u.l->v[i], pre);
                }
            } else {
                if (need_str(c, at, name, x))
                    return -1;
                hit = str_affix(obj, x, pre);
            }
            *out = jv_bool(hit);
            return 0;
        }
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
            !strcmp(name, "capitalize"))
            return jstr_case(c, obj, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l'
                                     : name[0] == 't' ? 't' : 'c', out) < 0 ? -1 : 0;
        if (!strcmp(name, "replace")) {
            if (a->npos < 2)
                return jerr(c, at, "replace() needs two arguments");
            struct jval cnt = jv_int(-1);
            arg(a, 2, "count", &cnt);
            if (cnt.t != JV_INT)
                return jerr(c, at, "replace(): count must be an integer");
            return str_replace(c, at, obj, a->pos[0], a->pos[1], cnt.u.i, out);
        }
        if (!strcmp(name, "join")) {
            struct jlist *items;
            struct jbuf b = { 0 };
            if (a->npos != 1 || jv_iterate(c, at, a->pos[0], &items) || jbuf_put(c, &b, "", 0))
                return a->npos != 1 ? jerr(c, at, "join() takes one argument") : -1;
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
        if (!strcmp(name, "find") || !strcmp(name, "count")) {
            if (a->npos != 1 || need_str(c, at, name, a->pos[0]))
                return a->npos != 1 ? jerr(c, at, "%s() takes one argument", name) : -1;
            y = a->pos[0];
            if (name[0] == 'f') {
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
    } else if (obj.t == JV_DICT) {
        if (!strcmp(name, "get")) {
            if (a->npos < 1 || a->npos > 2)
                return jerr(c, at, "get() takes one or two arguments");
            struct jval *v = jdict_get(obj.u.d, a->pos[0]);
            *out = v ? *v : a->npos == 2 ? a->pos[1] : jv_none();
            return 0;
        }
        if (!strcmp(name, "items")) { /* dict_items: a sized view, unlike the filter */
            if (jfilter_apply(c, at, "items", obj, a, out))
                return -1;
            out->u.l->gen = false;
            return 0;
        }
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            struct jlist *l = jlist_new(c, obj.u.d->n);
            if (!l)
                return -1;
            for (size_t i = 0; i < obj.u.d->n; i++)
                l->v[l->n++] = name[0] == 'k' ? obj.u.d->k[i] : obj.u.d->v[i];
            *out = listv(l);
            return 0;
        }
        struct jval *v = jdict_gets(obj.u.d, name);
        if (v && (v->t == JV_MACRO || v->t == JV_FUNC))
            return jerr(c, at, "calling functions stored in dicts is not supported");
    } else if (obj.t == JV_LOOP) {
        if (!strcmp(name, "cycle")) {
            if (a->npos == 0)
                return jerr(c, at, "no items for cycling given");
            *out = a->pos[obj.u.loop->i % a->npos];
            return 0;
        }
    } else if (obj.t == JV_LIST) {
        if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "extend") ||
            !strcmp(name, "insert") || !strcmp(name, "remove") || !strcmp(name, "clear") ||
            !strcmp(name, "sort") || !strcmp(name, "reverse"))
            return jerr(c, at, "access to attribute '%s' of 'list' object is unsafe", name);
    }
    return jerr(c, at, "'%s' object has no attribute '%s'", jv_type_name(obj), name);
}
