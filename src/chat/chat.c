/* sp_chat_render: sets up the jinja2-compatible environment (see chat.h) and
 * runs the interpreter in jinja_*.c on one arena freed before returning. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_parse.h"
#include "core/error.h"

static const char chatml[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const char *sp_chat_chatml_template(void) { return chatml; }

/* jinja2's lexer: \r\n and \r become \n, and one trailing newline is dropped
 * (keep_trailing_newline=False). */
static char *normalize_source(struct jctx *c, const char *tmpl)
{
    size_t n = strlen(tmpl);
    char *s = jarena_alloc(&c->arena, n + 1);
    if (!s)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (tmpl[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && tmpl[i + 1] == '\n')
                i++;
        } else {
            s[k++] = tmpl[i];
        }
    }
    if (k && s[k - 1] == '\n')
        k--;
    s[k] = 0;
    return s;
}

static int str_val(struct jctx *c, const char *s, struct jval *out)
{
    if (!s) {
        *out = jv_none();
        return 0;
    }
    return jv_str_dup(c, s, strlen(s), out);
}

/* A JSON value as the template sees it (what json.loads gives Python). */
static int json_val(struct jctx *c, const json_t *j, int depth, struct jval *out)
{
    if (depth > 64)
        return jerr_pos(c, 0, 0, "tool JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jdict *d = jdict_new(c, json_object_size(j));
        const char *k;
        json_t *v;
        if (!d)
            return -1;
        json_object_foreach((json_t *)j, k, v) {
            struct jval key, val;
            if (jv_str_dup(c, k, strlen(k), &key) || json_val(c, v, depth + 1, &val) || jdict_set(c, d, key, val))
                return -1;
        }
        out->t = JV_DICT;
        out->u.d = d;
        return 0;
    }
    case JSON_ARRAY: {
        struct jlist *l = jlist_new(c, json_array_size(j));
        size_t i;
        json_t *v;
        if (!l)
            return -1;
        json_array_foreach(j, i, v) {
            struct jval val;
            if (json_val(c, v, depth + 1, &val) || jlist_push(c, l, val))
                return -1;
        }
        out->t = JV_LIST;
        out->u.l = l;
        return 0;
    }
    case JSON_STRING:
        return jv_str_dup(c, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER:
        *out = jv_int(json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        *out = jv_bool(json_is_true(j));
        return 0;
    default:
        *out = jv_none();
        return 0;
    }
}

/* JSON text -> value; what names it in an error. */
static int json_text_val(struct jctx *c, const char *text, const char *what, struct jval *out)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
    if (!j)
        return jerr_pos(c, 0, 0, "%s is not valid JSON: %s", what, jerr.text);
    int r = json_val(c, j, 0, out);
    json_decref(j);
    return r;
}

static int setup_message(struct jctx *c, const struct sp_chat_msg *m, const char *alias, struct jval *out)
{
    struct jdict *d = jdict_new(c, 7);
    struct jval role, content, v;
    if (!d || str_val(c, m->role ? m->role : "", &role) || str_val(c, m->content, &content) ||
        jdict_set(c, d, jv_strn("role", 4), role) || jdict_set(c, d, jv_strn("content", 7), content))
        return -1;
    if (m->tool_calls && (json_text_val(c, m->tool_calls, "tool_calls", &v) ||
                          jdict_set(c, d, jv_strn("tool_calls", 10), v)))
        return -1;
    if (m->tool_call_id && (str_val(c, m->tool_call_id, &v) || jdict_set(c, d, jv_strn("tool_call_id", 12), v)))
        return -1;
    if (m->name && (str_val(c, m->name, &v) || jdict_set(c, d, jv_strn("name", 4), v)))
        return -1;
    if (m->reasoning_content && (str_val(c, m->reasoning_content, &v) ||
                                 jdict_set(c, d, jv_strn("reasoning_content", 17), v)))
        return -1;
    if (m->reasoning_content && alias && (str_val(c, m->reasoning_content, &v) ||
                                          jdict_set(c, d, jv_strn(alias, strlen(alias)), v)))
        return -1;
    out->t = JV_DICT;
    out->u.d = d;
    return 0;
}

/* The template kwargs: each key of the JSON object `vars` a global; the
 * names the renderer defines itself (and its functions) are reserved. */
