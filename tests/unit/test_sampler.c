/* The sampler chain (src/sampler/sampler.c) and its RNG (rng.c). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "sampler/sampler.h"

/* ---- the worked example -------------------------------------------------
 * Vocabulary of 16.  Five candidates with probabilities 0.32, 0.18, 0.08,
 * 0.06, 0.04 sit at scattered ids; the other 11 tokens share the remaining
 * 0.32 (0.0291 each, below the fifth candidate).  Logits are log(p). */
#define WV 16
static const sp_token five_id[5] = {7, 2, 12, 0, 9};
static const double five_p[5] = {0.32, 0.18, 0.08, 0.06, 0.04};
static float wlogits[WV];

static void worked_init(void)
{
    for (int i = 0; i < WV; i++)
        wlogits[i] = logf(0.32f / 11.0f);
    for (int i = 0; i < 5; i++)
        wlogits[five_id[i]] = (float)log(five_p[i]);
}

/* Every filter off, temperature 1. */
static struct sp_sampler_params plain(void)
{
    struct sp_sampler_params p;
    sp_sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.typical_p = 1.0f;
    p.seed = 1234;
    return p;
}

static struct sp_sampler *make(const struct sp_sampler_params *p, uint32_t n_vocab)
{
    struct sp_sampler *s = NULL;
    sp_status st = sp_sampler_init(&s, p, n_vocab);
    CHECK(st == SP_OK && s, "init: %s", sp_error_message());
    return s;
}

/* Filtered candidates of the worked example under p; returns their count. */
static size_t cands(const struct sp_sampler_params *p, const struct sp_candidate **c)
{
    static struct sp_sampler *s;   /* kept until the next call */
    size_t n = 0;
    sp_sampler_free(s);
    s = make(p, WV);
    if (!s)
        return 0;
    CHECK(sp_sampler_candidates(s, wlogits, NULL, 0, c, &n) == SP_OK, "candidates: %s",
          sp_error_message());
    return n;
}

/* Two decimals, from the unrounded value. */
static int cents(double x) { return (int)lround(x * 100.0); }

static void test_worked_example(void)
{
    const struct sp_candidate *c = NULL;
    struct sp_sampler_params p = plain();
    size_t n = 0;

    /* top-k 5 at T = 1: the five renormalised, 0.47 0.26 0.12 0.09 0.06 */
    p.top_k = 5;
    n = cands(&p, &c);
    static const int want_k5[5] = {47, 26, 12, 9, 6};
    CHECK(n == 5, "top-k 5 keeps %zu", n);
    for (size_t i = 0; i < n && i < 5; i++) {
        CHECK(c[i].id == five_id[i], "rank %zu: id %d, want %d", i, c[i].id, five_id[i]);
        CHECK(fabs(c[i].p - five_p[i] / 0.68) < 1e-5, "p[%zu] = %g", i, (double)c[i].p);
        CHECK(cents(c[i].p) == want_k5[i], "p[%zu] = %.4f, want 0.%02d", i, (double)c[i].p,
              want_k5[i]);
    }

    /* top-k 2 keeps the first two: 0.32 / 0.50 and 0.18 / 0.50 */
    p.top_k = 2;
    n = cands(&p, &c);
    CHECK(n == 2 && c[0].id == 7 && c[1].id == 2, "top-k 2: n %zu", n);
    CHECK(n == 2 && fabs(c[0].p - 0.64) < 1e-5 && fabs(c[1].p - 0.36) < 1e-5, "top-k 2 p");

    /* top-p 0.80 over the five (top-k 5 applied first, so the softmax and the
     * running totals are over the five: 0.47, 0.74 (0.47 + 0.26 before
     * rounding is 0.735), 0.85): the third candidate is the first to reach
     * 0.80, so three are kept. */
    p.top_k = 5;
    p.top_p = 0.80f;
    n = cands(&p, &c);
    CHECK(n == 3, "top-k 5 + top-p 0.80 keeps %zu, want 3", n);
    for (size_t i = 0; i < n && i < 3; i++) {
        CHECK(c[i].id == five_id[i], "top-p rank %zu id %d", i, c[i].id);
        CHECK(fabs(c[i].p - five_p[i] / 0.58) < 1e-5, "top-p p[%zu] = %g", i, (double)c[i].p);
    }
    /* Without top-k, top-p runs over the whole vocabulary: running totals
     * 0.32 0.50 0.58 0.64 0.68, then +0.0291 per other token, first reaching
     * 0.80 at the 10th token (0.68 + 5 * 0.0291 = 0.8255). */
    p.top_k = 0;
    n = cands(&p, &c);
    CHECK(n == 10, "top-p 0.80 over the whole vocabulary keeps %zu, want 10", n);

    /* temperature: p_i^(1/T), renormalised over the five */
    static const struct {
        float t;
        int want[5];
    } temps[] = {{0.5f, {70, 22, 4, 2, 1}}, {2.0f, {33, 25, 16, 14, 12}}};
    for (size_t k = 0; k < 2; k++) {
        p = plain();
        p.top_k = 5;
        p.temperature = temps[k].t;
        n = cands(&p, &c);
        double z = 0.0;
        for (int i = 0; i < 5; i++)
            z += pow(five_p[i], 1.0 / temps[k].t);
        CHECK(n == 5, "T %g: n %zu", (double)temps[k].t, n);
        for (size_t i = 0; i < n && i < 5; i++) {
            double want = pow(five_p[i], 1.0 / temps[k].t) / z;
            CHECK(c[i].id == five_id[i], "T %g rank %zu id %d", (double)temps[k].t, i, c[i].id);
            CHECK(fabs(c[i].p - want) < 1e-5, "T %g p[%zu] %g want %g", (double)temps[k].t, i,
                  (double)c[i].p, want);
            CHECK(cents(c[i].p) == temps[k].want[i], "T %g p[%zu] = %.4f, want 0.%02d",
                  (double)temps[k].t, i, (double)c[i].p, temps[k].want[i]);
        }
    }

    /* temperature never reorders, at any value, with or without top-k */
    static const float tt[] = {0.05f, 0.3f, 1.0f, 3.0f, 50.0f};
    for (size_t k = 0; k < sizeof tt / sizeof tt[0]; k++) {
        p = plain();
        p.temperature = tt[k];
        n = cands(&p, &c);
        CHECK(n == WV, "T %g keeps all %zu", (double)tt[k], n);
        for (size_t i = 0; i < 5 && i < n; i++)
            CHECK(c[i].id == five_id[i], "T %g rank %zu: id %d", (double)tt[k], i, c[i].id);
        for (size_t i = 1; i < n; i++)
            CHECK(c[i].p <= c[i - 1].p, "T %g: not descending at %zu", (double)tt[k], i);
    }
}

