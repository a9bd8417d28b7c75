/* spindle embed: one JSON array of floats per input line (of --file or
 * stdin), the model's embedding of that line (docs/embeddings.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

/* Lines per sp_engine_embed call: the engine packs them into passes. */
#define SP_EMBED_CHUNK 64

struct sp_embed_chunk {
    sp_token *toks[SP_EMBED_CHUNK];
    size_t n_toks[SP_EMBED_CHUNK];
    int n;
};

static void sp_embed_chunk_clear(struct sp_embed_chunk *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->toks[i]);
    c->n = 0;
}

/* Embeds and prints the chunk's lines (first line number: line0); false
 * after printing the error. */
static bool sp_embed_flush(sp_engine *e, struct sp_embed_chunk *c, const sp_embed_params *p, float *vec,
                           size_t line0)
{
    const int E = sp_engine_n_embd(e);
    if (c->n == 0)
        return true;
    if (sp_engine_embed(e, (const sp_token *const *)c->toks, c->n_toks, (size_t)c->n, p, vec) != SP_OK) {
        sp_tool_fail("embed: lines %zu-%zu: %s", line0, line0 + (size_t)c->n - 1, sp_error_message());
        return false;
    }
    for (int i = 0; i < c->n; i++) {
        json_t *a = json_array();
        for (int j = 0; j < E; j++)
            json_array_append_new(a, json_real(vec[(size_t)i * E + j]));
        json_dumpf(a, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
        fputc('\n', stdout);
        json_decref(a);
    }
    sp_embed_chunk_clear(c);
    return true;
}

/* Reads lines from f, embedding them SP_EMBED_CHUNK at a time. */
static int sp_embed_lines(const sp_model *m, sp_engine *e, FILE *f, const sp_embed_params *p)
{
    struct sp_embed_chunk c = {.n = 0};
    char *line = NULL;
    size_t cap = 0, line_no = 0, first = 1;
    ssize_t len;
    int rc = 2;
    float *vec = malloc((size_t)SP_EMBED_CHUNK * (size_t)sp_engine_n_embd(e) * sizeof *vec);
    if (!vec) {
        sp_tool_fail("out of memory");
        return 2;
    }
    while ((len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = 0;
        size_t tcap = 6 * (size_t)len + 16, n = 0;
        sp_token *t = malloc(tcap * sizeof *t);
        if (!t || sp_model_tokenize(m, line, (size_t)len, true, false, t, tcap, &n) != SP_OK) {
            free(t);
            sp_tool_fail("embed: line %zu: %s", line_no, t ? sp_error_message() : "out of memory");
            goto done;
        }
        c.toks[c.n] = t;
        c.n_toks[c.n++] = n;
        if (c.n == SP_EMBED_CHUNK) {
            if (!sp_embed_flush(e, &c, p, vec, first))
                goto done;
            first = line_no + 1;
        }
    }
    if (sp_embed_flush(e, &c, p, vec, first))
        rc = 0;
done:
    sp_embed_chunk_clear(&c);
    free(line);
    free(vec);
    return rc;
}

int sp_tool_embed(int argc, char **argv)
{
    sp_model_params mp;
    sp_engine_params ep;
    sp_embed_params p = {SP_POOLING_DEFAULT, false};
    struct sp_args a = {argc, argv, 1, false};
    const char *file = NULL;
    sp_model *model = NULL;
    sp_engine *e = NULL;
    FILE *f = stdin;
    int rc = 2;
    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle embed -m MODEL [--file F] [--pooling mean|cls|last] [--no-normalize]\n"
                 "                     [--ctx N] [--batch N] [-t N]\n"
                 "  one input per line of F (default: stdin); prints one JSON vector per line");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "-f", "--file")) file = sp_args_value(&a);
        else if (sp_args_is(&a, "--pooling", NULL)) {
            const char *v = sp_args_value(&a);
            if (v && sp_pooling_parse(v, &p.pooling) != SP_OK)
                return sp_tool_fail("embed: --pooling: %s", sp_error_message());
        } else if (sp_args_is(&a, "--no-normalize", NULL)) p.no_normalize = true;
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &ep.n_batch);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &mp.n_threads);
        else
            return sp_tool_fail("embed: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!mp.path)
        return sp_tool_fail("embed: -m MODEL is required");
    if (file && !(f = fopen(file, "r")))
        return sp_tool_fail("embed: cannot open '%s'", file);
    if (sp_model_load(&mp, &model) != SP_OK || sp_engine_create(model, &ep, &e) != SP_OK)
        sp_tool_fail("%s", sp_error_message());
    else
        rc = sp_embed_lines(model, e, f, &p);
    if (f != stdin)
        fclose(f);
    sp_engine_free(e);
    sp_model_free(model);
    return rc;
}
