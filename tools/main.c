/* spindle — command-line entry point: dispatches to a subcommand. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools.h"

struct sp_subcommand {
    const char *name;
    int (*fn)(int, char **);
    const char *usage;
};

static const struct sp_subcommand sp_subcommands[] = {
    {"run", sp_tool_run, "generate text from a prompt"},
    {"chat", sp_tool_chat, "multi-turn chat in the terminal"},
    {"serve", sp_tool_serve, "OpenAI-compatible HTTP server and chat page"},
    {"bench", sp_tool_bench, "prefill and decode speed"},
    {"info", sp_tool_info, "describe a model file"},
    {"quantize", sp_tool_quantize, "convert a model file to another weight type"},
    {"perplexity", sp_tool_perplexity, "perplexity of a text (and KL divergence from a base model)"},
    {"imatrix", sp_tool_imatrix, "importance matrix of a model over a text (for quantize --imatrix)"},
    {"embed", sp_tool_embed, "embedding vectors of lines of text, as JSON"},
    {"logits", sp_tool_logits, "next-token logits for a prompt, as JSON"},
    {"tokenize", sp_tool_tokenize, "text to token ids"},
    {"detokenize", sp_tool_detokenize, "token ids to text"},
};

int sp_tool_fail(const char *fmt, ...)
{
    va_list ap;
    fputs("spindle: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

static void sp_usage(FILE *f)
{
    fprintf(f, "usage: spindle COMMAND [options]   (spindle COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof sp_subcommands / sizeof sp_subcommands[0]; i++)
        fprintf(f, "  %-11s %s\n", sp_subcommands[i].name, sp_subcommands[i].usage);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        sp_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        sp_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof sp_subcommands / sizeof sp_subcommands[0]; i++)
        if (!strcmp(argv[1], sp_subcommands[i].name))
            return sp_subcommands[i].fn(argc - 1, argv + 1);
    sp_usage(stderr);
    return sp_tool_fail("unknown command '%s'", argv[1]);
}