static void test_greedy(void)
{
    /* temperature <= 0 picks the argmax whatever the other settings */
    static const float tt[] = {0.0f, -1.0f};
    for (size_t k = 0; k < 2; k++) {
        struct sp_sampler_params p;
        sp_sampler_params_default(&p);
        p.temperature = tt[k];
        p.typical_p = 0.2f;   /* would drop the top token if it were applied */
        struct sp_sampler *s = make(&p, WV);
        for (int i = 0; s && i < 50; i++)
            CHECK(sp_sampler_sample(s, wlogits, NULL, 0, NULL) == 7, "greedy T %g",
                  (double)tt[k]);
        const struct sp_candidate *c;
        size_t n = 0;
        CHECK(s && sp_sampler_candidates(s, wlogits, NULL, 0, &c, &n) == SP_OK && n == 1 &&
                  c[0].id == 7 && c[0].p == 1.0f,
              "greedy candidates: n %zu", n);
        sp_sampler_free(s);
    }
    /* ties go to the lowest id */
    float tie[6] = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f, -2.0f};
    struct sp_sampler_params p = plain();
    p.temperature = 0.0f;
    struct sp_sampler *s = make(&p, 6);
    CHECK(s && sp_sampler_sample(s, tie, NULL, 0, NULL) == 1, "tie -> lowest id");
    /* plain greedy takes a shortcut: it must agree with the chain (logprobs
     * force the chain) on NaN, +inf and ties, and refuse all-NaN logits */
    float odd[6] = {NAN, 2.0f, INFINITY, INFINITY, NAN, 1.0f};
    struct sp_token_logprobs lp;
    memset(&lp, 0, sizeof lp);
    sp_token fast = s ? sp_sampler_sample(s, odd, NULL, 0, NULL) : -2;
    sp_token chain = s ? sp_sampler_sample(s, odd, NULL, 0, &lp) : -3;
    CHECK(fast == 2 && chain == 2, "greedy with NaN/inf: shortcut %d, chain %d", fast, chain);
    float nans[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    CHECK(s && sp_sampler_sample(s, nans, NULL, 0, NULL) == -1, "all-NaN logits refused");
    sp_sampler_free(s);
    /* at T > 0 the most likely token is still the first candidate: a very low
     * temperature concentrates all mass on it */
    p = plain();
    p.temperature = 1e-3f;
    s = make(&p, WV);
    for (int i = 0; s && i < 100; i++)
        CHECK(sp_sampler_sample(s, wlogits, NULL, 0, NULL) == 7, "T 0.001 picks the top");
    sp_sampler_free(s);
}

/* Pearson's chi-square of observed counts against probabilities. */
static double chi_square(const long *obs, const double *prob, size_t k, long n)
{
    double x2 = 0.0;
    for (size_t i = 0; i < k; i++) {
        double e = prob[i] * (double)n;
        x2 += ((double)obs[i] - e) * ((double)obs[i] - e) / e;
    }
    return x2;
}

/* 100,000 seeded draws against the filtered distribution.  Critical values of
 * chi-square at significance 0.001: df 4 -> 18.467, df 2 -> 13.816.  Also the
 * same counts against a wrong (unfiltered, renormalised-over-16) distribution
 * must be rejected, so the test has power. */
