/* OpenAI messages -> prompt tokens through the model's chat template. */
#include "server/chat_glue.h"

#include <stdlib.h>

#include "core/error.h"
#include "engine/prompt.h"
#include "server/schema.h"
#include "toolcall/toolcall.h"

sp_status sp_chat_glue_tokens(const struct sp_vocab *v, const struct sp_model *m,
                              const struct sp_chat_glue_msg *msgs, size_t n, const struct sp_toolcall *tc,
                              sp_token **out, size_t *n_out, struct sp_api_error *err)
{
    struct sp_toolcall_prompt p;
    *out = NULL;
    *n_out = 0;
    struct sp_toolcall_msg *tm = calloc(n ? n : 1, sizeof *tm);
    if (!tm)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++)
        tm[i] = (struct sp_toolcall_msg){msgs[i].role, msgs[i].content, msgs[i].tool_calls, msgs[i].tool_call_id,
                                         msgs[i].name};
    const struct sp_toolcall_format *f = sp_toolcall_format_for(sp_prompt_template(v, m));
    sp_status st = sp_toolcall_prompt(f, tc, tm, n, &p);
    if (st == SP_OK)
        st = sp_prompt_chat(v, m, p.msgs, p.n, p.tools, out, n_out);
    if (st == SP_ERR_NOMEM)
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    else if (st != SP_OK)
        st = sp_api_fail(err, 400, "invalid_request_error", "invalid_value", "messages",
                         "The chat template failed on these messages: %s", sp_error_message());
    sp_toolcall_prompt_free(&p);
    free(tm);
    return st;
}
