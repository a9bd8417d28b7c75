/* Lexer and parser of the Jinja2 subset (see chat.h for the contract).
 *
 * The lexer mirrors jinja2's with trim_blocks=True, lstrip_blocks=True,
 * keep_trailing_newline=False: `{%-`/`{{-`/`{#-` strip all whitespace before
 * a tag, `-%}`/`-}}`/`-#}` all whitespace after it, a block or comment end
 * eats one following newline, and spaces/tabs between a line start and a
 * `{%`/`{#` tag are dropped.  Tag ends are only recognised outside brackets,
 * so `{{ {'a': 1} }}` works.  Input is hostile: nesting depth is capped and
 * every failure is a message naming line:column. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "chat/jinja_filters.h"
#include "chat/jinja_parse.h"

#define JMAX_PARSE_DEPTH 100

enum jtok_kind {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF,
};

struct jtok {
    enum jtok_kind kind;
    int line, col;
    const char *p; /* text/name/op bytes or decoded string */
    size_t n;
    int64_t i;
    double f;
};

struct jparser {
    struct jctx *c;
    const char *src;
    size_t len;
    /* position tracker for line/col (monotonic) */
    size_t track_off;
    int track_line, track_col;
    struct jtok *toks;
    size_t ntoks, cap;
    size_t pos;
    int depth;
    int loop_depth;
};

static bool jis_space(unsigned char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f);
}

static void jp_where(struct jparser *P, size_t off, int *line, int *col)
{
    if (off < P->track_off) { /* rare: errors only */
        P->track_off = 0;
        P->track_line = 1;
        P->track_col = 1;
    }
    while (P->track_off < off && P->track_off < P->len) {
        if (P->src[P->track_off] == '\n') {
            P->track_line++;
            P->track_col = 1;
        } else if (((unsigned char)P->src[P->track_off] & 0xC0) != 0x80) {
            P->track_col++;
        }
        P->track_off++;
    }
    *line = P->track_line;
    *col = P->track_col;
}

static struct jtok *jp_push(struct jparser *P, enum jtok_kind kind, size_t off)
{
    if (P->ntoks == P->cap) {
        size_t ncap = P->cap ? P->cap * 2 : 256;
        struct jtok *nt = jarena_alloc(&P->c->arena, ncap * sizeof(*nt));
        if (!nt) {
            jerr_pos(P->c, 0, 0, "template too large");
            return NULL;
        }
        if (P->ntoks)
            memcpy(nt, P->toks, P->ntoks * sizeof(*nt));
        P->toks = nt;
        P->cap = ncap;
    }
    struct jtok *t = &P->toks[P->ntoks++];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    jp_where(P, off, &t->line, &t->col);
    return t;
}

static int jp_lex_err(struct jparser *P, size_t off, const char *msg)
{
    int line, col;
    jp_where(P, off, &line, &col);
    return jerr_pos(P->c, line, col, "%s", msg);
}

/* Decodes a Python string literal body (unicode-escape rules). */
static int jp_decode_string(struct jparser *P, size_t off, const char *s, size_t n,
                            struct jtok *t)
{
    char *o = jarena_alloc(&P->c->arena, n + 1);
    if (!o)
        return jp_lex_err(P, off, "template too large");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i];
        unsigned long cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int m = 0;
                while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                    cp = cp * 8 + (unsigned long)(s[i] - '0');
                    i++;
                    m++;
                }
                i--;
                goto emit;
            }
            o[k++] = '\\';
            o[k++] = e;
            continue;
        }
        for (int m = 0; m < digits; m++) {
            char h = (i + 1 + (size_t)m < n) ? s[i + 1 + m] : 0;
            int v = (h >= '0' && h <= '9') ? h - '0'
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (v < 0)
                return jp_lex_err(P, off, "truncated \\x/\\u escape in string literal");
            cp = cp * 16 + (unsigned long)v;
        }
        i += (size_t)digits;
    emit:
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return jp_lex_err(P, off, "invalid code point escape in string literal");
        if (cp < 0x80) {
            o[k++] = (char)cp;
        } else if (cp < 0x800) {
            o[k++] = (char)(0xC0 | (cp >> 6));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o[k++] = (char)(0xE0 | (cp >> 12));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            o[k++] = (char)(0xF0 | (cp >> 18));
            o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    t->p = o;
    t->n = k;
    return 0;
}

static const char *const jops2[] = { "//", "**", "==", "!=", "<=", ">=" };
static const char jops1[] = "+-/*%~[](){}<>=.:|,;";

