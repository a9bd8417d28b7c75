/* The architecture table: each family's differences from the common
 * transformer block, read by the one forward pass (forward.c). */
#include "model/model.h"

static const struct sp_arch sp_archs[] = {
    {
        .name = "llama", /* Llama 2/3, SmolLM2, Mistral, TinyLlama */
        .ffn_act = SP_FFN_SILU,
        .chat_format = "chatml",
    },
    {
        .name = "gemma3",
        .ffn_act = SP_FFN_GELU,
        .rope_neox = true,
        .qk_norm = true,
        .post_norms = true,
        .embed_scale = true,
        .swa_pattern = 6,
        .swa_rope_base = 10000.0f,
        .chat_format = "gemma",
    },
};

const struct sp_arch *sp_arch_find(struct sp_gguf_str name)
{
    for (size_t i = 0; i < sizeof sp_archs / sizeof sp_archs[0]; i++)
        if (sp_gguf_str_eq(name, sp_archs[i].name))
            return &sp_archs[i];
    return NULL;
}
