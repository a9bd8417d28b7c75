/* The bodies of the routes that generate nothing: /tokenize, /detokenize
 * and /v1/embeddings (see server_schema.h), read with the field readers of
 * server_schema.c. */
#include "server/server_schema.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sp_api_tokenize(const char *body, size_t len, const sp_model *model,
                      struct sp_api_error *err)
{
    char *res = NULL;
    sp_token *toks = NULL;
    bool add_special = true, parse_special = true;
    json_t *root = sp_api_json_load(body, len, 0, SP_API_MAX_VALUES, err);
    if (!root)
        goto free_root;
    json_t *c = json_object_get(root, "content");
    if (!json_is_string(c)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "content",
                    "Invalid type for 'content': expected a string.");
        goto free_root;
    }
    if (sp_api_read_bool(root, "add_special", &add_special, err) < 0 ||
        sp_api_read_bool(root, "parse_special", &parse_special, err) < 0)
        goto free_root;
    size_t n = 0, cap = json_string_length(c) + 4;
    toks = malloc(cap * sizeof *toks);
    if (!toks) {
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        goto free_root;
    }
    sp_status st = sp_model_tokenize(model, json_string_value(c), json_string_length(c), add_special,
                                     parse_special, toks, cap, &n);
    if (st == SP_ERR_ARG && n > cap) {
        sp_token *bigger = realloc(toks, n * sizeof *toks);
        if (!bigger) {
            sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            goto free_root;
        }
        toks = bigger;
        cap = n;
        st = sp_model_tokenize(model, json_string_value(c), json_string_length(c), add_special,
                               parse_special, toks, cap, &n);
    }
    if (st != SP_OK) {
        sp_api_fail(err, 400, SP_API_INVALID, NULL, "content", "Tokenization failed: %s",
                    sp_error_message());
        goto free_root;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(toks[i]));
    json_t *o = json_object();
    json_object_set_new(o, "tokens", arr);
    if (!(res = sp_json_dump_free(o)))
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
free_root:
    free(toks);
    json_decref(root);
    return res;
}

char *sp_api_detokenize(const char *body, size_t len, const sp_model *model,
                        struct sp_api_error *err)
{
    char *res = NULL, *text = NULL;
    sp_token *toks = NULL;
    json_t *root = sp_api_json_load(body, len, 0, SP_API_MAX_VALUES, err);
    if (!root)
        goto free_root;
    json_t *a = json_object_get(root, "tokens");
    if (!json_is_array(a)) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "tokens",
                    "Invalid type for 'tokens': expected an array of token ids.");
        goto free_root;
    }
    size_t n = json_array_size(a);
    toks = malloc((n ? n : 1) * sizeof *toks);
    if (!toks) {
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        goto free_root;
    }
    uint32_t n_vocab = sp_model_n_vocab(model);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(a, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= (json_int_t)n_vocab) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "tokens",
                        "Invalid value for 'tokens[%zu]': expected a token id in [0, %u).", i,
                        n_vocab);
            goto free_root;
        }
        toks[i] = (sp_token)json_integer_value(t);
    }
    /* the ids are in range: the first call fails only for want of room */
    size_t need = 0;
    sp_model_detokenize(model, toks, n, false, NULL, 0, &need);
    text = malloc(need + 1);
    if (!text || sp_model_detokenize(model, toks, n, false, text, need + 1, &need) != SP_OK) {
        sp_api_fail(err, 500, "server_error", NULL, NULL, "detokenization failed");
        goto free_root;
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", sp_json_text(text, need));
    if (!(res = sp_json_dump_free(o)))
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
free_root:
    free(text);
    free(toks);
    json_decref(root);
    return res;
}

/* ---- /v1/embeddings ---- */

static const char *const sp_embed_fields[] = {"model", "input", "encoding_format", "dimensions", "user",
                                              "truncate"};

