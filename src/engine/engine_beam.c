/* Beam search over the engine's sequences.  Live beams share the prompt's KV
 * blocks (forked, copy-on-write for a shared partial block); each step the
 * width best (beam, token) extensions by cumulative log-probability survive.
 * A beam ending in an end-of-generation token becomes a finished hypothesis;
 * the search stops when `width` hypotheses are finished (early stopping), at
 * max_tokens or at the context limit.  Hypotheses are ranked by
 * logprob / length^length_penalty and the best n are emitted as choices. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_internal.h"
#include "grammar/grammar.h"
#include "model/model.h"

sp_status sp_beam_request_init(struct sp_request *r, const sp_token *prompt, uint32_t n_prompt)
{
    struct sp_engine *e = r->e;
    int w = r->width;
    r->hyps = calloc((size_t)w, sizeof *r->hyps);
    r->picks = malloc((size_t)w * 2 * w * sizeof *r->picks);
    r->pick_scratch = malloc((size_t)w * 2 * w * sizeof *r->pick_scratch);
    r->scores = calloc((size_t)w, sizeof *r->scores);
    r->rows = calloc((size_t)w, sizeof *r->rows);
    if (!r->hyps || !r->picks || !r->pick_scratch || !r->scores || !r->rows)
        return sp_error_set(SP_ERR_NOMEM, "beam search: no memory");
    for (int i = 0; i < w; i++) {
        r->hyps[i].tokens = malloc((size_t)e->n_ctx * sizeof(sp_token));
        r->hyps[i].lps = malloc((size_t)e->n_ctx * sizeof(float));
        if (!r->hyps[i].tokens || !r->hyps[i].lps)
            return sp_error_set(SP_ERR_NOMEM, "beam search: no memory");
    }
    for (int i = 0; i < 2 * w; i++) {
        struct sp_choice *c = &r->choices[i];
        c->lps = malloc((size_t)e->n_ctx * sizeof(float));
        if (!c->lps)
            return sp_error_set(SP_ERR_NOMEM, "beam search: no memory");
        c->done = i != 0; /* the prompt is prefilled into choice 0 */
    }
    (void)prompt;
    (void)n_prompt;
    r->live = 0;
    r->n_live = 1;
    return SP_OK;
}

void sp_beam_request_free(struct sp_request *r)
{
    if (r->hyps)
        for (int i = 0; i < r->width; i++) {
            free(r->hyps[i].tokens);
            free(r->hyps[i].lps);
        }
    for (int i = 0; r->choices && i < r->n_choices; i++)
        free(r->choices[i].lps);
    free(r->hyps);
    free(r->picks);
    free(r->pick_scratch);
    free(r->scores);
    free(r->rows);
}

/* Records beam c (+ `extra` when >= 0, with logprob lp) as finished. */
static void sp_beam_finish_hyp(struct sp_request *r, const struct sp_choice *c, sp_token extra, float lp,
                               double logprob, enum sp_finish why)
{
    uint32_t n = c->n_generated + (extra >= 0 ? 1 : 0);
    double score = sp_beam_normalised(logprob, n, r->gp.length_penalty);
    int slot = r->n_hyps;
    if (slot == r->width) { /* full: replace the worst if this one is better */
        slot = 0;
        for (int i = 1; i < r->width; i++)
            if (r->hyps[i].score < r->hyps[slot].score)
                slot = i;
        if (r->hyps[slot].score >= score)
            return;
    } else {
        r->n_hyps++;
    }
    struct sp_beam_hyp *h = &r->hyps[slot];
    memcpy(h->tokens, c->tokens + r->n_prompt, c->n_generated * sizeof *h->tokens);
    memcpy(h->lps, c->lps, c->n_generated * sizeof *h->lps);
    h->n = c->n_generated; /* an end token counts in the length, is not emitted */
    (void)lp;
    h->logprob = logprob;
    h->score = score;
    h->finish = why;
}

static int sp_beam_hyp_cmp(const void *a, const void *b)
{
    const struct sp_beam_hyp *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : 0;
}

/* Emits the best n hypotheses as choices 0..n-1, through the detokenizer
 * and the stop strings, and ends the request. */
