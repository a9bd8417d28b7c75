/* OpenAI request parsing and validation of the generation routes
 * (/v1/completions, /v1/chat/completions), the field readers, and small
 * JSON helpers (see server_schema.h).  The routes that generate nothing
 * (/tokenize, /detokenize, /v1/embeddings) are server_embed.c. */
#include "server/server_schema.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


void sp_api_limits_default(struct sp_api_limits *lim)
{
    memset(lim, 0, sizeof *lim);
    lim->n_ctx = 2048;
    lim->max_n = 8;
    lim->max_stop = 4;
    lim->max_stop_len = 1024;
    lim->max_logit_bias = 1024;
    lim->max_retries = 4;
    lim->max_prompts = 16;
}

bool sp_api_model_known(const char *model_id, const char *const *aliases, size_t n_aliases, const char *name)
{
    if (!model_id || !strcmp(name, model_id))
        return true;
    for (size_t i = 0; i < n_aliases; i++)
        if (!strcmp(name, aliases[i]))
            return true;
    return false;
}

sp_status sp_api_fail(struct sp_api_error *err, int http_status, const char *type,
                      const char *code, const char *param, const char *fmt, ...)
{
    va_list ap;
    err->http_status = http_status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return http_status >= 500 ? SP_ERR_NOMEM : SP_ERR_ARG;
}

json_t *sp_json_text(const char *s, size_t len)
{
    /* Fast path: already valid UTF-8 (jansson checks). */
    json_t *j = json_stringn(s ? s : "", s ? len : 0);
    if (j || !s)
        return j;
    /* Replace each invalid byte with U+FFFD; the result is at most 3x long. */
    char *buf = malloc(len * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (n <= 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
        } else {
            memcpy(buf + o, s + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

char *sp_json_dump_free(json_t *obj)
{
    if (!obj)
        return NULL;
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return s;
}

char *sp_api_error_body(const struct sp_api_error *err)
{
    json_t *e = json_object();
    if (!e)
        return NULL;
    json_object_set_new(e, "message", sp_json_text(err->message, strlen(err->message)));
    json_object_set_new(e, "type", json_string(err->type ? err->type : SP_API_INVALID));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    json_object_set_new(e, "code", err->code ? json_string(err->code) : json_null());
    json_t *root = json_object();
    if (!root) {
        json_decref(e);
        return NULL;
    }
    json_object_set_new(root, "error", e);
    return sp_json_dump_free(root);
}

json_t *sp_api_usage_json(const struct sp_api_usage *u)
{
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(u->cached_tokens));
    json_t *o = json_object();
    json_object_set_new(o, "prompt_tokens", json_integer(u->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(u->completion_tokens));
    json_object_set_new(o, "total_tokens",
                        json_integer((json_int_t)u->prompt_tokens + u->completion_tokens));
    json_object_set_new(o, "prompt_tokens_details", d);
    return o;
}

/* ---- field readers (server_schema.h) ---- */

json_t *sp_api_field(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

int sp_api_read_number(const json_t *obj, const char *key, double lo, double hi, double *out,
                       struct sp_api_error *err)
{
    json_t *v = sp_api_field(obj, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", key,
                    "Invalid type for '%s': expected a number.", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", key,
                    "Invalid value for '%s': %g is not in [%g, %g].", key, d, lo, hi);
        return -1;
    }
    *out = d;
    return 1;
}

int sp_api_read_int(const json_t *obj, const char *key, json_int_t lo, json_int_t hi,
                    json_int_t *out, struct sp_api_error *err)
{
    json_t *v = sp_api_field(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", key,
                    "Invalid type for '%s': expected an integer.", key);
        return -1;
    }
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", key,
                    "Invalid value for '%s': %lld is not in [%lld, %lld].", key, (long long)i,
                    (long long)lo, (long long)hi);
        return -1;
    }
    *out = i;
    return 1;
}

int sp_api_read_bool(const json_t *obj, const char *key, bool *out, struct sp_api_error *err)
{
    json_t *v = sp_api_field(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", key,
                    "Invalid type for '%s': expected a boolean.", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

static char *sp_strndup_json(const json_t *s)
{
    size_t n = json_string_length(s);
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, json_string_value(s), n);
        p[n] = '\0';
    }
    return p;
}

/* ---- pieces of a request ---- */

static sp_status sp_parse_stop(struct sp_api_request *r, const json_t *root,
                               const struct sp_api_limits *lim, struct sp_api_error *err)
{
    json_t *v = sp_api_field(root, "stop");
    if (!v)
        return SP_OK;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "stop",
                           "Invalid type for 'stop': expected a string or an array of strings.");
    if (n > (size_t)lim->max_stop)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "stop",
                           "Too many stop sequences: %zu (at most %d).", n, lim->max_stop);
    r->stop = calloc(n ? n : 1, sizeof *r->stop);
    if (!r->stop)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "stop",
                               "Invalid type for 'stop[%zu]': expected a string.", i);
        if (json_string_length(s) > lim->max_stop_len)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "stop",
                               "Stop sequence %zu is %zu bytes long (at most %zu).", i,
                               json_string_length(s), lim->max_stop_len);
        if (json_string_length(s) == 0 || memchr(json_string_value(s), 0, json_string_length(s)))
            continue; /* an empty stop string can never end anything useful */
        if (!(r->stop[r->n_stop] = sp_strndup_json(s)))
            return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        r->n_stop++;
    }
    r->gp.stop = (const char *const *)r->stop;
    r->gp.n_stop = r->n_stop;
    return SP_OK;
}