/* Lexes the inside of a {{ }} or {% %} tag starting at *pp. */
static int jp_lex_tag(struct jparser *P, size_t *pp, bool block, bool *line_starting)
{
    const char *s = P->src;
    size_t n = P->len, p = *pp;
    int balance = 0;
    for (;;) {
        while (p < n && jis_space((unsigned char)s[p]))
            p++;
        if (p >= n)
            return jp_lex_err(P, p, block ? "unexpected end of template, expected '%}'"
                                          : "unexpected end of template, expected '}}'");
        if (balance == 0) {
            size_t end = 0;
            bool strip = false, trim = false;
            if (!block && s[p] == '-' && p + 2 < n && s[p + 1] == '}' && s[p + 2] == '}') {
                end = p + 3; strip = true;
            } else if (!block && s[p] == '}' && p + 1 < n && s[p + 1] == '}') {
                end = p + 2;
            } else if (block && (s[p] == '-' || s[p] == '+') && p + 2 < n && s[p + 1] == '%' &&
                       s[p + 2] == '}') {
                end = p + 3; strip = s[p] == '-';
            } else if (block && s[p] == '%' && p + 1 < n && s[p + 1] == '}') {
                end = p + 2; trim = true;
            }
            if (end) {
                if (!jp_push(P, block ? JT_BLOCK_END : JT_VAR_END, p))
                    return -1;
                if (strip)
                    while (end < n && jis_space((unsigned char)s[end]))
                        end++;
                else if (trim && end < n && s[end] == '\n')
                    end++;
                *line_starting = s[end - 1] == '\n';
                *pp = end;
                return 0;
            }
        }
        unsigned char ch = (unsigned char)s[p];
        size_t start = p;
        if (ch == '\'' || ch == '"') {
            size_t q = p + 1;
            while (q < n && s[q] != (char)ch) {
                if (s[q] == '\\' && q + 1 < n)
                    q++;
                q++;
            }
            if (q >= n)
                return jp_lex_err(P, p, "unterminated string literal");
            struct jtok *t = jp_push(P, JT_STRING, start);
            if (!t || jp_decode_string(P, start, s + p + 1, q - p - 1, t))
                return -1;
            p = q + 1;
        } else if (ch >= '0' && ch <= '9') {
            size_t q = p;
            bool isf = false;
            while (q < n && ((s[q] >= '0' && s[q] <= '9') || (s[q] == '_' && q + 1 < n &&
                             s[q + 1] >= '0' && s[q + 1] <= '9')))
                q++;
            if (q + 1 < n && s[q] == '.' && s[q + 1] >= '0' && s[q + 1] <= '9') {
                isf = true;
                q++;
                while (q < n && ((s[q] >= '0' && s[q] <= '9') || s[q] == '_'))
                    q++;
            }
            if (q < n && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < n && (s[r] == '+' || s[r] == '-'))
                    r++;
                if (r < n && s[r] >= '0' && s[r] <= '9') {
                    isf = true;
                    q = r;
                    while (q < n && s[q] >= '0' && s[q] <= '9')
                        q++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = p; i < q; i++)
                if (s[i] != '_') {
                    if (k + 1 >= sizeof(num))
                        return jp_lex_err(P, p, "number literal too long");
                    num[k++] = s[i];
                }
            num[k] = 0;
            struct jtok *t = jp_push(P, isf ? JT_FLOAT : JT_INT, start);
            if (!t)
                return -1;
            errno = 0;
            if (isf) {
                t->f = strtod(num, NULL);
            } else {
                t->i = strtoll(num, NULL, 10);
                if (errno == ERANGE)
                    return jp_lex_err(P, p, "integer literal out of range");
            }
            p = q;
        } else if (ch == '_' || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) {
            size_t q = p;
            while (q < n && (s[q] == '_' || ((s[q] | 0x20) >= 'a' && (s[q] | 0x20) <= 'z') ||
                             (s[q] >= '0' && s[q] <= '9')))
                q++;
            struct jtok *t = jp_push(P, JT_NAME, start);
            if (!t)
                return -1;
            char *nm = jarena_alloc(&P->c->arena, q - p + 1);
            if (!nm)
                return jp_lex_err(P, p, "template too large");
            memcpy(nm, s + p, q - p);
            t->p = nm;
            t->n = q - p;
            p = q;
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof(jops2) / sizeof(jops2[0]); k++)
                if (p + 1 < n && s[p] == jops2[k][0] && s[p + 1] == jops2[k][1])
                    len = 2;
            if (!len && ch && strchr(jops1, ch))
                len = 1;
            if (!len)
                return jp_lex_err(P, p, "unexpected character in tag");
            if (len == 1 && (ch == '(' || ch == '[' || ch == '{')) {
                if (++balance > JMAX_PARSE_DEPTH)
                    return jp_lex_err(P, p, "brackets nested too deeply");
            } else if (len == 1 && (ch == ')' || ch == ']' || ch == '}')) {
                if (balance == 0)
                    return jp_lex_err(P, p, "unexpected closing bracket");
                balance--;
            }
            struct jtok *t = jp_push(P, JT_OP, start);
            if (!t)
                return -1;
            t->p = s + p;
            t->n = len;
            p += len;
        }
    }
}

static int jp_lex(struct jparser *P)
{
    const char *s = P->src;
    size_t n = P->len, pos = 0;
    bool line_starting = true;
    while (pos < n) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')))
            q++;
        if (q + 1 >= n) {
            struct jtok *t = jp_push(P, JT_TEXT, pos);
            if (!t)
                return -1;
            t->p = s + pos;
            t->n = n - pos;
            break;
        }
        char kind = s[q + 1];
        char sign = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        size_t te = q;
        if (sign == '-') {
            while (te > pos && jis_space((unsigned char)s[te - 1]))
                te--;
        } else if (sign != '+' && kind != '{') {
            size_t l = q;
            while (l > pos && s[l - 1] != '\n')
                l--;
            /* jinja2: only if a newline precedes within the text, or the
             * previous tag ended a line (or this is the template start). */
            bool at_line = l > pos || line_starting;
            if (at_line && l < q) {
                bool allws = true;
                for (size_t i = l; i < q; i++)
                    if (!jis_space((unsigned char)s[i]))
                        allws = false;
                if (allws)
                    te = l;
            }
        }
        if (te > pos) {
            struct jtok *t = jp_push(P, JT_TEXT, pos);
            if (!t)
                return -1;
            t->p = s + pos;
            t->n = te - pos;
        }
        size_t p = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = p; i + 1 < n; i++)
                if (s[i] == '#' && s[i + 1] == '}') {
                    e = s + i;
                    break;
                }
            if (!e)
                return jp_lex_err(P, q, "missing end of comment tag");
            size_t ei = (size_t)(e - s), end = ei + 2;
            if (ei > p && s[ei - 1] == '-') {
                while (end < n && jis_space((unsigned char)s[end]))
                    end++;
            } else if (!(ei > p && s[ei - 1] == '+') && end < n && s[end] == '\n') {
                end++;
            }
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        if (kind == '%') {
            size_t r = p;
            while (r < n && jis_space((unsigned char)s[r]))
                r++;
            if (r + 3 <= n && memcmp(s + r, "raw", 3) == 0 &&
                (r + 3 == n || !(s[r + 3] == '_' || ((s[r + 3] | 0x20) >= 'a' && (s[r + 3] | 0x20) <= 'z') ||
                                 (s[r + 3] >= '0' && s[r + 3] <= '9'))))
                return jp_lex_err(P, q, "{% raw %} blocks are not supported");
        }
        if (!jp_push(P, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, q))
            return -1;
        if (jp_lex_tag(P, &p, kind == '%', &line_starting))
            return -1;
        pos = p;
    }
    return jp_push(P, JT_EOF, n) ? 0 : -1;
}

