/* The formats models write tool calls in: choosing one from a template, the
 * grammar of an answer's calls, and reading calls back out of the text. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "toolcall/toolcall_internal.h"

struct sp_toolcall_parser;
static sp_status json_grammar(const struct sp_toolcall *tc, char **gbnf);
static sp_status harmony_grammar(const struct sp_toolcall *tc, char **gbnf);
static void json_byte(struct sp_toolcall_parser *p, char c);
static void harmony_byte(struct sp_toolcall_parser *p, char c);

/* Checked in order; the last row (no marker) is the fallback for templates
 * that know no tools.  Markers are what each family's template writes.
 * Harmony (gpt-oss): the calls are messages of the commentary channel,
 *   [<|channel|>commentary] to=functions.NAME[<|channel|>commentary] [<|constrain|>]json<|message|>{ARGS}<|call|>
 * whose analysis messages before them server/reasoning.c takes out; the
 * parser reads the rest from the recipient on (" to=functions."). */
static const struct sp_toolcall_format formats[] = {
    {.name = "harmony", .marker = "<|channel|>", .native = true, .begin = "", .open = "", .close = "", .sep = "",
     .end = "", .args_key = "arguments", .trigger = " to=functions.", .parallel = false, .text_first = true,
     .empty_content = true, .reasoning_alias = "thinking", .grammar = harmony_grammar, .byte = harmony_byte},
    {.name = "mistral", .marker = "[TOOL_CALLS]", .native = true, .begin = "[TOOL_CALLS][", .open = "",
     .close = "", .sep = ", ", .end = "]", .args_key = "arguments", .trigger = "[TOOL_CALLS]", .id_len = 9,
     .parallel = true, .call_id = true, .grammar = json_grammar, .byte = json_byte},
    {.name = "hermes", .marker = "<tool_call>", .native = true, .begin = "", .open = "<tool_call>\n",
     .close = "\n</tool_call>", .sep = "\n", .end = "", .args_key = "arguments", .trigger = "<tool_call>",
     .parallel = true, .grammar = json_grammar, .byte = json_byte},
    {.name = "llama3", .marker = "\"parameters\": dictionary of argument name", .native = true, .begin = "",
     .open = "", .close = "", .sep = "", .end = "", .args_key = "parameters", .trigger = "{\"name\"",
     .grammar = json_grammar, .byte = json_byte},
    {.name = "json", .marker = NULL, .native = false, .begin = "", .open = "", .close = "", .sep = "\n",
     .end = "", .args_key = "arguments", .trigger = "{\"name\"", .parallel = true, .grammar = json_grammar,
     .byte = json_byte},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const struct sp_toolcall_format *sp_toolcall_format_for(const char *tmpl)
{
    for (size_t i = 0; i + 1 < N_FORMATS; i++)
        if (tmpl && strstr(tmpl, formats[i].marker))
            return &formats[i];
    return &formats[N_FORMATS - 1];
}

const char *sp_toolcall_format_name(const struct sp_toolcall_format *f) { return f->name; }

/* ---- the grammar ---- */

/* The answer may hold several calls. */
static bool several(const struct sp_toolcall *tc) { return tc->parallel && tc->choice != SP_TOOLCALL_NAMED; }

/* A GBNF string literal of s (dst holds 2 * strlen(s) + 3 bytes). */
static void gbnf_lit(char *dst, const char *s)
{
    char *o = dst;
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            *o++ = '\\';
            *o++ = *s;
        } else if (*s == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else {
            *o++ = *s;
        }
    }
    *o++ = '"';
    *o = '\0';
}

/* Rewrites local references inside a function's parameters so that they
 * resolve where the parameters sit in the call schema (prefix: a JSON
 * pointer).  Values of enum/const/default/examples are data, not schemas. */