static sp_status sp_parse_logit_bias(struct sp_api_request *r, const json_t *root,
                                     const sp_model *model,
                                     const struct sp_api_limits *lim, struct sp_api_error *err)
{
    json_t *v = sp_api_field(root, "logit_bias");
    if (!v)
        return SP_OK;
    if (!json_is_object(v))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "logit_bias",
                           "Invalid type for 'logit_bias': expected an object.");
    size_t n = json_object_size(v);
    if (n > (size_t)lim->max_logit_bias)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "logit_bias",
                           "Too many logit_bias entries: %zu (at most %d).", n,
                           lim->max_logit_bias);
    r->bias = calloc(n ? n : 1, sizeof *r->bias);
    if (!r->bias)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    uint32_t n_vocab = model ? sp_model_n_vocab(model) : UINT32_MAX;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || errno || id < 0 || (unsigned long long)id >= n_vocab ||
            id > INT32_MAX)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "logit_bias",
                               "Invalid key in 'logit_bias': '%.40s' is not a token id of this "
                               "model.", key);
        if (!json_is_number(val))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "logit_bias",
                               "Invalid type for 'logit_bias[%.40s]': expected a number.", key);
        double b = json_number_value(val);
        if (!(b >= -100.0 && b <= 100.0))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "logit_bias",
                               "Invalid value for 'logit_bias[%.40s]': %g is not in [-100, 100].",
                               key, b);
        r->bias[r->n_bias].id = (sp_token)id;
        r->bias[r->n_bias].bias = b <= -100.0 ? -INFINITY : (float)b;
        r->n_bias++;
    }
    r->gp.sampling.logit_bias = r->bias;
    r->gp.sampling.n_logit_bias = r->n_bias;
    return SP_OK;
}

/* Tokenizes r->prompt_text into r->prompt (at most n_ctx tokens). */
static sp_status sp_tokenize_prompt(struct sp_api_request *r, const sp_model *model,
                                    const struct sp_api_limits *lim,
                                    struct sp_api_error *err)
{
    size_t cap = (size_t)lim->n_ctx + 1, n = 0;
    r->prompt = malloc(cap * sizeof *r->prompt);
    if (!r->prompt)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    sp_status st = sp_model_tokenize(model, r->prompt_text, strlen(r->prompt_text), true, true,
                                     r->prompt, cap, &n);
    if (st == SP_ERR_ARG && n > cap)
        return sp_api_fail(err, 400, SP_API_INVALID, "context_length_exceeded",
                           r->kind == SP_API_CHAT ? "messages" : "prompt",
                           "This model's maximum context length is %d tokens. However, your "
                           "prompt has %zu tokens.", lim->n_ctx, n);
    if (st != SP_OK)
        return sp_api_fail(err, 400, SP_API_INVALID, NULL,
                           r->kind == SP_API_CHAT ? "messages" : "prompt",
                           "The prompt could not be tokenized: %s", sp_error_message());
    r->n_prompt = n;
    return SP_OK;
}

/* One prompt (a string or a list of token ids) into r->prompt. */
static sp_status sp_parse_one_prompt(struct sp_api_request *r, const json_t *p, const sp_model *model,
                                     const struct sp_api_limits *lim, struct sp_api_error *err)
{
    if (json_is_string(p)) {
        if (!(r->prompt_text = sp_strndup_json(p)))
            return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        if (strlen(r->prompt_text) != json_string_length(p))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "prompt",
                               "Invalid value for 'prompt': it contains a NUL character.");
        return model ? sp_tokenize_prompt(r, model, lim, err) : SP_OK;
    }
    size_t n = json_array_size(p);
    if (n + 1 > (size_t)lim->n_ctx)
        return sp_api_fail(err, 400, SP_API_INVALID, "context_length_exceeded", "prompt",
                           "This model's maximum context length is %d tokens. However, your "
                           "prompt has %zu tokens.", lim->n_ctx, n);
    r->prompt = malloc((n ? n : 1) * sizeof *r->prompt);
    if (!r->prompt)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    uint32_t n_vocab = model ? sp_model_n_vocab(model) : (uint32_t)INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        json_int_t t = json_integer_value(json_array_get(p, i));
        if (t < 0 || t >= (json_int_t)n_vocab)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "prompt",
                               "Invalid token id in 'prompt': %lld.", (long long)t);
        r->prompt[i] = (sp_token)t;
    }
    r->n_prompt = n;
    return SP_OK;
}

/* Whether p is one prompt: a string or a list of token ids. */
static bool sp_is_one_prompt(const json_t *p)
{
    if (json_is_string(p))
        return true;
    if (!json_is_array(p))
        return false;
    for (size_t i = 0; i < json_array_size(p); i++)
        if (!json_is_integer(json_array_get(p, i)))
            return false;
    return true;
}

/* The text `echo` puts before a prompt's choices: the string as sent, or
 * the token ids detokenized (model NULL: none). */
static char *sp_echo_text(const json_t *p, const sp_model *model)
{
    if (json_is_string(p))
        return sp_strndup_json(p);
    size_t n = json_array_size(p), need = 0;
    sp_token *t = malloc((n ? n : 1) * sizeof *t);
    char *text = NULL;
    for (size_t i = 0; t && i < n; i++)
        t[i] = (sp_token)json_integer_value(json_array_get(p, i));
    if (t && model)
        sp_model_detokenize(model, t, n, false, NULL, 0, &need);
    if (t && (text = malloc(need + 1)) != NULL) {
        if (!model || sp_model_detokenize(model, t, n, false, text, need + 1, &need) != SP_OK)
            need = 0;
        text[need] = '\0';
    }
    free(t);
    return text;
}

/* `prompt`: a string, a list of token ids, or a batch (a list of those),
 * of which r takes prompt `item`; with echo, every prompt's text. */
