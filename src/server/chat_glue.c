/* OpenAI messages -> prompt tokens through the model's chat template. */
#include "server/chat_glue.h"

#include <stdlib.h>

#include "core/error.h"
#include "engine/prompt.h"
#include "server/schema.h"

sp_status sp_chat_glue_tokens(const struct sp_vocab *v, const struct sp_model *m,
                              const struct sp_chat_glue_msg *msgs, size_t n, sp_token **out,
                              size_t *n_out, struct sp_api_error *err)
{
    *out = NULL;
    *n_out = 0;
    struct sp_chat_msg *cm = calloc(n ? n : 1, sizeof *cm);
    if (!cm)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    sp_status st = sp_prompt_chat(v, m, cm, n, out, n_out);
    if (st == SP_ERR_NOMEM)
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    else if (st != SP_OK)
        st = sp_api_fail(err, 400, "invalid_request_error", "invalid_value", "messages",
                         "The chat template failed on these messages: %s", sp_error_message());
    free(cm);
    return st;
}
