/* spindle perplexity: how well a model predicts a text (and how far a
 * quantised model's predictions move from the original's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "core/error.h"
#include "engine/engine.h"
#include "eval/eval.h"
#include "tools.h"

static void sp_ppl_progress(void *ud, const struct sp_ppl_result *r, size_t total)
{
    (void)ud;
    fprintf(stderr, "\rwindow %zu/%zu: PPL %.4f", r->n_windows, total, r->ppl);
    if (r->kl_mean > 0)
        fprintf(stderr, ", KL %.6f", r->kl_mean);
    if (r->n_windows == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int sp_tool_perplexity(int argc, char **argv)
{
    struct sp_engine_params ep = {0};
    struct sp_ppl_params pp = {.n_window = 512};
    struct sp_args a = {argc, argv, 1, false};
    const char *text_path = NULL, *kl_file = NULL;
    bool kl_compare = false;
    long long max_windows = 0;
    struct sp_engine *e = NULL;
    sp_token *toks = NULL;
    char *text = NULL;
    size_t len = 0, n_toks = 0;
    bool add_bos = false;
    int rc = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle perplexity -m MODEL -f TEXT [--ctx 512] [--batch N] [--chunks N] [-t N]\n"
                 "                          [--kl-divergence-base FILE [--kl-divergence]]\n"
                 "  --ctx N                  window size; the second half of each window is scored\n"
                 "  --chunks N               evaluate only the first N windows\n"
                 "  --kl-divergence-base F   save this model's log-probabilities to F (or, with\n"
                 "  --kl-divergence          compare this model with the ones saved in F)");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) ep.model_path = sp_args_value(&a);
        else if (sp_args_is(&a, "-f", "--file")) text_path = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 4, 1 << 20, &pp.n_window);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &ep.n_batch);
        else if (sp_args_is(&a, "--chunks", NULL)) sp_args_long(&a, 1, 1LL << 40, &max_windows);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &ep.n_threads);
        else if (sp_args_is(&a, "--kl-divergence-base", NULL)) kl_file = sp_args_value(&a);
        else if (sp_args_is(&a, "--kl-divergence", NULL)) kl_compare = true;
        else
            return sp_tool_fail("perplexity: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!ep.model_path || !text_path)
        return sp_tool_fail("perplexity: -m MODEL and -f TEXT are required");
    if (kl_compare && !kl_file)
        return sp_tool_fail("perplexity: --kl-divergence needs --kl-divergence-base FILE");
    pp.max_windows = (size_t)max_windows;
    *(kl_compare ? &pp.kl_base_in : &pp.kl_base_out) = kl_file;
    if (!(text = sp_read_file(text_path, &len)))
        return sp_tool_fail("perplexity: cannot read '%s'", text_path);
    ep.n_ctx = pp.n_window;
    if (ep.n_batch <= 0 || ep.n_batch > pp.n_window)
        ep.n_batch = pp.n_window;
    ep.n_outputs = ep.n_batch; /* a window's scored half in few forwards */
    if (sp_engine_init(&e, &ep) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    if (sp_eval_tokenize(sp_engine_vocab(e), text, len, &toks, &n_toks, &add_bos) != SP_OK) {
        sp_tool_fail("%s: %s", text_path, sp_error_message());
        goto done;
    }
    if (isatty(2))
        pp.progress = sp_ppl_progress;
    struct sp_ppl_result r;
    if (sp_eval_perplexity(e, toks, n_toks, add_bos, &pp, &r) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    printf("%zu windows of %d tokens (%zu tokens in the text), %zu tokens scored\n", r.n_windows, pp.n_window, n_toks,
           r.n_scored);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
    if (kl_compare) {
        printf("base model PPL = %.4f, ln(PPL / base PPL) = %.6f\n", r.base_ppl, log(r.ppl / r.base_ppl));
        printf("KL divergence: mean %.6f +/- %.6f, 99th percentile %.6f, max %.6f\n", r.kl_mean, r.kl_err, r.kl_p99,
               r.kl_max);
        printf("same top token: %.3f %%\n", 100.0 * r.top1_same);
    }
    rc = 0;
done:
    free(toks);
    free(text);
    sp_engine_free(e);
    return rc;
}
