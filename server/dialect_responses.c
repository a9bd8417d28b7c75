/* OpenAI's Responses API (POST /v1/responses) as a dialect (dialect.h):
 * stateless.  The request is translated into the internal chat request, the
 * engine's deltas into output items (reasoning, message, function_call) and
 * the typed stream events (response.created ... response.completed), errors
 * into OpenAI's shape.
 *
 *   input (a string, or items)         messages: role items with input_text/output_text
 *                                      parts; function_call items an assistant turn's
 *                                      tool_calls; function_call_output items tool
 *                                      messages; a reasoning item's text the next
 *                                      assistant turn's reasoning_content
 *   instructions                       the first, system message
 *   max_output_tokens, temperature, top_p, parallel_tool_calls   the same
 *   text.format (text, json_object, json_schema)   response_format
 *   tools (function), tool_choice      OpenAI's chat tools
 *   reasoning.effort                   the template's reasoning_effort
 *   store                              accepted; nothing is stored either way
 *   previous_response_id, conversation, background   a 400: send the whole conversation
 *   metadata, user, safety_identifier, prompt_cache_key, service_tier, ...   labels
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/dialect.h"


static const char *const sp_responses_names[][2] = {
    {"max_tokens", "max_output_tokens"}, {"response_format", "text.format"}, {"messages", "input"},
};

static const struct sp_field_rule sp_responses_fields[] = {
    {"model", SP_FIELD_READ}, {"input", SP_FIELD_READ}, {"instructions", SP_FIELD_READ},
    {"max_output_tokens", SP_FIELD_READ}, {"temperature", SP_FIELD_READ}, {"top_p", SP_FIELD_READ},
    {"stream", SP_FIELD_READ}, {"text", SP_FIELD_READ}, {"tools", SP_FIELD_READ}, {"tool_choice", SP_FIELD_READ},
    {"parallel_tool_calls", SP_FIELD_READ}, {"reasoning", SP_FIELD_READ}, {"store", SP_FIELD_READ},
    {"truncation", SP_FIELD_READ}, {"include", SP_FIELD_READ}, {"top_logprobs", SP_FIELD_READ},
    {"background", SP_FIELD_READ}, {"metadata", SP_FIELD_LABEL}, {"user", SP_FIELD_LABEL},
    {"safety_identifier", SP_FIELD_LABEL}, {"prompt_cache_key", SP_FIELD_LABEL},
    {"prompt_cache_retention", SP_FIELD_LABEL}, {"service_tier", SP_FIELD_LABEL},
    {"stream_options", SP_FIELD_LABEL},
    {"previous_response_id", SP_FIELD_UNSUPPORTED}, {"conversation", SP_FIELD_UNSUPPORTED},
    {"prompt", SP_FIELD_UNSUPPORTED}, {"max_tool_calls", SP_FIELD_UNSUPPORTED},
    {"context_management", SP_FIELD_UNSUPPORTED},
};

static sp_status sp_bad(struct sp_api_error *err, const char *param, const char *msg)
{
    return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param, "Invalid '%s': %s", param, msg);
}

/* A message item's content: a string, or input_text/output_text parts. */
static sp_status sp_responses_content(const json_t *content, const char *param, json_t **out, struct sp_api_error *err)
{
    if (json_is_string(content)) {
        *out = json_incref((json_t *)content);
        return SP_OK;
    }
    if (!json_is_array(content))
        return sp_bad(err, param, "expected a string or a list of content parts.");
    *out = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *p = json_array_get(content, k), *text = json_object_get(p, "text");
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text")) || !json_is_string(text)) {
            json_decref(*out);
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", param,
                               "Invalid '%s': only input_text and output_text parts are supported.", param);
        }
        json_t *part = json_object();
        json_object_set_new(part, "type", json_string("text"));
        json_object_set(part, "text", text);
        json_array_append_new(*out, part);
    }
    return SP_OK;
}

static sp_status sp_item_message(const json_t *it, const char *param, json_t *msgs, struct sp_api_error *err)
{
    const char *role = json_string_value(json_object_get(it, "role"));
    json_t *content = NULL;
    if (!role)
        return sp_bad(err, param, "a message item needs a 'role'.");
    sp_status st = sp_responses_content(json_object_get(it, "content"), param, &content, err);
    if (st != SP_OK)
        return st;
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!strcmp(role, "assistant") && json_is_null(json_object_get(last, "content")) &&
        json_object_get(last, "reasoning_content") && !json_object_get(last, "tool_calls"))
        return json_object_set_new(last, "content", content) ? SP_ERR_NOMEM : SP_OK; /* the reasoning's turn */
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content);
    return json_array_append_new(msgs, m) ? SP_ERR_NOMEM : SP_OK;
}

