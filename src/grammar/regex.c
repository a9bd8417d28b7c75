/* A regular-expression subset (JSON Schema `pattern`) -> a GBNF fragment
 * that spells matching JSON string contents (escaped as JSON needs).
 *
 * Supported: literals, `.`, classes [...] with ranges, negation and the
 * escapes \d \w \s \D \W \S, groups ( ) and (?: ), alternation, the
 * quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings),
 * anchors ^ at the start and $ at the end.  A pattern not anchored at an end
 * may have any characters there (JSON Schema patterns search).  Anything
 * else (backreferences, lookaround, \b, inline flags) is reported, never
 * approximated (the compiler then leaves the string to the validator).
 *
 * Characters that JSON escapes are left out of classes and `.` (a subset of
 * the matching strings is still correct); a literal quote or backslash is
 * written as its JSON escape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_internal.h"

struct rx {
    const char *s;
    size_t n, i;
    struct sp_gstr *out;
    const char *err;
    int depth;
    double spelled; /* character positions the fragment spells (a repetition's copies counted) */
};

/* Characters any JSON string may hold unescaped. */
#define PLAIN_CHAR "[^\"\\\\\\x00-\\x1F]"

static void lit_char(struct rx *r, unsigned char c)
{
    if (c == '"')
        sp_gstr_add(r->out, "\"\\\\\\\"\"");
    else if (c == '\\')
        sp_gstr_add(r->out, "\"\\\\\\\\\"");
    else if (c < 0x20)
        sp_gstr_addf(r->out, "\"\\\\u%04x\"", c);
    else if (c >= 0x80)
        sp_gstr_addf(r->out, "\"\\x%02x\"", c);
    else
        sp_gstr_addf(r->out, "\"%c\"", c);
}

/* A class item for GBNF inside [...]: escape what the class syntax needs. */
static void class_char(struct sp_gstr *o, unsigned long c)
{
    if (c == ']' || c == '[' || c == '\\' || c == '-' || c == '^' || c == '"')
        sp_gstr_addf(o, "\\%c", (char)c);
    else if (c < 0x20 || c == 0x7F)
        sp_gstr_addf(o, "\\x%02lX", c);
    else if (c >= 0x10000)
        sp_gstr_addf(o, "\\U%08lX", c);
    else if (c >= 0x80)
        sp_gstr_addf(o, "\\u%04lX", c);
    else
        sp_gstr_addf(o, "%c", (char)c);
}

/* Adds [lo, hi] to a positive class minus what JSON escapes (controls,
 * quote, backslash): those would need a different spelling. */
static void class_range(struct sp_gstr *o, unsigned long lo, unsigned long hi)
{
    static const unsigned long cut[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (size_t k = 0; k < 3 && lo <= hi; k++) {
        if (hi < cut[k][0] || lo > cut[k][1])
            continue;
        if (lo < cut[k][0])
            class_range(o, lo, cut[k][0] - 1);
        lo = cut[k][1] + 1;
    }
    if (lo > hi)
        return;
    class_char(o, lo);
    if (hi != lo) {
        sp_gstr_add(o, "-");
        class_char(o, hi);
    }
}

static const char *shorthand(char c)
{
    switch (c) {
    case 'd': return "0-9";
    case 'w': return "a-zA-Z0-9_";
    case 's': return " \\t\\n\\r";
    default: return NULL;
    }
}

static long utf8_take(struct rx *r)
{
    const unsigned char *s = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || (size_t)k > left)
        return -1;
    long cp = k == 1 ? c : k == 2 ? (c & 0x1F) : k == 3 ? (c & 0x0F) : (c & 0x07);
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[j] & 0x3F);
    }
    r->i += (size_t)k;
    return cp;
}

static void rx_alt(struct rx *r);

