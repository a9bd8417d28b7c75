/* spindle run: generate text from a prompt with the engine's one loop.
 * stdout holds only the generated text (or one JSON object with --json);
 * the summary goes to stderr. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "tool_spec.h"
#include "spindle.h"
#include "tools.h"

#define SP_RUN_MAX_STOP 16
#define SP_RUN_MAX_BIAS 256

static const char sp_run_usage[] =
    "usage: spindle run -m MODEL (-p PROMPT | -f FILE) [options]\n"
    "  -n N                 most tokens to generate, N >= 1 (default 256; -1: until the context is full)\n"
    "  --chat               format the prompt with the model's chat template\n"
    "  --system TEXT        system message (with --chat)\n"
    "  --special            recognise special-token text in the prompt\n"
    "  --temp T --top-k K --top-p P --min-p P --typical-p P --seed S\n"
    "  --repeat-penalty R --repeat-last-n N --presence-penalty P --frequency-penalty P\n"
    "  --logit-bias ID=BIAS (repeatable)   --stop STR (repeatable)   --ignore-eos\n"
    "  --n N                N independent samples   --beams B   --logprobs K\n"
    "  --json               one JSON object on stdout   --explain  print each decoding step\n"
    "  --grammar FILE       constrain the output to a GBNF grammar\n"
    "  --json-schema FILE   constrain the output to JSON matching a JSON Schema (validated)\n"
    "  --json-whitespace compact|flexible   JSON without whitespace (default), or any JSON whitespace\n"
    "  --max-retries N      attempts after an output fails its check (default 2)\n"
    "  --ctx N  -t THREADS  --mlock (keep the weights in RAM)\n"
    "  --swa-full           sliding-window layers cache the whole context (default: only the window)\n"
    "  --cache-type-k T  --cache-type-v T   KV cache keys/values: f16 (default), q8_0, q4_0\n"
    SP_TOOL_SPEC_USAGE
    "exit status: 0 done; 2 bad input; 3 with --grammar/--json-schema, an output that is not a\n"
    "complete, valid sentence (cut by -n or the context, or invalid after every retry): one line\n"
    "on stderr says which, and the partial text is still printed\n";

struct sp_run_token {
    sp_token id;
    float logprob;
    int n_top;
    sp_token top_id[SP_MAX_LOGPROBS];
    float top_lp[SP_MAX_LOGPROBS];
};

struct sp_run_choice {
    char *text;
    size_t len, cap;
    struct sp_run_token *toks;
    size_t n_toks, cap_toks;
    enum sp_finish finish;
    double logprob_sum;
    int attempts;
    bool valid;
    char error[512];
};

struct sp_run_state {
    bool json, stream, constrained;
    const sp_model *model;
    struct sp_run_choice choices[16];
    uint32_t n_prompt, n_cached, n_generated;
    bool oom;
};

static void sp_run_append(struct sp_run_state *s, struct sp_run_choice *c, const char *t, size_t n)
{
    if (c->len + n + 1 > c->cap) {
        size_t cap = (c->cap ? c->cap * 2 : 4096) + n;
        char *nt = realloc(c->text, cap);
        if (!nt) {
            s->oom = true;
            return;
        }
        c->text = nt;
        c->cap = cap;
    }
    memcpy(c->text + c->len, t, n);
    c->len += n;
    c->text[c->len] = '\0';
}

static void sp_run_event(void *user, const struct sp_token_event *ev)
{
    struct sp_run_state *s = user;
    struct sp_run_choice *c = &s->choices[ev->choice];
    c->attempts = ev->attempt;
    if (ev->retry) { /* this attempt failed its check: start the choice's record over */
        fprintf(stderr, "spindle: choice %d, attempt %d invalid (%s); retrying\n", ev->choice, ev->attempt,
                ev->error ? ev->error : "?");
        c->len = 0;
        c->n_toks = 0;
        return;
    }
    if (ev->explain)
        sp_explain_print(ev->explain, s->model, stderr);
    if (s->stream && ev->len) {
        fwrite(ev->text, 1, ev->len, stdout);
        fflush(stdout);
    }
    sp_run_append(s, c, ev->text, ev->len);
    s->n_prompt = ev->n_prompt;
    s->n_cached = ev->n_cached;
    if (ev->finish != SP_FINISH_NONE) {
        c->finish = ev->finish;
        c->logprob_sum = ev->logprob_sum;
        c->valid = ev->valid;
        if (ev->error)
            snprintf(c->error, sizeof c->error, "%s", ev->error);
        s->n_generated += ev->n_generated;
        return;
    }
    if (c->n_toks == c->cap_toks) {
        size_t cap = c->cap_toks ? c->cap_toks * 2 : 256;
        struct sp_run_token *nt = realloc(c->toks, cap * sizeof *nt);
        if (!nt) {
            s->oom = true;
            return;
        }
        c->toks = nt;
        c->cap_toks = cap;
    }
    struct sp_run_token *t = &c->toks[c->n_toks++];
    memset(t, 0, sizeof *t);
    t->id = ev->id;
    t->logprob = NAN;
    if (ev->lp) {
        t->logprob = ev->lp->logprob;
        t->n_top = ev->lp->n_top;
        for (int i = 0; i < ev->lp->n_top; i++) {
            t->top_id[i] = ev->lp->top[i].id;
            t->top_lp[i] = ev->lp->top[i].logprob;
        }
    }
}

