/* Weight quantisers for writing model files (spindle quantize).
 *
 * These are not the activation quantisers of the traits table (which round
 * half to even and are tuned for speed): they reproduce llama.cpp's
 * reference quantisers (ggml-quants.c) bit for bit, so a file written here
 * has the same blocks as one written by llama-quantize from the same input.
 * Their search loops, rounding (truncation for Q4_0..Q5_1, round half away
 * from zero for Q8_0, the 1.5 * 2^23 trick for the K-quants) and the order
 * of every float operation follow that code; the translation unit is built
 * without FMA contraction (Makefile) so the results do not depend on -march.
 *
 * Importance weights (an imatrix, one non-negative float per input column)
 * change the search for Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K..Q6_K as llama.cpp's
 * does; Q8_0 and the float types ignore them.
 */
#ifndef SP_QUANT_ROWS_H
#define SP_QUANT_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "spindle.h"

/* True when sp_quant_rows can write `type` (a ggml type id). */
bool sp_quant_can_write(uint32_t type);

/* Quantises n_rows rows of n_per_row floats (contiguous) into dst, rows of
 * sp_type_row_size(type, n_per_row) bytes back to back.  imatrix: NULL or
 * n_per_row weights.  SP_ERR_ARG when the type cannot be written or
 * n_per_row is not a multiple of its block size.  Rows are independent:
 * quantising a range of rows gives the same bytes as the whole tensor. */
sp_status sp_quant_rows(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                        const float *imatrix);

#endif
