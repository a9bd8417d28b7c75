/* spindle perplexity: how well a model predicts a text (and how far a
 * quantised model's predictions move from the original's).
 * spindle imatrix: importance matrix of a model over a text, for
 * `spindle quantize --imatrix`.  Both run windows of the text through an
 * engine made for them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

/* What both tools read from their flags. */
struct sp_eval_opts {
    sp_model_params mp;
    sp_engine_params ep;
    const char *text_path, *out, *kl_file;
    int n_window;
    long long max_windows;
    bool kl_compare;
};

/* Parses the flags of both tools (perplexity: the KL and cache flags;
 * imatrix: -o).  Returns -1 to go on, else the exit status. */
static int sp_eval_args(const char *tool, const char *usage, bool perplexity, int argc, char **argv,
                        struct sp_eval_opts *o)
{
    struct sp_args a = {argc, argv, 1, false};
    sp_model_params_default(&o->mp);
    sp_engine_params_default(&o->ep);
    o->n_window = 512;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) o->mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "-f", "--file")) o->text_path = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 4, 1 << 20, &o->n_window);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &o->ep.n_batch);
        else if (sp_args_is(&a, "--chunks", NULL)) sp_args_long(&a, 1, 1LL << 40, &o->max_windows);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &o->mp.n_threads);
        else if (perplexity && sp_args_is(&a, "--kl-divergence-base", NULL)) o->kl_file = sp_args_value(&a);
        else if (perplexity && sp_args_is(&a, "--kl-divergence", NULL)) o->kl_compare = true;
        else if (perplexity && sp_args_cache_type(&a, &o->ep.cache_type_k, &o->ep.cache_type_v)) continue;
        else if (!perplexity && sp_args_is(&a, "-o", "--output")) o->out = sp_args_value(&a);
        else
            return sp_tool_fail("%s: unknown option '%s'", tool, argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!o->mp.path || !o->text_path || (!perplexity && !o->out))
        return sp_tool_fail("%s: %s are required", tool,
                            perplexity ? "-m MODEL and -f TEXT" : "-m MODEL, -f TEXT and -o OUT");
    if (o->kl_compare && !o->kl_file)
        return sp_tool_fail("perplexity: --kl-divergence needs --kl-divergence-base FILE");
    /* one window at a time, a window's scored half in few forward passes */
    o->ep.n_ctx = o->n_window;
    if (o->ep.n_batch <= 0 || o->ep.n_batch > o->n_window)
        o->ep.n_batch = o->n_window;
    o->ep.n_outputs = o->ep.n_batch;
    return -1;
}

/* Reads the text and makes the model and engine; 0 or the exit status. */
static int sp_eval_open(const char *tool, const struct sp_eval_opts *o, char **text, size_t *len, sp_model **m,
                        sp_engine **e)
{
    if (!(*text = sp_read_file(o->text_path, len)))
        return sp_tool_fail("%s: cannot read '%s'", tool, o->text_path);
    if (sp_model_load(&o->mp, m) != SP_OK || sp_engine_create(*m, &o->ep, e) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    return 0;
}

static void sp_ppl_progress(void *user, const sp_perplexity_result *r, size_t total)
{
    (void)user;
    fprintf(stderr, "\rwindow %zu/%zu: PPL %.4f", r->n_windows, total, r->ppl);
    if (r->kl_mean > 0)
        fprintf(stderr, ", KL %.6f", r->kl_mean);
    if (r->n_windows == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int sp_tool_perplexity(int argc, char **argv)
{
    static const char usage[] =
        "usage: spindle perplexity -m MODEL -f TEXT [--ctx 512] [--batch N] [--chunks N] [-t N]\n"
        "                          [--kl-divergence-base FILE [--kl-divergence]]\n"
        "                          [--cache-type-k T] [--cache-type-v T]\n"
        "  --ctx N                  window size; the second half of each window is scored\n"
        "  --chunks N               evaluate only the first N windows\n"
        "  --kl-divergence-base F   save this model's log-probabilities to F (or, with\n"
        "  --kl-divergence          compare this model with the ones saved in F)\n"
        "  --cache-type-k/-v T      how the KV cache stores keys/values: f16 (default), q8_0, q4_0\n";
    struct sp_eval_opts o = {0};
    sp_perplexity_params pp;
    sp_perplexity_result r;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = sp_eval_args("perplexity", usage, true, argc, argv, &o);
    if (rc >= 0)
        return rc;
    sp_perplexity_params_default(&pp);
    pp.n_window = o.n_window;
    pp.max_windows = (size_t)o.max_windows;
    *(o.kl_compare ? &pp.kl_base_in : &pp.kl_base_out) = o.kl_file;
    if (isatty(2))
        pp.progress = sp_ppl_progress;
    if ((rc = sp_eval_open("perplexity", &o, &text, &len, &m, &e)) != 0)
        goto done;
    rc = 2;
    if (sp_engine_perplexity(e, text, len, &pp, &r) != SP_OK) {
        sp_tool_fail("%s: %s", o.text_path, sp_error_message());
        goto done;
    }
    printf("%zu windows of %d tokens (%zu tokens in the text), %zu tokens scored\n", r.n_windows, pp.n_window,
           r.n_tokens, r.n_scored);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
    if (o.kl_compare) {
        printf("base model PPL = %.4f, ln(PPL / base PPL) = %.6f\n", r.base_ppl, log(r.ppl / r.base_ppl));
        printf("KL divergence: mean %.6f +/- %.6f, 99th percentile %.6f, max %.6f\n", r.kl_mean, r.kl_err, r.kl_p99,
               r.kl_max);
        printf("same top token: %.3f %%\n", 100.0 * r.top1_same);
    }
    rc = 0;
done:
    free(text);
    sp_engine_free(e);
    sp_model_free(m);
    return rc;
}

static void sp_imatrix_progress(void *user, const char *what, uint64_t done, uint64_t total)
{
    (void)user;
    fprintf(stderr, "\r%s %llu/%llu", what, (unsigned long long)done, (unsigned long long)total);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int sp_tool_imatrix(int argc, char **argv)
{
    static const char usage[] =
        "usage: spindle imatrix -m MODEL -f TEXT -o OUT.gguf [--ctx 512] [--chunks N] [--batch N] [-t N]\n"
        "  collects each layer matrix's input importance over windows of the text\n"
        "  (llama.cpp's imatrix GGUF format), for spindle quantize --imatrix\n";
    struct sp_eval_opts o = {0};
    sp_imatrix_params ip;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    char *text = NULL;
    size_t len = 0, n_done = 0;
    int rc = sp_eval_args("imatrix", usage, false, argc, argv, &o);
    if (rc >= 0)
        return rc;
    sp_imatrix_params_default(&ip);
    ip.n_window = o.n_window;
    ip.max_windows = (size_t)o.max_windows;
    ip.dataset = o.text_path;
    if (isatty(2))
        ip.progress = sp_imatrix_progress;
    if ((rc = sp_eval_open("imatrix", &o, &text, &len, &m, &e)) != 0)
        goto done;
    rc = 2;
    if (sp_engine_imatrix(e, text, len, o.out, &ip, &n_done) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    printf("%s: %zu windows of %d tokens from %s\n", o.out, n_done, o.n_window, o.text_path);
    rc = 0;
done:
    free(text);
    sp_engine_free(e);
    sp_model_free(m);
    return rc;
}
