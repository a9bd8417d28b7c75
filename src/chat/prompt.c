/* Chat prompts of a model: its template (the file's own, else the built-in
 * format its architecture names) rendered with its BOS/EOS texts, then
 * tokenized with special tokens recognised. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

/* Gemma's turn format, for Gemma files that carry no template: a system
 * message is folded into the first user turn; "assistant" is "model". */
static const char sp_gemma_template[] =
    "{{ bos_token }}"
    "{% set ns = namespace(prefix='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.prefix = message['content'] + '\n\n' %}"
    "{% else %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + ns.prefix + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% set ns.prefix = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/* Llama 4's header format (llama.cpp's built-in "llama4"), for Llama 4
 * files that carry no template: each message's role between headers,
 * its trimmed content, <|eot|>. */
static const char sp_llama4_template[] =
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|header_start|>' + message['role'] + '<|header_end|>\n\n' + message['content'] | trim + '<|eot|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|header_start|>assistant<|header_end|>\n\n' }}{% endif %}";

/* Built-in formats by the name an architecture gives; ChatML otherwise. */
static const struct {
    const char *name;
    const char *tmpl;
} sp_chat_builtin[] = {
    {"gemma", sp_gemma_template},
    {"llama4", sp_llama4_template},
};

const char *sp_chat_template_for(const struct sp_vocab *v, const char *arch_format)
{
    const char *tmpl = sp_vocab_chat_template(v);
    if (tmpl)
        return tmpl;
    for (size_t i = 0; arch_format && i < sizeof sp_chat_builtin / sizeof sp_chat_builtin[0]; i++)
        if (!strcmp(arch_format, sp_chat_builtin[i].name))
            return sp_chat_builtin[i].tmpl;
    return sp_chat_chatml_template();
}

static char *sp_chat_token_text(const struct sp_vocab *v, sp_token t)
{
    char buf[512];
    int n = t >= 0 ? sp_token_to_piece(v, t, true, buf, sizeof buf) : 0;
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    buf[n] = '\0';
    return strdup(buf);
}

sp_status sp_chat_prompt_text(const struct sp_vocab *v, const char *arch_format, const struct sp_chat_msg *msgs,
                              size_t n, const char *tools, const char *vars, const char *reasoning_alias,
                              bool add_generation_prompt, char **text)
{
    char *bos = sp_chat_token_text(v, sp_vocab_bos(v)), *eos = sp_chat_token_text(v, sp_vocab_eos(v));
    struct sp_chat_opts o = {add_generation_prompt, bos, eos, -1, tools, vars, reasoning_alias};
    sp_status st = bos && eos ? sp_chat_render_opts(sp_chat_template_for(v, arch_format), msgs, n, &o, text)
                              : sp_error_set(SP_ERR_NOMEM, "chat: no memory");
    free(bos);
    free(eos);
    return st;
}

sp_status sp_chat_prompt(const struct sp_vocab *v, const char *arch_format, const struct sp_chat_msg *msgs, size_t n,
                         const char *tools, const char *vars, const char *reasoning_alias, sp_token **out,
                         size_t *n_out)
{
    char *text = NULL, bos[512];
    *out = NULL;
    *n_out = 0;
    sp_status st = sp_chat_prompt_text(v, arch_format, msgs, n, tools, vars, reasoning_alias, true, &text);
    if (st != SP_OK)
        return st;
    /* The template may write the BOS text itself: then do not add another. */
    int nb = sp_vocab_bos(v) >= 0 ? sp_token_to_piece(v, sp_vocab_bos(v), true, bos, sizeof bos) : 0;
    bool has_bos = nb > 0 && (size_t)nb < sizeof bos && !strncmp(text, bos, (size_t)nb);
    st = sp_tokenize_alloc(v, text, strlen(text), true, true, out, n_out);
    if (st == SP_OK && has_bos && *n_out >= 2 && (*out)[0] == sp_vocab_bos(v) && (*out)[1] == sp_vocab_bos(v)) {
        memmove(*out, *out + 1, (*n_out - 1) * sizeof **out);
        (*n_out)--;
    }
    free(text);
    return st;
}
