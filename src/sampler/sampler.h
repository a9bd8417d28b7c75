/* The sampler: turns one row of logits into one token.
 *
 * One sampler per sequence.  It owns scratch buffers sized for n_vocab at
 * init, so sampling a token allocates nothing.  It is not thread-safe: the
 * scheduler thread owns it.
 *
 * The chain is a list of stages (the interface: sampler_stage.h) built at
 * init from the parameters, one point (sp_stage_point) at a time: first a
 * caller's own stages at that point (sp_gen_params.stages), then the
 * built-in stage there unless the parameters leave it out:
 *   1. logit bias      logit[id] += bias; a bias of -INFINITY bans the token.
 *   2. penalties       over the last repeat_last_n tokens of the history:
 *                      repeat (llama.cpp: logit > 0 ? logit / r : logit * r),
 *                      then presence and frequency (OpenAI:
 *                      logit -= count * frequency + (count > 0) * presence).
 *   3. grammar mask    when a mask is set (sp_sampler_set_mask): only the
 *                      allowed tokens stay candidates.  Like a ban in the
 *                      bias, it is part of the request, so logprobs below
 *                      are over the allowed tokens.
 *   4. logprobs        fails when every candidate is banned; moves the best
 *                      first; takes the logprobs: log-softmax of the biased,
 *                      penalised logits at temperature 1.  This is OpenAI's
 *                      meaning of `logprobs`: the model's distribution
 *                      (after the request's bias/penalties) before any
 *                      sampling filter or temperature.
 *   5. top-k           keep the k highest logits.
 *   6. temperature     divide logits by T (never reorders: T > 0), then the
 *                      softmax over the surviving candidates.
 *   7. top-p           keep the smallest prefix (highest first) whose
 *                      probability mass reaches p (at least one token).
 *   8. min-p           keep tokens with p >= min_p * p_max.
 *   9. typical-p       locally typical sampling (Meister et al.): rank by
 *                      |-log p - H|, keep the smallest set reaching mass p.
 *  10. draw            temperature <= 0: stages 5-9 are left out and the
 *                      greedy stage keeps the argmax (ties to the lowest id).
 *                      Then the survivors' probabilities are renormalised
 *                      (the draw scales its uniform by their total rather
 *                      than dividing each) and one seeded draw picks.
 *
 * Candidates are ordered by (logit descending, id ascending), a total order,
 * so every result is deterministic: the same seed and inputs give the same
 * tokens on every platform and thread count (up to libm's expf/logf, which
 * could in principle differ in the last bit between C libraries).
 *
 * A caller's stage (sp_stage, include/spindle.h) sees the survivors as
 * {id, logit} pairs at its point; what it returns is checked and the set's
 * invariants restored (sampler_user.c).  Greedy without bias, penalties in
 * play or a caller's stages takes the first maximum of the clamped logits
 * directly: the chain's answer without filling the candidate set.
 *
 * Cost per token: O(n_vocab) for loading, bias and the window of penalties;
 * top-k is a partial selection plus a sort of k entries; without top-k, top-p
 * sorts only the prefix it needs (grown geometrically).  Typical-p sorts the
 * whole surviving set, so combine it with top-k on large vocabularies.
 *
 * Non-finite logits from the model: NaN is treated as -INFINITY (never
 * chosen), +INFINITY as FLT_MAX.  History tokens outside [0, n_vocab) are
 * ignored by the penalties. */
#ifndef SP_SAMPLER_SAMPLER_H
#define SP_SAMPLER_SAMPLER_H

#include <stdio.h>

#include "spindle.h"
#include "sampler/rng.h"

/* The parameters (struct sp_sampler_params), the logit bias and the
 * logprobs record are public: include/spindle.h. */
#define SP_SAMPLER_MAX_LOGPROBS SP_MAX_LOGPROBS

/* One surviving candidate, as returned by sp_sampler_candidates(). */
struct sp_candidate {
    sp_token id;
    float logit;  /* after bias and penalties, before temperature */
    float p;      /* probability after the whole chain (sums to 1) */
    float aux;    /* scratch used by typical-p; meaningless to callers */
};

struct sp_sampler;

/* Validates p (SP_ERR_ARG naming the field), copies it (logit_bias included:
 * the caller's array may be freed afterwards) and allocates buffers for
 * n_vocab candidates (SP_ERR_NOMEM).  *out is NULL on failure. */
sp_status sp_sampler_init(struct sp_sampler **out, const struct sp_sampler_params *p,
                          uint32_t n_vocab);