static int setup_vars(struct jctx *c, const char *vars, const void *funcs, size_t n_funcs)
{
    static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    const struct { const char *name; int fn; } *fn = funcs;
    json_error_t jerr;
    json_t *o = json_loads(vars, 0, &jerr);
    int r = 0;
    if (!json_is_object(o)) {
        json_decref(o);
        return jerr_pos(c, 0, 0, "template variables: not a JSON object");
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        bool taken = false;
        for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
            taken = taken || !strcmp(key, reserved[i]);
        for (size_t i = 0; i < n_funcs; i++)
            taken = taken || !strcmp(key, fn[i].name);
        struct jval v;
        if (taken) {
            r = jerr_pos(c, 0, 0, "template variable '%.60s' is reserved", key);
            break;
        }
        size_t n = strlen(key);
        char *name = jarena_alloc(&c->arena, n + 1); /* the scope keeps the name */
        if (!name) {
            r = jerr_pos(c, 0, 0, "template exceeded the memory limit");
            break;
        }
        memcpy(name, key, n + 1);
        if ((r = json_val(c, val, 0, &v)) || (r = jscope_define(c, c->globals, name, v)))
            break;
    }
    json_decref(o);
    return r;
}

static int setup_globals(struct jctx *c, const struct sp_chat_msg *msgs, size_t n_msgs,
                         const struct sp_chat_opts *o)
{
    struct jval v;
    struct jlist *l = jlist_new(c, n_msgs);
    if (!l)
        return -1;
    for (size_t i = 0; i < n_msgs; i++)
        if (setup_message(c, &msgs[i], o->reasoning_alias, &l->v[l->n++]))
            return -1;
    v.t = JV_LIST;
    v.u.l = l;
    if (jscope_define(c, c->globals, "messages", v) ||
        jscope_define(c, c->globals, "add_generation_prompt", jv_bool(o->add_generation_prompt)))
        return -1;
    if (str_val(c, o->bos_token ? o->bos_token : "", &v) || jscope_define(c, c->globals, "bos_token", v) ||
        str_val(c, o->eos_token ? o->eos_token : "", &v) || jscope_define(c, c->globals, "eos_token", v))
        return -1;
    if (o->tools && (json_text_val(c, o->tools, "tools", &v) || jscope_define(c, c->globals, "tools", v)))
        return -1;
    static const struct { const char *name; int fn; } funcs[] = {
        { "raise_exception", JF_RAISE }, { "strftime_now", JF_STRFTIME },
        { "namespace", JF_NAMESPACE }, { "range", JF_RANGE }, { "dict", JF_DICT },
    };
    if (o->vars && setup_vars(c, o->vars, funcs, sizeof(funcs) / sizeof(funcs[0])))
        return -1;
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
        struct jval f = { .t = JV_FUNC };
        f.u.fn = funcs[i].fn;
        if (jscope_define(c, c->globals, funcs[i].name, f))
            return -1;
    }
    return 0;
}

sp_status sp_chat_render_opts(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                              const struct sp_chat_opts *o, char **out)
{
    sp_status st = SP_OK;
    struct jnode *root;
    struct jbuf buf = { 0 };
    const char *src;
    if (out)
        *out = NULL;
    if (!tmpl || !out || !o || (n_msgs && !msgs))
        return sp_error_set(SP_ERR_ARG, "sp_chat_render: NULL argument");
    struct jctx *c = calloc(1, sizeof(*c));
    if (!c)
        return sp_error_set(SP_ERR_NOMEM, "chat template: out of memory");
    c->now_unix = o->now_unix;
    c->out = &buf;
    if (!(src = normalize_source(c, tmpl)) ||
        !(c->globals = jarena_alloc(&c->arena, sizeof(struct jscope))) ||
        !(c->top = jarena_alloc(&c->arena, sizeof(struct jscope)))) {
        jerr_pos(c, 0, 0, "template exceeded the memory limit");
        goto fail;
    }
    c->top->parent = c->globals;
    c->src = src;
    if (setup_globals(c, msgs, n_msgs, o) ||
        jparse(c, src, &root) || jbuf_put(c, &buf, "", 0) || jexec_root(c, root))
        goto fail;
    if (!(*out = malloc(buf.n + 1))) {
        st = sp_error_set(SP_ERR_NOMEM, "chat template: out of memory");
        goto free_ctx;
    }
    memcpy(*out, buf.p, buf.n + 1);
    goto free_ctx;
fail:
    if (c->arena.nomem)
        st = sp_error_set(SP_ERR_NOMEM, "chat template: out of memory");
    else
        st = sp_error_set(SP_ERR_ARG, "%s", c->failed ? c->err : "chat template: failed");
free_ctx:
    jarena_free(&c->arena);
    free(c);
    return st;
}

sp_status sp_chat_render_at(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                            bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, int64_t now_unix, char **out)
{
    struct sp_chat_opts o = {add_generation_prompt, bos_token, eos_token, now_unix, NULL, NULL, NULL};
    return sp_chat_render_opts(tmpl, msgs, n_msgs, &o, out);
}

sp_status sp_chat_render(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, const char *bos_token,
                         const char *eos_token, char **out)
{
    return sp_chat_render_at(tmpl, msgs, n_msgs, add_generation_prompt, bos_token, eos_token,
                             -1, out);
}
