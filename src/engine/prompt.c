#include "engine/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
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

sp_status sp_prompt_tokens(const struct sp_vocab *v, const char *text, size_t len, bool parse_special, sp_token **out,
                           size_t *n_out)
{
    size_t cap = len + 16, n = 0;
    sp_token *toks = malloc(cap * sizeof *toks);
    sp_status st;
    *out = NULL;
    *n_out = 0;
    if (!toks)
        return sp_error_set(SP_ERR_NOMEM, "prompt: no memory for %zu tokens", cap);
    st = sp_tokenize(v, text, len, true, parse_special, toks, cap, &n);
    if (st == SP_ERR_ARG && n > cap) { /* more tokens than bytes + 16: cannot happen, but stay safe */
        sp_token *t2 = realloc(toks, n * sizeof *toks);
        if (!t2) {
            free(toks);
            return sp_error_set(SP_ERR_NOMEM, "prompt: no memory");
        }
        toks = t2;
        st = sp_tokenize(v, text, len, true, parse_special, toks, n, &n);
    }
    if (st != SP_OK) {
        free(toks);
        return st;
    }
    *out = toks;
    *n_out = n;
    return SP_OK;
}

static char *sp_prompt_token_text(const struct sp_vocab *v, sp_token t)
{
    char buf[512];
    int n = t >= 0 ? sp_token_to_piece(v, t, true, buf, sizeof buf) : 0;
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    buf[n] = '\0';
    return strdup(buf);
}

const char *sp_prompt_template(const struct sp_vocab *v, const struct sp_model *m)
{
    const char *tmpl = sp_vocab_chat_template(v);
    if (!tmpl)
        tmpl = m && !strcmp(m->arch->chat_format, "gemma") ? sp_gemma_template : sp_chat_chatml_template();
    return tmpl;
}

sp_status sp_prompt_render_chat(const struct sp_vocab *v, const struct sp_model *m, const struct sp_chat_msg *msgs,
                                size_t n, const char *tools, char **text)
{
    char *bos = sp_prompt_token_text(v, sp_vocab_bos(v)), *eos = sp_prompt_token_text(v, sp_vocab_eos(v));
    struct sp_chat_opts o = {true, bos, eos, -1, tools};
    sp_status st = bos && eos ? sp_chat_render_opts(sp_prompt_template(v, m), msgs, n, &o, text)
                              : sp_error_set(SP_ERR_NOMEM, "chat: no memory");
    free(bos);
    free(eos);
    return st;
}

sp_status sp_prompt_chat(const struct sp_vocab *v, const struct sp_model *m, const struct sp_chat_msg *msgs, size_t n,
                         const char *tools, sp_token **out, size_t *n_out)
{
    char *text = NULL, bos[512];
    sp_status st = sp_prompt_render_chat(v, m, msgs, n, tools, &text);
    if (st != SP_OK)
        return st;
    /* The template may write the BOS text itself: then do not add another. */
    int nb = sp_vocab_bos(v) >= 0 ? sp_token_to_piece(v, sp_vocab_bos(v), true, bos, sizeof bos) : 0;
    bool has_bos = nb > 0 && (size_t)nb < sizeof bos && !strncmp(text, bos, (size_t)nb);
    st = sp_prompt_tokens(v, text, strlen(text), true, out, n_out);
    if (st == SP_OK && has_bos && *n_out >= 2 && (*out)[0] == sp_vocab_bos(v) && (*out)[1] == sp_vocab_bos(v)) {
        memmove(*out, *out + 1, (*n_out - 1) * sizeof **out);
        (*n_out)--;
    }
    free(text);
    return st;
}