/* ---- parser ------------------------------------------------------------------ */

static struct jtok *cur(struct jparser *P) { return &P->toks[P->pos]; }

static int perr(struct jparser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct jparser *P, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return jerr_pos(P->c, cur(P)->line, cur(P)->col, "%s", msg);
}

static bool is_op(struct jparser *P, const char *op)
{
    struct jtok *t = cur(P);
    return t->kind == JT_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}

static bool is_name(struct jparser *P, const char *nm)
{
    struct jtok *t = cur(P);
    return t->kind == JT_NAME && t->n == strlen(nm) && memcmp(t->p, nm, t->n) == 0;
}

static bool skip_op(struct jparser *P, const char *op)
{
    if (!is_op(P, op))
        return false;
    P->pos++;
    return true;
}

static bool skip_name(struct jparser *P, const char *nm)
{
    if (!is_name(P, nm))
        return false;
    P->pos++;
    return true;
}

static int expect_op(struct jparser *P, const char *op)
{
    if (skip_op(P, op))
        return 0;
    return perr(P, "expected '%s'", op);
}

static struct jnode *mk(struct jparser *P, enum jnode_kind k)
{
    struct jnode *n = jarena_alloc(&P->c->arena, sizeof(*n));
    if (!n) {
        perr(P, "template too large");
        return NULL;
    }
    n->kind = k;
    n->line = cur(P)->line;
    n->col = cur(P)->col;
    return n;
}

/* Growable node-pointer vector in the arena. */
struct nvec { struct jnode **v; size_t n, cap; };

static int nvec_push(struct jparser *P, struct nvec *nv, struct jnode *x)
{
    if (nv->n == nv->cap) {
        size_t nc = nv->cap ? nv->cap * 2 : 4;
        struct jnode **nn = jarena_alloc(&P->c->arena, nc * sizeof(*nn));
        if (!nn)
            return perr(P, "template too large");
        if (nv->n)
            memcpy(nn, nv->v, nv->n * sizeof(*nn));
        nv->v = nn;
        nv->cap = nc;
    }
    nv->v[nv->n++] = x;
    return 0;
}

struct svec { const char **v; size_t n, cap; };

static int svec_push(struct jparser *P, struct svec *sv, const char *x)
{
    if (sv->n == sv->cap) {
        size_t nc = sv->cap ? sv->cap * 2 : 4;
        const char **nn = jarena_alloc(&P->c->arena, nc * sizeof(*nn));
        if (!nn)
            return perr(P, "template too large");
        if (sv->n)
            memcpy(nn, sv->v, sv->n * sizeof(*nn));
        sv->v = nn;
        sv->cap = nc;
    }
    sv->v[sv->n++] = x;
    return 0;
}

static struct jnode *parse_expr(struct jparser *P, bool with_cond);
static struct jnode *parse_tuple(struct jparser *P, bool with_cond, bool explicit_parens);
static struct jnode *parse_unary(struct jparser *P, bool with_filter);
static struct jnode *parse_primary(struct jparser *P);
static struct jnode *parse_postfix(struct jparser *P, struct jnode *n);

static int enter(struct jparser *P)
{
    if (++P->depth > JMAX_PARSE_DEPTH)
        return perr(P, "template nested too deeply");
    return 0;
}

/* Call arguments after '(' up to ')'. */
static int parse_args(struct jparser *P, struct jnode *n)
{
    struct nvec args = { 0 }, kw = { 0 };
    struct svec kwn = { 0 };
    while (!is_op(P, ")")) {
        if (args.n + kw.n > 0 && expect_op(P, ","))
            return -1;
        if (is_op(P, ")"))
            break;
        if (is_op(P, "*") || is_op(P, "**"))
            return perr(P, "*args/**kwargs in calls are not supported");
        if (cur(P)->kind == JT_NAME && P->toks[P->pos + 1].kind == JT_OP &&
            P->toks[P->pos + 1].n == 1 && P->toks[P->pos + 1].p[0] == '=') {
            if (svec_push(P, &kwn, cur(P)->p))
                return -1;
            P->pos += 2;
            struct jnode *v = parse_expr(P, true);
            if (!v || nvec_push(P, &kw, v))
                return -1;
        } else {
            if (kw.n)
                return perr(P, "positional argument follows keyword argument");
            struct jnode *v = parse_expr(P, true);
            if (!v || nvec_push(P, &args, v))
                return -1;
        }
    }
    P->pos++; /* ')' */
    n->args = args.v;
    n->nargs = args.n;
    n->kwargs = kw.v;
    n->kwnames = kwn.v;
    n->nkw = kw.n;
    return 0;
}

static const char *parse_dotted_name(struct jparser *P)
{
    if (cur(P)->kind != JT_NAME) {
        perr(P, "expected a filter or test name");
        return NULL;
    }
    const char *nm = cur(P)->p;
    P->pos++;
    return nm;
}

