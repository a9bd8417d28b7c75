/* The public C API through libspindle.so, as an outside program uses it
 * (only spindle.h): test_api MODEL.  Built and run by tests/py/test_library.py.
 * Prints "test_api: N passed, N failed". */
#include <math.h>
#include <spindle.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define GREEDY_N 12

struct collect {
    char text[4096];
    size_t len;
    int n_final;
    sp_finish finish;
};

static void collect_event(struct collect *c, const sp_token_event *ev)
{
    if (c->len + ev->len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->len);
        c->len += ev->len;
        c->text[c->len] = '\0';
    }
    if (ev->finish != SP_FINISH_NONE) {
        c->n_final++;
        c->finish = ev->finish;
    }
}

static void on_event(void *user, const sp_token_event *ev) { collect_event(user, ev); }

/* Whether s[0..k) does not end inside a UTF-8 character. */
static bool ends_whole(const char *s, size_t k)
{
    size_t i = k, tail = 0;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--, tail++;
    if (i == 0)
        return tail == 0;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead < 0x80 ? 0 : lead >= 0xf0 ? 3 : lead >= 0xe0 ? 2 : 1;
    return tail == want;
}

static sp_model *load(const char *path, bool vocab_only, bool use_mmap)
{
    sp_model_params mp;
    sp_model *m = NULL;
    sp_model_params_default(&mp);
    mp.path = path;
    mp.vocab_only = vocab_only;
    mp.use_mmap = use_mmap;
    CHECK(sp_model_load(&mp, &m) == SP_OK, "load %s: %s", path, sp_error_message());
    return m;
}

/* Greedy GREEDY_N tokens of `prompt` in callback mode on a fresh engine. */
static void greedy(const sp_model *m, const char *prompt, struct collect *out)
{
    sp_engine *e = NULL;
    sp_gen_params gp;
    memset(out, 0, sizeof *out);
    CHECK(sp_engine_create(m, NULL, &e) == SP_OK, "engine: %s", sp_error_message());
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0;
    gp.max_tokens = GREEDY_N;
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, on_event, out, NULL) == SP_OK, "submit: %s",
          sp_error_message());
    while (sp_engine_step(e) > 0)
        ;
    sp_engine_free(e);
}

static void test_model(const sp_model *m)
{
    sp_model_info in;
    char buf[64];
    size_t len = 0;
    sp_model_info_get(m, &in);
    CHECK(in.n_vocab == sp_model_n_vocab(m) && in.n_layer > 0 && !in.vocab_only, "info %u layers", in.n_layer);
    CHECK(sp_model_meta_value(m, "general.architecture", buf, sizeof buf, &len) == SP_OK &&
              !strcmp(buf, in.architecture) && len == strlen(buf), "architecture '%s'", buf);
    CHECK(sp_model_meta_value(m, "general.architecture", buf, 2, &len) == SP_ERR_ARG && len == strlen(in.architecture),
          "a small buffer asks for %zu bytes", len);
    CHECK(sp_model_meta_value(m, "no.such.key", buf, sizeof buf, &len) == SP_ERR_ARG, "absent key");
    CHECK(sp_model_meta_key(m, 0, buf, sizeof buf, &len) == SP_OK && len > 0, "first key '%s'", buf);
    sp_tensor_info ti;
    CHECK(sp_model_tensor_get(m, 0, &ti) == SP_OK && ti.name[0] && ti.n_bytes > 0, "tensor 0 '%s'", ti.name);
    CHECK(sp_model_tensor_get(m, in.n_tensors, &ti) == SP_ERR_ARG, "tensor past the end");

    const char *text = "Héllo wörld, 日本語!";
    sp_token toks[64];
    size_t n = 0;
    CHECK(sp_model_tokenize(m, text, strlen(text), false, false, toks, 64, &n) == SP_OK && n > 3, "tokenize");
    size_t need = 0;
    CHECK(sp_model_tokenize(m, text, strlen(text), false, false, toks, 1, &need) == SP_ERR_ARG && need == n,
          "a small token buffer asks for %zu (not %zu)", need, n);
    char out[256];
    CHECK(sp_model_detokenize(m, toks, n, false, out, sizeof out, &len) == SP_OK && len == strlen(text) &&
              !memcmp(out, text, len), "detokenize gives the text back");
    CHECK(sp_model_detokenize(m, toks, n, false, out, 3, &len) == SP_ERR_ARG && len == strlen(text),
          "a small text buffer asks for %zu", len);
    sp_token bad = (sp_token)sp_model_n_vocab(m);
    CHECK(sp_model_token_to_piece(m, bad, false, out, sizeof out, &len) == SP_ERR_ARG, "bad id");

    /* the streaming detokenizer gives only whole characters, and all of them */
    sp_detokenizer *d = NULL;
    char stream[256];
    size_t sl = 0, k;
    bool whole = true;
    CHECK(sp_detokenizer_create(m, false, &d) == SP_OK, "detokenizer");
    for (size_t i = 0; i < n; i++) {
        CHECK(sp_detokenizer_push(d, toks[i], stream + sl, sizeof stream - sl, &k) == SP_OK, "push");
        whole &= ends_whole(stream + sl, k);
        sl += k;
    }
    CHECK(sp_detokenizer_flush(d, stream + sl, sizeof stream - sl, &k) == SP_OK, "flush");
    sl += k;
    CHECK(whole && sl == strlen(text) && !memcmp(stream, text, sl), "streamed text '%.*s'", (int)sl, stream);
    sp_detokenizer_free(d);

    sp_chat_msg msgs[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "Name a colour."}};
    char *chat = NULL;
    CHECK(sp_model_chat_apply(m, msgs, 2, true, &chat) == SP_OK && strstr(chat, "Name a colour."), "chat text");
    sp_free(chat);
    sp_token *ct = NULL;
    CHECK(sp_model_chat_tokenize(m, msgs, 2, &ct, &n) == SP_OK && n > 5, "chat tokens");
    sp_free(ct);
    CHECK(strlen(sp_model_chat_template(m)) > 0, "template");
}