/* The same with a caller's stages (at most SP_MAX_STAGES, each checked:
 * SP_ERR_ARG naming stages[i]), each with its own copy of the state from
 * its clone. */
sp_status sp_sampler_init_stages(struct sp_sampler **out, const struct sp_sampler_params *p,
                                 const sp_stage *stages, size_t n_stages, uint32_t n_vocab);
/* A copy of s for another sequence: the same chain with a clone of every
 * stage's state, the same random state and mask.  *out is NULL on failure. */
sp_status sp_sampler_clone(const struct sp_sampler *s, struct sp_sampler **out);
/* Frees s and every stage (a caller's stage's copy with its free). */
void sp_sampler_free(struct sp_sampler *s);

/* The token the sequence drew: every stage's accept sees it. */
void sp_sampler_accept(struct sp_sampler *s, sp_token t);
/* The sequence starts over: every stage's reset. */
void sp_sampler_reset(struct sp_sampler *s);

/* Restart the random sequence (e.g. for the i-th of n completions). */
void sp_sampler_set_seed(struct sp_sampler *s, uint64_t seed);

/* The tokens allowed at the next call (bit i of allowed[i / 64]; n_vocab
 * bits, read during the calls only), or NULL for all.  Stays set until
 * changed.  A mask that leaves no candidate makes sampling fail. */
void sp_sampler_set_mask(struct sp_sampler *s, const uint64_t *allowed);

/* Sample one token.  logits: n_vocab floats, read only.  history: the tokens
 * so far (prompt + generated), for the penalties; may be NULL when
 * n_history == 0.  lp: optional; filled with n_logprobs alternatives.
 * Returns the token, or -1 (with an SP_ERR_ARG message) when no token is
 * possible: every logit is NaN/-inf or banned, or history is NULL with
 * n_history > 0, or a caller's stage failed (its status's message).
 * Allocates nothing; does not call accept (sp_sampler_accept does). */
sp_token sp_sampler_sample(struct sp_sampler *s, const float *logits, const sp_token *history,
                           size_t n_history, struct sp_token_logprobs *lp);

/* Run the chain up to and including renormalisation, without drawing.
 * *out points into the sampler's scratch (valid until the next call on s),
 * *n_out candidates sorted by probability (ties: lowest id first).  With
 * temperature <= 0 it is the single greedy token with p = 1.  For tests and
 * tools; does not touch the random state. */
sp_status sp_sampler_candidates(struct sp_sampler *s, const float *logits, const sp_token *history,
                                size_t n_history, const struct sp_candidate **out, size_t *n_out);

/* The chain's distribution for one row, as sp_sampler_sample() would draw
 * from it, without drawing: *out[0..*n_out) in chain order with p summing
 * to 1 (temperature <= 0: the greedy token alone, p = 1).  lp (optional)
 * gets its top list; the logprob of a chosen candidate c is c.logit -
 * *logz.  For speculative sampling, which needs the target's p of a draft
 * token; does not touch the random state.  Allocates nothing. */
sp_status sp_sampler_dist(struct sp_sampler *s, const float *logits, const sp_token *history, size_t n_history,
                          struct sp_token_logprobs *lp, const struct sp_candidate **out, size_t *n_out,
                          double *logz);

/* struct sp_sampler_explain (what one step did to the most likely tokens)
 * is public: include/spindle.h. */

/* Fills *out for the next token without advancing the random state: a
 * following sp_sampler_sample() with the same inputs returns out->chosen.
 * Not for the hot path (it scans the candidates once per row and stage). */
sp_status sp_sampler_explain_data(struct sp_sampler *s, const float *logits,
                                  const sp_token *history, size_t n_history,
                                  struct sp_sampler_explain *out);

/* Optional token-to-text callback for the table (may return NULL). */
typedef const char *(*sp_sampler_token_text_fn)(void *ctx, sp_token id);

/* Prints *x as a table: one row per token with its probability after each
 * stage ("-" once filtered out), the survivors per stage, and the next
 * token.  token_text may be NULL. */
void sp_sampler_explain_print(const struct sp_sampler_explain *x, FILE *out,
                              sp_sampler_token_text_fn token_text, void *ctx);

/* sp_sampler_explain_data() then sp_sampler_explain_print(). */
sp_status sp_sampler_explain(struct sp_sampler *s, const float *logits, const sp_token *history,
                             size_t n_history, FILE *out, sp_sampler_token_text_fn token_text,
                             void *ctx);

#endif
