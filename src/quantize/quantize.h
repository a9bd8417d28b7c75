/* Model quantisation: read a GGUF model, choose each tensor's type by
 * llama.cpp's rules for the requested file type, convert, and write a new
 * GGUF with the same key/values (file type and quantisation version set).
 *
 * The type rules (plan.c) are llama.cpp's llama_tensor_get_type for the
 * presets below: which tensors are quantised at all, the output head and
 * tied embeddings (Q6_K, or Q8_0 when their rows do not split into the
 * type's blocks), attention V and FFN down in the _M/_S/_L mixes, and the
 * fallbacks when a row is not a multiple of 256 (Q2_K/Q3_K -> Q4_0,
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16).  Tensors are written
 * in llama.cpp's order (non-layer tensors by name, then layer by layer,
 * each by name), which the per-layer counters of those rules depend on.
 * Not covered: the Falcon-only rules and the IQ/ternary/MXFP4 file types.
 */
#ifndef SP_QUANTIZE_H
#define SP_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "spindle.h"

/* A file type: its name ("Q4_K_M"), llama.cpp's file type id
 * (general.file_type) and the base tensor type. */
struct sp_quantize_ftype {
    const char *name;
    uint32_t id;
    uint32_t base_type;
    const char *about;
};

/* The preset named `name` (case-insensitive; Q4_K, Q5_K and Q3_K mean their
 * _M mix, as llama-quantize takes them), NULL when unknown. */
const struct sp_quantize_ftype *sp_quantize_ftype_find(const char *name);
/* The i-th preset, NULL past the end (for usage text). */
const struct sp_quantize_ftype *sp_quantize_ftype_at(int i);

/* sp_model_quantize (include/spindle.h) is file.c. */

/* ---- the per-tensor type plan (plan.c) ---- */

struct sp_gguf;

/* For tensor i of g (in the order given by order[]), the type it is written
 * as; n_fallback counts the tensors that needed a fallback type. */
sp_status sp_quantize_plan(const struct sp_gguf *g, const struct sp_quantize_ftype *ft, bool has_imatrix,
                           const uint64_t *order, uint32_t *types, uint32_t *n_fallback);
/* llama.cpp's tensor order: non-layer tensors first, then by layer number,
 * by name within each. */
sp_status sp_quantize_order(const struct sp_gguf *g, uint64_t **order);

#endif
