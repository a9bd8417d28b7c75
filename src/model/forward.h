/* The forward pass: one function for every architecture in the table.
 *
 * Input is a batch of tokens, each with its KV sequence and position; the
 * same call serves a prompt's prefill, a decode step of many streams, or a
 * mix.  Nothing here allocates: scratch is sized at init for the largest
 * batch and context.
 */
#ifndef SP_MODEL_FORWARD_H
#define SP_MODEL_FORWARD_H

#include "core/pool.h"
#include "memory/memory.h"
#include "model/model.h"

struct sp_forward_batch {
    int n_tok;
    const sp_token *tokens;              /* [n_tok] */
    const int32_t *pos;                  /* [n_tok] */
    /* [n_tok]; memory reserved through pos.  A sequence's tokens in a
     * batch are one run of consecutive positions (the linear layers take
     * them in order); with linear layers, the positions after the ones it
     * holds. */
    const struct sp_memory_seq *const *seqs;
    const int32_t *out_idx;              /* [n_out] tokens whose logits are wanted */
    int n_out;
    /* Exit after this many layers (0: all): the output norm and head then
     * read the residual stream there, and only those layers' K/V are
     * written (self-speculation drafts with the first layers). */
    uint32_t n_layer;
};

struct sp_forward_scratch {
    int n_batch, n_ctx;
    float *x, *h, *q, *k, *v, *att, *g, *u, *tmp; /* [n_batch][width] */
    float *qg;                                   /* q_gate families: [n_batch][heads][query, gate] */
    float *ffn2;                                 /* moe_dense: [n_batch][n_embd] the dense half's output */
    float *ple, *ple_row;                        /* per_layer_embd: [n_batch][n_layer][P] each layer's
                                                    input; one token's per_layer_token_embd row */
    float *alt, *pred;                           /* altup: [n_batch][n_altup][n_embd] the streams, and the
                                                    layer's predictions of them */
    float *lau, *lrank;                          /* laurel: [n_batch][n_embd] the branch's output; [n_batch]
                                                    [rank] laurel_l's */
    float *mod;                                  /* altup: [n_batch][SP_ALTUP_MAX] the router's output */
    void *act;                                   /* quantized activations */
    size_t act_stride;
    float *attn;                                 /* attention scratch per pool chunk */
    size_t attn_per_thread;
    int32_t *attn_plan;                          /* attention work list */
    int32_t *attn_pos;                           /* [n_batch] last key position per query (bidirectional) */
    float *rope;                                 /* [n_batch][n_rot] cos/sin of each token */
    float rope_base;                             /* base the table holds (0: none) */
    const float *rope_ff;                        /* and the factors it was made with */
    int rope_nr;                                 /* and its rotated dimensions */
    size_t bytes;                                /* all of the above */
    /* Optional observer of every matmul's float input, called on the
     * forward's thread before the product (importance statistics). */
    void (*observe)(void *ud, const struct sp_tensor *w, const float *x, size_t x_stride, int n);
    void *observe_ud;
    /* mixture of experts (NULL for dense models): per token the router's
     * logits [n_expert], the selected experts and weights [n_expert_used];
     * the routed rows grouped by expert ([n_batch * n_expert_used]: each
     * row's token, and each (token, slot)'s row), their activations, gate,
     * up and down outputs; the grouped matmul's groups [2 * n_expert] */
    float *moe_logits, *moe_w;
    int32_t *moe_ids, *moe_tok, *moe_row, *moe_exp; /* moe_exp: each grouped row's expert */
    void *moe_act;
    float *moe_g, *moe_u, *moe_d;
    struct sp_mm_group *moe_groups;
    /* the batch's sequences as the KV cache sees them [n_batch] */
    const struct sp_kv_seq **kv_seqs;
    /* linear layers (NULL without; forward_linear.c): a layer's input
     * projection [n_batch][its width], each position's inputs to the state
     * (the rows the state's ring keeps) [n_batch][lin_in_floats], the
     * chunk's B.C products [n_batch][groups][SP_STATE_CHUNK], the mixer's
     * output [n_batch][inner], two of a head's grid states per pool chunk
     * [chunks][2][lin_h_floats] (the grid states a run passes before the
     * one its sequence keeps); the batch's runs (one per sequence) and each
     * token's run */
    float *lin, *lin_in, *lin_cb, *lin_y, *lin_h;
    size_t lin_stride, lin_in_floats, lin_h_floats;
    struct sp_fwd_run *runs;
    int32_t *tok_run;
    int n_runs;
};

sp_status sp_forward_scratch_init(struct sp_forward_scratch *s, const struct sp_model *m, int n_batch,
                                  int n_ctx, int n_threads);
void sp_forward_scratch_free(struct sp_forward_scratch *s);

/* What layer il keeps per sequence in the state pool (all zero: not a
 * linear layer), for the engine's memory. */
void sp_forward_state_layer(const struct sp_model *m, uint32_t il, struct sp_state_layer *out);

/* Runs the batch; writes logits [n_out][n_vocab].  Writes each token's K/V
 * into its sequence's blocks at its position, and the linear layers'
 * state into its sequence's slot.  logits NULL: no output head;
 * the out tokens' final-normed hidden states (what the head would read) are
 * left in sp_forward_hidden(s) until the next call (embeddings).  Holds
 * the pool (sp_pool_hold) for the whole pass. */
sp_status sp_forward(const struct sp_model *m, struct sp_memory *mem, struct sp_forward_scratch *s,
                     struct sp_pool *pool, const struct sp_forward_batch *b, float *logits);

/* [n_out][n_embd]: the hidden states of the last sp_forward without logits. */
const float *sp_forward_hidden(const struct sp_forward_scratch *s);
/* per_layer_embd models: every layer's per-layer input of each of the T
 * tokens into s->ple ([T][n_layer][n_embd_pl]), from the tokens and their
 * scaled embeddings in s->x (part of sp_forward; exposed for its unit test). */
void sp_forward_ple_inputs(const struct sp_model *m, struct sp_forward_scratch *s, struct sp_pool *pool,
                           const sp_token *tokens, int T);

#endif