/* JSON strings must be valid UTF-8: a token may hold part of a character. */
static json_t *sp_run_jstr(const char *s, size_t n)
{
    char *buf = malloc(3 * n + 1);
    if (!buf)
        return json_string("");
    json_t *j = json_stringn_nocheck(buf, sp_utf8_sanitize(s, n, buf));
    free(buf);
    return j;
}

static json_t *sp_run_piece(const sp_model *m, sp_token id)
{
    char buf[1024];
    size_t n;
    if (sp_model_token_to_piece(m, id, false, buf, sizeof buf, &n) != SP_OK)
        n = 0;
    return sp_run_jstr(buf, n);
}

static json_t *sp_run_choice_json(const struct sp_run_state *s, const struct sp_run_choice *c, bool logprobs)
{
    json_t *toks = json_array();
    for (size_t i = 0; i < c->n_toks; i++) {
        const struct sp_run_token *t = &c->toks[i];
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(t->id));
        json_object_set_new(o, "text", sp_run_piece(s->model, t->id));
        if (logprobs) {
            json_object_set_new(o, "logprob", json_real(t->logprob));
            json_t *top = json_array();
            for (int k = 0; k < t->n_top; k++) {
                json_t *e = json_object();
                json_object_set_new(e, "id", json_integer(t->top_id[k]));
                json_object_set_new(e, "text", sp_run_piece(s->model, t->top_id[k]));
                json_object_set_new(e, "logprob", json_real(t->top_lp[k]));
                json_array_append_new(top, e);
            }
            json_object_set_new(o, "top_logprobs", top);
        }
        json_array_append_new(toks, o);
    }
    json_t *o = json_object();
    json_object_set_new(o, "text", sp_run_jstr(c->text ? c->text : "", c->len));
    json_object_set_new(o, "finish_reason", json_string(sp_finish_name(c->finish)));
    if (logprobs)
        json_object_set_new(o, "logprob", json_real(c->logprob_sum));
    json_object_set_new(o, "tokens", toks);
    if (s->constrained) {
        json_object_set_new(o, "attempts", json_integer(c->attempts));
        json_object_set_new(o, "valid", json_boolean(c->valid));
        if (c->error[0])
            json_object_set_new(o, "error", json_string(c->error));
    }
    return o;
}

static bool sp_run_logit_bias(struct sp_args *a, struct sp_logit_bias *b)
{
    const char *v = sp_args_value(a);
    char *end;
    if (!v)
        return false;
    long id = strtol(v, &end, 10);
    if (end == v || *end != '=' || id < 0 || id > INT32_MAX) {
        a->failed = true;
        sp_tool_fail("--logit-bias: '%s' is not ID=BIAS", v);
        return false;
    }
    const char *bs = end + 1;
    float bias = strtof(bs, &end);
    if (!strcmp(bs, "-inf") || !strcmp(bs, "-INF"))
        bias = -INFINITY;
    else if (end == bs || *end || isnan(bias) || isinf(bias)) {
        a->failed = true;
        sp_tool_fail("--logit-bias: '%s' has no finite bias (or -inf)", v);
        return false;
    }
    b->id = (sp_token)id;
    b->bias = bias;
    return true;
}

/* Reads a GBNF grammar or a JSON Schema and compiles it for the model. */
static sp_status sp_run_grammar(const char *path, sp_grammar_kind kind, const sp_model *m, sp_grammar **g)
{
    size_t len;
    char *text = sp_read_file(path, &len);
    if (!text) {
        sp_tool_fail("%s: cannot read", path);
        return SP_ERR_IO;
    }
    sp_status st = sp_grammar_create(m, kind, text, len, g);
    if (st != SP_OK)
        sp_tool_fail("%s: %s", path, sp_error_message());
    free(text);
    return st;
}

