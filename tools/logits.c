/* spindle logits: the next-token logits after a prompt, as JSON:
 * {"tokens": [prompt ids], "top": [[id, logit], ...]} (descending).
 * With --from P, also "steps": the top logits after every position >= P
 * (teacher forcing: feed a reference continuation with --ids). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

static const float *sp_logits_base;

struct sp_logits_ctx {
    int top;
    uint32_t n_vocab;
    int32_t *idx;
    json_t *steps, *last;
};

static json_t *sp_logits_top(struct sp_logits_ctx *c, const float *logits);

static void sp_logits_step(void *user, size_t pos, const float *logits)
{
    struct sp_logits_ctx *c = user;
    json_t *top = sp_logits_top(c, logits);
    json_array_append_new(c->steps, json_pack("{s:I,s:o}", "pos", (json_int_t)pos, "top", json_incref(top)));
    json_decref(c->last);
    c->last = top;
}

static int sp_logits_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float fx = sp_logits_base[x], fy = sp_logits_base[y];
    if (fx != fy)
        return fx > fy ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The c->top best ids (by logit, descending; ties by ascending id, as
 * sp_logits_cmp orders) without sorting the whole vocabulary: a min-heap
 * of the best so far keeps each position's cost near n_vocab. */
static void sp_logits_sift(int32_t *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, m = i;
        if (l < n && sp_logits_cmp(&h[l], &h[m]) > 0)
            m = l;
        if (l + 1 < n && sp_logits_cmp(&h[l + 1], &h[m]) > 0)
            m = l + 1;
        if (m == i)
            return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static json_t *sp_logits_top(struct sp_logits_ctx *c, const float *logits)
{
    int32_t *h = c->idx;
    int k = c->top;
    sp_logits_base = logits;
    for (int i = 0; i < k; i++)
        h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sp_logits_sift(h, k, i);  /* h[0]: the worst of the kept */
    for (uint32_t i = (uint32_t)k; i < c->n_vocab; i++) {
        int32_t id = (int32_t)i;
        if (sp_logits_cmp(&id, &h[0]) < 0) {
            h[0] = id;
            sp_logits_sift(h, k, 0);
        }
    }
    qsort(h, (size_t)k, sizeof *h, sp_logits_cmp);
    json_t *jtop = json_array();
    for (int i = 0; i < k; i++)
        json_array_append_new(jtop, json_pack("[if]", h[i], (double)logits[h[i]]));
    return jtop;
}

/* Parses "1 2 3" into malloc'd ids; false after printing the error. */
static bool sp_logits_ids(const char *s, sp_token **out, size_t *n)
{
    size_t cap = strlen(s) / 2 + 1, k = 0;
    sp_token *t = malloc(cap * sizeof *t);
    char *end;
    if (!t) {
        sp_tool_fail("out of memory");
        return false;
    }
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || k == cap) {
            free(t);
            sp_tool_fail("--ids: '%.20s' is not a token id", s);
            return false;
        }
        t[k++] = (sp_token)v;
        s = end;
    }
    *out = t;
    *n = k;
    return true;
}

/* Tokenizes text (BOS per the file) into malloc'd ids; false after printing
 * the error. */
static bool sp_logits_tokenize(const sp_model *m, const char *text, bool special, sp_token **out, size_t *n)
{
    size_t len = strlen(text), cap = 6 * len + 16;
    *out = malloc(cap * sizeof **out);
    if (!*out || sp_model_tokenize(m, text, len, true, special, *out, cap, n) != SP_OK) {
        sp_tool_fail("%s", *out ? sp_error_message() : "out of memory");
        return false;
    }
    return true;
}

int sp_tool_logits(int argc, char **argv)
{
    sp_model_params mp;
    sp_engine_params ep;
    struct sp_args a = {argc, argv, 1, false};
    const char *prompt = NULL, *ids = NULL;
    int top = 10, from = -1;
    bool special = false;
    sp_model *model = NULL;
    sp_engine *e = NULL;
    sp_token *toks = NULL;
    int32_t *idx = NULL;
    size_t n_toks = 0;
    int rc = 2;
    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle logits -m MODEL (-p PROMPT | --ids \"ID ...\") [--top K (0 = all)] [--from POS]\n"
                 "                      [--special] [--ctx N] [-t N] [--swa-full]");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "-p", "--prompt")) prompt = sp_args_value(&a);
        else if (sp_args_is(&a, "--ids", NULL)) ids = sp_args_value(&a);
        else if (sp_args_is(&a, "--from", NULL)) sp_args_int(&a, 0, 1 << 24, &from);
        else if (sp_args_is(&a, "--top", NULL)) sp_args_int(&a, 0, 1 << 24, &top);
        else if (sp_args_is(&a, "--special", NULL)) special = true;
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 2, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &mp.n_threads);
        else if (sp_args_is(&a, "--swa-full", NULL)) ep.swa_full = true;
        else
            return sp_tool_fail("logits: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!mp.path || (!prompt && !ids))
        return sp_tool_fail("logits: -m MODEL and -p PROMPT (or --ids) are required");
    if (sp_model_load(&mp, &model) != SP_OK || sp_engine_create(model, &ep, &e) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    uint32_t n_vocab = sp_model_n_vocab(model);
    if (!(ids ? sp_logits_ids(ids, &toks, &n_toks) : sp_logits_tokenize(model, prompt, special, &toks, &n_toks)))
        goto done;
    if (n_toks == 0) {
        sp_tool_fail("logits: no tokens");
        goto done;
    }
    idx = malloc(n_vocab * sizeof *idx);
    if (!idx) {
        sp_tool_fail("out of memory");
        goto done;
    }
    if (top <= 0 || (uint32_t)top > n_vocab)
        top = (int)n_vocab;
    struct sp_logits_ctx c = {top, n_vocab, idx, json_array(), NULL};
    size_t first = from >= 0 && (size_t)from < n_toks ? (size_t)from : n_toks - 1;
    if (sp_engine_logits(e, toks, n_toks, first, sp_logits_step, &c) != SP_OK) {
        json_decref(c.steps);
        json_decref(c.last);
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    json_t *root = json_object(), *jt = json_array();
    for (size_t i = 0; i < n_toks; i++)
        json_array_append_new(jt, json_integer(toks[i]));
    json_object_set_new(root, "tokens", jt);
    json_object_set_new(root, "top", c.last);
    if (from >= 0)
        json_object_set_new(root, "steps", c.steps);
    else
        json_decref(c.steps);
    json_dumpf(root, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    json_decref(root);
    rc = 0;
done:
    free(idx);
    free(toks);
    sp_engine_free(e);
    sp_model_free(model);
    return rc;
}
