/* Response bodies: whole completions and Server-Sent Event chunks, in the
 * shapes of OpenAI's /v1/completions and /v1/chat/completions.
 *
 * Streams: one `data: {...}\n\n` chunk per token event that carries text, a
 * finish reason, logprobs or an explain record (the `explain` extension,
 * docs/server-api.md); then, only when stream_options.include_usage
 * was set, a chunk with empty choices and the usage; then `data: [DONE]`.
 * A request cut short by its deadline ends with finish_reason "length" and a
 * top-level "note" object saying so (not "error", which clients would raise
 * on, discarding the text they already have).  A stream the server itself
 * cannot finish (shut down mid-stream) does end in an "error" event and no
 * [DONE]: the answer is incomplete and the client must know. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/dialect.h"

struct sp_choice_acc {
    char *text;
    size_t len, cap;
    json_t *lp;             /* non-streaming logprobs being built, or NULL */
    json_t *xp;             /* non-streaming explain records, or NULL */
    enum sp_finish finish;
    bool finished;
    bool role_sent;
    bool echo_sent;         /* streaming with echo: the prompt's text went out */
    uint32_t n_prompt, n_cached; /* of this choice's prompt */
    uint32_t n_generated;
    int attempts;           /* constrained output: attempts used */
    bool valid;
    char *error;            /* the choice ended in error: why (malloc'd) */
    char *held;             /* streaming with retries: chunks of the current attempt */
    size_t n_held, cap_held;
    struct sp_toolcall_parser *tp; /* tools: the text read into content and calls */
    json_t *calls;          /* non-streaming: the tool_calls being built */
    struct sp_think think;  /* reasoning between <think> tags (reasoning.c) */
    char *reasoning;        /* non-streaming: the reasoning text */
    size_t n_reasoning, cap_reasoning;
    /* with stop strings: the generated tokens' text and how much of it was
     * released, to tell which stop string ended the choice */
    char *raw;
    size_t n_raw, cap_raw, n_released;
    const char *stop_seq;   /* the stop string that ended it (into api->stop), or NULL */
};

static const char *sp_finish_reason(const struct sp_choice_acc *a, enum sp_finish f)
{
    if (f == SP_FINISH_STOP && a->tp && sp_toolcall_parser_calls(a->tp) > 0)
        return "tool_calls";
    return f == SP_FINISH_STOP ? "stop" : "length";
}

sp_status sp_resp_init(struct sp_resp *r, const struct sp_api_request *api,
                       const sp_model *served, const char *model, const struct sp_resp_ops *ops)
{
    memset(r, 0, sizeof *r);
    r->api = api;
    r->ops = ops;
    r->served = served;
    r->model = api->model ? api->model : model;
    r->created = (long long)time(NULL);
    r->n_choices = (api->gp.n > 0 ? api->gp.n : 1) * (int)(api->n_batch > 0 ? api->n_batch : 1);
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        rnd = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)r << 16);
    snprintf(r->id, sizeof r->id, "%s-%016llx", api->kind == SP_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)rnd);
    r->usage.prompt_tokens = (uint32_t)api->n_prompt;
    r->hold = api->stream && api->grammar && api->gp.max_retries > 0;
    r->acc = calloc((size_t)r->n_choices, sizeof *r->acc);
    if (!r->acc)
        return SP_ERR_NOMEM;
    for (int i = 0; api->tools && sp_toolcall_choice_of(api->tools) != SP_TOOLCALL_NONE && i < r->n_choices; i++)
        if (sp_toolcall_parser_new(&r->acc[i].tp, api->tools) != SP_OK ||
            (!api->stream && !(r->acc[i].calls = json_array())))
            return SP_ERR_NOMEM;
    for (int i = 0; i < r->n_choices; i++)
        sp_think_init(&r->acc[i].think, (enum sp_think_mode)api->think);
    return ops && ops->init ? ops->init(r) : SP_OK;
}

void sp_resp_free(struct sp_resp *r)
{
    for (int i = 0; r->acc && i < r->n_choices; i++) {
        free(r->acc[i].text);
        free(r->acc[i].error);
        free(r->acc[i].held);
        json_decref(r->acc[i].lp);
        json_decref(r->acc[i].xp);
        sp_toolcall_parser_free(r->acc[i].tp);
        json_decref(r->acc[i].calls);
        free(r->acc[i].reasoning);
        free(r->acc[i].raw);
    }
    if (r->ops && r->ops->free)
        r->ops->free(r);
    free(r->acc);
    memset(r, 0, sizeof *r);
}

