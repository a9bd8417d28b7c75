/* Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * as a dialect (dialect.h): its request is translated into the internal
 * (OpenAI-shaped) chat request, the engine's deltas into its content blocks
 * and stream events, errors into {"type": "error", "error": {"type",
 * "message"}}.
 *
 *   system (string or text blocks)     the first, system message
 *   messages: text blocks              message content
 *             tool_use (assistant)     tool_calls (input as arguments)
 *             tool_result (user)       a tool message per result, before the user's text
 *             thinking (assistant)     the message's reasoning_content (joined; redacted: none)
 *   max_tokens, stop_sequences         max_tokens, stop
 *   temperature, top_p, top_k          the same
 *   tools, tool_choice                 function tools; auto / any (required) / tool (named) / none,
 *                                      disable_parallel_tool_use -> parallel_tool_calls false
 *   thinking {type}                    the template's enable_thinking (enabled, adaptive: true;
 *                                      disabled: false)
 *   thinking.budget_tokens (enabled)   the thinking block closes after that many tokens
 *                                      (sp_think_budget_attach); less than max_tokens
 *   output_config {format, effort}     response_format json_schema; the template's reasoning_effort
 *   metadata, service_tier, cache_control  labels
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/dialect.h"

#define SP_API_INVALID "invalid_request_error"

/* OpenAI's field names in the parser's errors, as Anthropic names them. */
static const char *const sp_anthropic_names[][2] = {
    {"stop", "stop_sequences"},
    {"response_format", "output_config.format"},
    {"tool_choice", "tool_choice"},
};

static const struct sp_field_rule sp_anthropic_fields[] = {
    {"model", SP_FIELD_READ}, {"messages", SP_FIELD_READ}, {"max_tokens", SP_FIELD_READ},
    {"system", SP_FIELD_READ}, {"stop_sequences", SP_FIELD_READ}, {"temperature", SP_FIELD_READ},
    {"top_p", SP_FIELD_READ}, {"top_k", SP_FIELD_READ}, {"stream", SP_FIELD_READ}, {"tools", SP_FIELD_READ},
    {"tool_choice", SP_FIELD_READ}, {"thinking", SP_FIELD_READ}, {"output_config", SP_FIELD_READ},
    {"metadata", SP_FIELD_LABEL}, {"service_tier", SP_FIELD_LABEL}, {"cache_control", SP_FIELD_LABEL},
    {"inference_geo", SP_FIELD_LABEL}, {"speed", SP_FIELD_LABEL},
    {"container", SP_FIELD_UNSUPPORTED}, {"mcp_servers", SP_FIELD_UNSUPPORTED},
    {"context_management", SP_FIELD_UNSUPPORTED}, {"diagnostics", SP_FIELD_UNSUPPORTED},
};

static sp_status sp_bad(struct sp_api_error *err, const char *param, const char *fmt, const char *what)
{
    return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param, fmt, param, what);
}

/* A block list's (or a string's) text, joined, into *out (malloc'd). */
static sp_status sp_blocks_text(const json_t *content, const char *param, char **out, struct sp_api_error *err)
{
    *out = NULL;
    if (json_is_string(content))
        return (*out = strdup(json_string_value(content))) ? SP_OK : SP_ERR_NOMEM;
    if (!json_is_array(content))
        return sp_bad(err, param, "Invalid '%s': expected a string or a list of text blocks%s.", "");
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i), *t = json_object_get(b, "text");
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type || strcmp(type, "text") || !json_is_string(t))
            return sp_bad(err, param, "Invalid '%s': only text blocks are supported here%s.", "");
        total += json_string_length(t);
    }
    if (!(*out = malloc(total + 1)))
        return SP_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *t = json_object_get(json_array_get(content, i), "text");
        memcpy(*out + o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    (*out)[o] = '\0';
    return SP_OK;
}

/* What a message's blocks become: content parts, tool calls (assistant),
 * tool messages (user). */
