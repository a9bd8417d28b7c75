/* spindle quantize: convert a model file to another weight type. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "core/error.h"
#include "quantize/imatrix.h"
#include "quantize/quantize.h"
#include "tools.h"

static void sp_quantize_usage(FILE *f)
{
    fprintf(f, "usage: spindle quantize [options] IN.gguf OUT.gguf TYPE\n\n"
               "options:\n"
               "  -t, --threads N        threads (default: one per core)\n"
               "  --allow-requantize     accept quantized input (quality drops with each requantization)\n"
               "  --imatrix FILE         importance matrix from spindle imatrix or llama-imatrix\n\n"
               "types:\n");
    for (int i = 0; sp_quantize_ftype_at(i); i++)
        fprintf(f, "  %-7s %s\n", sp_quantize_ftype_at(i)->name, sp_quantize_ftype_at(i)->about);
    fprintf(f, "  (Q3_K, Q4_K and Q5_K mean Q3_K_M, Q4_K_M and Q5_K_M)\n");
}

/* A bar on stderr when it is a terminal. */
static void sp_quantize_progress(void *ud, uint64_t done, uint64_t total)
{
    (void)ud;
    int width = 40, fill = total ? (int)(done * width / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %3d%%", fill, "########################################", width - fill, "",
            total ? (int)(done * 100 / total) : 100);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int sp_tool_quantize(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    struct sp_quantize_params p = {0};
    struct sp_quantize_stats s;
    struct sp_imatrix *im = NULL;
    const char *pos[3], *imatrix_path = NULL;
    int n_pos = 0, rc = 2;
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            sp_quantize_usage(stdout);
            return 0;
        } else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 256, &p.n_threads);
        else if (sp_args_is(&a, "--allow-requantize", NULL)) p.allow_requantize = true;
        else if (sp_args_is(&a, "--imatrix", NULL)) imatrix_path = sp_args_value(&a);
        else if (argv[a.i][0] == '-' && argv[a.i][1])
            return sp_tool_fail("quantize: unknown option '%s'", argv[a.i]);
        else if (n_pos == 3)
            return sp_tool_fail("quantize: unexpected argument '%s' (IN.gguf OUT.gguf TYPE)", argv[a.i]);
        else
            pos[n_pos++] = argv[a.i];
    }
    if (a.failed)
        return 2;
    if (n_pos < 3)
        return sp_tool_fail("quantize: expected IN.gguf OUT.gguf TYPE (spindle quantize --help)");
    p.in_path = pos[0];
    p.out_path = pos[1];
    if (!(p.ftype = sp_quantize_ftype_find(pos[2])))
        return sp_tool_fail("quantize: unknown type '%s' (spindle quantize --help lists them)", pos[2]);
    if (imatrix_path && sp_imatrix_load(&im, imatrix_path) != SP_OK)
        return sp_tool_fail("imatrix: %s", sp_error_message());
    p.imatrix = im;
    if (isatty(2))
        p.progress = sp_quantize_progress;
    if (sp_quantize_file(&p, &s) != SP_OK) {
        if (p.progress)
            fputc('\n', stderr);
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    double n = s.n_elements ? (double)s.n_elements : 1;
    printf("%s -> %s (%s): %.2f MiB (%.2f bits per weight) -> %.2f MiB (%.2f bits per weight); "
           "%u tensors, %u converted, %u with a fallback type",
           p.in_path, p.out_path, p.ftype->name, s.bytes_in / 1048576.0, s.bytes_in * 8.0 / n,
           s.bytes_out / 1048576.0, s.bytes_out * 8.0 / n, s.n_tensors, s.n_converted, s.n_fallback);
    if (im)
        printf(", %u with importance weights", s.n_imatrix);
    printf("\n");
    rc = 0;
done:
    sp_imatrix_free(im);
    return rc;
}
