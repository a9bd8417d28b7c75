/* GBNF text -> one byte-level NFA per rule (see grammar_internal.h).
 *
 * Syntax (llama.cpp's GBNF): `name ::= alternatives`, names of letters,
 * digits, '-' and '_'; `|` alternation, `( )` grouping, postfix `*` `+` `?`
 * `{m}` `{m,}` `{m,n}`; "literals" and [classes] ([^...] negated, a-z
 * ranges) with the escapes \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH
 * \UHHHHHHHH; `.` any character; `#` comments to the end of the line.  A
 * rule runs until the next `name ::=`, so line breaks are free.
 *
 * This file parses the text into rules (gbnf_internal.h); gbnf_nfa.c builds
 * their NFA. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/gbnf_internal.h"

#define MAX_REPEAT 10000u

/* Line and column of byte `at`, counted on from the last one asked when
 * that was before it (the parser asks in order: linear, not quadratic). */
static void pos_of(struct parser *p, size_t at, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    size_t from = 0;
    if (p->at_line && p->at_pos <= at) {
        from = p->at_pos;
        l = p->at_line;
        c = p->at_col;
    }
    for (size_t i = from; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    if (at <= p->len && at >= p->at_pos) { /* only forward: earlier asks restart from 0 */
        p->at_pos = at;
        p->at_line = l;
        p->at_col = c;
    }
    *line = l;
    *col = c;
}

static void fail_at(struct parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t l, c;
    pos_of(p, at, &l, &c);
    sp_error_set(SP_ERR_ARG, "grammar: line %u, column %u: %s", l, c, msg);
    p->failed = true;
}

static int peek(const struct parser *p, size_t k)
{
    return p->pos + k < p->len ? (unsigned char)p->s[p->pos + k] : -1;
}

static void skip_space(struct parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static size_t name_end(const struct parser *p, size_t at)
{
    while (at < p->len && is_name_char((unsigned char)p->s[at]))
        at++;
    return at;
}

/* Is there `name ::=` at the current position? */
static bool at_definition(const struct parser *p)
{
    size_t e = name_end(p, p->pos);
    if (e == p->pos)
        return false;
    while (e < p->len && (p->s[e] == ' ' || p->s[e] == '\t'))
        e++;
    return e + 3 <= p->len && !memcmp(p->s + e, "::=", 3);
}

static uint64_t name_hash(const char *name, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)name[i]) * 0x100000001b3ull;
    return sp_grammar_mix(h);
}

/* Doubles the rule-name table (every rule re-placed).  False on no memory. */
static bool rtab_grow(struct parser *p)
{
    uint32_t cap = p->rtab_cap ? p->rtab_cap * 2 : 256;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return false;
    const struct rule *r = p->rules.p;
    for (size_t i = 0; i < p->rules.n; i++) {
        uint32_t j = (uint32_t)name_hash(r[i].name, strlen(r[i].name)) & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)i + 1;
    }
    free(p->rtab);
    p->rtab = t;
    p->rtab_cap = cap;
    return true;
}

/* The index of the rule called name[0..n), added (undefined) when new. */
static uint32_t rule_index(struct parser *p, const char *name, size_t n, size_t at)
{
    if ((p->rules.n + 1) * 2 > p->rtab_cap && !rtab_grow(p)) {
        nomem(p);
        return 0;
    }
    struct rule *r = p->rules.p;
    uint32_t j = (uint32_t)name_hash(name, n) & (p->rtab_cap - 1);
    for (; p->rtab[j]; j = (j + 1) & (p->rtab_cap - 1)) {
        const char *k = r[p->rtab[j] - 1].name;
        if (!strncmp(k, name, n) && !k[n])
            return p->rtab[j] - 1;
    }
    struct rule nr = {0};
    nr.name = strndup(name, n);
    nr.body = UINT32_MAX;
    pos_of(p, at, &nr.line, &nr.col);
    if (!nr.name || !vec_push(&p->rules, &nr)) {
        free(nr.name);
        nomem(p);
        return 0;
    }
    p->rtab[j] = (uint32_t)p->rules.n;
    return (uint32_t)(p->rules.n - 1);
}

static uint32_t new_ast(struct parser *p, uint8_t kind)
{
    struct ast a = {0};
    a.kind = kind;
    if (!vec_push(&p->ast, &a)) {
        nomem(p);
        return 0;
    }
    return (uint32_t)(p->ast.n - 1);
}