struct sp_blocks {
    json_t *parts, *calls, *results;
    bool assistant;
    json_t *thinking;   /* an assistant turn's thinking blocks' text, joined (the message's reasoning_content) */
};

static sp_status sp_block_text(const json_t *b, const char *param, struct sp_blocks *o, struct sp_api_error *err)
{
    json_t *t = json_object_get(b, "text");
    if (!json_is_string(t))
        return sp_bad(err, param, "Invalid '%s': a text block needs 'text'%s.", "");
    json_t *part = json_object();
    json_object_set_new(part, "type", json_string("text"));
    json_object_set(part, "text", t);
    return json_array_append_new(o->parts, part) ? SP_ERR_NOMEM : SP_OK;
}

/* Past thinking: the message's reasoning_content (templates that keep it,
 * gpt-oss's before a tool call, read it; the others drop it). */
static sp_status sp_block_thinking(const json_t *b, const char *param, struct sp_blocks *o, struct sp_api_error *err)
{
    if (!o->assistant)
        return sp_bad(err, param, "Invalid '%s': thinking blocks belong to assistant turns%s.", "");
    json_t *t = json_object_get(b, "thinking");
    if (!json_is_string(t) || !json_string_length(t)) /* redacted_thinking: nothing to read */
        return SP_OK;
    if (!o->thinking)
        return (o->thinking = json_deep_copy(t)) ? SP_OK : SP_ERR_NOMEM;
    size_t n = json_string_length(o->thinking), m = json_string_length(t);
    char *s = malloc(n + m + 1);
    if (!s)
        return SP_ERR_NOMEM;
    memcpy(s, json_string_value(o->thinking), n);
    memcpy(s + n, json_string_value(t), m);
    int bad = json_string_setn_nocheck(o->thinking, s, n + m);
    free(s);
    return bad ? SP_ERR_NOMEM : SP_OK;
}

static sp_status sp_block_tool_use(const json_t *b, const char *param, struct sp_blocks *o, struct sp_api_error *err)
{
    json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
    if (!o->assistant || !json_is_string(id) || !json_is_string(name) || !json_is_object(in))
        return sp_bad(err, param, "Invalid '%s': a tool_use block (in an assistant turn) needs 'id', 'name' "
                                  "and an object 'input'%s.", "");
    char *args = json_dumps(in, JSON_COMPACT);
    json_t *c = json_object(), *fn = json_object();
    json_object_set(c, "id", id);
    json_object_set_new(c, "type", json_string("function"));
    json_object_set(fn, "name", name);
    json_object_set_new(fn, "arguments", json_string(args ? args : "{}"));
    free(args);
    json_object_set_new(c, "function", fn);
    return json_array_append_new(o->calls, c) ? SP_ERR_NOMEM : SP_OK;
}

static sp_status sp_block_tool_result(const json_t *b, const char *param, struct sp_blocks *o,
                                      struct sp_api_error *err)
{
    json_t *id = json_object_get(b, "tool_use_id"), *content = json_object_get(b, "content");
    if (o->assistant || !json_is_string(id))
        return sp_bad(err, param, "Invalid '%s': a tool_result block (in a user turn) needs 'tool_use_id'%s.", "");
    char *text = NULL;
    char cparam[80];
    snprintf(cparam, sizeof cparam, "%s.content", param);
    sp_status st = content ? sp_blocks_text(content, cparam, &text, err) : SP_OK;
    if (st != SP_OK)
        return st;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("tool"));
    json_object_set(m, "tool_call_id", id);
    json_object_set_new(m, "content", json_string(text ? text : ""));
    free(text);
    return json_array_append_new(o->results, m) ? SP_ERR_NOMEM : SP_OK;
}

static const struct {
    const char *type;
    sp_status (*read)(const json_t *b, const char *param, struct sp_blocks *o, struct sp_api_error *err);
} sp_anthropic_blocks[] = {
    {"text", sp_block_text}, {"thinking", sp_block_thinking}, {"redacted_thinking", sp_block_thinking},
    {"tool_use", sp_block_tool_use}, {"tool_result", sp_block_tool_result},
};

