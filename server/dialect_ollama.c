/* Ollama's API as a dialect (dialect.h): /api/chat, /api/generate and
 * /api/embed translated into the internal requests, answers as Ollama's
 * JSON (streams as NDJSON, one object a line, `stream` true unless the
 * request says false), errors as {"error": "message"}; /api/tags,
 * /api/show, /api/ps and /api/version describe the model served.
 *
 *   options.temperature, top_k, top_p, min_p, typical_p, repeat_penalty,
 *     repeat_last_n, presence_penalty, frequency_penalty, seed, stop     the same fields
 *   options.num_predict                max_tokens (-1, -2: until the context is full)
 *   options.num_ctx                    the request's context: at most the server's --ctx
 *                                      (more is a 400); prompt and answer must fit it
 *   options.num_keep, mirostat 0 (with its tau and eta), and the runtime
 *     options (num_thread, num_gpu, use_mmap, ...)                     labels
 *   format "json" / a JSON schema      response_format json_object / json_schema
 *   think (true, false, "low", ...)    the template's enable_thinking (and reasoning_effort)
 *   messages[].thinking (assistant)    the message's reasoning_content
 *   tools, messages[].tool_calls,      OpenAI's tools; calls get ids, a tool message answers
 *     tool messages (tool_name)        the first unanswered call of its name (else the next one)
 *   /api/generate: system, prompt      a system and a user message; raw: the prompt as it is
 *   logprobs, top_logprobs             each token's logprob and its top alternatives
 *                                      (top_logprobs needs logprobs)
 *   keep_alive                         with several models (--models-dir): how long the
 *                                      model stays loaded once idle (router.c); a
 *                                      request with no prompt (no messages) only loads
 *                                      the model, or with keep_alive 0 unloads it; with
 *                                      one model a label (it stays loaded)
 *   /api/embeddings (the older route): prompt -> {"embedding": [...]}
 * A model name may carry Ollama's ":latest" tag.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/dialect.h"

#define SP_API_INVALID "invalid_request_error"

/* The version of Ollama's API whose shapes these routes speak. */
#define SP_OLLAMA_API_VERSION "0.12.0"

static const char *const sp_ollama_names[][2] = {
    {"max_tokens", "options.num_predict"}, {"temperature", "options.temperature"}, {"top_k", "options.top_k"},
    {"top_p", "options.top_p"}, {"min_p", "options.min_p"}, {"typical_p", "options.typical_p"},
    {"repeat_penalty", "options.repeat_penalty"}, {"repeat_last_n", "options.repeat_last_n"},
    {"presence_penalty", "options.presence_penalty"}, {"frequency_penalty", "options.frequency_penalty"},
    {"seed", "options.seed"}, {"stop", "options.stop"}, {"mirostat", "options.mirostat"},
    {"response_format", "format"},
};

static const struct sp_field_rule sp_ollama_chat_fields[] = {
    {"model", SP_FIELD_READ}, {"messages", SP_FIELD_READ}, {"tools", SP_FIELD_READ}, {"format", SP_FIELD_READ},
    {"options", SP_FIELD_READ}, {"stream", SP_FIELD_READ}, {"think", SP_FIELD_READ}, {"logprobs", SP_FIELD_READ},
    {"top_logprobs", SP_FIELD_READ}, {"keep_alive", SP_FIELD_LABEL},
};

static const struct sp_field_rule sp_ollama_generate_fields[] = {
    {"model", SP_FIELD_READ}, {"prompt", SP_FIELD_READ}, {"system", SP_FIELD_READ}, {"raw", SP_FIELD_READ},
    {"format", SP_FIELD_READ}, {"options", SP_FIELD_READ}, {"stream", SP_FIELD_READ}, {"think", SP_FIELD_READ},
    {"images", SP_FIELD_READ}, {"suffix", SP_FIELD_READ}, {"template", SP_FIELD_READ}, {"context", SP_FIELD_READ},
    {"logprobs", SP_FIELD_READ}, {"top_logprobs", SP_FIELD_READ}, {"keep_alive", SP_FIELD_LABEL},
};

/* options: passed on under the same name, or labels. */
static const char *const sp_ollama_same[] = {
    "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n", "presence_penalty",
    "frequency_penalty", "seed", "stop", "mirostat", "mirostat_tau", "mirostat_eta",
};
static const struct sp_field_rule sp_ollama_options[] = {
    {"temperature", SP_FIELD_READ}, {"top_k", SP_FIELD_READ}, {"top_p", SP_FIELD_READ}, {"min_p", SP_FIELD_READ},
    {"typical_p", SP_FIELD_READ}, {"repeat_penalty", SP_FIELD_READ}, {"repeat_last_n", SP_FIELD_READ},
    {"presence_penalty", SP_FIELD_READ}, {"frequency_penalty", SP_FIELD_READ}, {"seed", SP_FIELD_READ},
    {"stop", SP_FIELD_READ}, {"mirostat", SP_FIELD_READ}, {"mirostat_tau", SP_FIELD_READ},
    {"mirostat_eta", SP_FIELD_READ}, {"num_predict", SP_FIELD_READ}, {"num_ctx", SP_FIELD_READ},
    {"num_keep", SP_FIELD_LABEL}, {"penalize_newline", SP_FIELD_LABEL}, {"numa", SP_FIELD_LABEL},
    {"num_batch", SP_FIELD_LABEL}, {"num_gpu", SP_FIELD_LABEL}, {"main_gpu", SP_FIELD_LABEL},
    {"low_vram", SP_FIELD_LABEL}, {"logits_all", SP_FIELD_LABEL}, {"vocab_only", SP_FIELD_LABEL},
    {"use_mmap", SP_FIELD_LABEL}, {"use_mlock", SP_FIELD_LABEL}, {"embedding_only", SP_FIELD_LABEL},
    {"num_thread", SP_FIELD_LABEL}, {"tfs_z", SP_FIELD_UNSUPPORTED},
};

