/* Speculative decoding: where drafts come from, how many each sequence gets,
 * and the acceptance rule.  The engine calls this room around its step:
 *
 *   1. sp_spec_draft() before the forward: for every decoding sequence it
 *      decides k (from the sequence's recent acceptance and what a bigger
 *      batch costs) and writes k drafts after the sequence's tokens;
 *   2. the engine puts the last token and the drafts into the step's batch,
 *      all with logits, so one forward verifies them (and holds every other
 *      sequence's tokens too);
 *   3. sp_spec_verify() row by row: the token the target takes at each
 *      position, and whether it is the draft; the first rejection ends the
 *      sequence's step, and the row after the last accepted draft always
 *      gives one token of the target's own;
 *   4. the engine rolls its KV sequence back to what was kept
 *      (sp_memory_seq_truncate) and tells sp_spec_seq_done().
 *
 * Exactness: a draft that is a point guess (n-gram drafts; model drafts of
 * a greedy request) is checked by drawing the target's token with the
 * target's own sampler and comparing, which is the rejection rule for a
 * point-mass q and consumes the sampler's random numbers as decoding without
 * drafts does, so the output is the same token for token.  A draft drawn
 * from the draft model's distribution q is kept with probability
 * min(1, p/q), else the token is drawn from norm(max(0, p - q)), p being the
 * target sampler's whole chain (bias, penalties, filters, temperature, and
 * any mask stage in it): the output distribution is exactly p's.
 *
 * Sources: prompt lookup (ngram.c), a draft model with its own KV cache, or
 * the target's first layers over the target's own KV cache (draft.c).
 * Owned by the engine's thread. */
#ifndef SP_SPEC_SPEC_H
#define SP_SPEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/pool.h"
#include "memory/memory.h"
#include "model/forward.h"
#include "sampler/sampler.h"
#include "spindle.h"

#define SP_SPEC_K_MAX 32

struct sp_vocab;
struct sp_spec;
struct sp_spec_seq;

struct sp_spec_config {
    enum sp_spec_kind kind;
    int k;                          /* most drafts per sequence and step */
    bool fixed;                     /* k drafts whenever the source has them */
    const struct sp_model *draft;   /* SP_SPEC_DRAFT */
    const struct sp_vocab *draft_vocab;
    int layers;                     /* SP_SPEC_SELF: draft layers (0: half) */
};

/* What the engine lends: its model and vocabulary, sequence memory,
 * forward scratch and pool (self-speculation drafts in them; a draft model
 * gets its own memory and scratch of the same geometry). */
struct sp_spec_target {
    const struct sp_model *model;
    const struct sp_vocab *vocab;
    struct sp_memory *mem;
    struct sp_forward_scratch *fs;
    struct sp_pool *pool;
    int n_ctx, n_batch;
    int n_parallel;                 /* requests at once (draft KV sizing) */
    int n_rows;                     /* most sequences drafting in one step */
};

/* Checks the configuration (a draft vocabulary differing from the target's
 * is SP_ERR_ARG naming the first difference) and allocates everything. */
sp_status sp_spec_init(struct sp_spec **out, const struct sp_spec_config *c, const struct sp_spec_target *t);
void sp_spec_free(struct sp_spec *sp);

/* Per-sequence state: acceptance history, the drafts' q, a draft model's
 * KV sequence.  sp: the sampler settings of the request (model drafts are
 * drawn through the same chain). */
sp_status sp_spec_seq_new(struct sp_spec *sp, const struct sp_sampler_params *params, struct sp_spec_seq **out);
void sp_spec_seq_free(struct sp_spec *sp, struct sp_spec_seq *ss);

/* One sequence's part in a step's drafting. */
struct sp_spec_job {
    struct sp_spec_seq *ss;
    sp_token *tokens;               /* the sequence; drafts go to tokens[n_tokens, ...) */
    uint32_t n_tokens;
    struct sp_memory_seq *seq;      /* the target's: holds n_tokens - 1 positions */
    uint32_t cap;                   /* most drafts the engine has room for */
    uint32_t n_draft;               /* out */
};

/* Decides each job's number of drafts and writes them.  n_decode: tokens
 * the step produces without drafts (its decoding sequences); n_base: tokens
 * in the step without drafts (those plus prompt chunks).  A source that
 * cannot draft for a job (no match, KV full) gives it 0. */
sp_status sp_spec_draft(struct sp_spec *sp, struct sp_spec_job *jobs, int n_jobs, int n_decode, int n_base);

/* The target's token at row j of a verified job, whose logits are `logits`
 * and history tokens[0, n_hist) (n_hist = n_tokens + j: the drafts before
 * it were accepted).  j < n_draft: *accepted tells whether it is draft j;
 * j == n_draft: the ordinary draw.  lp as for sp_sampler_sample.  -1 when
 * the sampler finds no token. */
sp_token sp_spec_verify(struct sp_spec *sp, struct sp_spec_seq *ss, struct sp_sampler *target, const float *logits,
                        const sp_token *tokens, uint32_t n_hist, uint32_t j, uint32_t n_draft,
                        struct sp_token_logprobs *lp, bool *accepted);

/* After verification: n_accepted of n_draft drafts kept, the sequence's
 * first n_valid tokens final (a draft model's KV is rolled back to them). */
void sp_spec_seq_done(struct sp_spec *sp, struct sp_spec_seq *ss, uint32_t n_draft, uint32_t n_accepted,
                      uint32_t n_valid);

/* The wall time of a target step of n_tok tokens, n_out of them with
 * logits: its forward and the sampling and verification of those rows (the
 * cost model learns from steps whose every row has logits). */
void sp_spec_observe(struct sp_spec *sp, int n_tok, int n_out, double seconds);

/* Drafts verified and kept since init. */
void sp_spec_totals(const struct sp_spec *sp, uint64_t *drafted, uint64_t *accepted);

/* Prompt lookup: the longest n-gram (SP_SPEC_NGRAM_MAX down to _MIN tokens)
 * ending toks[0, n) that occurred before; writes up to cap tokens that
 * followed its latest earlier occurrence to out and returns how many. */
#define SP_SPEC_NGRAM_MAX 4
#define SP_SPEC_NGRAM_MIN 2
uint32_t sp_spec_ngram(const sp_token *toks, uint32_t n, uint32_t cap, sp_token *out);

/* The acceptance rule for a draft x drawn from q (q_id/q_p: its support,
 * summing to 1): x is kept when u < p(x)/q(x), else the result is drawn
 * from norm(max(0, p - q)).  p: n_p candidates summing to 1.  scratch: n_vocab
 * floats, all zero (left zero).  Returns the token, sets *accepted. */
struct sp_rng;
sp_token sp_spec_rule(const struct sp_candidate *p, size_t n_p, const sp_token *q_id, const float *q_p, uint32_t n_q,
                      sp_token x, struct sp_rng *rng, float *scratch, bool *accepted);

#endif
