/* spindle info: what a model file is and what running it will need. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core/error.h"
#include "core/mem.h"
#include "engine/engine.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "tools.h"

/* The memory table: what the engine allocates for these settings (all of
 * it resident from init but the sliding-window rings, allocated when a
 * request first needs one), and the rest of this process's resident memory
 * (code, libraries, tokenizer) and its peak while loading, which a run or
 * server process with the same settings also has. */
static void sp_info_memory(const struct sp_engine *e, int n_parallel, int n_batch)
{
    struct sp_engine_memory mem;
    sp_engine_memory(e, &mem);
    uint64_t rss = sp_mem_rss(), peak = sp_mem_peak_rss();
    uint64_t resident = mem.weights + mem.kv - mem.kv_rings + mem.scratch;
    uint64_t runtime = rss > resident ? rss - resident : 0;
    uint64_t total = peak > rss + mem.kv_rings ? peak : rss + mem.kv_rings; /* the rings come after loading */
    const double MiB = 1048576.0;
    printf("memory:          %d tokens of context x %d parallel, batch %d\n", sp_engine_n_ctx(e), n_parallel, n_batch);
    printf("  weights        %8.1f MiB\n", mem.weights / MiB);
    printf("  KV cache       %8.1f MiB (f16", mem.kv / MiB);
    if (mem.kv_rings)
        printf("; %.1f MiB of it sliding-window rings, allocated as requests start", mem.kv_rings / MiB);
    printf(")\n");
    printf("  scratch        %8.1f MiB\n", mem.scratch / MiB);
    printf("  runtime        %8.1f MiB (code, libraries, tokenizer)\n", runtime / MiB);
    if (peak > rss)
        printf("  loading        %8.1f MiB more while the model loads\n", (peak - rss) / MiB);
    printf("  peak           %8.1f MiB resident for run/serve with these settings\n", total / MiB);
}

int sp_tool_info(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    struct sp_engine_params ep = {0};
    const char *cache_k = "f16", *cache_v = "f16";
    struct sp_engine *e = NULL;
    int rc = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle info -m MODEL [--ctx N] [--parallel P] [--batch N] [--cache-type-k f16]\n"
                 "                    [--cache-type-v f16] [-t N]\n"
                 "  describes the model and the memory run/serve will take with these settings");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) ep.model_path = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "--parallel", "-np")) sp_args_int(&a, 1, 1024, &ep.n_parallel);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &ep.n_batch);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &ep.n_threads);
        else if (sp_args_is(&a, "--cache-type-k", "-ctk")) cache_k = sp_args_value(&a);
        else if (sp_args_is(&a, "--cache-type-v", "-ctv")) cache_v = sp_args_value(&a);
        else
            return sp_tool_fail("info: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!ep.model_path)
        return sp_tool_fail("info: -m MODEL is required");
    if (strcmp(cache_k, "f16") || strcmp(cache_v, "f16"))
        return sp_tool_fail("info: KV cache type '%s': only f16 is supported", strcmp(cache_k, "f16") ? cache_k : cache_v);
    if (sp_engine_init(&e, &ep) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    const struct sp_model *m = sp_engine_model(e);
    const struct sp_vocab *v = sp_engine_vocab(e);
    const struct sp_hparams *hp = &m->hp;
    const char *path = ep.model_path;
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
    uint64_t per_pos = (uint64_t)hp->n_head_kv * hp->head_dim * 2 * 2; /* K and V, f16 */
    printf("KV cache:        %llu bytes per token per layer (f16)\n", (unsigned long long)per_pos);
    printf("kernels:         %s", sp_quant_isa());
    if (m->n_packed)
        printf("; %u matrices repacked into 16-row tiles at load (%.1f MiB)", m->n_packed,
               m->packed_bytes / 1048576.0);
    printf("\n");
    sp_info_memory(e, ep.n_parallel > 0 ? ep.n_parallel : 1, ep.n_batch > 0 ? ep.n_batch : 512);
    rc = 0;
    sp_engine_free(e);
    return rc;
}
