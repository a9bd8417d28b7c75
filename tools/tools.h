/* CLI front ends.  Each subcommand is `int sp_tool_NAME(int argc, char **argv)`
 * with argv[0] the subcommand name; it prints errors as one line on stderr
 * ("spindle: ...") and returns the process exit status (2 for bad input). */
#ifndef SP_TOOLS_H
#define SP_TOOLS_H

#include <stdbool.h>

int sp_tool_run(int argc, char **argv);
int sp_tool_info(int argc, char **argv);
int sp_tool_logits(int argc, char **argv);
int sp_tool_bench(int argc, char **argv);
int sp_tool_tokenize(int argc, char **argv);
int sp_tool_detokenize(int argc, char **argv);
int sp_tool_serve(int argc, char **argv);
int sp_tool_chat(int argc, char **argv);
int sp_tool_quantize(int argc, char **argv);
int sp_tool_perplexity(int argc, char **argv);
int sp_tool_imatrix(int argc, char **argv);
int sp_tool_embed(int argc, char **argv);

/* spindle bench --embed (bench_embed.c): sentences per second of sp_engine_embed. */
struct sp_model_params;
struct sp_engine_params;
int sp_bench_embed(struct sp_model_params *mp, struct sp_engine_params *ep, const char *file, int batch, int reps,
                   bool json);

/* Prints "spindle: <msg>\n" to stderr and returns 2. */
int sp_tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
