/* Routes and dialects: one server, many API surfaces.
 *
 * Every route is a row of one table (routes.c): its path and method, what
 * kind of route it is, and for the API surfaces the dialect that speaks
 * it.  A dialect is a thin translation: its request JSON into the server's
 * one internal request (struct sp_api_request, parsed and checked by the
 * OpenAI parser of server_schema.c, so every dialect shares the same
 * validation), the engine's events into that API's stream or body, and
 * errors into that API's shape.  Everything between (admission, batching,
 * sampling, grammars, tools, cancellation, deadlines, metrics, the prefix
 * cache) is the same code for all of them.
 *
 *   OpenAI (server_schema.c, server_embed.c, sse.c)  /v1/completions, /v1/chat/completions, /v1/embeddings
 *   Anthropic (dialect_anthropic.c)     /v1/messages, /v1/messages/count_tokens
 *   Ollama (dialect_ollama.c)           /api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, ...
 *   OpenAI Responses (dialect_responses.c)  /v1/responses
 */
#ifndef SP_SERVER_DIALECT_H
#define SP_SERVER_DIALECT_H

#include "server/server.h"

enum sp_route {
    SP_ROUTE_NOT_FOUND = 0,
    SP_ROUTE_BAD_METHOD,
    SP_ROUTE_HEALTH,
    SP_ROUTE_METRICS,
    SP_ROUTE_GENERATE,   /* a generation in the route's dialect */
    SP_ROUTE_TOKENIZE,
    SP_ROUTE_DETOKENIZE,
    SP_ROUTE_EMBEDDINGS, /* embeddings in the route's dialect */
    SP_ROUTE_INFO,       /* answered by the route's info handler, without the engine */
    SP_ROUTE_PAGE,       /* the chat page's files (webui.h): served without the API key */
};

/* What an information route (model lists, token counts) sees. */
struct sp_info_ctx {
    const sp_model *model;
    const char *model_id;               /* the model's name: its file name without .gguf */
    const char *const *aliases;         /* --alias names */
    size_t n_aliases;
    const struct sp_api_limits *lim;    /* as a generation request of this server gets them */
    const char *url;                    /* the request's path */
    const char *body;
    size_t len;
    struct sp_router *router;           /* --models-dir: the lists list its models
                                           (model and model_id are then NULL) */
};
/* The answer's body (malloc'd; *status 200 unless the handler sets it),
 * or NULL with *err set (in the route's dialect's shape). */
typedef char *(*sp_info_fn)(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);

/* One step of one choice of a streamed answer, in the API-neutral form a
 * dialect turns into its own events: text and reasoning as the template's
 * tags separate them, tool calls as the tool-call parser reads them. */
enum sp_delta_kind {
    SP_DELTA_TEXT,
    SP_DELTA_REASONING,
    SP_DELTA_CALL,   /* a call begins: index, id, its function's name in text */
    SP_DELTA_ARGS,   /* a piece of call `index`'s arguments (JSON text) */
    SP_DELTA_FINISH, /* the choice ended */
};
struct sp_delta {
    enum sp_delta_kind kind;
    int choice;
    const char *text;
    size_t len;
    int index;
    const char *id;
    enum sp_finish finish;      /* FINISH: SP_FINISH_STOP or SP_FINISH_LENGTH */
    bool tool_calls;            /* FINISH: the choice made calls */
    const char *stop_sequence;  /* FINISH: the stop string that ended it, or NULL */
    /* with logprobs asked for: the logprobs of the token this delta's text
     * comes from ({token, logprob, bytes, top_logprobs}, Chat Completions'
     * entry), on the first delta the token makes; a token that makes none
     * (its text held, or none) comes as an empty TEXT delta.  Else NULL. */
    const json_t *logprob;
};

