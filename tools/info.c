/* spindle info: what a model file is and what running it will need. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

/* The memory table: what an engine with these settings allocates (all of it
 * resident from its creation but the sliding-window rings and the linear
 * layers' state slots, allocated when a request first needs one, and the
 * prefix cache's state snapshots, allocated as prompts fill their budget),
 * and the rest of this process's resident memory
 * (code, libraries, tokenizer) and its peak while loading, which a run or
 * server process with the same settings also has; a server also holds its
 * private copy of the file's bytes read in place (`copy` bytes,
 * sp_model_params.private_copy). */
static void sp_info_memory(const sp_engine *e, const sp_engine_params *ep, uint64_t copy)
{
    sp_engine_stats es;
    uint64_t rss, peak;
    sp_engine_stats_get(e, &es);
    sp_process_memory(&rss, &peak);
    uint64_t resident = es.mem_weights + es.mem_kv - es.mem_kv_rings + es.mem_scratch;
    uint64_t runtime = rss > resident ? rss - resident : 0;
    /* the rings and the recurrent state come after loading, as requests start */
    uint64_t later = es.mem_kv_rings + es.mem_state;
    uint64_t total = peak > rss + later ? peak : rss + later;
    const double MiB = 1048576.0;
    printf("memory:          %d tokens of context x %d parallel, batch %d\n", sp_engine_n_ctx(e),
           ep->n_parallel > 0 ? ep->n_parallel : 1, ep->n_batch > 0 ? ep->n_batch : 512);
    printf("  weights        %8.1f MiB\n", es.mem_weights / MiB);
    printf("  KV cache       %8.1f MiB (keys %s, values %s", es.mem_kv / MiB, sp_cache_type_name(ep->cache_type_k),
           sp_cache_type_name(ep->cache_type_v));
    if (es.mem_kv_rings)
        printf("; %.1f MiB of it sliding-window rings, allocated as requests start", es.mem_kv_rings / MiB);
    printf(")\n");
    if (es.state_bytes_per_seq) {
        printf("  state          %8.1f MiB (linear layers' recurrent state: %.2f MiB per sequence, allocated as "
               "requests start)\n", es.mem_state / MiB, es.state_bytes_per_seq / MiB);
        printf("  snapshots      %8.1f MiB at most (prefix cache: %.2f MiB each, allocated as prompts fill it)\n",
               es.mem_state_snapshots / MiB, es.state_snapshot_bytes / MiB);
    }
    printf("  scratch        %8.1f MiB\n", es.mem_scratch / MiB);
    printf("  runtime        %8.1f MiB (code, libraries, tokenizer)\n", runtime / MiB);
    if (peak > rss)
        printf("  loading        %8.1f MiB more while the model loads\n", (peak - rss) / MiB);
    printf("  peak           %8.1f MiB resident for run with these settings\n", total / MiB);
    printf("  peak serve     %8.1f MiB with the server's private copy of the file's bytes read in place\n"
           "                 (%.1f MiB; serve --map-model: as run)\n", (total + copy) / MiB, copy / MiB);
}

int sp_tool_info(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    sp_model_params mp;
    sp_engine_params ep;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle info -m MODEL [--ctx N] [--parallel P] [--batch N] [--cache-type-k T]\n"
                 "                    [--cache-type-v T] [-t N]\n"
                 "  describes the model and the memory run/serve will take with these settings\n"
                 "  (cache types: f16, q8_0, q4_0)");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "--parallel", "-np")) sp_args_int(&a, 1, 1024, &ep.n_parallel);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &ep.n_batch);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &mp.n_threads);
        else if (sp_args_cache_type(&a, &ep.cache_type_k, &ep.cache_type_v)) continue;
        else
            return sp_tool_fail("info: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!mp.path)
        return sp_tool_fail("info: -m MODEL is required");
    if (sp_model_load(&mp, &m) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    if (sp_engine_create(m, &ep, &e) != SP_OK) {
        sp_model_free(m);
        return sp_tool_fail("%s", sp_error_message());
    }
    sp_model_info in;
    sp_model_info_get(m, &in);
    printf("file:            %s (%.1f MiB, GGUF v%u, %llu tensors, %llu keys)\n", mp.path, in.file_bytes / 1048576.0,
           in.gguf_version, (unsigned long long)in.n_tensors, (unsigned long long)in.n_meta);
    for (uint32_t i = 0, n = sp_model_n_files(m); n > 1 && i < n; i++) {
        const char *path;
        uint64_t bytes, n_tensors;
        char label[32];
        if (sp_model_file_get(m, i, &path, &bytes, &n_tensors) != SP_OK)
            break;
        snprintf(label, sizeof label, "part %u of %u:", i + 1, n);
        printf("%-17s%s (%.1f MiB, %llu tensors)\n", label, path, bytes / 1048576.0, (unsigned long long)n_tensors);
    }
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
    if (in.n_swa_layers)
        printf("%s  %u tokens on %u of %u layers\n", in.swa_chunked ? "attention chunk:" : "sliding window: ", in.n_swa,
               in.n_swa_layers, in.n_layer);
    if (in.features)
        printf("features:        %s\n", in.features);
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
    sp_isa_info ip;
    sp_isa_info_get(&ip);
    printf("kernels:         ISA level %s: quantized dots %s, packed tiles %s, attention %s, norms and activations %s",
           ip.level, ip.quant, ip.packed ? ip.packed : "none", ip.attention, ip.ops);
    if (in.n_packed)
        printf("; %u matrices repacked into 16-row tiles at load (%.1f MiB)", in.n_packed,
               in.packed_bytes / 1048576.0);
    printf("\n");
    sp_info_memory(e, &ep, in.private_copy_bytes);
    sp_engine_free(e);
    sp_model_free(m);
    return 0;
}
