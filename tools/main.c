/* spindle — command-line entry point: dispatches to a subcommand. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "spindle.h"
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
    {"pull", sp_tool_pull, "fetch a GGUF model from the Hugging Face hub by name"},
    {"list", sp_tool_list, "the models pull stored"},
    {"rm", sp_tool_rm, "remove a stored model"},
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
    fprintf(f, "usage: spindle COMMAND [options]   (spindle COMMAND --help for its options)\n"
               "       spindle --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof sp_subcommands / sizeof sp_subcommands[0]; i++)
        fprintf(f, "  %-11s %s\n", sp_subcommands[i].name, sp_subcommands[i].usage);
}

/* `spindle --help`: the commands on stdout, exit 0. */
static int sp_opt_help(void)
{
    sp_usage(stdout);
    return 0;
}

/* `spindle --version`: the version of the library linked in, exit 0. */
static int sp_opt_version(void)
{
    printf("spindle %s\n", sp_version());
    return 0;
}

/* The options `spindle` takes in place of a command. */
static const struct sp_option {
    const char *name;
    int (*fn)(void);
} sp_options[] = {
    {"--help", sp_opt_help}, {"-h", sp_opt_help}, {"help", sp_opt_help},
    {"--version", sp_opt_version}, {"-V", sp_opt_version},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        sp_usage(stderr);
        return 2;
    }
    for (size_t i = 0; i < sizeof sp_options / sizeof sp_options[0]; i++)
        if (!strcmp(argv[1], sp_options[i].name))
            return sp_options[i].fn();
    for (size_t i = 0; i < sizeof sp_subcommands / sizeof sp_subcommands[0]; i++)
        if (!strcmp(argv[1], sp_subcommands[i].name))
            return sp_subcommands[i].fn(argc - 1, argv + 1);
    sp_usage(stderr);
    return sp_tool_fail("unknown command '%s'", argv[1]);
}