/* A choice of a finished (non-streamed) answer. */
struct sp_choice_view {
    const char *text;           /* content (without reasoning or calls) */
    size_t len;
    const char *reasoning;
    size_t n_reasoning;
    const json_t *calls;        /* OpenAI's tool_calls array, or NULL */
    enum sp_finish finish;
    bool tool_calls;
    const char *stop_sequence;
    const json_t *logprobs;     /* with logprobs asked for: each token's entry (as sp_delta.logprob)
                                   in a list; NULL: none asked for, or no token */
};
void sp_resp_choice(const struct sp_resp *r, int c, struct sp_choice_view *v);

/* Appends bytes to a response buffer. */
sp_status sp_out_append(char **out, size_t *len, size_t *cap, const char *s, size_t n);
/* Appends `event: NAME\ndata: JSON\n\n` (json taken; NULL: out of memory). */
sp_status sp_out_sse(const char *event, json_t *data, char **out, size_t *len, size_t *cap);
/* Appends one line of NDJSON (json taken; NULL: out of memory). */
sp_status sp_out_ndjson(json_t *data, char **out, size_t *len, size_t *cap);

/* A dialect's response.  Streaming: start once before anything else,
 * delta for each step, end once every choice finished, error instead of
 * end when the server cannot finish; retry when a choice's attempt is
 * voided (constrained output: its deltas since its last retry were held
 * back and are dropped).  Not streaming: body, from sp_resp_choice and
 * r->usage.  state: the dialect's own per-response state (init/free). */
struct sp_resp_ops {
    sp_status (*init)(struct sp_resp *r);
    void (*free)(struct sp_resp *r);
    sp_status (*start)(struct sp_resp *r, char **out, size_t *len, size_t *cap);
    sp_status (*delta)(struct sp_resp *r, const struct sp_delta *d, char **out, size_t *len, size_t *cap);
    sp_status (*end)(struct sp_resp *r, char **out, size_t *len, size_t *cap);
    sp_status (*error)(struct sp_resp *r, const struct sp_api_error *err, char **out, size_t *len, size_t *cap);
    void (*retry)(struct sp_resp *r, int choice);
    char *(*body)(struct sp_resp *r);
};

struct sp_dialect {
    const char *name;
    sp_api_parse_fn parse;                          /* its request -> the internal request */
    char *(*error_body)(const struct sp_api_error *err); /* an error in its shape (malloc'd) */
    const char *stream_type;                        /* the Content-Type of its streams */
    const struct sp_resp_ops *resp;                 /* NULL: OpenAI's chunks (sse.c) */
    /* embeddings in its shapes; NULL: OpenAI's (server_embed.c) */
    sp_status (*embed_parse)(struct sp_api_embed_request *out, const char *body, size_t len,
                             const sp_model *model, const struct sp_api_embed_limits *lim,
                             struct sp_api_error *err);
    char *(*embed_body)(const struct sp_api_embed_request *r, const char *model, const float *vecs,
                        int n_embd);
    /* The idle time a request asks for its model (Ollama's keep_alive):
     * *secs in seconds (< 0: forever; NAN: none asked for), and *only_load:
     * a generation request (route SP_ROUTE_GENERATE of kind) that asks for
     * nothing but loading or unloading its model (Ollama's empty prompt or
     * messages).  A bad value is a 400 in *err.  NULL: the dialect has none. */
    sp_status (*keep_alive)(const char *body, size_t len, enum sp_route route, enum sp_api_kind kind,
                            double *secs, bool *only_load, struct sp_api_error *err);
    /* The answer to an only_load request (malloc'd; NULL: out of memory). */
    char *(*load_body)(const char *model, enum sp_api_kind kind, bool unloaded);
};

extern const struct sp_dialect sp_dialect_openai, sp_dialect_anthropic, sp_dialect_ollama,
    sp_dialect_ollama_embeddings, sp_dialect_responses;