static struct jnode *parse_filter_expr(struct jparser *P, struct jnode *n)
{
    for (;;) {
        if (is_op(P, "|")) {
            P->pos++;
            struct jnode *f = mk(P, JN_FILTER);
            if (!f || !(f->name = parse_dotted_name(P)))
                return NULL;
            f->a = n;
            if (skip_op(P, "(") && parse_args(P, f))
                return NULL;
            n = f;
        } else if (is_name(P, "is")) {
            P->pos++;
            struct jnode *t = mk(P, JN_TEST);
            if (!t)
                return NULL;
            t->op = skip_name(P, "not");
            if (!(t->name = parse_dotted_name(P)))
                return NULL;
            t->a = n;
            struct jtok *k = cur(P);
            if (skip_op(P, "(")) {
                if (parse_args(P, t))
                    return NULL;
            } else if ((k->kind == JT_NAME || k->kind == JT_STRING || k->kind == JT_INT ||
                        k->kind == JT_FLOAT || is_op(P, "[") || is_op(P, "{")) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
                if (is_name(P, "is")) {
                    perr(P, "you cannot chain multiple tests with is");
                    return NULL;
                }
                struct jnode *arg = parse_primary(P);
                if (!arg || !(arg = parse_postfix(P, arg)))
                    return NULL;
                t->args = jarena_alloc(&P->c->arena, sizeof(struct jnode *));
                if (!t->args) {
                    perr(P, "template too large");
                    return NULL;
                }
                t->args[0] = arg;
                t->nargs = 1;
            }
            n = t;
        } else if (is_op(P, "(")) {
            P->pos++;
            struct jnode *call = mk(P, JN_CALL);
            if (!call)
                return NULL;
            call->a = n;
            call->line = n->line;
            call->col = n->col;
            if (parse_args(P, call))
                return NULL;
            n = call;
        } else {
            return n;
        }
    }
}

static struct jnode *parse_postfix(struct jparser *P, struct jnode *n)
{
    for (;;) {
        if (is_op(P, ".")) {
            P->pos++;
            if (cur(P)->kind == JT_NAME) {
                struct jnode *g = mk(P, JN_GETATTR);
                if (!g)
                    return NULL;
                g->a = n;
                g->name = cur(P)->p;
                P->pos++;
                n = g;
            } else if (cur(P)->kind == JT_INT) {
                struct jnode *g = mk(P, JN_GETITEM), *k = mk(P, JN_LIT);
                if (!g || !k)
                    return NULL;
                k->lit = jv_int(cur(P)->i);
                P->pos++;
                g->a = n;
                g->b = k;
                n = g;
            } else {
                perr(P, "expected an attribute name after '.'");
                return NULL;
            }
        } else if (is_op(P, "[")) {
            P->pos++;
            struct jnode *parts[3] = { NULL, NULL, NULL };
            bool slice = false;
            int idx = 0;
            for (;;) {
                if (is_op(P, ":")) {
                    P->pos++;
                    slice = true;
                    if (++idx > 2) {
                        perr(P, "invalid slice");
                        return NULL;
                    }
                    continue;
                }
                if (is_op(P, "]"))
                    break;
                if (parts[idx]) {
                    perr(P, "expected ']'");
                    return NULL;
                }
                if (!(parts[idx] = slice ? parse_expr(P, true) : parse_tuple(P, true, false)))
                    return NULL;
            }
            P->pos++;
            if (!slice && !parts[0]) {
                perr(P, "expected a subscript");
                return NULL;
            }
            struct jnode *g = mk(P, slice ? JN_SLICE : JN_GETITEM);
            if (!g)
                return NULL;
            g->a = n;
            g->b = parts[0];
            g->c = parts[1];
            g->d = parts[2];
            n = g;
        } else if (is_op(P, "(")) {
            P->pos++;
            struct jnode *call = mk(P, JN_CALL);
            if (!call)
                return NULL;
            call->a = n;
            call->line = n->line;
            call->col = n->col;
            if (parse_args(P, call))
                return NULL;
            n = call;
        } else {
            return n;
        }
    }
}

