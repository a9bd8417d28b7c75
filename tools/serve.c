/* spindle serve: flags -> struct sp_server_config -> sp_server_main(). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "tools.h"

static const char sp_serve_usage[] =
    "usage: spindle serve -m MODEL [options]\n"
    "  -m, --model PATH     GGUF model file (required)\n"
    "  --host ADDR          numeric address to bind (default 127.0.0.1)\n"
    "  --port N             TCP port (default 8080; 0 picks a free one)\n"
    "  --parallel N         requests running at once (default 4)\n"
    "  -c, --ctx N          context per request (default: the model's, at most 8192)\n"
    "  --kv-mem MIB         KV cache size (default: ctx x parallel positions)\n"
    "  --api-key KEY        require 'Authorization: Bearer KEY' (all routes but /health)\n"
    "  --timeout SECONDS    cap on a request's total time (default: none)\n"
    "  --max-retries N      cap on a constrained request's max_retries (default 4)\n"
    "  --queue N            waiting requests before 429 (default 64)\n"
    "  --max-body BYTES     request body cap (default 4194304)\n"
    "  --max-n N            largest `n` accepted (default 8)\n"
    "  -t, --threads N      compute threads (default: one per core)\n";

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

int sp_tool_serve(int argc, char **argv)
{
    struct sp_server_config cfg;
    sp_server_config_default(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(sp_serve_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return sp_tool_fail("serve: unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        long n = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            cfg.model_path = v;
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
        } else if (!strcmp(a, "--timeout")) {
            char *end = NULL;
            double d = strtod(v, &end);
            if (!v[0] || *end || !(d >= 0 && d <= 1e7))
                return sp_tool_fail("serve: --timeout wants seconds >= 0, got '%s'", v);
            cfg.timeout_s = d;
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
    if (!cfg.model_path)
        return sp_tool_fail("serve: -m MODEL is required (see spindle serve --help)");
    return sp_server_main(&cfg);
}
