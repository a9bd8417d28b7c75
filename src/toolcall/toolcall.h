/* Tool calling: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`
 * for models whose chat templates write tool calls in different forms.
 *
 * A format (a row of the table in format.c) says how a model writes its
 * calls: Hermes/Qwen `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`,
 * Llama 3 `{"name": ..., "parameters": ...}`, Mistral
 * `[TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}]`, and plain JSON
 * objects for templates that know no tools.  It is chosen from the chat
 * template's source.  For the native formats the template receives the
 * tools, the assistant's tool_calls and the tool results as they are; for
 * plain JSON the conversation is rewritten first (the tools described in
 * the system message, calls as assistant text, results as a user turn).
 *
 * The calls are enforced by a grammar built from the functions' parameter
 * schemas: from the start of the output for `required` and a named
 * function, from the format's trigger on (a lazy grammar) for `auto`.  A
 * finished output is parsed back into calls (sp_toolcall_parser, also
 * incrementally for streams) and each call's arguments are validated
 * against its function's schema.
 *
 * Everything here reads its inputs and keeps its own copies: one
 * sp_toolcall per request, owned by the request's thread, then read (never
 * written) by the engine's check and the response builder. */
#ifndef SP_TOOLCALL_TOOLCALL_H
#define SP_TOOLCALL_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"
#include "spindle.h"

struct sp_toolcall;
struct sp_toolcall_format;

enum sp_toolcall_choice {
    SP_TOOLCALL_NONE,     /* no call: the answer is text */
    SP_TOOLCALL_AUTO,     /* text or calls, the model decides */
    SP_TOOLCALL_REQUIRED, /* one or more calls */
    SP_TOOLCALL_NAMED,    /* exactly one call of the named function */
};

/* The format a chat template writes calls in (NULL template: plain JSON). */
const struct sp_toolcall_format *sp_toolcall_format_for(const char *tmpl);
const char *sp_toolcall_format_name(const struct sp_toolcall_format *f);

/* Reads a request's tools (array), tool_choice and parallel_tool_calls
 * (JSON values; NULL when absent) for format f.  On SP_ERR_ARG the message
 * says what is wrong and param[0..cap) names the field ("tools[1].function.name"). */
sp_status sp_toolcall_new(struct sp_toolcall **out, const struct sp_toolcall_format *f, const json_t *tools,
                          const json_t *choice, const json_t *parallel, char *param, size_t cap);
void sp_toolcall_free(struct sp_toolcall *tc);
enum sp_toolcall_choice sp_toolcall_choice(const struct sp_toolcall *tc);

/* The grammar of the calls (GBNF text, malloc'd) and, for `auto`, the
 * trigger that starts it (static; NULL otherwise).  SP_ERR_ARG for
 * tool_choice none (no grammar) or parameters no grammar can express. */
sp_status sp_toolcall_grammar(const struct sp_toolcall *tc, char **gbnf, const char **trigger);

/* The check of a finished output, in the shape of sp_gen_params.validate
 * (ctx: the sp_toolcall): every call names a function of the request and
 * its arguments are valid for that function's parameter schema. */
sp_status sp_toolcall_check(void *tc, const char *text, size_t len, char *why, size_t cap);

/* ---- the conversation the template sees ---- */

/* One OpenAI message, validated by the caller: tool_calls is its JSON
 * array ([{id, type, function: {name, arguments: "<JSON object text>"}}])
 * or NULL. */
struct sp_toolcall_msg {
    const char *role, *content;
    const json_t *tool_calls;
    const char *tool_call_id, *name;
};

/* Messages and tools ready for sp_chat_render_opts; owns its strings. */
struct sp_toolcall_prompt {
    struct sp_chat_msg *msgs;
    size_t n;
    char *tools;        /* JSON text for the template's `tools`, or NULL */
    char **owned;
    size_t n_owned;
};

/* Prepares msgs for format f; tc (may be NULL: no tools in this request)
 * gives the tools.  SP_ERR_ARG when a call's arguments are not a JSON
 * object (the message names the message). */
sp_status sp_toolcall_prompt(const struct sp_toolcall_format *f, const struct sp_toolcall *tc,
                             const struct sp_toolcall_msg *msgs, size_t n, struct sp_toolcall_prompt *out);
void sp_toolcall_prompt_free(struct sp_toolcall_prompt *p);

/* ---- reading calls out of the output ---- */

enum sp_toolcall_event_kind {
    SP_TOOLCALL_TEXT, /* content text */
    SP_TOOLCALL_CALL, /* a call begins: index, id, name (text) */
    SP_TOOLCALL_ARGS, /* a piece of the arguments' JSON text of call `index` */
};

struct sp_toolcall_event {
    enum sp_toolcall_event_kind kind;
    int index;
    const char *id;     /* SP_TOOLCALL_CALL */
    const char *text;
    size_t len;
};
typedef sp_status (*sp_toolcall_fn)(void *user, const struct sp_toolcall_event *ev);

/* An incremental reader of one choice's output.  Text that may still turn
 * into a call is held back until it is known not to. */
struct sp_toolcall_parser;
sp_status sp_toolcall_parser_new(struct sp_toolcall_parser **out, const struct sp_toolcall *tc);
void sp_toolcall_parser_free(struct sp_toolcall_parser *p);
/* Forgets everything read (an attempt that is retried). */
void sp_toolcall_parser_reset(struct sp_toolcall_parser *p);
/* Reads more output; `last`: the output ends here (held text is released).
 * Events go to fn, which may fail (its status is returned). */
sp_status sp_toolcall_parser_feed(struct sp_toolcall_parser *p, const char *text, size_t len, bool last,
                                  sp_toolcall_fn fn, void *user);
int sp_toolcall_parser_calls(const struct sp_toolcall_parser *p);

#endif