static void test_chi_square(void)
{
    static const struct {
        int top_k;
        float top_p, temp;
        size_t k;
        double crit;
    } cases[] = {
        {5, 1.0f, 1.0f, 5, 18.467},
        {5, 0.80f, 1.0f, 3, 13.816},
        {5, 1.0f, 2.0f, 5, 18.467},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        struct sp_sampler_params p = plain();
        p.top_k = cases[t].top_k;
        p.top_p = cases[t].top_p;
        p.temperature = cases[t].temp;
        p.seed = 20240601 + t;
        struct sp_sampler *s = make(&p, WV);
        if (!s)
            return;
        double prob[5] = {0}, z = 0.0;
        for (size_t i = 0; i < cases[t].k; i++)
            z += prob[i] = pow(five_p[i], 1.0 / cases[t].temp);
        for (size_t i = 0; i < cases[t].k; i++)
            prob[i] /= z;
        long obs[5] = {0}, outside = 0, n = 100000;
        for (long d = 0; d < n; d++) {
            sp_token tok = sp_sampler_sample(s, wlogits, NULL, 0, NULL);
            size_t i = 0;
            while (i < cases[t].k && five_id[i] != tok)
                i++;
            if (i == cases[t].k)
                outside++;
            else
                obs[i]++;
        }
        CHECK(outside == 0, "case %zu: %ld draws outside the filtered set", t, outside);
        double x2 = chi_square(obs, prob, cases[t].k, n);
        CHECK(x2 < cases[t].crit, "case %zu: chi-square %.3f >= %.3f", t, x2, cases[t].crit);
        /* power: a distribution off by a little is rejected */
        double wrong[5] = {0};
        for (size_t i = 0; i < cases[t].k; i++)
            wrong[i] = prob[i] * (i == 0 ? 0.97 : 1.0);
        wrong[1] += prob[0] * 0.03;
        CHECK(chi_square(obs, wrong, cases[t].k, n) > cases[t].crit,
              "case %zu: a 3%% shifted distribution is not rejected", t);
        sp_sampler_free(s);
    }
}

static void test_penalties(void)
{
    float lg[5] = {2.0f, -1.0f, 0.5f, 0.0f, 1.5f};
    const struct sp_candidate *c = NULL;
    size_t n = 0;

    struct sp_sampler_params p = plain();
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.repeat_last_n = -1;
    struct sp_sampler *s = make(&p, 5);
    /* out-of-range history tokens (99, -5) are ignored */
    const sp_token hist[] = {0, 1, 99, 1, -5, 3};
    float want[5];
    for (int round = 0; s && round < 2; round++) {   /* counts must not leak between calls */
        CHECK(sp_sampler_candidates(s, lg, hist, 6, &c, &n) == SP_OK && n == 5, "cands");
        want[0] = 2.0f / 2.0f - 0.25f * 1 - 0.5f;    /* positive: divided */
        want[1] = -1.0f * 2.0f - 0.25f * 2 - 0.5f;   /* negative: multiplied; seen twice */
        want[2] = 0.5f;                              /* not in history */
        want[3] = 0.0f * 2.0f - 0.25f - 0.5f;
        want[4] = 1.5f;
        for (size_t i = 0; i < n; i++)
            CHECK(fabsf(c[i].logit - want[c[i].id]) < 1e-6f, "round %d token %d logit %g want %g",
                  round, c[i].id, (double)c[i].logit, (double)want[c[i].id]);
        /* the probabilities follow the penalised logits */
        double z = 0.0;
        for (int i = 0; i < 5; i++)
            z += exp(want[i]);
        for (size_t i = 0; i < n; i++)
            CHECK(fabs(c[i].p - exp(want[c[i].id]) / z) < 1e-5, "penalised p");
    }
    sp_sampler_free(s);

    /* window of 2: only the last two tokens (-5 ignored, 3) count */
    p.repeat_last_n = 2;
    s = make(&p, 5);
    CHECK(s && sp_sampler_candidates(s, lg, hist, 6, &c, &n) == SP_OK, "cands");
    for (size_t i = 0; s && i < n; i++) {
        float w = c[i].id == 3 ? -0.75f : lg[c[i].id];
        CHECK(fabsf(c[i].logit - w) < 1e-6f, "window 2: token %d logit %g", c[i].id,
              (double)c[i].logit);
    }
    sp_sampler_free(s);

    /* window 0: off */
    p.repeat_last_n = 0;
    s = make(&p, 5);
    CHECK(s && sp_sampler_candidates(s, lg, hist, 6, &c, &n) == SP_OK, "cands");
    for (size_t i = 0; s && i < n; i++)
        CHECK(c[i].logit == lg[c[i].id], "window 0 leaves logits alone");
    sp_sampler_free(s);

    /* a strong repeat penalty changes the greedy choice */
    p = plain();
    p.temperature = 0.0f;
    p.repeat_penalty = 4.0f;
    s = make(&p, 5);
    const sp_token h0[] = {0};
    CHECK(s && sp_sampler_sample(s, lg, NULL, 0, NULL) == 0, "no history: top is 0");
    CHECK(s && sp_sampler_sample(s, lg, h0, 1, NULL) == 4, "0 penalised: 4 wins");
    CHECK(s && sp_sampler_sample(s, lg, NULL, 3, NULL) == -1, "NULL history with n > 0");
    sp_sampler_free(s);
}