/* One input (a string or a token-id array) into r's next slot. */
static sp_status sp_embed_input(struct sp_api_embed_request *r, const json_t *in, size_t i,
                                const sp_model *model, const struct sp_api_embed_limits *lim,
                                bool truncate, struct sp_api_error *err)
{
    size_t cap = (size_t)(lim->max_tokens > 0 ? lim->max_tokens : 1), n = 0;
    sp_token *t = NULL;
    if (json_is_string(in)) {
        const char *s = json_string_value(in);
        size_t len = json_string_length(in);
        if (strlen(s) != len)
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "input",
                               "Invalid value for 'input' %zu: it contains a NUL character.", i);
        if (model) { /* as `spindle embed`: BOS/EOS as the file says, special texts not parsed */
            const size_t most = 6 * len + 16; /* always enough (sp_model_tokenize); len < the body cap */
            if (!(t = malloc(most * sizeof *t)))
                return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            sp_status st = sp_model_tokenize(model, s, len, true, false, t, most, &n);
            if (st != SP_OK)
                return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "input",
                                   "Input %zu could not be tokenized: %s", i, sp_error_message());
        } else {
            n = 1;
            if (!(t = calloc(1, sizeof *t)))
                return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        }
    } else {
        size_t m = json_array_size(in);
        if (!(t = malloc((m ? m : 1) * sizeof *t)))
            return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        uint32_t n_vocab = model ? sp_model_n_vocab(model) : (uint32_t)INT32_MAX;
        for (n = 0; n < m; n++) {
            const json_t *v = json_array_get(in, n);
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (!json_is_integer(v) || id < 0 || id >= (json_int_t)n_vocab) {
                free(t);
                return sp_api_fail(err, 400, SP_API_INVALID, json_is_integer(v) ? "invalid_value" : "invalid_type",
                                   "input", "Invalid token in 'input' %zu: expected ids 0..%u.", i, n_vocab - 1);
            }
            t[n] = (sp_token)id;
        }
    }
    r->inputs[i] = t;
    if (n == 0)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "input", "Input %zu is empty (no tokens).", i);
    if (n > cap && !truncate)
        return sp_api_fail(err, 400, SP_API_INVALID, "context_length_exceeded", "input",
                           "Input %zu has %zu tokens; this model embeds at most %d tokens per input "
                           "(send \"truncate\": true to cut longer inputs).", i, n, lim->max_tokens);
    r->n_tokens[i] = n > cap ? cap : n;
    r->n_total += r->n_tokens[i];
    return SP_OK;
}

/* The inputs of `input`: one string or token array, or a list of them (all
 * strings or all token arrays). */
static sp_status sp_embed_inputs(struct sp_api_embed_request *r, const json_t *in, const sp_model *model,
                                 const struct sp_api_embed_limits *lim, bool truncate, struct sp_api_error *err)
{
    const char *what = "Invalid type for 'input': expected a string, a list of strings, a list of token ids, "
                       "or a list of lists of token ids.";
    if (!in)
        return sp_api_fail(err, 400, SP_API_INVALID, "missing_required_parameter", "input",
                           "Missing required parameter: 'input'.");
    if (!json_is_string(in) && !json_is_array(in))
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "input", "%s", what);
    /* one input: a string, or a list of ids (the empty list is no input at all) */
    bool single = json_is_string(in) || (json_array_size(in) > 0 && json_is_integer(json_array_get(in, 0)));
    size_t n = single ? 1 : json_array_size(in);
    if (n == 0)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "input", "'input' is an empty list.");
    if (n > (size_t)lim->max_inputs)
        return sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "input",
                           "'input' has %zu items; this server embeds at most %d per request.", n, lim->max_inputs);
    r->inputs = calloc(n, sizeof *r->inputs);
    r->n_tokens = calloc(n, sizeof *r->n_tokens);
    if (!r->inputs || !r->n_tokens)
        return sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    r->n_inputs = n;
    bool strings = single ? json_is_string(in) : json_is_string(json_array_get(in, 0));
    for (size_t i = 0; i < n; i++) {
        const json_t *item = single ? in : json_array_get(in, i);
        if (!(strings ? json_is_string(item) : json_is_array(item)))
            return sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", "input", "%s", what);
        sp_status st = sp_embed_input(r, item, i, model, lim, truncate, err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

sp_status sp_api_embed_parse(struct sp_api_embed_request *out, const char *body, size_t len,
                             const sp_model *model, const struct sp_api_embed_limits *lim,
                             struct sp_api_error *err)
{
    sp_status st = SP_ERR_ARG;
    json_int_t dims;
    bool truncate = false;
    const char *key;
    json_t *v;
    memset(out, 0, sizeof *out);
    /* each input an array of up to max_tokens ids (or a string), plus the other fields */
    size_t max_values = (size_t)(lim->max_inputs > 0 ? lim->max_inputs : 1) *
                            ((size_t)(lim->max_tokens > 0 ? lim->max_tokens : 1) + 2) + 1024;
    json_t *root = sp_api_json_load(body, len, JSON_REJECT_DUPLICATES, max_values, err);
    if (!root)
        return SP_ERR_ARG;
    json_object_foreach(root, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof sp_embed_fields / sizeof sp_embed_fields[0]; i++)
            known = known || !strcmp(key, sp_embed_fields[i]);
        if (!known) {
            sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", NULL,
                        "Unrecognized request argument supplied: '%.64s'.", key);
            goto done;
        }
    }
    static const char *const strings[] = {"model", "user", "encoding_format"};
    for (size_t i = 0; i < 3; i++)
        if ((v = sp_api_field(root, strings[i])) && !json_is_string(v)) {
            sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", strings[i],
                        "Invalid type for '%s': expected a string.", strings[i]);
            goto done;
        }
    json_t *name = sp_api_field(root, "model"), *fmt = sp_api_field(root, "encoding_format");
    if (name && !sp_api_model_known(lim->model_id, lim->aliases, lim->n_aliases, json_string_value(name))) {
        sp_api_fail(err, 404, SP_API_INVALID, "model_not_found", "model",
                    "The model '%.100s' does not exist (this server serves '%.100s').", json_string_value(name),
                    lim->model_id);
        goto done;
    }
    if (fmt && strcmp(json_string_value(fmt), "float") && strcmp(json_string_value(fmt), "base64")) {
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_value", "encoding_format",
                    "Invalid value for 'encoding_format': expected 'float' or 'base64'.");
        goto done;
    }
    out->base64 = fmt && !strcmp(json_string_value(fmt), "base64");
    int got = sp_api_read_int(root, "dimensions", 1, INT32_MAX, &dims, err);
    if (got < 0)
        goto done;
    if (got && dims != lim->n_embd) {
        sp_api_fail(err, 400, SP_API_INVALID, "unsupported_value", "dimensions",
                    "This model does not support 'dimensions' other than its width %d (it is not trained for "
                    "truncated embeddings).", lim->n_embd);
        goto done;
    }
    if (sp_api_read_bool(root, "truncate", &truncate, err) < 0)
        goto done;
    st = sp_embed_inputs(out, sp_api_field(root, "input"), model, lim, truncate, err);
