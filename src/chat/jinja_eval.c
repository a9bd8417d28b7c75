/* Evaluator of the Jinja2 subset: expressions, statements, scopes, macros.
 *
 * Semantics follow jinja2 3.x in an ImmutableSandboxedEnvironment with the
 * default Undefined: a missing variable or key is undefined (prints as "",
 * iterates as empty, is false), but using it in arithmetic, calling it or
 * taking its attributes is an error.  Work is bounded by c->steps, recursion
 * by c->depth/c->macro_depth, memory by the arena cap. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_filters.h"

#define JMAX_DEPTH 400
#define JMAX_MACRO_DEPTH 48
#define JMAX_RANGE 100000

/* ---- scopes ------------------------------------------------------------------ */
static struct jscope *scope_new(struct jctx *c, struct jscope *parent)
{
    struct jscope *s = jarena_alloc(&c->arena, sizeof(*s));
    if (!s) {
        jerr_pos(c, 0, 0, "template exceeded the memory limit");
        return NULL;
    }
    s->parent = parent;
    return s;
}

static struct jval *scope_find(struct jscope *s, const char *name)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (strcmp(s->names[i], name) == 0)
                return &s->vals[i];
    return NULL;
}

static int scope_set(struct jctx *c, struct jscope *s, const char *name, struct jval v)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        const char **nn = jarena_alloc(&c->arena, nc * sizeof(*nn));
        struct jval *nv = jarena_alloc(&c->arena, nc * sizeof(*nv));
        if (!nn || !nv)
            return jerr_pos(c, 0, 0, "template exceeded the memory limit");
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(*nn));
            memcpy(nv, s->vals, s->n * sizeof(*nv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

int jscope_define(struct jctx *c, struct jscope *s, const char *name, struct jval v)
{
    return scope_set(c, s, name, v);
}

/* Python slice index normalisation. */
static int64_t slice_bound(struct jval v, int64_t n, int64_t step, bool is_start, bool *ok)
{
    int64_t x;
    *ok = true;
    if (v.t == JV_NONE || v.t == JV_UNDEF)
        return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    if (!jv_index(v, &x)) {
        *ok = false;
        return 0;
    }
    if (x < 0) {
        x += n;
        if (x < 0)
            x = step > 0 ? 0 : -1;
    } else if (x >= n) {
        x = step > 0 ? n : n - 1;
    }
    return x;
}

static int do_slice(struct jctx *c, const struct jnode *at, struct jval obj, struct jval lo,
                    struct jval hi, struct jval st, struct jval *out)
{
    int64_t step = 1;
    bool ok1, ok2;
    if (obj.t == JV_UNDEF)
        return jerr_undef(c, at, obj);
    /* jinja2 compiles a slice as a plain Python subscript: errors propagate. */
    if (obj.t == JV_DICT || obj.t == JV_NS)
        return jerr(c, at, "unhashable type: 'slice'");
    if ((obj.t != JV_LIST && obj.t != JV_STR) || (obj.t == JV_LIST && obj.u.l->gen))
        return jerr(c, at, "'%s' object is not subscriptable", jv_type_name(obj));
    if (st.t != JV_NONE && st.t != JV_UNDEF && !jv_index(st, &step))
        return jerr(c, at, "slice indices must be integers or None");
    if (step == 0)
        return jerr(c, at, "slice step cannot be zero");
    int64_t n = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)jutf8_len(obj.u.s.p, obj.u.s.n);
    int64_t a = slice_bound(lo, n, step, true, &ok1), b = slice_bound(hi, n, step, false, &ok2);
    if (!ok1 || !ok2)
        return jerr(c, at, "slice indices must be integers or None");
    if (obj.t == JV_LIST) {
        struct jlist *l = jlist_new(c, 0);
        if (!l)
            return -1;
        l->tuple = obj.u.l->tuple;
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
            if (++c->steps > SP_CHAT_MAX_STEPS)
                return jerr(c, at, "template exceeded the work limit");
            if (jlist_push(c, l, obj.u.l->v[i]))
                return -1;
        }
        out->t = JV_LIST;
        out->u.l = l;
        return 0;
    }
    if (step == 1) {
        if (b <= a) {
            *out = jv_strn("", 0);
            return 0;
        }
        size_t x = jutf8_offset(obj.u.s.p, obj.u.s.n, (size_t)a);
        size_t y = jutf8_offset(obj.u.s.p, obj.u.s.n, (size_t)b);
        *out = jv_strn(obj.u.s.p + x, y - x);
        return 0;
    }
    struct jlist *chars;
    struct jbuf buf = { 0 };
    if (jv_iterate(c, at, obj, &chars) || jbuf_put(c, &buf, "", 0))
        return -1;
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        if (jbuf_put(c, &buf, chars->v[i].u.s.p, chars->v[i].u.s.n))
            return -1;
    *out = jv_strn(buf.p, buf.n);
    return 0;
}