/* The text of one token for logprobs (JSON string, bytes array). */
static json_t *sp_token_json(const sp_model *m, sp_token id, json_t **bytes)
{
    char small[128] = {0};
    char *buf = small;
    size_t n = 0;
    sp_status st = m ? sp_model_token_to_piece(m, id, false, buf, sizeof small, &n) : SP_ERR_ARG;
    if (st == SP_ERR_ARG && n > sizeof small) {
        buf = malloc(n);
        if (!buf)
            return NULL;
        st = sp_model_token_to_piece(m, id, false, buf, n, &n);
    }
    if (st != SP_OK)
        n = 0;
    json_t *s = sp_json_text(buf, n);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    if (buf != small)
        free(buf);
    return s;
}

/* Completions logprobs for one token, appended to the four arrays of lp
 * (created on first use). */
static void sp_lp_completion_add(struct sp_resp *r, json_t *lp, const struct sp_job_event *e,
                                 size_t text_offset)
{
    json_t *top = json_object();
    for (int k = 0; k < e->lp.n_top; k++) {
        json_t *t = sp_token_json(r->served, e->lp.top[k].id, NULL);
        if (t)
            json_object_set_new(top, json_string_value(t), json_real(e->lp.top[k].logprob));
        json_decref(t);
    }
    json_array_append_new(json_object_get(lp, "tokens"), sp_token_json(r->served, e->id, NULL));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(e->lp.logprob));
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)text_offset));
}

static json_t *sp_lp_completion_new(void)
{
    json_t *lp = json_object();
    json_object_set_new(lp, "tokens", json_array());
    json_object_set_new(lp, "token_logprobs", json_array());
    json_object_set_new(lp, "top_logprobs", json_array());
    json_object_set_new(lp, "text_offset", json_array());
    return lp;
}

/* Chat logprobs: one entry of choices[].logprobs.content. */
static json_t *sp_lp_chat_entry(struct sp_resp *r, const struct sp_job_event *e)
{
    json_t *bytes = NULL;
    json_t *o = json_object();
    json_object_set_new(o, "token", sp_token_json(r->served, e->id, &bytes));
    json_object_set_new(o, "logprob", json_real(e->lp.logprob));
    json_object_set_new(o, "bytes", bytes ? bytes : json_null());
    json_t *top = json_array();
    for (int k = 0; k < e->lp.n_top; k++) {
        json_t *tb = NULL;
        json_t *t = json_object();
        json_object_set_new(t, "token", sp_token_json(r->served, e->lp.top[k].id, &tb));
        json_object_set_new(t, "logprob", json_real(e->lp.top[k].logprob));
        json_object_set_new(t, "bytes", tb ? tb : json_null());
        json_array_append_new(top, t);
    }
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

/* The `explain` extension for one token (shape in docs/server-api.md): the stages
 * that ran, and for each shown candidate its probability after each stage
 * (null once removed) and the stage that removed it. */
static json_t *sp_explain_json(struct sp_resp *r, const struct sp_sampler_explain *x)
{
    json_t *stages = json_array();
    for (uint32_t k = 0; k < x->n_stages; k++) {
        const struct sp_explain_stage *st = &x->stage[k];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(st->name));
        json_object_set_new(o, "param", isnan(st->param) ? json_null() : json_real(st->param));
        json_object_set_new(o, "kept", json_integer(st->kept));
        json_array_append_new(stages, o);
    }
    json_t *cands = json_array();
    for (uint32_t i = 0; i < x->n_rows; i++) {
        json_t *o = json_object(), *p = json_array();
        const char *removed_by = NULL;
        for (uint32_t k = 0; k < x->n_stages; k++) {
            bool gone = x->stage[k].p[i] < 0.0f;
            json_array_append_new(p, gone ? json_null() : json_real(x->stage[k].p[i]));
            if (gone && !removed_by)
                removed_by = x->stage[k].name;
        }
        json_object_set_new(o, "id", json_integer(x->row[i]));
        json_object_set_new(o, "text", sp_token_json(r->served, x->row[i], NULL));
        json_object_set_new(o, "raw", json_real(x->raw[i]));
        json_object_set_new(o, "p", p);
        json_object_set_new(o, "removed_by", removed_by ? json_string(removed_by) : json_null());
        json_array_append_new(cands, o);
    }
    json_t *tok = json_object();
    json_object_set_new(tok, "id", json_integer(x->chosen));
    json_object_set_new(tok, "text", sp_token_json(r->served, x->chosen, NULL));
    json_t *o = json_object();
    json_object_set_new(o, "token", tok);
    json_object_set_new(o, "n_vocab", json_integer(x->n_vocab));
    json_object_set_new(o, "stages", stages);
    json_object_set_new(o, "candidates", cands);
    return o;
}

static const struct sp_sampler_explain *sp_event_explain(const struct sp_job_buf *b,
                                                         const struct sp_job_event *e)
{
    return e->explain >= 0 && (size_t)e->explain < b->n_xp ? &b->xp[e->explain] : NULL;
}

