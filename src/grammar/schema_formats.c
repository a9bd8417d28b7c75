/* String formats (JSON Schema `format`): for each, the GBNF of a string's
 * contents the grammar allows, and the check the validator runs on a
 * finished string.  The grammar is the format exactly, or a subset of it
 * (email, hostname: bounded labels), or a superset that the check narrows
 * (ipv6, uri: characters, not structure; regex: any string); the check is
 * the format itself.  A format not listed is an annotation (JSON Schema:
 * unknown formats do not fail validation), dropped by schema_norm.c. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_internal.h"

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

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

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
        while (i < n && is_digit(s[i]))
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

static bool valid_date_time(const char *s, size_t n)
{
    return n > 11 && (s[10] == 'T' || s[10] == 't') && valid_date(s, 10) && valid_time(s + 11, n - 11);
}

static bool valid_uuid(const char *s, size_t n)
{
    if (n != 36)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return false;
    }
    return true;
}

/* RFC 1123 host names: labels of letters, digits and inner hyphens, 1-63
 * bytes each, 253 in all; non-ASCII bytes too for idn-hostname. */
static bool hostname_ok(const char *s, size_t n, bool idn)
{
    if (!n || n > 253)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            unsigned char c = (unsigned char)s[i];
            if (!(is_alpha((char)c) || is_digit((char)c) || c == '-' || (idn && c >= 0x80)))
                return false;
            continue;
        }
        size_t len = i - start;
        if (!len || len > 63 || s[start] == '-' || s[i - 1] == '-')
            return false;
        start = i + 1;
    }
    return true;
}

static bool valid_hostname(const char *s, size_t n) { return hostname_ok(s, n, false); }
static bool valid_idn_hostname(const char *s, size_t n) { return hostname_ok(s, n, true); }

static bool email_ok(const char *s, size_t n, bool idn)
{
    const char *at = memchr(s, '@', n);
    if (!at || at == s || at - s > 64 || memchr(at + 1, '@', n - (size_t)(at - s) - 1))
        return false;
    for (const char *p = s; p < at; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c == '(' || c == ')' || c == '<' || c == '>' || c == '[' || c == ']' || c == ',' ||
            c == ';' || c == ':' || c == '\\' || c == '"' || (c >= 0x80 && !idn))
            return false;
    }
    if (s[0] == '.' || at[-1] == '.')
        return false;
    return hostname_ok(at + 1, n - (size_t)(at - s) - 1, idn) && memchr(at + 1, '.', n - (size_t)(at - s) - 1);
}

static bool valid_email(const char *s, size_t n) { return email_ok(s, n, false); }
static bool valid_idn_email(const char *s, size_t n) { return email_ok(s, n, true); }

static bool valid_ipv4(const char *s, size_t n)
{
    int parts = 0;
    size_t i = 0;
    while (parts < 4) {
        size_t j = i;
        int v = 0;
        while (j < n && is_digit(s[j]) && j - i < 3)
            v = v * 10 + (s[j++] - '0');
        if (j == i || v > 255 || (j - i > 1 && s[i] == '0'))
            return false;
        parts++;
        i = j;
        if (parts < 4) {
            if (i >= n || s[i] != '.')
                return false;
            i++;
        }
    }
    return i == n;
}

static bool valid_ipv6(const char *s, size_t n)
{
    char buf[64];
    unsigned char out[16];
    if (n >= sizeof buf || memchr(s, '%', n))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, out) == 1;
}

/* RFC 3986 characters: unreserved, reserved, and %XX escapes; `iri` also
 * non-ASCII bytes.  A URI has a scheme; a reference may be relative. */
static bool uri_chars_ok(const char *s, size_t n, bool iri)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
                return false;
            i += 2;
        } else if (!(is_alpha((char)c) || is_digit((char)c) || strchr("-._~:/?#[]@!$&'()*+,;=", c) ||
                     (iri && c >= 0x80)) || c == 0) {
            return false;
        }
    }
    return true;
}

static bool has_scheme(const char *s, size_t n)
{
    if (!n || !is_alpha(s[0]))
        return false;
    for (size_t i = 1; i < n; i++) {
        if (s[i] == ':')
            return true;
        if (!(is_alpha(s[i]) || is_digit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
            return false;
    }
    return false;
}

/* A reference without a scheme is relative: its first path segment (up to
 * "/", "?" or "#") has no ":" (RFC 3986's path-noscheme: "://" is neither). */
static bool reference_ok(const char *s, size_t n)
{
    if (has_scheme(s, n))
        return true;
    for (size_t i = 0; i < n && s[i] && !strchr("/?#", s[i]); i++)
        if (s[i] == ':')
            return false;
    return true;
}

/* RFC 6570: literals (no controls, space or "'%<>\\^`{|}, %XX escapes)
 * and expressions: "{", an operator or none, variable names and their
 * modifiers, "}"; braces never nest. */
static bool valid_uri_template(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
                return false;
            i += 2;
        } else if (c == '{') {
            size_t j = i + 1;
            if (j < n && strchr("+#./;?&=,!@|", s[j]) && s[j])
                j++;
            size_t start = j;
            while (j < n && s[j] && (is_alpha(s[j]) || is_digit(s[j]) || strchr("_.%,:*", s[j])))
                j++;
            if (j == start || j >= n || s[j] != '}')
                return false;
            i = j;
        } else if (c <= 0x20 || c == 0x7F || strchr("\"'<>\\^`{|}", c)) {
            return false;
        }
    }
    return true;
}