done:
    json_decref(root);
    if (st != SP_OK)
        sp_api_embed_request_free(out);
    return st;
}

void sp_api_embed_request_free(struct sp_api_embed_request *r)
{
    for (size_t i = 0; r->inputs && i < r->n_inputs; i++)
        free(r->inputs[i]);
    free(r->inputs);
    free(r->n_tokens);
    memset(r, 0, sizeof *r);
}

/* base64 of n bytes (RFC 4648, padded) as a JSON string. */
static json_t *sp_base64(const uint8_t *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc((n + 2) / 3 * 4 + 1);
    if (!s)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        s[o++] = tab[v >> 18 & 63];
        s[o++] = tab[v >> 12 & 63];
        s[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        s[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    json_t *j = json_stringn(s, o);
    free(s);
    return j;
}

char *sp_api_embed_body(const struct sp_api_embed_request *r, const char *model, const float *vecs, int n_embd)
{
    json_t *data = json_array(), *root = json_object(), *usage = json_object();
    for (size_t i = 0; data && i < r->n_inputs; i++) {
        const float *v = vecs + i * (size_t)n_embd;
        json_t *e = NULL, *item = json_object();
        if (r->base64) {
            uint8_t *b = malloc((size_t)n_embd * 4);
            for (int k = 0; b && k < n_embd; k++) { /* little-endian float32, as OpenAI's */
                uint32_t u;
                memcpy(&u, &v[k], 4);
                for (int x = 0; x < 4; x++)
                    b[4 * k + x] = (uint8_t)(u >> (8 * x));
            }
            e = b ? sp_base64(b, (size_t)n_embd * 4) : NULL;
            free(b);
        } else {
            e = json_array();
            for (int k = 0; e && k < n_embd; k++)
                json_array_append_new(e, json_real(v[k]));
        }
        json_object_set_new(item, "object", json_string("embedding"));
        json_object_set_new(item, "index", json_integer((json_int_t)i));
        if (!e || json_object_set_new(item, "embedding", e) || json_array_append_new(data, item)) {
            json_decref(data);
            data = NULL;
        }
    }
    if (!data || !root || !usage) {
        json_decref(data);
        json_decref(root);
        json_decref(usage);
        return NULL;
    }
    json_object_set_new(usage, "prompt_tokens", json_integer((json_int_t)r->n_total));
    json_object_set_new(usage, "total_tokens", json_integer((json_int_t)r->n_total));
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", data);
    json_object_set_new(root, "model", json_string(model));
    json_object_set_new(root, "usage", usage);
    return sp_json_dump_free(root);
}
