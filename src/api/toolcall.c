/* sp_toolcall for public users: the tool-call room (src/toolcall) reads
 * jansson values; the public API takes JSON text and a model, whose chat
 * template picks the call format (see include/spindle.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/api_internal.h"
#include "chat/chat.h"
#include "core/error.h"
#include "toolcall/toolcall.h"

/* text parsed as any JSON value into *out (text NULL: *out NULL). */
static sp_status sp_api_json(const char *text, const char *what, json_t **out)
{
    json_error_t jerr;
    *out = NULL;
    if (!text)
        return SP_OK;
    if (!(*out = json_loads(text, JSON_DECODE_ANY, &jerr)))
        return sp_error_set(SP_ERR_ARG, "%s: not JSON: %s", what, jerr.text);
    return SP_OK;
}

static const struct sp_toolcall_format *sp_api_toolcall_format(const sp_model *m)
{
    return sp_toolcall_format_for(m ? sp_model_chat_template(m) : NULL);
}

sp_status sp_toolcall_create(const sp_model *m, const char *tools, const char *choice, const char *parallel,
                             char *param, size_t cap, sp_toolcall **out)
{
    json_t *t = NULL, *c = NULL, *p = NULL;
    *out = NULL;
    if (cap)
        param[0] = '\0';
    sp_status st = sp_api_json(tools, "tools", &t);
    if (st == SP_OK)
        st = sp_api_json(choice, "tool_choice", &c);
    if (st == SP_OK)
        st = sp_api_json(parallel, "parallel_tool_calls", &p);
    if (st == SP_OK)
        st = sp_toolcall_new(out, sp_api_toolcall_format(m), t, c, p, param, cap);
    json_decref(t);
    json_decref(c);
    json_decref(p);
    return st;
}

sp_status sp_toolcall_chat_tokenize(const sp_model *m, const sp_toolcall *tc, const sp_chat_msg *msgs, size_t n,
                                    sp_token **out, size_t *n_out)
{
    return sp_toolcall_chat_tokenize_vars(m, tc, msgs, n, NULL, out, n_out);
}

sp_status sp_toolcall_chat_tokenize_vars(const sp_model *m, const sp_toolcall *tc, const sp_chat_msg *msgs, size_t n,
                                         const char *vars, sp_token **out, size_t *n_out)
{
    struct sp_toolcall_msg *tm = calloc(n ? n : 1, sizeof *tm);
    struct sp_toolcall_prompt tp = {0};
    sp_status st = tm ? SP_OK : sp_error_set(SP_ERR_NOMEM, "tools: out of memory");
    *out = NULL;
    *n_out = 0;
    for (size_t i = 0; i < n && st == SP_OK; i++) {
        json_t *calls;
        char what[48];
        snprintf(what, sizeof what, "messages[%zu].tool_calls", i);
        st = sp_api_json(msgs[i].tool_calls, what, &calls);
        tm[i] = (struct sp_toolcall_msg){.role = msgs[i].role, .content = msgs[i].content, .tool_calls = calls,
                                         .tool_call_id = msgs[i].tool_call_id, .name = msgs[i].name,
                                         .reasoning_content = msgs[i].reasoning_content};
    }
    if (st == SP_OK)
        st = sp_toolcall_prompt(sp_api_toolcall_format(m), tc, tm, n, &tp);
    if (st == SP_OK)
        st = sp_chat_prompt(m->vocab, sp_api_chat_format(m), tp.msgs, tp.n, tp.tools, vars, tp.reasoning_alias, out,
                            n_out);
    sp_toolcall_prompt_free(&tp);
    for (size_t i = 0; tm && i < n; i++)
        json_decref((json_t *)tm[i].tool_calls);
    free(tm);
    return st;
}