static sp_status sp_parse_prompt(struct sp_api_request *r, const json_t *root, size_t item, bool echo,
                                 const sp_model *model, const struct sp_api_limits *lim,
                                 struct sp_api_error *err)
{
    json_t *p = sp_api_field(root, "prompt");
    if (!p)
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "prompt",
                           "Missing required parameter: 'prompt'.");
    bool batch = json_is_array(p) && json_array_size(p) > 0 && !sp_is_one_prompt(p);
    size_t n = batch ? json_array_size(p) : 1;
    for (size_t i = 0; i < n; i++)
        if (!sp_is_one_prompt(batch ? json_array_get(p, i) : p))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "prompt",
                               "Invalid type for 'prompt': expected a string, an array of token ids, "
                               "or an array of those (a batch).");
    if (n > (size_t)lim->max_prompts)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "prompt",
                           "Too many prompts in the batch: %zu (at most %d).", n, lim->max_prompts);
    if (item >= n)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "prompt",
                           "The batch has no prompt %zu.", item);
    r->n_batch = n;
    r->batch_item = item;
    if (echo && item == 0) {
        if (!(r->echo = calloc(n, sizeof *r->echo)))
            return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++)
            if (!(r->echo[i] = sp_echo_text(batch ? json_array_get(p, i) : p, model)))
                return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    return sp_parse_one_prompt(r, batch ? json_array_get(p, item) : p, model, lim, err);
}

/* A message's fields: role, content, name, tool_calls, tool_call_id and
 * reasoning_content (an assistant turn's reasoning, as llama-server reads it)
 * are read; refusal, annotations, audio and function_call, which OpenAI's own
 * answers carry and clients echo back, are accepted as labels when null (or
 * an empty annotations list).  Anything else is a 400 naming the field, as
 * sp_check_fields answers for the request's own fields. */
static sp_status sp_check_message_fields(const json_t *msg, size_t i, struct sp_api_error *err)
{
    static const char *const read[] = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"};
    static const char *const labels[] = {"refusal", "annotations", "audio", "function_call"};
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)msg, key, v) {
        bool known = false;
        for (size_t k = 0; k < sizeof read / sizeof read[0] && !known; k++)
            known = !strcmp(key, read[k]);
        if (known)
            continue;
        bool label = false;
        for (size_t k = 0; k < sizeof labels / sizeof labels[0] && !label; k++)
            label = !strcmp(key, labels[k]);
        if (label && (json_is_null(v) || (json_is_array(v) && !json_array_size(v))))
            continue;
        char param[96];
        snprintf(param, sizeof param, "messages[%zu].%.40s", i, key);
        if (label)
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", param,
                               "'%s' is not supported by this server (only null is accepted).",
                               param);
        return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", param,
                           "Unrecognized request argument supplied: %s", param);
    }
    return SP_OK;
}

/* The template's variables (sp_toolcall_chat_tokenize_vars): llama-server's
 * chat_template_kwargs (an object) and OpenAI's reasoning_effort (which
 * templates read as `reasoning_effort`), as JSON text in *out (NULL: none). */
static sp_status sp_template_vars(const json_t *root, char **out, struct sp_api_error *err)
{
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high"};
    json_t *kw = sp_api_field(root, "chat_template_kwargs"), *effort = sp_api_field(root, "reasoning_effort");
    *out = NULL;
    if (kw && !json_is_object(kw))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "chat_template_kwargs",
                           "Invalid type for 'chat_template_kwargs': expected an object.");
    bool known = false;
    for (size_t i = 0; effort && i < sizeof efforts / sizeof efforts[0]; i++)
        known = known || (json_is_string(effort) && !strcmp(json_string_value(effort), efforts[i]));
    if (effort && !known)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "reasoning_effort",
                           "Invalid value for 'reasoning_effort': expected none, minimal, low, medium or high.");
    json_t *old = kw ? json_object_get(kw, "reasoning_effort") : NULL;
    if (effort && old && !json_equal(old, effort))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "reasoning_effort",
                           "'reasoning_effort' and 'chat_template_kwargs.reasoning_effort' disagree.");
    if (!kw && !effort)
        return SP_OK;
    json_t *vars = kw ? json_deep_copy(kw) : json_object();
    if (vars && effort)
        json_object_set(vars, "reasoning_effort", effort);
    if (!vars || !(*out = json_dumps(vars, JSON_COMPACT)))
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    json_decref(vars);
    return *out ? SP_OK : SP_ERR_NOMEM;
}

/* Checks the messages array and renders it with the model's template into
 * prompt tokens (sp_chat_prompt: the same path as `spindle run --chat`).
 * This runs on the HTTP thread, as the completions prompt's tokenization
 * does: it reads only the immutable vocabulary, its errors are the
 * request's 400, and the scheduler's thread stays free for the step. */
