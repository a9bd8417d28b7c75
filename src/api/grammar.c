/* sp_grammar for public users: grammars (src/grammar) made for a public
 * sp_model's vocabulary, the output check a request's validate takes, and
 * the grammar costs `spindle bench` reports (see include/spindle.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
    if (kind != SP_GRAMMAR_GBNF && kind != SP_GRAMMAR_SCHEMA && kind != SP_GRAMMAR_SCHEMA_FLEX)
        return sp_error_set(SP_ERR_ARG, "sp_grammar_create: kind %d is neither GBNF nor a JSON Schema", (int)kind);
    sp_status st = sp_api_grammar_tokens(m, &t);
    if (st != SP_OK)
        return st;
    return sp_grammar_prepare(kind, text ? text : "", len, NULL, t, out);
}

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

static double sp_api_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int sp_api_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

sp_status sp_grammar_benchmark(const sp_model *m, sp_grammar_kind kind, const char *text, size_t len,
                               const sp_token *const *seqs, const size_t *lens, size_t n_seqs,
                               sp_grammar_bench *out)
{
    sp_grammar *proto = NULL, *g = NULL;
    const struct sp_grammar_tokens *t;
    double *us = NULL;
    size_t total = 0, k = 0;
    *out = (sp_grammar_bench){0};
    sp_status st = sp_api_grammar_tokens(m, &t); /* outside the timing */
    if (st != SP_OK)
        return st;
    double t0 = sp_api_now();
    if ((st = sp_grammar_create(m, kind, text, len, &proto)) != SP_OK)
        return st;
    double t1 = sp_api_now();
    st = sp_grammar_clone(proto, &g);
    out->copy_us = (sp_api_now() - t1) * 1e6;
    out->compile_ms = (t1 - t0) * 1e3;
    if (st != SP_OK)
        goto done;
    for (size_t i = 0; i < n_seqs; i++) {
        if (lens[i] > SIZE_MAX / sizeof *us - total) {
            st = sp_error_set(SP_ERR_NOMEM, "grammar benchmark: too many tokens");
            goto done;
        }
        total += lens[i];
    }
    if (!(us = malloc((total ? total : 1) * sizeof *us))) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar benchmark: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_seqs; i++) {
        sp_grammar_state s = sp_grammar_start(g);
        for (size_t j = 0; j < lens[i] && s != SP_GRAMMAR_DEAD; j++) {
            const uint64_t *mask;
            double a = sp_api_now();
            sp_status ms = sp_grammar_mask(g, s, &mask, NULL);
            us[k++] = (sp_api_now() - a) * 1e6;
            if (ms != SP_OK)
                break;
            s = sp_grammar_advance(g, s, seqs[i][j]);
        }
    }
    sp_error_clear();
    qsort(us, k, sizeof *us, sp_api_cmp_double);
    out->n_masks = k;
    out->mask_us_p50 = k ? us[k / 2] : 0;
    out->mask_us_p99 = k ? us[(size_t)((double)(k - 1) * 0.99)] : 0;
done:
    free(us);
    sp_grammar_free(g);
    sp_grammar_free(proto);
    return st;
}

sp_status sp_grammar_cache_create(const sp_model *m, uint32_t max_entries, sp_grammar_cache **out)
{
    const struct sp_grammar_tokens *t = NULL;
    *out = NULL;
    sp_status st = m ? sp_api_grammar_tokens(m, &t) : SP_OK;
    return st == SP_OK ? sp_grammar_cache_new(out, t, max_entries) : st;
}