static bool rewrite_refs(json_t *s, const char *prefix, int depth)
{
    if (depth > 64)
        return true;
    if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) if (!rewrite_refs(v, prefix, depth + 1)) return false;
        return true;
    }
    if (!json_is_object(s))
        return true;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "default") || !strcmp(k, "examples"))
            continue;
        if (!strcmp(k, "$ref") && json_is_string(v) && json_string_value(v)[0] == '#') {
            const char *rest = json_string_value(v) + 1;
            size_t n = strlen(prefix) + strlen(rest) + 1;
            char *r = malloc(n);
            if (!r)
                return false;
            snprintf(r, n, "%s%s", prefix, rest);
            int bad = json_string_set(v, r);
            free(r);
            if (bad)
                return false;
        } else if (!rewrite_refs(v, prefix, depth + 1)) {
            return false;
        }
    }
    return true;
}

/* The schema of one CALL of function fn (alternative `alt` of an anyOf, or
 * -1 when alone), as a jansson object. */
static json_t *call_schema(const struct sp_toolcall *tc, const struct sp_toolcall_fn *fn, int alt)
{
    json_error_t jerr;
    json_t *params = json_loads(fn->params, 0, &jerr);
    json_t *props = json_object(), *o = json_object(), *req = json_array(), *name = json_object();
    char prefix[96];
    if (alt >= 0)
        snprintf(prefix, sizeof prefix, "#/anyOf/%d/properties/%s", alt, tc->f->args_key);
    else
        snprintf(prefix, sizeof prefix, "#/properties/%s", tc->f->args_key);
    if (!params || !props || !o || !req || !name || !rewrite_refs(params, prefix, 0)) {
        json_decref(params);
        json_decref(props);
        json_decref(o);
        json_decref(req);
        json_decref(name);
        return NULL;
    }
    json_object_set_new(name, "const", json_string(fn->name));
    json_object_set_new(props, "name", name);
    json_object_set_new(props, tc->f->args_key, params);
    if (tc->f->call_id) {
        json_t *id = json_object();
        char pat[32];
        snprintf(pat, sizeof pat, "^[a-zA-Z0-9]{%d}$", tc->f->id_len);
        json_object_set_new(id, "type", json_string("string"));
        json_object_set_new(id, "pattern", json_string(pat));
        json_object_set_new(props, "id", id);
    }
    json_array_append_new(req, json_string("name"));
    json_array_append_new(req, json_string(tc->f->args_key));
    json_object_set_new(o, "type", json_string("object"));
    json_object_set_new(o, "properties", props);
    json_object_set_new(o, "required", req);
    json_object_set_new(o, "additionalProperties", json_false());
    return o;
}

sp_status sp_toolcall_grammar(const struct sp_toolcall *tc, char **gbnf, const char **trigger)
{
    *gbnf = NULL;
    *trigger = NULL;
    if (tc->choice == SP_TOOLCALL_NONE)
        return sp_error_set(SP_ERR_ARG, "tool_choice none has no grammar");
    sp_status st = tc->f->grammar(tc, gbnf);
    if (st == SP_OK && tc->choice == SP_TOOLCALL_AUTO)
        *trigger = tc->f->trigger;
    return st;
}