static void rx_class(struct rx *r)
{
    r->i++; /* [ */
    bool neg = false;
    if (r->i < r->n && r->s[r->i] == '^') {
        neg = true;
        r->i++;
    }
    struct sp_gstr items = {0};
    bool first = true;
    for (;;) {
        if (r->i >= r->n) {
            r->err = "unterminated character class";
            break;
        }
        char c = r->s[r->i];
        if (c == ']' && !first) {
            r->i++;
            break;
        }
        first = false;
        long lo;
        if (c == '\\') {
            if (r->i + 1 >= r->n) {
                r->err = "pattern ends with a backslash";
                break;
            }
            char e = r->s[r->i + 1];
            r->i += 2;
            const char *sh = shorthand(e);
            if (sh) { /* JSON escapes \t \n \r: a positive class keeps the space only */
                sp_gstr_add(&items, e == 's' && !neg ? " " : sh);
                continue;
            }
            if (e == 'D' || e == 'W' || e == 'S') {
                r->err = "negated shorthand (\\D, \\W, \\S) inside a class";
                break;
            }
            lo = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (unsigned char)e;
            if ((e >= 'a' && e <= 'z' && !strchr("ntr", e)) || (e >= 'A' && e <= 'Z') ||
                (e >= '0' && e <= '9')) {
                r->err = "an escape inside a class that the subset does not support";
                break;
            }
        } else {
            lo = utf8_take(r);
            if (lo < 0) {
                r->err = "invalid UTF-8";
                break;
            }
        }
        long hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                if (r->i + 1 >= r->n) {
                    r->err = "pattern ends with a backslash";
                    break;
                }
                hi = (unsigned char)r->s[r->i + 1];
                r->i += 2;
            } else {
                hi = utf8_take(r);
            }
            if (hi < lo) {
                r->err = "a reversed range in a class";
                break;
            }
        }
        if (neg) {
            class_char(&items, (unsigned long)lo);
            if (hi != lo) {
                sp_gstr_add(&items, "-");
                class_char(&items, (unsigned long)hi);
            }
        } else {
            class_range(&items, (unsigned long)lo, (unsigned long)hi);
        }
    }
    if (!r->err) {
        /* never an unescaped quote, backslash or control character */
        if (neg)
            sp_gstr_addf(r->out, "[^\"\\\\\\x00-\\x1F%s]", items.p ? items.p : "");
        else if (items.n)
            sp_gstr_addf(r->out, "[%s]", items.p);
        else
            r->err = "a class with no character a JSON string holds unescaped";
    }
    free(items.p);
}

static void rx_atom(struct rx *r)
{
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else {
                r->err = "lookaround or named groups";
                return;
            }
        }
        if (++r->depth > 64) {
            r->err = "groups nested too deeply";
            return;
        }
        sp_gstr_add(r->out, "( ");
        rx_alt(r);
        r->depth--;
        if (r->err)
            return;
        if (r->i >= r->n || r->s[r->i] != ')') {
            r->err = "unbalanced parenthesis";
            return;
        }
        r->i++;
        sp_gstr_add(r->out, " )");
    } else if (c == '[') {
        rx_class(r);
    } else if (c == '.') {
        r->i++;
        sp_gstr_add(r->out, "[^\"\\\\\\x00-\\x1F]");
    } else if (c == '\\') {
        if (r->i + 1 >= r->n) {
            r->err = "pattern ends with a backslash";
            return;
        }
        char e = r->s[r->i + 1];
        r->i += 2;
        const char *sh = shorthand(e);
        if (sh) {
            sp_gstr_addf(r->out, "[%s]", e == 's' ? " " : sh);
        } else if (e == 'D') {
            sp_gstr_add(r->out, "[^0-9\"\\\\\\x00-\\x1F]");
        } else if (e == 'W') {
            sp_gstr_add(r->out, "[^a-zA-Z0-9_\"\\\\\\x00-\\x1F]");
        } else if (e == 'S') {
            sp_gstr_add(r->out, "[^ \\t\\n\\r\"\\\\\\x00-\\x1F]");
        } else if (e == 'n' || e == 't' || e == 'r') {
            lit_char(r, e == 'n' ? '\n' : e == 't' ? '\t' : '\r');
        } else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            r->err = "an escape the subset does not support (backreference, \\b, \\p ...)";
        } else {
            lit_char(r, (unsigned char)e);
        }
    } else if (c == '^' || c == '$') {
        r->err = "anchors other than ^ at the start and $ at the end";
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        r->err = "a quantifier with nothing to repeat";
    } else {
        size_t at = r->i;
        long cp = utf8_take(r);
        if (cp < 0) {
            r->err = "invalid UTF-8";
            return;
        }
        for (size_t k = at; k < r->i; k++)
            lit_char(r, (unsigned char)r->s[k]);
    }
}