static struct jnode *parse_primary(struct jparser *P)
{
    struct jtok *t = cur(P);
    struct jnode *n;
    if (enter(P))
        return NULL;
    switch (t->kind) {
    case JT_NAME:
        if (!(n = mk(P, JN_LIT)))
            return NULL;
        if (is_name(P, "true") || is_name(P, "True"))
            n->lit = jv_bool(true);
        else if (is_name(P, "false") || is_name(P, "False"))
            n->lit = jv_bool(false);
        else if (is_name(P, "none") || is_name(P, "None"))
            n->lit = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = t->p;
        }
        P->pos++;
        break;
    case JT_STRING: {
        if (!(n = mk(P, JN_LIT)))
            return NULL;
        size_t total = 0, k = P->pos;
        while (P->toks[k].kind == JT_STRING)
            total += P->toks[k++].n;
        if (k == P->pos + 1) {
            n->lit = jv_strn(t->p, t->n);
            P->pos++;
        } else {
            char *buf = jarena_alloc(&P->c->arena, total + 1);
            if (!buf) {
                perr(P, "template too large");
                return NULL;
            }
            size_t off = 0;
            for (; P->pos < k; P->pos++) {
                memcpy(buf + off, P->toks[P->pos].p, P->toks[P->pos].n);
                off += P->toks[P->pos].n;
            }
            n->lit = jv_strn(buf, total);
        }
        break;
    }
    case JT_INT:
    case JT_FLOAT:
        if (!(n = mk(P, JN_LIT)))
            return NULL;
        n->lit = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        P->pos++;
        break;
    case JT_OP:
        if (skip_op(P, "(")) {
            if (!(n = parse_tuple(P, true, true)) || expect_op(P, ")"))
                return NULL;
        } else if (is_op(P, "[")) {
            if (!(n = mk(P, JN_LIST)))
                return NULL;
            P->pos++;
            struct nvec items = { 0 };
            while (!is_op(P, "]")) {
                if (items.n && expect_op(P, ","))
                    return NULL;
                if (is_op(P, "]"))
                    break;
                struct jnode *x = parse_expr(P, true);
                if (!x || nvec_push(P, &items, x))
                    return NULL;
            }
            P->pos++;
            n->args = items.v;
            n->nargs = items.n;
        } else if (is_op(P, "{")) {
            if (!(n = mk(P, JN_DICT)))
                return NULL;
            P->pos++;
            struct nvec keys = { 0 }, vals = { 0 };
            while (!is_op(P, "}")) {
                if (keys.n && expect_op(P, ","))
                    return NULL;
                if (is_op(P, "}"))
                    break;
                struct jnode *k = parse_expr(P, true);
                if (!k || expect_op(P, ":"))
                    return NULL;
                struct jnode *v = parse_expr(P, true);
                if (!v || nvec_push(P, &keys, k) || nvec_push(P, &vals, v))
                    return NULL;
            }
            P->pos++;
            n->args = keys.v;
            n->nargs = keys.n;
            n->body = vals.v;
            n->nbody = vals.n;
        } else {
            perr(P, "unexpected '%.*s'", (int)t->n, t->p);
            return NULL;
        }
        break;
    default:
        perr(P, "unexpected %s", t->kind == JT_EOF ? "end of template"
                                 : t->kind == JT_VAR_END || t->kind == JT_BLOCK_END ? "end of tag"
                                 : "token");
        return NULL;
    }
    P->depth--;
    return n;
}

static struct jnode *parse_unary(struct jparser *P, bool with_filter)
{
    struct jnode *n;
    if (enter(P))
        return NULL;
    if (is_op(P, "-") || is_op(P, "+")) {
        if (!(n = mk(P, JN_UNARY)))
            return NULL;
        n->op = is_op(P, "-") ? JO_NEG : JO_POS;
        P->pos++;
        if (!(n->a = parse_unary(P, false)))
            return NULL;
    } else {
        if (!(n = parse_primary(P)))
            return NULL;
    }
    if (!(n = parse_postfix(P, n)))
        return NULL;
    if (with_filter && !(n = parse_filter_expr(P, n)))
        return NULL;
    P->depth--;
    return n;
}

static struct jnode *mk_bin(struct jparser *P, enum jnode_kind k, int op, struct jnode *a,
                            struct jnode *b)
{
    struct jnode *n = mk(P, k);
    if (!n)
        return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    n->line = a->line;
    n->col = a->col;
    return n;
}

static struct jnode *parse_pow(struct jparser *P)
{
    struct jnode *l = parse_unary(P, true);
    while (l && is_op(P, "**")) {
        P->pos++;
        struct jnode *r = parse_unary(P, true);
        l = r ? mk_bin(P, JN_BINARY, JO_POW, l, r) : NULL;
    }
    return l;
}

static struct jnode *parse_math2(struct jparser *P)
{
    struct jnode *l = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? JO_MUL : is_op(P, "/") ? JO_DIV : is_op(P, "//") ? JO_FLOORDIV
               : is_op(P, "%") ? JO_MOD : -1;
        if (!l || op < 0)
            return l;
        P->pos++;
        struct jnode *r = parse_pow(P);
        l = r ? mk_bin(P, JN_BINARY, op, l, r) : NULL;
    }
}

static struct jnode *parse_concat(struct jparser *P)
{
    struct jnode *l = parse_math2(P);
    while (l && is_op(P, "~")) {
        P->pos++;
        struct jnode *r = parse_math2(P);
        l = r ? mk_bin(P, JN_BINARY, JO_CONCAT, l, r) : NULL;
    }
    return l;
}

static struct jnode *parse_math1(struct jparser *P)
{
    struct jnode *l = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? JO_ADD : is_op(P, "-") ? JO_SUB : -1;
        if (!l || op < 0)
            return l;
        P->pos++;
        struct jnode *r = parse_concat(P);
        l = r ? mk_bin(P, JN_BINARY, op, l, r) : NULL;
    }
}

static struct jnode *parse_compare(struct jparser *P)
{
    struct jnode *l = parse_math1(P), *result = l;
    for (;;) {
        int op = is_op(P, "==") ? JO_EQ : is_op(P, "!=") ? JO_NE : is_op(P, "<") ? JO_LT
               : is_op(P, "<=") ? JO_LE : is_op(P, ">") ? JO_GT : is_op(P, ">=") ? JO_GE
               : is_name(P, "in") ? JO_IN : -1;
        if (!l)
            return NULL;
        if (op < 0 && is_name(P, "not") && P->toks[P->pos + 1].kind == JT_NAME &&
            P->toks[P->pos + 1].n == 2 && memcmp(P->toks[P->pos + 1].p, "in", 2) == 0) {
            op = JO_NOTIN;
            P->pos++;
        }
        if (op < 0)
            return result;
        P->pos++;
        struct jnode *r = parse_math1(P);
        if (!r)
            return NULL;
        struct jnode *cmp = mk_bin(P, JN_COMPARE, op, l, r);
        if (!cmp)
            return NULL;
        result = result == l ? cmp : mk_bin(P, JN_AND, 0, result, cmp);
        if (!result)
            return NULL;
        l = r;
    }
}