/* begin open CALL close [sep open CALL close]... end, CALL a JSON object. */
static sp_status json_grammar(const struct sp_toolcall *tc, char **gbnf)
{
    json_t *schema;
    if (tc->choice == SP_TOOLCALL_NAMED || tc->n_fn == 1) {
        schema = call_schema(tc, &tc->fn[tc->choice == SP_TOOLCALL_NAMED ? tc->named : 0], -1);
    } else {
        json_t *alts = json_array();
        schema = json_object();
        for (size_t i = 0; alts && i < tc->n_fn; i++) {
            json_t *c = call_schema(tc, &tc->fn[i], (int)i);
            if (!c || json_array_append_new(alts, c)) {
                json_decref(alts);
                alts = NULL;
            }
        }
        if (!alts || !schema || json_object_set_new(schema, "anyOf", alts)) {
            json_decref(schema);
            schema = NULL;
        }
    }
    char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    if (!text)
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    char *calls = NULL;
    /* arguments hold the properties the function lists (objects closed, as
     * strict mode): a key the function does not name is no use to it, and
     * small models, once allowed one, write keys until the token limit */
    sp_status st = sp_grammar_from_schema_as(text, strlen(text), "tc-call", SP_SCHEMA_CLOSED, &calls);
    free(text);
    if (st != SP_OK)
        return st;
    const struct sp_toolcall_format *f = tc->f;
    bool many = several(tc);
    size_t need = strlen(calls) + 2 * (strlen(f->begin) + strlen(f->open) + strlen(f->close) +
                                       strlen(f->sep) + strlen(f->end)) + 128;
    char *out = malloc(need), b[64], op[64], cl[64], sp[64], en[64];
    if (!out) {
        free(calls);
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    }
    gbnf_lit(b, f->begin);
    gbnf_lit(op, f->open);
    gbnf_lit(cl, f->close);
    gbnf_lit(sp, f->sep);
    gbnf_lit(en, f->end);
    snprintf(out, need, "root ::= %s tc-item %s%s%s %s\ntc-item ::= %s tc-call %s\n%s", b, many ? "( " : "",
             many ? sp : "", many ? " tc-item )*" : "", en, op, cl, calls);
    free(calls);
    *gbnf = out;
    return SP_OK;
}

/* GBNF text g with every rule name prefixed by `pre` (string literals and
 * character classes left as they are), appended to *o (cap bytes). */
static size_t gbnf_prefixed(char *o, size_t cap, const char *g, const char *pre)
{
    size_t n = 0, pl = strlen(pre);
    for (const char *s = g; *s && n + pl + 2 < cap;) {
        if (*s == '"' || *s == '[') {
            char close = *s == '"' ? '"' : ']';
            o[n++] = *s++;
            while (*s && *s != close && n + 3 < cap) {
                if (*s == '\\' && s[1])
                    o[n++] = *s++;
                o[n++] = *s++;
            }
            if (*s)
                o[n++] = *s++;
        } else if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')) {
            memcpy(o + n, pre, pl);
            n += pl;
            while (n + 2 < cap && ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                                   *s == '-' || *s == '_'))
                o[n++] = *s++;
        } else {
            o[n++] = *s++;
        }
    }
    o[n] = '\0';
    return n;
}

/* From the output's start (analysis messages, then the call; no preamble:
 * a model that begins "<|channel|>commentary" for the call could go on with
 * a preamble instead, and write it until max_tokens) or, lazily, from the
 * trigger: the recipient, the function's name, the rest of the header and
 * its arguments.  <|call|> is the model's end of generation,
 * never text, so the grammar ends with the arguments. */
static sp_status harmony_grammar(const struct sp_toolcall *tc, char **gbnf)
{
    size_t first = tc->choice == SP_TOOLCALL_NAMED ? tc->named : 0;
    size_t last = tc->choice == SP_TOOLCALL_NAMED ? tc->named + 1 : tc->n_fn;
    char **args = calloc(tc->n_fn, sizeof *args);
    size_t need = 1024;
    sp_status st = args ? SP_OK : sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    for (size_t i = first; i < last && st == SP_OK; i++) {
        st = sp_grammar_from_schema_as(tc->fn[i].params, strlen(tc->fn[i].params), "args", false, &args[i]);
        if (st == SP_OK)
            need += 9 * strlen(args[i]) + 2 * strlen(tc->fn[i].name) + 64; /* a prefix of 8 or fewer per name at most */
    }
    char *out = st == SP_OK ? malloc(need) : NULL;
    if (st == SP_OK && !out)
        st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    if (st == SP_OK) {
        size_t n = (size_t)snprintf(
            out, need, "root ::= %s\" to=functions.\" (",
            tc->choice == SP_TOOLCALL_AUTO ? "" : "tc-pre* (\"<|channel|>commentary\" | \"<|channel|>analysis\")? ");
        for (size_t i = first; i < last; i++)
            n += (size_t)snprintf(out + n, need - n, "%s tc-f%zu", i > first ? " |" : "", i);
        n += (size_t)snprintf(out + n, need - n,
                              " )\ntc-pre ::= \"<|channel|>analysis<|message|>\" ( [^<] | \"<\" [^|] )* "
                              "\"<|end|><|start|>assistant\"\n"
                              "tc-head ::= ( \"<|channel|>\" ( \"commentary\" | \"analysis\" ) )? "
                              "( \" \" \"<|constrain|>\"? \"json\" | \"<|constrain|>json\" )? \"<|message|>\"\n");
        for (size_t i = first; i < last; i++) {
            char pre[32];
            snprintf(pre, sizeof pre, "f%zu-", i);
            n += (size_t)snprintf(out + n, need - n, "tc-f%zu ::= \"%s\" tc-head f%zu-args\n", i, tc->fn[i].name, i);
            n += gbnf_prefixed(out + n, need - n, args[i], pre);
            if (n + 2 < need && n && out[n - 1] != '\n')
                out[n++] = '\n', out[n] = '\0';
        }
        *gbnf = out;
    }
    for (size_t i = 0; args && i < tc->n_fn; i++)
        free(args[i]);
    free(args);
    return st;
}