/* Polling gives the callback's text; a request freed early, or left
 * running when its engine goes, frees its slot and memory. */
static void test_requests(const sp_model *m, const struct collect *want, const char *prompt)
{
    sp_engine *e = NULL;
    sp_gen_params gp;
    sp_request *r = NULL;
    sp_token_event ev;
    struct collect got = {0};
    CHECK(sp_engine_create(m, NULL, &e) == SP_OK, "engine: %s", sp_error_message());
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0;
    gp.max_tokens = GREEDY_N;
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, NULL) == SP_ERR_ARG,
          "polling without `out` is refused");
    gp.max_tokens = 0;
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, &r) == SP_ERR_ARG && !r,
          "max_tokens 0 is refused: %s", sp_error_message());
    gp.max_tokens = GREEDY_N;
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, &r) == SP_OK, "polled submit");
    int steps = 0;
    while (!sp_request_done(r) && steps++ < 100) {
        CHECK(sp_engine_step(e) >= 0, "step");
        while (sp_request_poll(r, &ev))
            collect_event(&got, &ev);
    }
    CHECK(got.n_final == 1 && got.finish == want->finish && !strcmp(got.text, want->text),
          "polled '%s' == callback '%s'", got.text, want->text);
    CHECK(!sp_request_poll(r, &ev), "nothing after done");
    sp_request_free(r);

    /* freed while running: the only slot (n_parallel 1) comes back */
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, &r) == SP_OK, "submit");
    sp_engine_step(e);
    sp_request_free(r);
    sp_engine_step(e);
    sp_engine_stats st;
    sp_engine_stats_get(e, &st);
    CHECK(st.n_running == 0 && st.kv_blocks_used == 0, "after free: %u running, %u blocks", st.n_running,
          st.kv_blocks_used);
    /* still running when the engine is freed: freed afterwards */
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, &r) == SP_OK, "submit");
    sp_engine_step(e);
    sp_engine_free(e);
    while (sp_request_poll(r, &ev))
        ;
    CHECK(sp_request_done(r), "a request whose engine is gone is done");
    sp_request_free(r);
}

/* Constrained output through the public API: errors with their position,
 * a request whose every choice is a sentence of the grammar, the check of
 * a finished text, and the benchmark's timings. */
