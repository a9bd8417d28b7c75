/* sp_grammar for public users: grammars (src/grammar) made for a public
 * sp_model's vocabulary and the output check a request's validate takes
 * (see include/spindle.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "grammar/grammar.h"

sp_status sp_api_grammar_tokens(const sp_model *m, const struct sp_grammar_tokens **out)
{
    /* The table is a cache of the immutable vocabulary: building it does
     * not change what the model is, so a const model may build it. */
    sp_model *mm = (sp_model *)m;
    sp_status st = SP_OK;
    pthread_mutex_lock(&mm->grammar_mu);
    if (!mm->grammar_tokens)
        st = sp_grammar_tokens_from_vocab(&mm->grammar_tokens, mm->vocab);
    *out = mm->grammar_tokens;
    pthread_mutex_unlock(&mm->grammar_mu);
    return st;
}

sp_status sp_grammar_create(const sp_model *m, sp_grammar_kind kind, const char *text, size_t len,
                            sp_grammar **out)
{
    const struct sp_grammar_tokens *t;
    if (!out)
        return sp_error_set(SP_ERR_ARG, "sp_grammar_create: out is NULL");
    *out = NULL;
    if (!m || (!text && len))
        return sp_error_set(SP_ERR_ARG, "sp_grammar_create: no model or no text");
    if (kind != SP_GRAMMAR_GBNF && kind != SP_GRAMMAR_SCHEMA && kind != SP_GRAMMAR_SCHEMA_FLEX &&
        kind != SP_GRAMMAR_SCHEMA_STRICT && kind != SP_GRAMMAR_SCHEMA_STRICT_FLEX)
        return sp_error_set(SP_ERR_ARG, "sp_grammar_create: kind %d is neither GBNF nor a JSON Schema", (int)kind);
    sp_status st = sp_api_grammar_tokens(m, &t);
    if (st != SP_OK)
        return st;
    return sp_grammar_prepare(kind, text ? text : "", len, NULL, t, out);
}

void sp_grammar_stop_when(bool (*stop)(void *ctx), void *ctx) { sp_grammar_stop_set(stop, ctx); }

sp_status sp_grammar_check_text(void *grammar, const char *text, size_t len, char *why, size_t cap)
{
    struct sp_grammar *g = grammar;
    /* a schema's validator is the whole check (the grammar spells one key
     * order and one spacing of what the schema allows) */
    if (!sp_grammar_has_schema(g) && !sp_grammar_accepting(g, sp_grammar_feed(g, sp_grammar_start(g), text, len))) {
        if (cap)
            snprintf(why, cap, "the text is not a complete sentence of the grammar");
        return SP_ERR_ARG;
    }
    return sp_grammar_check(g, text, len, why, cap);
}

sp_status sp_grammar_cache_create(const sp_model *m, uint32_t max_entries, sp_grammar_cache **out)
{
    const struct sp_grammar_tokens *t = NULL;
    *out = NULL;
    sp_status st = m ? sp_api_grammar_tokens(m, &t) : SP_OK;
    return st == SP_OK ? sp_grammar_cache_new(out, t, max_entries) : st;
}