static sp_status sp_bad(struct sp_api_error *err, const char *param, const char *msg)
{
    return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param, "Invalid '%s': %s", param, msg);
}

/* The model's name without Ollama's ":latest" tag, into oai.model. */
static sp_status sp_ollama_model(const json_t *root, json_t *oai, struct sp_api_error *err)
{
    const char *name = json_string_value(json_object_get(root, "model"));
    if (!name || !name[0])
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "model", "model is required");
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ":latest"))
        n -= 7;
    json_object_set_new(oai, "model", json_stringn(name, n));
    return SP_OK;
}

/* logprobs (bool) and top_logprobs (0..20, only with logprobs) into oai:
 * chat's logprobs/top_logprobs, or for a raw prompt (completions) the
 * number of alternatives as completions' logprobs. */
static sp_status sp_ollama_logprobs(const json_t *root, json_t *oai, bool raw, struct sp_api_error *err)
{
    json_t *lp = json_object_get(root, "logprobs"), *top = json_object_get(root, "top_logprobs");
    bool on = json_is_true(lp), has_top = top && !json_is_null(top);
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return sp_bad(err, "logprobs", "expected a boolean.");
    if (has_top && (!json_is_integer(top) || json_integer_value(top) < 0 ||
                    json_integer_value(top) > SP_MAX_LOGPROBS))
        return sp_bad(err, "top_logprobs", "expected an integer from 0 to 20.");
    if (has_top && !on)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "top_logprobs",
                           "'top_logprobs' requires 'logprobs' to be true.");
    if (!on)
        return SP_OK;
    if (raw) {
        json_object_set_new(oai, "logprobs", json_integer(has_top ? json_integer_value(top) : 0));
    } else {
        json_object_set_new(oai, "logprobs", json_true());
        if (has_top)
            json_object_set(oai, "top_logprobs", top);
    }
    return SP_OK;
}

/* options, format, think, logprobs and the extensions into oai; *num_ctx
 * the request's context (0: none given); raw: a raw /api/generate prompt. */
static sp_status sp_ollama_common(const json_t *root, json_t *oai, bool raw, json_int_t *num_ctx,
                                  struct sp_api_error *err)
{
    json_t *opt = json_object_get(root, "options"), *fmt = json_object_get(root, "format");
    json_t *think = json_object_get(root, "think");
    *num_ctx = 0;
    sp_dialect_copy_extensions(oai, root);
    sp_status st = sp_ollama_logprobs(root, oai, raw, err);
    if (st != SP_OK)
        return st;
    if (opt && !json_is_null(opt)) {
        if (!json_is_object(opt))
            return sp_bad(err, "options", "expected an object.");
        st = sp_dialect_check_fields(opt, sp_ollama_options,
                                               sizeof sp_ollama_options / sizeof sp_ollama_options[0], "options.",
                                               err);
        if (st != SP_OK)
            return st;
        for (size_t i = 0; i < sizeof sp_ollama_same / sizeof sp_ollama_same[0]; i++) {
            json_t *v = json_object_get(opt, sp_ollama_same[i]);
            if (v && !json_is_null(v))
                json_object_set(oai, sp_ollama_same[i], v);
        }
        json_t *np = json_object_get(opt, "num_predict"), *nc = json_object_get(opt, "num_ctx");
        if (np && !json_is_null(np)) {
            if (!json_is_integer(np) || json_integer_value(np) == 0 || json_integer_value(np) < -2)
                return sp_bad(err, "options.num_predict", "expected a positive integer, or -1 (no limit).");
            if (json_integer_value(np) > 0)
                json_object_set(oai, "max_tokens", np);
        }
        if (nc && !json_is_null(nc)) {
            if (!json_is_integer(nc) || json_integer_value(nc) < 1)
                return sp_bad(err, "options.num_ctx", "expected a positive integer.");
            *num_ctx = json_integer_value(nc);
        }
    }
    if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "json")) {
        json_t *rf = json_object();
        json_object_set_new(rf, "type", json_string("json_object"));
        json_object_set_new(oai, "response_format", rf);
    } else if (json_is_object(fmt)) {
        json_t *rf = json_object(), *js = json_object();
        json_object_set_new(js, "name", json_string("format"));
        json_object_set(js, "schema", fmt);
        json_object_set_new(rf, "type", json_string("json_schema"));
        json_object_set_new(rf, "json_schema", js);
        json_object_set_new(oai, "response_format", rf);
    } else if (fmt && !json_is_null(fmt) && !(json_is_string(fmt) && !json_string_value(fmt)[0])) {
        return sp_bad(err, "format", "expected \"json\" or a JSON schema (an object).");
    }
    if (think && !json_is_null(think)) {
        json_t *kw = json_object_get(oai, "chat_template_kwargs");
        if (!json_is_object(kw)) {
            kw = json_object();
            json_object_set_new(oai, "chat_template_kwargs", kw);
        }
        if (json_is_boolean(think))
            json_object_set(kw, "enable_thinking", think);
        else if (json_is_string(think)) {
            json_object_set_new(kw, "enable_thinking", json_true());
            json_object_set(kw, "reasoning_effort", think);
        } else
            return sp_bad(err, "think", "expected a boolean or \"low\", \"medium\", \"high\".");
    }
    json_t *stream = json_object_get(root, "stream");
    json_object_set_new(oai, "stream", json_boolean(!json_is_false(stream))); /* Ollama streams by default */
    return SP_OK;
}