/* Block k of message i, by its type (images, documents and the rest: 400). */
static sp_status sp_anthropic_block(const json_t *b, size_t i, size_t k, struct sp_blocks *o,
                                    struct sp_api_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages.%zu.content.%zu", i, k);
    const char *type = json_string_value(json_object_get(b, "type"));
    if (!json_is_object(b) || !type)
        return sp_bad(err, param, "Invalid '%s': expected a content block with a 'type'%s.", "");
    for (size_t t = 0; t < sizeof sp_anthropic_blocks / sizeof sp_anthropic_blocks[0]; t++)
        if (!strcmp(type, sp_anthropic_blocks[t].type))
            return sp_anthropic_blocks[t].read(b, param, o, err);
    return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", param,
                       "Invalid '%s': '%.40s' blocks are not supported by this server.", param, type);
}

/* messages (and system) into OpenAI's messages. */
static sp_status sp_anthropic_messages(const json_t *root, json_t *msgs, struct sp_api_error *err)
{
    json_t *sys = json_object_get(root, "system"), *m = json_object_get(root, "messages");
    if (sys && !json_is_null(sys)) {
        char *text = NULL;
        sp_status st = sp_blocks_text(sys, "system", &text, err);
        if (st != SP_OK)
            return st;
        json_t *s = json_object();
        json_object_set_new(s, "role", json_string("system"));
        json_object_set_new(s, "content", json_string(text));
        free(text);
        json_array_append_new(msgs, s);
    }
    if (!json_is_array(m) || !json_array_size(m))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "messages",
                           "'messages': expected a non-empty list of messages.");
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i), *content = json_object_get(msg, "content");
        const char *role = json_string_value(json_object_get(msg, "role"));
        char param[48];
        snprintf(param, sizeof param, "messages.%zu.role", i);
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return sp_bad(err, param, "Invalid '%s': expected 'user' or 'assistant'%s.", "");
        bool assistant = !strcmp(role, "assistant");
        if (assistant && i + 1 == json_array_size(m))
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "messages",
                               "A final assistant message (a prefill to continue) is not supported by this server.");
        json_t *parts = json_array(), *calls = json_array(), *results = json_array();
        struct sp_blocks blocks = {parts, calls, results, assistant, NULL};
        sp_status st = SP_OK;
        if (json_is_string(content)) {
            json_t *part = json_object();
            json_object_set_new(part, "type", json_string("text"));
            json_object_set(part, "text", content);
            json_array_append_new(parts, part);
        } else if (json_is_array(content)) {
            for (size_t k = 0; k < json_array_size(content) && st == SP_OK; k++)
                st = sp_anthropic_block(json_array_get(content, k), i, k, &blocks, err);
        } else {
            snprintf(param, sizeof param, "messages.%zu.content", i);
            st = sp_bad(err, param, "Invalid '%s': expected a string or a list of content blocks%s.", "");
        }
        json_array_extend(msgs, results); /* the results answer the previous turn's calls */
        if (st == SP_OK && (json_array_size(parts) || (assistant && json_array_size(calls)) ||
                            !json_array_size(results))) {
            json_t *o = json_object();
            json_object_set_new(o, "role", json_string(role));
            json_object_set(o, "content", json_array_size(parts) || !assistant ? parts : json_null());
            if (json_array_size(calls))
                json_object_set(o, "tool_calls", calls);
            if (blocks.thinking)
                json_object_set(o, "reasoning_content", blocks.thinking);
            json_array_append_new(msgs, o);
        }
        json_decref(blocks.thinking);
        json_decref(parts);
        json_decref(calls);
        json_decref(results);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

