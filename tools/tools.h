/* CLI front ends.  Each subcommand is `int sp_tool_NAME(int argc, char **argv)`
 * with argv[0] the subcommand name; it prints errors as one line on stderr
 * ("spindle: ...") and returns the process exit status (2 for bad input). */
#ifndef SP_TOOLS_H
#define SP_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "spindle.h"

/* n bytes as "512 B", "1.5 MiB" ... into buf (args.c). */
void sp_tool_bytes(uint64_t n, char *buf, size_t cap);
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
int sp_tool_pull(int argc, char **argv);
int sp_tool_list(int argc, char **argv);
int sp_tool_rm(int argc, char **argv);

/* spindle bench --embed (bench_embed.c): sentences per second of sp_engine_embed. */
struct sp_model_params;
struct sp_engine_params;
int sp_bench_embed(struct sp_model_params *mp, struct sp_engine_params *ep, const char *file, int batch, int reps,
                   bool json);

/* spindle bench --json-schema (bench_masks.c): a schema's compile and copy
 * time, and the token mask before each token of seqs[i][0..lens[i]) replayed
 * on a fresh copy. */
struct sp_bench_grammar {
    double compile_ms;               /* sp_grammar_create, the token table already built */
    double copy_us;                  /* sp_grammar_clone of the result */
    double mask_us_p50, mask_us_p99; /* one token mask */
    size_t n_masks;                  /* masks timed */
};
sp_status sp_bench_grammar(const sp_model *m, const char *schema, size_t len, const sp_token *const *seqs,
                           const size_t *lens, size_t n_seqs, struct sp_bench_grammar *out);

/* spindle bench --bandwidth (bench_bandwidth.c): memory read bandwidth in
 * GB/s, best of 5 passes over 1 GiB with n_threads threads (<= 0: one per
 * core). */
sp_status sp_bench_bandwidth(int n_threads, double *gb_s);

/* Prints "spindle: <msg>\n" to stderr and returns 2. */
int sp_tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
