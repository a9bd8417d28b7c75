/* The engine's side of speculative decoding: which choices draft, how much
 * room their drafts get in the step, and what verification keeps.  The
 * drafts travel in the step's one batch as extra positions of their
 * sequence with logits requested (engine.c); the sources, the number of
 * drafts and the acceptance rule are the spec room's. */
#include <stdlib.h>

#include "core/error.h"
#include "engine/engine_internal.h"
#include "model/model.h"
#include "spec/spec.h"

/* A verification rolls a sequence back over its drafts and the step's last
 * token, which a linear layer's state must allow (state.h). */
_Static_assert(SP_SPEC_K_MAX + 1 <= SP_STATE_ROLLBACK, "the state rolls back over a step's drafts");

sp_status sp_engine_spec_init(struct sp_engine *e, const struct sp_engine_params *p, const struct sp_model *draft,
                              const struct sp_vocab *draft_vocab)
{
    if (p->spec == SP_SPEC_NONE) {
        if (p->draft_model)
            return sp_error_set(SP_ERR_ARG, "--draft-model needs --spec draft");
        return SP_OK;
    }
    if ((unsigned)p->spec > SP_SPEC_SELF)
        return sp_error_set(SP_ERR_ARG, "speculative decoding: unknown source %d", (int)p->spec);
    e->spec_rows = e->n_out_max < 64 ? e->n_out_max : 64;
    struct sp_spec_config c = {
        .kind = p->spec, .k = p->spec_k ? p->spec_k : 8, .fixed = p->spec_fixed,
        .draft = draft, .draft_vocab = draft_vocab, .layers = p->spec_layers,
    };
    struct sp_spec_target t = {
        .model = e->model, .vocab = e->vocab, .mem = e->mem, .fs = &e->fs, .pool = e->pool,
        .n_ctx = e->n_ctx, .n_batch = e->n_batch, .n_parallel = e->n_parallel, .n_rows = e->spec_rows,
    };
    sp_status st = sp_spec_init(&e->spec, &c, &t);
    if (st != SP_OK)
        return st;
    e->spec_jobs = calloc((size_t)e->spec_rows, sizeof *e->spec_jobs);
    e->spec_choice = calloc((size_t)e->spec_rows, sizeof *e->spec_choice);
    e->spec_lp = calloc(SP_SPEC_K_MAX + 1, sizeof *e->spec_lp);
    if (!e->spec_jobs || !e->spec_choice || !e->spec_lp)
        return sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory");
    return SP_OK;
}

void sp_engine_spec_free(struct sp_engine *e)
{
    sp_spec_free(e->spec);
    free(e->spec_jobs);
    free(e->spec_choice);
    free(e->spec_lp);
}

void sp_engine_spec_draft(struct sp_engine *e, uint32_t n_prefill)
{
    uint32_t n_decode = 0;
    int n_jobs = 0;
    for (struct sp_request *r = e->active; r; r = r->next) {
        if (r->state != SP_REQ_DECODE)
            continue;
        for (int i = 0; i < r->n_choices; i++) {
            struct sp_choice *c = &r->choices[i];
            if (c->done)
                continue;
            n_decode++;
            c->n_draft = 0;
            if (!c->spec || r->cancelled || n_jobs == e->spec_rows)
                continue;
            /* drafts stay inside the context and the tokens still allowed
             * (the token after the last kept draft is the target's own) */
            uint32_t room = r->max_pos - c->n_tokens - 1;
            if (r->gp.max_tokens > 0) {
                uint32_t left = (uint32_t)r->gp.max_tokens - c->n_generated - 1;
                room = left < room ? left : room;
            }
            if (!room)
                continue;
            e->spec_choice[n_jobs] = c;
            e->spec_jobs[n_jobs++] = (struct sp_spec_job){
                .ss = c->spec, .tokens = c->tokens, .n_tokens = c->n_tokens, .seq = &c->seq, .cap = room,
            };
        }
    }
    if (!n_jobs)
        return;
    /* the drafts share what the step has beyond one token per decoding
     * sequence, so every sequence keeps its place */
    uint32_t limit = (uint32_t)(e->n_out_max < e->n_batch ? e->n_out_max : e->n_batch);
    uint32_t share = limit > n_decode ? (limit - n_decode) / (uint32_t)n_jobs : 0;
    for (int i = 0; i < n_jobs; i++)
        if (e->spec_jobs[i].cap > share)
            e->spec_jobs[i].cap = share;
    uint32_t base = n_decode + n_prefill < (uint32_t)e->n_batch ? n_decode + n_prefill : (uint32_t)e->n_batch;
    sp_spec_draft(e->spec, e->spec_jobs, n_jobs, (int)n_decode, (int)base);
    for (int i = 0; i < n_jobs; i++)
        e->spec_choice[i]->n_draft = e->spec_jobs[i].n_draft;
}

void sp_engine_spec_drop(struct sp_engine *e, struct sp_choice *c, uint32_t keep, bool in_step)
{
    if (!c->n_draft)
        return;
    /* in the step: positions n_tokens - 1 .. n_tokens + keep - 1 */
    sp_memory_seq_truncate(e->mem, &c->seq, in_step ? c->n_tokens + keep : c->n_tokens - 1);
    c->n_draft = in_step ? keep : 0;
}

void sp_engine_spec_verify(struct sp_engine *e, struct sp_choice *c, const float *rows)
{
    struct sp_request *r = c->req;
    const uint32_t n = c->n_tokens, k = c->n_draft, V = e->model->hp.n_vocab;
    struct sp_token_logprobs *lp = r->gp.logprobs >= 0 ? e->spec_lp : NULL;
    uint32_t m = 0; /* drafts accepted */
    c->n_draft = 0;
    for (;; m++) {
        bool accepted;
        sp_token t = sp_spec_verify(e->spec, c->spec, c->sampler, rows + (size_t)m * V, c->tokens, n + m, m, k,
                                    lp ? &lp[m] : NULL, &accepted);
        if (t < 0) {
            sp_choice_finish(e, c, SP_FINISH_ERROR);
            return;
        }
        if (!accepted) {
            c->tokens[n + m] = t;
            break;
        }
    }
    r->n_drafted += k;
    r->n_accepted += m;
    sp_spec_seq_done(e->spec, c->spec, k, m, n + m);
    /* positions n - 1 .. n + m - 1 hold the last token and the kept drafts;
     * only now are their blocks registered with the prefix cache */
    if (sp_memory_seq_truncate(e->mem, &c->seq, n + m) != SP_OK) {
        sp_choice_finish(e, c, SP_FINISH_ERROR);
        return;
    }
    sp_memory_prefix_commit(e->mem, &c->seq, c->tokens);
    for (uint32_t j = 0; j <= m && !c->done; j++)
        sp_choice_take(e, c, c->tokens[n + j], lp ? &lp[j] : NULL, NULL);
}
