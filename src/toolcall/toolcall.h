/* Tool calling: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`
 * for models whose chat templates write tool calls in different forms.
 *
 * A format (a row of the table in format.c) says how a model writes its
 * calls: Hermes/Qwen `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`,
 * Llama 3 `{"name": ..., "parameters": ...}`, Mistral
 * `[TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}]`, Harmony
 * (gpt-oss) ` to=functions.NAME ...<|message|>{...}`, and plain JSON
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

/* The format a chat template writes calls in (NULL template: plain JSON). */
const struct sp_toolcall_format *sp_toolcall_format_for(const char *tmpl);
const char *sp_toolcall_format_name(const struct sp_toolcall_format *f);

/* Reads a request's tools (array), tool_choice and parallel_tool_calls
 * (JSON values; NULL when absent) for format f.  On SP_ERR_ARG the message
 * says what is wrong and param[0..cap) names the field ("tools[1].function.name"). */
sp_status sp_toolcall_new(struct sp_toolcall **out, const struct sp_toolcall_format *f, const json_t *tools,
                          const json_t *choice, const json_t *parallel, char *param, size_t cap);

/* ---- the conversation the template sees ---- */

/* One OpenAI message, validated by the caller: tool_calls is its JSON
 * array ([{id, type, function: {name, arguments: "<JSON object text>"}}])
 * or NULL. */
struct sp_toolcall_msg {
    const char *role, *content;
    const json_t *tool_calls;
    const char *tool_call_id, *name;
    const char *reasoning_content; /* or NULL */
};

/* Messages and tools ready for sp_chat_render_opts; owns its strings. */
struct sp_toolcall_prompt {
    struct sp_chat_msg *msgs;
    size_t n;
    char *tools;        /* JSON text for the template's `tools`, or NULL */
    const char *reasoning_alias; /* sp_chat_opts.reasoning_alias for this format */
    char **owned;
    size_t n_owned;
};

/* Prepares msgs for format f; tc (may be NULL: no tools in this request)
 * gives the tools.  SP_ERR_ARG when a call's arguments are not a JSON
 * object (the message names the message). */
sp_status sp_toolcall_prompt(const struct sp_toolcall_format *f, const struct sp_toolcall *tc,
                             const struct sp_toolcall_msg *msgs, size_t n, struct sp_toolcall_prompt *out);
void sp_toolcall_prompt_free(struct sp_toolcall_prompt *p);

/* The public part of tool calling (sp_toolcall_free, _choice_of, _grammar,
 * _check, _chat_tokenize and the parser) is in include/spindle.h. */

#endif
