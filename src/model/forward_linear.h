/* Internal to src/model: the linear layers' part of the forward pass
 * (forward_linear.c), which forward.c calls between a layer's input
 * projection and its output projection. */
#ifndef SP_MODEL_FORWARD_LINEAR_H
#define SP_MODEL_FORWARD_LINEAR_H

#include "model/forward.h"

/* Widths of the linear layers' scratch (all 0 without linear layers):
 * the input projection's row, a position's state inputs, the groups' B.C
 * products per token, the mixer's output row, one head's grid state. */
struct sp_fwd_linear_sizes {
    size_t lin, in, cb, y, h;
};
void sp_fwd_linear_sizes(const struct sp_model *m, struct sp_fwd_linear_sizes *out);

/* Bytes of one run (struct sp_fwd_run, private to forward_linear.c). */
size_t sp_fwd_run_bytes(void);

/* Splits the batch into runs, one per sequence (s->runs, s->tok_run);
 * SP_ERR_INTERNAL when a sequence's tokens are not one run of consecutive
 * positions. */
sp_status sp_fwd_runs(struct sp_forward_scratch *s, const struct sp_forward_batch *b);

/* Mamba-2 mixer of layer il: s->lin (ssm_in's output, [n_tok][z, x, B, C,
 * dt]) -> s->lin_y (gated and normed, [n_tok][inner]), reading and
 * writing each sequence's state. */
void sp_fwd_ssm(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il);

/* LFM2 short convolution of layer il: s->lin (in_proj's output,
 * [n_tok][B, C, x]) -> s->lin_y ([n_tok][n_embd]), reading and writing
 * each sequence's convolution history. */
void sp_fwd_shortconv(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                      struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il);

/* Qwen3.5 gated delta rule of layer il: s->lin ([n_tok][q, k, v, z,
 * beta, alpha]) -> s->lin_y (gated and normed, [n_tok][value heads x
 * width]), reading and writing each sequence's state. */
void sp_fwd_delta(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                  struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il);

#endif
