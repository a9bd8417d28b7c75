/* spindle bench: prefill of a p-token prompt in one batch, then n decode
 * steps, repeated; like llama-bench.  With -B, B sequences decode together
 * (the server's step) and the aggregate rate is reported.  With -d DEPTH the
 * decode streams start after a DEPTH-token prompt (not timed: decode is timed
 * from the step after which every stream has its first token), so decode is
 * measured with DEPTH..DEPTH+n positions of KV to attend over.  Every
 * repetition uses fresh prompt tokens, so the prefix cache never turns a
 * prefill into a cache hit. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "tool_spec.h"
#include "spindle.h"
#include "tools.h"

static double sp_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sp_bench_stats(const double *x, int n, double *mean, double *sd)
{
    double s = 0, q = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

struct sp_bench_count {
    double t_first, t_last;
    uint32_t n;
    sp_token *ids;   /* constrained runs: the tokens, for the mask replay */
    uint32_t cap;
};

static void sp_bench_event(void *user, const struct sp_token_event *ev)
{
    struct sp_bench_count *c = user;
    if (ev->finish != SP_FINISH_NONE)
        return;
    double now = sp_bench_now();
    if (c->n == 0)
        c->t_first = now;
    c->t_last = now;
    if (c->ids && c->n < c->cap)
        c->ids[c->n] = ev->id;
    c->n++;
}

/* B requests with a short distinct prompt each; the aggregate decode rate,
 * timed from the step after which every stream has its first token (the
 * steps before also prefill the other streams' prompts).  -1 on error. */
static double sp_bench_decode(sp_engine *e, const sp_token *prompt, int depth, int batch, const sp_gen_params *gp,
                              struct sp_bench_count *cnt)
{
    for (int b = 0; b < batch; b++) {
        cnt[b].n = 0;
        cnt[b].t_first = cnt[b].t_last = 0;
        if (sp_request_submit(e, prompt + b, (size_t)depth, gp, sp_bench_event, &cnt[b], NULL) != SP_OK) {
            sp_tool_fail("%s", sp_error_message());
            return -1;
        }
    }
    double t_start = 0, t_end = 0;
    uint64_t before = 0, after = 0; /* tokens out when the timing starts, at the end */
    while (sp_engine_step(e) > 0) {
        if (t_start > 0)
            continue;
        int started = 0;
        for (int b = 0; b < batch; b++)
            started += cnt[b].n > 0;
        if (started == batch) {
            t_start = sp_bench_now();
            for (int b = 0; b < batch; b++)
                before += cnt[b].n;
        }
    }
    for (int b = 0; b < batch; b++) {
        t_end = cnt[b].t_last > t_end ? cnt[b].t_last : t_end;
        after += cnt[b].n;
    }
    return after > before && t_end > t_start ? (after - before) / (t_end - t_start) : 0.0;
}

/* --json-schema: compile time, the cost of a copy (what a server request
 * repeating a schema pays), and the mask time of every token the
 * constrained streams produced, replayed on a fresh copy. */
static sp_status sp_bench_masks(const sp_model *m, const char *schema, size_t len, const struct sp_bench_count *cnt,
                                int batch, struct sp_bench_grammar *gb)
{
    const sp_token **seqs = calloc((size_t)batch, sizeof *seqs);
    size_t *lens = calloc((size_t)batch, sizeof *lens);
    sp_status st = SP_ERR_NOMEM;
    if (seqs && lens) {
        for (int b = 0; b < batch; b++) {
            seqs[b] = cnt[b].ids;
            lens[b] = cnt[b].n < cnt[b].cap ? cnt[b].n : cnt[b].cap;
        }
        st = sp_bench_grammar(m, schema, len, seqs, lens, (size_t)batch, gb);
    }
    free(seqs);
    free(lens);
    return st;
}