/* A call joins the assistant turn before it (or makes one without text). */
static sp_status sp_item_call(const json_t *it, const char *param, json_t *msgs, struct sp_api_error *err)
{
    json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    json_t *args = json_object_get(it, "arguments");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
        return sp_bad(err, param, "a function_call item needs call_id, name and arguments (strings).");
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1), *calls;
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!role || strcmp(role, "assistant")) {
        last = json_object();
        json_object_set_new(last, "role", json_string("assistant"));
        json_object_set_new(last, "content", json_null());
        json_array_append_new(msgs, last);
    }
    if (!(calls = json_object_get(last, "tool_calls"))) {
        calls = json_array();
        json_object_set_new(last, "tool_calls", calls);
    }
    json_t *c = json_object(), *fn = json_object();
    json_object_set(fn, "name", name);
    json_object_set(fn, "arguments", args);
    json_object_set(c, "id", id);
    json_object_set_new(c, "type", json_string("function"));
    json_object_set_new(c, "function", fn);
    return json_array_append_new(calls, c) ? SP_ERR_NOMEM : SP_OK;
}

static sp_status sp_item_output(const json_t *it, const char *param, json_t *msgs, struct sp_api_error *err)
{
    json_t *id = json_object_get(it, "call_id"), *content = NULL;
    if (!json_is_string(id))
        return sp_bad(err, param, "a function_call_output item needs call_id.");
    sp_status st = sp_responses_content(json_object_get(it, "output"), param, &content, err);
    if (st != SP_OK)
        return st;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("tool"));
    json_object_set(m, "tool_call_id", id);
    json_object_set_new(m, "content", content);
    return json_array_append_new(msgs, m) ? SP_ERR_NOMEM : SP_OK;
}

/* Past reasoning (its reasoning_text parts) opens an assistant turn as its
 * reasoning_content, which the message or calls after it join; templates
 * that keep past thinking read it (gpt-oss's before a tool call). */
static sp_status sp_item_reasoning(const json_t *it, const char *param, json_t *msgs, struct sp_api_error *err)
{
    json_t *content = json_object_get(it, "content");
    size_t n = 0, o = 0;
    (void)param;
    (void)err;
    for (size_t k = 0; k < json_array_size(content); k++)
        n += json_string_length(json_object_get(json_array_get(content, k), "text"));
    if (!n)
        return SP_OK;
    char *text = malloc(n + 1);
    if (!text)
        return SP_ERR_NOMEM;
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *t = json_object_get(json_array_get(content, k), "text");
        memcpy(text + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", json_null());
    json_object_set_new(m, "reasoning_content", json_stringn_nocheck(text, n));
    free(text);
    return json_array_append_new(msgs, m) ? SP_ERR_NOMEM : SP_OK;
}

static const struct {
    const char *type;
    sp_status (*read)(const json_t *it, const char *param, json_t *msgs, struct sp_api_error *err);
} sp_responses_items[] = {
    {"message", sp_item_message}, {"function_call", sp_item_call}, {"function_call_output", sp_item_output},
    {"reasoning", sp_item_reasoning},
};

/* One input item into the messages, by its type (a role without a type is a message). */
static sp_status sp_responses_item(const json_t *it, size_t i, json_t *msgs, struct sp_api_error *err)
{
    char param[48];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it))
        return sp_bad(err, param, "expected an item (an object).");
    const char *type = json_string_value(json_object_get(it, "type"));
    if (!type && json_object_get(it, "role"))
        type = "message";
    for (size_t k = 0; type && k < sizeof sp_responses_items / sizeof sp_responses_items[0]; k++)
        if (!strcmp(type, sp_responses_items[k].type))
            return sp_responses_items[k].read(it, param, msgs, err);
    return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", param,
                       "Invalid '%s': '%.40s' items are not supported by this server.", param, type ? type : "?");
}

