/* libFuzzer target: HTTP body bytes -> sp_api_request_parse() for both
 * generation endpoints, every dialect's translation (Anthropic, Ollama's
 * chat and generate, Responses: server/dialect.h) and sp_api_embed_parse()
 * for /v1/embeddings, /api/embed and /api/embeddings, with no vocabulary (no rendering or
 * tokenization), then the error body (in each API's shape) when parsing fails.  Any crash, leak or sanitizer report is a
 * bug: client input must only ever produce a 4xx.
 *
 * Build (clang): compile src/ with -fsanitize=fuzzer-no-link,address,undefined
 * and link this file with -fsanitize=fuzzer; run
 *   ./fuzz_request tests/fuzz/corpus/request
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/dialect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* grammars compiled for no vocabulary, kept across inputs as the server keeps them */
    static sp_grammar_cache *gcache;
    if (!gcache && sp_grammar_cache_create(NULL, 8, &gcache) != SP_OK)
        abort();
    struct sp_api_limits lim;
    sp_api_limits_default(&lim);
    lim.gcache = gcache;
    lim.model_id = "smollm2";
    lim.max_timeout_s = 30;
    for (int k = 0; k < 2; k++) {
        struct sp_api_request r;
        struct sp_api_error err;
        memset(&err, 0, sizeof err);
        enum sp_api_kind kind = k ? SP_API_CHAT : SP_API_COMPLETIONS;
        sp_status st = sp_api_request_parse(&r, kind, (const char *)data, size, NULL, &lim, &err);
        if (st == SP_OK) {
            /* Invariants the server relies on. */
            if (r.gp.n < 1 || r.gp.n > lim.max_n || r.n_stop > (size_t)lim.max_stop ||
                r.gp.max_tokens > lim.n_ctx || (r.timeout_s < 0) ||
                (r.timeout_s > lim.max_timeout_s) || r.logprobs > 20 ||
                (kind == SP_API_COMPLETIONS && (r.n_batch < 1 || r.n_batch > (size_t)lim.max_prompts)))
                abort();
            sp_api_request_free(&r);
        } else {
            if (err.http_status < 400 || err.http_status > 599 ||
                (st == SP_ERR_ARG && err.http_status >= 500))
                abort();
            free(sp_api_error_body(&err));
        }
    }
    const struct sp_dialect *dialects[] = {&sp_dialect_anthropic, &sp_dialect_ollama, &sp_dialect_ollama,
                                           &sp_dialect_responses};
    for (int k = 0; k < 4; k++) {
        struct sp_api_request r;
        struct sp_api_error err;
        memset(&err, 0, sizeof err);
        enum sp_api_kind route = k == 2 ? SP_API_COMPLETIONS : SP_API_CHAT; /* Ollama's generate */
        sp_status st = dialects[k]->parse(&r, route, (const char *)data, size, 0, NULL, &lim, &err);
        if (st == SP_OK) {
            if (r.gp.n != 1 || r.n_stop > (size_t)lim.max_stop || r.gp.max_tokens > lim.n_ctx ||
                r.logprobs > 20)
                abort();
            sp_api_request_free(&r);
        } else {
            if (err.http_status < 400 || err.http_status > 599 || (st == SP_ERR_ARG && err.http_status >= 500))
                abort();
            free(dialects[k]->error_body(&err));
        }
    }
    /* Ollama's keep_alive (the router's idle time): a 400 or a time, never NaN when given */
    {
        struct sp_api_error kerr;
        double secs = 0;
        bool only_load = false;
        memset(&kerr, 0, sizeof kerr);
        sp_status st = sp_dialect_ollama.keep_alive((const char *)data, size, SP_ROUTE_GENERATE,
                                                    size % 2 ? SP_API_CHAT : SP_API_COMPLETIONS, &secs, &only_load,
                                                    &kerr);
        if (st == SP_OK ? !(isnan(secs) || secs >= 0 || secs == -1) : kerr.http_status != 400)
            abort();
        if (st != SP_OK)
            free(sp_dialect_ollama.error_body(&kerr));
    }
    struct sp_api_embed_limits el = {"minilm", 384, 64, 256, NULL, 0};
    struct sp_api_embed_request er;
    struct sp_api_error err;
    memset(&err, 0, sizeof err);
    sp_status (*const embed_parsers[])(struct sp_api_embed_request *, const char *, size_t, const sp_model *,
                                       const struct sp_api_embed_limits *, struct sp_api_error *) = {
        sp_api_embed_parse, sp_dialect_ollama.embed_parse, sp_dialect_ollama_embeddings.embed_parse};
    sp_status st = embed_parsers[size % 3](&er, (const char *)data, size, NULL, &el, &err);
    if (st == SP_OK) {
        if (er.n_inputs < 1 || er.n_inputs > (size_t)el.max_inputs)
            abort();
        for (size_t i = 0; i < er.n_inputs; i++)
            if (er.n_tokens[i] < 1 || er.n_tokens[i] > (size_t)el.max_tokens)
                abort();
        float *v = calloc(er.n_inputs * 384, sizeof *v);
        free(v ? sp_api_embed_body(&er, "minilm", v, 384) : NULL);
        free(v);
        sp_api_embed_request_free(&er);
    } else if (err.http_status < 400 || err.http_status > 599 || (st == SP_ERR_ARG && err.http_status >= 500)) {
        abort();
    }
    return 0;
}
