/* OpenAI request/response JSON for the server, with no server attached.
 *
 * sp_api_request_parse() turns one HTTP body into generation parameters and
 * prompt tokens, or into the exact OpenAI error body to send back.  It is a
 * pure function of (body bytes, model, limits): the fuzzer calls it with
 * model = NULL, which skips chat rendering and tokenization.  Every client
 * mistake maps to a 4xx here; nothing in this file can produce a 5xx from
 * client input except allocation failure.
 *
 * The response builders return jansson objects (owned by the caller) or
 * newly allocated strings (free()).  Texts given to them need not be valid
 * UTF-8: invalid sequences become U+FFFD so the JSON is always valid.
 */
#ifndef SP_SERVER_SCHEMA_H
#define SP_SERVER_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"


enum sp_api_kind {
    SP_API_COMPLETIONS,
    SP_API_CHAT,
};

/* Server caps applied while parsing. */
struct sp_api_limits {
    const char *model_id; /* the model served; requests naming another get 404 */
    const char *const *aliases; /* other names it answers to (--alias) */
    size_t n_aliases;
    int n_ctx;            /* prompt + 1 must fit; max_tokens <= n_ctx */
    int max_n;            /* largest `n` */
    int max_stop;         /* most stop strings */
    size_t max_stop_len;  /* longest stop string in bytes */
    int max_logit_bias;   /* most logit_bias entries */
    double max_timeout_s; /* per-request `timeout` is clamped to this; 0: no cap */
    /* What unset sampling fields get; NULL: llama-server's defaults
     * (sp_sampler_params_default). */
    const struct sp_sampler_params *defaults;
    /* constrained output: grammars by their text (sp_grammar_cache_create,
     * for the model served; the fuzzer's binds none), required for requests
     * with one, and the cap on a request's max_retries */
    sp_grammar_cache *gcache;
    int max_retries;
    int max_prompts;      /* most prompts in one completions batch (a list of prompts) */
};
void sp_api_limits_default(struct sp_api_limits *lim);
/* Whether `name` names the model served: model_id or one of the aliases
 * (no model_id: any name). */
bool sp_api_model_known(const char *model_id, const char *const *aliases, size_t n_aliases, const char *name);


/* An error to send: the HTTP status and the four fields of OpenAI's body. */
struct sp_api_error {
    int http_status;
    const char *type;  /* static: "invalid_request_error", ... */
    const char *code;  /* static or NULL (JSON null) */
    char param[64];    /* "" -> JSON null */
    char message[384];
};

/* Bounds on a request body's JSON, checked before it is parsed (the parsed
 * tree takes up to 30 times the body's bytes): at most SP_API_MAX_VALUES
 * values (generation requests: plus 2 per context position, for prompts of
 * token ids; embeddings: what max_inputs inputs of max_tokens ids need) and
 * nesting at most SP_API_MAX_DEPTH deep. */
#define SP_API_MAX_VALUES 65536
#define SP_API_MAX_DEPTH 64
/* Parses body into a JSON object (json_loadb flags), or NULL with *err set
 * (400): more than max_values values (sp_json_within counts containers,
 * strings and separators), nesting deeper than SP_API_MAX_DEPTH, invalid
 * JSON, or not an object. */
json_t *sp_api_json_load(const char *body, size_t len, size_t flags, size_t max_values, struct sp_api_error *err);
/* Fills *err and returns SP_ERR_ARG (for `return sp_api_fail(...)`). */
sp_status sp_api_fail(struct sp_api_error *err, int http_status, const char *type,
                      const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} as a malloc'd string. */
char *sp_api_error_body(const struct sp_api_error *err);

/* A parsed generation request.  Owns every pointer in it; gp.stop and
 * gp.sampling.logit_bias point into stop/bias below. */