static sp_status sp_parse_messages(struct sp_api_request *r, const json_t *root,
                                   const sp_model *model,
                                   const struct sp_api_limits *lim, struct sp_api_error *err)
{
    json_t *m = sp_api_field(root, "messages");
    if (!m)
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "messages",
                           "Missing required parameter: 'messages'.");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "messages",
                           "Invalid value for 'messages': expected a non-empty array.");
    size_t n = json_array_size(m);
    char *vars = NULL;
    sp_chat_msg *msgs = calloc(n, sizeof *msgs);
    char **joined = calloc(n, sizeof *joined); /* contents this function built from text parts */
    sp_status st = SP_OK;
    if (!msgs || !joined) {
        st = sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        goto free_msgs;
    }
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg)) {
            st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", param,
                             "Invalid type for '%s': expected an object.", param);
            goto free_msgs;
        }
        json_t *role = json_object_get(msg, "role");
        bool known = false;
        for (size_t k = 0; json_is_string(role) && k < sizeof roles / sizeof roles[0]; k++)
            known |= !strcmp(json_string_value(role), roles[k]);
        if (!known) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                             "Invalid value for '%s': expected one of system, developer, user, "
                             "assistant, tool.", param);
            goto free_msgs;
        }
        msgs[i].role = json_string_value(role);
        if ((st = sp_check_message_fields(msg, i, err)) != SP_OK)
            goto free_msgs;
        if ((st = sp_api_message_tools(msg, i, &msgs[i], err)) != SP_OK)
            goto free_msgs;
        json_t *reasoning = json_object_get(msg, "reasoning_content");
        if (reasoning && !json_is_null(reasoning) && !json_is_string(reasoning)) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", param,
                             "Invalid type for '%s': expected a string.", param);
            goto free_msgs;
        }
        msgs[i].reasoning_content = json_string_value(reasoning);
        json_t *content = json_object_get(msg, "content");
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (json_is_string(content)) {
            msgs[i].content = json_string_value(content);
            continue;
        }
        if ((!content || json_is_null(content)) && !strcmp(msgs[i].role, "assistant"))
            continue; /* an assistant turn with only tool calls */
        if (!json_is_array(content)) {
            st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", param,
                             "Invalid type for '%s': expected a string or an array of text "
                             "parts.", param);
            goto free_msgs;
        }
        /* Text parts are concatenated; other kinds (images, audio) are refused. */
        size_t total = 0;
        for (size_t k = 0; k < json_array_size(content); k++) {
            json_t *part = json_array_get(content, k);
            json_t *text = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(json_object_get(part, "type")) ||
                strcmp(json_string_value(json_object_get(part, "type")), "text") ||
                !json_is_string(text)) {
                st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param,
                                 "Invalid content part in '%s': only {\"type\": \"text\", "
                                 "\"text\": ...} parts are supported.", param);
                goto free_msgs;
            }
            total += json_string_length(text);
        }
        if (!(joined[i] = malloc(total + 1))) {
            st = sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            goto free_msgs;
        }
        size_t o = 0;
        for (size_t k = 0; k < json_array_size(content); k++) {
            json_t *text = json_object_get(json_array_get(content, k), "text");
            memcpy(joined[i] + o, json_string_value(text), json_string_length(text));
            o += json_string_length(text);
        }
        joined[i][o] = '\0';
        msgs[i].content = joined[i];
    }
    if ((st = sp_template_vars(root, &vars, err)) != SP_OK)
        goto free_msgs;
    if (model) {
        /* tool calls, results and the request's tools in the form the
         * template's tool-call format wants */
        st = sp_toolcall_chat_tokenize_vars(model, r->tools, msgs, n, vars, &r->prompt, &r->n_prompt);
        bool in_vars = st == SP_ERR_ARG && strstr(sp_error_message(), "template variable");
        if (st == SP_ERR_NOMEM)
            sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        else if (st != SP_OK)
            st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", in_vars ? "chat_template_kwargs" : "messages",
                             "The chat template failed on these messages: %s", sp_error_message());
    }
free_msgs:
    free(vars);
    for (size_t i = 0; joined && i < n; i++)
        free(joined[i]);
    for (size_t i = 0; msgs && i < n; i++)
        free((char *)msgs[i].tool_calls);
    free(joined);
    free(msgs);
    return st;
}

/* llama-server's reasoning_format: "none" leaves thinking in the answer;
 * "auto" (the default) and "deepseek" separate it when the template thinks. */
static sp_status sp_parse_reasoning_format(struct sp_api_request *r, const json_t *root, const sp_model *model,
                                           struct sp_api_error *err)
{
    json_t *f = sp_api_field(root, "reasoning_format");
    const char *v = json_string_value(f);
    if (f && (!v || (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "deepseek"))))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "reasoning_format",
                           "Invalid value for 'reasoning_format': expected none, auto or deepseek.");
    if (model && r->prompt && !(v && !strcmp(v, "none")))
        r->think = sp_think_mode_for(model, r->prompt, r->n_prompt);
    return SP_OK;
}

