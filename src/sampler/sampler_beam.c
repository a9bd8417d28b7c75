#include "sampler/sampler_beam.h"

#include <math.h>
#include <stdlib.h>

/* Better: higher score, then lower parent, then lower token. */
static int sp_beam_better(const struct sp_beam_pick *a, const struct sp_beam_pick *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    if (a->parent != b->parent)
        return a->parent < b->parent;
    return a->token < b->token;
}

static int sp_beam_cmp(const void *x, const void *y)
{
    const struct sp_beam_pick *a = x, *b = y;
    return sp_beam_better(a, b) ? -1 : sp_beam_better(b, a) ? 1 : 0;
}

int sp_beam_select(const float *logits, size_t n_vocab, const double *scores, int n_beams, int width,
                   struct sp_beam_pick *picks, struct sp_beam_pick *scratch)
{
    int n = 0;
    for (int b = 0; b < n_beams; b++) {
        const float *row = logits + (size_t)b * n_vocab;
        float mx = -INFINITY;
        for (size_t i = 0; i < n_vocab; i++)
            mx = row[i] > mx ? row[i] : mx;
        double sum = 0.0;
        for (size_t i = 0; i < n_vocab; i++)
            sum += exp((double)row[i] - mx);
        double lse = mx + log(sum);
        /* the beam's own top `width` tokens: insertion into a small sorted list */
        struct sp_beam_pick *top = scratch + (size_t)b * width;
        int k = 0;
        for (size_t i = 0; i < n_vocab; i++) {
            struct sp_beam_pick c = {b, (sp_token)i, scores[b] + (double)row[i] - lse};
            if (k == width && !sp_beam_better(&c, &top[k - 1]))
                continue;
            int j = k < width ? k++ : k - 1;
            while (j > 0 && sp_beam_better(&c, &top[j - 1])) {
                top[j] = top[j - 1];
                j--;
            }
            top[j] = c;
        }
        for (int j = 0; j < k; j++)
            picks[n++] = top[j];
    }
    qsort(picks, (size_t)n, sizeof *picks, sp_beam_cmp);
    return n < width ? n : width;
}

double sp_beam_normalised(double logprob, uint32_t length, float length_penalty)
{
    return logprob / pow(length > 0 ? (double)length : 1.0, length_penalty);
}
