/* Kernels of the linear (recurrent) layers: the short causal convolution
 * and the chunked selective scan of Mamba-2 (SSD).  The forward pass
 * (src/model/forward_linear.c) decides which positions and which grid
 * state each call sees; these compute, in one fixed order per output
 * value (the contracts below), so every row of the kernel table gives the
 * scalar row's bits (tests/unit/test_kernels.c). */
#ifndef SP_KERNELS_SCAN_H
#define SP_KERNELS_SCAN_H

#include <stdbool.h>

/* Most taps of a causal convolution. */
#define SP_CONV_MAX_TAPS 8

/* y[c] for c < ch, one position of a depth-wise causal convolution of k
 * taps: acc = 0, then for j = 0 .. k-1 with rows[j] not NULL (NULL: a
 * position before the sequence, zeros) acc = fmaf(rows[j][c], w[j][c],
 * acc); then + bias[c] (bias NULL: none); then, with silu, v / (1 +
 * sp_exp(min(-v, 88))) as sp_swiglu.  w is [k][ch] (tap-major); rows[k-1]
 * is the position's own inputs; k <= SP_CONV_MAX_TAPS. */
void sp_conv_causal(float *y, const float *const *rows, const float *w, const float *bias, int ch, int k, bool silu);

/* sum of a[i] * b[i], i < n, in sixteen partial sums: part[r] over i %
 * 16 == r ascending, each a chain of fmaf, then sp_attn_tree16(part). */
float sp_dot16(const float *a, const float *b, int n);

/* A Mamba-2 head's state advanced over n positions of one chunk, in the
 * transposed layout h[d][i] (d < ds the state dimension, i < hd the head
 * dimension): h = (h0 ? decay * h0 : 0); then for s = 0 .. n-1 and every
 * (d, i): h[d][i] = fmaf(u[s] * B[s][d], x[s][i], h[d][i]) (u[s] * B[s][d]
 * one rounded product).  h and h0 do not overlap. */
void sp_ssd_state(float *h, const float *h0, float decay, int n, const float *u, const float *const *B,
                  const float *const *x, int ds, int hd);

/* A Mamba-2 head's output at one position from the grid state h0 (NULL:
 * zero) and the n positions of its chunk so far: acc[i] = 0, then for d <
 * ds acc[i] = fmaf(c[d], h0[d][i], acc[i]); y[i] = decay * acc[i] (0
 * without h0); then for s = 0 .. n-1, y[i] = fmaf(w[s], x[s][i], y[i]). */
void sp_ssd_out(float *y, const float *h0, const float *c, float decay, int n, const float *w,
                const float *const *x, int ds, int hd);

#endif