/* tools and tool_choice into OpenAI's. */
static sp_status sp_anthropic_tools(const json_t *root, json_t *oai, struct sp_api_error *err)
{
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return sp_bad(err, "tools", "Invalid '%s': expected a list of tools%s.", "");
        json_t *out = json_array();
        json_object_set_new(oai, "tools", out);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *fn = json_object();
            const char *type = json_string_value(json_object_get(t, "type"));
            char param[32];
            snprintf(param, sizeof param, "tools.%zu", i);
            if (type && strcmp(type, "custom")) {
                json_decref(fn);
                return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", param,
                                   "Invalid '%s': server tools ('%.40s') are not supported by this server.", param,
                                   type);
            }
            json_object_set(fn, "name", json_object_get(t, "name"));
            if (json_object_get(t, "description"))
                json_object_set(fn, "description", json_object_get(t, "description"));
            if (json_object_get(t, "input_schema"))
                json_object_set(fn, "parameters", json_object_get(t, "input_schema"));
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string("function"));
            json_object_set_new(o, "function", fn);
            json_array_append_new(out, o);
        }
    }
    if (!choice || json_is_null(choice))
        return SP_OK;
    const char *type = json_string_value(json_object_get(choice, "type"));
    json_t *name = json_object_get(choice, "name"), *dis = json_object_get(choice, "disable_parallel_tool_use");
    /* Anthropic's choice -> OpenAI's; "tool" names the function */
    static const char *const choices[][2] = {{"auto", "auto"}, {"none", "none"}, {"any", "required"}, {"tool", NULL}};
    size_t k = 0;
    while (type && k < sizeof choices / sizeof choices[0] && strcmp(type, choices[k][0]))
        k++;
    if (!type || k == sizeof choices / sizeof choices[0] || (!choices[k][1] && !json_is_string(name)))
        return sp_bad(err, "tool_choice", "Invalid '%s': expected type auto, any, none, or tool with a name%s.", "");
    if (choices[k][1]) {
        json_object_set_new(oai, "tool_choice", json_string(choices[k][1]));
    } else {
        json_t *c = json_object(), *fn = json_object();
        json_object_set(fn, "name", name);
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", fn);
        json_object_set_new(oai, "tool_choice", c);
    }
    if (json_is_true(dis))
        json_object_set_new(oai, "parallel_tool_calls", json_false());
    return SP_OK;
}

/* thinking.budget_tokens into *budget (0: none): only with type enabled,
 * a positive integer below max_tokens (as Anthropic's API has it). */
static sp_status sp_anthropic_budget(const json_t *root, const json_t *thinking, bool enabled, json_int_t *budget,
                                     struct sp_api_error *err)
{
    json_t *b = json_object_get(thinking, "budget_tokens"), *max = json_object_get(root, "max_tokens");
    *budget = 0;
    if (!b || json_is_null(b))
        return SP_OK;
    if (!enabled)
        return sp_bad(err, "thinking.budget_tokens", "Invalid '%s': only thinking of type enabled has a budget%s.",
                      "");
    if (!json_is_integer(b) || json_integer_value(b) < 1)
        return sp_bad(err, "thinking.budget_tokens", "Invalid '%s': expected a positive integer%s.", "");
    if (json_is_integer(max) && json_integer_value(b) >= json_integer_value(max))
        return sp_bad(err, "thinking.budget_tokens", "Invalid '%s': max_tokens must be greater than it%s.", "");
    *budget = json_integer_value(b);
    return SP_OK;
}

/* thinking and output_config: the template's variables and response_format;
 * *budget: thinking's token budget (0: none). */