int sp_tool_run(int argc, char **argv)
{
    sp_model_params mp;
    sp_engine_params ep;
    sp_gen_params gp;
    struct sp_args a = {argc, argv, 1, false};
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    const char *stops[SP_RUN_MAX_STOP];
    struct sp_logit_bias bias[SP_RUN_MAX_BIAS];
    size_t n_stop = 0, n_bias = 0;
    bool chat = false, special = false, json = false;
    const char *grammar_file = NULL, *schema_file = NULL, *whitespace = NULL;
    sp_grammar *grammar = NULL;
    sp_model *model = NULL;
    sp_engine *e = NULL;
    struct sp_run_state *s = NULL;
    sp_token *toks = NULL;
    char *file_text = NULL;
    size_t n_toks = 0;
    int rc = 2;
    struct sp_tool_spec spec;

    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    sp_gen_params_default(&gp);
    sp_tool_spec_init(&spec);
    gp.max_tokens = 256;
    gp.max_retries = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            fputs(sp_run_usage, stdout);
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "-p", "--prompt")) prompt = sp_args_value(&a);
        else if (sp_args_is(&a, "-f", "--file")) prompt_file = sp_args_value(&a);
        else if (sp_args_is(&a, "--system", NULL)) system = sp_args_value(&a);
        else if (sp_args_is(&a, "-n", "--n-predict")) {
            if (sp_args_int(&a, -1, 1 << 24, &gp.max_tokens) && gp.max_tokens == 0) {
                sp_tool_fail("-n 0 generates nothing: give N >= 1, or -1 for no limit");
                goto done;
            }
        }
        else if (sp_args_is(&a, "--temp", "--temperature")) sp_args_float(&a, 0, 100, &gp.sampling.temperature);
        else if (sp_args_is(&a, "--top-k", NULL)) sp_args_int(&a, 0, 1 << 24, &gp.sampling.top_k);
        else if (sp_args_is(&a, "--top-p", NULL)) sp_args_float(&a, 0, 1, &gp.sampling.top_p);
        else if (sp_args_is(&a, "--min-p", NULL)) sp_args_float(&a, 0, 1, &gp.sampling.min_p);
        else if (sp_args_is(&a, "--typical-p", "--typical")) sp_args_float(&a, 0, 1, &gp.sampling.typical_p);
        else if (sp_args_is(&a, "--repeat-penalty", NULL)) sp_args_float(&a, 1e-3, 100, &gp.sampling.repeat_penalty);
        else if (sp_args_is(&a, "--repeat-last-n", NULL)) sp_args_int(&a, -1, 1 << 24, &gp.sampling.repeat_last_n);
        else if (sp_args_is(&a, "--presence-penalty", NULL)) sp_args_float(&a, -2, 2, &gp.sampling.presence_penalty);
        else if (sp_args_is(&a, "--frequency-penalty", NULL)) sp_args_float(&a, -2, 2, &gp.sampling.frequency_penalty);
        else if (sp_args_is(&a, "--seed", "-s")) sp_args_u64(&a, &gp.sampling.seed);
        else if (sp_args_is(&a, "--logit-bias", NULL)) {
            if (n_bias == SP_RUN_MAX_BIAS) {
                sp_tool_fail("--logit-bias: at most %d", SP_RUN_MAX_BIAS);
                goto done;
            }
            if (sp_run_logit_bias(&a, &bias[n_bias]))
                n_bias++;
        } else if (sp_args_is(&a, "--stop", NULL)) {
            if (n_stop == SP_RUN_MAX_STOP) {
                sp_tool_fail("--stop: at most %d stop strings", SP_RUN_MAX_STOP);
                goto done;
            }
            const char *v = sp_args_value(&a);
            if (v)
                stops[n_stop++] = v;
        } else if (sp_args_is(&a, "--n", NULL)) sp_args_int(&a, 1, 16, &gp.n);
        else if (sp_args_is(&a, "--beams", NULL)) sp_args_int(&a, 1, 16, &gp.beams);
        else if (sp_args_is(&a, "--logprobs", NULL)) sp_args_int(&a, 0, SP_MAX_LOGPROBS, &gp.logprobs);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &mp.n_threads);
        else if (sp_args_is(&a, "--swa-full", NULL)) ep.swa_full = true;
        else if (sp_args_is(&a, "--mlock", NULL)) mp.use_mlock = true;
        else if (sp_args_cache_type(&a, &ep.cache_type_k, &ep.cache_type_v)) continue;
        else if (sp_args_is(&a, "--chat", NULL)) chat = true;
        else if (sp_args_is(&a, "--special", NULL)) special = true;
        else if (sp_args_is(&a, "--json", NULL)) json = true;
        else if (sp_args_is(&a, "--explain", NULL)) gp.explain = true;
        else if (sp_args_is(&a, "--ignore-eos", NULL)) gp.ignore_eos = true;
        else if (sp_args_is(&a, "--grammar", NULL)) grammar_file = sp_args_value(&a);
        else if (sp_args_is(&a, "--json-schema", NULL)) schema_file = sp_args_value(&a);
        else if (sp_args_is(&a, "--json-whitespace", NULL)) whitespace = sp_args_value(&a);
        else if (sp_args_is(&a, "--max-retries", NULL)) sp_args_int(&a, 0, 16, &gp.max_retries);
        else if (sp_tool_spec_flag(&a, &spec)) continue;
        else {
            sp_tool_fail("run: unknown option '%s' (see spindle run --help)", argv[a.i]);
            goto done;
        }
    }
    if (a.failed)
        goto done;
    if (whitespace && strcmp(whitespace, "compact") && strcmp(whitespace, "flexible")) {
        sp_tool_fail("--json-whitespace: '%s' is neither compact nor flexible", whitespace);
        goto done;
    }
    if (whitespace && !schema_file) {
        sp_tool_fail("--json-whitespace applies to --json-schema");
        goto done;
    }
    if (!mp.path) {
        sp_tool_fail("run: -m MODEL is required");
        goto done;
    }
    if (!prompt && !prompt_file) {
        sp_tool_fail("run: -p PROMPT or -f FILE is required");
        goto done;
    }
    if (prompt_file) {
        size_t len;
        file_text = sp_read_file(prompt_file, &len);
        if (!file_text) {
            sp_tool_fail("%s: cannot read", prompt_file);
            goto done;
        }
        prompt = file_text;
    }
    if (json && gp.logprobs < 0)
        gp.logprobs = 0; /* --json always reports each token's logprob */
    gp.stop = stops;
    gp.n_stop = n_stop;
    gp.sampling.logit_bias = bias;
    gp.sampling.n_logit_bias = n_bias;
    ep.n_parallel = 1;

    mp.progress = sp_progress_stderr;
    if (!sp_tool_spec_load(&spec, mp.n_threads, &ep))
        goto done;
    if (sp_model_load(&mp, &model) != SP_OK || sp_engine_create(model, &ep, &e) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    if (grammar_file || schema_file) {
        if (grammar_file && schema_file) {
            sp_tool_fail("run: --grammar and --json-schema exclude each other");
            goto done;
        }
        sp_grammar_kind kind = !schema_file ? SP_GRAMMAR_GBNF
                               : whitespace && !strcmp(whitespace, "flexible") ? SP_GRAMMAR_SCHEMA_FLEX
                                                                               : SP_GRAMMAR_SCHEMA;
        if (sp_run_grammar(grammar_file ? grammar_file : schema_file, kind, model, &grammar) != SP_OK)
            goto done;
        gp.grammar = grammar;
        gp.validate = sp_grammar_check_text;
        gp.validate_ctx = grammar;
    }
    if (chat) {
        sp_chat_msg msgs[2];
        size_t n = 0;
        if (system)
            msgs[n++] = (sp_chat_msg){.role = "system", .content = system};
        msgs[n++] = (sp_chat_msg){.role = "user", .content = prompt};
        if (sp_model_chat_tokenize(model, msgs, n, &toks, &n_toks) != SP_OK) {
            sp_tool_fail("%s", sp_error_message());
            goto done;
        }
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        sp_tool_fail("out of memory");
        goto done;
    }
    s->json = json;
    s->constrained = grammar != NULL;
    s->stream = !json && gp.n <= 1 && gp.beams <= 1 && !grammar; /* a retry would void streamed text */
    s->model = model;
    sp_status st = chat ? sp_request_submit(e, toks, n_toks, &gp, sp_run_event, s, NULL)
                        : sp_request_submit_text(e, prompt, strlen(prompt), special, &gp, sp_run_event, s, NULL);
    if (st != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    while (sp_engine_step(e) > 0)
        ;
    if (s->oom) {
        sp_tool_fail("out of memory");
        goto done;
    }
    sp_engine_timing tm;
    sp_engine_timing_get(e, &tm);
    int n_choices = gp.n > 0 ? gp.n : 1;
    if (json) {
        json_t *root;
        if (n_choices == 1) {
            root = sp_run_choice_json(s, &s->choices[0], gp.logprobs >= 0);
        } else {
            root = json_object();
            json_t *arr = json_array();
            for (int i = 0; i < n_choices; i++)
                json_array_append_new(arr, sp_run_choice_json(s, &s->choices[i], gp.logprobs >= 0));
            json_object_set_new(root, "choices", arr);
        }
        json_t *usage = json_object(), *timings = json_object();
        json_object_set_new(usage, "prompt_tokens", json_integer(s->n_prompt));
        json_object_set_new(usage, "completion_tokens", json_integer(s->n_generated));
        json_object_set_new(root, "usage", usage);
        json_object_set_new(timings, "time_to_first_token_s", json_real(tm.t_first_token_s));
        json_object_set_new(timings, "prefill_tokens_per_s", json_real(tm.t_prefill_s > 0 ? tm.n_prefill / tm.t_prefill_s : 0));
        json_object_set_new(timings, "decode_tokens_per_s", json_real(tm.t_decode_s > 0 ? tm.n_decode / tm.t_decode_s : 0));
        json_object_set_new(root, "timings", timings);
        if (ep.spec != SP_SPEC_NONE) {
            json_t *sj = json_object();
            json_object_set_new(sj, "source", json_string(sp_spec_kind_name(ep.spec)));
            json_object_set_new(sj, "drafted", json_integer(tm.n_drafted));
            json_object_set_new(sj, "accepted", json_integer(tm.n_accepted));
            json_object_set_new(root, "speculative", sj);
        }
        json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
        fputc('\n', stdout);
        json_decref(root);
    } else if (n_choices > 1) {
        for (int i = 0; i < n_choices; i++)
            printf("%s[choice %d]\n%s\n", i ? "\n" : "", i, s->choices[i].text ? s->choices[i].text : "");
    }
    fflush(stdout);
    if (s->stream)
        fputc('\n', stderr);
    else if (!json && n_choices == 1)
        fputs(s->choices[0].text ? s->choices[0].text : "", stdout);
    sp_engine_stats es;
    uint64_t rss, peak;
    sp_engine_stats_get(e, &es);
    sp_process_memory(&rss, &peak);
    fprintf(stderr,
            "prompt tokens: %u (cached %u) | generated tokens: %u | time to first token: %.1f ms | "
            "prefill: %.1f tokens/s | decode: %.1f tokens/s | peak memory: %.1f MiB | KV cache: %.1f MiB for %d tokens | "
            "stop reason: %s\n",
            s->n_prompt, s->n_cached, s->n_generated, tm.t_first_token_s * 1e3,
            tm.t_prefill_s > 0 ? tm.n_prefill / tm.t_prefill_s : 0.0,
            tm.t_decode_s > 0 && tm.n_decode > 1 ? (tm.n_decode - 1) / tm.t_decode_s : 0.0,
            /* VmHWM: getrusage's maxrss also counts the parent's memory at fork */
            peak / 1048576.0,
            es.kv_bytes / 1048576.0, sp_engine_n_ctx(e), sp_finish_name(s->choices[0].finish));
    if (ep.spec != SP_SPEC_NONE)
        fprintf(stderr, "speculative (%s): %u drafted, %u accepted (%.0f %%)\n", sp_spec_kind_name(ep.spec),
                tm.n_drafted, tm.n_accepted, tm.n_drafted ? 100.0 * tm.n_accepted / tm.n_drafted : 0.0);
    rc = 0;
    for (int i = 0; i < n_choices; i++) {
        const struct sp_run_choice *c = &s->choices[i];
        if (c->finish == SP_FINISH_ERROR) {
            sp_tool_fail("choice %d: %s", i, c->error[0] ? c->error : "generation failed");
            rc = grammar ? 3 : 2;
        } else if (grammar && !c->valid) { /* cut by -n or the context: never checked */
            sp_tool_fail("choice %d: the output is incomplete (stopped by %s before the %s was complete)", i,
                         sp_finish_name(c->finish), schema_file ? "JSON" : "grammar");
            rc = 3;
        }
    }
done:
    if (s) {
        for (int i = 0; i < 16; i++) {
            free(s->choices[i].text);
            free(s->choices[i].toks);
        }
        free(s);
    }
    sp_free(toks);
    free(file_text);
    sp_engine_free(e);
    sp_grammar_free(grammar);
    sp_tool_spec_free(&spec);
    sp_model_free(model);
    return rc;
}