/* ---- reading calls ---- */

enum pstate {
    P_TEXT,   /* before the trigger: text, held back while it may be the trigger's start */
    P_LIT,    /* matching begin + open */
    P_CALL,   /* inside a CALL object */
    P_AFTER,  /* after a CALL: close sep open (another) or close end (the last) */
    P_DONE,   /* after the calls: anything more is text */
};

struct buf {
    char *p;
    size_t n, cap;
};

struct sp_toolcall_parser {
    const struct sp_toolcall *tc;
    enum pstate st;
    char *prefix, *more, *last; /* begin+open, close+sep+open (NULL: no more calls), close+end */
    struct buf hold;            /* P_TEXT, P_LIT, P_AFTER: bytes not decided yet */
    int n_calls;                /* CALL events so far */
    /* the CALL being read */
    int depth;
    bool in_str, esc, expect_key, named;
    enum { V_NONE, V_KEY, V_NAME, V_ARGS, V_OTHER } v;
    struct buf key, name, early; /* early: arguments read before the name */
    char id[40];
    /* events of this feed, batched */
    struct buf out;
    int out_kind;
    sp_toolcall_fn fn;
    void *user;
    sp_status err;
};

static bool put(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

static void flush(struct sp_toolcall_parser *p)
{
    if (p->out.n && p->err == SP_OK) {
        struct sp_toolcall_event ev = {(enum sp_toolcall_event_kind)p->out_kind, p->n_calls - 1, NULL, p->out.p,
                                       p->out.n};
        p->err = p->fn(p->user, &ev);
    }
    p->out.n = 0;
}

/* Queues n bytes of a TEXT or ARGS (of the last call) event. */
static void emit(struct sp_toolcall_parser *p, int kind, const char *s, size_t n)
{
    if (!n)
        return;
    if (p->out.n && p->out_kind != kind)
        flush(p);
    p->out_kind = kind;
    if (!put(&p->out, s, n) && p->err == SP_OK)
        p->err = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
}

static void make_id(const struct sp_toolcall_format *f, char *id, size_t cap)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[32];
    size_t n = f->id_len ? (size_t)f->id_len : 24, o = 0;
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (unsigned char)(rand() ^ (int)time(NULL) ^ (int)i);
    if (!f->id_len)
        o = (size_t)snprintf(id, cap, "call_");
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        id[o++] = alnum[rnd[i % sizeof rnd] % (sizeof alnum - 1)];
    id[o] = '\0';
}

/* The CALL's name is complete: announce the call, then arguments read early. */
static void call_begins(struct sp_toolcall_parser *p)
{
    json_error_t jerr;
    json_t *s = json_loadb(p->name.p, p->name.n, JSON_DECODE_ANY, &jerr);
    flush(p);
    make_id(p->tc->f, p->id, sizeof p->id);
    const char *name = json_is_string(s) ? json_string_value(s) : "";
    struct sp_toolcall_event ev = {SP_TOOLCALL_CALL, p->n_calls++, p->id, name, strlen(name)};
    if (p->err == SP_OK)
        p->err = p->fn(p->user, &ev);
    json_decref(s);
    p->named = true;
    emit(p, SP_TOOLCALL_ARGS, p->early.p, p->early.n);
    p->early.n = 0;
}

