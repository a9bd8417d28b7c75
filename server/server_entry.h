/* The server application's entry: what `spindle serve` (tools/serve.c)
 * fills in and runs.  The server is an application of libspindle, like the
 * CLI: it is built from this folder into the spindle binary, uses only
 * include/spindle.h, and is not part of the library (libspindle links no
 * HTTP library and embeds no web assets). */
#ifndef SP_SERVER_ENTRY_H
#define SP_SERVER_ENTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* An OpenAI-compatible HTTP server over one model, or a directory of them
 * (/v1/completions,
 * /v1/chat/completions, /v1/models, /tokenize, /detokenize, /health,
 * /metrics). */
/* Sampling defaults given to the server; NAN (floats) or INT32_MIN (ints)
 * is "not set": the model's recommendation (sp_model_sampling_defaults),
 * else llama-server's, applies. */
typedef struct sp_server_sampling {
    float temperature, top_p, min_p, repeat_penalty;
    int32_t top_k, repeat_last_n;
} sp_server_sampling;

/* One line per request on stderr (id, status, tokens, TTFT, tokens/s). */
typedef enum sp_log_format { SP_LOG_TEXT = 0, SP_LOG_JSON } sp_log_format;

typedef struct sp_server_config {
    const char *host;       /* IPv4/IPv6 address or host name to bind (the first of its
                               addresses that binds); default 127.0.0.1 */
    int port;               /* 0: pick a free port (printed on stderr) */
    int n_parallel;         /* requests running at once */
    int n_ctx;              /* per-request context; 0: the model's (capped at 8192) */
    size_t kv_mem_mib;      /* 0: n_ctx x n_parallel positions */
    int n_threads;          /* compute threads; <= 0: the model's */
    const char *api_key;    /* NULL: no auth */
    double timeout_s;       /* default and cap of a request's total time; 0: none */
    int max_queue;          /* waiting requests beyond this get 429 */
    size_t max_body;        /* request body cap in bytes */
    int max_connections;    /* connections served at once (lowered to what the file
                               descriptor limit allows); beyond it the connection that
                               has waited longest for its request gives way */
    double recv_timeout_s;  /* total time to receive a request's headers and body
                               (from the connection's start or the previous answer);
                               0: none */
    int max_n;              /* cap on `n` */
    sp_server_sampling sampling; /* defaults for requests that leave a field unset */
    sp_log_format log_format; /* the per-request log line on stderr */
    const char *replica_id; /* this replica's name in the X-Spindle-Replica
                               header and /metrics: 1 to 64 of [A-Za-z0-9._:-];
                               NULL: the host name */
    double drain_timeout_s; /* how long SIGTERM waits for requests in flight;
                               0: no limit (a second signal ends the wait) */
    sp_cache_type cache_type_k, cache_type_v; /* the KV cache's (sp_engine_params) */
    int max_retries;        /* cap on a constrained request's max_retries, 0..16 */
    /* speculative decoding inside continuous batching: the drafts of every
     * running request are verified in the same step (as sp_engine_params;
     * spec_k 0: 8) */
    sp_spec_kind spec;
    int spec_k;
    bool spec_fixed;
    const sp_model *draft_model;
    int spec_layers;
    /* other names the model answers to besides its file name (--alias),
     * each 1 to 128 printable ASCII characters; they must outlive the server */
    const char *const *aliases;
    size_t n_aliases;
    /* many models (server/router.c): every DIR/NAME.gguf of models_dir is
     * served as the model NAME, loaded on the first request naming it with
     * model_params (its path aside), at most models_max loaded at once (the
     * least recently used idle one unloaded first); sp_server_run's model is
     * then NULL, and aliases are not used */
    const char *models_dir;
    int models_max;
    double keep_alive_s;    /* how long a loaded model no request holds stays loaded
                               (Ollama's keep_alive; a request may set its model's);
                               0: unloaded when its last request ends; < 0: forever */
    uint64_t memory_budget; /* bytes the loaded models' engines may hold together
                               (weights, KV cache, scratch); 0: no limit */
    sp_model_params model_params;
    /* instead of reading models_dir (then only named in the log), the
     * application's own list of models (the model store's): models_list
     * calls add(ctx, name, path) once per model, on every reading (a
     * request's thread, while the server's model list is locked) */
    void (*models_list)(void *user, void (*add)(void *ctx, const char *name, const char *path), void *ctx);
    void *models_user;
} sp_server_config;
/* The default models_max: llama-server's --models-max. */
#define SP_SERVER_MODELS_MAX 4
/* The default keep_alive_s: Ollama's 5 minutes. */
#define SP_SERVER_KEEP_ALIVE_S 300.0
/* A keep-alive as Ollama takes it: a number of seconds ("300", "0.5") or a
 * Go duration ("30s", "5m", "1h30m", "500ms"); negative: forever (*out -1).
 * False when s is neither. */
bool sp_server_duration_parse(const char *s, double *out);
/* The most --alias names. */
#define SP_SERVER_MAX_ALIASES 16
/* Whether name can be an alias: 1 to 128 printable ASCII characters
 * (no spaces). */
bool sp_server_alias_valid(const char *name);
/* 127.0.0.1:8080, 4 parallel, queue 64, 4 MiB bodies, 512 connections,
 * 30 s to receive a request, n <= 8, sampling
 * defaults not set, text log lines, replica id from the host name, drain
 * timeout 60 s, max_retries capped at 4, no models_dir or models_list,
 * models_max 4, keep_alive_s 300, model_params sp_model_params_default's. */
void sp_server_config_default(sp_server_config *c);

/* Whether id can name a replica: 1 to 64 characters of [A-Za-z0-9._:-]
 * (it goes into a response header and a Prometheus label). */
bool sp_server_replica_id_valid(const char *id);

/* Makes the engine, binds the port and serves until SIGINT or SIGTERM
 * arrives (the calling thread blocks both and waits for them; its signal
 * mask is restored on return; SIGPIPE is ignored process-wide), then
 * refuses new work (503), lets the requests in flight finish and returns
 * SP_OK.  Fails before listening when the engine cannot be made (SP_ERR_ARG,
 * SP_ERR_NOMEM, ...) or the address cannot be bound (SP_ERR_IO).  One line
 * goes to stderr when it listens and one when it drains.  The model must
 * outlive the call.  With m NULL, the models of cfg->models_dir (or
 * cfg->models_list) are served, loaded as requests name them (SP_ERR_ARG
 * when models_dir is not a directory). */
sp_status sp_server_run(const sp_model *m, const sp_server_config *cfg);

#endif