static sp_status sp_parse_sampling(struct sp_api_request *r, const json_t *root,
                                   const struct sp_api_limits *lim, struct sp_api_error *err)
{
    struct sp_sampler_params *sp = &r->gp.sampling;
    double d;
    json_int_t i;
    int got;
    /* Unset fields get the server's defaults (the model's recommendation or
     * llama-server's), not OpenAI's temperature 1 without truncation. */
    struct sp_sampler_params def;
    sp_sampler_params_default(&def);
    if (lim->defaults)
        def = *lim->defaults;
    sp->temperature = def.temperature;
    sp->top_k = def.top_k;
    sp->top_p = def.top_p;
    sp->min_p = def.min_p;
    sp->repeat_penalty = def.repeat_penalty;
    sp->repeat_last_n = def.repeat_last_n;
    if ((got = sp_api_read_number(root, "temperature", 0.0, 2.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->temperature = (float)d;
    if ((got = sp_api_read_number(root, "top_p", 0.0, 1.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->top_p = (float)d;
    if ((got = sp_api_read_int(root, "top_k", 0, INT32_MAX, &i, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->top_k = (int32_t)i;
    if ((got = sp_api_read_number(root, "min_p", 0.0, 1.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->min_p = (float)d;
    if ((got = sp_api_read_number(root, "presence_penalty", -2.0, 2.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->presence_penalty = (float)d;
    if ((got = sp_api_read_number(root, "frequency_penalty", -2.0, 2.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->frequency_penalty = (float)d;
    if (sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f)
        sp->repeat_last_n = -1; /* OpenAI's penalties count the whole completion */
    if ((got = sp_api_read_number(root, "repeat_penalty", 1e-3, 100.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->repeat_penalty = (float)d; /* llama-server's extension */
    if ((got = sp_api_read_int(root, "repeat_last_n", -1, INT32_MAX, &i, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->repeat_last_n = (int32_t)i; /* llama-server's: the penalties' window (-1: all) */
    if ((got = sp_api_read_number(root, "typical_p", 0.0, 1.0, &d, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        sp->typical_p = (float)d;
    /* mirostat: the sampler has none; 0 (llama-server's "off") is accepted,
     * and then its tau and eta change nothing */
    if ((got = sp_api_read_int(root, "mirostat", 0, 2, &i, err)) < 0)
        return SP_ERR_ARG;
    if (got && i != 0)
        return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "mirostat",
                           "'mirostat' %lld is not supported: spindle's sampler has no mirostat "
                           "(0, off, is accepted).", (long long)i);
    if (sp_api_read_number(root, "mirostat_tau", 0.0, 1e6, &d, err) < 0 ||
        sp_api_read_number(root, "mirostat_eta", 0.0, 1e6, &d, err) < 0)
        return SP_ERR_ARG;
    if (sp_api_read_int(root, "n_keep", -1, INT32_MAX, &i, err) < 0)
        return SP_ERR_ARG;
    bool b;
    if (sp_api_read_bool(root, "cache_prompt", &b, err) < 0)
        return SP_ERR_ARG;
    if ((got = sp_api_read_int(root, "seed", INT64_MIN, INT64_MAX, &i, err)) < 0)
        return SP_ERR_ARG;
    if (got) {
        sp->seed = (uint64_t)i;
        r->seed_set = true;
    }
    return SP_OK;
}

static sp_status sp_parse_logprobs(struct sp_api_request *r, const json_t *root,
                                   struct sp_api_error *err)
{
    json_int_t i;
    int got;
    json_int_t probs = 0;
    r->logprobs = -1;
    /* llama-server's n_probs: the top K of each token, OpenAI's logprobs
     * (completions) or logprobs with top_logprobs (chat); 0: none */
    if (sp_api_read_int(root, "n_probs", 0, SP_MAX_LOGPROBS, &probs, err) < 0)
        return SP_ERR_ARG;
    if (r->kind == SP_API_COMPLETIONS) {
        if ((got = sp_api_read_int(root, "logprobs", 0, SP_MAX_LOGPROBS, &i, err)) < 0)
            return SP_ERR_ARG;
        if (got && probs && i != probs)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "n_probs",
                               "'n_probs' %lld and 'logprobs' %lld disagree (give one).", (long long)probs,
                               (long long)i);
        if (got)
            r->logprobs = (int)i;
        else if (probs)
            r->logprobs = (int)probs;
    } else {
        bool on = false;
        int set_on = sp_api_read_bool(root, "logprobs", &on, err);
        if (set_on < 0)
            return SP_ERR_ARG;
        if ((got = sp_api_read_int(root, "top_logprobs", 0, SP_MAX_LOGPROBS, &i, err)) < 0)
            return SP_ERR_ARG;
        if (got && !on)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "top_logprobs",
                               "'top_logprobs' requires 'logprobs' to be true.");
        if (probs && ((set_on && !on) || (got && i != probs)))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "n_probs",
                               "'n_probs' %lld disagrees with 'logprobs'/'top_logprobs' (give one).",
                               (long long)probs);
        if (probs) {
            on = true;
            got = 1;
            i = probs;
        }
        r->chat_logprobs = on;
        if (on)
            r->logprobs = got ? (int)i : 0;
    }
    r->gp.logprobs = r->logprobs;
    r->gp.sampling.n_logprobs = r->logprobs > 0 ? r->logprobs : 0;
    return SP_OK;
}

/* ---- fields: every one is implemented, a label, or refused ---- */

/* Fields read by this parser (both endpoints unless marked).  Anything
 * else gets a 400: OpenAI's fields we do not implement name themselves,
 * unknown ones are "unrecognized", as OpenAI answers.  docs/server-api.md
 * ("Field policy") lists them. */
static const struct {
    const char *name;
    uint8_t kinds; /* 1: completions, 2: chat */
} sp_fields[] = {
    {"model", 3}, {"stream", 3}, {"stream_options", 3}, {"max_tokens", 3},
    {"max_completion_tokens", 2}, {"n", 3}, {"temperature", 3}, {"top_p", 3}, {"top_k", 3},
    {"min_p", 3}, {"typical_p", 3}, {"repeat_penalty", 3}, {"repeat_last_n", 3}, {"presence_penalty", 3},
    {"frequency_penalty", 3}, {"seed", 3}, {"logprobs", 3}, {"n_probs", 3}, {"explain", 3},
    {"top_logprobs", 2}, {"stop", 3}, {"logit_bias", 3}, {"timeout", 3}, {"ignore_eos", 3},
    {"prompt", 1}, {"echo", 1}, {"best_of", 1}, {"suffix", 1}, {"messages", 2},
    {"response_format", 3}, {"grammar", 3}, {"json_schema", 3}, {"max_retries", 3},
    {"tools", 2}, {"tool_choice", 2}, {"parallel_tool_calls", 2}, {"reasoning_format", 2},
    {"chat_template_kwargs", 2}, {"reasoning_effort", 2},
    {"mirostat", 3}, {"mirostat_tau", 3}, {"mirostat_eta", 3},
    /* labels: they change nothing in the answer (cache_prompt: the prefix
     * cache is always used and changes no token; n_keep: the context is
     * never shifted, an answer that fills it ends with "length") */
    {"user", 3}, {"metadata", 3}, {"store", 3}, {"service_tier", 3}, {"prompt_cache_key", 3},
    {"safety_identifier", 3}, {"cache_prompt", 3}, {"n_keep", 3},
};

/* tools and its companions are chat-only: on /v1/completions they name
 * themselves as unsupported too. */
static const char *const sp_unimplemented[] = {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "audio",
    "modalities", "prediction", "web_search_options", "verbosity",
};

static sp_status sp_check_fields(const json_t *root, enum sp_api_kind kind, struct sp_api_error *err)
{
    const char *key;
    json_t *v;
    uint8_t bit = kind == SP_API_CHAT ? 2 : 1;
    json_object_foreach((json_t *)root, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof sp_fields / sizeof sp_fields[0] && !known; i++)
            known = !strcmp(key, sp_fields[i].name) && (sp_fields[i].kinds & bit);
        if (known)
            continue;
        for (size_t i = 0; i < sizeof sp_unimplemented / sizeof sp_unimplemented[0]; i++)
            if (!strcmp(key, sp_unimplemented[i]))
                return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", key,
                                   "'%.60s' is not supported by this server.", key);
        return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", key,
                           "Unrecognized request argument supplied: %.60s", key);
    }
    return SP_OK;
}

/* Compiles one constraint and binds it to the served vocabulary (or takes
 * a copy of the one an earlier request compiled). */
static sp_status sp_constraint(struct sp_api_request *r, const char *text, size_t len, enum sp_grammar_kind kind,
                               const char *param, const struct sp_api_limits *lim, struct sp_api_error *err)
{
    sp_status st = sp_grammar_cache_get(lim->gcache, kind, text, len, NULL, &r->grammar, NULL);
    if (st == SP_ERR_NOMEM)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != SP_OK)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", param, "Invalid '%s': %s", param,
                           sp_error_message());
    r->gp.grammar = r->grammar;
    r->gp.validate = sp_grammar_check_text;
    r->gp.validate_ctx = r->grammar;
    return SP_OK;
}

/* response_format, and llama-server's `grammar` and `json_schema`: at most one. */
static sp_status sp_parse_constraint(struct sp_api_request *r, const json_t *root,
                                     const struct sp_api_limits *lim, struct sp_api_error *err)
{
    json_t *rf = sp_api_field(root, "response_format"), *g = sp_api_field(root, "grammar");
    json_t *js = sp_api_field(root, "json_schema");
    json_int_t i;
    int got;
    bool flexible = false;
    static const char any_object[] = "{\"type\":\"object\"}";
    r->gp.max_retries = lim->max_retries < 2 ? lim->max_retries : 2;
    if ((got = sp_api_read_int(root, "max_retries", 0, lim->max_retries, &i, err)) < 0)
        return SP_ERR_ARG;
    if (got)
        r->gp.max_retries = (int)i;
    const char *type = NULL;
    if (rf) {
        json_t *t = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(t))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "response_format",
                               "Invalid 'response_format': expected an object with a 'type'.");
        type = json_string_value(t);
        const char *k;
        json_t *v;
        json_object_foreach(rf, k, v) {
            if (strcmp(k, "type") && strcmp(k, "json_schema") && strcmp(k, "whitespace"))
                return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", "response_format",
                                   "Unrecognized field in 'response_format': %.60s", k);
        }
        if (strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema"))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "response_format.type",
                               "Invalid 'response_format.type': '%.40s' (expected text, json_object or "
                               "json_schema).", type);
        /* spindle's extension: "compact" (the default) or "flexible" (any
         * JSON whitespace between tokens) */
        json_t *ws = json_object_get(rf, "whitespace");
        if (ws) {
            const char *w = json_string_value(ws);
            if (!w || (strcmp(w, "compact") && strcmp(w, "flexible")))
                return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "response_format.whitespace",
                                   "Invalid 'response_format.whitespace': expected \"compact\" or \"flexible\".");
            if (!strcmp(type, "text"))
                return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "response_format.whitespace",
                                   "'response_format.whitespace' applies to json_object and json_schema, not text.");
            flexible = !strcmp(w, "flexible");
        }
    }
    int n = (type && strcmp(type, "text")) + (g != NULL) + (js != NULL);
    if (n > 1)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", g ? "grammar" : "json_schema",
                           "Give at most one of response_format (json_object/json_schema), grammar and "
                           "json_schema.");
    if (g) {
        if (!json_is_string(g))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "grammar",
                               "Invalid type for 'grammar': expected a string of GBNF.");
        return sp_constraint(r, json_string_value(g), json_string_length(g), SP_GRAMMAR_GBNF, "grammar", lim, err);
    }
    const json_t *schema = js;
    bool strict = false; /* response_format.json_schema.strict: objects closed (SP_GRAMMAR_SCHEMA_STRICT) */
    const char *param = "json_schema";
    if (type && !strcmp(type, "json_object"))
        return flexible ? sp_constraint(r, any_object, strlen(any_object), SP_GRAMMAR_SCHEMA_FLEX, "response_format",
                                        lim, err)
                        : sp_constraint(r, sp_grammar_json_object_gbnf(), strlen(sp_grammar_json_object_gbnf()),
                                        SP_GRAMMAR_GBNF, "response_format", lim, err);
    if (type && !strcmp(type, "json_schema")) {
        json_t *o = json_object_get(rf, "json_schema");
        if (!json_is_object(o) || !json_is_string(json_object_get(o, "name")))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "response_format.json_schema",
                               "Invalid 'response_format.json_schema': expected an object with a 'name'.");
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) {
            if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") && strcmp(k, "description"))
                return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", "response_format.json_schema",
                                   "Unrecognized field in 'response_format.json_schema': %.60s", k);
        }
        json_t *strict_v = json_object_get(o, "strict");
        strict = json_is_true(strict_v);
        if (strict_v && !json_is_boolean(strict_v) && !json_is_null(strict_v))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "response_format.json_schema.strict",
                               "Invalid type for 'response_format.json_schema.strict': expected a boolean.");
        schema = json_object_get(o, "schema");
        param = "response_format.json_schema.schema";
        if (!schema) /* no schema: any JSON object */
            return flexible ? sp_constraint(r, any_object, strlen(any_object), SP_GRAMMAR_SCHEMA_FLEX,
                                            "response_format", lim, err)
                            : sp_constraint(r, sp_grammar_json_object_gbnf(), strlen(sp_grammar_json_object_gbnf()),
                                            SP_GRAMMAR_GBNF, "response_format", lim, err);
    }
    if (!schema)
        return SP_OK;
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    sp_grammar_kind kind = strict ? (flexible ? SP_GRAMMAR_SCHEMA_STRICT_FLEX : SP_GRAMMAR_SCHEMA_STRICT)
                                  : (flexible ? SP_GRAMMAR_SCHEMA_FLEX : SP_GRAMMAR_SCHEMA);
    sp_status st = sp_constraint(r, text, strlen(text), kind, param,
                                 lim, err);
    free(text);
    return st;
}

/* Counts the JSON values of body (containers, strings, and the separators
 * between elements and members, which every other value follows) and its
 * nesting depth, without allocating: the parsed tree costs about 50 to
 * 250 bytes a value (more than 30 times the body for `[{},{},...]`), so
 * the count is checked before jansson builds it. */
static bool sp_json_within(const char *body, size_t len, size_t max_values, struct sp_api_error *err)
{
    size_t values = 0;
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = body[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
            values++;
        } else if (ch == '{' || ch == '[') {
            values++;
            if (++depth > SP_API_MAX_DEPTH) {
                sp_api_fail(err, 400, SP_API_INVALID, "invalid_request", NULL,
                            "The request body nests arrays and objects deeper than %d levels.", SP_API_MAX_DEPTH);
                return false;
            }
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',' || ch == ':') {
            values++;
        }
        if (values > max_values) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_request", NULL,
                        "The request body has more than %zu JSON values (arrays, objects, strings, numbers); "
                        "send fewer messages or elements.", max_values);
            return false;
        }
    }
    return true;
}

json_t *sp_api_json_load(const char *body, size_t len, size_t flags, size_t max_values, struct sp_api_error *err)
{
    json_error_t jerr;
    if (!body)
        body = "", len = 0;
    if (!sp_json_within(body, len, max_values, err))
        return NULL;
    json_t *root = json_loadb(body, len, flags, &jerr);
    if (!root)
        sp_api_fail(err, 400, SP_API_INVALID, NULL, NULL,
                    "We could not parse the JSON body of your request: %s (line %d, column %d).", jerr.text,
                    jerr.line, jerr.column);
    else if (!json_is_object(root)) {
        sp_api_fail(err, 400, SP_API_INVALID, NULL, NULL, "The request body must be a JSON object.");
        json_decref(root);
        root = NULL;
    }
    return root;
}

sp_status sp_api_request_parse(struct sp_api_request *out, enum sp_api_kind kind,
                               const char *body, size_t len, const sp_model *model,
                               const struct sp_api_limits *lim, struct sp_api_error *err)
{
    return sp_api_request_parse_item(out, kind, body, len, 0, model, lim, err);
}

sp_status sp_api_request_parse_item(struct sp_api_request *out, enum sp_api_kind kind, const char *body,
                                    size_t len, size_t item, const sp_model *model,
                                    const struct sp_api_limits *lim, struct sp_api_error *err)
{
    memset(out, 0, sizeof *out);
    /* the parse's memory is bounded by the count of values, not only the body's bytes */
    size_t max_values = (size_t)SP_API_MAX_VALUES + 2 * (size_t)(lim->n_ctx > 0 ? lim->n_ctx : 0);
    json_t *root = sp_api_json_load(body, len, JSON_REJECT_DUPLICATES, max_values, err);
    if (!root)
        return SP_ERR_ARG;
    sp_status st = sp_api_request_from_json(out, kind, root, item, model, lim, err);
    json_decref(root);
    return st;
}

sp_status sp_api_request_from_json(struct sp_api_request *out, enum sp_api_kind kind, const json_t *root,
                                   size_t item, const sp_model *model, const struct sp_api_limits *lim,
                                   struct sp_api_error *err)
{
    struct sp_api_request *r = out;
    sp_status st = SP_ERR_ARG;
    json_int_t i;
    double d;
    int got;
    bool b;

    memset(r, 0, sizeof *r);
    r->kind = kind;
    sp_gen_params_default(&r->gp);
    if (!json_is_object(root)) {
        sp_api_fail(err, 400, SP_API_INVALID, NULL, NULL,
                    "The request body must be a JSON object.");
        goto fail;
    }
    if ((st = sp_check_fields(root, kind, err)) != SP_OK)
        goto fail;
    st = SP_ERR_ARG;

    json_t *mname = sp_api_field(root, "model");
    if (mname && !json_is_string(mname)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "model",
                    "Invalid type for 'model': expected a string.");
        goto fail;
    }
    if (mname && !sp_api_model_known(lim->model_id, lim->aliases, lim->n_aliases, json_string_value(mname))) {
        sp_api_fail(err, 404, SP_API_INVALID, "model_not_found", "model",
                    "The model '%.100s' does not exist (this server serves '%.100s').",
                    json_string_value(mname), lim->model_id);
        goto fail;
    }
    if (mname && !(r->model = sp_strndup_json(mname))) {
        st = sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    static const char *const labels[] = {"user", "service_tier", "prompt_cache_key", "safety_identifier"};
    for (size_t k = 0; k < sizeof labels / sizeof labels[0]; k++) {
        json_t *v = sp_api_field(root, labels[k]);
        if (v && !json_is_string(v)) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", labels[k],
                        "Invalid type for '%s': expected a string.", labels[k]);
            goto fail;
        }
    }

    if (sp_api_read_bool(root, "stream", &r->stream, err) < 0)
        goto fail;
    json_t *so = sp_api_field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "stream_options",
                        "Invalid type for 'stream_options': expected an object.");
            goto fail;
        }
        if (!r->stream) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "stream_options",
                        "The 'stream_options' parameter is only allowed when 'stream' is "
                        "enabled.");
            goto fail;
        }
        if (sp_api_read_bool(so, "include_usage", &r->include_usage, err) < 0) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            goto fail;
        }
    }

    /* max_tokens: completions default to 16 as OpenAI's do; chat runs to
     * the end of the context. */
    r->gp.max_tokens = kind == SP_API_COMPLETIONS ? 16 : -1;
    if ((got = sp_api_read_int(root, "max_tokens", 1, lim->n_ctx, &i, err)) < 0)
        goto fail;
    if (got)
        r->gp.max_tokens = (int32_t)i;
    if ((got = sp_api_read_int(root, "max_completion_tokens", 1, lim->n_ctx, &i, err)) < 0)
        goto fail;
    if (got)
        r->gp.max_tokens = (int32_t)i;
    if ((got = sp_api_read_int(root, "n", 1, lim->max_n, &i, err)) < 0)
        goto fail;
    r->gp.n = got ? (int)i : 1;
    b = false;
    if (sp_api_read_bool(root, "ignore_eos", &b, err) < 0)
        goto fail;
    r->gp.ignore_eos = b;
    if ((got = sp_api_read_number(root, "timeout", 1e-3, 1e9, &d, err)) < 0)
        goto fail;
    if (got)
        r->timeout_s = (lim->max_timeout_s > 0 && d > lim->max_timeout_s) ? lim->max_timeout_s : d;

    /* Options we do not implement are refused rather than silently ignored. */
    bool echo = false;
    if (sp_api_read_bool(root, "echo", &echo, err) < 0)
        goto fail;
    if ((got = sp_api_read_int(root, "best_of", 1, 1, &i, err)) < 0) {
        snprintf(err->message, sizeof err->message, "'best_of' other than 1 is not supported.");
        goto fail;
    }
    if (sp_api_field(root, "suffix")) {
        sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "suffix",
                    "'suffix' is not supported by this server.");
        goto fail;
    }

    if ((st = sp_parse_sampling(r, root, lim, err)) != SP_OK)
        goto fail;
    /* spindle's extension (docs/server-api.md): each token's decoding stages */
    if (sp_api_read_bool(root, "explain", &r->gp.explain, err) < 0)
        goto fail;
    if ((st = sp_parse_logprobs(r, root, err)) != SP_OK)
        goto fail;
    st = SP_ERR_ARG;
    /* the prompt's tokens carry no logprobs here */
    if (echo && r->logprobs >= 0) {
        sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "echo",
                    "'echo' together with 'logprobs' is not supported (the prompt's tokens have no "
                    "logprobs here).");
        goto fail;
    }
    if ((st = sp_parse_stop(r, root, lim, err)) != SP_OK)
        goto fail;
    if ((st = sp_parse_logit_bias(r, root, model, lim, err)) != SP_OK)
        goto fail;
    if ((st = sp_parse_constraint(r, root, lim, err)) != SP_OK)
        goto fail;
    if (kind == SP_API_CHAT && (st = sp_api_parse_tools(r, root, model, lim, err)) != SP_OK)
        goto fail;
    if (kind == SP_API_COMPLETIONS)
        st = sp_parse_prompt(r, root, item, echo, model, lim, err);
    else
        st = sp_parse_messages(r, root, model, lim, err);
    if (st != SP_OK)
        goto fail;
    if (kind == SP_API_CHAT && (st = sp_parse_reasoning_format(r, root, model, err)) != SP_OK)
        goto fail;
    st = SP_ERR_ARG;
    if (r->prompt && r->n_prompt == 0) {
        st = sp_api_fail(err, 400, SP_API_INVALID, "invalid_value",
                         kind == SP_API_CHAT ? "messages" : "prompt",
                         "The prompt is empty (it has no tokens).");
        goto fail;
    }
    if (r->prompt && r->n_prompt + 1 > (size_t)lim->n_ctx) {
        st = sp_api_fail(err, 400, SP_API_INVALID, "context_length_exceeded",
                         kind == SP_API_CHAT ? "messages" : "prompt",
                         "This model's maximum context length is %d tokens. However, your "
                         "prompt has %zu tokens (one more is needed to generate).",
                         lim->n_ctx, r->n_prompt);
        goto fail;
    }
    return SP_OK;

fail:
    sp_api_request_free(r);
    return st == SP_OK ? SP_ERR_ARG : st;
}

void sp_api_request_free(struct sp_api_request *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->bias);
    free(r->prompt_text);
    free(r->prompt);
    for (size_t i = 0; r->echo && i < r->n_batch; i++)
        free(r->echo[i]);
    free(r->echo);
    free(r->model);
    sp_grammar_free(r->grammar);
    sp_toolcall_free(r->tools);
    json_decref(r->echo_fields);
    sp_think_budget_free(r->think_budget);
    memset(r, 0, sizeof *r);
}