/* messages[i].tool_calls into OpenAI's form, with ids; the calls not yet
 * answered are remembered (name, id) in pending. */
static sp_status sp_ollama_calls(const json_t *calls, size_t i, json_t *out, json_t *pending, struct sp_api_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls))
        return sp_bad(err, param, "expected a list of calls.");
    for (size_t j = 0; j < json_array_size(calls); j++) {
        json_t *fn = json_object_get(json_array_get(calls, j), "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || (args && !json_is_object(args)))
            return sp_bad(err, param, "a call is {\"function\": {\"name\", \"arguments\": {...}}}.");
        char id[48], *text = json_dumps(args ? args : json_object(), JSON_COMPACT);
        snprintf(id, sizeof id, "call_%zu_%zu", i, j);
        json_t *c = json_object(), *f = json_object(), *p = json_object();
        json_object_set(f, "name", name);
        json_object_set_new(f, "arguments", json_string(text ? text : "{}"));
        free(text);
        json_object_set_new(c, "id", json_string(id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", f);
        json_array_append_new(out, c);
        json_object_set(p, "name", name);
        json_object_set_new(p, "id", json_string(id));
        json_array_append_new(pending, p);
    }
    return SP_OK;
}

/* A tool message's call: the first pending one of its tool_name, else the first. */
static json_t *sp_ollama_answered(json_t *pending, const char *name)
{
    size_t k = 0;
    for (size_t j = 0; name && j < json_array_size(pending); j++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(pending, j), "name")), name)) {
            k = j;
            break;
        }
    json_t *id = json_incref(json_object_get(json_array_get(pending, k), "id"));
    json_array_remove(pending, k);
    return id;
}

static sp_status sp_ollama_messages(const json_t *m, json_t *msgs, struct sp_api_error *err)
{
    static const struct sp_field_rule fields[] = {
        {"role", SP_FIELD_READ}, {"content", SP_FIELD_READ}, {"images", SP_FIELD_READ},
        {"tool_calls", SP_FIELD_READ}, {"thinking", SP_FIELD_READ}, {"tool_name", SP_FIELD_READ},
    };
    if (!json_is_array(m))
        return sp_bad(err, "messages", "expected a list of messages.");
    json_t *pending = json_array();
    sp_status st = SP_OK;
    for (size_t i = 0; i < json_array_size(m) && st == SP_OK; i++) {
        json_t *msg = json_array_get(m, i), *images = json_object_get(msg, "images");
        char prefix[48];
        snprintf(prefix, sizeof prefix, "messages[%zu].", i);
        if (!json_is_object(msg) || (st = sp_dialect_check_fields(msg, fields, sizeof fields / sizeof fields[0],
                                                                  prefix, err)) != SP_OK) {
            st = st == SP_OK ? sp_bad(err, "messages", "expected objects.") : st;
            break;
        }
        if (json_array_size(images)) {
            snprintf(prefix, sizeof prefix, "messages[%zu].images", i);
            st = sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", prefix,
                             "Images are not supported by this server's model.");
            break;
        }
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *o = json_object(), *content = json_object_get(msg, "content"), *calls = json_object_get(msg, "tool_calls");
        json_object_set(o, "role", json_object_get(msg, "role"));
        if (content && !json_is_null(content))
            json_object_set(o, "content", content);
        else
            json_object_set_new(o, "content", json_string(""));
        json_t *thinking = json_object_get(msg, "thinking");
        if (role && !strcmp(role, "assistant") && json_is_string(thinking) && json_string_length(thinking))
            json_object_set(o, "reasoning_content", thinking); /* templates that keep it read it */
        if (calls && !json_is_null(calls) && json_array_size(calls)) {
            json_t *oc = json_array();
            json_object_set_new(o, "tool_calls", oc);
            st = sp_ollama_calls(calls, i, oc, pending, err);
        }
        if (st == SP_OK && role && !strcmp(role, "tool")) {
            json_t *id = sp_ollama_answered(pending, json_string_value(json_object_get(msg, "tool_name")));
            if (!id) {
                snprintf(prefix, sizeof prefix, "messages[%zu]", i);
                st = sp_bad(err, prefix, "a tool message answers a call of an earlier assistant message.");
            }
            json_object_set_new(o, "tool_call_id", id ? id : json_null());
            json_t *name = json_object_get(msg, "tool_name");
            if (json_is_string(name))
                json_object_set(o, "name", name);
        }
        json_array_append_new(msgs, o);
    }
    json_decref(pending);
    return st;
}

/* After the parser: the request's own context (options.num_ctx), at most
 * the server's; prompt and answer must fit in it. */
static sp_status sp_ollama_context(struct sp_api_request *r, json_int_t num_ctx, const struct sp_api_limits *lim,
                                   struct sp_api_error *err)
{
    if (!num_ctx)
        return SP_OK;
    if (num_ctx > lim->n_ctx)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "options.num_ctx",
                           "Invalid 'options.num_ctx': %lld is more than this server's context of %d tokens "
                           "(spindle serve --ctx).", (long long)num_ctx, lim->n_ctx);
    if (r->n_prompt + 1 > (size_t)num_ctx)
        return sp_api_fail(err, 400, SP_API_INVALID, "context_length_exceeded", "options.num_ctx",
                           "The prompt has %zu tokens; options.num_ctx is %lld.", r->n_prompt, (long long)num_ctx);
    int32_t room = (int32_t)(num_ctx - (json_int_t)r->n_prompt);
    if (r->gp.max_tokens < 0 || r->gp.max_tokens > room)
        r->gp.max_tokens = room;
    return SP_OK;
}

