/* sp_chat_render: sets up the jinja2-compatible environment (see chat.h) and
 * runs the interpreter in jinja_*.c on one arena freed before returning. */
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

static int setup_globals(struct jctx *c, const struct sp_chat_msg *msgs, size_t n_msgs,
                         bool agp, const char *bos, const char *eos)
{
    struct jval v;
    struct jlist *l = jlist_new(c, n_msgs);
    if (!l)
        return -1;
    for (size_t i = 0; i < n_msgs; i++) {
        struct jdict *d = jdict_new(c, 2);
        struct jval role, content;
        if (!d || str_val(c, msgs[i].role ? msgs[i].role : "", &role) ||
            str_val(c, msgs[i].content, &content) ||
            jdict_set(c, d, jv_strn("role", 4), role) ||
            jdict_set(c, d, jv_strn("content", 7), content))
            return -1;
        l->v[l->n].t = JV_DICT;
        l->v[l->n++].u.d = d;
    }
    v.t = JV_LIST;
    v.u.l = l;
    if (jscope_define(c, c->globals, "messages", v) ||
        jscope_define(c, c->globals, "add_generation_prompt", jv_bool(agp)))
        return -1;
    if (str_val(c, bos ? bos : "", &v) || jscope_define(c, c->globals, "bos_token", v) ||
        str_val(c, eos ? eos : "", &v) || jscope_define(c, c->globals, "eos_token", v))
        return -1;
    static const struct { const char *name; int fn; } funcs[] = {
        { "raise_exception", JF_RAISE }, { "strftime_now", JF_STRFTIME },
        { "namespace", JF_NAMESPACE }, { "range", JF_RANGE }, { "dict", JF_DICT },
    };
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
        struct jval f = { .t = JV_FUNC };
        f.u.fn = funcs[i].fn;
        if (jscope_define(c, c->globals, funcs[i].name, f))
            return -1;
    }
    return 0;
}

sp_status sp_chat_render_at(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                            bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, int64_t now_unix, char **out)
{
    sp_status st = SP_OK;
    struct jnode *root;
    struct jbuf buf = { 0 };
    const char *src;
    if (out)
        *out = NULL;
    if (!tmpl || !out || (n_msgs && !msgs))
        return sp_error_set(SP_ERR_ARG, "sp_chat_render: NULL argument");
    struct jctx *c = calloc(1, sizeof(*c));
    if (!c)
        return sp_error_set(SP_ERR_NOMEM, "chat template: out of memory");
    c->now_unix = now_unix;
    c->out = &buf;
    if (!(src = normalize_source(c, tmpl)) ||
        !(c->globals = jarena_alloc(&c->arena, sizeof(struct jscope))) ||
        !(c->top = jarena_alloc(&c->arena, sizeof(struct jscope)))) {
        jerr_pos(c, 0, 0, "template exceeded the memory limit");
        goto fail;
    }
    c->top->parent = c->globals;
    c->src = src;
    if (setup_globals(c, msgs, n_msgs, add_generation_prompt, bos_token, eos_token) ||
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

sp_status sp_chat_render(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, const char *bos_token,
                         const char *eos_token, char **out)
{
    return sp_chat_render_at(tmpl, msgs, n_msgs, add_generation_prompt, bos_token, eos_token,
                             -1, out);
}
