/* A request's tools: reading and checking them, the conversation the
 * template sees, and the check of a finished answer's calls. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "toolcall/toolcall_internal.h"

#define MAX_TOOLS 128
#define MAX_NAME 64
#define MAX_CHECKED 64 /* calls of one answer that are checked */

/* SP_ERR_ARG naming the field `where` (copied to param) in the message. */
static sp_status fail(char *param, size_t cap, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sp_status fail(char *param, size_t cap, const char *where, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(param, cap, "%s", where);
    return sp_error_set(SP_ERR_ARG, "Invalid '%s': %s", where, msg);
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* Only the keys in `known` (NULL-terminated); else the first other one. */
static const char *unknown_key(const json_t *o, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++)
            ok = !strcmp(k, known[i]);
        if (!ok)
            return k;
    }
    return NULL;
}

/* tools[i]: {"type": "function", "function": {name, description?, parameters?, strict?}}. */
static sp_status read_tool(struct sp_toolcall *tc, const json_t *t, size_t i, char *param, size_t cap)
{
    static const char *const tool_keys[] = {"type", "function", NULL};
    static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
    char where[96];
    snprintf(where, sizeof where, "tools[%zu]", i);
    if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")))
        return fail(param, cap, where, "expected an object with a 'type'.");
    if (unknown_key(t, tool_keys))
        return fail(param, cap, where, "unrecognized field '%.60s'.", unknown_key(t, tool_keys));
    if (strcmp(json_string_value(json_object_get(t, "type")), "function"))
        return fail(param, cap, where, "only tools of type 'function' are supported.");
    const json_t *fn = json_object_get(t, "function");
    snprintf(where, sizeof where, "tools[%zu].function", i);
    if (!json_is_object(fn))
        return fail(param, cap, where, "expected an object.");
    if (unknown_key(fn, fn_keys))
        return fail(param, cap, where, "unrecognized field '%.60s'.", unknown_key(fn, fn_keys));
    const json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
    const json_t *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    snprintf(where, sizeof where, "tools[%zu].function.name", i);
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return fail(param, cap, where, "a function name is 1 to 64 letters, digits, '_' or '-'.");
    for (size_t k = 0; k < tc->n_fn; k++)
        if (!strcmp(tc->fn[k].name, json_string_value(name)))
            return fail(param, cap, where, "the function '%.64s' is defined twice.", json_string_value(name));
    snprintf(where, sizeof where, "tools[%zu].function", i);
    if ((desc && !json_is_string(desc) && !json_is_null(desc)) ||
        (strict && !json_is_boolean(strict) && !json_is_null(strict)))
        return fail(param, cap, where, "'description' is a string and 'strict' a boolean.");
    snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
    const json_t *type = json_object_get(params, "type");
    if ((params && !json_is_object(params)) ||
        (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object"))))
        return fail(param, cap, where, "arguments are a JSON object, so the parameters schema has type 'object'.");
    struct sp_toolcall_fn *f = &tc->fn[tc->n_fn];
    f->name = strdup(json_string_value(name));
    f->params = params ? json_dumps(params, JSON_COMPACT) : strdup("{\"type\":\"object\",\"properties\":{}}");
    if (!f->name || !f->params) {
        free(f->name);
        free(f->params);
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    }
    tc->n_fn++;
    char *gbnf = NULL;
    sp_status st = sp_grammar_from_schema(f->params, strlen(f->params), &gbnf);
    free(gbnf);
    if (st == SP_ERR_ARG) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", sp_error_message());
        return fail(param, cap, where, "%s", msg);
    }
    return st;
}

static sp_status read_choice(struct sp_toolcall *tc, const json_t *choice, char *param, size_t cap)
{
    static const char *const names[] = {"none", "auto", "required"};
    tc->choice = SP_TOOLCALL_AUTO;
    if (!choice || json_is_null(choice))
        return SP_OK;
    if (json_is_string(choice)) {
        for (size_t i = 0; i < 3; i++)
            if (!strcmp(json_string_value(choice), names[i])) {
                tc->choice = (enum sp_toolcall_choice)i;
                return SP_OK;
            }
        return fail(param, cap, "tool_choice", "expected none, auto, required or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
    }
    const json_t *fn = json_object_get(choice, "function");
    const json_t *type = json_object_get(choice, "type"), *name = json_object_get(fn, "name");
    if (!json_is_object(choice) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
        !json_is_string(name))
        return fail(param, cap, "tool_choice", "expected none, auto, required or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
    const struct sp_toolcall_fn *f = sp_toolcall_find(tc, json_string_value(name), json_string_length(name));
    if (!f)
        return fail(param, cap, "tool_choice", "no function named '%.64s' in 'tools'.", json_string_value(name));
    tc->choice = SP_TOOLCALL_NAMED;
    tc->named = (size_t)(f - tc->fn);
    return SP_OK;
}

/* The tools as templates get them: as sent, with an empty description and
 * parameters without properties where a function has none (templates
 * write tool.description and tool.parameters.properties unguarded). */
static char *template_tools(const json_t *tools)
{
    json_t *copy = json_deep_copy(tools);
    size_t i;
    json_t *t;
    json_array_foreach(copy, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_string(json_object_get(fn, "description")))
            json_object_set_new(fn, "description", json_string(""));
        if (!json_is_object(json_object_get(fn, "parameters")))
            json_object_set_new(fn, "parameters", json_pack("{s:s,s:{}}", "type", "object", "properties"));
    }
    char *s = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
    json_decref(copy);
    return s;
}

sp_status sp_toolcall_new(struct sp_toolcall **out, const struct sp_toolcall_format *f, const json_t *tools,
                          const json_t *choice, const json_t *parallel, char *param, size_t cap)
{
    struct sp_toolcall *tc = calloc(1, sizeof *tc);
    sp_status st = SP_OK;
    *out = NULL;
    param[0] = '\0';
    if (!tc)
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    tc->f = f;
    size_t n = json_array_size(tools);
    if (!json_is_array(tools) || n == 0 || n > MAX_TOOLS) {
        st = fail(param, cap, "tools", "expected an array of 1 to %d tools.", MAX_TOOLS);
        goto done;
    }
    if (!(tc->fn = calloc(n, sizeof *tc->fn))) {
        st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && st == SP_OK; i++)
        st = read_tool(tc, json_array_get(tools, i), i, param, cap);
    if (st == SP_OK && !(tc->tools = template_tools(tools)))
        st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    if (st == SP_OK)
        st = read_choice(tc, choice, param, cap);
    if (st == SP_OK && parallel && !json_is_null(parallel) && !json_is_boolean(parallel))
        st = fail(param, cap, "parallel_tool_calls", "expected a boolean.");
    tc->parallel = f->parallel && (!parallel || !json_is_false(parallel));
done:
    if (st != SP_OK) {
        sp_toolcall_free(tc);
        return st;
    }
    *out = tc;
    return SP_OK;
}

void sp_toolcall_free(struct sp_toolcall *tc)
{
    if (!tc)
        return;
    for (size_t i = 0; i < tc->n_fn; i++) {
        free(tc->fn[i].name);
        free(tc->fn[i].params);
    }
    free(tc->fn);
    free(tc->tools);
    free(tc);
}

enum sp_toolcall_choice sp_toolcall_choice_of(const struct sp_toolcall *tc) { return tc->choice; }

const struct sp_toolcall_fn *sp_toolcall_find(const struct sp_toolcall *tc, const char *name, size_t len)
{
    for (size_t i = 0; i < tc->n_fn; i++)
        if (strlen(tc->fn[i].name) == len && !memcmp(tc->fn[i].name, name, len))
            return &tc->fn[i];
    return NULL;
}

/* ---- the check of an answer ---- */

struct collected {
    char *name[MAX_CHECKED];
    char *args[MAX_CHECKED];
    size_t n_args[MAX_CHECKED];
    int n;
};

static sp_status collect(void *user, const struct sp_toolcall_event *ev)
{
    struct collected *c = user;
    if (ev->kind == SP_TOOLCALL_CALL && ev->index < MAX_CHECKED) {
        c->name[ev->index] = strndup(ev->text, ev->len);
        c->n = ev->index + 1;
        return c->name[ev->index] ? SP_OK : SP_ERR_NOMEM;
    }
    if (ev->kind == SP_TOOLCALL_ARGS && ev->index >= 0 && ev->index < MAX_CHECKED) {
        char *p = realloc(c->args[ev->index], c->n_args[ev->index] + ev->len + 1);
        if (!p)
            return SP_ERR_NOMEM;
        memcpy(p + c->n_args[ev->index], ev->text, ev->len);
        c->n_args[ev->index] += ev->len;
        p[c->n_args[ev->index]] = '\0';
        c->args[ev->index] = p;
    }
    return SP_OK;
}

sp_status sp_toolcall_check(void *ctx, const char *text, size_t len, char *why, size_t cap)
{
    const struct sp_toolcall *tc = ctx;
    struct sp_toolcall_parser *p = NULL;
    struct collected c = {0};
    sp_status st = sp_toolcall_parser_new(&p, tc);
    if (st == SP_OK)
        st = sp_toolcall_parser_feed(p, text, len, true, collect, &c);
    if (st != SP_OK) {
        snprintf(why, cap, "out of memory");
    } else if (!c.n && tc->choice != SP_TOOLCALL_AUTO && tc->choice != SP_TOOLCALL_NONE) {
        snprintf(why, cap, "no tool call");
        st = SP_ERR_ARG;
    }
    for (int i = 0; i < c.n && st == SP_OK; i++) {
        const struct sp_toolcall_fn *f = c.name[i] ? sp_toolcall_find(tc, c.name[i], strlen(c.name[i])) : NULL;
        char detail[400];
        if (!f) {
            snprintf(why, cap, "call %d: no function named '%.64s'", i, c.name[i] ? c.name[i] : "");
            st = SP_ERR_ARG;
        } else if (sp_grammar_validate(f->params, strlen(f->params), c.args[i] ? c.args[i] : "", c.n_args[i],
                                       detail, sizeof detail) != SP_OK) {
            snprintf(why, cap, "call %d (%s): %s", i, f->name, detail);
            st = SP_ERR_ARG;
        }
    }
    for (int i = 0; i < c.n; i++) {
        free(c.name[i]);
        free(c.args[i]);
    }
    sp_toolcall_parser_free(p);
    return st;
}

/* ---- the conversation the template sees ---- */

static char *keep(struct sp_toolcall_prompt *p, char *s)
{
    if (!s)
        return NULL;
    char **o = realloc(p->owned, (p->n_owned + 1) * sizeof *o);
    if (!o) {
        free(s);
        return NULL;
    }
    p->owned = o;
    p->owned[p->n_owned++] = s;
    return s;
}

/* A call's arguments (JSON text) as an object, or NULL. */
static json_t *args_object(const json_t *call)
{
    json_error_t jerr;
    const json_t *a = json_object_get(json_object_get(call, "function"), "arguments");
    json_t *o = json_is_string(a) ? json_loadb(json_string_value(a), json_string_length(a), 0, &jerr) : NULL;
    if (o && !json_is_object(o)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* Native: tool_calls as the templates want them (arguments as objects). */
static char *native_calls(const json_t *calls, size_t msg, sp_status *st)
{
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *args = args_object(c), *fn = json_object(), *o = json_object();
        const json_t *f = json_object_get(c, "function");
        if (!args) {
            json_decref(fn);
            json_decref(o);
            json_decref(out);
            *st = sp_error_set(SP_ERR_ARG, "messages[%zu].tool_calls[%zu].function.arguments is not a JSON object",
                               msg, i);
            return NULL;
        }
        json_object_set(fn, "name", json_object_get(f, "name"));
        json_object_set_new(fn, "arguments", args);
        json_object_set(o, "id", json_object_get(c, "id"));
        json_object_set_new(o, "type", json_string("function"));
        json_object_set_new(o, "function", fn);
        json_array_append_new(out, o);
    }
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!s)
        *st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    return s;
}

/* Plain JSON: the calls as the answer's text would hold them. */
static char *fallback_calls(const char *content, const json_t *calls)
{
    size_t i;
    json_t *c;
    size_t n = (content ? strlen(content) + 1 : 0) + 1;
    json_array_foreach(calls, i, c) {
        const json_t *f = json_object_get(c, "function");
        n += json_string_length(json_object_get(f, "name")) + json_string_length(json_object_get(f, "arguments")) + 40;
    }
    char *s = malloc(n);
    if (!s)
        return NULL;
    size_t o = (size_t)snprintf(s, n, "%s%s", content ? content : "", content && *content ? "\n" : "");
    json_array_foreach(calls, i, c) {
        const json_t *f = json_object_get(c, "function");
        o += (size_t)snprintf(s + o, n - o, "%s{\"name\": \"%s\", \"arguments\": %s}", i ? "\n" : "",
                              json_string_value(json_object_get(f, "name")),
                              json_string_value(json_object_get(f, "arguments")));
    }
    return s;
}

/* The name of the call `id` among the messages before `upto`, or NULL. */
static const char *call_name(const struct sp_toolcall_msg *msgs, size_t upto, const char *id)
{
    for (size_t m = upto; id && m-- > 0;) {
        size_t i;
        json_t *c;
        json_array_foreach(msgs[m].tool_calls, i, c) {
            const char *cid = json_string_value(json_object_get(c, "id"));
            if (cid && !strcmp(cid, id))
                return json_string_value(json_object_get(json_object_get(c, "function"), "name"));
        }
    }
    return NULL;
}

/* Plain JSON: tool results since msgs[i] merged into one user turn;
 * *next: the first message after them. */
static char *fallback_results(const struct sp_toolcall_msg *msgs, size_t n, size_t i, size_t *next)
{
    size_t len = 1, k;
    for (k = i; k < n && !strcmp(msgs[k].role, "tool"); k++)
        len += strlen(msgs[k].content ? msgs[k].content : "") + MAX_NAME + 160;
    *next = k;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t o = 0;
    s[0] = '\0';
    for (k = i; k < *next; k++) {
        const char *name = msgs[k].name ? msgs[k].name : call_name(msgs, i, msgs[k].tool_call_id);
        o += (size_t)snprintf(s + o, len - o, "%sResult of %.64s (call %.80s): %s", k > i ? "\n" : "",
                              name ? name : "a function", msgs[k].tool_call_id ? msgs[k].tool_call_id : "?",
                              msgs[k].content ? msgs[k].content : "");
    }
    return s;
}

/* Plain JSON: what the system message says about the tools. */
static char *fallback_tools(const struct sp_toolcall *tc)
{
    json_error_t jerr;
    json_t *tools = json_loads(tc->tools, 0, &jerr);
    size_t n = strlen(tc->tools) + 512, o;
    char *s = malloc(n);
    if (!tools || !s) {
        json_decref(tools);
        free(s);
        return NULL;
    }
    o = (size_t)snprintf(s, n, "You can call these functions (each with the JSON Schema of its arguments):");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *fn = json_dumps(json_object_get(t, "function"), JSON_COMPACT);
        if (fn && tc->choice != SP_TOOLCALL_NAMED)
            o += (size_t)snprintf(s + o, n - o, "\n%s", fn);
        else if (fn && !strcmp(tc->fn[tc->named].name,
                               json_string_value(json_object_get(json_object_get(t, "function"), "name"))))
            o += (size_t)snprintf(s + o, n - o, "\n%s", fn);
        free(fn);
    }
    snprintf(s + o, n - o, "\nTo call a function, answer with only a JSON object {\"name\": <function name>, "
             "\"arguments\": <arguments object>}%s", tc->parallel ? ", one line per call." : ".");
    json_decref(tools);
    return s;
}

sp_status sp_toolcall_prompt(const struct sp_toolcall_format *f, const struct sp_toolcall *tc,
                             const struct sp_toolcall_msg *msgs, size_t n, struct sp_toolcall_prompt *out)
{
    sp_status st = SP_OK;
    bool tools_on = tc && tc->choice != SP_TOOLCALL_NONE;
    memset(out, 0, sizeof *out);
    if (!(out->msgs = calloc(n + 1, sizeof *out->msgs)))
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    out->reasoning_alias = f->reasoning_alias;
    if (f->native && tools_on && !(out->tools = keep(out, strdup(tc->tools))))
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    char *about = !f->native && tools_on ? keep(out, fallback_tools(tc)) : NULL;
    if (!f->native && tools_on && !about)
        return sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    if (about && (!n || (strcmp(msgs[0].role, "system") && strcmp(msgs[0].role, "developer"))))
        out->msgs[out->n++] = (struct sp_chat_msg){.role = "system", .content = about};
    for (size_t i = 0; i < n && st == SP_OK;) {
        const struct sp_toolcall_msg *m = &msgs[i];
        struct sp_chat_msg *c = &out->msgs[out->n++];
        /* reasoning as llama.cpp hands it to templates: only when not empty;
         * for Harmony (empty_content) a message's content is "" rather than
         * none, and dropped beside reasoning and calls (the reasoning is the
         * analysis message the template writes before the call) */
        const char *reasoning = m->reasoning_content && *m->reasoning_content ? m->reasoning_content : NULL;
        *c = (struct sp_chat_msg){.role = m->role, .content = m->content, .reasoning_content = reasoning};
        if (f->empty_content && (!m->content || (reasoning && m->tool_calls)))
            c->content = "";
        size_t next = i + 1;
        if (f->native) {
            c->tool_call_id = m->tool_call_id;
            c->name = m->name;
            if (m->tool_calls && !(c->tool_calls = keep(out, native_calls(m->tool_calls, i, &st))) && st == SP_OK)
                st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
        } else if (i == 0 && about && out->n == 1) {
            size_t len = strlen(m->content ? m->content : "") + strlen(about) + 3;
            char *s = keep(out, malloc(len));
            if (s)
                snprintf(s, len, "%s%s%s", m->content ? m->content : "", m->content && *m->content ? "\n\n" : "",
                         about);
            c->content = s;
        } else if (m->tool_calls) {
            c->content = keep(out, fallback_calls(m->content, m->tool_calls));
        } else if (!strcmp(m->role, "tool")) {
            c->role = "user";
            c->content = keep(out, fallback_results(msgs, n, i, &next));
        }
        if (st == SP_OK && !f->native && !c->content && (m->content || m->tool_calls || !strcmp(m->role, "tool")))
            st = sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
        i = next;
    }
    return st;
}

void sp_toolcall_prompt_free(struct sp_toolcall_prompt *p)
{
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->msgs);
    memset(p, 0, sizeof *p);
}