static void call_reset(struct sp_toolcall_parser *p)
{
    p->depth = 0;
    p->in_str = p->esc = p->expect_key = p->named = false;
    p->v = V_NONE;
    p->key.n = p->name.n = p->early.n = 0;
}

/* A byte of the arguments value. */
static void args_byte(struct sp_toolcall_parser *p, char c)
{
    if (p->named)
        emit(p, SP_TOOLCALL_ARGS, &c, 1);
    else if (!put(&p->early, &c, 1) && p->err == SP_OK)
        p->err = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
}

/* The kind of the value that starts now at depth 1, from its key. */
static int value_kind(const struct sp_toolcall_parser *p)
{
    const char *k = p->key.n ? p->key.p : "";
    if (!strcmp(k, "\"name\""))
        return V_NAME;
    char want[32];
    snprintf(want, sizeof want, "\"%s\"", p->tc->f->args_key);
    return !strcmp(k, want) ? V_ARGS : V_OTHER;
}

/* One byte inside a CALL object; returns true when the object ended. */
static bool call_byte(struct sp_toolcall_parser *p, char c)
{
    if (p->in_str) {
        if (p->v == V_KEY)
            put(&p->key, &c, 1);
        else if (p->v == V_NAME)
            put(&p->name, &c, 1);
        else if (p->v == V_ARGS)
            args_byte(p, c);
        if (p->esc) {
            p->esc = false;
        } else if (c == '\\') {
            p->esc = true;
        } else if (c == '"') {
            p->in_str = false;
            if (p->depth == 1 && p->v == V_NAME)
                call_begins(p);
            if (p->depth == 1)
                p->v = V_NONE;
        }
        return false;
    }
    bool starts = p->depth == 1 && !p->expect_key && p->v == V_NONE && c != ' ' && c != '\n' && c != '\t' &&
                  c != '\r' && c != ',' && c != '}' && c != ':';
    if (starts)
        p->v = value_kind(p);
    if (c == '"') {
        p->in_str = true;
        if (p->depth == 1 && p->expect_key) {
            p->v = V_KEY;
            p->key.n = 0;
            put(&p->key, &c, 1);
            p->expect_key = false;
            return false;
        }
    } else if (c == '{' || c == '[') {
        if (++p->depth == 1) {
            p->expect_key = true;
            return false;
        }
    } else if (c == '}' || c == ']') {
        if (--p->depth <= 0)
            return true;
        if (p->depth == 1 && p->v == V_ARGS) {
            args_byte(p, c);
            p->v = V_NONE;
            return false;
        }
    } else if (p->depth == 1 && c == ',') {
        p->expect_key = true;
        p->v = V_NONE;
        return false;
    }
    if (p->v == V_NAME && c == '"')
        put(&p->name, &c, 1);
    else if (p->v == V_ARGS)
        args_byte(p, c);
    return false;
}

static bool is_prefix(const struct buf *b, const char *lit)
{
    return lit && strlen(lit) >= b->n && !memcmp(lit, b->p, b->n);
}

/* Gives up on structure: what was held is text, and so is the rest. */
static void to_text(struct sp_toolcall_parser *p)
{
    emit(p, SP_TOOLCALL_TEXT, p->hold.p, p->hold.n);
    p->hold.n = 0;
    p->st = P_DONE;
}

/* The trigger was read in text: it starts the structure, so it is read again as such. */
static void triggered(struct sp_toolcall_parser *p)
{
    struct buf t = p->hold;
    p->hold = (struct buf){0};
    p->st = P_LIT;
    for (size_t i = 0; i < t.n; i++)
        p->tc->f->byte(p, t.p[i]);
    free(t.p);
}

