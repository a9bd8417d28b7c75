/* spindle serve: flags -> sp_model_load (or --models-dir) + sp_server_config -> sp_server_run().
 * A model or configuration the server cannot run fails here, with one line
 * and exit status 2, before anything listens. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "store.h"
#include "tool_spec.h"
#include "server/server_entry.h"
#include "spindle.h"
#include "tools.h"

static const char sp_serve_usage[] =
    "usage: spindle serve -m MODEL [options]\n"
    "       spindle serve [--models-dir DIR] [options]\n"
    "  -m, --model PATH     GGUF model file, or a stored model's name\n"
    "  --models-dir DIR     serve every DIR/NAME.gguf as the model NAME, each loaded on\n"
    "                       the first request that names it; without -m or --models-dir,\n"
    "                       every model of the store (spindle list) under its full name\n"
    "  --models-max N       models loaded at once without -m (default 4); the least\n"
    "                       recently used idle one is unloaded for another\n"
    "  --keep-alive T       without -m, how long a model stays loaded with no request:\n"
    "                       seconds or a duration (30s, 5m, 1h; default 5m; 0: unload\n"
    "                       after each request; negative: forever); Ollama's keep_alive\n"
    "                       field sets it for the model it names from that request on\n"
    "  --memory-budget SIZE without -m, the most memory the loaded models may hold\n"
    "                       together (weights, KV cache, scratch as spindle info counts\n"
    "                       them; bytes, or with K, M, G, T: 8G, 512M); the least\n"
    "                       recently used idle ones are unloaded to make room\n"
    "  --host HOST          address or host name to bind (default 127.0.0.1)\n"
    "  --port N             TCP port (default 8080; 0 picks a free one)\n"
    "  --parallel N         requests running at once (default 4)\n"
    "  -c, --ctx N          context per request (default: the model's, at most 8192)\n"
    "  --kv-mem MIB         KV cache size (default: ctx x parallel positions)\n"
    "  --api-key KEY        require 'Authorization: Bearer KEY' (all routes but /health\n"
    "                       and the chat page); KEY shows in ps, so prefer:\n"
    "  --api-key-file FILE  the key is FILE's first line (its line end stripped)\n"
    "                       without either flag, the key is $SPINDLE_API_KEY if set\n"
    "  --timeout SECONDS    cap on a request's total time (default: none)\n"
    "  --max-retries N      cap on a constrained request's max_retries (default 4)\n"
    "  --queue N            waiting requests before 429 (default 64)\n"
    "  --max-body BYTES     request body cap (default 4194304)\n"
    "  --max-connections N  connections served at once (default 512, lowered to what\n"
    "                       ulimit -n allows); when full, the one waiting longest for\n"
    "                       its request is closed for a new one\n"
    "  --recv-timeout SECONDS  total time a connection may take to send a request's\n"
    "                       headers and body (default 30; 0: none)\n"
    "  --max-n N            largest `n` accepted (default 8)\n"
    "  -t, --threads N      compute threads (default: one per core)\n"
    "  --mlock              keep the weights in RAM (no paging out)\n"
    "  --map-model          read the tokenizer and the weights used in place from the\n"
    "                       mapped file (shared page cache, less memory) instead of a\n"
    "                       private copy; the file must then not be changed or truncated\n"
    "                       while served (replace it by renaming a new file over it)\n"
    "  --cache-type-k T     how the KV cache stores keys: f16 (default), q8_0, q4_0\n"
    "  --cache-type-v T     and values\n"
    "  --log-format F       the per-request log line on stderr: text (default) or json\n"
    "  --alias NAME         another name the model answers to (repeatable; its file\n"
    "                       name without .gguf always works)\n"
    "  --replica-id ID      name in the X-Spindle-Replica header and /metrics\n"
    "                       (default: the host name)\n"
    "  --drain-timeout SECONDS  on SIGTERM (or SIGINT, SIGHUP), how long requests in flight may\n"
    "                       take to finish before they are ended (default 60; 0: no limit)\n"
    SP_TOOL_SPEC_USAGE
    "sampling defaults for requests that leave a field unset (default: the model's\n"
    "recommendation from its GGUF metadata, else temp 0.8, top-k 40, top-p 0.95, min-p 0.05):\n"
    "  --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n";

/* The server's list of models without -m or --models-dir: every complete
 * model of the store (root: user) under its full name ORG/REPO:QUANT. */