/* text.format into response_format. */
static sp_status sp_responses_format(const json_t *text, json_t *oai, struct sp_api_error *err)
{
    if (!text || json_is_null(text))
        return SP_OK;
    json_t *f = json_object_get(text, "format"), *verbosity = json_object_get(text, "verbosity");
    if (!json_is_object(text))
        return sp_bad(err, "text", "expected an object.");
    if (verbosity && !json_is_null(verbosity))
        return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", "text.verbosity",
                           "'text.verbosity' is not supported by this server.");
    if (!f || json_is_null(f))
        return SP_OK;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type)
        return sp_bad(err, "text.format", "expected an object with a 'type'.");
    json_t *rf = json_object();
    json_object_set_new(rf, "type", json_string(type));
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)f, k, v) {
            if (strcmp(k, "type"))
                json_object_set(js, k, v);
        }
        json_object_set_new(rf, "json_schema", js);
    }
    json_object_set_new(oai, "response_format", rf);
    return SP_OK;
}

/* tools (function tools only) and tool_choice into OpenAI's chat form. */
static sp_status sp_responses_tools(const json_t *root, json_t *oai, struct sp_api_error *err)
{
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    if (json_array_size(tools)) {
        json_t *out = json_array();
        json_object_set_new(oai, "tools", out);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *fn = json_object();
            const char *type = json_string_value(json_object_get(t, "type"));
            char param[32];
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!type || strcmp(type, "function")) {
                json_decref(fn);
                return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", param,
                                   "Invalid '%s': only function tools are supported by this server.", param);
            }
            static const char *const keys[] = {"name", "description", "parameters", "strict"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
                if (json_object_get(t, keys[k]) && !json_is_null(json_object_get(t, keys[k])))
                    json_object_set(fn, keys[k], json_object_get(t, keys[k]));
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string("function"));
            json_object_set_new(o, "function", fn);
            json_array_append_new(out, o);
        }
    }
    if (json_is_string(choice) && json_object_get(oai, "tools"))
        json_object_set(oai, "tool_choice", choice);
    else if (json_is_object(choice)) {
        const char *type = json_string_value(json_object_get(choice, "type"));
        json_t *name = json_object_get(choice, "name");
        if (!type || strcmp(type, "function") || !json_is_string(name))
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "tool_choice",
                               "Invalid 'tool_choice': only auto, none, required or {\"type\": \"function\", "
                               "\"name\"} are supported.");
        json_t *c = json_object(), *fn = json_object();
        json_object_set(fn, "name", name);
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", fn);
        json_object_set_new(oai, "tool_choice", c);
    }
    json_t *par = json_object_get(root, "parallel_tool_calls");
    if (par && !json_is_null(par) && json_object_get(oai, "tools"))
        json_object_set(oai, "parallel_tool_calls", par);
    return SP_OK;
}

/* What changes nothing when it has its default value, and is refused otherwise. */
static sp_status sp_responses_refused(const json_t *root, struct sp_api_error *err)
{
    json_t *trunc = json_object_get(root, "truncation"), *inc = json_object_get(root, "include");
    json_t *bg = json_object_get(root, "background"), *tl = json_object_get(root, "top_logprobs");
    if (trunc && !json_is_null(trunc) && !(json_is_string(trunc) && !strcmp(json_string_value(trunc), "disabled")))
        return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "truncation",
                           "Only 'truncation': 'disabled' is supported: an input too long for the context is a 400.");
    for (size_t i = 0; json_is_array(inc) && i < json_array_size(inc); i++) {
        const char *v = json_string_value(json_array_get(inc, i));
        if (!v || strcmp(v, "reasoning.encrypted_content"))
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "include",
                               "'include' %.60s is not supported by this server.", v ? v : "?");
    }
    if (json_is_true(bg))
        return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "background",
                           "'background' responses are not supported: this server stores nothing.");
    if (json_is_integer(tl) && json_integer_value(tl) > 0)
        return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "top_logprobs",
                           "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions).");
    return SP_OK;
}