static sp_status sp_anthropic_config(const json_t *root, json_t *oai, json_int_t *budget, struct sp_api_error *err)
{
    json_t *thinking = json_object_get(root, "thinking"), *oc = json_object_get(root, "output_config");
    json_t *kw = json_object_get(oai, "chat_template_kwargs");
    if (thinking && !json_is_null(thinking)) {
        /* thinking's type -> the template's enable_thinking */
        static const struct {
            const char *type;
            bool on;
        } modes[] = {{"enabled", true}, {"adaptive", true}, {"disabled", false}};
        const char *type = json_string_value(json_object_get(thinking, "type"));
        size_t k = 0;
        while (type && k < sizeof modes / sizeof modes[0] && strcmp(type, modes[k].type))
            k++;
        if (!type || k == sizeof modes / sizeof modes[0])
            return sp_bad(err, "thinking.type", "Invalid '%s': expected enabled, adaptive or disabled%s.", "");
        sp_status st = sp_anthropic_budget(root, thinking, k == 0, budget, err);
        if (st != SP_OK)
            return st;
        if (!json_is_object(kw)) {
            kw = json_object();
            json_object_set_new(oai, "chat_template_kwargs", kw);
        }
        json_object_set_new(kw, "enable_thinking", json_boolean(modes[k].on));
    }
    if (!oc || json_is_null(oc))
        return SP_OK;
    if (!json_is_object(oc))
        return sp_bad(err, "output_config", "Invalid '%s': expected an object%s.", "");
    json_t *format = json_object_get(oc, "format"), *effort = json_object_get(oc, "effort");
    const char *k;
    json_t *v;
    json_object_foreach(oc, k, v) {
        if (strcmp(k, "format") && strcmp(k, "effort"))
            return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", "output_config",
                               "Unrecognized field in 'output_config': %.60s", k);
    }
    if (json_is_string(effort)) {
        if (!json_is_object(kw)) {
            kw = json_object();
            json_object_set_new(oai, "chat_template_kwargs", kw);
        }
        json_object_set(kw, "reasoning_effort", effort);
    }
    if (format && !json_is_null(format)) {
        const char *type = json_string_value(json_object_get(format, "type"));
        json_t *schema = json_object_get(format, "schema");
        if (!type || strcmp(type, "json_schema") || !json_is_object(schema))
            return sp_bad(err, "output_config.format",
                          "Invalid '%s': expected {\"type\": \"json_schema\", \"schema\": {...}}%s.", "");
        json_t *rf = json_object(), *js = json_object();
        json_object_set_new(js, "name", json_string("output"));
        json_object_set(js, "schema", schema);
        json_object_set_new(rf, "type", json_string("json_schema"));
        json_object_set_new(rf, "json_schema", js);
        json_object_set_new(oai, "response_format", rf);
    }
    return SP_OK;
}

/* The request into OpenAI's chat shape (count: count_tokens, no max_tokens);
 * *budget: thinking's token budget (0: none). */
static sp_status sp_anthropic_translate(const json_t *root, json_t *oai, bool count, json_int_t *budget,
                                        struct sp_api_error *err)
{
    sp_status st = sp_dialect_check_fields(root, sp_anthropic_fields,
                                           sizeof sp_anthropic_fields / sizeof sp_anthropic_fields[0], "", err);
    if (st != SP_OK)
        return st;
    json_t *model = json_object_get(root, "model"), *max = json_object_get(root, "max_tokens");
    if (!json_is_string(model))
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "model", "model: Field required");
    if (!count && !max)
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "max_tokens",
                           "max_tokens: Field required");
    json_object_set(oai, "model", model);
    sp_dialect_copy_extensions(oai, root);
    static const char *const same[] = {"max_tokens", "temperature", "top_p", "top_k", "stream"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(root, same[i]);
        if (v && !json_is_null(v) && !(count && i == 0))
            json_object_set(oai, same[i], v);
    }
    json_t *t = json_object_get(root, "temperature");
    if (json_is_number(t) && json_number_value(t) > 1.0)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "temperature",
                           "temperature: Input should be less than or equal to 1");
    json_t *stop = json_object_get(root, "stop_sequences");
    if (stop && !json_is_null(stop))
        json_object_set(oai, "stop", stop);
    json_t *msgs = json_array();
    json_object_set_new(oai, "messages", msgs);
    if ((st = sp_anthropic_messages(root, msgs, err)) != SP_OK || (st = sp_anthropic_tools(root, oai, err)) != SP_OK)
        return st;
    return sp_anthropic_config(root, oai, budget, err);
}