static void sp_serve_store_list(void *user, void (*add)(void *ctx, const char *name, const char *path), void *ctx)
{
    struct sp_store_model *m = NULL;
    size_t n = 0;
    if (!sp_store_scan(user, &m, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        char name[256];
        sp_store_name_format(&m[i].name, name, sizeof name);
        if (m[i].complete)
            add(ctx, name, m[i].path);
    }
    sp_store_models_free(m, n);
}

static bool sp_parse_seconds(const char *s, double *out)
{
    char *end = NULL;
    double d = strtod(s, &end);
    if (!s[0] || *end || !(d >= 0 && d <= 1e7))
        return false;
    *out = d;
    return true;
}

/* A float flag in [lo, hi]. */
static bool sp_parse_float(const char *s, double lo, double hi, float *out)
{
    char *end = NULL;
    double d = strtod(s, &end);
    if (!s[0] || *end || !(d >= lo && d <= hi))
        return false;
    *out = (float)d;
    return true;
}

/* A size in bytes: a whole number, or with K, M, G or T (powers of 1024;
 * "KiB", "KB" and the like too), at least 1 and at most 2^60. */
static bool sp_parse_size(const char *s, uint64_t *out)
{
    static const char *const units = "KMGT";
    char *end = NULL;
    errno = 0;
    if (!s || !(*s >= '0' && *s <= '9'))
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    unsigned shift = 0;
    if (*end) {
        const char *u = strchr(units, end[0] & ~0x20);
        if (!u || !*u)
            return false;
        shift = 10u * (unsigned)(u - units + 1);
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "b"))
            end += strlen(end);
    }
    if (*end || v == 0 || v > (1ULL << 60) >> shift)
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

static bool sp_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* The longest key --api-key-file reads, with its terminating NUL. */
#define SP_SERVE_KEY_CAP 1024

/* Reads the first line of path, its "\n" or "\r\n" stripped, into buf
 * (cap bytes).  False, with one line on stderr, when the file cannot be
 * read or its first line is empty or does not fit. */
static bool sp_read_key_file(const char *path, char *buf, size_t cap)
{
    const char *why = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        why = strerror(errno);
    else if (!fgets(buf, (int)cap, f))
        why = ferror(f) ? strerror(errno) : "the file is empty";
    if (f)
        fclose(f);
    size_t n = why ? 0 : strcspn(buf, "\r\n");
    if (!why && n == 0)
        why = "its first line is empty";
    else if (!why && !buf[n] && n + 1 == cap)
        why = "the key is longer than 1023 bytes";
    if (why) {
        sp_tool_fail("serve: --api-key-file '%s': %s", path, why);
        return false;
    }
    buf[n] = '\0';
    return true;
}

/* Sets cfg->api_key: --api-key, else --api-key-file `file` (read into
 * buf), else $SPINDLE_API_KEY, else none.  False, with one line on stderr,
 * when both flags are given, the file cannot be used, or the variable is
 * set but empty (which would otherwise serve without a key). */
static bool sp_serve_api_key(sp_server_config *cfg, const char *file, char *buf, size_t cap)
{
    if (file && cfg->api_key) {
        sp_tool_fail("serve: give --api-key or --api-key-file, not both");
        return false;
    }
    if (file) {
        if (!sp_read_key_file(file, buf, cap))
            return false;
        cfg->api_key = buf;
        return true;
    }
    if (cfg->api_key)
        return true;
    const char *env = getenv("SPINDLE_API_KEY");
    if (env && !env[0]) {
        sp_tool_fail("serve: SPINDLE_API_KEY is set but empty (unset it to serve without a key)");
        return false;
    }
    cfg->api_key = env;
    return true;
}