static json_t *sp_note(const struct sp_resp *r)
{
    char msg[160];
    snprintf(msg, sizeof msg,
             "The request reached its time limit of %g s; the output is truncated.",
             r->api->timeout_s);
    json_t *n = json_object();
    json_object_set_new(n, "type", json_string("timeout"));
    json_object_set_new(n, "message", json_string(msg));
    return n;
}

static json_t *sp_chunk_base(struct sp_resp *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(r->api->kind == SP_API_CHAT
                                                     ? "chat.completion.chunk"
                                                     : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", sp_json_text(r->model, strlen(r->model)));
    json_object_set_new(o, "system_fingerprint", json_string("spindle"));
    if (r->api->include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

sp_status sp_out_append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*out, c);
        if (!p)
            return SP_ERR_NOMEM;
        *out = p;
        *cap = c;
    }
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = '\0';
    return SP_OK;
}

/* Appends "data: <payload>\n\n"; payload is malloc'd and taken (NULL: out
 * of memory). */
static sp_status sp_append_event(char *s, char **out, size_t *len, size_t *cap)
{
    if (!s)
        return SP_ERR_NOMEM;
    sp_status st = sp_out_append(out, len, cap, "data: ", 6);
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, s, strlen(s));
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, "\n\n", 2);
    free(s);
    return st;
}

static sp_status sp_append_chunk(json_t *chunk, char **out, size_t *len, size_t *cap)
{
    return sp_append_event(sp_json_dump_free(chunk), out, len, cap);
}

sp_status sp_out_sse(const char *event, json_t *data, char **out, size_t *len, size_t *cap)
{
    char *s = sp_json_dump_free(data);
    if (!s)
        return SP_ERR_NOMEM;
    sp_status st = sp_out_append(out, len, cap, "event: ", 7);
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, event, strlen(event));
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, "\n", 1);
    return st == SP_OK ? sp_append_event(s, out, len, cap) : (free(s), st);
}

sp_status sp_out_ndjson(json_t *data, char **out, size_t *len, size_t *cap)
{
    char *s = sp_json_dump_free(data);
    if (!s)
        return SP_ERR_NOMEM;
    sp_status st = sp_out_append(out, len, cap, s, strlen(s));
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, "\n", 1);
    free(s);
    return st;
}

/* Constrained output: a retry voids the attempt's text; a final event
 * records the verdict.  Returns true for a retry event (nothing to send). */
static bool sp_track_attempt(struct sp_resp *r, const struct sp_job_buf *b, const struct sp_job_event *e)
{
    struct sp_choice_acc *a = &r->acc[e->choice];
    a->attempts = e->attempt;
    if (e->retry) {
        a->len = 0;
        a->n_held = 0;
        a->role_sent = false;
        a->echo_sent = false;
        json_decref(a->lp);
        a->lp = NULL;
        json_decref(a->xp);
        a->xp = NULL;
        if (a->tp)
            sp_toolcall_parser_reset(a->tp);
        if (a->calls)
            json_array_clear(a->calls);
        sp_think_init(&a->think, (enum sp_think_mode)r->api->think);
        a->n_reasoning = a->n_raw = a->n_released = 0;
        a->stop_seq = NULL;
        if (r->ops && r->ops->retry)
            r->ops->retry(r, e->choice);
        return true;
    }
    if (e->finish != SP_FINISH_NONE) {
        a->valid = e->valid;
        if (e->err_len && !a->error)
            a->error = strndup(b->text + e->err_off, e->err_len);
    }
    return false;
}

/* The usage over every prompt of a batch (each counted once: its choices
 * share it). */
static void sp_track_usage(struct sp_resp *r, const struct sp_job_event *e)
{
    struct sp_choice_acc *a = &r->acc[e->choice];
    int n = r->api->gp.n > 0 ? r->api->gp.n : 1;
    struct sp_choice_acc *first = &r->acc[e->choice - e->choice % n];
    first->n_prompt = e->n_prompt;
    first->n_cached = e->n_cached;
    r->usage.prompt_tokens = r->usage.cached_tokens = 0;
    for (int c = 0; c < r->n_choices; c += n) {
        r->usage.prompt_tokens += r->acc[c].n_prompt;
        r->usage.cached_tokens += r->acc[c].n_cached;
    }
    r->usage.completion_tokens -= a->n_generated;
    a->n_generated = e->n_generated;
    r->usage.completion_tokens += a->n_generated;
    if (e->finish != SP_FINISH_NONE) {
        a->finished = true;
        a->finish = e->finish;
    }
}

/* With stop strings: which one ended the choice (the generated text not
 * released at a STOP finish holds it; an end-of-generation token leaves
 * none). */