static struct jnode *parse_not(struct jparser *P)
{
    if (is_name(P, "not")) {
        struct jnode *n = mk(P, JN_NOT);
        if (!n || enter(P))
            return NULL;
        P->pos++;
        if (!(n->a = parse_not(P)))
            return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct jparser *P)
{
    struct jnode *l = parse_not(P);
    while (l && is_name(P, "and")) {
        P->pos++;
        struct jnode *r = parse_not(P);
        l = r ? mk_bin(P, JN_AND, 0, l, r) : NULL;
    }
    return l;
}

static struct jnode *parse_or(struct jparser *P)
{
    struct jnode *l = parse_and(P);
    while (l && is_name(P, "or")) {
        P->pos++;
        struct jnode *r = parse_and(P);
        l = r ? mk_bin(P, JN_OR, 0, l, r) : NULL;
    }
    return l;
}

static struct jnode *parse_expr(struct jparser *P, bool with_cond)
{
    if (enter(P))
        return NULL;
    struct jnode *e = parse_or(P);
    while (with_cond && e && is_name(P, "if")) {
        P->pos++;
        struct jnode *n = mk(P, JN_COND);
        if (!n || !(n->b = parse_or(P)))
            return NULL;
        n->a = e;
        if (skip_name(P, "else") && !(n->c = parse_expr(P, true)))
            return NULL;
        e = n;
    }
    P->depth--;
    return e;
}

/* Expression or bare tuple `a, b` (as in `{{ a, b }}` and `set x = a, b`). */
static struct jnode *parse_tuple(struct jparser *P, bool with_cond, bool explicit_parens)
{
    struct nvec items = { 0 };
    bool comma = false;
    int line = cur(P)->line, col = cur(P)->col;
    for (;;) {
        if (items.n) {
            if (!skip_op(P, ","))
                break;
            comma = true;
        }
        if (is_op(P, ")") || cur(P)->kind == JT_VAR_END || cur(P)->kind == JT_BLOCK_END ||
            is_op(P, "]") || (items.n && (is_name(P, "if") || is_name(P, "recursive"))))
            break;
        struct jnode *x = parse_expr(P, with_cond);
        if (!x || nvec_push(P, &items, x))
            return NULL;
    }
    if (!comma) {
        if (items.n == 1)
            return items.v[0];
        if (!explicit_parens) {
            perr(P, "expected an expression");
            return NULL;
        }
    }
    struct jnode *t = mk(P, JN_TUPLE);
    if (!t)
        return NULL;
    t->line = line;
    t->col = col;
    t->args = items.v;
    t->nargs = items.n;
    return t;
}

/* ---- statements ---------------------------------------------------------------- */

static int parse_body(struct jparser *P, struct nvec *out, const char *const *ends);

static int expect_block_end(struct jparser *P)
{
    if (cur(P)->kind != JT_BLOCK_END)
        return perr(P, "expected end of statement block");
    P->pos++;
    return 0;
}

static int parse_filter_chain(struct jparser *P, struct nvec *chain)
{
    do {
        struct jnode *f = mk(P, JN_FILTER);
        if (!f || !(f->name = parse_dotted_name(P)))
            return -1;
        if (skip_op(P, "(") && parse_args(P, f))
            return -1;
        if (nvec_push(P, chain, f))
            return -1;
    } while (skip_op(P, "|"));
    return 0;
}

static int parse_targets(struct jparser *P, struct svec *tg)
{
    bool paren = skip_op(P, "(");
    do {
        if (cur(P)->kind != JT_NAME)
            return perr(P, "expected a variable name");
        if (svec_push(P, tg, cur(P)->p))
            return -1;
        P->pos++;
    } while (skip_op(P, ","));
    if (paren && expect_op(P, ")"))
        return -1;
    return 0;
}

/* ---- tags: each parses from its name (the current token) through the
 * end of its last block, and leaves the closing '%}' to parse_statement */

static struct jnode *parse_if(struct jparser *P)
{
    static const char *const if_ends[] = { "elif", "else", "endif", NULL };
    static const char *const endif[] = { "endif", NULL };
    struct nvec body = { 0 }, alt = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_IF)) || !(n->a = parse_tuple(P, true, false)) || expect_block_end(P) ||
        parse_body(P, &body, if_ends))
        return NULL;
    struct jnode *tail = n;
    for (;;) {
        tail->body = body.v;
        tail->nbody = body.n;
        memset(&body, 0, sizeof(body));
        if (skip_name(P, "elif")) {
            struct jnode *e = mk(P, JN_IF);
            if (!e || !(e->a = parse_tuple(P, true, false)) || expect_block_end(P) ||
                parse_body(P, &body, if_ends))
                return NULL;
            tail->alt = jarena_alloc(&P->c->arena, sizeof(struct jnode *));
            if (!tail->alt) {
                perr(P, "template too large");
                return NULL;
            }
            tail->alt[0] = e;
            tail->nalt = 1;
            tail = e;
            continue;
        }
        if (skip_name(P, "else")) {
            if (expect_block_end(P) || parse_body(P, &alt, endif))
                return NULL;
            tail->alt = alt.v;
            tail->nalt = alt.n;
        }
        P->pos++; /* endif */
        return n;
    }
}

static struct jnode *parse_for(struct jparser *P)
{
    static const char *const for_ends[] = { "else", "endfor", NULL };
    static const char *const endfor[] = { "endfor", NULL };
    struct nvec body = { 0 }, alt = { 0 };
    struct svec tg = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_FOR)) || parse_targets(P, &tg))
        return NULL;
    if (!skip_name(P, "in")) {
        perr(P, "expected 'in' in for loop");
        return NULL;
    }
    if (!(n->a = parse_tuple(P, false, false)))
        return NULL;
    if (skip_name(P, "if") && !(n->b = parse_expr(P, true)))
        return NULL;
    if (is_name(P, "recursive")) {
        perr(P, "recursive loops are not supported");
        return NULL;
    }
    P->loop_depth++;
    if (expect_block_end(P) || parse_body(P, &body, for_ends))
        return NULL;
    P->loop_depth--;
    if (skip_name(P, "else") && (expect_block_end(P) || parse_body(P, &alt, endfor)))
        return NULL;
    P->pos++;
    n->targets = tg.v;
    n->ntargets = tg.n;
    n->body = body.v;
    n->nbody = body.n;
    n->alt = alt.v;
    n->nalt = alt.n;
    return n;
}