/* ---- expressions --------------------------------------------------------------- */
static int eval(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jval *out);
static int exec_body(struct jctx *c, struct jscope *sc, struct jnode *const *body, size_t nb);

static int eval_args(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jargs *a)
{
    memset(a, 0, sizeof(*a));
    if (n->nargs) {
        if (!(a->pos = jarena_alloc(&c->arena, n->nargs * sizeof(struct jval))))
            return jerr(c, n, "template exceeded the memory limit");
        for (size_t i = 0; i < n->nargs; i++)
            if (eval(c, sc, n->args[i], &a->pos[i]))
                return -1;
        a->npos = n->nargs;
    }
    if (n->nkw) {
        if (!(a->kw = jarena_alloc(&c->arena, n->nkw * sizeof(struct jval))))
            return jerr(c, n, "template exceeded the memory limit");
        for (size_t i = 0; i < n->nkw; i++)
            if (eval(c, sc, n->kwargs[i], &a->kw[i]))
                return -1;
        a->kwn = n->kwnames;
        a->nkw = n->nkw;
    }
    return 0;
}

static int capture_begin(struct jctx *c, struct jbuf **saved, struct jbuf *nb)
{
    memset(nb, 0, sizeof(*nb));
    *saved = c->out;
    c->out = nb;
    return jbuf_put(c, nb, "", 0);
}

static int call_macro(struct jctx *c, struct jscope *sc, const struct jnode *at,
                      struct jmacro *m, const struct jargs *a, struct jval *out)
{
    const struct jnode *def = m->def;
    if (a->npos > def->ntargets)
        return jerr(c, at, "macro '%s' takes not more than %zu argument(s)", def->name,
                    def->ntargets);
    if (c->macro_depth >= JMAX_MACRO_DEPTH)
        return jerr(c, at, "macro recursion too deep");
    struct jscope *ms = scope_new(c, m->closure);
    if (!ms)
        return -1;
    for (size_t k = 0; k < a->nkw; k++) {
        bool found = false;
        for (size_t i = 0; i < def->ntargets; i++)
            if (!strcmp(def->targets[i], a->kwn[k]))
                found = true;
        if (!found)
            return jerr(c, at, "macro '%s' got an unexpected keyword argument '%s'", def->name,
                        a->kwn[k]);
    }
    c->macro_depth++;
    int rc = -1;
    for (size_t i = 0; i < def->ntargets; i++) {
        struct jval v = jv_undef(def->targets[i]);
        bool have = false;
        if (i < a->npos) {
            v = a->pos[i];
            have = true;
        }
        for (size_t k = 0; k < a->nkw; k++)
            if (!strcmp(def->targets[i], a->kwn[k])) {
                if (have)
                    { jerr(c, at, "macro '%s' got multiple values for argument '%s'", def->name, a->kwn[k]); goto out_depth; }
                v = a->kw[k];
                have = true;
            }
        if (!have && def->args[i] && eval(c, ms, def->args[i], &v))
            goto out_depth;
        if (scope_set(c, ms, def->targets[i], v))
            goto out_depth;
    }
    struct jbuf *saved, buf;
    if (capture_begin(c, &saved, &buf))
        goto out_depth;
    rc = exec_body(c, ms, def->body, def->nbody);
    c->out = saved;
    c->loop_ctl = 0;
    if (rc == 0)
        *out = jv_strn(buf.p, buf.n);
out_depth:
    c->macro_depth--;
    (void)sc;
    return rc;
}