static void sp_track_stop(struct sp_resp *r, const struct sp_job_event *e)
{
    struct sp_choice_acc *a = &r->acc[e->choice];
    if (!r->api->n_stop || !r->served)
        return;
    a->n_released += e->text_len;
    char piece[256];
    size_t n = 0;
    if (e->id >= 0 && sp_model_token_to_piece(r->served, e->id, false, piece, sizeof piece, &n) == SP_OK &&
        sp_out_append(&a->raw, &a->n_raw, &a->cap_raw, piece, n) != SP_OK)
        a->n_raw = a->n_released = 0; /* out of memory: no stop_sequence */
    if (e->finish != SP_FINISH_STOP || a->n_raw <= a->n_released)
        return;
    const char *tail = a->raw + a->n_released, *best = NULL;
    size_t n_tail = a->n_raw - a->n_released;
    for (size_t i = 0; i < r->api->n_stop; i++) {
        const char *p = memmem(tail, n_tail, r->api->stop[i], strlen(r->api->stop[i]));
        if (p && (!best || p < best)) {
            best = p;
            a->stop_seq = r->api->stop[i];
        }
    }
}

/* An error object in the stream (OpenAI's clients raise it). */
static sp_status sp_stream_error(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    struct sp_api_error err;
    sp_resp_failed(r, &err);
    return sp_append_event(sp_api_error_body(&err), out, len, cap);
}

/* One streamed chunk for one choice: text, or one tool call's piece
 * (chat, `call`), optional logprobs entry, optional explain record,
 * optional finish reason.  While the choice's attempt may still be voided
 * (r->hold), chunks wait in its held buffer; the final one releases them. */
static sp_status sp_stream_choice(struct sp_resp *r, int choice, const char *text, size_t n, bool reasoning,
                                  json_t *call, json_t *lp, json_t *xp, const char *finish, char **out,
                                  size_t *len, size_t *cap)
{
    struct sp_choice_acc *a = &r->acc[choice];
    if (r->hold && !finish) {
        out = &a->held;
        len = &a->n_held;
        cap = &a->cap_held;
    } else if (r->hold && a->n_held) {
        sp_status st = sp_out_append(out, len, cap, a->held, a->n_held);
        a->n_held = 0;
        if (st != SP_OK)
            return st;
    }
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(choice));
    if (r->api->kind == SP_API_CHAT) {
        json_t *delta = json_object();
        if (!a->role_sent) {
            json_object_set_new(delta, "role", json_string("assistant"));
            a->role_sent = true;
        }
        if (call) {
            json_t *calls = json_array();
            json_array_append_new(calls, call);
            json_object_set_new(delta, "tool_calls", calls);
        } else if (n || !finish) { /* reasoning: llama-server's reasoning_content */
            json_object_set_new(delta, reasoning ? "reasoning_content" : "content", sp_json_text(text, n));
        }
        json_object_set_new(c, "delta", delta);
    } else if (r->api->echo && !a->echo_sent) { /* the prompt's text before the choice's own */
        const char *echo = r->api->echo[choice / (r->api->gp.n > 0 ? r->api->gp.n : 1)];
        size_t ne = strlen(echo);
        char *both = malloc(ne + n + 1);
        if (!both) {
            json_decref(c);
            json_decref(lp);
            json_decref(xp);
            return SP_ERR_NOMEM;
        }
        memcpy(both, echo, ne);
        memcpy(both + ne, text, n);
        json_object_set_new(c, "text", sp_json_text(both, ne + n));
        free(both);
        a->echo_sent = true;
    } else {
        json_object_set_new(c, "text", sp_json_text(text, n));
    }
    json_object_set_new(c, "logprobs", lp ? lp : json_null());
    if (xp)
        json_object_set_new(c, "explain", xp);
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *chunk = sp_chunk_base(r);
    json_t *choices = json_array();
    json_array_append_new(choices, c);
    json_object_set_new(chunk, "choices", choices);
    if (finish && r->timed_out)
        json_object_set_new(chunk, "note", sp_note(r));
    return sp_append_chunk(chunk, out, len, cap);
}

/* A tool call's piece as OpenAI streams it: the first names the call, the
 * others carry argument text. */