/* One UTF-8 character of the source (raw, not escaped); -1 when invalid. */
static long take_utf8(struct parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return -1;
    long cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const long min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > (long)MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    p->pos += (size_t)n;
    return cp;
}

static long hex_digits(struct parser *p, int n)
{
    long v = 0;
    for (int i = 0; i < n; i++) {
        int c = peek(p, 0);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            fail_at(p, p->pos, "expected %d hex digits", n);
            return -1;
        }
        v = v * 16 + d;
        p->pos++;
    }
    return v;
}

/* One character of a literal or class: a codepoint, with escapes.  *raw_byte
 * is set when the escape is \xHH (a byte, not a codepoint, above 0x7F). */
static long parse_char(struct parser *p, bool *raw_byte)
{
    size_t at = p->pos;
    *raw_byte = false;
    if (p->pos >= p->len) {
        fail_at(p, at, "unexpected end of grammar");
        return -1;
    }
    if (p->s[p->pos] != '\\') {
        long cp = take_utf8(p);
        if (cp < 0)
            fail_at(p, at, "invalid UTF-8");
        return cp;
    }
    p->pos++;
    int c = peek(p, 0);
    p->pos++;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
    case '.': case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
        return c;
    case 'x': {
        long v = hex_digits(p, 2);
        *raw_byte = v >= 0x80;
        return v;
    }
    case 'u': return hex_digits(p, 4);
    case 'U': {
        long v = hex_digits(p, 8);
        if (v > (long)MAX_CP) {
            fail_at(p, at, "codepoint U+%lX is beyond U+10FFFF", v);
            return -1;
        }
        return v;
    }
    default:
        fail_at(p, at, "unknown escape '\\%c'", c >= 0x20 && c < 0x7F ? c : '?');
        return -1;
    }
}

static bool put_utf8(struct parser *p, long cp, bool raw_byte)
{
    char b[4];
    int n;
    if (raw_byte || cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    for (int i = 0; i < n; i++)
        if (!vec_push(&p->bytes, &b[i])) {
            nomem(p);
            return false;
        }
    return true;
}

static uint32_t parse_alt(struct parser *p, bool nested);

static uint32_t parse_literal(struct parser *p)
{
    size_t at = p->pos++;
    uint32_t a = new_ast(p, A_LIT);
    uint32_t off = (uint32_t)p->bytes.n;
    while (!p->failed) {
        if (p->pos >= p->len) {
            fail_at(p, at, "unterminated string literal");
            break;
        }
        if (p->s[p->pos] == '"') {
            p->pos++;
            break;
        }
        bool raw;
        long cp = parse_char(p, &raw);
        if (cp >= 0)
            put_utf8(p, cp, raw);
    }
    if (!p->failed) {
        ast_at(p, a)->off = off;
        ast_at(p, a)->n = (uint32_t)p->bytes.n - off;
    }
    return a;
}

static bool push_range(struct parser *p, uint32_t lo, uint32_t hi)
{
    if (!vec_push(&p->ranges, &lo) || !vec_push(&p->ranges, &hi)) {
        nomem(p);
        return false;
    }
    return true;
}

static uint32_t parse_class(struct parser *p)
{
    size_t at = p->pos++;
    uint32_t a = new_ast(p, A_CLASS);
    uint32_t off = (uint32_t)p->ranges.n;
    bool neg = false;
    if (peek(p, 0) == '^') {
        neg = true;
        p->pos++;
    }
    while (!p->failed) {
        if (p->pos >= p->len) {
            fail_at(p, at, "unterminated character class");
            break;
        }
        if (p->s[p->pos] == ']') {
            p->pos++;
            break;
        }
        bool raw;
        size_t c_at = p->pos;
        long lo = parse_char(p, &raw), hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
            p->pos++;
            hi = parse_char(p, &raw);
            if (!p->failed && hi < lo)
                fail_at(p, c_at, "character range is reversed (U+%04lX-U+%04lX)", lo, hi);
        }
        if (!p->failed)
            push_range(p, (uint32_t)lo, (uint32_t)hi);
    }
    if (!p->failed) {
        struct ast *x = ast_at(p, a);
        x->off = off / 2;
        x->n = (uint32_t)(p->ranges.n - off) / 2;
        x->neg = neg;
    }
    return a;
}

