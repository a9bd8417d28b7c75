/* GET /v1/models and GET /v1/models/{name}: the model served, under its
 * file name and each --alias, in OpenAI's shape (with spindle's
 * context_length and sampling_defaults); with --models-dir every model of
 * the directory, with llama-server's router `status` (and context_length
 * while it is loaded). */
#include <stdlib.h>
#include <string.h>

#include "server/dialect.h"

static json_t *sp_model_entry(const struct sp_info_ctx *ctx, const char *name)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("spindle"));
    json_object_set_new(m, "context_length", json_integer(ctx->lim->n_ctx));
    struct sp_sampler_params d;
    sp_sampler_params_default(&d);
    if (ctx->lim->defaults)
        d = *ctx->lim->defaults;
    json_t *def = json_object();
    json_object_set_new(def, "temperature", json_real(d.temperature));
    json_object_set_new(def, "top_k", json_integer(d.top_k));
    json_object_set_new(def, "top_p", json_real(d.top_p));
    json_object_set_new(def, "min_p", json_real(d.min_p));
    json_object_set_new(def, "repeat_penalty", json_real(d.repeat_penalty));
    json_object_set_new(m, "sampling_defaults", def);
    return m;
}

/* 7 digits: the float settings print as given (0.8, not 0.800000011920929). */
static char *sp_model_dump(json_t *o)
{
    char *body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(7));
    json_decref(o);
    return body;
}

/* A model of --models-dir: its state as llama-server's router gives it
 * ({"value": "unloaded"|"loading"|"loaded"}, with failed and the load's
 * error when it could not be loaded). */
static json_t *sp_router_model_entry(const struct sp_router_entry *x)
{
    json_t *m = json_object(), *st = json_object();
    json_object_set_new(m, "id", json_string(x->id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("spindle"));
    if (x->n_ctx)
        json_object_set_new(m, "context_length", json_integer(x->n_ctx));
    json_object_set_new(st, "value", json_string(x->state));
    if (x->failed) {
        json_object_set_new(st, "failed", json_true());
        json_object_set_new(st, "error", json_string(x->error));
    }
    json_object_set_new(m, "status", st);
    return m;
}

/* The directory's models (all, or the one named `only`): NULL with a
 * 404 when `only` is none of them, or when out of memory (500). */
static json_t *sp_router_models(const struct sp_info_ctx *ctx, const char *only, struct sp_api_error *err)
{
    struct sp_router_entry *v = NULL;
    size_t n = 0;
    if (sp_router_list(ctx->router, &v, &n) != SP_OK) {
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        if (!only || !strcmp(only, v[i].id))
            json_array_append_new(data, sp_router_model_entry(&v[i]));
    free(v);
    if (only && !json_array_size(data)) {
        json_decref(data);
        sp_api_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%.100s' does not exist (GET /v1/models lists the models served).", only);
        return NULL;
    }
    return data;
}

char *sp_info_models(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    if (ctx->router) {
        json_t *data = sp_router_models(ctx, NULL, err), *o = data ? json_object() : NULL;
        if (!data)
            return NULL;
        json_object_set_new(o, "object", json_string("list"));
        json_object_set_new(o, "data", data);
        return sp_model_dump(o);
    }
    json_t *data = json_array();
    json_array_append_new(data, sp_model_entry(ctx, ctx->model_id));
    for (size_t i = 0; i < ctx->n_aliases; i++)
        json_array_append_new(data, sp_model_entry(ctx, ctx->aliases[i]));
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return sp_model_dump(o);
}

char *sp_info_model(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    const char *name = ctx->url + strlen("/v1/models/");
    if (ctx->router) {
        json_t *data = sp_router_models(ctx, name, err), *one = data ? json_incref(json_array_get(data, 0)) : NULL;
        json_decref(data);
        return one ? sp_model_dump(one) : NULL;
    }
    if (!sp_api_model_known(ctx->model_id, ctx->aliases, ctx->n_aliases, name)) {
        sp_api_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%.100s' does not exist (this server serves '%.100s').", name, ctx->model_id);
        return NULL;
    }
    return sp_model_dump(sp_model_entry(ctx, name));
}
