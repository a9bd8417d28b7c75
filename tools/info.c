/* spindle info: what a model file is and what running it will need. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "tools.h"

int sp_tool_info(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    const char *path = NULL;
    int n_ctx = 0;
    struct sp_model *m = NULL;
    struct sp_vocab *v = NULL;
    int rc = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle info -m MODEL [--ctx N]");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) path = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &n_ctx);
        else
            return sp_tool_fail("info: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!path)
        return sp_tool_fail("info: -m MODEL is required");
    if (sp_model_init(&m, path) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    if (sp_vocab_init(&v, &m->gguf) != SP_OK) {
        sp_tool_fail("%s: %s", path, sp_error_message());
        goto done;
    }
    const struct sp_hparams *hp = &m->hp;
    if (n_ctx <= 0)
        n_ctx = (int)(hp->n_ctx_train < 8192 ? hp->n_ctx_train : 8192);
    printf("file:            %s (%.1f MiB, GGUF v%u, %llu tensors, %llu keys)\n", path, m->file_bytes / 1048576.0,
           m->gguf.version, (unsigned long long)m->gguf.n_tensors, (unsigned long long)m->gguf.n_kv);
    printf("architecture:    %s\n", m->arch->name);
    printf("layers:          %u\n", hp->n_layer);
    printf("embedding:       %u\n", hp->n_embd);
    printf("feed-forward:    %u\n", hp->n_ff);
    printf("heads:           %u query, %u key/value, head size %u, rope dims %u\n", hp->n_head, hp->n_head_kv,
           hp->head_dim, hp->n_rot);
    printf("rope:            base %g, frequency scale %g%s\n", hp->rope_base, hp->rope_freq_scale,
           m->arch->swa_pattern ? " (local layers: base 10000)" : "");
    if (hp->n_swa)
        printf("sliding window:  %u tokens on %u of %u layers\n", hp->n_swa,
               hp->n_layer - hp->n_layer / m->arch->swa_pattern, hp->n_layer);
    printf("norm epsilon:    %g\n", hp->eps);
    printf("training ctx:    %u\n", hp->n_ctx_train);
    printf("tokenizer:       %s (pre-tokenizer %s), %u tokens, bos %d, eos %d\n", sp_vocab_model_name(v),
           sp_vocab_pre_name(v), sp_vocab_size(v), sp_vocab_bos(v), sp_vocab_eos(v));
    printf("chat template:   %s\n", sp_vocab_chat_template(v) ? "from the file" : "built-in");
    printf("output head:     %s\n", m->output.data == m->tok_embd.data ? "tied to token_embd" : "output.weight");
    unsigned counts[SP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++)
        counts[m->gguf.tensors[i].type]++;
    printf("tensor types:   ");
    for (int t = 0; t < SP_TYPE_COUNT; t++)
        if (counts[t])
            printf(" %s×%u", sp_type_get(t)->name, counts[t]);
    printf("\n");
    printf("weights read per token: %.1f MiB\n", m->weights_bytes / 1048576.0);
    uint64_t kv_dim = (uint64_t)hp->n_head_kv * hp->head_dim;
    uint64_t per_pos = kv_dim * 2 * 2; /* K and V, f16 */
    /* sliding-window layers keep window + batch (512) positions, as the engine does */
    uint32_t n_local = 0;
    uint64_t ring = hp->n_swa ? (uint64_t)hp->n_swa + 512 : 0;
    if (ring && ring < (uint64_t)n_ctx)
        for (uint32_t l = 0; l < hp->n_layer; l++)
            n_local += m->layers[l].swa;
    uint64_t kv_bytes = per_pos * ((hp->n_layer - n_local) * (uint64_t)n_ctx + n_local * ring);
    printf("KV cache:        %.1f MiB for %d tokens of context (f16, %llu bytes per token per layer)", kv_bytes / 1048576.0,
           n_ctx, (unsigned long long)per_pos);
    if (n_local)
        printf("; %u sliding-window layers keep %llu positions (full cache would be %.1f MiB)", n_local,
               (unsigned long long)ring, per_pos * hp->n_layer * (uint64_t)n_ctx / 1048576.0);
    printf("\n");
    struct sp_isa_paths ip;
    sp_isa_paths(&ip);
    printf("kernels:         ISA level %s: quantized dots %s, packed tiles %s, attention %s, norms and activations %s",
           ip.level, ip.quant, ip.packed ? ip.packed : "none", ip.attention, ip.ops);
    if (m->n_packed)
        printf("; %u matrices repacked into 16-row tiles at load (%.1f MiB)", m->n_packed,
               m->packed_bytes / 1048576.0);
    printf("\n");
    rc = 0;
done:
    sp_vocab_free(v);
    sp_model_free(m);
    return rc;
}