static sp_status sp_anthropic_parse(struct sp_api_request *out, enum sp_api_kind kind, const char *body, size_t len,
                                    size_t item, const sp_model *model, const struct sp_api_limits *lim,
                                    struct sp_api_error *err)
{
    (void)kind;
    (void)item;
    memset(out, 0, sizeof *out);
    json_t *root = sp_dialect_load(body, len, err), *oai = json_object();
    json_int_t budget = 0;
    sp_status st = root ? sp_anthropic_translate(root, oai, false, &budget, err) : SP_ERR_ARG;
    if (st == SP_OK)
        st = sp_dialect_parse(out, SP_API_CHAT, oai, model, lim, err, sp_anthropic_names,
                              sizeof sp_anthropic_names / sizeof sp_anthropic_names[0]);
    /* budget < max_tokens <= the context: an int32_t */
    if (st == SP_OK && budget > 0 && (st = sp_think_budget_attach(out, model, (int32_t)budget)) != SP_OK) {
        sp_api_request_free(out);
        sp_api_fail(err, 500, "api_error", NULL, NULL, "%s", st == SP_ERR_NOMEM ? "out of memory"
                                                                : "the thinking budget's close tag does not tokenize");
    }
    json_decref(oai);
    json_decref(root);
    return st;
}

/* POST /v1/messages/count_tokens: the prompt's tokens, nothing generated. */
char *sp_anthropic_count_tokens(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    json_t *root = sp_dialect_load(ctx->body, ctx->len, err), *oai = json_object();
    struct sp_api_request r;
    char *body = NULL;
    memset(&r, 0, sizeof r);
    json_int_t budget = 0;
    sp_status st = root ? sp_anthropic_translate(root, oai, true, &budget, err) : SP_ERR_ARG;
    if (st == SP_OK && json_object_get(oai, "stream")) {
        json_object_del(oai, "stream"); /* a count does not stream */
    }
    if (st == SP_OK)
        st = sp_dialect_parse(&r, SP_API_CHAT, oai, ctx->model, ctx->lim, err, sp_anthropic_names,
                              sizeof sp_anthropic_names / sizeof sp_anthropic_names[0]);
    if (st == SP_OK) {
        json_t *o = json_object();
        json_object_set_new(o, "input_tokens", json_integer((json_int_t)r.n_prompt));
        if (!(body = sp_json_dump_free(o)))
            sp_api_fail(err, 500, "api_error", NULL, NULL, "out of memory");
    }
    sp_api_request_free(&r);
    json_decref(oai);
    json_decref(root);
    return body;
}

/* {"type": "error", "error": {"type", "message"}}: Anthropic's error types by status. */
static char *sp_anthropic_error(const struct sp_api_error *e)
{
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
                 {404, "not_found_error"}, {405, "invalid_request_error"}, {413, "request_too_large"},
                 {422, "invalid_request_error"}, {429, "rate_limit_error"}, {503, "overloaded_error"}};
    const char *type = e->http_status >= 500 ? "api_error" : "invalid_request_error";
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].status == e->http_status)
            type = types[i].type;
    json_t *inner = json_object(), *o = json_object();
    json_object_set_new(inner, "type", json_string(type));
    json_object_set_new(inner, "message", sp_json_text(e->message, strlen(e->message)));
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", inner);
    return sp_json_dump_free(o);
}

/* ---- the answer ---- */

/* Streaming: the content block open now. */
struct sp_anthropic_state {
    int open;               /* index of the open block; -1: none */
    enum sp_delta_kind kind; /* its kind (TEXT, REASONING or CALL) */
    int next;               /* the next block's index */
};

static sp_status sp_anthropic_init(struct sp_resp *r)
{
    struct sp_anthropic_state *s = calloc(1, sizeof *s);
    if (!s)
        return SP_ERR_NOMEM;
    s->open = -1;
    r->state = s;
    memcpy(r->id, "msg_", 4); /* msg_ and the response's random hex */
    memmove(r->id + 4, strchr(r->id, '-') + 1, strlen(strchr(r->id, '-') + 1) + 1);
    return SP_OK;
}