static void test_logit_bias(void)
{
    /* -inf bans the most likely token */
    struct sp_logit_bias ban[] = {{7, -INFINITY}};
    struct sp_sampler_params p = plain();
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    struct sp_sampler *s = make(&p, WV);
    for (int i = 0; s && i < 5000; i++)
        CHECK(sp_sampler_sample(s, wlogits, NULL, 0, NULL) != 7, "banned token drawn");
    sp_sampler_free(s);
    p.temperature = 0.0f;
    s = make(&p, WV);
    CHECK(s && sp_sampler_sample(s, wlogits, NULL, 0, NULL) == 2, "greedy skips the ban");
    sp_sampler_free(s);

    /* a positive bias lifts a rare token to the top; the caller's array may go */
    struct sp_logit_bias *lift = malloc(2 * sizeof *lift);
    lift[0] = (struct sp_logit_bias){5, 3.0f};
    lift[1] = (struct sp_logit_bias){5, 1.0f};   /* repeated ids add up */
    p = plain();
    p.temperature = 0.0f;
    p.logit_bias = lift;
    p.n_logit_bias = 2;
    s = make(&p, WV);
    free(lift);
    const struct sp_candidate *c = NULL;
    size_t n = 0;
    CHECK(s && sp_sampler_sample(s, wlogits, NULL, 0, NULL) == 5, "biased token wins");
    sp_sampler_free(s);
    p.temperature = 1.0f;
    struct sp_logit_bias lift2[] = {{5, 4.0f}};
    p.logit_bias = lift2;
    p.n_logit_bias = 1;
    s = make(&p, WV);
    CHECK(s && sp_sampler_candidates(s, wlogits, NULL, 0, &c, &n) == SP_OK && c[0].id == 5 &&
              fabsf(c[0].logit - (wlogits[5] + 4.0f)) < 1e-6f,
          "bias adds to the logit");
    sp_sampler_free(s);

    /* everything banned: no token, an error message */
    struct sp_logit_bias all[WV];
    for (int i = 0; i < WV; i++)
        all[i] = (struct sp_logit_bias){i, -INFINITY};
    p.logit_bias = all;
    p.n_logit_bias = WV;
    s = make(&p, WV);
    CHECK(s && sp_sampler_sample(s, wlogits, NULL, 0, NULL) == -1, "all banned -> -1");
    CHECK(strstr(sp_error_message(), "banned") != NULL, "message: %s", sp_error_message());
    sp_sampler_free(s);

    /* NaN logits are never chosen */
    float nanl[4] = {NAN, 0.0f, NAN, 0.0f};
    p = plain();
    s = make(&p, 4);
    for (int i = 0; s && i < 1000; i++) {
        sp_token t = sp_sampler_sample(s, nanl, NULL, 0, NULL);
        CHECK(t == 1 || t == 3, "NaN token %d drawn", t);
    }
    sp_sampler_free(s);
}

static void test_min_p(void)
{
    const struct sp_candidate *c = NULL;
    struct sp_sampler_params p = plain();
    /* threshold 0.2 * 0.32 = 0.064: keeps 0.32 0.18 0.08 */
    p.min_p = 0.2f;
    size_t n = cands(&p, &c);
    CHECK(n == 3, "min-p 0.2 keeps %zu", n);
    for (size_t i = 0; i < n && i < 3; i++)
        CHECK(c[i].id == five_id[i] && fabs(c[i].p - five_p[i] / 0.58) < 1e-5, "min-p p[%zu]", i);
    /* 0.15 * 0.32 = 0.048: 0.06 passes, 0.04 does not */
    p.min_p = 0.15f;
    n = cands(&p, &c);
    CHECK(n == 4, "min-p 0.15 keeps %zu", n);
    /* 0.05 * 0.32 = 0.016: all 16 pass */
    p.min_p = 0.05f;
    n = cands(&p, &c);
    CHECK(n == WV, "min-p 0.05 keeps %zu", n);
    /* min-p applies after temperature: at T = 0.5 the ratios square:
     * 0.04^2 / 0.32^2 = 0.0156 < 0.02 < 0.06^2 / 0.32^2 = 0.035 */
    p.min_p = 0.02f;
    p.temperature = 0.5f;
    n = cands(&p, &c);
    CHECK(n == 4, "min-p 0.02 at T 0.5 keeps %zu", n);
}

