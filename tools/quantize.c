/* spindle quantize: convert a model file to another weight type. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

static void sp_quantize_usage(FILE *f)
{
    const char *about;
    fprintf(f, "usage: spindle quantize [options] IN.gguf OUT.gguf TYPE\n\n"
               "options:\n"
               "  -t, --threads N        threads (default: one per core)\n"
               "  --allow-requantize     accept quantized input (quality drops with each requantization)\n"
               "  --imatrix FILE         importance matrix from spindle imatrix or llama-imatrix\n\n"
               "types:\n");
    for (size_t i = 0; sp_quantize_type_name(i, &about); i++)
        fprintf(f, "  %-7s %s\n", sp_quantize_type_name(i, NULL), about);
    fprintf(f, "  (Q3_K, Q4_K and Q5_K mean Q3_K_M, Q4_K_M and Q5_K_M)\n");
}

int sp_tool_quantize(int argc, char **argv)
{
    struct sp_args a = {argc, argv, 1, false};
    sp_quantize_params p;
    sp_quantize_stats s;
    const char *pos[3];
    int n_pos = 0;
    sp_quantize_params_default(&p);
    for (; a.i < argc && !a.failed; a.i++) {
        if (sp_args_is(&a, "-h", "--help")) {
            sp_quantize_usage(stdout);
            return 0;
        } else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 256, &p.n_threads);
        else if (sp_args_is(&a, "--allow-requantize", NULL)) p.allow_requantize = true;
        else if (sp_args_is(&a, "--imatrix", NULL)) p.imatrix = sp_args_value(&a);
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
    p.type = pos[2];
    p.progress = sp_progress_stderr;
    if (sp_model_quantize(pos[0], pos[1], &p, &s) != SP_OK)
        return sp_tool_fail("%s", sp_error_message());
    double n = s.n_elements ? (double)s.n_elements : 1;
    printf("%s -> %s (%s): %.2f MiB (%.2f bits per weight) -> %.2f MiB (%.2f bits per weight); "
           "%u tensors, %u converted, %u with a fallback type",
           pos[0], pos[1], p.type, s.bytes_in / 1048576.0, s.bytes_in * 8.0 / n, s.bytes_out / 1048576.0,
           s.bytes_out * 8.0 / n, s.n_tensors, s.n_converted, s.n_fallback);
    if (p.imatrix)
        printf(", %u with importance weights", s.n_imatrix);
    printf("\n");
    return 0;
}
