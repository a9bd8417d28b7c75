/* Model quality over a text (sp_engine_perplexity, sp_engine_imatrix in
 * include/spindle.h): perplexity as llama-perplexity measures it, the KL
 * divergence of a model's next-token distributions from a base model's
 * (saved once, compared many times), and the windows spindle imatrix runs.
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
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quantize/imatrix.h"
#include "tokenizer/tokenizer.h"

#define SP_KL_MAGIC "SPKLBASE"
#define SP_KL_VERSION 1u

struct sp_kl_header {
    char magic[8];
    uint32_t version, n_vocab, n_window, reserved;
    uint64_t n_windows, tokens_hash, n_positions;
};

/* Tokenizes as llama-perplexity does (the vocabulary's BOS when it adds
 * one, special-token texts not parsed); *add_bos says whether BOS was
 * added.  *out is malloc'd. */
static sp_status sp_eval_tokenize(const struct sp_vocab *v, const char *text, size_t len, sp_token **out, size_t *n,
                                  bool *add_bos)
{
    sp_token probe[8];
    size_t n_probe = 0;
    *out = NULL;
    *n = 0;
    /* BOS is added when an empty text gets it */
    sp_status st = sp_tokenize(v, "", 0, true, false, probe, 8, &n_probe);
    if (st != SP_OK)
        return st;
    *add_bos = n_probe > 0 && probe[0] == sp_vocab_bos(v);
    if (len > (SIZE_MAX - 16) / 6 / sizeof(sp_token))
        return sp_error_set(SP_ERR_ARG, "text of %zu bytes is too long", len);
    size_t cap = 6 * len + 16;
    if (!(*out = malloc(cap * sizeof **out)))
        return sp_error_set(SP_ERR_NOMEM, "no memory for the tokens of %zu bytes", len);
    if ((st = sp_tokenize(v, text, len, true, false, *out, cap, n)) != SP_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static uint64_t sp_tokens_hash(const sp_token *t, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)t[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h;
}

/* State of one evaluation, shared with the per-position callback. */
struct sp_ppl_run {
    const sp_token *tok;
    size_t start;
    int n_window;
    uint32_t n_vocab;
    double nll, nll2;
    size_t count;
    FILE *out, *in;
    uint16_t *half;     /* n_vocab */
    float *lp;          /* n_vocab */
    double *kl;         /* per scored position */
    double kl_sum, kl2_sum, base_nll;
    size_t top1_same;
    sp_status st;
};

static size_t sp_argmax(const float *x, uint32_t n)
{
    size_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void sp_ppl_kl(struct sp_ppl_run *r, const float *logits, sp_token target)
{
    if (fread(r->half, sizeof *r->half, r->n_vocab, r->in) != r->n_vocab) {
        r->st = sp_error_set(SP_ERR_FORMAT, "KL base file ends early");
        return;
    }
    double kl = 0;
    size_t best = 0;
    float best_v = -INFINITY;
    for (uint32_t i = 0; i < r->n_vocab; i++) {
        float b = sp_f16_to_f32(r->half[i]);
        if (b > best_v) {
            best_v = b;
            best = i;
        }
        kl += exp((double)b) * ((double)b - (double)r->lp[i]);
    }
    r->base_nll -= sp_f16_to_f32(r->half[target]);
    r->top1_same += best == sp_argmax(logits, r->n_vocab);
    r->kl[r->count - 1] = kl;
    r->kl_sum += kl;
    r->kl2_sum += kl * kl;
}

static void sp_ppl_position(void *user, size_t pos, const float *logits)
{
    struct sp_ppl_run *r = user;
    if (r->st != SP_OK || pos + 1 >= (size_t)r->n_window)
        return;
    sp_token target = r->tok[r->start + pos + 1];
    float max = logits[0];
    for (uint32_t i = 1; i < r->n_vocab; i++)
        max = max > logits[i] ? max : logits[i];
    double sum = 0;
    for (uint32_t i = 0; i < r->n_vocab; i++)
        sum += expf(logits[i] - max);
    double log_sum = log(sum);
    double v = (logits[target] - max) - log_sum;
    r->nll -= v;
    r->nll2 += v * v;
    r->count++;
    if (!r->out && !r->in)
        return;
    for (uint32_t i = 0; i < r->n_vocab; i++)
        r->lp[i] = (float)((logits[i] - max) - log_sum);
    if (r->out) {
        for (uint32_t i = 0; i < r->n_vocab; i++)
            r->half[i] = sp_f32_to_f16(r->lp[i]);
        if (fwrite(r->half, sizeof *r->half, r->n_vocab, r->out) != r->n_vocab)
            r->st = sp_error_set(SP_ERR_IO, "writing the KL base file: %s", strerror(errno));
    } else {
        sp_ppl_kl(r, logits, target);
    }
}

static int sp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void sp_ppl_finish(const struct sp_ppl_run *r, sp_perplexity_result *res, bool final)
{
    double n = r->count ? (double)r->count : 1;
    double mean = r->nll / n, var = r->nll2 / n - mean * mean;
    res->n_scored = r->count;
    res->ppl = exp(mean);
    res->ppl_err = r->count > 1 && var > 0 ? sqrt(var / (n - 1)) * res->ppl : 0;
    if (!r->in)
        return;
    double km = r->kl_sum / n, kv = r->kl2_sum / n - km * km;
    res->kl_mean = km;
    res->kl_err = r->count > 1 && kv > 0 ? sqrt(kv / (n - 1)) : 0;
    res->base_ppl = exp(r->base_nll / n);
    res->top1_same = (double)r->top1_same / n;
    if (!final || !r->count)
        return;
    qsort(r->kl, r->count, sizeof *r->kl, sp_cmp_double);
    size_t k = (size_t)ceil(0.99 * (double)r->count);
    res->kl_p99 = r->kl[k ? k - 1 : 0];
    res->kl_max = r->kl[r->count - 1];
}

/* Opens the KL files; for a base file to compare with, checks it was made
 * from the same tokens, window and vocabulary and takes its window count. */
static sp_status sp_ppl_open(struct sp_ppl_run *r, const sp_perplexity_params *p, char **tmp_path, size_t *n_windows,
                             size_t n_tokens)
{
    struct sp_kl_header h = {.magic = SP_KL_MAGIC, .version = SP_KL_VERSION, .n_vocab = r->n_vocab,
                             .n_window = (uint32_t)p->n_window};
    if (p->kl_base_in) {
        if (!(r->in = fopen(p->kl_base_in, "rb")))
            return sp_error_set(SP_ERR_IO, "%s: %s", p->kl_base_in, strerror(errno));
        struct sp_kl_header f;
        if (fread(&f, sizeof f, 1, r->in) != 1 || memcmp(f.magic, SP_KL_MAGIC, 8) || f.version != SP_KL_VERSION)
            return sp_error_set(SP_ERR_FORMAT, "%s: not a KL base file of this version", p->kl_base_in);
        if (f.n_vocab != r->n_vocab || f.n_window != (uint32_t)p->n_window)
            return sp_error_set(SP_ERR_FORMAT, "%s: made with %u-token vocabulary and --ctx %u; this run has %u and %d",
                                p->kl_base_in, f.n_vocab, f.n_window, r->n_vocab, p->n_window);
        if (f.n_windows == 0 || f.n_windows > n_tokens / (size_t)p->n_window ||
            (p->max_windows && p->max_windows != f.n_windows) ||
            f.tokens_hash != sp_tokens_hash(r->tok, (size_t)f.n_windows * (size_t)p->n_window))
            return sp_error_set(SP_ERR_FORMAT, "%s: made from another text (or window count)", p->kl_base_in);
        *n_windows = (size_t)f.n_windows;
        struct stat sb;
        uint64_t want = sizeof f + f.n_positions * 2ull * r->n_vocab;
        if (fstat(fileno(r->in), &sb) != 0 || (uint64_t)sb.st_size != want ||
            f.n_positions != (uint64_t)*n_windows * (uint64_t)(p->n_window - 1 - p->n_window / 2))
            return sp_error_set(SP_ERR_FORMAT, "%s: %lld bytes, expected %llu (truncated?)", p->kl_base_in,
                                (long long)sb.st_size, (unsigned long long)want);
    }
    if (p->kl_base_out) {
        size_t n = strlen(p->kl_base_out) + 16;
        if (!(*tmp_path = malloc(n)))
            return sp_error_set(SP_ERR_NOMEM, "no memory");
        snprintf(*tmp_path, n, "%s.part-XXXXXX", p->kl_base_out);
        int fd = mkstemp(*tmp_path);
        if (fd < 0 || !(r->out = fdopen(fd, "wb"))) {
            sp_status st = sp_error_set(SP_ERR_IO, "cannot create '%s': %s", *tmp_path, strerror(errno));
            if (fd >= 0)
                close(fd), unlink(*tmp_path);
            free(*tmp_path);
            *tmp_path = NULL;
            return st;
        }
        (void)fchmod(fd, 0644);
        h.n_windows = *n_windows;
        h.tokens_hash = sp_tokens_hash(r->tok, *n_windows * (size_t)p->n_window);
        h.n_positions = (uint64_t)*n_windows * (uint64_t)(p->n_window - 1 - p->n_window / 2);
        if (fwrite(&h, sizeof h, 1, r->out) != 1)
            return sp_error_set(SP_ERR_IO, "%s: %s", *tmp_path, strerror(errno));
    }
    return SP_OK;
}

static sp_status sp_ppl_windows(struct sp_engine *e, struct sp_ppl_run *r, sp_token *win, bool add_bos,
                                size_t n_windows, const sp_perplexity_params *p, sp_perplexity_result *res)
{
    const struct sp_vocab *v = sp_engine_vocab(e);
    for (size_t w = 0; w < n_windows; w++) {
        r->start = w * (size_t)p->n_window;
        memcpy(win, r->tok + r->start, (size_t)p->n_window * sizeof *win);
        if (add_bos)
            win[0] = sp_vocab_bos(v);
        sp_status st = sp_engine_logits(e, win, (size_t)p->n_window, (size_t)p->n_window / 2,
                                             sp_ppl_position, r);
        if (st == SP_OK)
            st = r->st;
        if (st != SP_OK)
            return st;
        res->n_windows = w + 1;
        sp_ppl_finish(r, res, false);
        if (p->progress)
            p->progress(p->progress_user, res, n_windows);
    }
    return SP_OK;
}

void sp_perplexity_params_default(sp_perplexity_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_window = 512;
}

/* The windows a text of n_tokens holds for n_window (at most max_windows
 * when that is not 0); SP_ERR_ARG when the window does not fit the engine
 * or the text holds none. */
static sp_status sp_eval_count(const struct sp_engine *e, size_t n_tokens, int n_window, size_t max_windows,
                               size_t *n_windows)
{
    if (n_window < 4 || n_window > sp_engine_n_ctx(e))
        return sp_error_set(SP_ERR_ARG, "window of %d tokens: expected 4..%d (the context)", n_window,
                            sp_engine_n_ctx(e));
    *n_windows = n_tokens / (size_t)n_window;
    if (max_windows && max_windows < *n_windows)
        *n_windows = max_windows;
    if (*n_windows == 0)
        return sp_error_set(SP_ERR_ARG, "the text has %zu tokens; one window needs %d", n_tokens, n_window);
    return SP_OK;
}

static sp_status sp_eval_perplexity(struct sp_engine *e, const sp_token *tokens, size_t n_tokens, bool add_bos,
                                    const sp_perplexity_params *p, sp_perplexity_result *res)
{
    struct sp_ppl_run r = {.tok = tokens, .n_window = p->n_window, .n_vocab = sp_engine_model(e)->hp.n_vocab};
    char *tmp_path = NULL;
    sp_token *win = NULL;
    size_t n_windows;
    sp_status st = sp_eval_count(e, n_tokens, p->n_window, p->max_windows, &n_windows);
    if (st != SP_OK)
        return st;
    if ((st = sp_ppl_open(&r, p, &tmp_path, &n_windows, n_tokens)) != SP_OK)
        goto done;
    size_t n_pos = n_windows * (size_t)(p->n_window / 2);
    win = malloc((size_t)p->n_window * sizeof *win);
    r.half = malloc(r.n_vocab * sizeof *r.half);
    r.lp = malloc(r.n_vocab * sizeof *r.lp);
    r.kl = r.in ? malloc(n_pos * sizeof *r.kl) : NULL;
    if (!win || !r.half || !r.lp || (r.in && !r.kl)) {
        st = sp_error_set(SP_ERR_NOMEM, "no memory for %zu positions", n_pos);
        goto done;
    }
    if ((st = sp_ppl_windows(e, &r, win, add_bos, n_windows, p, res)) != SP_OK)
        goto done;
    sp_ppl_finish(&r, res, true);
    if (r.out) {
        int bad = fflush(r.out) != 0 || fsync(fileno(r.out)) != 0;
        bad |= fclose(r.out) != 0;
        r.out = NULL;
        if (bad || rename(tmp_path, p->kl_base_out) != 0)
            st = sp_error_set(SP_ERR_IO, "writing '%s': %s", p->kl_base_out, strerror(errno));
        else
            free(tmp_path), tmp_path = NULL;
    }
done:
    if (r.out)
        fclose(r.out);
    if (tmp_path)
        unlink(tmp_path);
    if (r.in)
        fclose(r.in);
    free(tmp_path);
    free(win);
    free(r.half);
    free(r.lp);
    free(r.kl);
    return st;
}

sp_status sp_engine_perplexity(struct sp_engine *e, const char *text, size_t len, const sp_perplexity_params *p,
                               sp_perplexity_result *r)
{
    sp_perplexity_params dp;
    sp_token *toks = NULL;
    size_t n_toks = 0;
    bool add_bos = false;
    memset(r, 0, sizeof *r);
    if (!p) {
        sp_perplexity_params_default(&dp);
        p = &dp;
    }
    sp_status st = sp_eval_tokenize(sp_engine_vocab(e), text, len, &toks, &n_toks, &add_bos);
    r->n_tokens = n_toks;
    if (st == SP_OK)
        st = sp_eval_perplexity(e, toks, n_toks, add_bos, p, r);
    free(toks);
    return st;
}

static void sp_eval_ignore(void *user, size_t pos, const float *logits)
{
    (void)user, (void)pos, (void)logits;
}

/* Runs the windows without scoring them (the matmul observer sees every
 * token). */
static sp_status sp_eval_windows(struct sp_engine *e, const sp_token *tokens, bool add_bos, int n_window,
                                 size_t n_windows, const sp_imatrix_params *p, size_t *n_done)
{
    sp_token *win = malloc((size_t)n_window * sizeof *win);
    if (!win)
        return sp_error_set(SP_ERR_NOMEM, "no memory");
    sp_status st = SP_OK;
    for (size_t w = 0; w < n_windows && st == SP_OK; w++) {
        memcpy(win, tokens + w * (size_t)n_window, (size_t)n_window * sizeof *win);
        if (add_bos)
            win[0] = sp_vocab_bos(sp_engine_vocab(e));
        st = sp_engine_logits(e, win, (size_t)n_window, (size_t)n_window - 1, sp_eval_ignore, NULL);
        if (st == SP_OK) {
            *n_done = w + 1;
            if (p->progress)
                p->progress(p->progress_user, "windows", w + 1, n_windows);
        }
    }
    free(win);
    return st;
}

void sp_imatrix_params_default(sp_imatrix_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_window = 512;
}

sp_status sp_engine_imatrix(struct sp_engine *e, const char *text, size_t len, const char *out_path,
                            const sp_imatrix_params *p, size_t *n_windows)
{
    sp_imatrix_params dp;
    struct sp_imatrix_acc *acc = NULL;
    sp_token *toks = NULL;
    size_t n_toks = 0, n_total = 0, n_done = 0;
    bool add_bos = false;
    if (!p) {
        sp_imatrix_params_default(&dp);
        p = &dp;
    }
    sp_status st = sp_eval_tokenize(sp_engine_vocab(e), text, len, &toks, &n_toks, &add_bos);
    if (st == SP_OK)
        st = sp_eval_count(e, n_toks, p->n_window, p->max_windows, &n_total);
    if (st == SP_OK)
        st = sp_imatrix_acc_init(&acc, sp_engine_model(e));
    if (st == SP_OK) {
        sp_engine_observe(e, sp_imatrix_acc_observe, acc);
        st = sp_eval_windows(e, toks, add_bos, p->n_window, n_total, p, &n_done);
        sp_engine_observe(e, NULL, NULL);
    }
    if (st == SP_OK)
        st = sp_imatrix_acc_write(acc, out_path, p->dataset ? p->dataset : "", (uint32_t)n_done,
                                  (uint32_t)p->n_window);
    if (n_windows)
        *n_windows = n_done;
    sp_imatrix_acc_free(acc);
    free(toks);
    return st;
}