/* P_TEXT: text, held back while it may be the trigger's start. */
static void text_byte(struct sp_toolcall_parser *p, char c)
{
    const char *trig = p->tc->f->trigger;
    put(&p->hold, &c, 1);
    while (p->hold.n && !is_prefix(&p->hold, trig)) { /* the held start cannot be the trigger */
        emit(p, SP_TOOLCALL_TEXT, p->hold.p, 1);
        memmove(p->hold.p, p->hold.p + 1, --p->hold.n);
    }
    if (p->hold.n == strlen(trig))
        triggered(p);
}

static void json_byte(struct sp_toolcall_parser *p, char c)
{
    switch (p->st) {
    case P_TEXT:
        text_byte(p, c);
        return;
    case P_LIT:
        if (p->hold.n == strlen(p->prefix)) { /* begin + open read: the CALL starts */
            p->hold.n = 0;
            p->st = P_CALL;
            call_reset(p);
            json_byte(p, c);
            return;
        }
        put(&p->hold, &c, 1);
        if (!is_prefix(&p->hold, p->prefix))
            to_text(p);
        return;
    case P_CALL:
        if (p->depth == 0 && c != '{') { /* whitespace before the object */
            if (c != ' ' && c != '\n' && c != '\t' && c != '\r')
                to_text(p);
            return;
        }
        if (call_byte(p, c)) {
            flush(p);
            p->st = P_AFTER;
            p->hold.n = 0;
        }
        return;
    case P_AFTER:
        put(&p->hold, &c, 1);
        if (p->more && p->hold.n == strlen(p->more) && !memcmp(p->hold.p, p->more, p->hold.n)) {
            p->hold.n = 0;
            p->st = P_CALL;
            call_reset(p);
        } else if (!is_prefix(&p->hold, p->more) && !is_prefix(&p->hold, p->last)) {
            size_t nl = strlen(p->last);
            if (p->hold.n > nl && !memcmp(p->hold.p, p->last, nl)) { /* the calls ended before this */
                char rest = p->hold.p[nl];
                p->hold.n = 0;
                p->st = P_DONE;
                emit(p, SP_TOOLCALL_TEXT, &rest, 1);
            } else {
                to_text(p);
            }
        }
        return;
    case P_DONE:
        emit(p, SP_TOOLCALL_TEXT, &c, 1);
        return;
    }
}

/* ---- Harmony ---- */

#define HARMONY_MAX_HEAD 160 /* bytes from the recipient to <|message|> */

static const char harmony_message[] = "<|message|>";
static const char harmony_call[] = "<|call|>";

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* The header from the trigger on is held in p->hold; at <|message|> the
 * call begins with the name that follows the trigger. */
static void harmony_head(struct sp_toolcall_parser *p, char c)
{
    size_t tl = strlen(p->tc->f->trigger), ml = sizeof harmony_message - 1, k = tl;
    put(&p->hold, &c, 1);
    while (k < p->hold.n && name_char(p->hold.p[k]))
        k++;
    bool ends = p->hold.n >= ml && !memcmp(p->hold.p + p->hold.n - ml, harmony_message, ml);
    if (ends && k > tl && k <= p->hold.n - ml) {
        flush(p);
        make_id(p->tc->f, p->id, sizeof p->id);
        struct sp_toolcall_event ev = {SP_TOOLCALL_CALL, p->n_calls++, p->id, p->hold.p + tl, k - tl};
        if (p->err == SP_OK)
            p->err = p->fn(p->user, &ev);
        p->hold.n = 0;
        p->st = P_CALL;
        call_reset(p);
    } else if (ends || p->hold.n > HARMONY_MAX_HEAD) { /* no name, or no header: it was text */
        emit(p, SP_TOOLCALL_TEXT, p->hold.p, p->hold.n);
        p->hold.n = 0;
        p->st = P_TEXT;
    }
}