/* {% set x = ... %}, {% set ns.attr = ... %}, {% set x | filters %}...{% endset %} */
static struct jnode *parse_set(struct jparser *P)
{
    static const char *const endset[] = { "endset", NULL };
    struct nvec body = { 0 };
    struct svec tg = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_SET)))
        return NULL;
    if (cur(P)->kind == JT_NAME && P->toks[P->pos + 1].kind == JT_OP &&
        P->toks[P->pos + 1].n == 1 && P->toks[P->pos + 1].p[0] == '.') {
        if (svec_push(P, &tg, cur(P)->p))
            return NULL;
        P->pos += 2;
        if (cur(P)->kind != JT_NAME) {
            perr(P, "expected an attribute name");
            return NULL;
        }
        n->name = cur(P)->p;
        P->pos++;
    } else if (parse_targets(P, &tg)) {
        return NULL;
    }
    n->targets = tg.v;
    n->ntargets = tg.n;
    if (skip_op(P, "=")) {
        if (!(n->b = parse_tuple(P, true, false)))
            return NULL;
        return n;
    }
    if (n->name || tg.n != 1) {
        perr(P, "expected '='");
        return NULL;
    }
    n->kind = JN_SETBLOCK;
    struct nvec chain = { 0 };
    if (skip_op(P, "|") && parse_filter_chain(P, &chain))
        return NULL;
    n->args = chain.v;
    n->nargs = chain.n;
    if (expect_block_end(P) || parse_body(P, &body, endset))
        return NULL;
    P->pos++;
    n->body = body.v;
    n->nbody = body.n;
    return n;
}

static struct jnode *parse_macro(struct jparser *P)
{
    static const char *const endmacro[] = { "endmacro", NULL };
    struct nvec body = { 0 }, defs = { 0 };
    struct svec params = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_MACRO)))
        return NULL;
    if (cur(P)->kind != JT_NAME) {
        perr(P, "expected a macro name");
        return NULL;
    }
    n->name = cur(P)->p;
    P->pos++;
    if (expect_op(P, "("))
        return NULL;
    while (!skip_op(P, ")")) {
        if (params.n && expect_op(P, ","))
            return NULL;
        if (skip_op(P, ")"))
            break;
        if (cur(P)->kind != JT_NAME) {
            perr(P, "expected a parameter name");
            return NULL;
        }
        if (svec_push(P, &params, cur(P)->p))
            return NULL;
        P->pos++;
        struct jnode *d = NULL;
        if (skip_op(P, "=") && !(d = parse_expr(P, true)))
            return NULL;
        if (!d && defs.n && defs.v[defs.n - 1]) {
            perr(P, "non-default argument follows default argument");
            return NULL;
        }
        if (nvec_push(P, &defs, d))
            return NULL;
    }
    int saved = P->loop_depth;
    P->loop_depth = 0;
    if (expect_block_end(P) || parse_body(P, &body, endmacro))
        return NULL;
    P->loop_depth = saved;
    P->pos++;
    n->targets = params.v;
    n->ntargets = params.n;
    n->args = defs.v;
    n->nargs = defs.n;
    n->body = body.v;
    n->nbody = body.n;
    return n;
}

/* {% filter f | g %}...{% endfilter %} */
static struct jnode *parse_filter_block(struct jparser *P)
{
    static const char *const endfilter[] = { "endfilter", NULL };
    struct nvec body = { 0 }, chain = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_FILTERBLOCK)) || parse_filter_chain(P, &chain) ||
        expect_block_end(P) || parse_body(P, &body, endfilter))
        return NULL;
    P->pos++;
    n->args = chain.v;
    n->nargs = chain.n;
    n->body = body.v;
    n->nbody = body.n;
    return n;
}

/* HF's {% generation %} marks assistant text; it renders its body. */
static struct jnode *parse_generation(struct jparser *P)
{
    static const char *const endgen[] = { "endgeneration", NULL };
    struct nvec body = { 0 };
    struct jnode *n;
    P->pos++;
    if (!(n = mk(P, JN_IF)) || !(n->a = mk(P, JN_LIT)) || expect_block_end(P) ||
        parse_body(P, &body, endgen))
        return NULL;
    P->pos++;
    n->a->lit = jv_bool(true);
    n->body = body.v;
    n->nbody = body.n;
    return n;
}

static struct jnode *parse_loop_control(struct jparser *P, enum jnode_kind kind)
{
    struct jnode *n;
    if (P->loop_depth == 0) {
        perr(P, "'%s' outside of a loop", cur(P)->p);
        return NULL;
    }
    if (!(n = mk(P, kind)))
        return NULL;
    P->pos++;
    return n;
}

static struct jnode *parse_break(struct jparser *P) { return parse_loop_control(P, JN_BREAK); }
static struct jnode *parse_continue(struct jparser *P) { return parse_loop_control(P, JN_CONTINUE); }

static const struct {
    const char *name;
    struct jnode *(*parse)(struct jparser *P);
} jtags[] = {
    {"if", parse_if},         {"for", parse_for},
    {"set", parse_set},       {"macro", parse_macro},
    {"filter", parse_filter_block}, {"generation", parse_generation},
    {"break", parse_break},   {"continue", parse_continue},
};