struct sp_api_request {
    enum sp_api_kind kind;
    char *model;              /* as sent, or NULL */
    bool stream;
    bool include_usage;       /* stream_options.include_usage */
    bool chat_logprobs;       /* chat: `logprobs: true` */
    int logprobs;             /* < 0: none; else the number of alternatives */
    struct sp_gen_params gp;
    char **stop;
    size_t n_stop;
    struct sp_logit_bias *bias;
    size_t n_bias;
    char *prompt_text;        /* completions: the prompt text; NULL for ids and chat */
    sp_token *prompt;         /* NULL when model was NULL and the prompt was text */
    size_t n_prompt;
    double timeout_s;         /* 0: none requested */
    bool seed_set;            /* `seed` was given; else the server picks one */
    /* response_format json_object/json_schema, `grammar` or `json_schema`,
     * or the calls of `tools`: the compiled grammar (gp.grammar points at it) */
    sp_grammar *grammar;
    sp_toolcall *tools; /* `tools` with tool_choice and parallel_tool_calls, or NULL */
    /* completions: a list of prompts is a batch of n_batch prompts, each
     * with n choices (OpenAI's indexing: prompt i's choices are i*n ..
     * i*n+n-1).  One request holds one prompt, batch_item; the server
     * parses the body once per prompt (sp_api_request_parse_item). */
    size_t n_batch;           /* 1 for a single prompt */
    size_t batch_item;
    /* `echo`: each prompt's text, put before its choices' text (item 0's
     * request holds all n_batch of them; NULL without echo) */
    char **echo;
    /* chat: where the output starts for reasoning (enum sp_think_mode:
     * 0 off, the template has no <think>, or reasoning_format "none") */
    int think;
    /* what a dialect repeats in its answers (its own fields), or NULL */
    json_t *echo_fields;
    /* the thinking budget's stage (gp.stages points into it), or NULL */
    struct sp_think_budget *think_budget;
};

/* reasoning.c: the mode (enum sp_think_mode in server.h) a chat request's
 * output starts in: OFF unless the model's chat template has <think>;
 * INSIDE when the prompt's end opened the block; START otherwise. */
int sp_think_mode_for(const sp_model *m, const sp_token *prompt, size_t n_prompt);
/* reasoning.c: bounds a chat request's thinking block to `budget` tokens
 * (Anthropic's thinking.budget_tokens): a decoding stage of its own
 * (gp.stages, r->think_budget) that, once the block has that many tokens,
 * makes the close tag the only candidates, so the block closes there and
 * the answer follows.  Nothing to do (SP_OK, no stage) without a model,
 * for budget < 1, or when the template never thinks. */
sp_status sp_think_budget_attach(struct sp_api_request *r, const sp_model *m, int32_t budget);
void sp_think_budget_free(struct sp_think_budget *b);

/* Parses a /v1/completions or /v1/chat/completions body.  On SP_OK *out
 * holds the request (free with sp_api_request_free); otherwise *out is
 * empty and *err says what to answer (always 4xx for client mistakes, 500
 * only for SP_ERR_NOMEM).  model may be NULL (no rendering, no tokenizing,
 * no vocabulary-size checks). */
sp_status sp_api_request_parse(struct sp_api_request *out, enum sp_api_kind kind,
                               const char *body, size_t len, const sp_model *model,
                               const struct sp_api_limits *lim, struct sp_api_error *err);
/* The same from the body's JSON (an object, or a 400), which a dialect
 * built (server/dialect.h); root stays the caller's. */
sp_status sp_api_request_from_json(struct sp_api_request *out, enum sp_api_kind kind, const json_t *root,
                                   size_t item, const sp_model *model, const struct sp_api_limits *lim,
                                   struct sp_api_error *err);
/* The same for prompt `item` of a completions batch (item < the n_batch
 * that parsing item 0 gave). */
sp_status sp_api_request_parse_item(struct sp_api_request *out, enum sp_api_kind kind, const char *body,
                                    size_t len, size_t item, const sp_model *model,
                                    const struct sp_api_limits *lim, struct sp_api_error *err);
void sp_api_request_free(struct sp_api_request *r);
/* What parses a generation request of one API (sp_api_request_parse_item
 * for OpenAI's; a dialect's translation for the others, server/dialect.h). */
typedef sp_status (*sp_api_parse_fn)(struct sp_api_request *out, enum sp_api_kind kind, const char *body,
                                     size_t len, size_t item, const sp_model *model,
                                     const struct sp_api_limits *lim, struct sp_api_error *err);

/* server_tools.c: a chat request's `tools`, `tool_choice` and `parallel_tool_calls`
 * into r->tools, and unless tool_choice is none, the grammar of the calls
 * (after response_format: the two do not combine). */
