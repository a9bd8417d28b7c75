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
    return SP_OK;
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
    }
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

static sp_status sp_append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
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
    sp_status st = sp_append(out, len, cap, "data: ", 6);
    if (st == SP_OK)
        st = sp_append(out, len, cap, s, strlen(s));
    if (st == SP_OK)
        st = sp_append(out, len, cap, "\n\n", 2);
    free(s);
    return st;
}

static sp_status sp_append_chunk(json_t *chunk, char **out, size_t *len, size_t *cap)
{
    return sp_append_event(sp_json_dump_free(chunk), out, len, cap);
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
static sp_status sp_stream_choice(struct sp_resp *r, int choice, const char *text, size_t n, json_t *call,
                                  json_t *lp, json_t *xp, const char *finish, char **out, size_t *len,
                                  size_t *cap)
{
    struct sp_choice_acc *a = &r->acc[choice];
    if (r->hold && !finish) {
        out = &a->held;
        len = &a->n_held;
        cap = &a->cap_held;
    } else if (r->hold && a->n_held) {
        sp_status st = sp_append(out, len, cap, a->held, a->n_held);
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
        } else if (n || !finish) {
            json_object_set_new(delta, "content", sp_json_text(text, n));
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
static json_t *sp_call_delta(const struct sp_toolcall_event *ev)
{
    json_t *c = json_object(), *fn = json_object();
    json_object_set_new(c, "index", json_integer(ev->index));
    if (ev->kind == SP_TOOLCALL_CALL) {
        json_object_set_new(c, "id", json_string(ev->id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(fn, "name", sp_json_text(ev->text, ev->len));
        json_object_set_new(fn, "arguments", json_string(""));
    } else {
        json_object_set_new(fn, "arguments", sp_json_text(ev->text, ev->len));
    }
    json_object_set_new(c, "function", fn);
    return c;
}

struct sp_stream_tools {
    struct sp_resp *r;
    int choice;
    json_t *lp, *xp;    /* the token's logprobs and explain record, for the first chunk it makes */
    char **out;
    size_t *len, *cap;
};

static sp_status sp_stream_tool_event(void *user, const struct sp_toolcall_event *ev)
{
    struct sp_stream_tools *t = user;
    json_t *lp = t->lp, *xp = t->xp;
    t->lp = t->xp = NULL;
    if (ev->kind == SP_TOOLCALL_TEXT)
        return sp_stream_choice(t->r, t->choice, ev->text, ev->len, NULL, lp, xp, NULL, t->out, t->len, t->cap);
    return sp_stream_choice(t->r, t->choice, "", 0, sp_call_delta(ev), lp, xp, NULL, t->out, t->len, t->cap);
}

sp_status sp_resp_stream_events(struct sp_resp *r, const struct sp_job_buf *b, char **out,
                                size_t *len, size_t *cap)
{
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
        if (a->tp) { /* content and calls as the parser reads them */
            struct sp_stream_tools t = {r, e->choice, lp, xp, out, len, cap};
            st = sp_toolcall_parser_feed(a->tp, b->text + e->text_off, e->text_len, e->finish != SP_FINISH_NONE,
                                         sp_stream_tool_event, &t);
            if (st == SP_OK && (t.lp || t.xp)) /* no chunk took the logprobs or explain record */
                st = sp_stream_choice(r, e->choice, "", 0, NULL, t.lp, t.xp, NULL, out, len, cap);
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
        st = sp_stream_choice(r, e->choice, a->tp ? "" : b->text + e->text_off, a->tp ? 0 : e->text_len, NULL, lp,
                              xp, finish, out, len, cap);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

sp_status sp_resp_stream_end(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    sp_status st = SP_OK;
    /* Choices the engine never finished (the job timed out in the queue). */
    for (int c = 0; c < r->n_choices && st == SP_OK; c++) {
        if (r->acc[c].finished)
            continue;
        r->acc[c].finished = true;
        r->acc[c].finish = SP_FINISH_LENGTH;
        st = sp_stream_choice(r, c, "", 0, NULL, NULL, NULL, "length", out, len, cap);
    }
    if (st == SP_OK && r->api->include_usage) {
        json_t *chunk = sp_chunk_base(r);
        json_object_set_new(chunk, "choices", json_array());
        json_object_set_new(chunk, "usage", sp_api_usage_json(&r->usage));
        st = sp_append_chunk(chunk, out, len, cap);
    }
    if (st == SP_OK)
        st = sp_append(out, len, cap, "data: [DONE]\n\n", 14);
    return st;
}

sp_status sp_resp_stream_error(const struct sp_api_error *err, char **out, size_t *len,
                               size_t *cap)
{
    return sp_append_event(sp_api_error_body(err), out, len, cap);
}

/* Non-streaming: content text and tool_calls[] as the parser reads them. */
static sp_status sp_collect_tool_event(void *user, const struct sp_toolcall_event *ev)
{
    struct sp_choice_acc *a = user;
    if (ev->kind == SP_TOOLCALL_TEXT)
        return sp_append(&a->text, &a->len, &a->cap, ev->text, ev->len);
    if (ev->kind == SP_TOOLCALL_CALL) {
        json_t *c = json_object(), *fn = json_object();
        json_object_set_new(c, "id", json_string(ev->id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(fn, "name", sp_json_text(ev->text, ev->len));
        json_object_set_new(fn, "arguments", json_string(""));
        json_object_set_new(c, "function", fn);
        return json_array_append_new(a->calls, c) ? SP_ERR_NOMEM : SP_OK;
    }
    json_t *fn = json_object_get(json_array_get(a->calls, (size_t)ev->index), "function");
    json_t *args = json_object_get(fn, "arguments");
    if (!args)
        return SP_OK;
    size_t n = json_string_length(args);
    char *s = malloc(n + ev->len + 1);
    if (!s)
        return SP_ERR_NOMEM;
    memcpy(s, json_string_value(args), n);
    memcpy(s + n, ev->text, ev->len);
    s[n + ev->len] = '\0';
    json_object_set_new(fn, "arguments", sp_json_text(s, n + ev->len));
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
        if (e->has_lp && e->id >= 0 && r->api->logprobs >= 0) {
            if (r->api->kind == SP_API_CHAT) {
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
        if (a->tp) {
            if (sp_toolcall_parser_feed(a->tp, b->text + e->text_off, e->text_len, e->finish != SP_FINISH_NONE,
                                        sp_collect_tool_event, a) != SP_OK)
                return SP_ERR_NOMEM;
        } else if (sp_append(&a->text, &a->len, &a->cap, b->text + e->text_off, e->text_len) != SP_OK) {
            return SP_ERR_NOMEM;
        }
    }
    return SP_OK;
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