/* One {% tag %} (past its '{%') through its closing '%}'. */
static struct jnode *parse_statement(struct jparser *P)
{
    const size_t n_tags = sizeof jtags / sizeof jtags[0];
    size_t i = 0;
    if (cur(P)->kind != JT_NAME) {
        perr(P, "expected a statement name after '{%%'");
        return NULL;
    }
    if (enter(P))
        return NULL;
    while (i < n_tags && !is_name(P, jtags[i].name))
        i++;
    if (i == n_tags) {
        perr(P, "unknown or unexpected tag '%s'", cur(P)->p);
        return NULL;
    }
    struct jnode *n = jtags[i].parse(P);
    if (!n || expect_block_end(P))
        return NULL;
    P->depth--;
    return n;
}

/* Parses statements until a block tag named in `ends` (left at that name,
 * past its '{%') or, when ends is NULL, until the end of the template. */
static int parse_body(struct jparser *P, struct nvec *out, const char *const *ends)
{
    for (;;) {
        struct jtok *t = cur(P);
        struct jnode *n = NULL;
        if (t->kind == JT_EOF) {
            if (ends) {
                const char *const *last = ends;
                while (last[1])
                    last++;
                return perr(P, "unexpected end of template, expected '%s'", *last);
            }
            return 0;
        }
        if (t->kind == JT_TEXT) {
            if (!(n = mk(P, JN_TEXT)))
                return -1;
            n->lit = jv_strn(t->p, t->n);
            P->pos++;
        } else if (t->kind == JT_VAR_BEGIN) {
            P->pos++;
            if (!(n = mk(P, JN_OUTPUT)) || !(n->a = parse_tuple(P, true, false)))
                return -1;
            if (cur(P)->kind != JT_VAR_END)
                return perr(P, "expected '}}'");
            P->pos++;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            P->pos++;
            if (ends)
                for (const char *const *e = ends; *e; e++)
                    if (is_name(P, *e))
                        return 0;
            if (!(n = parse_statement(P)))
                return -1;
        } else {
            return perr(P, "unexpected token");
        }
        if (nvec_push(P, out, n))
            return -1;
    }
}

/* jinja2 rejects an unknown filter or test name at compile time unless it
 * sits inside an {% if %} (test and branches) or a conditional expression;
 * for/macro/set-block/filter-block bodies start a strict frame again. */
static int check_names(struct jctx *c, const struct jnode *n, bool soft, int depth)
{
    if (!n)
        return 0;
    if (depth > 4 * JMAX_PARSE_DEPTH)
        return jerr(c, n, "template nested too deeply");
    bool inner_soft = soft;
    switch (n->kind) {
    case JN_FILTER:
        if (!soft && !jfilter_known(n->name))
            return jerr(c, n, "no filter named '%s'", n->name);
        break;
    case JN_TEST:
        if (!soft && !jtest_known(n->name))
            return jerr(c, n, "no test named '%s'", n->name);
        break;
    case JN_COND:
    case JN_IF:
        inner_soft = true;
        break;
    default:
        break;
    }
    if (n->kind == JN_FOR) {
        /* iterable and else-branch belong to the outer frame */
        if (check_names(c, n->a, soft, depth + 1))
            return -1;
        for (size_t i = 0; i < n->nalt; i++)
            if (check_names(c, n->alt[i], soft, depth + 1))
                return -1;
        if (check_names(c, n->b, false, depth + 1))
            return -1;
        for (size_t i = 0; i < n->nbody; i++)
            if (check_names(c, n->body[i], false, depth + 1))
                return -1;
        return 0;
    }
    bool body_soft = (n->kind == JN_MACRO || n->kind == JN_SETBLOCK || n->kind == JN_FILTERBLOCK)
                         ? false : inner_soft;
    if (n->kind == JN_FILTERBLOCK || n->kind == JN_SETBLOCK)
        for (size_t i = 0; i < n->nargs; i++) /* the block's own filters */
            if (!soft && !jfilter_known(n->args[i]->name))
                return jerr(c, n->args[i], "no filter named '%s'", n->args[i]->name);
    if (check_names(c, n->a, inner_soft, depth + 1) || check_names(c, n->b, inner_soft, depth + 1) ||
        check_names(c, n->c, inner_soft, depth + 1) || check_names(c, n->d, inner_soft, depth + 1))
        return -1;
    if (n->kind != JN_FILTERBLOCK && n->kind != JN_SETBLOCK)
        for (size_t i = 0; i < n->nargs; i++)
            if (check_names(c, n->args[i], inner_soft, depth + 1))
                return -1;
    for (size_t i = 0; i < n->nkw; i++)
        if (check_names(c, n->kwargs[i], inner_soft, depth + 1))
            return -1;
    for (size_t i = 0; i < n->nbody; i++)
        if (check_names(c, n->body[i], body_soft, depth + 1))
            return -1;
    for (size_t i = 0; i < n->nalt; i++)
        if (check_names(c, n->alt[i], inner_soft, depth + 1))
            return -1;
    return 0;
}

int jparse(struct jctx *c, const char *src, struct jnode **root)
{
    struct jparser P = { .c = c, .src = src, .len = strlen(src), .track_line = 1, .track_col = 1 };
    struct nvec body = { 0 };
    if (jp_lex(&P))
        return -1;
    if (parse_body(&P, &body, NULL))
        return -1;
    struct jnode *r = mk(&P, JN_IF);
    if (!r || !(r->a = mk(&P, JN_LIT)))
        return -1;
    r->a->lit = jv_bool(true);
    r->body = body.v;
    r->nbody = body.n;
    for (size_t i = 0; i < body.n; i++)
        if (check_names(c, body.v[i], false, 0))
            return -1;
    *root = r;
    return 0;
}