sp_status sp_api_parse_tools(struct sp_api_request *r, const json_t *root, const sp_model *model,
                             const struct sp_api_limits *lim, struct sp_api_error *err);
/* server_tools.c: messages[i]'s tool_calls (assistant), tool_call_id (tool) and
 * name, checked, into *out (out->role already set); out->tool_calls is
 * the JSON text of the calls, malloc'd. */
sp_status sp_api_message_tools(const json_t *msg, size_t i, sp_chat_msg *out, struct sp_api_error *err);

/* The `type` of a 400 for a bad request field. */
#define SP_API_INVALID "invalid_request_error"

/* Field readers: absent and null mean "not given" (return 0), 1 when
 * read, -1 after setting *err for a wrong type or range ([lo, hi]).
 * sp_api_field is the field's value, NULL when absent or null. */
json_t *sp_api_field(const json_t *obj, const char *key);
int sp_api_read_number(const json_t *obj, const char *key, double lo, double hi, double *out,
                       struct sp_api_error *err);
int sp_api_read_int(const json_t *obj, const char *key, json_int_t lo, json_int_t hi, json_int_t *out,
                    struct sp_api_error *err);
int sp_api_read_bool(const json_t *obj, const char *key, bool *out, struct sp_api_error *err);

/* POST /tokenize: {"content": str, "add_special": bool?, "parse_special": bool?}
 * -> {"tokens": [...]}.  POST /detokenize: {"tokens": [int...]} -> {"content": str}.
 * Return the response body (malloc'd) or NULL with *err set. */
char *sp_api_tokenize(const char *body, size_t len, const sp_model *model,
                      struct sp_api_error *err);
char *sp_api_detokenize(const char *body, size_t len, const sp_model *model,
                        struct sp_api_error *err);

/* POST /v1/embeddings.  Accepted fields: model, input (a string, a list of
 * strings, a list of token ids, or a list of those lists), encoding_format
 * ("float" or "base64"), dimensions (the model's width only: no model here
 * is trained for truncation), user, and spindle's `truncate` (bool: cut
 * inputs longer than max_tokens instead of answering 400).  Any other
 * field is a 400. */
struct sp_api_embed_limits {
    const char *model_id; /* requests naming another model get 404 */
    int n_embd;           /* the vector width (the only `dimensions` allowed) */
    int max_tokens;       /* most tokens of one input */
    int max_inputs;       /* most inputs of one request */
    const char *const *aliases; /* other names of the model (--alias) */
    size_t n_aliases;
};
struct sp_api_embed_request {
    sp_token **inputs;    /* [n_inputs] owned token arrays */
    size_t *n_tokens;     /* [n_inputs] */
    size_t n_inputs;
    size_t n_total;       /* tokens over all inputs (usage) */
    bool base64;
};
/* Parses the body (model NULL: strings are not tokenized and count as one
 * token, for the fuzzer).  On SP_OK *out holds the request (free with
 * sp_api_embed_request_free); otherwise *err says what to answer. */
sp_status sp_api_embed_parse(struct sp_api_embed_request *out, const char *body, size_t len,
                             const sp_model *model, const struct sp_api_embed_limits *lim,
                             struct sp_api_error *err);
void sp_api_embed_request_free(struct sp_api_embed_request *r);
/* The response body (malloc'd; NULL: out of memory): {"object": "list",
 * "data": [{"object": "embedding", "index", "embedding"}], "model",
 * "usage": {"prompt_tokens", "total_tokens"}}, each embedding n_embd floats
 * of vecs as a JSON array, or base64 of their little-endian float32 bytes. */
char *sp_api_embed_body(const struct sp_api_embed_request *r, const char *model, const float *vecs, int n_embd);

/* A JSON string from arbitrary bytes (invalid UTF-8 -> U+FFFD). */
json_t *sp_json_text(const char *s, size_t len);

/* Usage counters of one request (summed over choices). */
struct sp_api_usage {
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
};
json_t *sp_api_usage_json(const struct sp_api_usage *u);

/* Serialises `obj` compactly and frees it.  NULL on allocation failure. */
char *sp_json_dump_free(json_t *obj);

#endif
