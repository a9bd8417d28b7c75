/* Values of the Jinja2 subset: arena, errors, constructors, Python-compatible
 * truthiness, equality, ordering, iteration and item/attribute access,
 * str()/repr() and json.dumps() output.  The bottom layer of the
 * interpreter: it calls nothing above it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja.h"

#define JARENA_BLOCK (64u << 10)

struct jarena_block {
    struct jarena_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *jarena_alloc(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (n > SP_CHAT_MAX_MEMORY || a->used_total + n > SP_CHAT_MAX_MEMORY)
        return NULL;
    struct jarena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JARENA_BLOCK ? n : JARENA_BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (!b) {
            a->nomem = true;
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        if (a->head && n > JARENA_BLOCK) {
            /* Keep bumping the current block: put the big one behind it. */
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(struct jarena *a)
{
    struct jarena_block *b = a->head;
    while (b) {
        struct jarena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

/* ---- errors ------------------------------------------------------------------ */
int jerr_pos(struct jctx *c, int line, int col, const char *fmt, ...)
{
    if (c->failed)
        return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(c->err, sizeof(c->err), "chat template %d:%d: %s", line, col, msg);
    else
        snprintf(c->err, sizeof(c->err), "chat template: %s", msg);
    c->failed = true;
    return -1;
}

int jerr(struct jctx *c, const struct jnode *at, const char *fmt, ...)
{
    if (c->failed)
        return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return jerr_pos(c, at ? at->line : 0, at ? at->col : 0, "%s", msg);
}

/* ---- constructors ---------------------------------------------------------- */
struct jval jv_undef(const char *name) { struct jval v = { .t = JV_UNDEF, .uname = name }; return v; }
struct jval jv_none(void) { struct jval v = { .t = JV_NONE }; return v; }
struct jval jv_bool(bool b) { struct jval v = { .t = JV_BOOL, .u.b = b }; return v; }
struct jval jv_int(int64_t i) { struct jval v = { .t = JV_INT, .u.i = i }; return v; }
struct jval jv_float(double f) { struct jval v = { .t = JV_FLOAT, .u.f = f }; return v; }

struct jval jv_strn(const char *p, size_t n)
{
    struct jval v = { .t = JV_STR };
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

int jv_str_dup(struct jctx *c, const char *p, size_t n, struct jval *out)
{
    if (n > SP_CHAT_MAX_OUTPUT)
        return jerr_pos(c, 0, 0, "string longer than the %u-byte limit", SP_CHAT_MAX_OUTPUT);
    char *d = jarena_alloc(&c->arena, n + 1);
    if (!d)
        return jerr_pos(c, 0, 0, "template exceeded the memory limit");
    if (n)
        memcpy(d, p, n);
    *out = jv_strn(d, n);
    return 0;
}

struct jlist *jlist_new(struct jctx *c, size_t cap)
{
    struct jlist *l = jarena_alloc(&c->arena, sizeof(*l));
    if (!l || (cap && !(l->v = jarena_alloc(&c->arena, cap * sizeof(struct jval))))) {
        jerr_pos(c, 0, 0, "template exceeded the memory limit");
        return NULL;
    }
    l->cap = cap;
    return l;
}

int jlist_push(struct jctx *c, struct jlist *l, struct jval v)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        struct jval *nv = jarena_alloc(&c->arena, nc * sizeof(*nv));
        if (!nv)
            return jerr_pos(c, 0, 0, "template exceeded the memory limit");
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
    return 0;
}

struct jdict *jdict_new(struct jctx *c, size_t cap)
{
    struct jdict *d = jarena_alloc(&c->arena, sizeof(*d));
    if (!d) {
        jerr_pos(c, 0, 0, "template exceeded the memory limit");
        return NULL;
    }
    (void)cap;
    return d;
}

struct jval *jdict_get(struct jdict *d, struct jval k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

struct jval *jdict_gets(struct jdict *d, const char *key)
{
    return jdict_get(d, jv_strn(key, strlen(key)));
}

int jdict_set(struct jctx *c, struct jdict *d, struct jval k, struct jval v)
{
    struct jval *slot = jdict_get(d, k);
    if (slot) {
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        struct jval *nk = jarena_alloc(&c->arena, nc * sizeof(*nk));
        struct jval *nv = jarena_alloc(&c->arena, nc * sizeof(*nv));
        if (!nk || !nv)
            return jerr_pos(c, 0, 0, "template exceeded the memory limit");
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(*nk));
            memcpy(nv, d->v, d->n * sizeof(*nv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

/* ---- semantics ------------------------------------------------------------- */
bool jv_truthy(struct jval v)
{
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->gen || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool jv_is_num(struct jval v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double jv_num(struct jval v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t jv_inum(struct jval v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

bool jv_equal(struct jval a, struct jval b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return jv_inum(a) == jv_inum(b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->gen || b.u.l->gen)
            return a.u.l == b.u.l;
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jval *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o))
                return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jv_compare(struct jval a, struct jval b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = jv_inum(a), y = jv_inum(b);
            return x < y ? -1 : x > y;
        }
        double x = jv_num(a), y = jv_num(b);
        if (isnan(x) || isnan(y))
            return 2; /* every comparison false */
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, n);
        if (r)
            return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && !a.u.l->gen &&
        !b.u.l->gen) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    return -2;
}

const char *jv_type_name(struct jval v)
{
    static const char *const names[] = { "Undefined", "NoneType", "bool", "int", "float", "str",
                                         "list", "dict", "Namespace", "Macro", "function", "LoopContext" };
    if (v.t == JV_LIST && v.u.l->tuple)
        return "tuple";
    if (v.t == JV_LIST && v.u.l->gen)
        return "generator";
    return names[v.t];
}

/* ---- generic object access --------------------------------------------------- */
int jerr_undef(struct jctx *c, const struct jnode *at, struct jval v)
{
    if (v.uname)
        return jerr(c, at, "'%s' is undefined", v.uname);
    return jerr(c, at, "undefined value used");
}

int jv_iterate(struct jctx *c, const struct jnode *at, struct jval v, struct jlist **out)
{
    struct jlist *l;
    switch (v.t) {
    case JV_LIST:
        if (v.u.l->poison)
            return jerr(c, at, "%s", v.u.l->poison);
        *out = v.u.l;
        return 0;
    case JV_UNDEF:
        return (*out = jlist_new(c, 0)) ? 0 : -1;
    case JV_DICT:
        if (!(l = jlist_new(c, v.u.d->n)))
            return -1;
        for (size_t i = 0; i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        *out = l;
        return 0;
    case JV_STR: {
        size_t cps = jutf8_len(v.u.s.p, v.u.s.n);
        if (!(l = jlist_new(c, cps)))
            return -1;
        size_t i = 0;
        while (i < v.u.s.n) {
            size_t j = i + 1;
            while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xC0) == 0x80)
                j++;
            l->v[l->n++] = jv_strn(v.u.s.p + i, j - i);
            i = j;
        }
        *out = l;
        return 0;
    }
    default:
        return jerr(c, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* loop.NAME of a for loop; anything else is undefined */
static int loop_attr(struct jctx *c, struct jloop *lp, const char *name, struct jval *out)
{
    enum { INDEX, INDEX0, REVINDEX, REVINDEX0, FIRST, LAST, LENGTH, DEPTH, DEPTH0, PREVITEM, NEXTITEM, N_ATTR };
    static const char *const attrs[N_ATTR] = {
        [INDEX] = "index", [INDEX0] = "index0", [REVINDEX] = "revindex", [REVINDEX0] = "revindex0",
        [FIRST] = "first", [LAST] = "last", [LENGTH] = "length", [DEPTH] = "depth", [DEPTH0] = "depth0",
        [PREVITEM] = "previtem", [NEXTITEM] = "nextitem",
    };
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->i;
    int k = 0;
    while (k < N_ATTR && strcmp(attrs[k], name))
        k++;
    switch (k) {
    case INDEX: *out = jv_int(i + 1); break;
    case INDEX0: *out = jv_int(i); break;
    case REVINDEX: *out = jv_int(n - i); break;
    case REVINDEX0: *out = jv_int(n - i - 1); break;
    case FIRST: *out = jv_bool(i == 0); break;
    case LAST: *out = jv_bool(i == n - 1); break;
    case LENGTH: *out = jv_int(n); break;
    case DEPTH: *out = jv_int(1); break;
    case DEPTH0: *out = jv_int(0); break;
    case PREVITEM: *out = i > 0 ? lp->items->v[i - 1] : jv_undef("previtem"); break;
    case NEXTITEM: *out = i + 1 < n ? lp->items->v[i + 1] : jv_undef("nextitem"); break;
    default: *out = jv_undef(name); break;
    }
    (void)c;
    return 0;
}

int jv_getattr(struct jctx *c, const struct jnode *at, struct jval obj, const char *name,
               struct jval *out)
{
    switch (obj.t) {
    case JV_UNDEF:
        return jerr_undef(c, at, obj);
    case JV_DICT:
    case JV_NS: {
        struct jval *v = jdict_gets(obj.u.d, name);
        *out = v ? *v : jv_undef(name);
        return 0;
    }
    case JV_LOOP:
        return loop_attr(c, obj.u.loop, name, out);
    default:
        *out = jv_undef(name);
        return 0;
    }
}

bool jv_index(struct jval k, int64_t *i)
{
    if (k.t == JV_INT) { *i = k.u.i; return true; }
    if (k.t == JV_BOOL) { *i = k.u.b; return true; }
    return false;
}

int jv_getitem(struct jctx *c, const struct jnode *at, struct jval obj, struct jval key,
               struct jval *out)
{
    int64_t i;
    switch (obj.t) {
    case JV_UNDEF:
        return jerr_undef(c, at, obj);
    case JV_DICT:
    case JV_NS: {
        struct jval *v = jdict_get(obj.u.d, key);
        *out = v ? *v : jv_undef(NULL);
        return 0;
    }
    case JV_LIST:
        if (obj.u.l->gen || !jv_index(key, &i)) {
            *out = jv_undef(NULL);
            return 0;
        }
        if (i < 0)
            i += (int64_t)obj.u.l->n;
        *out = (i >= 0 && (uint64_t)i < obj.u.l->n) ? obj.u.l->v[i] : jv_undef(NULL);
        return 0;
    case JV_STR: {
        if (!jv_index(key, &i)) {
            *out = jv_undef(NULL);
            return 0;
        }
        int64_t n = (int64_t)jutf8_len(obj.u.s.p, obj.u.s.n);
        if (i < 0)
            i += n;
        if (i < 0 || i >= n) {
            *out = jv_undef(NULL);
            return 0;
        }
        size_t a = jutf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
        size_t b = jutf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
        *out = jv_strn(obj.u.s.p + a, b - a);
        return 0;
    }
    case JV_LOOP:
        if (key.t == JV_STR) {
            char nm[32];
            if (key.u.s.n >= sizeof(nm)) {
                *out = jv_undef(NULL);
                return 0;
            }
            memcpy(nm, key.u.s.p, key.u.s.n);
            nm[key.u.s.n] = 0;
            return loop_attr(c, obj.u.loop, nm, out);
        }
        *out = jv_undef(NULL);
        return 0;
    default:
        *out = jv_undef(NULL);
        return 0;
    }
}

/* ---- output buffers ---------------------------------------------------------- */
int jbuf_put(struct jctx *c, struct jbuf *b, const char *p, size_t n)
{
    if (n > SP_CHAT_MAX_OUTPUT || b->n + n > SP_CHAT_MAX_OUTPUT)
        return jerr_pos(c, 0, 0, "output longer than the %u-byte limit", SP_CHAT_MAX_OUTPUT);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = jarena_alloc(&c->arena, nc);
        if (!np)
            return jerr_pos(c, 0, 0, "template exceeded the memory limit");
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jbuf_puts(struct jctx *c, struct jbuf *b, const char *s) { return jbuf_put(c, b, s, strlen(s)); }

/* Python's float repr: shortest round-tripping digits; exponent form when
 * the decimal exponent is < -4 or >= 16. */
void jfloat_repr(double f, char *buf, size_t cap)
{
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof(digits), "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f)
            break;
    }
    /* digits: [-]D[.DDD]e[+-]XX */
    char mant[32];
    size_t m = 0;
    const char *p = digits;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            mant[m++] = *p;
    mant[m] = 0;
    int exp = atoi(p + 1);
    while (m > 1 && mant[m - 1] == '0')
        mant[--m] = 0;
    char *o = buf;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg)
        PUT("-");
    if (exp < -4 || exp >= 16) {
        PUT("%c", mant[0]);
        if (m > 1)
            PUT(".%s", mant + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT("0.");
        for (int i = 0; i < -exp - 1; i++)
            PUT("0");
        PUT("%s", mant);
    } else {
        for (int i = 0; i <= exp; i++)
            PUT("%c", (size_t)i < m ? mant[i] : '0');
        PUT(".");
        if ((size_t)exp + 1 < m)
            PUT("%s", mant + exp + 1);
        else
            PUT("0");
    }
#undef PUT
}

static int jv_repr_str(struct jctx *c, const char *p, size_t n, struct jbuf *b)
{
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (jbuf_put(c, b, &q, 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[8];
        const char *e = NULL;
        if (ch == '\\') e = "\\\\";
        else if (ch == (unsigned char)q) e = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') e = "\\n";
        else if (ch == '\r') e = "\\r";
        else if (ch == '\t') e = "\\t";
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", ch);
            e = esc;
        }
        if (!e)
            continue;
        if (jbuf_put(c, b, p + run, i - run) || jbuf_puts(c, b, e))
            return -1;
        run = i + 1;
    }
    if (jbuf_put(c, b, p + run, n - run))
        return -1;
    return jbuf_put(c, b, &q, 1);
}

static int jv_repr(struct jctx *c, struct jval v, struct jbuf *b, int depth);

static int jv_str_inner(struct jctx *c, struct jval v, struct jbuf *b, int depth)
{
    char num[48];
    if (depth > 64)
        return jerr_pos(c, 0, 0, "value nested too deeply to print");
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jbuf_puts(c, b, "None");
    case JV_BOOL: return jbuf_puts(c, b, v.u.b ? "True" : "False");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
        return jbuf_puts(c, b, num);
    case JV_FLOAT:
        jfloat_repr(v.u.f, num, sizeof(num));
        return jbuf_puts(c, b, num);
    case JV_STR: return jbuf_put(c, b, v.u.s.p, v.u.s.n);
    case JV_LIST: {
        bool tup = v.u.l->tuple;
        if (v.u.l->gen)
            return jbuf_puts(c, b, "<generator object>");
        if (jbuf_puts(c, b, tup ? "(" : "["))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++)
            if ((i && jbuf_puts(c, b, ", ")) || jv_repr(c, v.u.l->v[i], b, depth + 1))
                return -1;
        if (tup && v.u.l->n == 1 && jbuf_puts(c, b, ","))
            return -1;
        return jbuf_puts(c, b, tup ? ")" : "]");
    }
    case JV_DICT:
        if (jbuf_puts(c, b, "{"))
            return -1;
        for (size_t i = 0; i < v.u.d->n; i++)
            if ((i && jbuf_puts(c, b, ", ")) || jv_repr(c, v.u.d->k[i], b, depth + 1) ||
                jbuf_puts(c, b, ": ") || jv_repr(c, v.u.d->v[i], b, depth + 1))
                return -1;
        return jbuf_puts(c, b, "}");
    case JV_NS: return jbuf_puts(c, b, "<Namespace>");
    case JV_MACRO: return jbuf_puts(c, b, "<Macro>");
    case JV_FUNC: return jbuf_puts(c, b, "<function>");
    case JV_LOOP: return jbuf_puts(c, b, "<LoopContext>");
    }
    return 0;
}

static int jv_repr(struct jctx *c, struct jval v, struct jbuf *b, int depth)
{
    if (v.t == JV_STR)
        return jv_repr_str(c, v.u.s.p, v.u.s.n, b);
    if (v.t == JV_UNDEF)
        return jbuf_puts(c, b, "Undefined");
    return jv_str_inner(c, v, b, depth);
}

int jv_to_str(struct jctx *c, struct jval v, struct jbuf *b) { return jv_str_inner(c, v, b, 0); }

int jv_stringify(struct jctx *c, struct jval v, struct jval *out)
{
    if (v.t == JV_STR) {
        *out = v;
        return 0;
    }
    struct jbuf b = { 0 };
    if (jv_to_str(c, v, &b))
        return -1;
    *out = jv_strn(b.p ? b.p : "", b.n);
    return 0;
}

static int json_str(struct jctx *c, const char *p, size_t n, struct jbuf *b)
{
    if (jbuf_put(c, b, "\"", 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[8];
        const char *e = NULL;
        if (ch == '"') e = "\\\"";
        else if (ch == '\\') e = "\\\\";
        else if (ch == '\n') e = "\\n";
        else if (ch == '\r') e = "\\r";
        else if (ch == '\t') e = "\\t";
        else if (ch == '\b') e = "\\b";
        else if (ch == '\f') e = "\\f";
        else if (ch < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            e = esc;
        }
        if (!e)
            continue;
        if (jbuf_put(c, b, p + run, i - run) || jbuf_puts(c, b, e))
            return -1;
        run = i + 1;
    }
    if (jbuf_put(c, b, p + run, n - run))
        return -1;
    return jbuf_put(c, b, "\"", 1);
}

static int json_nl(struct jctx *c, int indent, int level, struct jbuf *b)
{
    if (jbuf_put(c, b, "\n", 1))
        return -1;
    for (int i = 0; i < indent * level; i++)
        if (jbuf_put(c, b, " ", 1))
            return -1;
    return 0;
}

int jv_to_json(struct jctx *c, const struct jnode *at, struct jval v, int indent, int level,
               struct jbuf *b)
{
    char num[48];
    if (level > 64)
        return jerr(c, at, "value nested too deeply for tojson");
    switch (v.t) {
    case JV_NONE: return jbuf_puts(c, b, "null");
    case JV_BOOL: return jbuf_puts(c, b, v.u.b ? "true" : "false");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
        return jbuf_puts(c, b, num);
    case JV_FLOAT:
        if (isnan(v.u.f))
            return jbuf_puts(c, b, "NaN");
        if (isinf(v.u.f))
            return jbuf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        jfloat_repr(v.u.f, num, sizeof(num));
        return jbuf_puts(c, b, num);
    case JV_STR: return json_str(c, v.u.s.p, v.u.s.n, b);
    case JV_LIST: {
        if (v.u.l->gen)
            return jerr(c, at, "Object of type generator is not JSON serializable");
        if (v.u.l->n == 0)
            return jbuf_puts(c, b, "[]");
        if (jbuf_puts(c, b, "["))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && jbuf_puts(c, b, indent >= 0 ? "," : ", "))
                return -1;
            if (indent >= 0 && json_nl(c, indent, level + 1, b))
                return -1;
            if (jv_to_json(c, at, v.u.l->v[i], indent, level + 1, b))
                return -1;
        }
        if (indent >= 0 && json_nl(c, indent, level, b))
            return -1;
        return jbuf_puts(c, b, "]");
    }
    case JV_DICT: {
        if (v.u.d->n == 0)
            return jbuf_puts(c, b, "{}");
        if (jbuf_puts(c, b, "{"))
            return -1;
        for (size_t i = 0; i < v.u.d->n; i++) {
            struct jval k = v.u.d->k[i];
            if (i && jbuf_puts(c, b, indent >= 0 ? "," : ", "))
                return -1;
            if (indent >= 0 && json_nl(c, indent, level + 1, b))
                return -1;
            if (k.t == JV_STR) {
                if (json_str(c, k.u.s.p, k.u.s.n, b))
                    return -1;
            } else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                struct jbuf kb = { 0 };
                if (jv_to_json(c, at, k, -1, level + 1, &kb) ||
                    json_str(c, kb.p, kb.n, b))
                    return -1;
            } else {
                return jerr(c, at, "keys must be str, int, float, bool or None, not %s",
                            jv_type_name(k));
            }
            if (jbuf_puts(c, b, ": ") || jv_to_json(c, at, v.u.d->v[i], indent, level + 1, b))
                return -1;
        }
        if (indent >= 0 && json_nl(c, indent, level, b))
            return -1;
        return jbuf_puts(c, b, "}");
    }
    default:
        return jerr(c, at, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

/* ---- UTF-8 ------------------------------------------------------------------- */
/* A character starts at byte 0 and at every byte that is not a continuation
 * byte, so invalid input still splits consistently (jv_iterate uses the same
 * rule). */
static bool char_start(const char *p, size_t i)
{
    return i == 0 || ((unsigned char)p[i] & 0xC0) != 0x80;
}

size_t jutf8_len(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (char_start(p, i))
            k++;
    return k;
}

size_t jutf8_offset(const char *p, size_t n, size_t cp_index)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (char_start(p, i)) {
            if (k == cp_index)
                return i;
            k++;
        }
    }
    return n;
}
