/* Importance matrices in llama.cpp's imatrix GGUF format.
 *
 * A file holds, per weight matrix NAME, the tensors "NAME.in_sum2" (F32,
 * [n_cols, n_mat]: the sum over calibration tokens of each input column's
 * squared activation, one row per expert) and "NAME.counts" (F32, [1,
 * n_mat]: how many tokens were summed), and the keys general.type =
 * "imatrix", imatrix.datasets (strings), imatrix.chunk_count and
 * imatrix.chunk_size (u32).  The weight a quantiser sees is in_sum2 /
 * counts, or 1 for a matrix that saw no token, as llama-quantize loads it.
 */
#ifndef SP_QUANTIZE_IMATRIX_H
#define SP_QUANTIZE_IMATRIX_H

#include <stdint.h>

#include "spindle.h"

struct sp_imatrix;

/* Loads and checks a file (every size against the file, every value
 * finite and non-negative).  SP_ERR_IO / SP_ERR_FORMAT with the path. */
sp_status sp_imatrix_load(struct sp_imatrix **out, const char *path);
void sp_imatrix_free(struct sp_imatrix *im);

/* The weights of matrix `name` (*n of them: columns x experts), NULL when
 * the file has no entry of that name. */
const float *sp_imatrix_find(const struct sp_imatrix *im, const char *name, uint64_t *n);

uint32_t sp_imatrix_count(const struct sp_imatrix *im);        /* entries */
uint32_t sp_imatrix_chunks(const struct sp_imatrix *im);       /* imatrix.chunk_count */
/* First dataset name, "" when none (recorded in quantised files). */
const char *sp_imatrix_dataset(const struct sp_imatrix *im);
const char *sp_imatrix_path(const struct sp_imatrix *im);

#endif

/* ---- collecting (spindle imatrix) ---- */

struct sp_model;
struct sp_tensor;
struct sp_imatrix_acc;

/* Sums of squared inputs for every layer matrix of m (the output head and
 * embeddings are left out, as llama-imatrix does by default). */
sp_status sp_imatrix_acc_init(struct sp_imatrix_acc **out, const struct sp_model *m);
void sp_imatrix_acc_free(struct sp_imatrix_acc *a);
/* A matmul observer (sp_engine_observe): adds x[i]^2 of each of the n rows
 * to w's sums and n to its count; other matrices are ignored. */
void sp_imatrix_acc_observe(void *acc, const struct sp_tensor *w, const float *x, size_t x_stride, int n);
/* Writes the imatrix GGUF (atomically). */
sp_status sp_imatrix_acc_write(const struct sp_imatrix_acc *a, const char *path, const char *dataset,
                               uint32_t n_chunks, uint32_t chunk_size);