/* Reads a quantifier after an atom; returns how many copies of the atom
 * the GBNF spells (1 without a quantifier). */
static unsigned long rx_quant(struct rx *r)
{
    unsigned long copies = 1;
    if (r->i >= r->n)
        return copies;
    char c = r->s[r->i];
    if (c == '*' || c == '+' || c == '?') {
        r->i++;
        copies = c == '+' ? 2 : 1;
        sp_gstr_addf(r->out, "%c", c);
    } else if (c == '{') {
        size_t j = r->i + 1;
        unsigned long m = 0, x;
        bool any = false, comma = false, anyx = false;
        x = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && m < 100000) {
            m = m * 10 + (unsigned long)(r->s[j++] - '0');
            any = true;
        }
        if (j < r->n && r->s[j] == ',') {
            comma = true;
            j++;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && x < 100000) {
                x = x * 10 + (unsigned long)(r->s[j++] - '0');
                anyx = true;
            }
        }
        if (!any || j >= r->n || r->s[j] != '}') {
            r->err = "a malformed {m,n} quantifier";
            return copies;
        }
        if (m > 1000 || (anyx && x > 1000)) {
            r->err = "a repetition count above 1000";
            return copies;
        }
        copies = !comma ? m : !anyx ? m + 1 : (x > m ? x : m);
        r->i = j + 1;
        if (!comma)
            sp_gstr_addf(r->out, "{%lu}", m);
        else if (!anyx)
            sp_gstr_addf(r->out, "{%lu,}", m);
        else
            sp_gstr_addf(r->out, "{%lu,%lu}", m, x);
    } else {
        return copies;
    }
    if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+')) {
        if (r->s[r->i] == '+') {
            r->err = "possessive quantifiers";
            return copies;
        }
        r->i++; /* lazy: the same strings match */
    }
    if (r->i < r->n && strchr("*+?{", r->s[r->i]) && r->s[r->i] != '{')
        r->err = "a quantifier after a quantifier";
    return copies;
}

static void rx_seq(struct rx *r)
{
    bool empty = true;
    while (!r->err && r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n && r->depth == 0)
            break;
        sp_gstr_add(r->out, " ( ");
        double before = r->spelled;
        rx_atom(r);
        if (r->err)
            return;
        sp_gstr_add(r->out, " )");
        double atom = r->spelled > before ? r->spelled - before : 1; /* a group's, or one character */
        r->spelled = before + atom * (double)rx_quant(r);
        empty = false;
    }
    if (empty)
        sp_gstr_add(r->out, " \"\" ");
}

static void rx_alt(struct rx *r)
{
    rx_seq(r);
    while (!r->err && r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        sp_gstr_add(r->out, " | ");
        rx_seq(r);
    }
}

const char *sp_regex_to_gbnf(const char *pattern, size_t len, struct sp_gstr *out, double *spelled)
{
    struct rx r = {pattern, len, 0, out, NULL, 0, 0};
    bool start = len > 0 && pattern[0] == '^';
    bool end = len > 0 && pattern[len - 1] == '$' && (len < 2 || pattern[len - 2] != '\\');
    if (start)
        r.i = 1;
    if (!start)
        sp_gstr_add(out, PLAIN_CHAR "* ");
    sp_gstr_add(out, "( ");
    rx_alt(&r);
    if (!r.err && r.i < len && !(end && r.i == len - 1))
        r.err = r.s[r.i] == ')' ? "unbalanced parenthesis" : "anchors other than ^ at the start and $ at the end";
    sp_gstr_add(out, " )");
    if (!end)
        sp_gstr_add(out, " " PLAIN_CHAR "*");
    if (spelled)
        *spelled = r.spelled;
    if (out->failed)
        return "out of memory";
    return r.err;
}