static json_t *sp_call_delta(const struct sp_delta *d)
{
    json_t *c = json_object(), *fn = json_object();
    json_object_set_new(c, "index", json_integer(d->index));
    if (d->kind == SP_DELTA_CALL) {
        json_object_set_new(c, "id", json_string(d->id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(fn, "name", sp_json_text(d->text, d->len));
        json_object_set_new(fn, "arguments", json_string(""));
    } else {
        json_object_set_new(fn, "arguments", sp_json_text(d->text, d->len));
    }
    json_object_set_new(c, "function", fn);
    return c;
}

/* ---- one choice's output: reasoning, then content and tool calls ---- */

typedef sp_status (*sp_delta_sink)(void *user, const struct sp_delta *d);

struct sp_feed {
    struct sp_resp *r;
    int choice;
    sp_delta_sink sink;
    void *user;
};

static sp_status sp_feed_tool(void *user, const struct sp_toolcall_event *ev)
{
    struct sp_feed *f = user;
    struct sp_delta d = {.choice = f->choice, .text = ev->text, .len = ev->len, .index = ev->index, .id = ev->id};
    d.kind = ev->kind == SP_TOOLCALL_TEXT ? SP_DELTA_TEXT : ev->kind == SP_TOOLCALL_CALL ? SP_DELTA_CALL
                                                                                         : SP_DELTA_ARGS;
    return d.kind == SP_DELTA_TEXT && !d.len ? SP_OK : f->sink(f->user, &d);
}

/* The answer's text: through the tool-call parser when the request has tools. */
static sp_status sp_feed_content(struct sp_feed *f, const char *text, size_t n, bool last)
{
    struct sp_choice_acc *a = &f->r->acc[f->choice];
    if (a->tp)
        return sp_toolcall_parser_feed(a->tp, text, n, last, sp_feed_tool, f);
    struct sp_delta d = {.kind = SP_DELTA_TEXT, .choice = f->choice, .text = text, .len = n};
    return n ? f->sink(f->user, &d) : SP_OK;
}

static sp_status sp_feed_think(void *user, bool reasoning, const char *text, size_t n)
{
    struct sp_feed *f = user;
    if (!reasoning)
        return sp_feed_content(f, text, n, false);
    struct sp_delta d = {.kind = SP_DELTA_REASONING, .choice = f->choice, .text = text, .len = n};
    return f->sink(f->user, &d);
}

/* The next piece of a choice's output as deltas for sink, in order:
 * reasoning (the template's <think> block), answer text and tool calls.
 * `last`: the output ends here. */
static sp_status sp_choice_feed(struct sp_resp *r, int choice, const char *text, size_t n, bool last,
                                sp_delta_sink sink, void *user)
{
    struct sp_feed f = {r, choice, sink, user};
    struct sp_choice_acc *a = &r->acc[choice];
    if (a->think.mode == SP_THINK_OFF)
        return sp_feed_content(&f, text, n, last);
    sp_status st = sp_think_feed(&a->think, text, n, last, sp_feed_think, &f);
    return st == SP_OK && last ? sp_feed_content(&f, "", 0, true) : st;
}

/* OpenAI's chunks: the token's logprobs and explain record go with the
 * first chunk it makes. */
struct sp_openai_sink {
    struct sp_resp *r;
    json_t *lp, *xp;
    char **out;
    size_t *len, *cap;
};

static sp_status sp_openai_delta(void *user, const struct sp_delta *d)
{
    struct sp_openai_sink *t = user;
    json_t *lp = t->lp, *xp = t->xp;
    t->lp = t->xp = NULL;
    if (d->kind == SP_DELTA_TEXT || d->kind == SP_DELTA_REASONING)
        return sp_stream_choice(t->r, d->choice, d->text, d->len, d->kind == SP_DELTA_REASONING, NULL, lp, xp,
                                NULL, t->out, t->len, t->cap);
    return sp_stream_choice(t->r, d->choice, "", 0, false, sp_call_delta(d), lp, xp, NULL, t->out, t->len,
                            t->cap);
}

/* A dialect's deltas: held while the choice's attempt may be voided. */
static sp_status sp_dialect_emit(struct sp_resp *r, const struct sp_delta *d, char **out, size_t *len, size_t *cap)
{
    struct sp_choice_acc *a = &r->acc[d->choice];
    if (r->hold && d->kind != SP_DELTA_FINISH)
        return r->ops->delta(r, d, &a->held, &a->n_held, &a->cap_held);
    if (r->hold && a->n_held) {
        sp_status st = sp_out_append(out, len, cap, a->held, a->n_held);
        a->n_held = 0;
        if (st != SP_OK)
            return st;
    }
    return r->ops->delta(r, d, out, len, cap);
}

struct sp_dialect_sink {
    struct sp_resp *r;
    json_t *lp;     /* the token's logprobs entry, until a delta takes it */
    char **out;
    size_t *len, *cap;
};

static sp_status sp_dialect_delta(void *user, const struct sp_delta *d)
{
    struct sp_dialect_sink *t = user;
    if (!t->lp)
        return sp_dialect_emit(t->r, d, t->out, t->len, t->cap);
    struct sp_delta with = *d;
    with.logprob = t->lp;
    sp_status st = sp_dialect_emit(t->r, &with, t->out, t->len, t->cap);
    json_decref(t->lp);
    t->lp = NULL;
    return st;
}

static sp_status sp_dialect_finish(struct sp_resp *r, int choice, char **out, size_t *len, size_t *cap)
{
    struct sp_choice_acc *a = &r->acc[choice];
    struct sp_delta d = {.kind = SP_DELTA_FINISH, .choice = choice,
                         .finish = a->finish == SP_FINISH_STOP ? SP_FINISH_STOP : SP_FINISH_LENGTH,
                         .tool_calls = a->tp && sp_toolcall_parser_calls(a->tp) > 0,
                         .stop_sequence = a->stop_seq};
    return sp_dialect_emit(r, &d, out, len, cap);
}

static sp_status sp_dialect_stream_events(struct sp_resp *r, const struct sp_job_buf *b, char **out, size_t *len,
                                          size_t *cap)
{
    sp_status st = SP_OK;
    if (!r->started) {
        r->started = true;
        if (r->ops->start && (st = r->ops->start(r, out, len, cap)) != SP_OK)
            return st;
    }
    struct sp_dialect_sink sink = {r, NULL, out, len, cap};
    for (size_t i = 0; i < b->n_ev && st == SP_OK; i++) {
        const struct sp_job_event *e = &b->ev[i];
        if (e->choice < 0 || e->choice >= r->n_choices)
            continue;
        struct sp_choice_acc *a = &r->acc[e->choice];
        if (a->finished || sp_track_attempt(r, b, e))
            continue;
        sp_track_usage(r, e);
        sp_track_stop(r, e);
        if (e->finish == SP_FINISH_ERROR && a->error) {
            struct sp_api_error err;
            a->n_held = 0;
            sp_resp_failed(r, &err);
            r->errored = true;
            st = r->ops->error(r, &err, out, len, cap);
            continue;
        }
        bool last = e->finish != SP_FINISH_NONE;
        if (e->has_lp && e->id >= 0 && r->api->logprobs >= 0 && !(sink.lp = sp_lp_chat_entry(r, e)))
            return SP_ERR_NOMEM;
        st = sp_choice_feed(r, e->choice, b->text + e->text_off, e->text_len, last, sp_dialect_delta, &sink);
        if (st == SP_OK && sink.lp) { /* no delta took the token's logprobs */
            struct sp_delta d = {.kind = SP_DELTA_TEXT, .choice = e->choice, .text = "", .len = 0};
            st = sp_dialect_delta(&sink, &d);
        }
        json_decref(sink.lp);
        sink.lp = NULL;
        if (st == SP_OK && last)
            st = sp_dialect_finish(r, e->choice, out, len, cap);
    }
    return st;
}

sp_status sp_resp_stream_events(struct sp_resp *r, const struct sp_job_buf *b, char **out,
                                size_t *len, size_t *cap)
{
    if (r->ops)
        return sp_dialect_stream_events(r, b, out, len, cap);
    for (size_t i = 0; i < b->n_ev; i++) {
        const struct sp_job_event *e = &b->ev[i];
        if (e->choice < 0 || e->choice >= r->n_choices)
            continue;
        struct sp_choice_acc *a = &r->acc[e->choice];
        if (a->finished || sp_track_attempt(r, b, e))
            continue;
        sp_track_usage(r, e);
        if (e->finish == SP_FINISH_ERROR && a->error) {
            a->n_held = 0;
            sp_status st = sp_stream_error(r, out, len, cap);
            if (st != SP_OK)
                return st;
            continue;
        }
        json_t *lp = NULL;
        if (e->has_lp && e->id >= 0 && r->api->logprobs >= 0) {
            if (r->api->kind == SP_API_CHAT) {
                json_t *content = json_array();
                json_array_append_new(content, sp_lp_chat_entry(r, e));
                lp = json_object();
                json_object_set_new(lp, "content", content);
            } else {
                lp = sp_lp_completion_new();
                sp_lp_completion_add(r, lp, e, a->len);
            }
        }
        a->len += e->text_len; /* the text offset of the next token */
        const struct sp_sampler_explain *x = sp_event_explain(b, e);
        json_t *xp = x ? sp_explain_json(r, x) : NULL;
        sp_status st = SP_OK;
        /* plain text goes out as it comes, with the finish in the last chunk */
        bool direct = !a->tp && a->think.mode == SP_THINK_OFF;
        if (!direct) { /* reasoning, content and calls as they are read */
            struct sp_openai_sink t = {r, lp, xp, out, len, cap};
            st = sp_choice_feed(r, e->choice, b->text + e->text_off, e->text_len, e->finish != SP_FINISH_NONE,
                                sp_openai_delta, &t);
            if (st == SP_OK && (t.lp || t.xp)) /* no chunk took the logprobs or explain record */
                st = sp_stream_choice(r, e->choice, "", 0, false, NULL, t.lp, t.xp, NULL, out, len, cap);
            else if (st != SP_OK) {
                json_decref(t.lp);
                json_decref(t.xp);
            }
            if (st != SP_OK)
                return st;
            if (e->finish == SP_FINISH_NONE)
                continue;
            lp = xp = NULL;
        }
        const char *finish = e->finish != SP_FINISH_NONE ? sp_finish_reason(a, e->finish) : NULL;
        if (!e->text_len && !lp && !xp && !finish)
            continue;
        st = sp_stream_choice(r, e->choice, direct ? b->text + e->text_off : "", direct ? e->text_len : 0, false,
                              NULL, lp, xp, finish, out, len, cap);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

sp_status sp_resp_stream_end(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    sp_status st = SP_OK;
    if (r->ops) {
        struct sp_job_buf none = {0};
        st = sp_dialect_stream_events(r, &none, out, len, cap); /* the start, if not yet sent */
        for (int c = 0; c < r->n_choices && st == SP_OK; c++) {
            if (r->acc[c].finished)
                continue;
            r->acc[c].finished = true;
            r->acc[c].finish = SP_FINISH_LENGTH;
            st = sp_dialect_finish(r, c, out, len, cap);
        }
        return st != SP_OK || r->errored ? st : r->ops->end(r, out, len, cap);
    }
    /* Choices the engine never finished (the job timed out in the queue). */
    for (int c = 0; c < r->n_choices && st == SP_OK; c++) {
        if (r->acc[c].finished)
            continue;
        r->acc[c].finished = true;
        r->acc[c].finish = SP_FINISH_LENGTH;
        st = sp_stream_choice(r, c, "", 0, false, NULL, NULL, NULL, "length", out, len, cap);
    }
    if (st == SP_OK && r->api->include_usage) {
        json_t *chunk = sp_chunk_base(r);
        json_object_set_new(chunk, "choices", json_array());
        json_object_set_new(chunk, "usage", sp_api_usage_json(&r->usage));
        st = sp_append_chunk(chunk, out, len, cap);
    }
    if (st == SP_OK)
        st = sp_out_append(out, len, cap, "data: [DONE]\n\n", 14);
    return st;
}

sp_status sp_resp_stream_error(struct sp_resp *r, const struct sp_api_error *err, char **out, size_t *len,
                               size_t *cap)
{
    if (r && r->ops) {
        struct sp_job_buf none = {0};
        sp_status st = sp_dialect_stream_events(r, &none, out, len, cap);
        r->errored = true;
        return st == SP_OK ? r->ops->error(r, err, out, len, cap) : st;
    }
    return sp_append_event(sp_api_error_body(err), out, len, cap);
}

/* Non-streaming: reasoning, content text and tool_calls[] as they are read. */
static sp_status sp_collect_delta(void *user, const struct sp_delta *d)
{
    struct sp_choice_acc *a = user;
    if (d->kind == SP_DELTA_TEXT)
        return sp_out_append(&a->text, &a->len, &a->cap, d->text, d->len);
    if (d->kind == SP_DELTA_REASONING)
        return sp_out_append(&a->reasoning, &a->n_reasoning, &a->cap_reasoning, d->text, d->len);
    if (d->kind == SP_DELTA_CALL) {
        json_t *c = json_object(), *fn = json_object();
        json_object_set_new(c, "id", json_string(d->id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(fn, "name", sp_json_text(d->text, d->len));
        json_object_set_new(fn, "arguments", json_string(""));
        json_object_set_new(c, "function", fn);
        return json_array_append_new(a->calls, c) ? SP_ERR_NOMEM : SP_OK;
    }
    json_t *fn = json_object_get(json_array_get(a->calls, (size_t)d->index), "function");
    json_t *args = json_object_get(fn, "arguments");
    if (!args)
        return SP_OK;
    size_t n = json_string_length(args);
    char *s = malloc(n + d->len + 1);
    if (!s)
        return SP_ERR_NOMEM;
    memcpy(s, json_string_value(args), n);
    memcpy(s + n, d->text, d->len);
    s[n + d->len] = '\0';
    json_object_set_new(fn, "arguments", sp_json_text(s, n + d->len));
    free(s);
    return SP_OK;
}

sp_status sp_resp_collect(struct sp_resp *r, const struct sp_job_buf *b)
{
    for (size_t i = 0; i < b->n_ev; i++) {
        const struct sp_job_event *e = &b->ev[i];
        if (e->choice < 0 || e->choice >= r->n_choices)
            continue;
        struct sp_choice_acc *a = &r->acc[e->choice];
        if (a->finished || sp_track_attempt(r, b, e))
            continue;
        sp_track_usage(r, e);
        sp_track_stop(r, e);
        if (e->has_lp && e->id >= 0 && r->api->logprobs >= 0) {
            if (r->api->kind == SP_API_CHAT || r->ops) { /* a dialect's: chat's entries */
                if (!a->lp)
                    a->lp = json_array();
                json_array_append_new(a->lp, sp_lp_chat_entry(r, e));
            } else {
                if (!a->lp)
                    a->lp = sp_lp_completion_new();
                sp_lp_completion_add(r, a->lp, e, a->len);
            }
        }
        const struct sp_sampler_explain *x = sp_event_explain(b, e);
        if (x) {
            if (!a->xp)
                a->xp = json_array();
            json_array_append_new(a->xp, sp_explain_json(r, x));
        }
        if (sp_choice_feed(r, e->choice, b->text + e->text_off, e->text_len, e->finish != SP_FINISH_NONE,
                           sp_collect_delta, a) != SP_OK)
            return SP_ERR_NOMEM;
    }
    return SP_OK;
}

void sp_resp_choice(const struct sp_resp *r, int c, struct sp_choice_view *v)
{
    const struct sp_choice_acc *a = &r->acc[c];
    v->text = a->text ? a->text : "";
    v->len = a->len;
    v->reasoning = a->reasoning ? a->reasoning : "";
    v->n_reasoning = a->n_reasoning;
    v->calls = a->calls && json_array_size(a->calls) ? a->calls : NULL;
    v->finish = a->finished && a->finish == SP_FINISH_STOP ? SP_FINISH_STOP : SP_FINISH_LENGTH;
    v->tool_calls = v->calls != NULL;
    v->stop_sequence = a->stop_seq;
    v->logprobs = r->api->logprobs >= 0 ? a->lp : NULL;
}

bool sp_resp_failed(const struct sp_resp *r, struct sp_api_error *err)
{
    for (int c = 0; c < r->n_choices; c++) {
        const struct sp_choice_acc *a = &r->acc[c];
        if (a->finished && a->finish == SP_FINISH_ERROR && a->error) {
            sp_api_fail(err, 422, "invalid_request_error", "output_validation_failed", NULL,
                        "Choice %d produced no valid output: %.300s", c, a->error);
            return true;
        }
    }
    return false;
}

char *sp_resp_body(struct sp_resp *r)
{
    if (r->ops)
        return r->ops->body(r);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(r->api->kind == SP_API_CHAT ? "chat.completion"
                                                                             : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", sp_json_text(r->model, strlen(r->model)));
    json_object_set_new(o, "system_fingerprint", json_string("spindle"));
    json_t *choices = json_array();
    for (int c = 0; c < r->n_choices; c++) {
        struct sp_choice_acc *a = &r->acc[c];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(c));
        json_t *text = sp_json_text(a->text, a->len);
        if (r->api->kind == SP_API_CHAT) {
            json_t *msg = json_object();
            bool calls = a->calls && json_array_size(a->calls);
            json_object_set_new(msg, "role", json_string("assistant"));
            if (calls && !a->len) {
                json_decref(text);
                text = json_null();
            }
            json_object_set_new(msg, "content", text);
            if (a->n_reasoning) /* llama-server's field for the template's thinking */
                json_object_set_new(msg, "reasoning_content", sp_json_text(a->reasoning, a->n_reasoning));
            if (calls)
                json_object_set(msg, "tool_calls", a->calls);
            json_object_set_new(ch, "message", msg);
            json_t *lp = json_null();
            if (r->api->chat_logprobs) {
                lp = json_object();
                json_object_set_new(lp, "content", a->lp ? json_incref(a->lp) : json_array());
            }
            json_object_set_new(ch, "logprobs", lp);
        } else {
            if (r->api->echo) { /* the prompt's text before the choice's own */
                const char *echo = r->api->echo[c / (r->api->gp.n > 0 ? r->api->gp.n : 1)];
                size_t ne = strlen(echo);
                char *both = malloc(ne + a->len + 1);
                json_decref(text);
                text = NULL;
                if (both) {
                    memcpy(both, echo, ne);
                    if (a->len)
                        memcpy(both + ne, a->text, a->len);
                    text = sp_json_text(both, ne + a->len);
                    free(both);
                }
            }
            json_object_set_new(ch, "text", text);
            json_object_set(ch, "logprobs", a->lp ? a->lp : json_null());
        }
        if (r->api->gp.explain)
            json_object_set_new(ch, "explain", a->xp ? json_incref(a->xp) : json_array());
        json_object_set_new(ch, "finish_reason",
                            json_string(a->finished ? sp_finish_reason(a, a->finish) : "length"));
        if (r->api->grammar) { /* an extension: the check's verdict (length: never valid) */
            json_object_set_new(ch, "attempts", json_integer(a->attempts ? a->attempts : 1));
            json_object_set_new(ch, "valid", json_boolean(a->valid));
        }
        json_array_append_new(choices, ch);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", sp_api_usage_json(&r->usage));
    if (r->timed_out)
        json_object_set_new(o, "note", sp_note(r));
    return sp_json_dump_free(o);
}
