/* spindle bench --embed FILE: sentences per second of the embedding path,
 * each line of FILE one sentence, given to sp_engine_embed B at a time
 * (tokenizing included, as llama-cpp-python's embed() does): the median
 * rate per wall second and per CPU second; bench/embed sets it against
 * llama.cpp. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

/* CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID (every thread's CPU
 * time: on a shared machine, what the work cost rather than how long it
 * waited for a core). */
static double sp_be_now(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int sp_be_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Splits text into lines (in place); returns how many (non-empty). */
static size_t sp_be_lines(char *text, char **lines, size_t cap)
{
    size_t n = 0;
    for (char *s = strtok(text, "\n"); s && n < cap; s = strtok(NULL, "\n"))
        lines[n++] = s;
    return n;
}

/* One pass over the sentences, batch at a time; false after printing the error. */
static bool sp_be_pass(const sp_model *m, sp_engine *e, char **lines, size_t n, int batch, sp_token **toks,
                       size_t *n_toks, size_t tok_cap, float *out)
{
    for (size_t i = 0; i < n; i += (size_t)batch) {
        size_t k = n - i < (size_t)batch ? n - i : (size_t)batch;
        for (size_t j = 0; j < k; j++)
            if (sp_model_tokenize(m, lines[i + j], strlen(lines[i + j]), true, false, toks[j], tok_cap, &n_toks[j]) !=
                SP_OK) {
                sp_tool_fail("bench: %s", sp_error_message());
                return false;
            }
        if (sp_engine_embed(e, (const sp_token *const *)toks, n_toks, k, NULL, out) != SP_OK) {
            sp_tool_fail("bench: %s", sp_error_message());
            return false;
        }
    }
    return true;
}

int sp_bench_embed(sp_model_params *mp, sp_engine_params *ep, const char *file, int batch, int reps, bool json)
{
    enum { SP_BE_MAX_LINES = 4096, SP_BE_TOK_CAP = 512 };
    size_t len, n_toks[256];
    sp_token *toks[256] = {0};
    char *text = sp_read_file(file, &len), **lines = calloc(SP_BE_MAX_LINES, sizeof *lines);
    double *rate = calloc(2 * (size_t)reps, sizeof *rate), *cpu_rate = rate + reps;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    float *out = NULL;
    int rc = 2;
    if (!text || !lines || !rate) {
        sp_tool_fail("bench: cannot read '%s'", file);
        goto done;
    }
    size_t n = sp_be_lines(text, lines, SP_BE_MAX_LINES);
    if (n == 0) {
        sp_tool_fail("bench: '%s' has no lines", file);
        goto done;
    }
    ep->n_parallel = batch; /* the KV cache holds a batch of sentences */
    if (sp_model_load(mp, &m) != SP_OK || sp_engine_create(m, ep, &e) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    out = malloc((size_t)batch * (size_t)sp_engine_n_embd(e) * sizeof *out);
    for (int j = 0; j < batch; j++)
        toks[j] = malloc(SP_BE_TOK_CAP * sizeof **toks);
    if (!out || !toks[batch - 1]) {
        sp_tool_fail("out of memory");
        goto done;
    }
    if (!sp_be_pass(m, e, lines, n, batch, toks, n_toks, SP_BE_TOK_CAP, out)) /* warm-up */
        goto done;
    for (int r = 0; r < reps; r++) {
        double t0 = sp_be_now(CLOCK_MONOTONIC), c0 = sp_be_now(CLOCK_PROCESS_CPUTIME_ID);
        if (!sp_be_pass(m, e, lines, n, batch, toks, n_toks, SP_BE_TOK_CAP, out))
            goto done;
        rate[r] = (double)n / (sp_be_now(CLOCK_MONOTONIC) - t0);
        cpu_rate[r] = (double)n / (sp_be_now(CLOCK_PROCESS_CPUTIME_ID) - c0);
    }
    qsort(rate, (size_t)reps, sizeof *rate, sp_be_cmp);
    qsort(cpu_rate, (size_t)reps, sizeof *rate, sp_be_cmp);
    sp_model_info info;
    sp_model_info_get(m, &info);
    if (json) {
        json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:I,s:f,s:f}", "model", mp->path, "isa", info.isa, "threads",
                              sp_engine_n_threads(e), "batch", batch, "sentences", (json_int_t)n, "sentences_per_s",
                              rate[reps / 2], "sentences_per_cpu_s", cpu_rate[reps / 2]);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else
        printf("%s: %zu sentences, batch %d, %d threads (%s): %.1f sentences/s, %.1f per CPU second (medians of "
               "%d)\n", mp->path, n, batch, sp_engine_n_threads(e), info.isa, rate[reps / 2], cpu_rate[reps / 2], reps);
    rc = 0;
done:
    for (int j = 0; j < 256; j++)
        free(toks[j]);
    free(out);
    sp_engine_free(e);
    sp_model_free(m);
    free(rate);
    free(lines);
    free(text);
    return rc;
}