static void test_grammar(const sp_model *m)
{
    sp_grammar *g = NULL;
    const char *bad = "root ::= \"a\"\nitem ::= (\"b\"";
    CHECK(sp_grammar_create(m, SP_GRAMMAR_GBNF, bad, strlen(bad), &g) == SP_ERR_ARG && !g &&
              strstr(sp_error_message(), "line 2"), "bad GBNF: %s", sp_error_message());
    const char *bad_schema = "{\"type\":\"object\",\"not\":{}}";
    CHECK(sp_grammar_create(m, SP_GRAMMAR_SCHEMA, bad_schema, strlen(bad_schema), &g) == SP_ERR_ARG && !g &&
              strstr(sp_error_message(), "not"), "bad schema: %s", sp_error_message());
    const char *gbnf = "root ::= (\"yes\" | \"no\") \" \" [0-9] [0-9]?";
    CHECK(sp_grammar_create(m, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), &g) == SP_OK && g, "GBNF: %s",
          sp_error_message());
    if (!g)
        return;
    char why[256];
    CHECK(sp_grammar_check_text(g, "yes 42", 6, why, sizeof why) == SP_OK, "accepts 'yes 42'");
    CHECK(sp_grammar_check_text(g, "yes", 3, why, sizeof why) == SP_ERR_ARG && why[0], "refuses 'yes': %s", why);

    sp_engine *e = NULL;
    sp_engine_params ep;
    sp_engine_params_default(&ep);
    ep.n_parallel = 2;
    CHECK(sp_engine_create(m, &ep, &e) == SP_OK, "engine: %s", sp_error_message());
    sp_gen_params gp;
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 1.0f;
    gp.sampling.seed = 7;
    gp.max_tokens = 16;
    gp.n = 3;
    gp.grammar = g;
    gp.validate = sp_grammar_check_text;
    gp.validate_ctx = g;
    gp.max_retries = 2;
    struct collect got[3] = {0};
    sp_request *r = NULL;
    const char *prompt = "Is the sky blue? Answer and give a number:";
    CHECK(sp_request_submit_text(e, prompt, strlen(prompt), false, &gp, NULL, NULL, &r) == SP_OK, "submit: %s",
          sp_error_message());
    bool valid[3] = {false, false, false};
    while (r && !sp_request_done(r)) {
        CHECK(sp_engine_step(e) >= 0, "step");
        sp_token_event ev;
        while (sp_request_poll(r, &ev)) {
            CHECK(ev.attempt >= 1 && ev.attempt <= 3, "attempt %d", ev.attempt);
            if (ev.retry) {
                got[ev.choice].len = 0;
                continue;
            }
            collect_event(&got[ev.choice], &ev);
            if (ev.finish != SP_FINISH_NONE)
                valid[ev.choice] = ev.valid;
        }
    }
    for (int i = 0; i < 3; i++) {
        got[i].text[got[i].len] = '\0';
        CHECK(got[i].finish == SP_FINISH_STOP && valid[i] &&
                  sp_grammar_check_text(g, got[i].text, got[i].len, why, sizeof why) == SP_OK,
              "choice %d '%s' (finish %s)", i, got[i].text, sp_finish_name(got[i].finish));
    }
    sp_request_free(r);
    /* stepping by hand: the tokens of a sentence are each in the mask of the
     * state before them, the end token only where the text is whole */
    sp_grammar *c = NULL;
    CHECK(sp_grammar_clone(g, &c) == SP_OK && c, "clone: %s", sp_error_message());
    sp_token toks[16];
    size_t nt = 0;
    CHECK(sp_model_tokenize(m, "yes 42", 6, false, false, toks, 16, &nt) == SP_OK && nt >= 2, "tokenize");
    sp_token eos = sp_model_token_eos(m);
    sp_grammar_state s = c ? sp_grammar_start(c) : SP_GRAMMAR_DEAD;
    for (size_t i = 0; c && i < nt; i++) {
        const uint64_t *mask = NULL;
        uint32_t n_allowed = 0;
        CHECK(sp_grammar_mask(c, s, &mask, &n_allowed) == SP_OK && mask && n_allowed > 0 &&
                  (mask[toks[i] / 64] >> (toks[i] % 64) & 1) &&
                  (bool)(mask[eos / 64] >> (eos % 64) & 1) == sp_grammar_accepting(c, s),
              "step %zu: token %d in the mask of %u, the end token where the text is whole", i, toks[i], n_allowed);
        CHECK(i > 0 || !sp_grammar_accepting(c, s), "the empty text is not a sentence");
        s = sp_grammar_advance(c, s, toks[i]);
        CHECK(s != SP_GRAMMAR_DEAD, "step %zu: token %d leads on", i, toks[i]);
    }
    const uint64_t *mask = NULL;
    CHECK(c && sp_grammar_accepting(c, s) && sp_grammar_mask(c, s, &mask, NULL) == SP_OK &&
              (mask[eos / 64] >> (eos % 64) & 1) && sp_grammar_advance(c, s, eos) == s,
          "'yes 42' is whole: the end token allowed");
    if (c) {
        sp_grammar_state s0 = sp_grammar_start(c);
        CHECK(sp_grammar_advance(c, s0, toks[nt - 1]) == SP_GRAMMAR_DEAD, "a digit cannot start the sentence");
        CHECK(sp_grammar_advance(c, 0x7fffff00u, toks[0]) == SP_GRAMMAR_DEAD &&
                  sp_grammar_advance(c, 0xfffffff0u, toks[0]) == SP_GRAMMAR_DEAD &&
                  sp_grammar_advance(c, s0, -1) == SP_GRAMMAR_DEAD,
              "states and tokens the grammar never made lead nowhere");
        CHECK(sp_grammar_mask(c, 0x7fffff00u, &mask, NULL) == SP_ERR_ARG, "no mask for an unknown state");
    }
    sp_grammar_free(c);
    sp_engine_free(e);
    sp_grammar_free(g);
}

/* ---- stages of one's own (sp_stage) ---- */

#define ST_CHOICES 3
#define ST_TOKENS 12

/* What the callbacks saw, over every copy of a stage's state. */
static struct stage_seen {
    int clones, frees, accepts, resets, applies;
    int min_accepted, max_accepted; /* per copy, when it was freed */
} seen;

struct stage_state {
    sp_token id;  /* the token banned or forced */
    int accepted; /* tokens this copy saw */
};

/* Drops the state's token from the candidates. */
static sp_status ban_apply(void *user, sp_token_logit *cand, size_t *n, const sp_token *hist, size_t n_hist)
{
    const struct stage_state *s = user;
    (void)hist;
    (void)n_hist;
    seen.applies++;
    for (size_t i = 0; i < *n; i++)
        if (cand[i].id == s->id) {
            cand[i] = cand[--*n];
            break;
        }
    return SP_OK;
}