static int call_func(struct jctx *c, const struct jnode *at, int fn, const struct jargs *a,
                     struct jval *out)
{
    switch (fn) {
    case JF_RAISE: {
        struct jval msg = a->npos ? a->pos[0] : jv_strn("", 0);
        struct jval s;
        if (jv_stringify(c, msg, &s))
            return -1;
        return jerr(c, at, "raise_exception: %.*s", (int)(s.u.s.n > 150 ? 150 : s.u.s.n), s.u.s.p);
    }
    case JF_STRFTIME: {
        if (a->npos != 1 || a->pos[0].t != JV_STR || a->pos[0].u.s.n > 200)
            return jerr(c, at, "strftime_now() takes one format string");
        char fmt[256], buf[512];
        memcpy(fmt, a->pos[0].u.s.p, a->pos[0].u.s.n);
        fmt[a->pos[0].u.s.n] = 0;
        struct tm tmv;
        time_t t = c->now_unix >= 0 ? (time_t)c->now_unix : time(NULL);
        if (c->now_unix >= 0 ? !gmtime_r(&t, &tmv) : !localtime_r(&t, &tmv))
            return jerr(c, at, "strftime_now(): bad time");
        size_t len = strftime(buf, sizeof(buf), fmt, &tmv);
        return jv_str_dup(c, buf, len, out);
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        struct jdict *d = jdict_new(c, 0);
        if (!d)
            return -1;
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].t != JV_DICT)
                return jerr(c, at, "namespace()/dict() positional argument must be a dict");
            for (size_t k = 0; k < a->pos[i].u.d->n; k++)
                if (jdict_set(c, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k]))
                    return -1;
        }
        for (size_t k = 0; k < a->nkw; k++)
            if (jdict_set(c, d, jv_strn(a->kwn[k], strlen(a->kwn[k])), a->kw[k]))
                return -1;
        out->t = fn == JF_NAMESPACE ? JV_NS : JV_DICT;
        out->u.d = d;
        return 0;
    }
    case JF_RANGE: {
        int64_t v[3] = { 0, 0, 1 };
        if (a->npos < 1 || a->npos > 3 || a->nkw)
            return jerr(c, at, "range() takes 1 to 3 integer arguments");
        for (size_t i = 0; i < a->npos; i++)
            if (!jv_index(a->pos[i], &v[a->npos == 1 ? 1 : i]))
                return jerr(c, at, "range() arguments must be integers");
        if (v[2] == 0)
            return jerr(c, at, "range() arg 3 must not be zero");
        double cnt = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
        if (cnt > JMAX_RANGE)
            return jerr(c, at, "range too big (more than %d items)", JMAX_RANGE);
        struct jlist *l = jlist_new(c, cnt > 0 ? (size_t)cnt : 0);
        if (!l)
            return -1;
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2])
            l->v[l->n++] = jv_int(x);
        out->t = JV_LIST;
        out->u.l = l;
        return 0;
    }
    }
    return jerr(c, at, "unknown function");
}

static int eval_call(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jval *out)
{
    struct jargs a;
    struct jval callee;
    if (n->a->kind == JN_GETATTR) {
        struct jval obj;
        if (eval(c, sc, n->a->a, &obj))
            return -1;
        if (obj.t == JV_STR || obj.t == JV_DICT || obj.t == JV_LIST || obj.t == JV_LOOP) {
            if (eval_args(c, sc, n, &a))
                return -1;
            return jmethod_call(c, n, obj, n->a->name, &a, out);
        }
        if (jv_getattr(c, n->a, obj, n->a->name, &callee))
            return -1;
    } else if (eval(c, sc, n->a, &callee)) {
        return -1;
    }
    if (eval_args(c, sc, n, &a))
        return -1;
    switch (callee.t) {
    case JV_MACRO: return call_macro(c, sc, n, callee.u.m, &a, out);
    case JV_FUNC: return call_func(c, n, callee.u.fn, &a, out);
    case JV_UNDEF: return jerr_undef(c, n, callee);
    default: return jerr(c, n, "'%s' object is not callable", jv_type_name(callee));
    }
}

