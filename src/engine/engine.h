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

#endif
