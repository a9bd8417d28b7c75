/* Gemma 3n's row operations (the altup and laurel rows of the
 * architecture table, sparse_layers): AltUp's predict and correct steps on
 * one token's streams, the magnitude rescale that makes and merges the
 * streams, and the Gaussian top-k of a sparse layer's gate.  The forward
 * pass (forward.c) runs the matmuls around them; each function reads and
 * writes one token's rows, so a batch splits over threads without changing
 * a result. */
#ifndef SP_MODEL_FORWARD_ALTUP_H
#define SP_MODEL_FORWARD_ALTUP_H

#include "model/model.h"

/* The router's input from a stream row x [n_embd]: rmsnorm(x) with
 * altup_router_norm, times 1 / n_embd, into y. */
void sp_altup_router_in(const struct sp_model *m, const struct sp_layer *L, const float *x, float *y);

/* Predict: mod [n_altup] (the router's output) becomes tanh(mod); stream j
 * of pred [n_altup][n_embd] = alt_j + sum_k c[j][k] alt_k with c =
 * altup_predict_coef . mod. */
void sp_altup_predict(const struct sp_model *m, const struct sp_layer *L, float *mod, const float *alt, float *pred);

/* Correct: mod becomes tanh(mod); stream j of alt = pred_j + (x -
 * pred_active) (1 + altup_correct_coef . mod)_j, x [n_embd] being the
 * layer's output for the active stream. */
void sp_altup_correct(const struct sp_model *m, const struct sp_layer *L, float *mod, const float *x,
                      const float *pred, float *alt);

/* y [n] times |target| / |y| (Euclidean norms), as llama.cpp scales the
 * projected streams: (y |target|) / |y|. */
void sp_altup_rescale(float *y, const float *target, int n);

/* The Gaussian top-k of a sparse layer's gate row g [n]: g = relu(g -
 * (mean + 1.6448533 std)), std with n - 1 (llama.cpp's gaussian_topk). */
void sp_altup_topk(float *g, int n);

#endif