/* Keeps only the state's token; fails when it is gone. */
static sp_status force_apply(void *user, sp_token_logit *cand, size_t *n, const sp_token *hist, size_t n_hist)
{
    const struct stage_state *s = user;
    (void)hist;
    (void)n_hist;
    seen.applies++;
    for (size_t i = 0; i < *n; i++)
        if (cand[i].id == s->id) {
            cand[0] = cand[i];
            *n = 1;
            return SP_OK;
        }
    return sp_error_set(SP_ERR_ARG, "token %d is not a candidate", (int)s->id);
}

static void state_accept(void *user, sp_token t)
{
    struct stage_state *s = user;
    (void)t;
    s->accepted++;
    seen.accepts++;
}

static void state_reset(void *user)
{
    (void)user;
    seen.resets++;
}

static int clone_budget = 1 << 30; /* clones that succeed before one fails */

static void *state_clone(void *user)
{
    if (clone_budget-- <= 0)
        return NULL;
    struct stage_state *c = malloc(sizeof *c);
    if (c) {
        *c = *(struct stage_state *)user;
        seen.clones++;
    }
    return c;
}

static void state_free(void *user)
{
    struct stage_state *s = user;
    seen.frees++;
    seen.min_accepted = s->accepted < seen.min_accepted ? s->accepted : seen.min_accepted;
    seen.max_accepted = s->accepted > seen.max_accepted ? s->accepted : seen.max_accepted;
    free(s);
}

static sp_status never_valid(void *ctx, const char *text, size_t len, char *why, size_t cap)
{
    (void)ctx;
    (void)text;
    (void)len;
    snprintf(why, cap, "never valid");
    return SP_ERR_ARG;
}

static void seen_clear(void)
{
    memset(&seen, 0, sizeof seen);
    seen.min_accepted = 1 << 30;
    clone_budget = 1 << 30;
}

static sp_stage stage_def(const char *name, sp_stage_point before, struct stage_state *s, bool force)
{
    sp_stage st = {name, before, s, force ? force_apply : ban_apply, state_accept, state_reset,
                   state_clone, state_free};
    return st;
}

/* The tokens of each choice, the finish reasons, the first explain. */
struct stage_run {
    sp_token tok[ST_CHOICES][ST_TOKENS];
    int n_tok[ST_CHOICES];
    sp_finish finish[ST_CHOICES];
    char error[ST_CHOICES][256];
    bool listed;           /* some top logprob was `watch` */
    sp_token watch;
    bool have_explain;
    sp_explain explain;    /* of choice 0's first token */
};

static void on_stage_event(void *user, const sp_token_event *ev)
{
    struct stage_run *run = user;
    int c = ev->choice;
    if (c < 0 || c >= ST_CHOICES)
        return;
    if (ev->finish != SP_FINISH_NONE) {
        run->finish[c] = ev->finish;
        snprintf(run->error[c], sizeof run->error[c], "%s", ev->error ? ev->error : "");
        return;
    }
    if (ev->id >= 0 && run->n_tok[c] < ST_TOKENS)
        run->tok[c][run->n_tok[c]++] = ev->id;
    for (int i = 0; ev->lp && i < ev->lp->n_top; i++)
        run->listed |= ev->lp->top[i].id == run->watch;
    if (ev->explain && c == 0 && !run->have_explain) {
        run->explain = *ev->explain;
        run->have_explain = true;
    }
}

/* Runs gp on `prompt` to the end on a fresh engine; the submit's status. */
static sp_status stage_generate(const sp_model *m, const char *prompt, const sp_gen_params *gp, struct stage_run *run)
{
    sp_engine *e = NULL;
    sp_token watch = run->watch;
    memset(run, 0, sizeof *run);
    run->watch = watch;
    CHECK(sp_engine_create(m, NULL, &e) == SP_OK, "engine: %s", sp_error_message());
    if (!e)
        return SP_ERR_NOMEM;
    sp_status st = sp_request_submit_text(e, prompt, strlen(prompt), false, gp, on_stage_event, run, NULL);
    while (st == SP_OK && sp_engine_step(e) > 0)
        ;
    sp_engine_free(e);
    return st;
}

static bool same_tokens(const struct stage_run *a, const struct stage_run *b, int n)
{
    for (int c = 0; c < n; c++)
        if (a->n_tok[c] != b->n_tok[c] || memcmp(a->tok[c], b->tok[c], sizeof(sp_token) * (size_t)a->n_tok[c]))
            return false;
    return true;
}

static bool any_token(const struct stage_run *r, int n, sp_token t)
{
    for (int c = 0; c < n; c++)
        for (int i = 0; i < r->n_tok[c]; i++)
            if (r->tok[c][i] == t)
                return true;
    return false;
}

static void test_stage_edges(const sp_model *m, sp_token x, sp_token f);