static int str_concat(struct jctx *c, const char *p, size_t n, const char *q, size_t m,
                      struct jval *out)
{
    if (n + m > SP_CHAT_MAX_OUTPUT)
        return jerr_pos(c, 0, 0, "string longer than the %u-byte limit", SP_CHAT_MAX_OUTPUT);
    char *d = jarena_alloc(&c->arena, n + m + 1);
    if (!d)
        return jerr_pos(c, 0, 0, "template exceeded the memory limit");
    if (n)
        memcpy(d, p, n);
    if (m)
        memcpy(d + n, q, m);
    *out = jv_strn(d, n + m);
    return 0;
}

static bool is_num(struct jval v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(struct jval v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b; }
static bool is_int(struct jval v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t inum(struct jval v) { return v.t == JV_INT ? v.u.i : v.u.b; }

static const char *op_name(int op)
{
    static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=",
                                         "<", "<=", ">", ">=", "in", "not in", "-", "+" };
    return names[op];
}

static int repeat(struct jctx *c, const struct jnode *at, struct jval seq, int64_t times,
                  struct jval *out)
{
    if (times < 0)
        times = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > SP_CHAT_MAX_OUTPUT / seq.u.s.n)
            return jerr(c, at, "string longer than the %u-byte limit", SP_CHAT_MAX_OUTPUT);
        struct jbuf b = { 0 };
        if (jbuf_put(c, &b, "", 0))
            return -1;
        for (int64_t i = 0; i < times; i++)
            if (jbuf_put(c, &b, seq.u.s.p, seq.u.s.n))
                return -1;
        *out = jv_strn(b.p, b.n);
        return 0;
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (SP_CHAT_MAX_OUTPUT / 16) / n)
        return jerr(c, at, "list too long");
    struct jlist *l = jlist_new(c, n * (size_t)times);
    if (!l)
        return -1;
    l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++)
            l->v[l->n++] = seq.u.l->v[k];
    out->t = JV_LIST;
    out->u.l = l;
    return 0;
}