static sp_status sp_responses_translate(const json_t *root, json_t *oai, struct sp_api_error *err)
{
    sp_status st = SP_OK;
    json_t *prev = json_object_get(root, "previous_response_id");
    if (prev && !json_is_null(prev))
        st = sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", "previous_response_id",
                         "'previous_response_id' is not supported: this server is stateless and stores no "
                         "responses; send the whole conversation in 'input'.");
    if (st == SP_OK)
        st = sp_dialect_check_fields(root, sp_responses_fields,
                                     sizeof sp_responses_fields / sizeof sp_responses_fields[0], "", err);
    if (st != SP_OK || (st = sp_responses_refused(root, err)) != SP_OK)
        return st;
    static const char *const same[] = {"model", "temperature", "top_p", "stream"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(root, same[i]);
        if (v && !json_is_null(v))
            json_object_set(oai, same[i], v);
    }
    json_t *max = json_object_get(root, "max_output_tokens");
    if (max && !json_is_null(max))
        json_object_set(oai, "max_tokens", max);
    sp_dialect_copy_extensions(oai, root);
    json_t *effort = json_object_get(json_object_get(root, "reasoning"), "effort");
    if (json_is_string(effort)) {
        json_t *kw = json_object_get(oai, "chat_template_kwargs");
        if (!json_is_object(kw)) {
            kw = json_object();
            json_object_set_new(oai, "chat_template_kwargs", kw);
        }
        json_object_set(kw, "reasoning_effort", effort);
    }
    json_t *msgs = json_array(), *input = json_object_get(root, "input");
    json_t *instr = json_object_get(root, "instructions");
    json_object_set_new(oai, "messages", msgs);
    if (json_is_string(instr)) {
        json_t *s = json_object();
        json_object_set_new(s, "role", json_string("system"));
        json_object_set(s, "content", instr);
        json_array_append_new(msgs, s);
    }
    if (json_is_string(input)) {
        json_t *u = json_object();
        json_object_set_new(u, "role", json_string("user"));
        json_object_set(u, "content", input);
        json_array_append_new(msgs, u);
    } else if (json_is_array(input)) {
        for (size_t i = 0; i < json_array_size(input) && st == SP_OK; i++)
            st = sp_responses_item(json_array_get(input, i), i, msgs, err);
    } else {
        st = sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "input",
                         "'input' is required: a string or a list of items.");
    }
    if (st == SP_OK)
        st = sp_responses_format(json_object_get(root, "text"), oai, err);
    return st == SP_OK ? sp_responses_tools(root, oai, err) : st;
}

/* The request's fields a response repeats. */
static json_t *sp_responses_echo(const json_t *root)
{
    static const char *const keys[] = {"instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                       "tool_choice", "parallel_tool_calls", "text", "reasoning", "metadata",
                                       "user", "store"};
    json_t *e = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(root, keys[i]);
        if (v)
            json_object_set(e, keys[i], v);
    }
    return e;
}

static sp_status sp_responses_parse(struct sp_api_request *out, enum sp_api_kind kind, const char *body, size_t len,
                                    size_t item, const sp_model *model, const struct sp_api_limits *lim,
                                    struct sp_api_error *err)
{
    (void)kind;
    (void)item;
    memset(out, 0, sizeof *out);
    json_t *root = sp_dialect_load(body, len, err), *oai = json_object();
    sp_status st = root ? sp_responses_translate(root, oai, err) : SP_ERR_ARG;
    if (st == SP_OK)
        st = sp_dialect_parse(out, SP_API_CHAT, oai, model, lim, err, sp_responses_names,
                              sizeof sp_responses_names / sizeof sp_responses_names[0]);
    if (st == SP_OK)
        out->echo_fields = sp_responses_echo(root);
    json_decref(oai);
    json_decref(root);
    return st;
}

/* ---- the answer ---- */

struct sp_responses_state {
    char hex[24];            /* the response's random part, for item ids */
    long seq;                /* sequence_number of the next event */
    json_t *output;          /* the items finished so far */
    json_t *item;            /* the item open now, or NULL */
    enum sp_delta_kind kind; /* its kind */
    char *text;              /* its text (or arguments) so far */
    size_t len, cap;
    enum sp_finish finish;
};

static sp_status sp_responses_init(struct sp_resp *r)
{
    struct sp_responses_state *s = calloc(1, sizeof *s);
    if (!s || !(s->output = json_array())) {
        free(s);
        return SP_ERR_NOMEM;
    }
    const char *hex = strchr(r->id, '-') + 1;
    snprintf(s->hex, sizeof s->hex, "%s", hex);
    snprintf(r->id, sizeof r->id, "resp_%s", s->hex);
    r->state = s;
    return SP_OK;
}

static void sp_responses_free(struct sp_resp *r)
{
    struct sp_responses_state *s = r->state;
    if (!s)
        return;
    json_decref(s->output);
    json_decref(s->item);
    free(s->text);
    free(s);
}