static void test_typical_p(void)
{
    /* p = 1/2, 1/4, 1/8, 1/8: H = 1.75 ln 2; |-ln p - H| / ln 2 =
     * 0.75, 0.25, 1.25, 1.25, so the typical order is 1, 0, 2, 3. */
    float lg[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    struct sp_sampler_params p = plain();
    const struct sp_candidate *c = NULL;
    size_t n = 0;
    struct sp_sampler *s;

    p.typical_p = 0.5f;   /* 0.25, then 0.75 >= 0.5: keep {1, 0} */
    s = make(&p, 4);
    CHECK(s && sp_sampler_candidates(s, lg, NULL, 0, &c, &n) == SP_OK && n == 2 && c[0].id == 0 &&
              c[1].id == 1 && fabs(c[0].p - 2.0 / 3.0) < 1e-5 && fabs(c[1].p - 1.0 / 3.0) < 1e-5,
          "typical 0.5: n %zu", n);
    sp_sampler_free(s);
    p.typical_p = 0.2f;   /* the most typical alone, which is not the most likely */
    s = make(&p, 4);
    CHECK(s && sp_sampler_candidates(s, lg, NULL, 0, &c, &n) == SP_OK && n == 1 && c[0].id == 1,
          "typical 0.2 keeps token 1 only: n %zu", n);
    for (int i = 0; s && i < 100; i++)
        CHECK(sp_sampler_sample(s, lg, NULL, 0, NULL) == 1, "typical 0.2 draws token 1");
    sp_sampler_free(s);
    p.typical_p = 0.9f;   /* 0.25, 0.75, 0.875, 1.0 */
    s = make(&p, 4);
    CHECK(s && sp_sampler_candidates(s, lg, NULL, 0, &c, &n) == SP_OK && n == 4, "typical 0.9");
    sp_sampler_free(s);
}

static void test_rng(void)
{
    /* reference values from an independent implementation of splitmix64 +
     * xoshiro256** (seed 12345) */
    struct sp_rng r;
    sp_rng_seed(&r, 12345);
    CHECK(sp_rng_next(&r) == 0xbe6a36374160d49bull, "xoshiro output 1");
    CHECK(sp_rng_next(&r) == 0x214aaa0637a688c6ull, "xoshiro output 2");
    CHECK(sp_rng_next(&r) == 0xf69d16de9954d388ull, "xoshiro output 3");
    sp_rng_seed(&r, 12345);
    CHECK(sp_rng_uniform(&r) == 0.7438081631565894, "uniform from the top 53 bits");
    double sum = 0.0, lo = 1.0, hi = 0.0;
    sp_rng_seed(&r, 0);
    for (int i = 0; i < 100000; i++) {
        double u = sp_rng_uniform(&r);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0.0 && hi < 1.0, "uniform in [0,1): %g %g", lo, hi);
    CHECK(fabs(sum / 100000 - 0.5) < 0.005, "mean %g", sum / 100000);
}

static void test_determinism(void)
{
    struct sp_sampler_params p = plain();
    p.seed = 99;
    struct sp_sampler *a = make(&p, WV), *b = make(&p, WV);
    p.seed = 100;
    struct sp_sampler *c = make(&p, WV);
    if (!a || !b || !c)
        return;
    sp_token sa[200], sc[200];
    int same = 1, differ = 0;
    for (int i = 0; i < 200; i++) {
        sa[i] = sp_sampler_sample(a, wlogits, NULL, 0, NULL);
        sc[i] = sp_sampler_sample(c, wlogits, NULL, 0, NULL);
        same &= sa[i] == sp_sampler_sample(b, wlogits, NULL, 0, NULL);
        differ |= sa[i] != sc[i];
    }
    CHECK(same, "same seed, same sequence");
    CHECK(differ, "different seed, different sequence");
    sp_sampler_set_seed(c, 99);
    same = 1;
    for (int i = 0; i < 200; i++)
        same &= sa[i] == sp_sampler_sample(c, wlogits, NULL, 0, NULL);
    CHECK(same, "set_seed restarts the sequence");
    sp_sampler_free(a);
    sp_sampler_free(b);
    sp_sampler_free(c);
}

static void test_logprobs(void)
{
    /* logprobs are the T = 1 distribution before filters, whatever the
     * sampler's temperature and top-k */
    struct sp_sampler_params p = plain();
    p.temperature = 0.5f;
    p.top_k = 2;
    p.n_logprobs = 20;
    struct sp_logit_bias ban[] = {{3, -INFINITY}};
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    struct sp_sampler *s = make(&p, WV);
    if (!s)
        return;
    /* the ban removes 0.0291 of mass: the rest renormalises over 0.9709 */
    double z = 1.0 - 0.32 / 11.0;
    for (int round = 0; round < 20; round++) {
        struct sp_token_logprobs lp;
        sp_token t = sp_sampler_sample(s, wlogits, NULL, 0, &lp);
        CHECK(t == 7 || t == 2, "top-k 2 draw %d", t);
        CHECK(lp.n_top == WV - 1, "n_top %d: the banned token is not listed", lp.n_top);
        double sum = 0.0;
        for (int i = 0; i < lp.n_top; i++) {
            sum += exp(lp.top[i].logprob);
            CHECK(lp.top[i].id != 3, "banned token listed");
            if (i > 0)
                CHECK(lp.top[i].logprob <= lp.top[i - 1].logprob, "not descending");
            if (lp.top[i].id == t)
                CHECK(lp.top[i].logprob == lp.logprob, "chosen logprob matches its entry");
        }
        CHECK(fabs(sum - 1.0) < 1e-5, "probabilities sum to %g", sum);
        for (int i = 0; i < 5; i++)
            CHECK(lp.top[i].id == five_id[i] && fabs(lp.top[i].logprob - log(five_p[i] / z)) < 1e-5,
                  "top[%d] = %d %g", i, lp.top[i].id, (double)lp.top[i].logprob);
        CHECK(fabs(lp.logprob - log(five_p[t == 7 ? 0 : 1] / z)) < 1e-5, "chosen logprob %g",
              (double)lp.logprob);
        /* the rest are ordered by id at equal logits */
        CHECK(lp.top[5].id == 1 && lp.top[6].id == 4, "ties by id: %d %d", lp.top[5].id,
              lp.top[6].id);
    }
    sp_sampler_free(s);

    /* fewer alternatives */
    p = plain();
    p.n_logprobs = 3;
    s = make(&p, WV);
    struct sp_token_logprobs lp;
    CHECK(s && sp_sampler_sample(s, wlogits, NULL, 0, &lp) >= 0 && lp.n_top == 3 &&
              lp.top[0].id == 7 && fabs(lp.top[0].logprob - log(0.32)) < 1e-5,
          "3 logprobs");
    sp_sampler_free(s);
}

static void test_params(void)
{
    struct sp_sampler *s = (struct sp_sampler *)1;
    struct sp_sampler_params p = plain();
    p.n_logprobs = 21;
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG && !s, "n_logprobs 21");
    p = plain();
    p.repeat_penalty = 0.0f;
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG, "repeat_penalty 0");
    p = plain();
    p.temperature = NAN;
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG, "temperature NaN");
    p = plain();
    CHECK(sp_sampler_init(&s, &p, 0) == SP_ERR_ARG, "n_vocab 0");
    struct sp_logit_bias bad[] = {{WV, 1.0f}};
    p.logit_bias = bad;
    p.n_logit_bias = 1;
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG, "bias id out of range");
    bad[0] = (struct sp_logit_bias){1, INFINITY};
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG, "bias +inf");
    p = plain();
    p.repeat_last_n = -2;
    CHECK(sp_sampler_init(&s, &p, WV) == SP_ERR_ARG, "repeat_last_n -2");

    struct sp_sampler_params d;
    sp_sampler_params_default(&d);
    CHECK(d.temperature == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.05f &&
              d.typical_p == 1.0f && d.repeat_penalty == 1.0f,
          "llama.cpp defaults");
}