static int binary(struct jctx *c, const struct jnode *at, int op, struct jval a, struct jval b,
                  struct jval *out)
{
    if (op == JO_CONCAT) {
        struct jval x, y;
        if (jv_stringify(c, a, &x) || jv_stringify(c, b, &y))
            return -1;
        return str_concat(c, x.u.s.p, x.u.s.n, y.u.s.p, y.u.s.n, out);
    }
    if (a.t == JV_UNDEF)
        return jerr_undef(c, at, a);
    if (b.t == JV_UNDEF)
        return jerr_undef(c, at, b);
    if (op == JO_ADD && a.t == JV_STR && b.t == JV_STR) {
        if (a.markup != b.markup) { /* Markup + str: the str is HTML-escaped, the sum is Markup */
            struct jargs none = {0};
            struct jval *plain = a.markup ? &b : &a;
            if (jfilter_apply(c, at, "escape", *plain, &none, plain))
                return -1;
        }
        bool markup = a.markup || b.markup;
        if (str_concat(c, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, out))
            return -1;
        out->markup = markup;
        return 0;
    }
    if (op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple &&
        !a.u.l->gen && !b.u.l->gen) {
        struct jlist *l = jlist_new(c, a.u.l->n + b.u.l->n);
        if (!l)
            return -1;
        l->tuple = a.u.l->tuple;
        if (a.u.l->n) /* an empty list may have no array (memcpy's NULL is undefined) */
            memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(struct jval));
        if (b.u.l->n)
            memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(struct jval));
        l->n = a.u.l->n + b.u.l->n;
        out->t = JV_LIST;
        out->u.l = l;
        return 0;
    }
    if (op == JO_MUL && (a.t == JV_STR || (a.t == JV_LIST && !a.u.l->gen)) && is_int(b))
        return repeat(c, at, a, inum(b), out);
    if (op == JO_MUL && (b.t == JV_STR || (b.t == JV_LIST && !b.u.l->gen)) && is_int(a))
        return repeat(c, at, b, inum(a), out);
    if (op == JO_MOD && a.t == JV_STR)
        return jerr(c, at, "printf-style '%%' string formatting is not supported");
    if (!is_num(a) || !is_num(b))
        return jerr(c, at, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op),
                    jv_type_name(a), jv_type_name(b));
    if (is_int(a) && is_int(b) && op != JO_DIV) {
        int64_t x = inum(a), y = inum(b), r = 0;
        bool ovf = false;
        switch (op) {
        case JO_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
        case JO_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
        case JO_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
        case JO_FLOORDIV:
        case JO_MOD:
            if (y == 0)
                return jerr(c, at, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                ovf = true;
                break;
            }
            r = op == JO_FLOORDIV ? x / y : x % y;
            if (op == JO_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0)))
                r--;
            if (op == JO_MOD && r != 0 && ((r < 0) != (y < 0)))
                r += y;
            break;
        case JO_POW:
            if (y < 0) {
                if (x == 0)
                    return jerr(c, at, "0.0 cannot be raised to a negative power");
                *out = jv_float(pow((double)x, (double)y));
                return 0;
            }
            r = 1;
            for (int64_t i = 0; i < y && !ovf; i++) {
                ovf = __builtin_mul_overflow(r, x, &r);
                if (r == 0 || r == 1)
                    break;
                if (++c->steps > SP_CHAT_MAX_STEPS)
                    return jerr(c, at, "template exceeded the work limit");
            }
            if (!ovf && r == 1 && x == -1)
                r = (y % 2) ? -1 : 1;
            break;
        }
        if (ovf)
            return jerr(c, at, "integer overflow");
        *out = jv_int(r);
        return 0;
    }
    double x = num(a), y = num(b), r = 0;
    switch (op) {
    case JO_ADD: r = x + y; break;
    case JO_SUB: r = x - y; break;
    case JO_MUL: r = x * y; break;
    case JO_DIV:
        if (y == 0)
            return jerr(c, at, "division by zero");
        r = x / y;
        break;
    case JO_FLOORDIV:
    case JO_MOD:
        if (y == 0)
            return jerr(c, at, "float division or modulo by zero");
        r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0)))
            r += y;
        if (op == JO_FLOORDIV)
            r = floor(x / y);
        break;
    case JO_POW:
        if (x == 0 && y < 0)
            return jerr(c, at, "0.0 cannot be raised to a negative power");
        r = pow(x, y);
        break;
    }
    *out = jv_float(r);
    return 0;
}

