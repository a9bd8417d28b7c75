/* Beam selection on a toy model where greedy search is fooled: the first
 * step's best token leads to a flat distribution, the runner-up to a sure
 * continuation.  Width 2 must find the most likely 2-token sequence. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "sampler/sampler_beam.h"

#define V 4

/* log-probabilities of the next token given the previous (-1: start) */
static void toy_logits(int prev, float *out)
{
    static const float start[V] = {0.50f, 0.40f, 0.05f, 0.05f};
    static const float after0[V] = {0.25f, 0.25f, 0.25f, 0.25f};
    static const float after1[V] = {0.97f, 0.01f, 0.01f, 0.01f};
    const float *p = prev < 0 ? start : prev == 0 ? after0 : prev == 1 ? after1 : after0;
    for (int i = 0; i < V; i++)
        out[i] = logf(p[i]);
}

int main(void)
{
    float logits[2 * V];
    double scores[2] = {0, 0};
    struct sp_beam_pick picks[2 * 2 * 2], scratch[2 * 2 * 2];
    int prev[2] = {-1, -1}, first[2] = {-1, -1};

    /* greedy: argmax at each step */
    toy_logits(-1, logits);
    int g0 = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[g0]) g0 = i;
    toy_logits(g0, logits);
    int g1 = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[g1]) g1 = i;
    double greedy_lp = log(0.50) + log(0.25);
    CHECK(g0 == 0, "greedy first token %d", g0);

    /* beam width 2 */
    toy_logits(-1, logits);
    int n = sp_beam_select(logits, V, scores, 1, 2, picks, scratch);
    CHECK(n == 2, "picked %d", n);
    for (int b = 0; b < 2; b++) {
        prev[b] = picks[b].token;
        first[b] = picks[b].token;
        scores[b] = picks[b].score;
    }
    CHECK(prev[0] == 0 && prev[1] == 1, "step 1 beams %d %d", prev[0], prev[1]);
    toy_logits(prev[0], logits);
    toy_logits(prev[1], logits + V);
    n = sp_beam_select(logits, V, scores, 2, 2, picks, scratch);
    CHECK(n == 2, "picked %d", n);
    int best_first = first[picks[0].parent], best_second = picks[0].token;
    CHECK(best_first == 1 && best_second == 0, "best sequence %d %d", best_first, best_second);
    CHECK(fabs(picks[0].score - (log(0.40) + log(0.97))) < 1e-5, "score %f", picks[0].score);
    CHECK(picks[0].score > greedy_lp, "beam %f vs greedy %f", picks[0].score, greedy_lp);
    CHECK(picks[0].score >= picks[1].score, "ordering");

    /* ties go to the lower parent, then the lower token */
    float flat[2 * V];
    for (int i = 0; i < 2 * V; i++)
        flat[i] = 0.0f;
    double zero[2] = {0, 0};
    n = sp_beam_select(flat, V, zero, 2, 3, picks, scratch);
    CHECK(n == 3 && picks[0].parent == 0 && picks[0].token == 0 && picks[1].token == 1 && picks[2].token == 2,
          "tie order %d/%d %d %d", picks[0].parent, picks[0].token, picks[1].token, picks[2].token);

    /* length normalisation */
    CHECK(fabs(sp_beam_normalised(-4.0, 4, 1.0f) + 1.0) < 1e-12, "normalised");
    CHECK(fabs(sp_beam_normalised(-4.0, 4, 0.0f) + 4.0) < 1e-12, "no penalty");
    return sp_check_report("beam");
}