static bool valid_uri(const char *s, size_t n) { return has_scheme(s, n) && uri_chars_ok(s, n, false); }
static bool valid_uri_reference(const char *s, size_t n) { return reference_ok(s, n) && uri_chars_ok(s, n, false); }
static bool valid_iri(const char *s, size_t n) { return has_scheme(s, n) && uri_chars_ok(s, n, true); }
static bool valid_iri_reference(const char *s, size_t n) { return reference_ok(s, n) && uri_chars_ok(s, n, true); }

/* Base64 (OpenAPI's `byte`): groups of four, padding only at the end. */
static bool valid_byte(const char *s, size_t n)
{
    if (n % 4)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '=') {
            if (i < n - 2 || (i == n - 2 && s[n - 1] != '='))
                return false;
        } else if (!(is_alpha(c) || is_digit(c) || c == '+' || c == '/')) {
            return false;
        }
    }
    return true;
}

/* Durations (RFC 3339 Appendix A, ISO 8601): P, then weeks alone, or
 * date units (Y M D) and/or T and time units (H M S), each unit at most
 * once and in that order, at least one after P and after T. */
static bool valid_duration(const char *s, size_t n)
{
    static const char date_units[] = "YMD", time_units[] = "HMS";
    size_t i = 1;
    if (n < 3 || s[0] != 'P')
        return false;
    for (int part = 0; part < 2; part++) {
        const char *units = part ? time_units : date_units;
        if (part) {
            if (i == n)
                return true;
            if (s[i++] != 'T' || i == n)
                return false;
        }
        int last = -1;
        while (i < n && s[i] != 'T') {
            size_t j = i;
            while (j < n && is_digit(s[j]))
                j++;
            if (j == i || j == n || !s[j])
                return false;
            if (!part && s[j] == 'W') /* weeks stand alone */
                return i == 1 && j + 1 == n;
            const char *u = strchr(units, s[j]);
            if (!u || (int)(u - units) <= last)
                return false;
            last = (int)(u - units);
            i = j + 1;
        }
        if (part && last < 0)
            return false;
    }
    return i == n;
}

static bool valid_json_pointer(const char *s, size_t n)
{
    if (n && s[0] != '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '~' && (i + 1 >= n || (s[i + 1] != '0' && s[i + 1] != '1')))
            return false;
    return true;
}

static bool valid_relative_json_pointer(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_digit(s[i]))
        i++;
    if (!i || (i > 1 && s[0] == '0'))
        return false;
    return (i + 1 == n && s[i] == '#') || valid_json_pointer(s + i, n - i);
}

static bool valid_regex(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return false;
    memcpy(p, s, n);
    p[n] = '\0';
    bool ok = strlen(p) == n && sp_schema_pattern_ok(p);
    free(p);
    return ok;
}

#define DATE_GBNF "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
#define TIME_GBNF \
    "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? " \
    "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"
#define LABEL_GBNF "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )?"
#define OCTET_GBNF "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )"
/* URI characters as a JSON string spells them (no quote or backslash) */
#define URI_CHAR_GBNF "( [A-Za-z0-9._~:/?#@!$&'()*+,;=\\[\\]-] | \"%\" hex hex )"
/* the first segment of a relative reference: no ":", "/", "?" or "#" */
#define URI_SEG_GBNF "( [A-Za-z0-9._~@!$&'()*+,;=\\[\\]-] | \"%\" hex hex )"
#define IRI_SEG_GBNF "( [A-Za-z0-9._~@!$&'()*+,;=\\[\\]\\u00A0-\\U0010FFFF-] | \"%\" hex hex )"
#define IRI_CHAR_GBNF "( [A-Za-z0-9._~:/?#@!$&'()*+,;=\\[\\]\\u00A0-\\U0010FFFF-] | \"%\" hex hex )"
#define DIGITS_GBNF "[0-9]{1,9}"