/* A ban and a force stage on SmolLM2: what they do to greedy and sampled
 * output, their per-choice copies (clone, accept, free); then the edges. */
static void test_stages(const sp_model *m)
{
    const char *prompt = "The capital of France is";
    static struct stage_run base, ban, bias, run;
    sp_gen_params gp;
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0;
    gp.max_tokens = ST_TOKENS;
    CHECK(stage_generate(m, prompt, &gp, &base) == SP_OK && base.n_tok[0] > 1, "greedy: %s", sp_error_message());
    const sp_token x = base.tok[0][0]; /* the argmax after the prompt */
    struct stage_state tmpl = {x, 0};

    /* greedy: banning the argmax changes the first token to what a logit
     * bias of -inf gives, wherever the ban runs */
    sp_logit_bias lb = {x, -INFINITY};
    gp.sampling.logit_bias = &lb;
    gp.sampling.n_logit_bias = 1;
    CHECK(stage_generate(m, prompt, &gp, &bias) == SP_OK && bias.tok[0][0] != x, "bias ban");
    gp.sampling.logit_bias = NULL;
    gp.sampling.n_logit_bias = 0;
    const sp_stage_point points[] = {SP_STAGE_LOGIT_BIAS, SP_STAGE_GRAMMAR, SP_STAGE_LOGPROBS, SP_STAGE_DRAW};
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        sp_stage st = stage_def("ban", points[i], &tmpl, false);
        gp.stages = &st;
        gp.n_stages = 1;
        seen_clear();
        CHECK(stage_generate(m, prompt, &gp, &ban) == SP_OK, "submit: %s", sp_error_message());
        CHECK(same_tokens(&ban, &bias, 1) && !any_token(&ban, 1, x), "greedy ban before point %d", (int)points[i]);
        int drawn = ban.n_tok[0] + (ban.finish[0] == SP_FINISH_STOP); /* an end token is drawn too */
        CHECK(seen.clones == 1 && seen.frees == 1 && seen.accepts == drawn && seen.applies >= seen.accepts,
              "point %d: %d clones, %d frees, %d accepts of %d tokens", (int)points[i], seen.clones, seen.frees,
              seen.accepts, ban.n_tok[0]);
    }

    /* sampled, 3 choices: a ban before the logprobs stage is a logit bias
     * of -inf, token for token, and logprobs never list the token */
    gp.sampling.temperature = 0.9f;
    gp.sampling.top_k = 0;
    gp.sampling.seed = 11;
    gp.n = ST_CHOICES;
    gp.logprobs = 5;
    gp.stages = NULL;
    gp.n_stages = 0;
    gp.sampling.logit_bias = &lb;
    gp.sampling.n_logit_bias = 1;
    bias.watch = x;
    CHECK(stage_generate(m, prompt, &gp, &bias) == SP_OK && !bias.listed, "sampled bias ban");
    gp.sampling.logit_bias = NULL;
    gp.sampling.n_logit_bias = 0;
    sp_stage st = stage_def("ban", SP_STAGE_PENALTIES, &tmpl, false);
    gp.stages = &st;
    gp.n_stages = 1;
    seen_clear();
    ban.watch = x;
    CHECK(stage_generate(m, prompt, &gp, &ban) == SP_OK, "submit: %s", sp_error_message());
    CHECK(same_tokens(&ban, &bias, ST_CHOICES) && !ban.listed && !any_token(&ban, ST_CHOICES, x),
          "sampled ban == bias ban");
    CHECK(seen.clones == ST_CHOICES && seen.frees == ST_CHOICES, "n = 3: %d clones, %d frees", seen.clones,
          seen.frees);

    /* a force stage before the filters: every token of every choice is
     * it, each choice's copy saw its own tokens; logprobs stay the model's */
    const sp_token f = base.tok[0][1]; /* a token greedy output continues with */
    struct stage_state ftmpl = {f, 0};
    st = stage_def("force", SP_STAGE_TOP_K, &ftmpl, true);
    gp.max_tokens = 8;
    seen_clear();
    run.watch = x;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_OK, "submit: %s", sp_error_message());
    bool all_f = true;
    for (int c = 0; c < ST_CHOICES; c++) {
        all_f &= run.n_tok[c] == 8 && run.finish[c] == SP_FINISH_LENGTH;
        for (int i = 0; i < run.n_tok[c]; i++)
            all_f &= run.tok[c][i] == f;
    }
    CHECK(all_f && run.listed, "forced token %d in every place, %d %d %d tokens", (int)f, run.n_tok[0], run.n_tok[1],
          run.n_tok[2]);
    CHECK(seen.clones == ST_CHOICES && seen.frees == ST_CHOICES && seen.accepts == 8 * ST_CHOICES &&
              seen.min_accepted == 8 && seen.max_accepted == 8,
          "copies: %d clones, %d frees, %d accepts (%d..%d each)", seen.clones, seen.frees, seen.accepts,
          seen.min_accepted, seen.max_accepted);

    /* without clone every choice shares the caller's state, never freed */
    struct stage_state shared = {f, 0};
    st.user = &shared;
    st.clone = NULL;
    seen_clear();
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_OK && shared.accepted == 8 * ST_CHOICES && seen.frees == 0,
          "shared state: %d accepted, %d frees", shared.accepted, seen.frees);
    test_stage_edges(m, x, f);
}

