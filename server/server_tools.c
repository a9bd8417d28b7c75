/* The tool-calling fields of a chat request (see server_schema.h): `tools`,
 * `tool_choice`, `parallel_tool_calls`, and the tool_calls and tool results
 * of the messages.  The format knowledge is the library's (sp_toolcall_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_schema.h"

#define SP_API_INVALID "invalid_request_error"

/* v as JSON text (malloc'd) into *out; NULL stays NULL.  False when out of memory. */
static bool sp_json_text_of(const json_t *v, char **out)
{
    *out = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    return !v || *out;
}

sp_status sp_api_parse_tools(struct sp_api_request *r, const json_t *root, const sp_model *model,
                             const struct sp_api_limits *lim, struct sp_api_error *err)
{
    const json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    const json_t *parallel = json_object_get(root, "parallel_tool_calls");
    if (json_is_null(tools))
        tools = NULL;
    if (!tools) {
        const char *k = choice && !json_is_null(choice) ? "tool_choice"
                        : parallel && !json_is_null(parallel) ? "parallel_tool_calls" : NULL;
        if (k)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", k,
                               "Invalid value for '%s': it is only allowed when 'tools' are given.", k);
        return SP_OK;
    }
    char param[64], *tools_text, *choice_text = NULL, *parallel_text = NULL;
    sp_status st = SP_ERR_NOMEM;
    if (sp_json_text_of(tools, &tools_text) && sp_json_text_of(choice, &choice_text) &&
        sp_json_text_of(parallel, &parallel_text))
        st = sp_toolcall_create(model, tools_text, choice_text, parallel_text, param, sizeof param, &r->tools);
    free(tools_text);
    free(choice_text);
    free(parallel_text);
    if (st == SP_ERR_NOMEM)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != SP_OK)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param, "%s", sp_error_message());
    if (sp_toolcall_choice_of(r->tools) == SP_TOOLCALL_NONE)
        return SP_OK;
    if (r->grammar)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "tools",
                           "'tools' cannot be combined with response_format, grammar or json_schema "
                           "(unless tool_choice is none).");
    char *gbnf = NULL;
    const char *trigger = NULL;
    st = sp_toolcall_grammar(r->tools, &gbnf, &trigger);
    if (st == SP_OK)
        st = sp_grammar_cache_get(lim->gcache, SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), trigger, &r->grammar, NULL);
    sp_free(gbnf);
    if (st == SP_ERR_NOMEM)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != SP_OK)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "tools",
                           "Invalid 'tools': the calls' grammar failed: %s", sp_error_message());
    r->gp.grammar = r->grammar;
    r->gp.validate = sp_toolcall_check;
    r->gp.validate_ctx = r->tools;
    return SP_OK;
}

/* tool_calls[j]: {"id": str, "type": "function", "function": {"name": str, "arguments": "<JSON object>"}}. */
static sp_status sp_check_call(const json_t *c, size_t i, size_t j, struct sp_api_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
    const json_t *fn = json_object_get(c, "function"), *type = json_object_get(c, "type");
    const json_t *args = json_object_get(fn, "arguments");
    if (!json_is_object(c) || !json_is_string(json_object_get(c, "id")) ||
        (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) ||
        !json_is_string(json_object_get(fn, "name")) || !json_is_string(args))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                           "Invalid '%s': expected {\"id\": ..., \"type\": \"function\", \"function\": "
                           "{\"name\": ..., \"arguments\": \"<JSON object>\"}}.", param);
    json_error_t jerr;
    json_t *o = json_loadb(json_string_value(args), json_string_length(args), 0, &jerr);
    bool ok = json_is_object(o);
    json_decref(o);
    if (!ok)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                           "Invalid '%s.function.arguments': not a JSON object.", param);
    return SP_OK;
}

sp_status sp_api_message_tools(const json_t *msg, size_t i, sp_chat_msg *out, struct sp_api_error *err)
{
    char param[48];
    const json_t *calls = json_object_get(msg, "tool_calls"), *id = json_object_get(msg, "tool_call_id");
    const json_t *name = json_object_get(msg, "name");
    if (calls && !json_is_null(calls)) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
        if (strcmp(out->role, "assistant") || !json_is_array(calls))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                               "Invalid '%s': only an assistant message has tool_calls, an array.", param);
        for (size_t j = 0; j < json_array_size(calls); j++)
            if (sp_check_call(json_array_get(calls, j), i, j, err) != SP_OK)
                return SP_ERR_ARG;
        char *text = NULL;
        if (json_array_size(calls) && !sp_json_text_of(calls, &text))
            return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        out->tool_calls = text;
    }
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
    if (!strcmp(out->role, "tool") && !json_is_string(id))
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", param,
                           "Missing required parameter: '%s' (a tool message answers one call).", param);
    if (id && !json_is_null(id) && (strcmp(out->role, "tool") || !json_is_string(id)))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                           "Invalid '%s': only a tool message has one, a string.", param);
    out->tool_call_id = json_string_value(id);
    snprintf(param, sizeof param, "messages[%zu].name", i);
    if (name && !json_is_null(name) && !json_is_string(name))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", param,
                           "Invalid type for '%s': expected a string.", param);
    out->name = json_string_value(name);
    return SP_OK;
}