int sp_tool_serve(int argc, char **argv)
{
    char key_buf[SP_SERVE_KEY_CAP];
    const char *aliases[SP_SERVER_MAX_ALIASES];
    const char *key_file = NULL;
    char store_root[4096];
    bool models_max_set = false, keep_alive_set = false, budget_set = false;
    sp_server_config cfg;
    sp_model_params mp;
    struct sp_tool_spec spec;
    sp_server_config_default(&cfg);
    sp_model_params_default(&mp);
    mp.private_copy = true; /* a server outlives deploys that may rewrite the file in place */
    sp_tool_spec_init(&spec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(sp_serve_usage, stdout);
            return 0;
        }
        struct sp_args sa = {argc, argv, i, false};
        if (sp_tool_spec_flag(&sa, &spec)) {
            if (sa.failed)
                return 2;
            i = sa.i;
            continue;
        }
        if (!strcmp(a, "--mlock")) {
            mp.use_mlock = true;
            continue;
        }
        if (!strcmp(a, "--map-model")) {
            mp.private_copy = false;
            continue;
        }
        if (i + 1 >= argc)
            return sp_tool_fail("serve: unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        long n = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(mp.path = sp_store_model_path(a, v)))
                return 2;
        } else if (!strcmp(a, "--models-dir")) {
            cfg.models_dir = v;
        } else if (!strcmp(a, "--models-max")) {
            if (!sp_parse_long(v, 1, 1024, &n))
                return sp_tool_fail("serve: --models-max wants 1..1024, got '%s'", v);
            cfg.models_max = (int)n;
            models_max_set = true;
        } else if (!strcmp(a, "--keep-alive")) {
            if (!sp_server_duration_parse(v, &cfg.keep_alive_s))
                return sp_tool_fail("serve: --keep-alive wants seconds or a duration such as 30s, 5m or 1h, got '%s'",
                                    v);
            keep_alive_set = true;
        } else if (!strcmp(a, "--memory-budget")) {
            if (!sp_parse_size(v, &cfg.memory_budget))
                return sp_tool_fail("serve: --memory-budget wants a size such as 8G or 512M, got '%s'", v);
            budget_set = true;
        } else if (!strcmp(a, "--host")) {
            cfg.host = v;
        } else if (!strcmp(a, "--port")) {
            if (!sp_parse_long(v, 0, 65535, &n))
                return sp_tool_fail("serve: --port wants 0..65535, got '%s'", v);
            cfg.port = (int)n;
        } else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            if (!sp_parse_long(v, 1, 1024, &n))
                return sp_tool_fail("serve: --parallel wants 1..1024, got '%s'", v);
            cfg.n_parallel = (int)n;
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (!sp_parse_long(v, 0, 1 << 20, &n))
                return sp_tool_fail("serve: --ctx wants 0..1048576, got '%s'", v);
            cfg.n_ctx = (int)n;
        } else if (!strcmp(a, "--kv-mem")) {
            if (!sp_parse_long(v, 1, 1L << 30, &n))
                return sp_tool_fail("serve: --kv-mem wants a size in MiB, got '%s'", v);
            cfg.kv_mem_mib = (size_t)n;
        } else if (!strcmp(a, "--api-key")) {
            if (!v[0])
                return sp_tool_fail("serve: --api-key must not be empty");
            cfg.api_key = v;
        } else if (!strcmp(a, "--api-key-file")) {
            key_file = v;
        } else if (!strcmp(a, "--timeout")) {
            if (!sp_parse_seconds(v, &cfg.timeout_s))
                return sp_tool_fail("serve: --timeout wants seconds >= 0, got '%s'", v);
        } else if (!strcmp(a, "--max-connections")) {
            if (!sp_parse_long(v, 1, 1 << 20, &n))
                return sp_tool_fail("serve: --max-connections wants 1..1048576, got '%s'", v);
            cfg.max_connections = (int)n;
        } else if (!strcmp(a, "--recv-timeout")) {
            if (!sp_parse_seconds(v, &cfg.recv_timeout_s))
                return sp_tool_fail("serve: --recv-timeout wants seconds >= 0, got '%s'", v);
        } else if (!strcmp(a, "--drain-timeout")) {
            if (!sp_parse_seconds(v, &cfg.drain_timeout_s))
                return sp_tool_fail("serve: --drain-timeout wants seconds >= 0, got '%s'", v);
        } else if (!strcmp(a, "--alias")) {
            if (!sp_server_alias_valid(v))
                return sp_tool_fail("serve: --alias wants 1 to 128 printable characters without spaces, got '%s'", v);
            if (cfg.n_aliases == SP_SERVER_MAX_ALIASES)
                return sp_tool_fail("serve: at most %d --alias names", SP_SERVER_MAX_ALIASES);
            aliases[cfg.n_aliases++] = v;
            cfg.aliases = aliases;
        } else if (!strcmp(a, "--replica-id")) {
            if (!sp_server_replica_id_valid(v))
                return sp_tool_fail("serve: --replica-id wants 1-64 characters of [A-Za-z0-9._:-], got '%s'", v);
            cfg.replica_id = v;
        } else if (!strcmp(a, "--queue")) {
            if (!sp_parse_long(v, 0, 1 << 20, &n))
                return sp_tool_fail("serve: --queue wants 0..1048576, got '%s'", v);
            cfg.max_queue = (int)n;
        } else if (!strcmp(a, "--max-body")) {
            if (!sp_parse_long(v, 1024, 1L << 30, &n))
                return sp_tool_fail("serve: --max-body wants 1024..2^30 bytes, got '%s'", v);
            cfg.max_body = (size_t)n;
        } else if (!strcmp(a, "--max-n")) {
            if (!sp_parse_long(v, 1, 128, &n))
                return sp_tool_fail("serve: --max-n wants 1..128, got '%s'", v);
            cfg.max_n = (int)n;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            if (!sp_parse_float(v, 0, 2, &cfg.sampling.temperature))
                return sp_tool_fail("serve: --temp wants 0..2, got '%s'", v);
        } else if (!strcmp(a, "--top-p")) {
            if (!sp_parse_float(v, 0, 1, &cfg.sampling.top_p))
                return sp_tool_fail("serve: --top-p wants 0..1, got '%s'", v);
        } else if (!strcmp(a, "--min-p")) {
            if (!sp_parse_float(v, 0, 1, &cfg.sampling.min_p))
                return sp_tool_fail("serve: --min-p wants 0..1, got '%s'", v);
        } else if (!strcmp(a, "--repeat-penalty")) {
            if (!sp_parse_float(v, 1e-3, 100, &cfg.sampling.repeat_penalty))
                return sp_tool_fail("serve: --repeat-penalty wants 0.001..100, got '%s'", v);
        } else if (!strcmp(a, "--top-k")) {
            if (!sp_parse_long(v, 0, 1 << 24, &n))
                return sp_tool_fail("serve: --top-k wants 0..16777216 (0: off), got '%s'", v);
            cfg.sampling.top_k = (int32_t)n;
        } else if (!strcmp(a, "--repeat-last-n")) {
            if (!sp_parse_long(v, -1, 1 << 24, &n))
                return sp_tool_fail("serve: --repeat-last-n wants -1..16777216, got '%s'", v);
            cfg.sampling.repeat_last_n = (int32_t)n;
        } else if (!strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-v") ||
                   !strcmp(a, "-ctv")) {
            bool k = !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk");
            if (sp_cache_type_parse(v, k ? &cfg.cache_type_k : &cfg.cache_type_v) != SP_OK)
                return sp_tool_fail("serve: %s: %s", a, sp_error_message());
        } else if (!strcmp(a, "--log-format")) {
            if (strcmp(v, "text") && strcmp(v, "json"))
                return sp_tool_fail("serve: --log-format wants text or json, got '%s'", v);
            cfg.log_format = strcmp(v, "json") ? SP_LOG_TEXT : SP_LOG_JSON;
        } else if (!strcmp(a, "--max-retries")) {
            if (!sp_parse_long(v, 0, 16, &n))
                return sp_tool_fail("serve: --max-retries wants 0..16, got '%s'", v);
            cfg.max_retries = (int)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!sp_parse_long(v, 0, 1024, &n))
                return sp_tool_fail("serve: --threads wants 0..1024, got '%s'", v);
            cfg.n_threads = (int)n;
        } else {
            return sp_tool_fail("serve: unknown option '%s' (see spindle serve --help)", a);
        }
    }
    if (mp.path && cfg.models_dir)
        return sp_tool_fail("serve: give -m MODEL or --models-dir DIR, not both");
    if (!mp.path && cfg.n_aliases)
        return sp_tool_fail("serve: --alias names the model of -m; without it a model's name is its file's");
    if (models_max_set && mp.path)
        return sp_tool_fail("serve: --models-max goes with --models-dir or the store (no -m)");
    if (budget_set && mp.path)
        return sp_tool_fail("serve: --memory-budget goes with --models-dir or the store (no -m)");
    if (keep_alive_set && mp.path)
        return sp_tool_fail("serve: --keep-alive goes with --models-dir or the store (no -m: that model stays loaded)");
    if (!mp.path && !cfg.models_dir) {
        if (!sp_store_root(store_root, sizeof store_root))
            return 2;
        cfg.models_dir = store_root; /* named in the log */
        cfg.models_list = sp_serve_store_list;
        cfg.models_user = store_root;
    }
    if (!sp_serve_api_key(&cfg, key_file, key_buf, sizeof key_buf))
        return 2;
    mp.n_threads = cfg.n_threads;
    sp_model *m = NULL;
    sp_engine_params ep;
    sp_engine_params_default(&ep);
    mp.progress = sp_progress_stderr;
    if (!sp_tool_spec_load(&spec, cfg.n_threads, &ep))
        return 2;
    cfg.spec = ep.spec;
    cfg.spec_k = ep.spec_k;
    cfg.spec_fixed = ep.spec_fixed;
    cfg.draft_model = ep.draft_model;
    cfg.spec_layers = ep.spec_layers;
    cfg.model_params = mp;
    if (mp.path && sp_model_load(&mp, &m) != SP_OK) {
        sp_tool_spec_free(&spec);
        return sp_tool_fail("%s", sp_error_message());
    }
    int rc = sp_server_run(m, &cfg) == SP_OK ? 0 : sp_tool_fail("%s", sp_error_message());
    sp_model_free(m);
    sp_tool_spec_free(&spec);
    return rc;
}