static int compare(struct jctx *c, const struct jnode *at, int op, struct jval a, struct jval b,
                   bool *out)
{
    if (op == JO_EQ || op == JO_NE) {
        *out = jv_equal(a, b) == (op == JO_EQ);
        return 0;
    }
    if (op == JO_IN || op == JO_NOTIN) {
        bool found = false;
        if (b.t == JV_STR) {
            if (a.t != JV_STR)
                return jerr(c, at, "'in <string>' requires string as left operand, not %s",
                            jv_type_name(a));
            found = a.u.s.n == 0 || memmem(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL;
        } else if (b.t == JV_LIST) {
            if (b.u.l->poison)
                return jerr(c, at, "%s", b.u.l->poison);
            for (size_t i = 0; i < b.u.l->n && !found; i++)
                found = jv_equal(a, b.u.l->v[i]);
        } else if (b.t == JV_DICT || b.t == JV_NS) {
            found = jdict_get(b.u.d, a) != NULL;
        } else if (b.t != JV_UNDEF) {
            return jerr(c, at, "argument of type '%s' is not iterable", jv_type_name(b));
        }
        *out = found == (op == JO_IN);
        return 0;
    }
    if (a.t == JV_UNDEF)
        return jerr_undef(c, at, a);
    if (b.t == JV_UNDEF)
        return jerr_undef(c, at, b);
    int r = jv_compare(a, b);
    if (r == -2)
        return jerr(c, at, "'%s' not supported between instances of '%s' and '%s'",
                    op_name(op), jv_type_name(a), jv_type_name(b));
    if (r == 2) {
        *out = false;
        return 0;
    }
    switch (op) {
    case JO_LT: *out = r < 0; break;
    case JO_LE: *out = r <= 0; break;
    case JO_GT: *out = r > 0; break;
    default: *out = r >= 0; break;
    }
    return 0;
}

static int eval_inner(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jval *out)
{
    struct jval a, b, d;
    struct jargs args;
    bool t;
    switch (n->kind) {
    case JN_LIT:
        *out = n->lit;
        return 0;
    case JN_NAME: {
        struct jval *v = scope_find(sc, n->name);
        *out = v ? *v : jv_undef(n->name);
        return 0;
    }
    case JN_LIST:
    case JN_TUPLE: {
        struct jlist *l = jlist_new(c, n->nargs);
        if (!l)
            return -1;
        l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->nargs; i++)
            if (eval(c, sc, n->args[i], &l->v[l->n++]))
                return -1;
        out->t = JV_LIST;
        out->u.l = l;
        return 0;
    }
    case JN_DICT: {
        struct jdict *dd = jdict_new(c, n->nargs);
        if (!dd)
            return -1;
        for (size_t i = 0; i < n->nargs; i++) {
            if (eval(c, sc, n->args[i], &a) || eval(c, sc, n->body[i], &b))
                return -1;
            if (a.t == JV_LIST && !a.u.l->tuple)
                return jerr(c, n->args[i], "unhashable type: 'list'");
            if (a.t == JV_DICT || a.t == JV_NS)
                return jerr(c, n->args[i], "unhashable type: 'dict'");
            if (jdict_set(c, dd, a, b))
                return -1;
        }
        out->t = JV_DICT;
        out->u.d = dd;
        return 0;
    }
    case JN_GETATTR:
        if (eval(c, sc, n->a, &a))
            return -1;
        return jv_getattr(c, n, a, n->name, out);
    case JN_GETITEM:
        if (eval(c, sc, n->a, &a) || eval(c, sc, n->b, &b))
            return -1;
        return jv_getitem(c, n, a, b, out);
    case JN_SLICE: {
        struct jval lo = jv_none(), hi = jv_none(), st = jv_none();
        if (eval(c, sc, n->a, &a) || (n->b && eval(c, sc, n->b, &lo)) ||
            (n->c && eval(c, sc, n->c, &hi)) || (n->d && eval(c, sc, n->d, &st)))
            return -1;
        return do_slice(c, n, a, lo, hi, st, out);
    }
    case JN_CALL:
        return eval_call(c, sc, n, out);
    case JN_FILTER:
        if (eval(c, sc, n->a, &a) || eval_args(c, sc, n, &args))
            return -1;
        return jfilter_apply(c, n, n->name, a, &args, out);
    case JN_TEST:
        if (eval(c, sc, n->a, &a) || eval_args(c, sc, n, &args) ||
            jtest_apply(c, n, n->name, a, &args, &t))
            return -1;
        *out = jv_bool(t != (n->op != 0));
        return 0;
    case JN_UNARY:
        if (eval(c, sc, n->a, &a))
            return -1;
        if (a.t == JV_UNDEF)
            return jerr_undef(c, n, a);
        if (!is_num(a))
            return jerr(c, n, "bad operand type for unary %s: '%s'", op_name(n->op), jv_type_name(a));
        if (n->op == JO_POS)
            *out = a.t == JV_BOOL ? jv_int(a.u.b) : a;
        else if (a.t == JV_FLOAT)
            *out = jv_float(-a.u.f);
        else if (inum(a) == INT64_MIN)
            return jerr(c, n, "integer overflow");
        else
            *out = jv_int(-inum(a));
        return 0;
    case JN_BINARY:
        if (eval(c, sc, n->a, &a) || eval(c, sc, n->b, &b))
            return -1;
        return binary(c, n, n->op, a, b, out);
    case JN_COMPARE:
        if (eval(c, sc, n->a, &a) || eval(c, sc, n->b, &b) || compare(c, n, n->op, a, b, &t))
            return -1;
        *out = jv_bool(t);
        return 0;
    case JN_AND:
    case JN_OR:
        if (eval(c, sc, n->a, &a))
            return -1;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return eval(c, sc, n->b, out);
    case JN_NOT:
        if (eval(c, sc, n->a, &a))
            return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case JN_COND:
        if (eval(c, sc, n->b, &d))
            return -1;
        if (jv_truthy(d))
            return eval(c, sc, n->a, out);
        if (n->c)
            return eval(c, sc, n->c, out);
        *out = jv_undef(NULL);
        return 0;
    default:
        return jerr(c, n, "statement used as an expression");
    }
}

