/* Gemma 3n's row operations (src/model/forward_altup.c) against references
 * in double written from llama.cpp's graph: the router's input, AltUp's
 * predict and correct steps on one token's streams, the magnitude rescale
 * and the Gaussian top-k of a sparse gate. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/forward_altup.h"
#include "quant/quant.h"

#define E 16 /* n_embd */
#define A 4  /* streams */

static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static struct sp_tensor f32_matrix(const float *data, int64_t ne0, int64_t ne1)
{
    return (struct sp_tensor){.type = SP_TYPE_F32, .ne0 = ne0, .ne1 = ne1, .row_bytes = (size_t)ne0 * sizeof(float),
                              .data = data};
}

/* The larger of two errors (a conditional, not fmax: gcc 12 for aarch64 fails
 * with an internal error vectorizing an fmax reduction here at -O3). */
static double worse(double w, double v) { return v > w ? v : w; }

static double rel(double got, double want) { return fabs(got - want) / (fabs(want) + 1.0); }

static void check_topk(void)
{
    float g[8] = {0.1f, -2.0f, 6.0f, 0.5f, 1.5f, -0.3f, 2.2f, 0.0f};
    double mean = 0.0, sq = 0.0;
    for (int i = 0; i < 8; i++)
        mean += g[i] / 8.0;
    for (int i = 0; i < 8; i++)
        sq += (g[i] - mean) * (g[i] - mean);
    const double cut = mean + sqrt(sq / 7.0) * 1.6448533535003662;
    double want[8], worst = 0.0;
    int kept = 0;
    for (int i = 0; i < 8; i++)
        want[i] = g[i] > cut ? g[i] - cut : 0.0;
    sp_altup_topk(g, 8);
    for (int i = 0; i < 8; i++) {
        worst = rel(g[i], want[i]) > worst ? rel(g[i], want[i]) : worst;
        kept += g[i] > 0.0f;
    }
    CHECK(worst < 1e-6, "top-k within 1e-6 of the reference (%.2e)", worst);
    CHECK(kept == 1 && g[2] > 0.0f, "only the values above mean + 1.645 std pass (%d kept)", kept);
}

int main(void)
{
    static float pc[A * A * A], cc[A * A], rnorm[E], alt[A * E], x[E];
    unsigned seed = 11;
    for (int i = 0; i < A * A * A; i++)
        pc[i] = rnd(&seed) * 0.5f;
    for (int i = 0; i < A * A; i++)
        cc[i] = rnd(&seed) * 0.5f;
    for (int i = 0; i < E; i++)
        rnorm[i] = 1.0f + 0.2f * rnd(&seed);
    for (int i = 0; i < A * E; i++)
        alt[i] = rnd(&seed) * 3.0f;
    for (int i = 0; i < E; i++)
        x[i] = rnd(&seed) * 3.0f;

    struct sp_model m;
    struct sp_layer L;
    memset(&m, 0, sizeof m);
    memset(&L, 0, sizeof L);
    m.hp.n_embd = E;
    m.hp.n_altup = A;
    m.hp.altup_act = 0;
    m.hp.eps = 1e-6f;
    L.alt_pred = f32_matrix(pc, A, A * A);
    L.alt_corr = f32_matrix(cc, A, A);
    L.alt_rnorm = f32_matrix(rnorm, E, 1);

    /* router input: rmsnorm(x) * w / n_embd */
    float y[E];
    double ss = 0.0, worst = 0.0;
    for (int i = 0; i < E; i++)
        ss += (double)x[i] * x[i];
    sp_altup_router_in(&m, &L, x, y);
    for (int i = 0; i < E; i++)
        worst = worse(worst, rel(y[i], x[i] / sqrt(ss / E + 1e-6) * rnorm[i] / E) * E);
    CHECK(worst < 1e-5, "router input within 1e-5 of the reference (%.2e)", worst);

    /* predict: pred_j = alt_j + sum_k (pc . tanh(mod))[j A + k] alt_k */
    float mod[A] = {0.7f, -1.3f, 0.2f, 2.5f}, pred[A * E];
    double t[A], c[A * A];
    for (int k = 0; k < A; k++)
        t[k] = tanh((double)mod[k]);
    for (int r = 0; r < A * A; r++) {
        c[r] = 0.0;
        for (int k = 0; k < A; k++)
            c[r] += pc[r * A + k] * t[k];
    }
    sp_altup_predict(&m, &L, mod, alt, pred);
    worst = 0.0;
    for (int j = 0; j < A; j++)
        for (int i = 0; i < E; i++) {
            double want = alt[j * E + i];
            for (int k = 0; k < A; k++)
                want += c[j * A + k] * alt[k * E + i];
            worst = worse(worst, rel(pred[j * E + i], want));
        }
    CHECK(worst < 1e-5, "predictions within 1e-5 of the reference (%.2e)", worst);

    /* correct: alt_j = pred_j + (x - pred_0) (1 + cc . tanh(mod))_j */
    float mod2[A] = {-0.4f, 0.9f, 1.7f, -2.0f}, out[A * E];
    for (int k = 0; k < A; k++)
        t[k] = tanh((double)mod2[k]);
    sp_altup_correct(&m, &L, mod2, x, pred, out);
    worst = 0.0;
    for (int j = 0; j < A; j++) {
        double cj = 1.0;
        for (int k = 0; k < A; k++)
            cj += cc[j * A + k] * t[k];
        for (int i = 0; i < E; i++)
            worst = worse(worst, rel(out[j * E + i], pred[j * E + i] + (x[i] - pred[i]) * cj));
    }
    CHECK(worst < 1e-5, "corrected streams within 1e-5 of the reference (%.2e)", worst);

    /* rescale: y's direction, x's size */
    float r[E];
    memcpy(r, alt + E, sizeof r);
    sp_altup_rescale(r, x, E);
    double nr = 0.0, nx = 0.0, dot = 0.0, na = 0.0;
    for (int i = 0; i < E; i++) {
        nr += (double)r[i] * r[i];
        nx += (double)x[i] * x[i];
        na += (double)alt[E + i] * alt[E + i];
        dot += (double)r[i] * alt[E + i];
    }
    CHECK(fabs(sqrt(nr) - sqrt(nx)) < 1e-5 * sqrt(nx), "rescaled to the target's norm (%g vs %g)", sqrt(nr),
          sqrt(nx));
    CHECK(fabs(dot / sqrt(nr * na) - 1.0) < 1e-6, "direction kept (cosine %.8f)", dot / sqrt(nr * na));

    check_topk();
    return sp_check_report("test_forward_altup");
}
