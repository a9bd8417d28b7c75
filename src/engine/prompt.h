/* Prompts: text or a chat conversation -> token ids, as `run` and the server
 * both need them.  Chat uses the model's own template (tokenizer.chat_template)
 * or, when the file has none, the architecture's built-in format. */
#ifndef SP_ENGINE_PROMPT_H
#define SP_ENGINE_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"
#include "spindle.h"

struct sp_vocab;
struct sp_model;

/* Tokenizes text (BOS per the file's metadata).  *out is malloc'd. */
sp_status sp_prompt_tokens(const struct sp_vocab *v, const char *text, size_t len, bool parse_special,
                           sp_token **out, size_t *n_out);

/* The template chat prompts render with: the file's own, else the
 * architecture's built-in format. */
const char *sp_prompt_template(const struct sp_vocab *v, const struct sp_model *m);

/* Renders msgs with a generation prompt; tools: JSON text of the tools
 * array the template receives, or NULL.  *text is malloc'd. */
sp_status sp_prompt_render_chat(const struct sp_vocab *v, const struct sp_model *m, const struct sp_chat_msg *msgs,
                                size_t n, const char *tools, char **text);

/* Renders and tokenizes with special tokens recognised; BOS is added unless
 * the template already wrote it.  *out is malloc'd. */
sp_status sp_prompt_chat(const struct sp_vocab *v, const struct sp_model *m, const struct sp_chat_msg *msgs, size_t n,
                         const char *tools, sp_token **out, size_t *n_out);

#endif
