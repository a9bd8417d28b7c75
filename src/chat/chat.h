/* Chat templates: render a conversation with the model's own Jinja template
 * (GGUF key tokenizer.chat_template) the way HF transformers does with
 * Python's jinja2 (ImmutableSandboxedEnvironment, trim_blocks=True,
 * lstrip_blocks=True, loopcontrols, HF's tojson), or with a built-in ChatML
 * template when the file has none.
 *
 * Globals seen by the template: messages (list of {role, content} dicts,
 * with tool_calls, tool_call_id, name and reasoning_content where given),
 * tools (when given),
 * add_generation_prompt, bos_token, eos_token, raise_exception(msg),
 * strftime_now(fmt), namespace(...), range(...).  `documents` is
 * undefined.
 *
 * Work is bounded for hostile templates: output and every string value are
 * capped at SP_CHAT_MAX_OUTPUT bytes, memory at SP_CHAT_MAX_MEMORY, work at
 * SP_CHAT_MAX_STEPS evaluation steps, and nesting/recursion depth is limited,
 * so a template can neither hang nor overflow the stack. */
#ifndef SP_CHAT_CHAT_H
#define SP_CHAT_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

#define SP_CHAT_MAX_OUTPUT (1u << 20)
#define SP_CHAT_MAX_MEMORY (64u << 20)
#define SP_CHAT_MAX_STEPS 5000000u

/* struct sp_chat_msg {role, content, tool_calls, tool_call_id, name} is public:
 * include/spindle.h. */

/* Everything besides the messages; zero means: no generation prompt, empty
 * BOS/EOS, the local time, no tools. */
struct sp_chat_opts {
    bool add_generation_prompt;
    const char *bos_token, *eos_token;
    int64_t now_unix;    /* strftime_now() formats this UTC time; < 0: the local time */
    const char *tools;   /* JSON text of the tools array, or NULL (undefined) */
    const char *vars;    /* JSON text of an object whose keys become globals
                            (HF's template kwargs: enable_thinking, ...), or
                            NULL; the names above are reserved */
    const char *reasoning_alias; /* a message's reasoning_content also under this
                                    key (gpt-oss's template reads "thinking"), or NULL */
};

/* Renders tmpl for msgs[0..n_msgs) with *o (see sp_chat_render).  Also
 * SP_ERR_ARG when tools or a message's tool_calls is not valid JSON, or
 * vars is not a JSON object or names a reserved global. */
sp_status sp_chat_render_opts(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                              const struct sp_chat_opts *o, char **out);

/* Renders `tmpl` (NUL-terminated Jinja source) for msgs[0..n_msgs).
 * bos_token/eos_token may be NULL (treated as "").  On success *out is a
 * malloc'd NUL-terminated string the caller frees.
 * Errors: SP_ERR_ARG (message names line:column and the problem) for a
 * template that does not parse, fails at run time, calls raise_exception or
 * exceeds a limit; SP_ERR_NOMEM when allocation fails. *out is NULL then. */
sp_status sp_chat_render(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, const char *bos_token,
                         const char *eos_token, char **out);

/* As sp_chat_render, but strftime_now() formats the UTC time `now_unix`
 * instead of the local current time (reproducible output for tests). */
sp_status sp_chat_render_at(const char *tmpl, const struct sp_chat_msg *msgs, size_t n_msgs,
                            bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, int64_t now_unix, char **out);

/* The built-in ChatML template used when a model file has no template:
 *   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... [<|im_start|>assistant\n] */
const char *sp_chat_chatml_template(void);

/* ---- a model's chat prompts (prompt.c) ----
 * `v` is the model's vocabulary; `arch_format` the built-in format its
 * architecture names (sp_model_chat_format: "gemma", "llama4", "chatml"; NULL:
 * ChatML), used when the file has no tokenizer.chat_template.  They read
 * only immutable data: any thread may call them. */
struct sp_vocab;

/* The template the model's chat prompts render with. */
const char *sp_chat_template_for(const struct sp_vocab *v, const char *arch_format);

/* Renders msgs (with the assistant's opening when add_generation_prompt)
 * and the model's BOS/EOS texts; tools: JSON text of the tools array the
 * template receives, or NULL; vars and reasoning_alias: sp_chat_opts's.
 * *text is malloc'd. */
sp_status sp_chat_prompt_text(const struct sp_vocab *v, const char *arch_format, const struct sp_chat_msg *msgs,
                              size_t n, const char *tools, const char *vars, const char *reasoning_alias,
                              bool add_generation_prompt, char **text);

/* Renders and tokenizes with special tokens recognised; BOS is added
 * unless the template already wrote it.  *out is malloc'd.  The one path
 * from chat messages to prompt tokens (`spindle run --chat` and the
 * server's /v1/chat/completions). */
sp_status sp_chat_prompt(const struct sp_vocab *v, const char *arch_format, const struct sp_chat_msg *msgs, size_t n,
                         const char *tools, const char *vars, const char *reasoning_alias, sp_token **out,
                         size_t *n_out);

#endif