static void sp_anthropic_free(struct sp_resp *r)
{
    free(r->state);
}

static void sp_anthropic_retry(struct sp_resp *r, int choice)
{
    (void)choice;
    struct sp_anthropic_state *s = r->state;
    s->open = -1;
    s->next = 0;
}

static const char *sp_stop_reason(enum sp_finish f, bool calls, const char *stop)
{
    return f != SP_FINISH_STOP ? "max_tokens" : calls ? "tool_use" : stop ? "stop_sequence" : "end_turn";
}

static json_t *sp_anthropic_usage(const struct sp_resp *r)
{
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(r->usage.prompt_tokens - r->usage.cached_tokens));
    json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(r->usage.cached_tokens));
    json_object_set_new(u, "output_tokens", json_integer(r->usage.completion_tokens));
    return u;
}

static json_t *sp_anthropic_message(const struct sp_resp *r, json_t *content)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(r->id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", sp_json_text(r->model, strlen(r->model)));
    json_object_set_new(m, "content", content);
    return m;
}

static char *sp_anthropic_body(struct sp_resp *r)
{
    struct sp_choice_view v;
    sp_resp_choice(r, 0, &v);
    json_t *content = json_array();
    if (v.n_reasoning) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("thinking"));
        json_object_set_new(b, "thinking", sp_json_text(v.reasoning, v.n_reasoning));
        json_object_set_new(b, "signature", json_string(""));
        json_array_append_new(content, b);
    }
    if (v.len || !v.calls) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", sp_json_text(v.text, v.len));
        json_array_append_new(content, b);
    }
    for (size_t i = 0; v.calls && i < json_array_size(v.calls); i++) {
        json_t *c = json_array_get(v.calls, i), *fn = json_object_get(c, "function"), *b = json_object();
        json_object_set_new(b, "type", json_string("tool_use"));
        json_object_set(b, "id", json_object_get(c, "id"));
        json_object_set(b, "name", json_object_get(fn, "name"));
        json_object_set_new(b, "input", sp_dialect_args(json_string_value(json_object_get(fn, "arguments"))));
        json_array_append_new(content, b);
    }
    json_t *m = sp_anthropic_message(r, content);
    json_object_set_new(m, "stop_reason", json_string(sp_stop_reason(v.finish, v.tool_calls, v.stop_sequence)));
    json_object_set_new(m, "stop_sequence", v.stop_sequence ? json_string(v.stop_sequence) : json_null());
    json_object_set_new(m, "usage", sp_anthropic_usage(r));
    return sp_json_dump_free(m);
}

static sp_status sp_anthropic_start(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    json_t *m = sp_anthropic_message(r, json_array());
    json_object_set_new(m, "stop_reason", json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(r->usage.prompt_tokens));
    json_object_set_new(u, "output_tokens", json_integer(0));
    json_object_set_new(m, "usage", u);
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string("message_start"));
    json_object_set_new(e, "message", m);
    return sp_out_sse("message_start", e, out, len, cap);
}

static sp_status sp_anthropic_event(const char *type, int index, const char *key, json_t *value, char **out,
                                    size_t *len, size_t *cap)
{
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "index", json_integer(index));
    if (key)
        json_object_set_new(e, key, value);
    return sp_out_sse(type, e, out, len, cap);
}

static sp_status sp_anthropic_close(struct sp_anthropic_state *s, char **out, size_t *len, size_t *cap)
{
    if (s->open < 0)
        return SP_OK;
    int i = s->open;
    s->open = -1;
    return sp_anthropic_event("content_block_stop", i, NULL, NULL, out, len, cap);
}

