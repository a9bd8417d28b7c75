/* Engine internals shared by engine.c and engine_beam.c (not a public API). */
#ifndef SP_ENGINE_INTERNAL_H
#define SP_ENGINE_INTERNAL_H

#include "core/pool.h"
#include "engine/engine.h"
#include "engine/stop.h"
#include "memory/memory.h"
#include "model/forward.h"
#include "sampler/sampler_beam.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

#define SP_MAX_CHOICES 16
#define SP_TEXT_CAP 65536
#define SP_MAX_RETRIES 16

enum sp_req_state { SP_REQ_PREFILL, SP_REQ_DECODE };

/* Events of a polled request (events.c), waiting for sp_request_poll.  One
 * text buffer holds every waiting event's text; once all were taken the
 * next push starts over at the front, so the buffers grow to the most text
 * waiting at once and are reused after that. */
struct sp_evq {
    struct sp_token_event *ev;      /* [cap]; ev[i].text is an offset into text until polled */
    struct sp_token_logprobs *lp;   /* [cap] copies of the events' logprobs */
    uint32_t head, n, cap;
    char *text;
    size_t n_text, cap_text;
    int n_final;                    /* final events pushed (or dropped: no memory) */
};
void sp_evq_push(struct sp_evq *q, const struct sp_token_event *ev);
bool sp_evq_pop(struct sp_evq *q, struct sp_token_event *ev);
void sp_evq_free(struct sp_evq *q);

/* One continuation of a request: a sample (n > 1) or a beam. */
struct sp_choice {
    struct sp_request *req;
    int idx;
    struct sp_memory_seq seq;
    struct sp_sampler *sampler;
    struct sp_detok detok;
    struct sp_stop stop;
    sp_token *tokens;       /* [n_ctx] prompt then generated */
    uint32_t n_tokens;
    uint32_t n_generated;
    double logprob_sum;
    float *lps;             /* beams: [n_ctx] logprob of each generated token */
    bool done;
    uint32_t gstate;        /* grammar state (sp_grammar_state) */
    int attempt;            /* 1-based */
    char *out;              /* with a grammar: the text emitted by this attempt */
    size_t n_out, cap_out;
    bool retry, valid;      /* for the event being emitted */
    const char *err;
    struct sp_spec_seq *spec; /* speculative decoding state; NULL: decodes without */
    uint32_t n_draft;       /* drafts at tokens[n_tokens, ...) in this step's batch */
};

/* A finished beam hypothesis. */
struct sp_beam_hyp {
    sp_token *tokens;       /* [n_ctx] generated tokens */
    float *lps;
    uint32_t n;
    double logprob, score;  /* raw and length-normalised */
    enum sp_finish finish;
};

struct sp_request {
    struct sp_engine *e;      /* NULL once a polled request left its engine */
    struct sp_request *next;  /* active list, in admission order */
    struct sp_gen_params gp;
    sp_event_fn fn;           /* NULL: polled, events wait in q */
    void *user;
    struct sp_evq q;
    uint32_t n_prompt, n_cached, n_prefilled;
    uint32_t budget_blocks;   /* blocks committed at admission */
    uint32_t max_pos;         /* most tokens a choice holds, prompt included: n_ctx, or
                                 with max_tokens < 0 its share of a KV cache smaller than
                                 n choices x n_ctx (reserved at admission) */
    uint32_t n_drafted, n_accepted; /* speculative decoding, all choices */
    enum sp_req_state state;
    bool cancelled;
    int n_choices, n_open;
    struct sp_choice *choices;
    double t_submit, t_first, t_prefilled;
    /* beam search (gp.beams > 1): choices[0..width) and [width..2*width) are
     * the live set and the next set, alternating; hyps the finished ones. */
    int width, live;        /* beam width; offset of the live set (0 or width) */
    int n_live, n_hyps;
    struct sp_beam_hyp *hyps;
    struct sp_beam_pick *picks, *pick_scratch;
    double *scores;
    const float **rows;     /* [width] logits row of each live beam this step */
    /* checked output with retries: the prompt's own sequence and the logits
     * after it, to start a choice over without a second prefill */
    bool retries;
    struct sp_memory_seq pseq;
    float *plogits;
    struct sp_stop stop0;   /* the stop strings' initial state */
    char why[512];          /* the last check's failure */
};