/* One row of the route table. */
struct sp_route_def {
    const char *path, *method;
    enum sp_route route;
    bool prefix;                      /* path is a prefix ("/v1/models/" + a model's name) */
    enum sp_api_kind kind;            /* generation: the prompt's kind */
    const struct sp_dialect *dialect; /* the API the route speaks */
    sp_info_fn info;                  /* SP_ROUTE_INFO */
    bool lists;                       /* SP_ROUTE_INFO answered without a model of its own (the
                                         lists of models); every other route needs the model
                                         its request names */
};
/* The row for (url, method); NULL when none matches, with *known_path
 * telling whether the path exists with another method (405). */
const struct sp_route_def *sp_route_find(const char *url, const char *method, bool *known_path);
/* The dialect of a path no route matched (its 404 speaks that API). */
const struct sp_dialect *sp_route_dialect_of(const char *url);

/* ---- dialect_common.c: what the translations share ---- */

/* What a dialect does with a field of its request: reads it, accepts it as
 * a label (it changes nothing), or refuses it as not implemented. */
enum sp_field_use { SP_FIELD_READ, SP_FIELD_LABEL, SP_FIELD_UNSUPPORTED };
struct sp_field_rule {
    const char *name;
    enum sp_field_use use;
};
/* Every key of obj must be in rules or be one of spindle's extensions
 * (sp_dialect_extension): an unknown key is a 400 unknown_parameter, an
 * unsupported one a 400 unsupported_parameter, both naming prefix+key. */
sp_status sp_dialect_check_fields(const json_t *obj, const struct sp_field_rule *rules, size_t n,
                                  const char *prefix, struct sp_api_error *err);
/* spindle's own request fields, accepted under their names on every
 * dialect's generation routes (min_p, typical_p, repeat_penalty,
 * repeat_last_n, seed, grammar, json_schema, max_retries, timeout,
 * ignore_eos, cache_prompt, n_keep, chat_template_kwargs, reasoning_format),
 * and their copy into the internal (OpenAI-shaped) request. */
bool sp_dialect_extension(const char *key);
void sp_dialect_copy_extensions(json_t *dst, const json_t *src);
/* The body as a JSON object, or NULL with a 400 in *err. */
json_t *sp_dialect_load(const char *body, size_t len, struct sp_api_error *err);
/* The translated request `oai` (OpenAI's chat or completions shape) through
 * the one parser; an error naming one of map's OpenAI fields (map[i][0])
 * names the dialect's (map[i][1]) instead. */
sp_status sp_dialect_parse(struct sp_api_request *out, enum sp_api_kind kind, const json_t *oai,
                           const sp_model *model, const struct sp_api_limits *lim, struct sp_api_error *err,
                           const char *const (*map)[2], size_t n_map);
/* A field's value that must be a string, or a 400 naming it (NULL: absent,
 * or *bad set). */
const char *sp_dialect_string(const json_t *obj, const char *key, const char *param, bool *bad,
                              struct sp_api_error *err);
/* The time now as RFC 3339 UTC with nanoseconds (Ollama's created_at). */
void sp_dialect_time(char *buf, size_t cap);
/* The same, `seconds` from now (0..1e10). */
void sp_dialect_time_in(char *buf, size_t cap, double seconds);
/* A tool call's arguments (JSON text) as an object (NULL: out of memory);
 * text that is not an object gives {}. */
json_t *sp_dialect_args(const char *text);

/* dialect_anthropic.c: POST /v1/messages/count_tokens. */
char *sp_anthropic_count_tokens(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);

/* dialect_ollama.c: GET /api/tags, GET /api/ps, GET /api/version, POST /api/show. */
char *sp_ollama_tags(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);
char *sp_ollama_ps(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);
char *sp_ollama_version(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);
char *sp_ollama_show(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);

/* model_list.c: GET /v1/models and /v1/models/{name} (OpenAI's shapes). */
char *sp_info_models(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);
char *sp_info_model(const struct sp_info_ctx *ctx, int *status, struct sp_api_error *err);

#endif
