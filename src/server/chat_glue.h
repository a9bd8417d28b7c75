/* The server's side of chat templates: OpenAI messages -> prompt text.
 * A thin adapter over src/chat (the template engine), so that schema.c does
 * not depend on that module's message struct. */
#ifndef SP_SERVER_CHAT_GLUE_H
#define SP_SERVER_CHAT_GLUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "spindle.h"

struct sp_vocab;
struct sp_model;
struct sp_api_error;
struct sp_toolcall;

struct sp_chat_glue_msg {
    const char *role;     /* "system", "user", ... (validated by the caller) */
    const char *content;  /* may be NULL (assistant turn without text) */
    size_t content_len;
    bool owned;           /* content was allocated by the caller's parser */
    const json_t *tool_calls;              /* assistant: validated tool_calls, or NULL */
    const char *tool_call_id, *name;       /* tool results */
};

/* Renders msgs with the model's chat template (or its architecture's
 * built-in format) and a trailing generation prompt, and tokenizes the result
 * exactly as `spindle run --chat` does (sp_prompt_chat).  Tool calls and
 * results, and the request's tools (tc, may be NULL), are given to the
 * template in the form its tool-call format wants (src/toolcall).  *out is
 * malloc'd.  Errors (a template that fails on these messages) fill *err
 * with a 4xx; allocation failure with a 500. */
sp_status sp_chat_glue_tokens(const struct sp_vocab *v, const struct sp_model *m,
                              const struct sp_chat_glue_msg *msgs, size_t n, const struct sp_toolcall *tc,
                              sp_token **out, size_t *n_out, struct sp_api_error *err);

#endif