static void sp_responses_retry(struct sp_resp *r, int choice)
{
    (void)choice;
    struct sp_responses_state *s = r->state;
    json_array_clear(s->output);
    json_decref(s->item);
    s->item = NULL;
    s->len = 0;
}

static json_t *sp_responses_usage(const struct sp_resp *r)
{
    json_t *u = json_object(), *in = json_object(), *out = json_object();
    json_object_set_new(in, "cached_tokens", json_integer(r->usage.cached_tokens));
    json_object_set_new(in, "cache_write_tokens", json_integer(0));
    json_object_set_new(out, "reasoning_tokens", json_integer(0));
    json_object_set_new(u, "input_tokens", json_integer(r->usage.prompt_tokens));
    json_object_set_new(u, "input_tokens_details", in);
    json_object_set_new(u, "output_tokens", json_integer(r->usage.completion_tokens));
    json_object_set_new(u, "output_tokens_details", out);
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)r->usage.prompt_tokens +
                                                        r->usage.completion_tokens));
    return u;
}

/* The response object: status "in_progress", "completed" or "incomplete". */
static json_t *sp_responses_object(const struct sp_resp *r, const char *status, json_t *output, bool usage)
{
    const json_t *e = r->api->echo_fields;
    json_t *o = json_object(), *v;
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(r->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", json_null());
    json_t *inc = json_null();
    if (!strcmp(status, "incomplete"))
        inc = json_pack("{s:s}", "reason", "max_output_tokens");
    json_object_set_new(o, "incomplete_details", inc);
    json_object_set_new(o, "model", sp_json_text(r->model, strlen(r->model)));
    json_object_set_new(o, "output", output);
    static const char *const keys[] = {"instructions", "max_output_tokens", "temperature", "top_p", "user"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        json_object_set(o, keys[i], (v = json_object_get(e, keys[i])) ? v : json_null());
    v = json_object_get(e, "tools");
    json_object_set_new(o, "tools", v ? json_incref(v) : json_array());
    v = json_object_get(e, "tool_choice");
    json_object_set_new(o, "tool_choice", v ? json_incref(v) : json_string("auto"));
    v = json_object_get(e, "parallel_tool_calls");
    json_object_set_new(o, "parallel_tool_calls", json_boolean(!json_is_false(v)));
    v = json_object_get(e, "metadata");
    json_object_set_new(o, "metadata", v ? json_incref(v) : json_object());
    json_t *text = json_object_get(e, "text");
    json_object_set_new(o, "text", text ? json_incref(text) : json_pack("{s:{s:s}}", "format", "type", "text"));
    v = json_object_get(e, "reasoning");
    json_object_set_new(o, "reasoning", v ? json_incref(v) : json_pack("{s:n,s:n}", "effort", "summary"));
    json_object_set_new(o, "previous_response_id", json_null());
    json_object_set_new(o, "store", json_false());
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", usage ? sp_responses_usage(r) : json_null());
    return o;
}

/* An output item, finished (status completed) or opening (in_progress, empty). */
static json_t *sp_responses_item_json(const struct sp_responses_state *s, enum sp_delta_kind kind, int index,
                                      const char *text, size_t len, const char *call_id, const char *name,
                                      bool done)
{
    char id[48];
    json_t *o = json_object();
    const char *status = done ? "completed" : "in_progress";
    if (kind == SP_DELTA_REASONING) {
        snprintf(id, sizeof id, "rs_%s", s->hex);
        json_object_set_new(o, "type", json_string("reasoning"));
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "summary", json_array());
        json_object_set_new(o, "content", done ? json_pack("[{s:s,s:o}]", "type", "reasoning_text", "text",
                                                           sp_json_text(text, len)) : json_array());
    } else if (kind == SP_DELTA_TEXT) {
        snprintf(id, sizeof id, "msg_%s", s->hex);
        json_object_set_new(o, "type", json_string("message"));
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "role", json_string("assistant"));
        json_object_set_new(o, "content", done ? json_pack("[{s:s,s:o,s:[],s:[]}]", "type", "output_text", "text",
                                                           sp_json_text(text, len), "annotations", "logprobs")
                                               : json_array());
    } else {
        snprintf(id, sizeof id, "fc_%s_%d", s->hex, index);
        json_object_set_new(o, "type", json_string("function_call"));
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "call_id", json_string(call_id ? call_id : ""));
        json_object_set_new(o, "name", json_string(name ? name : ""));
        json_object_set_new(o, "arguments", sp_json_text(text, len));
    }
    json_object_set_new(o, "status", json_string(status));
    return o;
}