static sp_status sp_ollama_translate(const json_t *root, bool generate, json_t *oai, enum sp_api_kind *kind,
                                     json_int_t *num_ctx, struct sp_api_error *err)
{
    sp_status st = generate ? sp_dialect_check_fields(root, sp_ollama_generate_fields,
                                                      sizeof sp_ollama_generate_fields / sizeof sp_ollama_generate_fields[0],
                                                      "", err)
                            : sp_dialect_check_fields(root, sp_ollama_chat_fields,
                                                      sizeof sp_ollama_chat_fields / sizeof sp_ollama_chat_fields[0], "",
                                                      err);
    bool raw = generate && json_is_true(json_object_get(root, "raw"));
    if (st != SP_OK || (st = sp_ollama_model(root, oai, err)) != SP_OK ||
        (st = sp_ollama_common(root, oai, raw, num_ctx, err)) != SP_OK)
        return st;
    *kind = SP_API_CHAT;
    if (!generate) {
        json_t *tools = json_object_get(root, "tools"), *msgs = json_array();
        if (json_array_size(tools))
            json_object_set(oai, "tools", tools);
        json_object_set_new(oai, "messages", msgs);
        return sp_ollama_messages(json_object_get(root, "messages"), msgs, err);
    }
    static const char *const refused[] = {"suffix", "template", "images", "context"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        json_t *v = json_object_get(root, refused[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_value(v)[0]) &&
            !(json_is_array(v) && !json_array_size(v)))
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", refused[i],
                               "'%s' is not supported by this server.", refused[i]);
    }
    bool bad = false;
    const char *prompt = sp_dialect_string(root, "prompt", "prompt", &bad, err);
    const char *system = bad ? NULL : sp_dialect_string(root, "system", "system", &bad, err);
    if (bad)
        return SP_ERR_ARG;
    if (!prompt || !prompt[0])
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "prompt",
                           "'prompt' is required (the model is always loaded: there is nothing to load).");
    if (raw) {
        if (system)
            return sp_bad(err, "system", "a raw prompt has no template to put a system message in.");
        *kind = SP_API_COMPLETIONS;
        json_object_set_new(oai, "prompt", json_string(prompt));
        return SP_OK;
    }
    json_t *msgs = json_array(), *u = json_object();
    if (system) {
        json_t *s = json_object();
        json_object_set_new(s, "role", json_string("system"));
        json_object_set_new(s, "content", json_string(system));
        json_array_append_new(msgs, s);
    }
    json_object_set_new(u, "role", json_string("user"));
    json_object_set_new(u, "content", json_string(prompt));
    json_array_append_new(msgs, u);
    json_object_set_new(oai, "messages", msgs);
    return SP_OK;
}

/* The route's kind says which: SP_API_CHAT /api/chat, SP_API_COMPLETIONS /api/generate. */
static sp_status sp_ollama_parse(struct sp_api_request *out, enum sp_api_kind route, const char *body, size_t len,
                                 size_t item, const sp_model *model, const struct sp_api_limits *lim,
                                 struct sp_api_error *err)
{
    (void)item;
    memset(out, 0, sizeof *out);
    json_int_t num_ctx = 0;
    enum sp_api_kind kind = SP_API_CHAT;
    json_t *root = sp_dialect_load(body, len, err), *oai = json_object();
    sp_status st = root ? sp_ollama_translate(root, route == SP_API_COMPLETIONS, oai, &kind, &num_ctx, err)
                        : SP_ERR_ARG;
    if (st == SP_OK)
        st = sp_dialect_parse(out, kind, oai, model, lim, err, sp_ollama_names,
                              sizeof sp_ollama_names / sizeof sp_ollama_names[0]);
    if (st == SP_OK && !json_object_get(oai, "max_tokens"))
        out->gp.max_tokens = -1; /* Ollama's num_predict -1: until the context is full */
    if (st == SP_OK && (st = sp_ollama_context(out, num_ctx, lim, err)) != SP_OK)
        sp_api_request_free(out);
    if (st == SP_OK && route == SP_API_COMPLETIONS)
        out->echo_fields = json_pack("{s:b}", "generate", 1);
    json_decref(oai);
    json_decref(root);
    return st;
}

static char *sp_ollama_error(const struct sp_api_error *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "error", sp_json_text(e->message, strlen(e->message)));
    return sp_json_dump_free(o);
}

/* ---- the answers ---- */

struct sp_ollama_state {
    double t0, t_first;     /* monotonic: the answer's start and its first token */
    bool generate;          /* /api/generate: "response" instead of "message" */
    json_t *calls;          /* streaming: the calls read so far ({name, arguments text}) */
    json_t *calls_lp;       /* streaming: their tokens' logprobs, sent with them */
    enum sp_finish finish;
};

static sp_status sp_ollama_init(struct sp_resp *r)
{
    struct sp_ollama_state *s = calloc(1, sizeof *s);
    if (!s || !(s->calls = json_array()) || !(s->calls_lp = json_array())) {
        if (s)
            json_decref(s->calls);
        free(s);
        return SP_ERR_NOMEM;
    }
    s->t0 = sp_now();
    s->generate = r->api->echo_fields && json_is_true(json_object_get(r->api->echo_fields, "generate"));
    r->state = s;
    return SP_OK;
}

static void sp_ollama_free(struct sp_resp *r)
{
    struct sp_ollama_state *s = r->state;
    if (s) {
        json_decref(s->calls);
        json_decref(s->calls_lp);
    }
    free(s);
}

