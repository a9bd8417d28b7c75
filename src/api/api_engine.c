/* Engines made from a public sp_model and text prompts.  The engine and its requests are the engine room's own
 * (src/engine); this file only connects them to sp_model. */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

sp_status sp_engine_create(const sp_model *m, const sp_engine_params *p, sp_engine **out)
{
    sp_engine_params ep;
    if (!out)
        return sp_error_set(SP_ERR_ARG, "sp_engine_create: out is NULL");
    *out = NULL;
    if (!m->weights)
        return sp_error_set(SP_ERR_ARG, "%s: loaded with vocab_only: it has no weights to run", m->path);
    if (p)
        ep = *p;
    else
        sp_engine_params_default(&ep);
    if (ep.n_threads <= 0)
        ep.n_threads = m->n_threads;
    const sp_model *d = ep.draft_model;
    if (d && !d->weights)
        return sp_error_set(SP_ERR_ARG, "%s: loaded with vocab_only: it cannot draft", d->path);
    return sp_engine_init(out, m->weights, m->vocab, &ep, d ? d->weights : NULL, d ? d->vocab : NULL);
}

sp_status sp_threads_create(int n_threads, sp_threads **out)
{
    if (!out)
        return sp_error_set(SP_ERR_ARG, "sp_threads_create: out is NULL");
    return sp_pool_init_shared(out, n_threads);
}

void sp_threads_free(sp_threads *t) { sp_pool_free(t); }

sp_status sp_request_submit_text(sp_engine *e, const char *text, size_t len, bool parse_special,
                                 const sp_gen_params *gp, sp_event_fn fn, void *user, sp_request **out)
{
    sp_token *toks = NULL;
    size_t n = 0;
    if (out)
        *out = NULL;
    sp_status st = sp_tokenize_alloc(sp_engine_vocab(e), text, len, true, parse_special, &toks, &n);
    if (st == SP_OK)
        st = sp_request_submit(e, toks, n, gp, fn, user, out);
    free(toks);
    return st;
}
