/* spindle info: what a model file is and what running it will need. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

int sp_tool_info(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    sp_model_params mp;
    int n_ctx = 0;
    sp_model *m = NULL;
    sp_model_params_default(&mp);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle info -m MODEL [--ctx N]");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &n_ctx);
        else
            return sp_tool_fail("info: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!mp.path)
        return sp_tool_fail("info: -m MODEL is required");
    if (sp_model_load(&mp, &m) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    sp_model_info in;
    sp_model_info_get(m, &in);
    if (n_ctx <= 0)
        n_ctx = (int)(in.n_ctx_train < 8192 ? in.n_ctx_train : 8192);
    printf("file:            %s (%.1f MiB, GGUF v%u, %llu tensors, %llu keys)\n", mp.path, in.file_bytes / 1048576.0,
           in.gguf_version, (unsigned long long)in.n_tensors, (unsigned long long)in.n_meta);
    printf("architecture:    %s\n", in.architecture);
    printf("layers:          %u\n", in.n_layer);
    printf("embedding:       %u\n", in.n_embd);
    printf("feed-forward:    %u\n", in.n_ff);
    printf("heads:           %u query, %u key/value, head size %u, rope dims %u\n", in.n_head, in.n_head_kv,
           in.head_dim, in.n_rot);
    printf("rope:            base %g, frequency scale %g", in.rope_base, in.rope_freq_scale);
    if (in.rope_base_swa > 0)
        printf(" (local layers: base %g)", in.rope_base_swa);
    printf("\n");
    if (in.n_swa)
        printf("sliding window:  %u tokens on %u of %u layers\n", in.n_swa, in.n_swa_layers, in.n_layer);
    printf("norm epsilon:    %g\n", in.norm_eps);
    printf("training ctx:    %u\n", in.n_ctx_train);
    printf("tokenizer:       %s (pre-tokenizer %s), %u tokens, bos %d, eos %d\n", in.tokenizer, in.tokenizer_pre,
           in.n_vocab, in.bos, in.eos);
    printf("chat template:   %s\n", in.has_chat_template ? "from the file" : "built-in");
    printf("output head:     %s\n", in.tied_output ? "tied to token_embd" : "output.weight");
    /* counts per type, in type-id order */
    unsigned counts[256] = {0};
    const char *names[256] = {NULL};
    for (uint64_t i = 0; i < in.n_tensors; i++) {
        sp_tensor_info t;
        if (sp_model_tensor_get(m, i, &t) == SP_OK && t.type < 256) {
            counts[t.type]++;
            names[t.type] = t.type_name;
        }
    }
    printf("tensor types:   ");
    for (int t = 0; t < 256; t++)
        if (counts[t])
            printf(" %s×%u", names[t], counts[t]);
    printf("\n");
    printf("weights read per token: %.1f MiB\n", in.weights_bytes / 1048576.0);
    uint64_t per_pos = (uint64_t)in.n_head_kv * in.head_dim * 2 * 2; /* K and V, f16 */
    /* sliding-window layers keep window + batch (512) positions, as the engine does */
    uint32_t n_local = 0;
    uint64_t ring = in.n_swa ? (uint64_t)in.n_swa + 512 : 0;
    if (ring && ring < (uint64_t)n_ctx)
        n_local = in.n_swa_layers;
    uint64_t kv_bytes = per_pos * ((in.n_layer - n_local) * (uint64_t)n_ctx + n_local * ring);
    printf("KV cache:        %.1f MiB for %d tokens of context (f16, %llu bytes per token per layer)", kv_bytes / 1048576.0,
           n_ctx, (unsigned long long)per_pos);
    if (n_local)
        printf("; %u sliding-window layers keep %llu positions (full cache would be %.1f MiB)", n_local,
               (unsigned long long)ring, per_pos * in.n_layer * (uint64_t)n_ctx / 1048576.0);
    printf("\n");
    printf("kernels:         %s", in.isa);
    if (in.n_packed)
        printf("; %u matrices repacked into 16-row tiles at load (%.1f MiB)", in.n_packed,
               in.packed_bytes / 1048576.0);
    printf("\n");
    sp_model_free(m);
    return 0;
}