static bool parse_uint(struct parser *p, uint32_t *out)
{
    size_t at = p->pos;
    uint64_t v = 0;
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        v = v * 10 + (uint64_t)(peek(p, 0) - '0');
        if (v > MAX_REPEAT) {
            fail_at(p, at, "repetition count is larger than %u", MAX_REPEAT);
            return false;
        }
        p->pos++;
    }
    if (p->pos == at) {
        fail_at(p, at, "expected a number");
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static uint32_t wrap_rep(struct parser *p, uint32_t kid, uint32_t min, uint32_t max)
{
    uint32_t a = new_ast(p, A_REP);
    if (!p->failed) {
        ast_at(p, a)->kid = kid;
        ast_at(p, a)->min = min;
        ast_at(p, a)->max = max;
    }
    return a;
}

static uint32_t parse_item(struct parser *p, bool nested)
{
    size_t at = p->pos;
    int c = peek(p, 0);
    uint32_t a = 0;
    if (c == '"') {
        a = parse_literal(p);
    } else if (c == '[') {
        a = parse_class(p);
    } else if (c == '.') {
        p->pos++;
        a = new_ast(p, A_CLASS);
        uint32_t off = (uint32_t)p->ranges.n / 2;
        if (push_range(p, 0, MAX_CP) && !p->failed) {
            ast_at(p, a)->off = off;
            ast_at(p, a)->n = 1;
        }
    } else if (c == '(') {
        if (++p->depth > MAX_DEPTH) {
            fail_at(p, at, "groups nested deeper than %d", MAX_DEPTH);
            return 0;
        }
        p->pos++;
        a = parse_alt(p, true);
        p->depth--;
        skip_space(p);
        if (!p->failed && peek(p, 0) != ')')
            fail_at(p, p->pos, "expected ')' to close the group opened at this line's column");
        p->pos++;
    } else if (is_name_char(c)) {
        size_t e = name_end(p, p->pos);
        uint32_t r = rule_index(p, p->s + p->pos, e - p->pos, at);
        p->pos = e;
        a = new_ast(p, A_REF);
        if (!p->failed)
            ast_at(p, a)->ref = r;
    } else {
        fail_at(p, at, c < 0 ? "unexpected end of grammar" : "unexpected character '%c'",
                c >= 0x20 && c < 0x7F ? c : '?');
        return 0;
    }
    (void)nested;
    /* postfix operators, possibly several: a** is (a*)* */
    for (;;) {
        if (p->failed)
            return 0;
        size_t op_at = p->pos;
        c = peek(p, 0);
        if (c == '*') {
            p->pos++;
            a = wrap_rep(p, a, 0, UINT32_MAX);
        } else if (c == '+') {
            p->pos++;
            a = wrap_rep(p, a, 1, UINT32_MAX);
        } else if (c == '?') {
            p->pos++;
            a = wrap_rep(p, a, 0, 1);
        } else if (c == '{') {
            uint32_t mn, mx;
            p->pos++;
            skip_space(p);
            if (!parse_uint(p, &mn))
                return 0;
            skip_space(p);
            mx = mn;
            if (peek(p, 0) == ',') {
                p->pos++;
                skip_space(p);
                mx = UINT32_MAX;
                if (peek(p, 0) != '}' && !parse_uint(p, &mx))
                    return 0;
                skip_space(p);
            }
            if (peek(p, 0) != '}') {
                fail_at(p, p->pos, "expected '}' after the repetition count");
                return 0;
            }
            p->pos++;
            if (mx < mn) {
                fail_at(p, op_at, "repetition {%u,%u} has its maximum below its minimum", mn, mx);
                return 0;
            }
            a = wrap_rep(p, a, mn, mx);
        } else {
            return a;
        }
    }
}

static uint32_t finish_list(struct parser *p, uint8_t kind, const uint32_t *items, size_t n)
{
    if (n == 1 && kind == A_ALT)
        return items[0];
    uint32_t a = new_ast(p, kind);
    uint32_t off = (uint32_t)p->kids.n;
    for (size_t i = 0; i < n && !p->failed; i++)
        if (!vec_push(&p->kids, &items[i]))
            nomem(p);
    if (!p->failed) {
        ast_at(p, a)->off = off;
        ast_at(p, a)->n = (uint32_t)n;
    }
    return a;
}

static uint32_t parse_seq(struct parser *p, bool nested)
{
    struct vec items = {.elem = sizeof(uint32_t)};
    for (;;) {
        skip_space(p);
        int c = peek(p, 0);
        if (p->failed || c < 0 || c == '|' || c == ')' || (!nested && at_definition(p)))
            break;
        uint32_t a = parse_item(p, nested);
        if (!p->failed && !vec_push(&items, &a))
            nomem(p);
    }
    uint32_t a = p->failed ? 0 : finish_list(p, A_SEQ, items.p, items.n);
    free(items.p);
    return a;
}

static uint32_t parse_alt(struct parser *p, bool nested)
{
    struct vec items = {.elem = sizeof(uint32_t)};
    for (;;) {
        uint32_t a = parse_seq(p, nested);
        if (!p->failed && !vec_push(&items, &a))
            nomem(p);
        skip_space(p);
        if (p->failed || peek(p, 0) != '|')
            break;
        p->pos++;
    }
    uint32_t a = p->failed ? 0 : finish_list(p, A_ALT, items.p, items.n);
    free(items.p);
    return a;
}

static void parse_grammar(struct parser *p)
{
    skip_space(p);
    if (p->pos >= p->len) {
        fail_at(p, p->pos, "the grammar is empty");
        return;
    }
    while (!p->failed) {
        skip_space(p);
        if (p->pos >= p->len)
            break;
        size_t at = p->pos;
        size_t e = name_end(p, p->pos);
        if (e == p->pos) {
            fail_at(p, at, "expected a rule name");
            return;
        }
        uint32_t r = rule_index(p, p->s + p->pos, e - p->pos, at);
        p->pos = e;
        skip_space(p);
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3)) {
            fail_at(p, p->pos, "expected '::=' after the rule name");
            return;
        }
        p->pos += 3;
        uint32_t body = parse_alt(p, false);
        if (p->failed)
            return;
        if (peek(p, 0) == ')') {
            fail_at(p, p->pos, "unbalanced ')'");
            return;
        }
        struct rule *rl = (struct rule *)p->rules.p + r;
        if (rl->body != UINT32_MAX) {
            fail_at(p, at, "rule '%s' is defined twice", rl->name);
            return;
        }
        rl->body = body;
        pos_of(p, at, &rl->line, &rl->col);
    }
}