static char *sp_responses_body(struct sp_resp *r)
{
    struct sp_responses_state *s = r->state;
    struct sp_choice_view v;
    sp_resp_choice(r, 0, &v);
    json_t *output = json_array();
    if (v.n_reasoning)
        json_array_append_new(output, sp_responses_item_json(s, SP_DELTA_REASONING, 0, v.reasoning, v.n_reasoning,
                                                             NULL, NULL, true));
    if (v.len || !v.calls)
        json_array_append_new(output, sp_responses_item_json(s, SP_DELTA_TEXT, 0, v.text, v.len, NULL, NULL, true));
    for (size_t i = 0; v.calls && i < json_array_size(v.calls); i++) {
        json_t *c = json_array_get(v.calls, i), *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_array_append_new(output, sp_responses_item_json(s, SP_DELTA_CALL, (int)i, args, strlen(args),
                                                             json_string_value(json_object_get(c, "id")),
                                                             json_string_value(json_object_get(fn, "name")), true));
    }
    return sp_json_dump_free(sp_responses_object(r, v.finish == SP_FINISH_STOP ? "completed" : "incomplete", output,
                                                 true));
}

/* event: TYPE with sequence_number, and the given fields. */
static sp_status sp_responses_event(struct sp_responses_state *s, const char *type, json_t *e, char **out,
                                    size_t *len, size_t *cap)
{
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "sequence_number", json_integer(s->seq++));
    return sp_out_sse(type, e, out, len, cap);
}

static sp_status sp_responses_start(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    struct sp_responses_state *s = r->state;
    sp_status st = sp_responses_event(s, "response.created",
                                      json_pack("{s:o}", "response", sp_responses_object(r, "in_progress",
                                                                                          json_array(), false)),
                                      out, len, cap);
    if (st == SP_OK)
        st = sp_responses_event(s, "response.in_progress",
                                json_pack("{s:o}", "response", sp_responses_object(r, "in_progress", json_array(),
                                                                                    false)),
                                out, len, cap);
    return st;
}

/* Closes the open item: its done events, and it joins the output. */
static sp_status sp_responses_close(struct sp_responses_state *s, char **out, size_t *len, size_t *cap)
{
    if (!s->item)
        return SP_OK;
    int index = (int)json_array_size(s->output);
    const char *item_id = json_string_value(json_object_get(s->item, "id"));
    json_t *done;
    sp_status st = SP_OK;
    if (s->kind == SP_DELTA_CALL) {
        done = json_deep_copy(s->item);
        json_object_set_new(done, "arguments", sp_json_text(s->text, s->len));
        json_object_set_new(done, "status", json_string("completed"));
        st = sp_responses_event(s, "response.function_call_arguments.done",
                                json_pack("{s:s,s:i,s:o}", "item_id", item_id, "output_index", index, "arguments",
                                          sp_json_text(s->text, s->len)), out, len, cap);
    } else {
        bool think = s->kind == SP_DELTA_REASONING;
        done = sp_responses_item_json(s, s->kind, 0, s->text, s->len, NULL, NULL, true);
        json_t *part = json_deep_copy(json_array_get(json_object_get(done, "content"), 0));
        st = sp_responses_event(s, think ? "response.reasoning_text.done" : "response.output_text.done",
                                think ? json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id, "output_index", index,
                                                  "content_index", 0, "text", sp_json_text(s->text, s->len))
                                      : json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", item_id, "output_index",
                                                  index, "content_index", 0, "text", sp_json_text(s->text, s->len),
                                                  "logprobs"),
                                out, len, cap);
        if (st == SP_OK)
            st = sp_responses_event(s, "response.content_part.done",
                                    json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id, "output_index", index,
                                              "content_index", 0, "part", part), out, len, cap);
        else
            json_decref(part);
    }
    if (st == SP_OK)
        st = sp_responses_event(s, "response.output_item.done",
                                json_pack("{s:i,s:O}", "output_index", index, "item", done), out, len, cap);
    json_array_append_new(s->output, done);
    json_decref(s->item);
    s->item = NULL;
    s->len = 0;
    return st;
}

