/* The engine: one model, one KV block pool, one compute pool, and the set of
 * active requests.  The same engine serves `spindle run` (one request) and the
 * server (many); there is no other generation loop.
 *
 * Threading: exactly one thread owns an engine and calls every function here
 * (the CLI's main thread, or the server's scheduler).  Callbacks run on that
 * thread, inside sp_engine_step(); they must not block.
 *
 * One step = one batched forward: every running request contributes its next
 * token, and requests still prefilling contribute a chunk of their prompt
 * (bounded by the step's token budget), so a long prompt never stalls the
 * streams already running.
 */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sampler/sampler.h"
#include "spindle.h"

struct sp_engine;
struct sp_grammar;
struct sp_request;
struct sp_vocab;
struct sp_model;

struct sp_engine_params {
    const char *model_path;
    int n_threads;       /* <= 0: one per core */
    int n_ctx;           /* per-request context limit; 0: the model's, capped at 8192 */
    int n_parallel;      /* requests running at once; 0: 1 */
    size_t kv_mem_mib;   /* KV pool size; 0: n_ctx × n_parallel positions */
    int n_batch;         /* most tokens in one forward; 0: 512 */
    bool swa_full;       /* keep every position of sliding-window layers (no rings) */
};

/* Loads the model and allocates everything a step needs.  Errors name the
 * file and the problem (SP_ERR_IO, SP_ERR_FORMAT, SP_ERR_UNSUPPORTED, ...). */
sp_status sp_engine_init(struct sp_engine **out, const struct sp_engine_params *p);
void sp_engine_free(struct sp_engine *e);

const struct sp_vocab *sp_engine_vocab(const struct sp_engine *e);
const struct sp_model *sp_engine_model(const struct sp_engine *e);
int sp_engine_n_ctx(const struct sp_engine *e);
int sp_engine_n_threads(const struct sp_engine *e);

struct sp_engine_stats {
    uint32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: idle in the prefix cache */
    uint32_t kv_block_tokens;       /* positions per block */
    uint64_t kv_bytes;              /* KV pool size */
    uint64_t prefix_hits, prefix_tokens_reused;
    uint32_t n_running;             /* requests admitted and not finished */
};
void sp_engine_stats(const struct sp_engine *e, struct sp_engine_stats *out);

enum sp_finish {
    SP_FINISH_NONE = 0,
    SP_FINISH_STOP,      /* end-of-generation token or a stop string */
    SP_FINISH_LENGTH,    /* max_tokens or the context limit */
    SP_FINISH_CANCELLED, /* sp_request_cancel() (client gone, timeout) */
    SP_FINISH_ERROR,
};
const char *sp_finish_name(enum sp_finish f); /* "stop", "length", ... */

struct sp_gen_params {
    struct sp_sampler_params sampling;
    int32_t max_tokens;         /* <= 0: until the context is full */
    const char *const *stop;    /* stop strings (copied at submit) */
    size_t n_stop;
    int n;                      /* independent choices sharing one prefill; 0: 1 */
    int beams;                  /* beam search width; <= 1: off */
    float length_penalty;       /* beam score = logprob / len^length_penalty */
    bool ignore_eos;
    int logprobs;               /* < 0: none; K >= 0: the token's logprob and top K */
    FILE *explain;              /* if set, each step's decoding is printed here */
    /* Constrained output.  grammar: bound to this engine's vocabulary
     * (sp_grammar_bind), borrowed until the request's last event; each
     * token is drawn from those the grammar allows, an end token only where
     * it accepts.  A choice that stops (end token or stop string) is
     * checked: the grammar must accept its text, and `validate` (optional)
     * must return SP_OK for it; if not, the choice starts over from the
     * prompt with a new seed, up to max_retries times, and then ends with
     * SP_FINISH_ERROR.  Output cut at max_tokens is not checked. */
    struct sp_grammar *grammar;
    sp_status (*validate)(void *ctx, const char *text, size_t len, char *why, size_t cap);
    void *validate_ctx;
    int max_retries;
};
void sp_gen_params_default(struct sp_gen_params *gp);

/* One event per generated token of one choice, and a last one per choice
 * with finish != SP_FINISH_NONE.  `text` is the text released by this token
 * (complete UTF-8, stop strings removed, possibly empty while held back). */
struct sp_token_event {
    int choice;
    sp_token id;                        /* -1 on the final event */
    const char *text;
    size_t len;
    const struct sp_token_logprobs *lp; /* NULL unless gp->logprobs >= 0 */
    enum sp_finish finish;
    /* usage, valid on every event */
    uint32_t n_prompt, n_cached, n_generated;
    double logprob_sum;                 /* over this choice's generated tokens */
    /* Constrained output: the attempt this event belongs to (1, 2, ...).
     * An event with `retry` set (id -1, finish NONE) says the attempt
     * failed its check (`error` says why) and everything this choice sent
     * since its last retry is void; the next attempt follows.  A final
     * event with SP_FINISH_ERROR may carry `error` too (grammar dead end,
     * every attempt invalid); `valid`: a final STOP event passed its check. */
    int attempt;
    bool retry, valid;
    const char *error;
};
typedef void (*sp_event_fn)(void *user, const struct sp_token_event *ev);

/* Admits a request.  `prompt` is copied.  Errors: SP_ERR_CONTEXT when the
 * prompt (plus one token) can never fit the context or the KV pool (the
 * message says how many tokens and the limit); SP_ERR_FULL when it would fit
 * but blocks are short right now (retry after a step); SP_ERR_ARG for bad
 * parameters.  The request is owned by the engine and freed after its last
 * choice's final event; *out (optional) stays valid until then. */
sp_status sp_request_submit(struct sp_engine *e, const sp_token *prompt, size_t n_prompt,
                            const struct sp_gen_params *gp, sp_event_fn fn, void *user,
                            struct sp_request **out);
/* Ends the request at the next step with SP_FINISH_CANCELLED (final events
 * are still delivered); its blocks are free after that step. */
void sp_request_cancel(struct sp_request *r);

/* Runs one step.  Returns the number of requests still running (>= 0), or
 * -1 with an error set (an internal failure; requests are finished with
 * SP_FINISH_ERROR). */
int sp_engine_step(struct sp_engine *e);

/* Timing of the last request finished (for the CLI's summary). */
struct sp_engine_timing {
    double t_prefill_s, t_decode_s, t_first_token_s;
    uint32_t n_prefill, n_decode;
};
void sp_engine_timing(const struct sp_engine *e, struct sp_engine_timing *out);

/* Raw logits for one prompt (the `logits` tool and tests): runs the prompt
 * through a temporary sequence and copies the last position's logits to
 * out[n_vocab]. */
sp_status sp_engine_logits(struct sp_engine *e, const sp_token *prompt, size_t n_prompt, float *out);

/* Logits of every position >= first, in order: fn(user, pos, logits[n_vocab])
 * (the buffer is valid during the call only).  The same batched forward as
 * generation, so position p's logits equal those a decode step at p gives. */
typedef void (*sp_logits_fn)(void *user, size_t pos, const float *logits);
sp_status sp_engine_logits_each(struct sp_engine *e, const sp_token *prompt, size_t n_prompt, size_t first,
                                sp_logits_fn fn, void *user);

#endif