static void sp_beam_emit(struct sp_engine *e, struct sp_request *r)
{
    int n = r->gp.n < r->n_hyps ? r->gp.n : r->n_hyps;
    qsort(r->hyps, (size_t)r->n_hyps, sizeof *r->hyps, sp_beam_hyp_cmp);
    for (int k = 0; k < n; k++) {
        struct sp_beam_hyp *h = &r->hyps[k];
        struct sp_choice *c = &r->choices[k]; /* reused for its detok/stop state and emit */
        struct sp_token_logprobs lp = {0};
        enum sp_finish why = h->finish;
        sp_detok_init(&c->detok, e->vocab, false);
        c->idx = k;
        c->n_generated = 0;
        c->logprob_sum = 0;
        c->n_out = 0;
        for (uint32_t i = 0; i < h->n; i++) {
            struct sp_stop_result sr = {0, false};
            int len = sp_detok_push(&c->detok, h->tokens[i], e->text, SP_TEXT_CAP);
            c->n_generated++;
            c->logprob_sum += h->lps[i];
            lp.logprob = h->lps[i];
            sp_stop_feed(&c->stop, e->text, len > 0 ? (size_t)len : 0, e->text2, &sr);
            sp_choice_record(c, e->text2, sr.n_emit);
            sp_choice_emit(c, h->tokens[i], e->text2, sr.n_emit, r->gp.logprobs >= 0 ? &lp : NULL, NULL,
                          SP_FINISH_NONE);
            if (sr.stopped) {
                why = SP_FINISH_STOP;
                break;
            }
        }
        size_t m = 0;
        if (!c->stop.stopped) {
            int k2 = sp_detok_flush(&c->detok, e->text, SP_TEXT_CAP);
            struct sp_stop_result sr = {0, false};
            if (k2 > 0 && sp_stop_feed(&c->stop, e->text, (size_t)k2, e->text2, &sr) == SP_OK)
                m = sr.n_emit;
            m += sp_stop_flush(&c->stop, e->text2 + m);
        }
        /* beam search is deterministic: an invalid hypothesis is an error, not a retry */
        if (r->gp.grammar && why == SP_FINISH_STOP) {
            if (sp_choice_record(c, e->text2, m) && sp_choice_check(r, c)) {
                c->valid = true;
            } else {
                why = SP_FINISH_ERROR;
                c->err = r->why;
                m = 0;
            }
        }
        sp_choice_emit(c, -1, e->text2, m, NULL, NULL, why);
        c->err = NULL;
    }
    for (int i = 0; i < r->n_choices; i++) {
        sp_memory_seq_release(e->mem, &r->choices[i].seq);
        r->choices[i].done = true;
    }
    r->n_open = 0;
}

/* Ends the search with an error on every choice (r->why says why). */
static void sp_beam_fail(struct sp_engine *e, struct sp_request *r)
{
    for (int i = 0; i < r->n_choices; i++) {
        sp_memory_seq_release(e->mem, &r->choices[i].seq);
        r->choices[i].done = true;
    }
    for (int k = 0; k < r->gp.n; k++) {
        struct sp_choice *c = &r->choices[k];
        c->idx = k;
        c->n_generated = 0;
        c->err = r->why;
        sp_choice_emit(c, -1, "", 0, NULL, NULL, SP_FINISH_ERROR);
        c->err = NULL;
    }
    r->n_open = 0;
}

void sp_beam_advance(struct sp_engine *e, struct sp_request *r)
{
    int w = r->width, next = r->live == 0 ? w : 0;
    const uint32_t n_vocab = e->model->hp.n_vocab;
    struct sp_choice *live = &r->choices[r->live], *nxt = &r->choices[next];
    for (int b = 0; b < r->n_live; b++)
        r->scores[b] = live[b].logprob_sum;
    if (r->gp.grammar)
        for (int b = 0; b < r->n_live; b++)
            if (!sp_choice_mask_row(r, &live[b], (float *)r->rows[b], n_vocab)) {
                sp_beam_fail(e, r);
                return;
            }
    /* sp_beam_select wants [n_beams][n_vocab]; rows are consecutive output
     * rows of this step, in live order, so the first row's base works. */
    int n_pick = sp_beam_select(r->rows[0], n_vocab, r->scores, r->n_live, 2 * w, r->picks, r->pick_scratch);
    int n_new = 0;
    bool at_limit = false;
    for (int i = 0; i < n_pick && n_new < w; i++) {
        const struct sp_beam_pick *p = &r->picks[i];
        struct sp_choice *par = &live[p->parent];
        float lp = (float)(p->score - par->logprob_sum);
        if (!r->gp.ignore_eos && sp_vocab_is_eog(e->vocab, p->token)) {
            sp_beam_finish_hyp(r, par, p->token, lp, p->score, SP_FINISH_STOP);
            continue;
        }
        struct sp_choice *c = &nxt[n_new++];
        if (sp_memory_seq_fork(e->mem, &c->seq, &par->seq) != SP_OK) {
            n_new--;
            continue;
        }
        memcpy(c->tokens, par->tokens, par->n_tokens * sizeof *c->tokens);
        memcpy(c->lps, par->lps, par->n_generated * sizeof *c->lps);
        c->n_tokens = par->n_tokens;
        c->tokens[c->n_tokens++] = p->token;
        c->n_generated = par->n_generated;
        c->lps[c->n_generated++] = lp;
        c->logprob_sum = p->score;
        c->done = false;
        if (r->gp.grammar)
            c->gstate = sp_grammar_advance(r->gp.grammar, par->gstate, p->token);
        if ((r->gp.max_tokens > 0 && c->n_generated >= (uint32_t)r->gp.max_tokens) || c->n_tokens >= r->max_pos)
            at_limit = true;
    }
    for (int b = 0; b < r->n_live; b++) {
        sp_memory_seq_release(e->mem, &live[b].seq);
        live[b].done = true;
    }
    r->live = next;
    r->n_live = n_new;
    if (r->t_first == 0.0)
        r->t_first = sp_engine_now();
    if (n_new == 0 || at_limit || r->n_hyps >= w) {
        for (int b = 0; b < n_new; b++)
            sp_beam_finish_hyp(r, &nxt[b], -1, 0.0f, nxt[b].logprob_sum, SP_FINISH_LENGTH);
        sp_beam_emit(e, r);
    }
}
