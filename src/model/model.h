/* A loaded model: architecture, hyper-parameters and weight views.
 *
 * The file is mapped once; weights are borrowed views into the mapping.
 * Loading validates everything the forward pass relies on: required keys,
 * every tensor's presence, type and shape, and the consistency of the
 * hyper-parameters with the tensors.  Errors name the key or tensor, what was
 * expected and what was found.
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/mmap.h"
#include "core/progress.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

enum sp_ffn_act { SP_FFN_SILU, SP_FFN_GELU };

/* What distinguishes one family's forward pass; one entry per
 * general.architecture (src/model/arch.c). */
struct sp_arch {
    const char *name;          /* general.architecture */
    enum sp_ffn_act ffn_act;
    bool rope_neox;            /* rotate halves (NEOX) instead of adjacent pairs */
    bool qk_norm;              /* RMSNorm on each q/k head: attn_q_norm, attn_k_norm */
    bool post_norms;           /* post_attention_norm, post_ffw_norm */
    bool embed_scale;          /* embeddings × sqrt(n_embd) */
    uint32_t swa_pattern;      /* > 0: every swa_pattern-th layer is global, the rest local */
    float swa_rope_base;       /* rope base of local layers */
    const char *chat_format;   /* built-in chat format when the file has no template */
};

const struct sp_arch *sp_arch_find(struct sp_gguf_str name);

struct sp_hparams {
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    uint32_t n_head, n_head_kv, head_dim, n_rot;
    uint32_t n_swa;            /* sliding window; 0 = none */
    float rope_base, rope_freq_scale, eps, attn_scale;
};

struct sp_layer {
    struct sp_tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
    struct sp_tensor ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    bool swa;                  /* local (sliding-window) layer */
    float rope_base;
};

struct sp_model {
    const struct sp_arch *arch;
    struct sp_hparams hp;
    struct sp_mapping map;
    struct sp_gguf gguf;
    struct sp_tensor tok_embd, out_norm, output;
    struct sp_layer *layers;   /* [n_layer] */
    void *packed;              /* owned (sp_huge_alloc): matrices repacked at load (NULL: none) */
    size_t packed_bytes;
    uint32_t n_packed;         /* how many */
    void *vectors;             /* owned: the norm weights, copied out of the mapping */
    uint64_t weights_bytes;    /* bytes of weight data read per token */
    uint64_t file_bytes;
};

/* Opens and validates the model at `path`; map_flags (SP_MAP_READ,
 * SP_MAP_LOCK) say how the file is held in memory, and SP_MAP_LOCK also
 * locks the repacked weights.  progress (may be NULL) hears about the
 * weight repacking. */
sp_status sp_model_open(struct sp_model **out, const char *path, unsigned map_flags,
                        const struct sp_progress *progress);
void sp_model_close(struct sp_model *m);
/* The built-in chat format of the model's architecture ("chatml", "gemma"). */
const char *sp_model_chat_format(const struct sp_model *m);

/* Opens the file for its vocabulary only (no architecture checks): for
 * `tokenize` on vocabulary-only files. */
sp_status sp_model_open_gguf(struct sp_mapping *map, struct sp_gguf *g, const char *path, unsigned map_flags);

#endif