/* The body: one JSON value, its bytes the arguments. */
static void harmony_args(struct sp_toolcall_parser *p, char c)
{
    if (p->depth == 0 && !p->in_str && (c == ' ' || c == '\n' || c == '\t' || c == '\r'))
        return;
    emit(p, SP_TOOLCALL_ARGS, &c, 1);
    if (p->in_str) {
        if (p->esc)
            p->esc = false;
        else if (c == '\\')
            p->esc = true;
        else if (c == '"')
            p->in_str = false;
        return;
    }
    if (c == '"')
        p->in_str = true;
    else if (c == '{' || c == '[')
        p->depth++;
    else if ((c == '}' || c == ']') && --p->depth <= 0) {
        flush(p);
        p->st = P_AFTER;
        p->hold.n = 0;
    }
}

/* Text with calls anywhere in it (each found by the trigger), a call's
 * <|call|> dropped: the model ends its message there. */
static void harmony_byte(struct sp_toolcall_parser *p, char c)
{
    switch (p->st) {
    case P_TEXT:
        text_byte(p, c);
        return;
    case P_LIT:
        harmony_head(p, c);
        return;
    case P_CALL:
        harmony_args(p, c);
        return;
    case P_AFTER: {
        put(&p->hold, &c, 1);
        struct buf t = p->hold;
        if (is_prefix(&t, harmony_call)) {
            if (t.n == sizeof harmony_call - 1) {
                p->hold.n = 0;
                p->st = P_TEXT;
            }
            return;
        }
        p->hold = (struct buf){0};
        p->st = P_TEXT;
        for (size_t i = 0; i < t.n; i++)
            harmony_byte(p, t.p[i]);
        free(t.p);
        return;
    }
    case P_DONE:
        emit(p, SP_TOOLCALL_TEXT, &c, 1);
        return;
    }
}

static char *concat(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

sp_status sp_toolcall_parser_new(struct sp_toolcall_parser **out, const struct sp_toolcall *tc)
{
    struct sp_toolcall_parser *p = calloc(1, sizeof *p);
    const struct sp_toolcall_format *f = tc->f;
    *out = NULL;
    if (!p)
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    p->tc = tc;
    bool many = several(tc);
    p->prefix = concat(f->begin, f->open, "");
    p->more = many ? concat(f->close, f->sep, f->open) : NULL;
    p->last = concat(f->close, f->end, "");
    if (!p->prefix || (many && !p->more) || !p->last) {
        sp_toolcall_parser_free(p);
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    }
    sp_toolcall_parser_reset(p);
    *out = p;
    return SP_OK;
}

void sp_toolcall_parser_reset(struct sp_toolcall_parser *p)
{
    enum sp_toolcall_choice ch = p->tc->choice;
    p->st = ch == SP_TOOLCALL_NONE ? P_DONE : ch == SP_TOOLCALL_AUTO || p->tc->f->text_first ? P_TEXT : P_LIT;
    p->hold.n = p->out.n = 0;
    p->n_calls = 0;
    call_reset(p);
}

void sp_toolcall_parser_free(struct sp_toolcall_parser *p)
{
    if (!p)
        return;
    free(p->prefix);
    free(p->more);
    free(p->last);
    free(p->hold.p);
    free(p->key.p);
    free(p->name.p);
    free(p->early.p);
    free(p->out.p);
    free(p);
}

sp_status sp_toolcall_parser_feed(struct sp_toolcall_parser *p, const char *text, size_t len, bool last,
                                  sp_toolcall_fn fn, void *user)
{
    p->fn = fn;
    p->user = user;
    p->err = SP_OK;
    for (size_t i = 0; i < len && p->err == SP_OK; i++)
        p->tc->f->byte(p, text[i]);
    if (last && p->err == SP_OK) {
        if (p->st == P_AFTER && (!p->hold.n || (p->hold.n == strlen(p->last) && is_prefix(&p->hold, p->last)))) {
            p->hold.n = 0;
            p->st = P_DONE;
        } else if (p->st != P_CALL) { /* a call cut short stays a call */
            to_text(p);
        }
    }
    flush(p);
    return p->err;
}

int sp_toolcall_parser_calls(const struct sp_toolcall_parser *p) { return p->n_calls; }
