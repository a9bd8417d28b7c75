/* Per-layer embeddings (Gemma 3n / 4): sp_forward_ple_inputs forms each
 * token's input of every layer as the reference below does in double (the
 * scaled embeddings projected and times 1/sqrt(n_embd), each layer's part
 * RMS-normed with its weight, plus the token's per_layer_token_embd row
 * times sqrt(P), all times 1/sqrt(2)), and a token's inputs are the same
 * bits alone as in a batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/pool.h"
#include "model/forward.h"
#include "quant/quant.h"

#define E 64   /* n_embd */
#define P 16   /* per-layer width */
#define NL 3   /* layers */
#define NV 5   /* vocabulary */
#define NP (P * NL)
#define T 4    /* tokens */

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

/* The reference, in double, of token `tok` with scaled embedding x. */
static void reference(const float *proj, const float *tok_embd, const float *norm, int tok, const float *x,
                      double *out)
{
    for (int l = 0; l < NL; l++) {
        double p[P], ss = 0.0;
        for (int i = 0; i < P; i++) {
            double acc = 0.0;
            for (int e = 0; e < E; e++)
                acc += (double)proj[(size_t)(l * P + i) * E + e] * x[e];
            p[i] = acc / sqrt((double)E);
            ss += p[i] * p[i];
        }
        double r = 1.0 / sqrt(ss / P + 1e-6);
        for (int i = 0; i < P; i++)
            out[l * P + i] = (p[i] * r * norm[i] + tok_embd[(size_t)tok * NP + l * P + i] * sqrt((double)P)) /
                             sqrt(2.0);
    }
}

int main(void)
{
    static float proj[NP * E], tok_embd[NV * NP], norm[P], x[T * E];
    unsigned seed = 7;
    for (size_t i = 0; i < NP * E; i++)
        proj[i] = rnd(&seed) * 0.3f;
    for (size_t i = 0; i < NV * NP; i++)
        tok_embd[i] = rnd(&seed);
    for (int i = 0; i < P; i++)
        norm[i] = 1.0f + 0.2f * rnd(&seed);
    for (int i = 0; i < T * E; i++)
        x[i] = rnd(&seed) * 8.0f;
    const sp_token toks[T] = {3, 0, 4, 3};

    struct sp_model m;
    memset(&m, 0, sizeof m);
    m.hp.n_embd = E;
    m.hp.n_layer = NL;
    m.hp.n_embd_pl = P;
    m.hp.eps = 1e-6f;
    m.pl_model_proj = f32_matrix(proj, E, NP);
    m.pl_tok_embd = f32_matrix(tok_embd, NP, NV);
    m.pl_proj_norm = f32_matrix(norm, P, 1);

    struct sp_forward_scratch s;
    memset(&s, 0, sizeof s);
    s.x = malloc(sizeof x);
    s.ple = malloc((size_t)T * NP * sizeof(float));
    s.ple_row = malloc(NP * sizeof(float));
    s.act = malloc((size_t)T * sp_act_row_bytes(&m.pl_model_proj) + 64);
    struct sp_pool *pool = NULL;
    CHECK(s.x && s.ple && s.ple_row && s.act && sp_pool_init(&pool, 2) == SP_OK, "setup");
    if (!pool)
        return sp_check_report("test_forward_ple");

    memcpy(s.x, x, sizeof x);
    sp_forward_ple_inputs(&m, &s, pool, toks, T);
    static float batch[T * NP];
    memcpy(batch, s.ple, sizeof batch);
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        double want[NP];
        reference(proj, tok_embd, norm, toks[t], x + t * E, want);
        for (int i = 0; i < NP; i++) {
            double d = fabs(batch[t * NP + i] - want[i]) / (fabs(want[i]) + 1.0);
            worst = d > worst ? d : worst;
        }
    }
    CHECK(worst < 1e-5, "per-layer inputs within 1e-5 of the double reference (%.2e)", worst);

    int same = 0;
    for (int t = 0; t < T; t++) { /* each token alone */
        memcpy(s.x, x + t * E, E * sizeof(float));
        sp_forward_ple_inputs(&m, &s, pool, toks + t, 1);
        same += memcmp(s.ple, batch + t * NP, NP * sizeof(float)) == 0;
    }
    CHECK(same == T, "a token's inputs alone are its inputs in the batch, bit for bit (%d of %d)", same, T);

    /* token 3 twice at different embeddings: the lookup part is the same,
     * the projection part differs */
    CHECK(memcmp(batch, batch + 3 * NP, NP * sizeof(float)) != 0, "the embeddings' projection counts");

    sp_pool_free(pool);
    free(s.x);
    free(s.ple);
    free(s.ple_row);
    free(s.act);
    return sp_check_report("test_forward_ple");
}
