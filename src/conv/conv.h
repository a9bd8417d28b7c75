/* A conversation for a chat front end: its messages, the prompt they make
 * with the model's chat template, trimmed to fit the context, and their
 * JSON form (OpenAI's messages array) for saving and loading.
 *
 * Trimming drops whole turns, oldest first (a user message and the replies
 * after it), never a system message and never the last user message. */
#ifndef SP_CONV_CONV_H
#define SP_CONV_CONV_H

#include <stddef.h>

#include "chat/chat.h"
#include "spindle.h"

struct sp_conv;
struct sp_vocab;
struct sp_model;

sp_status sp_conv_init(struct sp_conv **out);
void sp_conv_free(struct sp_conv *c);

/* Appends a copy of (role, content).  Roles: system, user, assistant. */
sp_status sp_conv_add(struct sp_conv *c, const char *role, const char *content);
/* Sets the system message (the first message, added when absent); NULL or ""
 * removes it. */
sp_status sp_conv_set_system(struct sp_conv *c, const char *text);
/* Removes the last message (none: nothing happens). */
void sp_conv_pop(struct sp_conv *c);
/* Removes every message but the system message. */
void sp_conv_clear(struct sp_conv *c);
size_t sp_conv_count(const struct sp_conv *c);
/* The messages, valid until the next change. */
const struct sp_chat_msg *sp_conv_messages(const struct sp_conv *c);

/* Renders the conversation with a generation prompt and tokenizes it.  While
 * the prompt is longer than max_tokens, the oldest turn is dropped from the
 * conversation itself; *n_dropped counts the messages removed.  SP_ERR_CONTEXT
 * when even the system message and the last user message do not fit. */
sp_status sp_conv_prompt(struct sp_conv *c, const struct sp_vocab *v, const struct sp_model *m,
                         size_t max_tokens, sp_token **out, size_t *n_out, size_t *n_dropped);

/* Writes the messages as a JSON array of {"role", "content"} objects. */
sp_status sp_conv_save(const struct sp_conv *c, const char *path);
/* Replaces the messages with those of a file in the same form (or an object
 * with a "messages" array).  On error the conversation is unchanged. */
sp_status sp_conv_load(struct sp_conv *c, const char *path);

#endif
