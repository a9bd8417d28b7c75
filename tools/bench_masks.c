/* spindle bench --json-schema: what a schema costs, through the public
 * grammar API: compiling it (the model's token table already built),
 * copying it (what a server request repeating a schema pays), and the token
 * mask before each token of the constrained runs, replayed on a fresh copy
 * from the start (first visits of each state included, as in a run; a
 * sequence stops where the grammar refuses a token). */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "spindle.h"
#include "tools.h"

static double sp_masks_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int sp_masks_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

sp_status sp_bench_grammar(const sp_model *m, const char *schema, size_t len, const sp_token *const *seqs,
                           const size_t *lens, size_t n_seqs, struct sp_bench_grammar *out)
{
    sp_grammar *proto = NULL, *g = NULL;
    double *us = NULL;
    size_t total = 0, k = 0;
    *out = (struct sp_bench_grammar){0};
    double t0 = sp_masks_now();
    sp_status st = sp_grammar_create(m, SP_GRAMMAR_SCHEMA, schema, len, &proto);
    if (st != SP_OK)
        return st;
    double t1 = sp_masks_now();
    st = sp_grammar_clone(proto, &g);
    out->copy_us = (sp_masks_now() - t1) * 1e6;
    out->compile_ms = (t1 - t0) * 1e3;
    if (st != SP_OK)
        goto done;
    for (size_t i = 0; i < n_seqs; i++) {
        if (lens[i] > SIZE_MAX / sizeof *us - total) {
            st = sp_error_set(SP_ERR_NOMEM, "grammar benchmark: too many tokens");
            goto done;
        }
        total += lens[i];
    }
    if (!(us = malloc((total ? total : 1) * sizeof *us))) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar benchmark: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_seqs; i++) {
        sp_grammar_state s = sp_grammar_start(g);
        for (size_t j = 0; j < lens[i] && s != SP_GRAMMAR_DEAD; j++) {
            const uint64_t *mask;
            double a = sp_masks_now();
            sp_status ms = sp_grammar_mask(g, s, &mask, NULL);
            us[k++] = (sp_masks_now() - a) * 1e6;
            if (ms != SP_OK)
                break;
            s = sp_grammar_advance(g, s, seqs[i][j]);
        }
    }
    qsort(us, k, sizeof *us, sp_masks_cmp);
    out->n_masks = k;
    out->mask_us_p50 = k ? us[k / 2] : 0;
    out->mask_us_p99 = k ? us[(size_t)((double)(k - 1) * 0.99)] : 0;
done:
    free(us);
    sp_grammar_free(g);
    sp_grammar_free(proto);
    return st;
}