static const char *tok_text(void *ctx, sp_token id)
{
    (void)ctx;
    return id == 7 ? "seven" : id == 2 ? "two\n" : NULL;
}

static void test_explain(void)
{
    struct sp_sampler_params p = plain();
    p.top_k = 5;
    p.top_p = 0.8f;
    p.min_p = 0.3f;
    p.seed = 5;
    struct sp_sampler *s = make(&p, WV), *ref = make(&p, WV);
    if (!s || !ref)
        return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int all_match = 1;
    for (int i = 0; i < 20; i++) {
        sp_token want = sp_sampler_sample(ref, wlogits, NULL, 0, NULL);
        CHECK(sp_sampler_explain(s, wlogits, NULL, 0, f, tok_text, NULL) == SP_OK, "explain");
        fflush(f);
        char shown[64];
        snprintf(shown, sizeof shown, "next token: %d\n", want);
        /* the explain output ends with the token the next sample returns */
        CHECK(len >= strlen(shown) && strcmp(text + len - strlen(shown), shown) == 0,
              "explain shows the next token (%d)", want);
        all_match &= sp_sampler_sample(s, wlogits, NULL, 0, NULL) == want;
    }
    CHECK(all_match, "explain does not disturb the random sequence");
    fclose(f);
    /* the data behind the table: stages in chain order, and a row removed
     * at one stage stays removed at every later one */
    struct sp_sampler_explain x;
    CHECK(sp_sampler_explain_data(s, wlogits, NULL, 0, &x) == SP_OK, "explain data");
    const char *names[] = {"penalties", "top-k", "temperature", "top-p", "min-p"};
    CHECK(x.n_stages == 5, "5 stages, got %u", x.n_stages);
    for (uint32_t k = 0; k < x.n_stages && k < 5; k++)
        CHECK(!strcmp(x.stage[k].name, names[k]), "stage %u is %s", k, x.stage[k].name);
    CHECK(x.stage[1].param == 5.0f && x.stage[1].kept == 5 && isnan(x.stage[0].param),
          "top-k param and kept");
    int removed_stays = 1, chosen_alive = 0;
    for (uint32_t r = 0; r < x.n_rows; r++) {
        for (uint32_t k = 1; k < x.n_stages; k++)
            removed_stays &= !(x.stage[k - 1].p[r] < 0 && x.stage[k].p[r] >= 0);
        chosen_alive |= x.row[r] == x.chosen && x.stage[x.n_stages - 1].p[r] > 0;
    }
    CHECK(removed_stays && chosen_alive, "removed rows stay removed; the chosen token survives");
    CHECK(x.chosen == sp_sampler_sample(ref, wlogits, NULL, 0, NULL), "explain data's chosen token");
    CHECK(text && strstr(text, "top-k 5") && strstr(text, "top-p 0.8") &&
              strstr(text, "min-p 0.3") && strstr(text, "seven") && strstr(text, "two.") &&
              strstr(text, "0.3200"),
          "explain table:\n%s", text ? text : "");
    /* the first table, for the record */
    if (text) {
        char *end = strstr(text, "next token");
        fprintf(stderr, "%.*s", end ? (int)(end - text) + 14 : 0, text);
    }
    free(text);
    sp_sampler_free(s);
    sp_sampler_free(ref);
}

/* Brute force over a large random vocabulary: top-k and top-p (with the
 * incremental sort) keep exactly the sets a full sort gives. */
