/* The engine: one model, one KV block pool, one compute pool, and the set of
 * active requests.  The same engine serves `spindle run` (one request) and the
 * server (many); there is no other generation loop.
 *
 * The engine is the public sp_engine and its requests the public sp_request:
 * their functions, parameters and events are declared in include/spindle.h
 * (sp_engine_step, sp_request_submit, sp_gen_params, sp_token_event, ...).
 * This header adds what only the library uses.
 *
 * Threading: exactly one thread owns an engine and calls every function on
 * it (the CLI's main thread, or the server's scheduler).  Callbacks run on
 * that thread, inside sp_engine_step(); they must not block.
 *
 * One step = one batched forward: every running request contributes its next
 * token, and requests still prefilling contribute a chunk of their prompt
 * (bounded by the step's token budget), so a long prompt never stalls the
 * streams already running.
 */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include "sampler/sampler.h"
#include "spindle.h"

struct sp_vocab;
struct sp_model;

/* Allocates everything a step needs for `m` and `v` (borrowed: they must
 * outlive the engine); p->n_threads <= 0: one per core.  Errors name the
 * problem (SP_ERR_ARG for a context out of range, SP_ERR_NOMEM). */
sp_status sp_engine_init(struct sp_engine **out, const struct sp_model *m, const struct sp_vocab *v,
                         const struct sp_engine_params *p, const struct sp_model *draft,
                         const struct sp_vocab *draft_vocab);

const struct sp_vocab *sp_engine_vocab(const struct sp_engine *e);
const struct sp_model *sp_engine_model(const struct sp_engine *e);

/* The sampling settings a model recommends: llama-server's defaults
 * (sp_sampler_params_default) with the file's general.sampling.* keys
 * (temp, top_k, top_p, min_p, penalty_repeat, penalty_last_n) laid over
 * them; *n_from_model counts the keys used.  A key of the wrong type or out
 * of range is left out and reported as SP_ERR_FORMAT (the others still
 * apply, *p is always usable).  Public as sp_model_sampling_defaults. */
sp_status sp_engine_sampling_defaults(const struct sp_model *m, struct sp_sampler_params *p, int *n_from_model);

/* What the engine holds in memory, all of it written at init so it is
 * resident from the start: weights (repacked copies plus the file data read
 * in place; the embedding table only when it is also the output head, as
 * otherwise only the rows of tokens seen are read), the KV pool with one
 * sliding-window ring per parallel request, and scratch (forward buffers,
 * logits, step buffers).  The rest of a process's resident memory is code,
 * libraries and the tokenizer (spindle info measures it).  Public through
 * sp_engine_stats_get. */
struct sp_engine_memory {
    uint64_t weights, kv, scratch;
    uint64_t kv_rings; /* part of kv: the rings, allocated when a request first needs one */
    uint64_t state;    /* linear layers' state, a slot per parallel request, allocated when one first needs it */
    uint64_t state_snapshots; /* the prefix cache's snapshot budget, allocated as prompts fill it */
};
void sp_engine_memory(const struct sp_engine *e, struct sp_engine_memory *out);

/* Calls fn(user, w, x, x_stride, n) with the float input rows of every
 * matrix product of later forwards, on the engine's thread (NULL: stop). */
struct sp_tensor;
typedef void (*sp_matmul_observer)(void *user, const struct sp_tensor *w, const float *x, size_t x_stride, int n);
void sp_engine_observe(struct sp_engine *e, sp_matmul_observer fn, void *user);

#endif
