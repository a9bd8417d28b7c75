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
#include "kv/kv.h"
#include "model/model.h"

struct sp_forward_batch {
    int n_tok;
    const sp_token *tokens;              /* [n_tok] */
    const int32_t *pos;                  /* [n_tok] */
    const struct sp_kv_seq *const *seqs; /* [n_tok]; blocks reserved through pos */
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
    void *act;                                   /* quantized activations */
    size_t act_stride;
    float *attn;                                 /* attention scratch per pool chunk */
    size_t attn_per_thread;
    int32_t *attn_plan;                          /* attention work list */
    int32_t *attn_pos;                           /* [n_batch] last key position per query (bidirectional) */
    float *rope;                                 /* [n_batch][n_rot] cos/sin of each token */
    float rope_base;                             /* base the table holds (0: none) */
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
    int32_t *moe_ids, *moe_tok, *moe_row;
    void *moe_act;
    float *moe_g, *moe_u, *moe_d;
    struct sp_mm_group *moe_groups;
};

sp_status sp_forward_scratch_init(struct sp_forward_scratch *s, const struct sp_model *m, int n_batch,
                                  int n_ctx, int n_threads);
void sp_forward_scratch_free(struct sp_forward_scratch *s);

/* Runs the batch; writes logits [n_out][n_vocab].  Writes each token's K/V
 * into its sequence's blocks at its position.  logits NULL: no output head;
 * the out tokens' final-normed hidden states (what the head would read) are
 * left in sp_forward_hidden(s) until the next call (embeddings). */
sp_status sp_forward(const struct sp_model *m, struct sp_kv *kv, struct sp_forward_scratch *s,
                     struct sp_pool *pool, const struct sp_forward_batch *b, float *logits);

/* [n_out][n_embd]: the hidden states of the last sp_forward without logits. */
const float *sp_forward_hidden(const struct sp_forward_scratch *s);

#endif