static void sp_ollama_retry(struct sp_resp *r, int choice)
{
    (void)choice;
    json_array_clear(((struct sp_ollama_state *)r->state)->calls);
    json_array_clear(((struct sp_ollama_state *)r->state)->calls_lp);
}

/* {"model", "created_at"} and the rest of a line or body. */
static json_t *sp_ollama_base(const struct sp_resp *r)
{
    char when[64];
    sp_dialect_time(when, sizeof when);
    json_t *o = json_object();
    json_object_set_new(o, "model", sp_json_text(r->model, strlen(r->model)));
    json_object_set_new(o, "created_at", json_string(when));
    return o;
}

/* The text (and thinking) of a line or body: "message" for chat, "response" for generate. */
static void sp_ollama_text(const struct sp_ollama_state *s, json_t *o, const char *text, size_t len,
                           const char *thinking, size_t n_thinking, json_t *calls)
{
    if (s->generate) {
        json_object_set_new(o, "response", sp_json_text(text, len));
        if (n_thinking)
            json_object_set_new(o, "thinking", sp_json_text(thinking, n_thinking));
        json_decref(calls);
        return;
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", sp_json_text(text, len));
    if (n_thinking)
        json_object_set_new(m, "thinking", sp_json_text(thinking, n_thinking));
    if (calls)
        json_object_set_new(m, "tool_calls", calls);
    json_object_set_new(o, "message", m);
}

/* The last object's counts and durations (nanoseconds). */
static void sp_ollama_done(const struct sp_resp *r, const struct sp_ollama_state *s, json_t *o, enum sp_finish f)
{
    double now = sp_now(), first = s->t_first > 0 ? s->t_first : now;
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(f == SP_FINISH_STOP ? "stop" : "length"));
    json_object_set_new(o, "total_duration", json_integer((json_int_t)((now - s->t0) * 1e9)));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer(r->usage.prompt_tokens));
    json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)((first - s->t0) * 1e9)));
    json_object_set_new(o, "eval_count", json_integer(r->usage.completion_tokens));
    json_object_set_new(o, "eval_duration", json_integer((json_int_t)((now - first) * 1e9)));
}

/* OpenAI-shaped calls ({name, arguments text}) as Ollama's, arguments objects. */
static json_t *sp_ollama_calls_out(const json_t *calls, bool openai)
{
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i), *fn = openai ? json_object_get(c, "function") : c;
        json_t *f = json_object(), *o = json_object();
        json_object_set(f, "name", json_object_get(fn, "name"));
        json_object_set_new(f, "arguments", sp_dialect_args(json_string_value(json_object_get(fn, "arguments"))));
        json_object_set_new(o, "function", f);
        json_array_append_new(out, o);
    }
    return out;
}

static char *sp_ollama_body(struct sp_resp *r)
{
    struct sp_ollama_state *s = r->state;
    struct sp_choice_view v;
    sp_resp_choice(r, 0, &v);
    json_t *o = sp_ollama_base(r);
    sp_ollama_text(s, o, v.text, v.len, v.reasoning, v.n_reasoning, v.calls ? sp_ollama_calls_out(v.calls, true)
                                                                            : NULL);
    s->t_first = s->t0; /* not streamed: no first token seen here */
    if (r->api->logprobs >= 0)
        json_object_set_new(o, "logprobs", v.logprobs ? json_incref((json_t *)v.logprobs) : json_array());
    sp_ollama_done(r, s, o, v.finish);
    return sp_json_dump_free(o);
}

static sp_status sp_ollama_delta(struct sp_resp *r, const struct sp_delta *d, char **out, size_t *len, size_t *cap)
{
    struct sp_ollama_state *s = r->state;
    if (s->t_first == 0)
        s->t_first = sp_now();
    if ((d->kind == SP_DELTA_CALL || d->kind == SP_DELTA_ARGS) && d->logprob &&
        json_array_append(s->calls_lp, (json_t *)d->logprob))
        return SP_ERR_NOMEM;
    if (d->kind == SP_DELTA_CALL) {
        json_t *c = json_object();
        json_object_set_new(c, "name", sp_json_text(d->text, d->len));
        json_object_set_new(c, "arguments", json_string(""));
        return json_array_append_new(s->calls, c) ? SP_ERR_NOMEM : SP_OK;
    }
    if (d->kind == SP_DELTA_ARGS) {
        json_t *c = json_array_get(s->calls, (size_t)d->index);
        const char *old = json_string_value(json_object_get(c, "arguments"));
        size_t n = old ? strlen(old) : 0;
        char *both = malloc(n + d->len + 1);
        if (!c || !both) {
            free(both);
            return c ? SP_ERR_NOMEM : SP_OK;
        }
        memcpy(both, old ? old : "", n);
        memcpy(both + n, d->text, d->len);
        both[n + d->len] = '\0';
        json_object_set_new(c, "arguments", sp_json_text(both, n + d->len));
        free(both);
        return SP_OK;
    }
    if (d->kind == SP_DELTA_FINISH) { /* Ollama sends whole calls, once read */
        s->finish = d->finish;
        if (!json_array_size(s->calls))
            return SP_OK;
        json_t *o = sp_ollama_base(r);
        sp_ollama_text(s, o, "", 0, NULL, 0, sp_ollama_calls_out(s->calls, false));
        if (json_array_size(s->calls_lp))
            json_object_set(o, "logprobs", s->calls_lp);
        json_object_set_new(o, "done", json_false());
        return sp_out_ndjson(o, out, len, cap);
    }
    json_t *o = sp_ollama_base(r);
    bool think = d->kind == SP_DELTA_REASONING;
    sp_ollama_text(s, o, think ? "" : d->text, think ? 0 : d->len, think ? d->text : NULL, think ? d->len : 0, NULL);
    if (d->logprob) { /* the token's, with the first piece of its text */
        json_t *lp = json_array();
        json_array_append(lp, (json_t *)d->logprob);
        json_object_set_new(o, "logprobs", lp);
    }
    json_object_set_new(o, "done", json_false());
    return sp_out_ndjson(o, out, len, cap);
}