static int eval(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jval *out)
{
    if (c->failed)
        return -1;
    if (++c->steps > SP_CHAT_MAX_STEPS)
        return jerr(c, n, "template exceeded the work limit");
    if (++c->depth > JMAX_DEPTH) {
        c->depth--;
        return jerr(c, n, "template nested too deeply");
    }
    int rc = eval_inner(c, sc, n, out);
    c->depth--;
    return rc;
}

/* ---- statements ------------------------------------------------------------------ */
static int assign(struct jctx *c, struct jscope *sc, const struct jnode *n, const char **targets,
                  size_t nt, struct jval v)
{
    if (nt == 1)
        return scope_set(c, sc, targets[0], v);
    struct jlist *l;
    if (v.t == JV_STR || v.t == JV_DICT) {
        if (jv_iterate(c, n, v, &l))
            return -1;
    } else if (v.t == JV_LIST) {
        l = v.u.l;
    } else {
        return jerr(c, n, "cannot unpack non-iterable %s object", jv_type_name(v));
    }
    if (l->n != nt)
        return jerr(c, n, "cannot unpack %zu values into %zu names", l->n, nt);
    for (size_t i = 0; i < nt; i++)
        if (scope_set(c, sc, targets[i], l->v[i]))
            return -1;
    return 0;
}

static int apply_filters(struct jctx *c, struct jscope *sc, const struct jnode *n, struct jval *v)
{
    for (size_t i = 0; i < n->nargs; i++) {
        struct jargs a;
        if (eval_args(c, sc, n->args[i], &a) ||
            jfilter_apply(c, n->args[i], n->args[i]->name, *v, &a, v))
            return -1;
    }
    return 0;
}

static int exec_for(struct jctx *c, struct jscope *sc, const struct jnode *n)
{
    struct jval seqv;
    struct jlist *items;
    if (eval(c, sc, n->a, &seqv))
        return -1;
    if (seqv.t == JV_NONE || !(seqv.t == JV_LIST || seqv.t == JV_DICT || seqv.t == JV_STR ||
                               seqv.t == JV_UNDEF))
        return jerr(c, n->a, "'%s' object is not iterable", jv_type_name(seqv));
    if (jv_iterate(c, n, seqv, &items))
        return -1;
    struct jscope *ls = scope_new(c, sc);
    if (!ls)
        return -1;
    if (n->b) { /* `for x in xs if cond`: filter first, loop.length counts survivors */
        struct jlist *kept = jlist_new(c, 0);
        if (!kept)
            return -1;
        for (size_t i = 0; i < items->n; i++) {
            struct jval cond;
            if (assign(c, ls, n, n->targets, n->ntargets, items->v[i]) || eval(c, ls, n->b, &cond))
                return -1;
            if (jv_truthy(cond) && jlist_push(c, kept, items->v[i]))
                return -1;
        }
        items = kept;
    }
    if (items->n == 0)
        return exec_body(c, sc, n->alt, n->nalt);
    struct jloop *lp = jarena_alloc(&c->arena, sizeof(*lp));
    if (!lp)
        return jerr(c, n, "template exceeded the memory limit");
    lp->items = items;
    struct jval loopv = { .t = JV_LOOP };
    loopv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        lp->i = i;
        if (++c->steps > SP_CHAT_MAX_STEPS)
            return jerr(c, n, "template exceeded the work limit");
        if (scope_set(c, ls, "loop", loopv) || assign(c, ls, n, n->targets, n->ntargets, items->v[i]))
            return -1;
        if (exec_body(c, ls, n->body, n->nbody))
            return -1;
        if (c->loop_ctl == 1) {
            c->loop_ctl = 0;
            break;
        }
        c->loop_ctl = 0;
    }
    return 0;
}