/* Opens a block of kind k unless one is open (a call always opens its own). */
static sp_status sp_anthropic_open(struct sp_anthropic_state *s, const struct sp_delta *d, char **out, size_t *len,
                                   size_t *cap)
{
    if (s->open >= 0 && s->kind == d->kind && d->kind != SP_DELTA_CALL)
        return SP_OK;
    sp_status st = sp_anthropic_close(s, out, len, cap);
    if (st != SP_OK)
        return st;
    json_t *b = json_object();
    if (d->kind == SP_DELTA_REASONING) {
        json_object_set_new(b, "type", json_string("thinking"));
        json_object_set_new(b, "thinking", json_string(""));
        json_object_set_new(b, "signature", json_string(""));
    } else if (d->kind == SP_DELTA_CALL) {
        json_object_set_new(b, "type", json_string("tool_use"));
        json_object_set_new(b, "id", json_string(d->id));
        json_object_set_new(b, "name", sp_json_text(d->text, d->len));
        json_object_set_new(b, "input", json_object());
    } else {
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", json_string(""));
    }
    s->open = s->next++;
    s->kind = d->kind;
    return sp_anthropic_event("content_block_start", s->open, "content_block", b, out, len, cap);
}

static sp_status sp_anthropic_delta(struct sp_resp *r, const struct sp_delta *d, char **out, size_t *len,
                                    size_t *cap)
{
    struct sp_anthropic_state *s = r->state;
    sp_status st;
    if (d->kind == SP_DELTA_FINISH) {
        if ((st = sp_anthropic_close(s, out, len, cap)) != SP_OK)
            return st;
        json_t *delta = json_object(), *u = json_object(), *e = json_object();
        json_object_set_new(delta, "stop_reason", json_string(sp_stop_reason(d->finish, d->tool_calls,
                                                                               d->stop_sequence)));
        json_object_set_new(delta, "stop_sequence", d->stop_sequence ? json_string(d->stop_sequence) : json_null());
        json_object_set_new(u, "output_tokens", json_integer(r->usage.completion_tokens));
        json_object_set_new(e, "type", json_string("message_delta"));
        json_object_set_new(e, "delta", delta);
        json_object_set_new(e, "usage", u);
        return sp_out_sse("message_delta", e, out, len, cap);
    }
    if (d->kind != SP_DELTA_ARGS && (st = sp_anthropic_open(s, d, out, len, cap)) != SP_OK)
        return st;
    if (d->kind == SP_DELTA_CALL || s->open < 0)
        return SP_OK;
    static const char *const types[] = {"text_delta", "thinking_delta", "", "input_json_delta"};
    static const char *const keys[] = {"text", "thinking", "", "partial_json"};
    json_t *delta = json_object();
    json_object_set_new(delta, "type", json_string(types[d->kind]));
    json_object_set_new(delta, keys[d->kind], sp_json_text(d->text, d->len));
    return sp_anthropic_event("content_block_delta", s->open, "delta", delta, out, len, cap);
}

static sp_status sp_anthropic_end(struct sp_resp *r, char **out, size_t *len, size_t *cap)
{
    (void)r;
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string("message_stop"));
    return sp_out_sse("message_stop", e, out, len, cap);
}

static sp_status sp_anthropic_stream_error(struct sp_resp *r, const struct sp_api_error *err, char **out,
                                           size_t *len, size_t *cap)
{
    (void)r;
    char *body = sp_anthropic_error(err);
    json_error_t jerr;
    json_t *e = body ? json_loads(body, 0, &jerr) : NULL;
    free(body);
    return sp_out_sse("error", e, out, len, cap);
}

static const struct sp_resp_ops sp_anthropic_ops = {
    .init = sp_anthropic_init,
    .free = sp_anthropic_free,
    .start = sp_anthropic_start,
    .delta = sp_anthropic_delta,
    .end = sp_anthropic_end,
    .error = sp_anthropic_stream_error,
    .retry = sp_anthropic_retry,
    .body = sp_anthropic_body,
};

const struct sp_dialect sp_dialect_anthropic = {
    .name = "anthropic",
    .parse = sp_anthropic_parse,
    .error_body = sp_anthropic_error,
    .stream_type = "text/event-stream",
    .resp = &sp_anthropic_ops,
};
