/* spindle imatrix: importance matrix of a model over a text, for
 * `spindle quantize --imatrix`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "core/error.h"
#include "engine/engine.h"
#include "eval/eval.h"
#include "quantize/imatrix.h"
#include "tools.h"

static void sp_imatrix_progress(void *ud, size_t done, size_t total)
{
    (void)ud;
    fprintf(stderr, "\rwindow %zu/%zu", done, total);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int sp_tool_imatrix(int argc, char **argv)
{
    struct sp_engine_params ep = {0};
    struct sp_args a = {argc, argv, 1, false};
    const char *text_path = NULL, *out = NULL;
    int n_window = 512;
    long long max_windows = 0;
    struct sp_engine *e = NULL;
    struct sp_imatrix_acc *acc = NULL;
    sp_token *toks = NULL;
    char *text = NULL;
    size_t len = 0, n_toks = 0, n_done = 0;
    bool add_bos = false;
    int rc = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            puts("usage: spindle imatrix -m MODEL -f TEXT -o OUT.gguf [--ctx 512] [--chunks N] [--batch N] [-t N]\n"
                 "  collects each layer matrix's input importance over windows of the text\n"
                 "  (llama.cpp's imatrix GGUF format), for spindle quantize --imatrix");
            return 0;
        } else if (sp_args_is(&a, "-m", "--model")) ep.model_path = sp_args_value(&a);
        else if (sp_args_is(&a, "-f", "--file")) text_path = sp_args_value(&a);
        else if (sp_args_is(&a, "-o", "--output")) out = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 4, 1 << 20, &n_window);
        else if (sp_args_is(&a, "--batch", "-b")) sp_args_int(&a, 1, 1 << 16, &ep.n_batch);
        else if (sp_args_is(&a, "--chunks", NULL)) sp_args_long(&a, 1, 1LL << 40, &max_windows);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &ep.n_threads);
        else
            return sp_tool_fail("imatrix: unknown option '%s'", argv[a.i]);
    }
    if (a.failed)
        return 2;
    if (!ep.model_path || !text_path || !out)
        return sp_tool_fail("imatrix: -m MODEL, -f TEXT and -o OUT are required");
    if (!(text = sp_read_file(text_path, &len)))
        return sp_tool_fail("imatrix: cannot read '%s'", text_path);
    ep.n_ctx = n_window;
    if (ep.n_batch <= 0 || ep.n_batch > n_window)
        ep.n_batch = n_window;
    if (sp_engine_init(&e, &ep) != SP_OK || sp_imatrix_acc_init(&acc, sp_engine_model(e)) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    if (sp_eval_tokenize(sp_engine_vocab(e), text, len, &toks, &n_toks, &add_bos) != SP_OK) {
        sp_tool_fail("%s: %s", text_path, sp_error_message());
        goto done;
    }
    sp_engine_observe(e, sp_imatrix_acc_observe, acc);
    if (sp_eval_windows(e, toks, n_toks, add_bos, n_window, (size_t)max_windows,
                        isatty(2) ? sp_imatrix_progress : NULL, NULL, &n_done) != SP_OK ||
        sp_imatrix_acc_write(acc, out, text_path, (uint32_t)n_done, (uint32_t)n_window) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    printf("%s: %zu windows of %d tokens from %s\n", out, n_done, n_window, text_path);
    rc = 0;
done:
    sp_imatrix_acc_free(acc);
    free(toks);
    free(text);
    sp_engine_free(e);
    return rc;
}