/* Opens an item for d (a call always opens its own). */
static sp_status sp_responses_open(struct sp_responses_state *s, const struct sp_delta *d, char **out, size_t *len,
                                   size_t *cap)
{
    if (s->item && s->kind == d->kind && d->kind != SP_DELTA_CALL)
        return SP_OK;
    sp_status st = sp_responses_close(s, out, len, cap);
    if (st != SP_OK)
        return st;
    char *name = d->kind == SP_DELTA_CALL ? strndup(d->text, d->len) : NULL;
    s->kind = d->kind;
    s->item = sp_responses_item_json(s, d->kind, d->index, "", 0, d->id, name, false);
    free(name);
    int index = (int)json_array_size(s->output);
    const char *item_id = json_string_value(json_object_get(s->item, "id"));
    st = sp_responses_event(s, "response.output_item.added",
                            json_pack("{s:i,s:O}", "output_index", index, "item", s->item), out, len, cap);
    if (st != SP_OK || d->kind == SP_DELTA_CALL)
        return st;
    json_t *part = d->kind == SP_DELTA_REASONING ? json_pack("{s:s,s:s}", "type", "reasoning_text", "text", "")
                                                 : json_pack("{s:s,s:s,s:[],s:[]}", "type", "output_text", "text", "",
                                                             "annotations", "logprobs");
    return sp_responses_event(s, "response.content_part.added",
                              json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id, "output_index", index,
                                        "content_index", 0, "part", part), out, len, cap);
}

static sp_status sp_responses_delta(struct sp_resp *r, const struct sp_delta *d, char **out, size_t *len, size_t *cap)
{
    struct sp_responses_state *s = r->state;
    sp_status st;
    if (d->kind == SP_DELTA_FINISH) {
        s->finish = d->finish;
        return sp_responses_close(s, out, len, cap);
    }
    if (d->kind != SP_DELTA_ARGS && (st = sp_responses_open(s, d, out, len, cap)) != SP_OK)
        return st;
    if (d->kind == SP_DELTA_CALL || !s->item)
        return SP_OK;
    if ((st = sp_out_append(&s->text, &s->len, &s->cap, d->text, d->len)) != SP_OK)
        return st;
    int index = (int)json_array_size(s->output);
    const char *item_id = json_string_value(json_object_get(s->item, "id"));
    json_t *delta = sp_json_text(d->text, d->len);
    if (d->kind == SP_DELTA_ARGS)
        return sp_responses_event(s, "response.function_call_arguments.delta",
                                  json_pack("{s:s,s:i,s:o}", "item_id", item_id, "output_index", index, "delta",
                                            delta), out, len, cap);
    if (d->kind == SP_DELTA_REASONING)
        return sp_responses_event(s, "response.reasoning_text.delta",
                                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id, "output_index", index,
                                            "content_index", 0, "delta", delta), out, len, cap);
    return sp_responses_event(s, "response.output_text.delta",
                              json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", item_id, "output_index", index,
                                        "content_index", 0, "delta", delta, "logprobs"), out, len, cap);
}

static sp_status sp_responses_end(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    struct sp_responses_state *s = r->state;
    bool done = s->finish == SP_FINISH_STOP;
    json_t *o = sp_responses_object(r, done ? "completed" : "incomplete", json_incref(s->output), true);
    return sp_responses_event(s, done ? "response.completed" : "response.incomplete", json_pack("{s:o}", "response", o),
                              out, len, cap);
}

static sp_status sp_responses_stream_error(struct sp_resp *r, const struct sp_api_error *err, char **out, size_t *len,
                                           size_t *cap)
{
    struct sp_responses_state *s = r->state;
    json_t *e = json_object();
    json_object_set_new(e, "code", err->code ? json_string(err->code) : json_null());
    json_object_set_new(e, "message", sp_json_text(err->message, strlen(err->message)));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    return sp_responses_event(s, "error", e, out, len, cap);
}

static const struct sp_resp_ops sp_responses_ops = {
    .init = sp_responses_init,
    .free = sp_responses_free,
    .start = sp_responses_start,
    .delta = sp_responses_delta,
    .end = sp_responses_end,
    .error = sp_responses_stream_error,
    .retry = sp_responses_retry,
    .body = sp_responses_body,
};

const struct sp_dialect sp_dialect_responses = {
    .name = "responses",
    .parse = sp_responses_parse,
    .error_body = sp_api_error_body,
    .stream_type = "text/event-stream",
    .resp = &sp_responses_ops,
};