/* A failing stage, explain's column, resets on retries, and what submit
 * refuses; x is the argmax after the prompt, f a token greedy output has. */
static void test_stage_edges(const sp_model *m, sp_token x, sp_token f)
{
    const char *prompt = "The capital of France is";
    static struct stage_run run;
    struct stage_state tmpl = {x, 0}, ftmpl = {f, 0};
    sp_gen_params gp;
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0.9f;
    gp.sampling.seed = 11;

    /* a stage that fails ends its choice with the stage's message: the
     * forced token is banned by the logit bias, so it is gone after top-k */
    sp_stage st = stage_def("force", SP_STAGE_DRAW, &ftmpl, true);
    gp.stages = &st;
    gp.n_stages = 1;
    gp.max_tokens = 8;
    sp_logit_bias lb = {f, -INFINITY};
    gp.sampling.logit_bias = &lb;
    gp.sampling.n_logit_bias = 1;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_OK && run.finish[0] == SP_FINISH_ERROR &&
              run.n_tok[0] == 0 && strstr(run.error[0], "sampler stage force") &&
              strstr(run.error[0], "not a candidate"),
          "failing stage: %s (%s)", sp_finish_name(run.finish[0]), run.error[0]);
    gp.sampling.logit_bias = NULL;
    gp.sampling.n_logit_bias = 0;

    /* explain shows the stage as a column under its name */
    st = stage_def("ban x", SP_STAGE_TOP_K, &tmpl, false);
    gp.explain = true;
    gp.max_tokens = 1;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_OK && run.have_explain, "explain: %s", sp_error_message());
    const sp_explain *xp = &run.explain;
    uint32_t k = 1;
    while (k < xp->n_stages && strcmp(xp->stage[k].name, "ban x"))
        k++;
    uint32_t row = 0;
    while (row < xp->n_rows && xp->row[row] != x)
        row++;
    CHECK(k < xp->n_stages && row < xp->n_rows && xp->stage[k].kept + 1 == xp->stage[k - 1].kept &&
              xp->stage[k].p[row] < 0.0f && xp->stage[k - 1].p[row] > 0.0f && k + 1 < xp->n_stages &&
              !strcmp(xp->stage[k + 1].name, "top-k"),
          "explain column %u of %u", k, xp->n_stages);
    gp.explain = false;

    /* a retry of checked output resets each stage */
    const char *gbnf = "root ::= \"yes\" | \"no\"";
    sp_grammar *g = NULL;
    CHECK(sp_grammar_create(m, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), &g) == SP_OK, "GBNF: %s", sp_error_message());
    gp.grammar = g;
    gp.validate = never_valid;
    gp.max_retries = 2;
    gp.max_tokens = 4;
    seen_clear();
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_OK && run.finish[0] == SP_FINISH_ERROR && seen.resets == 2,
          "retries: %s, %d resets", sp_finish_name(run.finish[0]), seen.resets);
    gp.grammar = NULL;
    gp.validate = NULL;
    gp.max_retries = 0;
    sp_grammar_free(g);

    /* refused: no apply, a point past the draw, too many, beams, NULL
     * array; a clone that fails frees the copies made before it */
    sp_stage many[SP_MAX_STAGES + 1];
    for (int i = 0; i <= SP_MAX_STAGES; i++)
        many[i] = stage_def("ban", SP_STAGE_DRAW, &tmpl, false);
    st.apply = NULL;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_ARG && strstr(sp_error_message(), "stages[0]"),
          "no apply: %s", sp_error_message());
    st = stage_def("ban", (sp_stage_point)42, &tmpl, false);
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_ARG && strstr(sp_error_message(), "42"), "point 42: %s",
          sp_error_message());
    gp.stages = many;
    gp.n_stages = SP_MAX_STAGES + 1;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_ARG, "%d stages: %s", SP_MAX_STAGES + 1,
          sp_error_message());
    gp.n_stages = 1;
    gp.beams = 2;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_ARG && strstr(sp_error_message(), "beam"), "beams: %s",
          sp_error_message());
    gp.beams = 0;
    gp.stages = NULL;
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_ARG, "NULL stages: %s", sp_error_message());
    gp.stages = many;
    gp.n_stages = 2;
    gp.n = ST_CHOICES;
    seen_clear();
    clone_budget = 5; /* two copies each for choices 0 and 1, then choice 2's second fails */
    CHECK(stage_generate(m, prompt, &gp, &run) == SP_ERR_NOMEM && strstr(sp_error_message(), "clone") &&
              seen.clones == 5 && seen.frees == 5,
          "failed clone: %s; %d clones, %d frees", sp_error_message(), seen.clones, seen.frees);
}

struct argmax {
    uint32_t n;
    sp_token best;
};