static sp_status sp_ollama_end(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    struct sp_ollama_state *s = r->state;
    json_t *o = sp_ollama_base(r);
    sp_ollama_text(s, o, "", 0, NULL, 0, NULL);
    sp_ollama_done(r, s, o, s->finish);
    return sp_out_ndjson(o, out, len, cap);
}

static sp_status sp_ollama_stream_error(struct sp_resp *r, const struct sp_api_error *err, char **out, size_t *len,
                                        size_t *cap)
{
    (void)r;
    json_t *o = json_object();
    json_object_set_new(o, "error", sp_json_text(err->message, strlen(err->message)));
    return sp_out_ndjson(o, out, len, cap);
}

static const struct sp_resp_ops sp_ollama_ops = {
    .init = sp_ollama_init,
    .free = sp_ollama_free,
    .delta = sp_ollama_delta,
    .end = sp_ollama_end,
    .error = sp_ollama_stream_error,
    .retry = sp_ollama_retry,
    .body = sp_ollama_body,
};

/* ---- /api/embed and the older /api/embeddings ---- */

/* The fields both check alike: the request's own (fields), options (only
 * the runtime ones, labels, mean anything here) and the model, into oai. */
static sp_status sp_ollama_embed_common(const json_t *root, const struct sp_field_rule *fields, size_t n,
                                        json_t *oai, struct sp_api_error *err)
{
    sp_status st = sp_dialect_check_fields(root, fields, n, "", err);
    json_t *opt = json_object_get(root, "options");
    if (st == SP_OK && opt && !json_is_null(opt))
        for (size_t i = 0; i < sizeof sp_ollama_options / sizeof sp_ollama_options[0] && st == SP_OK; i++)
            if (sp_ollama_options[i].use != SP_FIELD_LABEL && json_object_get(opt, sp_ollama_options[i].name)) {
                char param[64];
                snprintf(param, sizeof param, "options.%s", sp_ollama_options[i].name);
                st = sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", param,
                                 "'%s' means nothing for embeddings.", param);
            }
    return st == SP_OK ? sp_ollama_model(root, oai, err) : st;
}

/* oai (OpenAI's embeddings request) through the one parser. */
static sp_status sp_ollama_embed_run(struct sp_api_embed_request *out, const json_t *oai, const sp_model *model,
                                     const struct sp_api_embed_limits *lim, struct sp_api_error *err)
{
    char *text = json_dumps(oai, JSON_COMPACT);
    sp_status st = text ? sp_api_embed_parse(out, text, strlen(text), model, lim, err)
                        : sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    free(text);
    return st;
}

static sp_status sp_ollama_embed_parse(struct sp_api_embed_request *out, const char *body, size_t len,
                                       const sp_model *model, const struct sp_api_embed_limits *lim,
                                       struct sp_api_error *err)
{
    static const struct sp_field_rule fields[] = {
        {"model", SP_FIELD_READ}, {"input", SP_FIELD_READ}, {"truncate", SP_FIELD_READ},
        {"dimensions", SP_FIELD_READ}, {"options", SP_FIELD_READ}, {"keep_alive", SP_FIELD_LABEL},
    };
    memset(out, 0, sizeof *out);
    json_t *root = sp_dialect_load(body, len, err), *oai = json_object();
    sp_status st = root ? sp_ollama_embed_common(root, fields, sizeof fields / sizeof fields[0], oai, err)
                        : SP_ERR_ARG;
    if (st == SP_OK) {
        json_t *truncate = json_object_get(root, "truncate"), *dims = json_object_get(root, "dimensions");
        json_object_set(oai, "input", json_object_get(root, "input"));
        json_object_set_new(oai, "truncate", json_boolean(!json_is_false(truncate))); /* Ollama truncates by default */
        if (dims && !json_is_null(dims))
            json_object_set(oai, "dimensions", dims);
        st = sp_ollama_embed_run(out, oai, model, lim, err);
    }
    json_decref(oai);
    json_decref(root);
    return st;
}

static char *sp_ollama_embed_body(const struct sp_api_embed_request *r, const char *model, const float *vecs,
                                  int n_embd)
{
    json_t *all = json_array(), *o = json_object();
    for (size_t i = 0; i < r->n_inputs; i++) {
        json_t *e = json_array();
        for (int k = 0; k < n_embd; k++)
            json_array_append_new(e, json_real(vecs[i * (size_t)n_embd + (size_t)k]));
        json_array_append_new(all, e);
    }
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "embeddings", all);
    json_object_set_new(o, "total_duration", json_integer(0));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)r->n_total));
    return sp_json_dump_free(o);
}

/* /api/embeddings: {"model", "prompt": one string} -> {"embedding": [...]}.
 * The prompt is required (Ollama's empty prompt only loads the model,
 * which is always loaded here) and not truncated: a prompt longer than
 * the model's input is a 400. */