static int exec_stmt(struct jctx *c, struct jscope *sc, const struct jnode *n)
{
    struct jval v;
    switch (n->kind) {
    case JN_TEXT:
        return jbuf_put(c, c->out, n->lit.u.s.p, n->lit.u.s.n);
    case JN_OUTPUT:
        if (eval(c, sc, n->a, &v))
            return -1;
        return jv_to_str(c, v, c->out);
    case JN_IF:
        if (eval(c, sc, n->a, &v))
            return -1;
        if (jv_truthy(v))
            return exec_body(c, sc, n->body, n->nbody);
        return exec_body(c, sc, n->alt, n->nalt);
    case JN_FOR:
        return exec_for(c, sc, n);
    case JN_SET:
        if (eval(c, sc, n->b, &v))
            return -1;
        if (n->name) {
            struct jval *obj = scope_find(sc, n->targets[0]);
            if (!obj || obj->t != JV_NS)
                return jerr(c, n, "can only set attributes on namespace objects");
            return jdict_set(c, obj->u.d, jv_strn(n->name, strlen(n->name)), v);
        }
        return assign(c, sc, n, n->targets, n->ntargets, v);
    case JN_SETBLOCK:
    case JN_FILTERBLOCK: {
        struct jbuf *saved, buf;
        if (capture_begin(c, &saved, &buf))
            return -1;
        int rc = exec_body(c, sc, n->body, n->nbody);
        c->out = saved;
        if (rc)
            return -1;
        v = jv_strn(buf.p, buf.n);
        if (apply_filters(c, sc, n, &v))
            return -1;
        if (n->kind == JN_SETBLOCK)
            return scope_set(c, sc, n->targets[0], v);
        return jv_to_str(c, v, c->out);
    }
    case JN_MACRO: {
        struct jmacro *m = jarena_alloc(&c->arena, sizeof(*m));
        if (!m)
            return jerr(c, n, "template exceeded the memory limit");
        m->def = n;
        m->closure = sc;
        v.t = JV_MACRO;
        v.u.m = m;
        return scope_set(c, sc, n->name, v);
    }
    case JN_BREAK:
        c->loop_ctl = 1;
        return 0;
    case JN_CONTINUE:
        c->loop_ctl = 2;
        return 0;
    default:
        return jerr(c, n, "expression used as a statement");
    }
}

static int exec_body(struct jctx *c, struct jscope *sc, struct jnode *const *body, size_t nb)
{
    if (++c->depth > JMAX_DEPTH) {
        c->depth--;
        return jerr_pos(c, 0, 0, "template nested too deeply");
    }
    int rc = 0;
    for (size_t i = 0; i < nb && !c->loop_ctl; i++) {
        if (++c->steps > SP_CHAT_MAX_STEPS) {
            rc = jerr(c, body[i], "template exceeded the work limit");
            break;
        }
        if ((rc = exec_stmt(c, sc, body[i])))
            break;
    }
    c->depth--;
    return rc;
}

int jexec_root(struct jctx *c, struct jnode *root)
{
    return exec_body(c, c->top, root->body, root->nbody);
}