static const struct sp_schema_format formats[] = {
    {"date", DATE_GBNF, valid_date},
    {"time", TIME_GBNF, valid_time},
    {"date-time", DATE_GBNF " \"T\" " TIME_GBNF, valid_date_time},
    {"duration",
     "\"P\" ( " DIGITS_GBNF " \"W\" | ( " DIGITS_GBNF " \"Y\" ( " DIGITS_GBNF " \"M\" )? ( " DIGITS_GBNF " \"D\" )? | "
     DIGITS_GBNF " \"M\" ( " DIGITS_GBNF " \"D\" )? | " DIGITS_GBNF " \"D\" ) dur-time? | dur-time )",
     valid_duration},
    {"uuid", "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}", valid_uuid},
    /* a bounded subset: a 1-32 character local part, two or three domain labels */
    {"email", "[a-zA-Z0-9_+-] ( [a-zA-Z0-9._+-]{0,30} [a-zA-Z0-9_+-] )? \"@\" " LABEL_GBNF " ( \".\" " LABEL_GBNF
              " )? \".\" [a-zA-Z]{2,12}", valid_email},
    {"idn-email", "[a-zA-Z0-9_+-] ( [a-zA-Z0-9._+-]{0,30} [a-zA-Z0-9_+-] )? \"@\" " LABEL_GBNF " ( \".\" "
                  LABEL_GBNF " )? \".\" [a-zA-Z]{2,12}", valid_idn_email},
    /* a subset: one to four labels of at most 32 characters */
    {"hostname", LABEL_GBNF " ( \".\" " LABEL_GBNF " ){0,3}", valid_hostname},
    {"idn-hostname", LABEL_GBNF " ( \".\" " LABEL_GBNF " ){0,3}", valid_idn_hostname},
    {"ipv4", OCTET_GBNF " \".\" " OCTET_GBNF " \".\" " OCTET_GBNF " \".\" " OCTET_GBNF, valid_ipv4},
    /* a superset (groups of hex digits and colons, an IPv4 tail) */
    {"ipv6", "( hex{1,4} )? ( \":\" ( hex{1,4} )? ){2,7} ( \".\" [0-9]{1,3} ){0,3}", valid_ipv6},
    {"uri", "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \":\" " URI_CHAR_GBNF "*", valid_uri},
    {"uri-reference",
     "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \":\" " URI_CHAR_GBNF "* | " URI_SEG_GBNF "* ( [/?#] " URI_CHAR_GBNF "* )?",
     valid_uri_reference},
    /* an operator's character is one, never a variable's first ("{,}" is
     * not a template: the check reads "," as the operator) */
    {"uri-template",
     "( [^\\x00-\\x20\\x7F\\\"'%<>\\\\^`{|}] | \"%\" hex hex | \"{\" ( [+#./;?&=,!@|] [A-Za-z0-9_.%,:*]+ | [A-Za-z0-9_%:*] [A-Za-z0-9_.%,:*]* ) \"}\" )*",
     valid_uri_template},
    {"iri", "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \":\" " IRI_CHAR_GBNF "*", valid_iri},
    {"iri-reference",
     "[a-zA-Z] [a-zA-Z0-9+.-]{0,15} \":\" " IRI_CHAR_GBNF "* | " IRI_SEG_GBNF "* ( [/?#] " IRI_CHAR_GBNF "* )?",
     valid_iri_reference},
    {"byte", "( [A-Za-z0-9+/]{4} )* ( [A-Za-z0-9+/]{2} \"==\" | [A-Za-z0-9+/]{3} \"=\" )?", valid_byte},
    {"json-pointer", "( \"/\" ( [^/~\"\\\\\\x00-\\x1F] | \"~\" [01] )* )*", valid_json_pointer},
    {"relative-json-pointer",
     "( \"0\" | [1-9] [0-9]{0,8} ) ( \"#\" | ( \"/\" ( [^/~\"\\\\\\x00-\\x1F] | \"~\" [01] )* )* )",
     valid_relative_json_pointer},
    /* any string; the check compiles it */
    {"regex", "json-char*", valid_regex},
};

/* The time part of a duration, a rule of its own (named twice above). */
const char sp_schema_format_rules[] =
    "dur-time ::= \"T\" ( " DIGITS_GBNF " \"H\" ( " DIGITS_GBNF " \"M\" )? ( " DIGITS_GBNF " \"S\" )? | " DIGITS_GBNF
    " \"M\" ( " DIGITS_GBNF " \"S\" )? | " DIGITS_GBNF " \"S\" )\n";

const struct sp_schema_format *sp_schema_format_find(const char *name)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(formats[i].name, name))
            return &formats[i];
    return NULL;
}

bool sp_schema_format_known(const char *name) { return sp_schema_format_find(name) != NULL; }

size_t sp_schema_format_list(char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0] && cap; i++) {
        int k = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", formats[i].name);
        if (k < 0 || (size_t)k >= cap - n)
            break;
        n += (size_t)k;
    }
    return n;
}