static sp_status sp_ollama_embeddings_parse(struct sp_api_embed_request *out, const char *body, size_t len,
                                            const sp_model *model, const struct sp_api_embed_limits *lim,
                                            struct sp_api_error *err)
{
    static const struct sp_field_rule fields[] = {
        {"model", SP_FIELD_READ}, {"prompt", SP_FIELD_READ}, {"options", SP_FIELD_READ},
        {"keep_alive", SP_FIELD_LABEL},
    };
    memset(out, 0, sizeof *out);
    json_t *root = sp_dialect_load(body, len, err), *oai = json_object();
    sp_status st = root ? sp_ollama_embed_common(root, fields, sizeof fields / sizeof fields[0], oai, err)
                        : SP_ERR_ARG;
    bool bad = false;
    const char *prompt = st == SP_OK ? sp_dialect_string(root, "prompt", "prompt", &bad, err) : NULL;
    if (st == SP_OK && bad)
        st = SP_ERR_ARG;
    else if (st == SP_OK && (!prompt || !prompt[0]))
        st = sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "prompt",
                         "'prompt' is required (the model is always loaded: there is nothing to load).");
    if (st == SP_OK) {
        json_object_set_new(oai, "input", json_string(prompt));
        st = sp_ollama_embed_run(out, oai, model, lim, err);
    }
    json_decref(oai);
    json_decref(root);
    return st;
}

static char *sp_ollama_embeddings_body(const struct sp_api_embed_request *r, const char *model, const float *vecs,
                                       int n_embd)
{
    (void)model;
    json_t *e = json_array(), *o = json_object();
    for (int k = 0; r->n_inputs && k < n_embd; k++)
        json_array_append_new(e, json_real(vecs[k]));
    json_object_set_new(o, "embedding", e);
    return sp_json_dump_free(o);
}

/* keep_alive: seconds (a number) or a duration string (Go's "5m", or a
 * number of seconds), negative: forever; null or absent: none. */
static sp_status sp_ollama_keep_alive(const char *body, size_t len, enum sp_route route, enum sp_api_kind kind,
                                      double *secs, bool *only_load, struct sp_api_error *err)
{
    *secs = NAN;
    *only_load = false;
    json_t *root = sp_dialect_load(body, len, err);
    if (!root)
        return SP_ERR_ARG;
    json_t *ka = json_object_get(root, "keep_alive");
    sp_status st = SP_OK;
    if (json_is_number(ka) && isfinite(json_number_value(ka)))
        *secs = json_number_value(ka) < 0 ? -1 : json_number_value(ka);
    else if (ka && !json_is_null(ka) && !(json_is_string(ka) && sp_server_duration_parse(json_string_value(ka), secs)))
        st = sp_bad(err, "keep_alive", "expected a number of seconds or a duration such as \"5m\" (negative: forever).");
    if (route == SP_ROUTE_GENERATE) {
        json_t *what = json_object_get(root, kind == SP_API_COMPLETIONS ? "prompt" : "messages");
        *only_load = !what || json_is_null(what) || (json_is_string(what) && !json_string_value(what)[0]) ||
                     (json_is_array(what) && !json_array_size(what));
    }
    json_decref(root);
    return st;
}

/* Ollama's answer to a request that only loads or unloads its model. */
static char *sp_ollama_load_body(const char *model, enum sp_api_kind kind, bool unloaded)
{
    char when[64];
    sp_dialect_time(when, sizeof when);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "created_at", json_string(when));
    if (kind == SP_API_COMPLETIONS) {
        json_object_set_new(o, "response", json_string(""));
    } else {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", json_string(""));
        json_object_set_new(o, "message", msg);
    }
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(unloaded ? "unload" : "load"));
    return sp_json_dump_free(o);
}

const struct sp_dialect sp_dialect_ollama = {
    .name = "ollama",
    .parse = sp_ollama_parse,
    .error_body = sp_ollama_error,
    .stream_type = "application/x-ndjson",
    .resp = &sp_ollama_ops,
    .embed_parse = sp_ollama_embed_parse,
    .embed_body = sp_ollama_embed_body,
    .keep_alive = sp_ollama_keep_alive,
    .load_body = sp_ollama_load_body,
};

/* Ollama's, with the older embeddings route's shapes. */
const struct sp_dialect sp_dialect_ollama_embeddings = {
    .name = "ollama",
    .parse = sp_ollama_parse,
    .error_body = sp_ollama_error,
    .stream_type = "application/x-ndjson",
    .resp = &sp_ollama_ops,
    .embed_parse = sp_ollama_embeddings_parse,
    .embed_body = sp_ollama_embeddings_body,
    .keep_alive = sp_ollama_keep_alive,
    .load_body = sp_ollama_load_body,
};


/* ---- the model: /api/tags, /api/ps, /api/show, /api/version ---- */

static json_t *sp_ollama_details(const sp_model *m)
{
    sp_model_info mi;
    sp_model_info_get(m, &mi);
    char size[64] = "";
    size_t n = 0;
    if (sp_model_meta_value(m, "general.size_label", size, sizeof size, &n) != SP_OK)
        size[0] = '\0';
    json_t *d = json_object(), *fam = json_array();
    json_array_append_new(fam, json_string(mi.architecture ? mi.architecture : ""));
    json_object_set_new(d, "parent_model", json_string(""));
    json_object_set_new(d, "format", json_string("gguf"));
    json_object_set_new(d, "family", json_string(mi.architecture ? mi.architecture : ""));
    json_object_set_new(d, "families", fam);
    json_object_set_new(d, "parameter_size", json_string(size));
    json_object_set_new(d, "quantization_level", json_string(""));
    return d;
}