static int cmp_desc_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return a > b ? -1 : a < b ? 1 : 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_large_vocab(void)
{
    enum { NV = 262144 };
    float *lg = malloc(NV * sizeof *lg), *sorted = malloc(NV * sizeof *sorted);
    struct sp_rng r;
    sp_rng_seed(&r, 7);
    for (int i = 0; i < NV; i++)   /* peaked enough that top-p keeps a few thousand */
        lg[i] = (float)(20.0 * pow(sp_rng_uniform(&r), 6.0));
    memcpy(sorted, lg, NV * sizeof *lg);
    qsort(sorted, NV, sizeof *sorted, cmp_desc_float);

    const struct sp_candidate *c = NULL;
    size_t n = 0;
    struct sp_sampler_params p = plain();
    p.top_k = 1000;
    struct sp_sampler *s = make(&p, NV);
    CHECK(s && sp_sampler_candidates(s, lg, NULL, 0, &c, &n) == SP_OK && n == 1000, "top-k 1000");
    for (size_t i = 0; s && i < n; i++)
        CHECK(c[i].logit == sorted[i], "top-k rank %zu", i);
    sp_sampler_free(s);

    p = plain();
    p.top_p = 0.95f;
    s = make(&p, NV);
    double z = 0.0, cum = 0.0;
    for (int i = 0; i < NV; i++)
        z += exp((double)sorted[i] - sorted[0]);
    size_t want = 0;
    while (want < NV && cum < 0.95 * z)
        cum += exp((double)sorted[want++] - sorted[0]);
    CHECK(s && sp_sampler_candidates(s, lg, NULL, 0, &c, &n) == SP_OK && n > 64 &&
              (n == want || n == want + 1 || n + 1 == want),   /* float vs double sums */
          "top-p 0.95 keeps %zu, brute force %zu", n, want);
    for (size_t i = 0; s && i < n && i < want; i++)
        CHECK(c[i].logit == sorted[i], "top-p rank %zu", i);
    sp_sampler_free(s);

    /* timing per token: default chain, top-p alone, no filter at all */
    static const char *name[] = {"default (k40 p.95 minp.05)", "top-p 0.95 only", "T 1, no filters",
                                 "greedy"};
    for (int k = 0; k < 4; k++) {
        sp_sampler_params_default(&p);
        if (k == 1 || k == 2) {
            p.top_k = 0;
            p.min_p = 0.0f;
            p.temperature = 1.0f;
            p.top_p = k == 1 ? 0.95f : 1.0f;
        }
        if (k == 3)
            p.temperature = 0.0f;
        s = make(&p, NV);
        if (!s)
            break;
        int ok = 1, reps = 50;
        double t0 = now();
        for (int i = 0; i < reps; i++) {
            sp_token t = sp_sampler_sample(s, lg, NULL, 0, NULL);
            ok &= t >= 0 && (k == 2 || lg[t] >= sorted[k == 1 ? want - 1 : 39]);
        }
        double dt = (now() - t0) / reps;
        CHECK(ok, "%s: draws inside the filtered set", name[k]);
        fprintf(stderr, "n_vocab %d, %-28s %.3f ms/token\n", NV, name[k], dt * 1e3);
        sp_sampler_free(s);
    }
    free(lg);
    free(sorted);
}

/* ---- the chain's stages: clones, a caller's stage ------------------------ */

/* What the test stage does, chosen by its user pointer. */
enum ustage_mode { U_REVERSE_DROP7, U_KEEP_7_2, U_GROW, U_DUPLICATE, U_OUTSIDE, U_ALL_BANNED, U_NAN_7, U_FAIL };

struct ustage {
    enum ustage_mode mode;
    int accepted, resets;
};

static sp_status ustage_apply(void *user, sp_token_logit *c, size_t *n, const sp_token *h, size_t nh)
{
    const struct ustage *u = user;
    (void)h;
    (void)nh;
    size_t k = 0;
    switch (u->mode) {
    case U_REVERSE_DROP7: /* reversed, without token 7 */
        for (size_t i = 0; i < *n / 2; i++) {
            sp_token_logit t = c[i];
            c[i] = c[*n - 1 - i];
            c[*n - 1 - i] = t;
        }
        for (size_t i = 0; i < *n; i++)
            if (c[i].id != 7)
                c[k++] = c[i];
        *n = k;
        break;
    case U_KEEP_7_2:
        for (size_t i = 0; i < *n; i++)
            if (c[i].id == 7 || c[i].id == 2)
                c[k++] = c[i];
        *n = k;
        break;
    case U_GROW: *n += 1; break;
    case U_DUPLICATE: c[1].id = c[0].id; break;
    case U_OUTSIDE: c[0].id = WV; break;
    case U_ALL_BANNED:
        for (size_t i = 0; i < *n; i++)
            c[i].logit = -INFINITY;
        break;
    case U_NAN_7:
        for (size_t i = 0; i < *n; i++)
            if (c[i].id == 7)
                c[i].logit = NAN;
        break;
    case U_FAIL: return sp_error_set(SP_ERR_ARG, "refused on purpose");
    }
    return SP_OK;
}

static void ustage_accept(void *user, sp_token t)
{
    (void)t;
    ((struct ustage *)user)->accepted++;
}

static void ustage_reset(void *user) { ((struct ustage *)user)->resets++; }

static struct sp_sampler *make_staged(const struct sp_sampler_params *p, struct ustage *u, sp_stage_point at)
{
    sp_stage def = {"test", at, u, ustage_apply, ustage_accept, ustage_reset, NULL, NULL};
    struct sp_sampler *s = NULL;
    CHECK(sp_sampler_init_stages(&s, p, &def, 1, WV) == SP_OK && s, "init: %s", sp_error_message());
    return s;
}

/* Candidates (id, p) of s on the worked example, copied out. */
static size_t cands_of(struct sp_sampler *s, struct sp_candidate *out)
{
    const struct sp_candidate *c = NULL;
    size_t n = 0;
    if (sp_sampler_candidates(s, wlogits, NULL, 0, &c, &n) != SP_OK)
        return 0;
    memcpy(out, c, n * sizeof *c);
    return n;
}

