/* The route table: every path the server answers, its method, and the
 * dialect that speaks it (dialect.h).  Dispatch is a lookup in this table;
 * a dialect adds its rows here and its code in its own file. */
#include <string.h>

#include "server/dialect.h"

/* OpenAI's API is the server's own: the parser of server_schema.c, the
 * chunks and bodies of sse.c, the embeddings of server_embed.c. */
const struct sp_dialect sp_dialect_openai = {
    .name = "openai",
    .parse = sp_api_request_parse_item,
    .error_body = sp_api_error_body,
    .stream_type = "text/event-stream",
};

static const struct sp_route_def sp_routes[] = {
    {"/health", "GET", SP_ROUTE_HEALTH, false, 0, &sp_dialect_openai, NULL, false},
    {"/health", "HEAD", SP_ROUTE_HEALTH, false, 0, &sp_dialect_openai, NULL, false}, /* MHD sends HEAD's headers only */
    {"/v1/health", "GET", SP_ROUTE_HEALTH, false, 0, &sp_dialect_openai, NULL, false},
    {"/v1/health", "HEAD", SP_ROUTE_HEALTH, false, 0, &sp_dialect_openai, NULL, false},
    {"/metrics", "GET", SP_ROUTE_METRICS, false, 0, &sp_dialect_openai, NULL, false},
    {"/v1/models", "GET", SP_ROUTE_INFO, false, 0, &sp_dialect_openai, sp_info_models, true},
    {"/v1/models/", "GET", SP_ROUTE_INFO, true, 0, &sp_dialect_openai, sp_info_model, true},
    {"/v1/completions", "POST", SP_ROUTE_GENERATE, false, SP_API_COMPLETIONS, &sp_dialect_openai, NULL, false},
    {"/v1/chat/completions", "POST", SP_ROUTE_GENERATE, false, SP_API_CHAT, &sp_dialect_openai, NULL, false},
    {"/v1/embeddings", "POST", SP_ROUTE_EMBEDDINGS, false, 0, &sp_dialect_openai, NULL, false},
    {"/tokenize", "POST", SP_ROUTE_TOKENIZE, false, 0, &sp_dialect_openai, NULL, false},
    {"/detokenize", "POST", SP_ROUTE_DETOKENIZE, false, 0, &sp_dialect_openai, NULL, false},
    /* Anthropic's Messages (dialect_anthropic.c) */
    {"/v1/messages", "POST", SP_ROUTE_GENERATE, false, SP_API_CHAT, &sp_dialect_anthropic, NULL, false},
    {"/v1/messages/count_tokens", "POST", SP_ROUTE_INFO, false, 0, &sp_dialect_anthropic, sp_anthropic_count_tokens, false},
    /* OpenAI's Responses (dialect_responses.c) */
    {"/v1/responses", "POST", SP_ROUTE_GENERATE, false, SP_API_CHAT, &sp_dialect_responses, NULL, false},
    /* Ollama's (dialect_ollama.c); the route's kind tells chat from generate */
    {"/api/chat", "POST", SP_ROUTE_GENERATE, false, SP_API_CHAT, &sp_dialect_ollama, NULL, false},
    {"/api/generate", "POST", SP_ROUTE_GENERATE, false, SP_API_COMPLETIONS, &sp_dialect_ollama, NULL, false},
    {"/api/embed", "POST", SP_ROUTE_EMBEDDINGS, false, 0, &sp_dialect_ollama, NULL, false},
    {"/api/embeddings", "POST", SP_ROUTE_EMBEDDINGS, false, 0, &sp_dialect_ollama_embeddings, NULL, false}, /* the older route */
    {"/api/tags", "GET", SP_ROUTE_INFO, false, 0, &sp_dialect_ollama, sp_ollama_tags, true},
    {"/api/ps", "GET", SP_ROUTE_INFO, false, 0, &sp_dialect_ollama, sp_ollama_ps, true},
    {"/api/version", "GET", SP_ROUTE_INFO, false, 0, &sp_dialect_ollama, sp_ollama_version, true},
    {"/api/show", "POST", SP_ROUTE_INFO, false, 0, &sp_dialect_ollama, sp_ollama_show, false},
};

const struct sp_route_def *sp_route_find(const char *url, const char *method, bool *known_path)
{
    *known_path = false;
    for (size_t i = 0; i < sizeof sp_routes / sizeof sp_routes[0]; i++) {
        const struct sp_route_def *d = &sp_routes[i];
        size_t n = strlen(d->path);
        if (d->prefix ? strncmp(url, d->path, n) || !url[n] : strcmp(url, d->path))
            continue;
        if (!strcmp(method, d->method))
            return d;
        *known_path = true;
    }
    return NULL;
}

/* Path prefixes that belong to a dialect, for the routes no row matches. */
static const struct {
    const char *prefix;
    const struct sp_dialect *dialect;
} sp_route_prefixes[] = {
    {"/v1/messages", &sp_dialect_anthropic},
    {"/api/", &sp_dialect_ollama},
    {"/v1/responses", &sp_dialect_responses},
    {"/v1/", &sp_dialect_openai},
};

const struct sp_dialect *sp_route_dialect_of(const char *url)
{
    for (size_t i = 0; i < sizeof sp_route_prefixes / sizeof sp_route_prefixes[0]; i++)
        if (!strncmp(url, sp_route_prefixes[i].prefix, strlen(sp_route_prefixes[i].prefix)))
            return sp_route_prefixes[i].dialect;
    return &sp_dialect_openai;
}