/* One entry of the model list per name (the file name, then each alias). */
static char *sp_ollama_list(const struct sp_info_ctx *ctx, bool running)
{
    sp_model_info mi;
    sp_model_info_get(ctx->model, &mi);
    char when[64];
    sp_dialect_time(when, sizeof when);
    json_t *models = json_array();
    for (size_t i = 0; i <= ctx->n_aliases; i++) {
        const char *name = i ? ctx->aliases[i - 1] : ctx->model_id;
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(name));
        json_object_set_new(e, "model", json_string(name));
        json_object_set_new(e, running ? "expires_at" : "modified_at",
                            json_string(running ? "2318-01-01T00:00:00Z" : when));
        json_object_set_new(e, "size", json_integer((json_int_t)mi.file_bytes));
        json_object_set_new(e, "digest", json_string(""));
        json_object_set_new(e, "details", sp_ollama_details(ctx->model));
        if (running) {
            json_object_set_new(e, "size_vram", json_integer(0));
            json_object_set_new(e, "context_length", json_integer(ctx->lim->n_ctx));
        }
        json_array_append_new(models, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "models", models);
    return sp_json_dump_free(o);
}

/* The models of --models-dir (running: the loaded ones only).  Their
 * details are the format alone: a model not loaded is not read. */
static char *sp_ollama_router_list(const struct sp_info_ctx *ctx, bool running, struct sp_api_error *err)
{
    struct sp_router_entry *v = NULL;
    size_t n = 0;
    if (sp_router_list(ctx->router, &v, &n) != SP_OK) {
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    char when[64];
    sp_dialect_time(when, sizeof when);
    json_t *models = json_array();
    for (size_t i = 0; i < n; i++) {
        if (running && !v[i].n_ctx)
            continue;
        json_t *e = json_object(), *d = json_object();
        json_object_set_new(e, "name", json_string(v[i].id));
        json_object_set_new(e, "model", json_string(v[i].id));
        bool forever = v[i].expires_in < 0 || v[i].expires_in >= 1e10; /* as Ollama's: year 2318 */
        if (running && !forever)
            sp_dialect_time_in(when, sizeof when, v[i].expires_in);
        json_object_set_new(e, running ? "expires_at" : "modified_at",
                            json_string(running && forever ? "2318-01-01T00:00:00Z" : when));
        /* /api/ps: the memory it holds, as Ollama's */
        json_object_set_new(e, "size", json_integer((json_int_t)(running && v[i].mem ? v[i].mem : v[i].bytes)));
        json_object_set_new(e, "digest", json_string(""));
        json_object_set_new(d, "format", json_string("gguf"));
        json_object_set_new(e, "details", d);
        if (running) {
            json_object_set_new(e, "size_vram", json_integer(0));
            json_object_set_new(e, "context_length", json_integer(v[i].n_ctx));
        }
        json_array_append_new(models, e);
    }
    free(v);
    json_t *o = json_object();
    json_object_set_new(o, "models", models);
    return sp_json_dump_free(o);
}

char *sp_ollama_tags(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    return ctx->router ? sp_ollama_router_list(ctx, false, err) : sp_ollama_list(ctx, false);
}

char *sp_ollama_ps(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    return ctx->router ? sp_ollama_router_list(ctx, true, err) : sp_ollama_list(ctx, true);
}

char *sp_ollama_version(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)ctx;
    (void)status;
    (void)err;
    return strdup("{\"version\":\"" SP_OLLAMA_API_VERSION "\"}");
}

char *sp_ollama_show(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    json_t *root = sp_dialect_load(ctx->body, ctx->len, err), *oai = json_object();
    json_t *name = root ? json_object_get(root, "model") : NULL;
    if (root && !name && json_object_get(root, "name")) /* the older field */
        json_object_set(root, "model", json_object_get(root, "name"));
    sp_status st = root ? sp_ollama_model(root, oai, err) : SP_ERR_ARG;
    const char *model = json_string_value(json_object_get(oai, "model"));
    char *body = NULL;
    if (st == SP_OK && !sp_api_model_known(ctx->model_id, ctx->aliases, ctx->n_aliases, model))
        sp_api_fail(err, 404, SP_API_INVALID, "model_not_found", "model", "model '%.100s' not found", model);
    else if (st == SP_OK) {
        sp_model_info mi;
        sp_model_info_get(ctx->model, &mi);
        const char *tmpl = sp_model_chat_template(ctx->model), *arch = mi.architecture ? mi.architecture : "";
        json_t *info = json_object(), *caps = json_array(), *o = json_object();
        char key[96];
        json_object_set_new(info, "general.architecture", json_string(arch));
        snprintf(key, sizeof key, "%s.context_length", arch);
        json_object_set_new(info, key, json_integer(mi.n_ctx_train));
        snprintf(key, sizeof key, "%s.embedding_length", arch);
        json_object_set_new(info, key, json_integer(mi.n_embd));
        snprintf(key, sizeof key, "%s.block_count", arch);
        json_object_set_new(info, key, json_integer(mi.n_layer));
        json_array_append_new(caps, json_string("completion"));
        json_array_append_new(caps, json_string("tools"));
        if (sp_think_mode_for(ctx->model, NULL, 0) != SP_THINK_OFF) /* the template thinks (<think>, Harmony) */
            json_array_append_new(caps, json_string("thinking"));
        json_object_set_new(o, "modelfile", json_string(""));
        json_object_set_new(o, "parameters", json_string(""));
        json_object_set_new(o, "template", json_string(tmpl ? tmpl : ""));
        json_object_set_new(o, "details", sp_ollama_details(ctx->model));
        json_object_set_new(o, "model_info", info);
        json_object_set_new(o, "capabilities", caps);
        body = sp_json_dump_free(o);
    }
    json_decref(oai);
    json_decref(root);
    return body;
}