int sp_tool_bench(int argc, char **argv)
{
    sp_model_params mp;
    sp_engine_params ep;
    struct sp_args a = {argc, argv, 1, false};
    int n_prompt = 512, n_gen = 128, reps = 3, batch = 1, depth = 2;
    bool json = false, bandwidth = false;
    const char *schema_file = NULL;
    char *schema = NULL;
    size_t schema_len = 0;
    sp_grammar *grammar = NULL, *proto = NULL;
    struct sp_bench_grammar gb = {0};
    double *tg_c = NULL;
    const char *embed = NULL; /* --embed FILE: sentences per second (bench_embed.c) */
    sp_model *model = NULL;
    sp_engine *e = NULL;
    sp_token *prompt = NULL;
    double *pp = NULL, *tg = NULL;
    struct sp_bench_count *cnt = NULL;
    int rc = 2;
    struct sp_tool_spec spec;
    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    sp_tool_spec_init(&spec);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [-B SEQUENCES] [-d DEPTH] [--json]\n"
                 "       [--json-schema FILE]  also decode under the schema (alternating with unconstrained\n"
                 "                             runs): compile time, mask time per token p50/p99, tokens/s\n"
                 "       [--cache-type-k f16|q8_0|q4_0] [--cache-type-v f16|q8_0|q4_0]\n"
                 "       [--spec ngram|draft|self [--spec-k N] [--spec-fixed] [--draft-model M] [--spec-layers L]]\n"
                 "       spindle bench --bandwidth [-t THREADS] [--json]   (memory read GB/s)\n"
                 "       spindle bench -m MODEL --embed FILE [-B BATCH] [-r REPS] [--ctx N] [-t THREADS] [--json]\n"
                 "                     (embedding sentences/s, one sentence a line, BATCH per call)");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "-p", NULL)) sp_args_int(&a, 1, 1 << 20, &n_prompt);
        else if (sp_args_is(&a, "-n", NULL)) sp_args_int(&a, 1, 1 << 20, &n_gen);
        else if (sp_args_is(&a, "-r", NULL)) sp_args_int(&a, 1, 1000, &reps);
        else if (sp_args_is(&a, "-B", "--batch")) sp_args_int(&a, 1, 256, &batch);
        else if (sp_args_is(&a, "-d", "--depth")) sp_args_int(&a, 2, 1 << 20, &depth);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &mp.n_threads);
        else if (sp_args_is(&a, "--json", NULL)) json = true;
        else if (sp_args_is(&a, "--bandwidth", NULL)) bandwidth = true;
        else if (sp_args_is(&a, "--json-schema", NULL)) schema_file = sp_args_value(&a);
        else if (sp_tool_spec_flag(&a, &spec)) continue;
        else if (sp_args_is(&a, "--embed", NULL)) embed = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_cache_type(&a, &ep.cache_type_k, &ep.cache_type_v)) continue;
        else
            return sp_tool_fail("bench: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (bandwidth) {
        double gbs;
        if (sp_bench_bandwidth(mp.n_threads, &gbs) != SP_OK)
            return sp_tool_fail("bench: %s", sp_error_message());
        if (json)
            printf("{\"read_bandwidth_gb_s\":%.3f,\"threads\":%d}\n", gbs, mp.n_threads);
        else
            printf("memory read bandwidth: %.1f GB/s\n", gbs);
        return 0;
    }
    if (!mp.path)
        return sp_tool_fail("bench: -m MODEL is required");
    if (embed)
        return sp_bench_embed(&mp, &ep, embed, batch, reps, json);
    int longest = n_prompt > depth ? n_prompt : depth;
    ep.n_ctx = longest + n_gen + 1;
    ep.n_parallel = batch;
    ep.n_batch = longest > 512 ? longest : 512;
    if (!sp_tool_spec_load(&spec, mp.n_threads, &ep))
        goto done;
    if (sp_model_load(&mp, &model) != SP_OK || sp_engine_create(model, &ep, &e) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    sp_model_info m;
    sp_model_info_get(model, &m);
    size_t n_toks = (size_t)longest + batch; /* a window per request */
    prompt = malloc(n_toks * sizeof *prompt);
    pp = calloc((size_t)reps, sizeof *pp);
    tg = calloc((size_t)reps, sizeof *tg);
    cnt = calloc((size_t)batch, sizeof *cnt);
    tg_c = calloc((size_t)reps, sizeof *tg_c);
    if (schema_file) {
        double t0 = sp_bench_now();
        if (!(schema = sp_read_file(schema_file, &schema_len)) ||
            sp_grammar_create(model, SP_GRAMMAR_SCHEMA, schema, schema_len, &proto) != SP_OK) {
            sp_tool_fail("%s: %s", schema_file, schema ? sp_error_message() : "cannot read");
            goto done;
        }
        fprintf(stderr, "bench: vocabulary table and first grammar in %.1f ms\n", (sp_bench_now() - t0) * 1e3);
        for (int b = 0; b < batch; b++) {
            cnt[b].cap = (uint32_t)n_gen + 1;
            if (!(cnt[b].ids = malloc(cnt[b].cap * sizeof *cnt[b].ids))) {
                sp_tool_fail("out of memory");
                goto done;
            }
        }
    }
    if (!prompt || !pp || !tg || !cnt || !tg_c) {
        sp_tool_fail("out of memory");
        goto done;
    }
    uint64_t x = 12345;
    sp_gen_params gp;
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        for (size_t i = 0; i < n_toks; i++) { /* fresh tokens: no prefix-cache hits */
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (sp_token)(1000 + (x >> 33) % (m.n_vocab - 2000));
        }
        /* prefill: one request, one token */
        gp.max_tokens = 1;
        cnt[0].n = 0;
        cnt[0].t_first = cnt[0].t_last = 0;
        double t0 = sp_bench_now();
        if (sp_request_submit(e, prompt, (size_t)n_prompt, &gp, sp_bench_event, cnt, NULL) != SP_OK) {
            sp_tool_fail("%s", sp_error_message());
            goto done;
        }
        while (sp_engine_step(e) > 0)
            ;
        double t_pp = cnt[0].t_first - t0;
        /* decode: B requests with a short distinct prompt each, n tokens */
        gp.max_tokens = n_gen + 1;
        double rate = sp_bench_decode(e, prompt, depth, batch, &gp, cnt);
        double rate_c = 0;
        if (schema_file) { /* the same streams under the schema, a fresh copy as a server request has */
            sp_gen_params gc = gp;
            sp_grammar_free(grammar);
            grammar = NULL;
            if (sp_grammar_clone(proto, &grammar) != SP_OK) {
                sp_tool_fail("%s", sp_error_message());
                goto done;
            }
            gc.grammar = grammar;
            gc.ignore_eos = false;
            rate_c = sp_bench_decode(e, prompt, depth, batch, &gc, cnt);
        }
        if (rate < 0 || rate_c < 0)
            goto done;
        if (r >= 0) {
            pp[r] = n_prompt / t_pp;
            tg[r] = rate;
            tg_c[r] = rate_c;
        }
    }
    double pm, ps, tm, ts, tcm = 0, tcs = 0;
    sp_bench_stats(pp, reps, &pm, &ps);
    sp_bench_stats(tg, reps, &tm, &ts);
    if (schema_file) {
        sp_bench_stats(tg_c, reps, &tcm, &tcs);
        if (sp_bench_masks(model, schema, schema_len, cnt, batch, &gb) != SP_OK) {
            sp_tool_fail("%s: %s", schema_file, sp_error_message());
            goto done;
        }
    }
    uint64_t kv_dim = (uint64_t)m.n_head_kv * m.head_dim;
    /* mean KV bytes read per decode token over the run: positions ~ n/2 on
     * average; a sliding-window layer reads at most its window */
    double ctx = depth + n_gen / 2.0, w_swa = m.n_swa && m.n_swa < ctx ? m.n_swa : ctx;
    double kv_read = (double)(sp_cache_type_bytes(ep.cache_type_k, kv_dim) + sp_cache_type_bytes(ep.cache_type_v, kv_dim)) *
                     ((m.n_layer - m.n_swa_layers) * ctx + m.n_swa_layers * w_swa);
    double bytes_per_tok = (double)m.weights_bytes / batch + kv_read;
    double gbs = bytes_per_tok * tm / 1e9;
    sp_isa_info ip;
    sp_isa_info_get(&ip);
    sp_engine_stats es;
    sp_engine_stats_get(e, &es);
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(mp.path));
        json_object_set_new(o, "threads", json_integer(sp_engine_n_threads(e)));
        json_object_set_new(o, "isa", json_string(ip.level));
        json_object_set_new(o, "isa_paths", json_pack("{s:s, s:s?, s:s, s:s}", "quant", ip.quant, "packed", ip.packed,
                                                      "attention", ip.attention, "ops", ip.ops));
        json_object_set_new(o, "n_prompt", json_integer(n_prompt));
        json_object_set_new(o, "n_gen", json_integer(n_gen));
        json_object_set_new(o, "batch", json_integer(batch));
        json_object_set_new(o, "depth", json_integer(depth));
        json_object_set_new(o, "kv_bytes_per_token", json_real(kv_read));
        json_object_set_new(o, "cache_type_k", json_string(sp_cache_type_name(ep.cache_type_k)));
        json_object_set_new(o, "cache_type_v", json_string(sp_cache_type_name(ep.cache_type_v)));
        json_object_set_new(o, "reps", json_integer(reps));
        json_object_set_new(o, "prefill_tokens_per_s", json_real(pm));
        json_object_set_new(o, "prefill_tokens_per_s_sd", json_real(ps));
        json_object_set_new(o, "decode_tokens_per_s", json_real(tm));
        json_object_set_new(o, "decode_tokens_per_s_sd", json_real(ts));
        json_object_set_new(o, "weights_bytes", json_integer((json_int_t)m.weights_bytes));
        json_object_set_new(o, "decode_bytes_per_token", json_real(bytes_per_tok));
        json_object_set_new(o, "decode_bandwidth_gb_s", json_real(gbs));
        if (schema_file) {
            json_object_set_new(o, "json_schema", json_string(schema_file));
            json_object_set_new(o, "grammar_compile_ms", json_real(gb.compile_ms));
            json_object_set_new(o, "grammar_copy_us", json_real(gb.copy_us));
            json_object_set_new(o, "mask_us_p50", json_real(gb.mask_us_p50));
            json_object_set_new(o, "mask_us_p99", json_real(gb.mask_us_p99));
            json_object_set_new(o, "masks_timed", json_integer((json_int_t)gb.n_masks));
            json_object_set_new(o, "constrained_decode_tokens_per_s", json_real(tcm));
            json_object_set_new(o, "constrained_decode_tokens_per_s_sd", json_real(tcs));
            json_object_set_new(o, "constrained_ratio", json_real(tm > 0 ? tcm / tm : 0));
        }
        json_object_set_new(o, "spec", json_string(sp_spec_kind_name(ep.spec)));
        json_object_set_new(o, "spec_drafted", json_integer((json_int_t)es.spec_drafted));
        json_object_set_new(o, "spec_accepted", json_integer((json_int_t)es.spec_accepted));
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("model: %s | threads: %d | kernels: %s (dots %s, packed %s, attention %s) | weights: %.1f MiB | "
               "KV cache: keys %s, values %s\n",
               mp.path, sp_engine_n_threads(e), ip.level, ip.quant, ip.packed ? ip.packed : "none", ip.attention,
               m.weights_bytes / 1048576.0, sp_cache_type_name(ep.cache_type_k), sp_cache_type_name(ep.cache_type_v));
        printf("prefill pp%-5d %10.1f ± %.1f tokens/s\n", n_prompt, pm, ps);
        printf("decode  tg%-5d %10.1f ± %.1f tokens/s%s (%.1f GB/s of weights+KV)\n", n_gen, tm, ts,
               batch > 1 ? " aggregate" : "", gbs);
        if (schema_file)
            printf("schema  %s: compile+bind %.1f ms, cached copy %.1f us | mask p50 %.1f us p99 %.1f us (%zu tokens) | "
                   "constrained decode %.1f ± %.1f tokens/s = %.1f %% of unconstrained\n",
                   schema_file, gb.compile_ms, gb.copy_us, gb.mask_us_p50, gb.mask_us_p99, gb.n_masks, tcm, tcs,
                   tm > 0 ? 100 * tcm / tm : 0);
        if (ep.spec != SP_SPEC_NONE)
            printf("speculative (%s): %llu drafted, %llu accepted\n", sp_spec_kind_name(ep.spec),
                   (unsigned long long)es.spec_drafted, (unsigned long long)es.spec_accepted);
    }
    rc = 0;
done:
    for (int b = 0; cnt && b < batch; b++)
        free(cnt[b].ids);
    free(prompt);
    free(pp);
    free(tg);
    free(tg_c);
    free(cnt);
    free(schema);
    sp_engine_free(e);
    sp_grammar_free(grammar);
    sp_grammar_free(proto);
    sp_tool_spec_free(&spec);
    sp_model_free(model);
    return rc;
}