static void test_stages(void)
{
    /* a clone draws what the original draws, from the same state on */
    struct sp_logit_bias lift[] = {{5, 1.5f}};
    struct sp_sampler_params p = plain();
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.2f;
    p.logit_bias = lift;
    p.n_logit_bias = 1;
    p.top_k = 6;
    p.top_p = 0.9f;
    sp_token hist[64] = {7, 2, 7};
    struct sp_sampler *a = make(&p, WV), *b = NULL;
    for (int i = 0; a && i < 10; i++)
        hist[3 + i] = sp_sampler_sample(a, wlogits, hist, 3 + (size_t)i, NULL);
    CHECK(a && sp_sampler_clone(a, &b) == SP_OK && b, "clone: %s", sp_error_message());
    bool same = a && b;
    for (int i = 10; same && i < 60; i++) {
        sp_token x = sp_sampler_sample(a, wlogits, hist, 3 + (size_t)i, NULL);
        same &= x == sp_sampler_sample(b, wlogits, hist, 3 + (size_t)i, NULL);
        hist[3 + i] = x;
    }
    CHECK(same, "a clone continues the original's sequence");
    sp_sampler_free(a);
    sp_sampler_free(b);

    /* a stage before the bias that reorders and drops token 7 is a ban:
     * the same candidates as a logit bias of -inf */
    struct sp_candidate want[WV], got[WV];
    struct sp_logit_bias ban[] = {{7, -INFINITY}};
    p = plain();
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    a = make(&p, WV);
    size_t n_want = a ? cands_of(a, want) : 0;
    sp_sampler_free(a);
    p = plain();
    struct ustage u = {U_REVERSE_DROP7, 0, 0};
    a = make_staged(&p, &u, SP_STAGE_LOGIT_BIAS);
    size_t n_got = a ? cands_of(a, got) : 0;
    same = n_want == WV && n_got == n_want;
    for (size_t i = 0; same && i < n_got; i++)
        same = got[i].id == want[i].id && got[i].logit == want[i].logit && got[i].p == want[i].p;
    CHECK(same, "drop before the bias = ban: %zu and %zu candidates", n_want, n_got);
    sp_sampler_accept(a, 3);
    sp_sampler_accept(a, 4);
    sp_sampler_reset(a);
    CHECK(u.accepted == 2 && u.resets == 1, "accept %d, reset %d", u.accepted, u.resets);
    sp_sampler_free(a);

    /* after the temperature stage the probabilities follow the stage's
     * survivors: 0.32 and 0.18 renormalised */
    u.mode = U_KEEP_7_2;
    a = make_staged(&p, &u, SP_STAGE_TOP_P);
    n_got = a ? cands_of(a, got) : 0;
    CHECK(n_got == 2 && got[0].id == 7 && fabs(got[0].p - 0.64) < 1e-5 && got[1].id == 2 &&
              fabs(got[1].p - 0.36) < 1e-5,
          "kept 7 and 2: %zu, p %g", n_got, n_got ? (double)got[0].p : 0.0);
    sp_sampler_free(a);

    /* greedy: a NaN from the stage is -inf, so the best is token 2 */
    p.temperature = 0.0f;
    u.mode = U_NAN_7;
    a = make_staged(&p, &u, SP_STAGE_DRAW);
    CHECK(a && sp_sampler_sample(a, wlogits, NULL, 0, NULL) == 2, "NaN from a stage is never chosen");
    sp_sampler_free(a);

    /* what a stage may not do fails the token, naming the stage */
    const enum ustage_mode bad[] = {U_GROW, U_DUPLICATE, U_OUTSIDE, U_ALL_BANNED, U_FAIL};
    const char *why[] = {"came back", "twice", "outside", "banned", "refused on purpose"};
    for (int k = 0; k < 5; k++)
        for (int at = SP_STAGE_LOGIT_BIAS; at <= SP_STAGE_DRAW; at += 3) {
            p.temperature = at == SP_STAGE_DRAW ? 0.0f : 1.0f;
            u.mode = bad[k];
            a = make_staged(&p, &u, (sp_stage_point)at);
            sp_token t = a ? sp_sampler_sample(a, wlogits, NULL, 0, NULL) : 0;
            CHECK(t == -1 && strstr(sp_error_message(), "sampler stage test") && strstr(sp_error_message(), why[k]),
                  "mode %d at %d: %d, %s", (int)bad[k], at, (int)t, sp_error_message());
            /* the scratch is clean afterwards: a plain stage works again */
            u.mode = U_NAN_7;
            CHECK(a && sp_sampler_sample(a, wlogits, NULL, 0, NULL) >= 0, "after a failure: %s", sp_error_message());
            sp_sampler_free(a);
        }

    /* refused at init */
    sp_stage def = {"test", SP_STAGE_DRAW, &u, NULL, NULL, NULL, NULL, NULL};
    a = NULL;
    CHECK(sp_sampler_init_stages(&a, &p, &def, 1, WV) == SP_ERR_ARG && !a, "no apply");
    def.apply = ustage_apply;
    def.name = "";
    CHECK(sp_sampler_init_stages(&a, &p, &def, 1, WV) == SP_ERR_ARG && !a, "no name");
    def.name = "test";
    def.before = (sp_stage_point)(SP_STAGE_DRAW + 1);
    CHECK(sp_sampler_init_stages(&a, &p, &def, 1, WV) == SP_ERR_ARG && !a, "no such point");
}

int main(void)
{
    worked_init();
    test_worked_example();
    test_greedy();
    test_chi_square();
    test_penalties();
    test_logit_bias();
    test_min_p();
    test_typical_p();
    test_rng();
    test_determinism();
    test_logprobs();
    test_params();
    test_explain();
    test_stages();
    test_large_vocab();
    return sp_check_report("sampler");
}
