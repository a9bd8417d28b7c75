/* GET /v1/models and GET /v1/models/{name}: the model served, under its
 * file name and each --alias, in OpenAI's shape (with spindle's
 * context_length and sampling_defaults). */
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

char *sp_info_models(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err)
{
    (void)status;
    (void)err;
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
    if (!sp_api_model_known(ctx->model_id, ctx->aliases, ctx->n_aliases, name)) {
        sp_api_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%.100s' does not exist (this server serves '%.100s').", name, ctx->model_id);
        return NULL;
    }
    return sp_model_dump(sp_model_entry(ctx, name));
}