sp_status sp_grammar_nfa_build(struct sp_grammar_nfa *nfa, const char *text, size_t len,
                               const char *root, const char *const *calls)
{
    struct parser p = {0};
    sp_status st = SP_ERR_ARG;
    memset(nfa, 0, sizeof *nfa);
    if (!root)
        root = "root";
    if (len > SP_GRAMMAR_MAX_TEXT)
        return sp_error_set(SP_ERR_ARG, "grammar: %zu bytes is more than the limit of %u", len,
                            SP_GRAMMAR_MAX_TEXT);
    p.s = text ? text : "";
    p.len = text ? len : 0;
    p.ast.elem = sizeof(struct ast);
    p.kids.elem = sizeof(uint32_t);
    p.bytes.elem = 1;
    p.ranges.elem = sizeof(uint32_t);
    p.rules.elem = sizeof(struct rule);
    if (memchr(p.s, 0, p.len)) {
        fail_at(&p, (size_t)((const char *)memchr(p.s, 0, p.len) - p.s), "NUL byte in the grammar");
        goto done;
    }
    parse_grammar(&p);
    if (p.failed)
        goto done;
    struct rule *rules = p.rules.p;
    uint32_t n_rules = (uint32_t)p.rules.n, root_id = UINT32_MAX;
    for (uint32_t r = 0; r < n_rules; r++) {
        if (rules[r].body == UINT32_MAX) {
            sp_error_set(SP_ERR_ARG, "grammar: line %u, column %u: rule '%s' is used but not defined",
                         rules[r].line, rules[r].col, rules[r].name);
            goto done;
        }
        if (!strcmp(rules[r].name, root))
            root_id = r;
    }
    if (root_id == UINT32_MAX) {
        sp_error_set(SP_ERR_ARG, "grammar: there is no rule named '%s' to start from", root);
        goto done;
    }
    st = sp_grammar_nfa_construct(&p, nfa, root_id, calls);
done:
    if (st != SP_OK && !p.failed && st == SP_ERR_ARG && !sp_error_message()[0])
        sp_error_set(SP_ERR_ARG, "grammar: invalid");
    for (size_t i = 0; i < p.rules.n; i++)
        free(((struct rule *)p.rules.p)[i].name);
    free(p.ast.p);
    free(p.kids.p);
    free(p.bytes.p);
    free(p.ranges.p);
    free(p.rules.p);
    free(p.rtab);
    return st;
}