struct sp_engine {
    const struct sp_model *model;   /* borrowed */
    const struct sp_vocab *vocab;   /* borrowed */
    struct sp_pool *pool;
    bool pool_owned;             /* made for this engine (else a shared sp_threads pool) */
    struct sp_memory *mem;
    struct sp_forward_scratch fs;
    int n_ctx, n_batch, n_parallel, n_out_max;
    uint32_t committed_blocks;
    struct sp_request *active;
    uint32_t n_running;
    /* per-step buffers, sized at init */
    sp_token *b_tokens;
    int32_t *b_pos, *b_out_idx;
    const struct sp_memory_seq **b_seqs;
    struct sp_choice **b_out_choice;  /* [n_out_max] whose logits each output row is */
    float *logits;                    /* [n_out_max][n_vocab] */
    char *text, *text2;               /* [SP_TEXT_CAP] event text */
    struct sp_token_logprobs lp;
    struct sp_sampler_explain explain;
    struct sp_engine_timing timing;
    /* speculative decoding (NULL: off) */
    struct sp_spec *spec;
    int spec_rows;                    /* most sequences drafting in one step */
    struct sp_spec_job *spec_jobs;    /* [spec_rows] */
    struct sp_choice **spec_choice;   /* [spec_rows] */
    struct sp_token_logprobs *spec_lp; /* [SP_SPEC_K_MAX + 1] logprobs of one verified run */
};


double sp_engine_now(void);
/* Appends t to c and streams it: end-of-generation, stop strings and
 * length end the choice. */
void sp_choice_take(struct sp_engine *e, struct sp_choice *c, sp_token t, const struct sp_token_logprobs *lp,
                    const struct sp_sampler_explain *explain);
void sp_choice_finish(struct sp_engine *e, struct sp_choice *c, enum sp_finish why);
/* Appends (tok, pos, seq) to the step's batch, reserving seq's KV through
 * pos; false when the cache cannot hold it. */
bool sp_engine_batch_add(struct sp_engine *e, int *n, sp_token tok, int32_t pos, struct sp_memory_seq *seq);
void sp_choice_emit(struct sp_choice *c, sp_token id, const char *text, size_t len,
                    const struct sp_token_logprobs *lp, const struct sp_sampler_explain *explain,
                    enum sp_finish finish);
/* Appends emitted text to a constrained choice's record (false: no memory). */
bool sp_choice_record(struct sp_choice *c, const char *text, size_t len);
/* The check of a stopped constrained choice: true when its text is valid
 * (the reason is left in r->why otherwise). */
bool sp_choice_check(struct sp_request *r, struct sp_choice *c);
/* Masks a logits row in place to the tokens c's grammar allows; false with
 * the reason in r->why when none is allowed. */
bool sp_choice_mask_row(struct sp_request *r, struct sp_choice *c, float *row, uint32_t n_vocab);

/* Speculative decoding (speculate.c).  sp_engine_spec_init: the spec room
 * for p's source (nothing when off).  sp_engine_spec_draft: before a step,
 * drafts for the decoding choices that get some (c->n_draft); n_prefill:
 * prompt tokens waiting.  sp_engine_spec_verify: after the forward, keeps
 * the accepted drafts of c (logits rows[0..n_draft]) and the target's next
 * token, rolls the KV sequence back to them and streams them. */
sp_status sp_engine_spec_init(struct sp_engine *e, const struct sp_engine_params *p, const struct sp_model *draft,
                              const struct sp_vocab *draft_vocab);
void sp_engine_spec_free(struct sp_engine *e);
void sp_engine_spec_draft(struct sp_engine *e, uint32_t n_prefill);
/* Keeps only c's first `keep` drafts (none when c is not in the step after
 * all): its KV sequence forgets what drafting wrote past them. */
void sp_engine_spec_drop(struct sp_engine *e, struct sp_choice *c, uint32_t keep, bool in_step);
void sp_engine_spec_verify(struct sp_engine *e, struct sp_choice *c, const float *rows);

/* Beam search (engine_beam.c). */
sp_status sp_beam_request_init(struct sp_request *r, const sp_token *prompt, uint32_t n_prompt);
void sp_beam_request_free(struct sp_request *r);
/* Extends the live beams from their logits rows (r->rows); finishes the
 * request when done. */
void sp_beam_advance(struct sp_engine *e, struct sp_request *r);

#endif