static void on_logits(void *user, size_t pos, const float *logits)
{
    struct argmax *a = user;
    (void)pos;
    a->best = 0;
    for (uint32_t i = 1; i < a->n; i++)
        if (logits[i] > logits[a->best])
            a->best = (sp_token)i;
}

/* What the server builds on: its errors through sp_error_set, grammars kept
 * by text, and tool calls (the request's tools, the prompt with calls and
 * results, the calls' grammar and check, the parser of the output). */
static sp_status collect_text(void *user, const sp_toolcall_event *ev)
{
    char *buf = user;
    if (ev->kind == SP_TOOLCALL_TEXT)
        strncat(buf, ev->text, ev->len < 63 - strlen(buf) ? ev->len : 63 - strlen(buf));
    return SP_OK;
}

static void test_server_parts(const sp_model *m)
{
    CHECK(sp_error_set(SP_ERR_FULL, "queue %d", 7) == SP_ERR_FULL && !strcmp(sp_error_message(), "queue 7"),
          "error set: '%s'", sp_error_message());

    sp_grammar_cache *c = NULL;
    sp_grammar *a = NULL, *b = NULL;
    bool hit = true;
    const char *gbnf = "root ::= \"yes \" [0-9]+";
    CHECK(sp_grammar_cache_create(m, 2, &c) == SP_OK && c, "cache: %s", sp_error_message());
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), NULL, &a, &hit) == SP_OK && a && !hit,
          "first get: %s", sp_error_message());
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), NULL, &b, &hit) == SP_OK && b && b != a && hit,
          "second get is a kept copy");
    CHECK(b && sp_grammar_check_text(b, "yes 7", 5, NULL, 0) == SP_OK, "the copy checks text");
    sp_grammar_free(a);
    sp_grammar_free(b);
    b = NULL;
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), "no", &b, NULL) == SP_ERR_ARG && !b,
          "a trigger the sentences do not start with: %s", sp_error_message());
    const char *obj = sp_grammar_json_object_gbnf();
    char why[256] = "";
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, obj, strlen(obj), NULL, &b, NULL) == SP_OK &&
              sp_grammar_check_text(b, "{\"a\":1}", 7, why, sizeof why) == SP_OK,
          "json object grammar: %s %s", sp_error_message(), why);
    sp_grammar_free(b);

    char param[64];
    sp_toolcall *tc = NULL;
    CHECK(sp_toolcall_create(m, "[]", NULL, NULL, param, sizeof param, &tc) == SP_ERR_ARG && !tc &&
              !strcmp(param, "tools"), "no tools: %s (%s)", sp_error_message(), param);
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}, "
                        "\"required\": [\"tz\"]}}}]";
    CHECK(sp_toolcall_create(m, tools, "\"required\"", "false", param, sizeof param, &tc) == SP_OK && tc,
          "tools: %s", sp_error_message());
    if (!tc) {
        sp_grammar_cache_free(c);
        return;
    }
    CHECK(sp_toolcall_choice_of(tc) == SP_TOOLCALL_REQUIRED, "choice");
    char *calls = NULL;
    const char *trigger = "";
    CHECK(sp_toolcall_grammar(tc, &calls, &trigger) == SP_OK && calls && !trigger, "calls' grammar: %s",
          sp_error_message());
    CHECK(calls && sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, calls, strlen(calls), NULL, &a, NULL) == SP_OK,
          "calls' grammar compiles: %s", sp_error_message());
    sp_grammar_free(a);
    sp_free(calls);
    CHECK(sp_toolcall_check(tc, "no call", 7, why, sizeof why) == SP_ERR_ARG && why[0], "text is no call: %s", why);

    sp_chat_msg msgs[3] = {
        {.role = "user", .content = "Time in Paris?"},
        {.role = "assistant", .tool_calls = "[{\"id\": \"call_1\", \"type\": \"function\", \"function\": "
                                            "{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"Europe/Paris\\\"}\"}}]"},
        {.role = "tool", .content = "12:00", .tool_call_id = "call_1"},
    };
    sp_token *toks = NULL;
    size_t n = 0;
    CHECK(sp_toolcall_chat_tokenize(m, tc, msgs, 3, &toks, &n) == SP_OK && n > 10, "prompt with tools: %s",
          sp_error_message());
    sp_free(toks);
    msgs[1].tool_calls = "[{";
    CHECK(sp_toolcall_chat_tokenize(m, tc, msgs, 3, &toks, &n) == SP_ERR_ARG && !toks &&
              strstr(sp_error_message(), "messages[1].tool_calls"), "calls not JSON: %s", sp_error_message());
    sp_toolcall_free(tc);

    /* auto: the calls' grammar starts at a trigger; text stays text */
    CHECK(sp_toolcall_create(m, tools, "\"auto\"", NULL, param, sizeof param, &tc) == SP_OK && tc &&
              sp_toolcall_choice_of(tc) == SP_TOOLCALL_AUTO, "auto: %s", sp_error_message());
    if (!tc) {
        sp_grammar_cache_free(c);
        return;
    }
    trigger = NULL;
    CHECK(sp_toolcall_grammar(tc, &calls, &trigger) == SP_OK && trigger && trigger[0], "auto's trigger");
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, calls, strlen(calls), trigger, &a, NULL) == SP_OK &&
              sp_grammar_check_text(a, "It is noon.", 11, NULL, 0) == SP_OK,
          "lazy grammar: %s", sp_error_message());
    sp_grammar_free(a);
    sp_free(calls);
    sp_toolcall_parser *p = NULL;
    char text[64] = "";
    CHECK(sp_toolcall_parser_new(&p, tc) == SP_OK && p, "parser");
    if (p) {
        CHECK(sp_toolcall_parser_feed(p, "It is noon.", 11, true, collect_text, text) == SP_OK &&
                  !strcmp(text, "It is noon.") && sp_toolcall_parser_calls(p) == 0, "plain text: '%s'", text);
        sp_toolcall_parser_free(p);
    }
    sp_toolcall_free(tc);
    sp_grammar_cache_free(c);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_api MODEL\n");
        return 2;
    }
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", SPINDLE_VERSION_MAJOR, SPINDLE_VERSION_MINOR, SPINDLE_VERSION_PATCH);
    CHECK(!strcmp(sp_version(), v), "library %s, header %s", sp_version(), v);

    sp_model_params mp;
    sp_model *m = NULL;
    sp_model_params_default(&mp);
    CHECK(sp_model_load(&mp, &m) == SP_ERR_ARG && !m, "no path");
    mp.path = "/no/such/model.gguf";
    CHECK(sp_model_load(&mp, &m) == SP_ERR_IO && strstr(sp_error_message(), "/no/such/model.gguf"), "missing: %s",
          sp_error_message());
    mp.path = argv[1];
    mp.isa = "vax";
    CHECK(sp_model_load(&mp, &m) == SP_ERR_ARG && strstr(sp_error_message(), "vax"), "bad isa: %s",
          sp_error_message());

    const char *prompt = "The capital of France is";
    m = load(argv[1], false, true);
    if (!m)
        return sp_check_report("test_api");
    sp_model_info in;
    sp_model_info_get(m, &in);
    sp_isa_info ii;
    sp_isa_info_get(&ii);
    CHECK(!strcmp(ii.level, in.isa) && ii.quant && ii.attention && ii.ops && (!ii.packed || strcmp(ii.level, "scalar")),
          "isa paths: level %s (model %s), quant %s, packed %s", ii.level, in.isa, ii.quant,
          ii.packed ? ii.packed : "none");
    mp.isa = strcmp(in.isa, "scalar") ? "scalar" : NULL;
    sp_model *other = NULL;
    if (mp.isa) /* the first model fixed the kernels for this process */
        CHECK(sp_model_load(&mp, &other) == SP_ERR_ARG && !other && strstr(sp_error_message(), "already"),
              "other isa: %s", sp_error_message());
    test_model(m);
    struct collect want;
    greedy(m, prompt, &want);
    CHECK(want.n_final == 1 && want.len > 0 && want.finish == SP_FINISH_LENGTH, "greedy '%s'", want.text);
    test_requests(m, &want, prompt);
    test_grammar(m);
    test_stages(m);
    test_server_parts(m);

    /* the first greedy token is the argmax of the prompt's last logits */
    sp_engine *e = NULL;
    sp_token toks[64];
    size_t n;
    struct argmax am = {sp_model_n_vocab(m), -1};
    CHECK(sp_engine_create(m, NULL, &e) == SP_OK, "engine");
    CHECK(sp_model_tokenize(m, prompt, strlen(prompt), true, false, toks, 64, &n) == SP_OK, "tokenize");
    CHECK(sp_engine_logits(e, toks, n, n - 1, on_logits, &am) == SP_OK, "logits: %s", sp_error_message());
    char piece[64];
    size_t len = 0;
    sp_model_token_to_piece(m, am.best, false, piece, sizeof piece, &len);
    CHECK(len > 0 && !strncmp(want.text, piece, len), "argmax '%.*s' starts '%s'", (int)len, piece, want.text);
    sp_engine_free(e);

    /* a file read into memory instead of mapped runs the same */
    sp_model *copied = load(argv[1], false, false);
    struct collect same;
    if (copied) {
        greedy(copied, prompt, &same);
        CHECK(!strcmp(same.text, want.text), "read, not mapped: '%s'", same.text);
        sp_model_free(copied);
    }
    /* vocabulary only: tokenizer yes, engine no */
    sp_model *vocab = load(argv[1], true, true);
    if (vocab) {
        sp_model_info_get(vocab, &in);
        CHECK(in.vocab_only && in.n_vocab == sp_model_n_vocab(m), "vocab-only info");
        CHECK(sp_engine_create(vocab, NULL, &e) == SP_ERR_ARG && !e, "no engine: %s", sp_error_message());
        sp_model_free(vocab);
    }
    sp_model_free(m);
    return sp_check_report("test_api");
}
