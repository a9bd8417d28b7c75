/* Embeddings: which hidden states a pooling reads, how they become one
 * vector, and L2 normalisation.  The engine runs the forward pass (without
 * the output head) and hands each input's rows here; this room knows
 * nothing of batches or the KV cache. */
#ifndef SP_EMBED_H
#define SP_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* The pooling a file's pooling_type value asks for (llama.cpp's values:
 * 1 mean, 2 cls, 3 last); mean for 0 (none), an absent key or any other. */
sp_pooling sp_embed_pooling_of(uint32_t pooling_type);

/* Which of an input's n_tok token rows the pooling reads: [*first,
 * *first + *count). */
void sp_embed_rows(sp_pooling p, int n_tok, int *first, int *count);

/* Pools the rows sp_embed_rows chose (count rows, `stride` floats apart)
 * into out [n]; then scales out to unit L2 length when normalize (a zero
 * vector stays zero). */
void sp_embed_pool(sp_pooling p, const float *rows, size_t stride, int count, int n, int normalize, float *out);

#endif
