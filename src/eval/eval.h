/* Model quality over a text: perplexity as llama-perplexity measures it, and
 * the KL divergence of a model's next-token distributions from a base
 * model's (saved once, compared many times).
 *
 * Perplexity: the tokens (BOS first when the vocabulary adds one) are cut
 * into non-overlapping windows of n_window tokens; each window is evaluated
 * from an empty cache, its first token replaced by BOS when the vocabulary
 * adds one, and the positions of its second half predict the next token:
 * positions n_window/2 .. n_window-2, so n_window - 1 - n_window/2 scored per
 * window.  log p comes from the raw logits (max subtracted in float, the
 * exponentials summed in double, as llama.cpp does).  PPL = exp(mean -log
 * p); its standard error is PPL x sqrt(var(-log p) / (n - 1)).
 *
 * KL files: a header (magic, version, n_vocab, n_window, windows, the
 * tokens' hash) and, per scored position, the base model's n_vocab
 * log-probabilities as IEEE half floats (2 x n_vocab bytes a position).
 */
#ifndef SP_EVAL_H
#define SP_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_engine;
struct sp_vocab;

struct sp_ppl_result {
    size_t n_windows;  /* evaluated so far */
    size_t n_scored;   /* tokens scored */
    double ppl, ppl_err;
    /* against a base file (kl_base_in); zero otherwise */
    double base_ppl;
    double kl_mean, kl_err, kl_p99, kl_max;
    double top1_same;  /* fraction of positions whose most likely token is the base model's */
};

struct sp_ppl_params {
    int n_window;              /* tokens per window; >= 4, <= the engine's context */
    size_t max_windows;        /* 0: every full window of the text */
    const char *kl_base_out;   /* save the log-probabilities here (NULL: no) */
    const char *kl_base_in;    /* compare with this saved file (NULL: no) */
    /* after each window; r holds the running values (KL: mean only) */
    void (*progress)(void *ud, const struct sp_ppl_result *r, size_t n_windows_total);
    void *progress_ud;
};

/* Tokenises a text as llama-perplexity does (the vocabulary's BOS when it
 * adds one, special-token texts not parsed).  *add_bos says whether BOS was
 * added.  *out is malloc'd. */
sp_status sp_eval_tokenize(const struct sp_vocab *v, const char *text, size_t len, sp_token **out, size_t *n,
                           bool *add_bos);

/* Evaluates the windows; SP_ERR_ARG when the text holds no full window,
 * SP_ERR_IO / SP_ERR_FORMAT for the KL files (a base file made from other
 * tokens, window or vocabulary is refused), nothing written on failure. */
sp_status sp_eval_perplexity(struct sp_engine *e, const sp_token *tokens, size_t n_tokens, bool add_bos,
                             const struct sp_ppl_params *p, struct sp_ppl_result *r);

/* Evaluates the same windows without scoring them (matmul observers see
 * every token; spindle imatrix).  progress(ud, done, total) after each. */
sp_status sp_eval_windows(struct sp_engine *e, const sp_token *tokens, size_t n_tokens, bool add_bos, int n_window,
                          size_t max_windows, void (*progress)(void *ud, size_t done, size_t total), void *ud,
                          size_t *n_done);

#endif
