/* Micro-benchmark: the sampler chain alone, one token at a time.
 *
 *   make build/bench_sampler   (built by `make test` too)
 *   build/bench_sampler [n_vocab] [seconds per window]
 *
 * Rows of logits shaped like a language model's (a few tall peaks over a
 * broad normal body, 8 different rows in turn) go through sp_sampler_sample
 * with a 256-token history, in each of these settings:
 *   default    llama.cpp's defaults (top-k 40, T 0.8, top-p 0.95, min-p 0.05)
 *   full       no top-k (top-p over the whole vocabulary, min-p 0.05)
 *   penalties  the defaults plus repeat 1.1, presence 0.5, frequency 0.5 and a logit bias
 *   logprobs   the defaults with 5 logprobs
 *   greedy     temperature 0 (the argmax path)
 *   greedy-pen temperature 0 with repeat penalty 1.1 (the whole chain's greedy)
 * and prints, per setting, the best of 9 windows (0.2 s each by default) as
 * microseconds per token, and the least process CPU time per token over
 * those windows (the figure that does not count time others had the core on
 * a shared machine), and a hash of the first 4,096 tokens a fresh sampler
 * draws (with logprobs: and its last listed alternative), which a change
 * to the chain that keeps its outputs keeps.  Defaults: SmolLM2's 49,152
 * tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler/sampler.h"

#define ROWS 8
#define HIST 256

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float unit(uint64_t *x) { return (float)((mix(x) >> 40) + 1) / (float)(1ull << 24); }

/* Standard normal body, 1 in 100 tokens lifted by up to 6 nats. */
static void fill_rows(float *lg, uint32_t n_vocab)
{
    uint64_t x = 42;
    for (size_t i = 0; i < (size_t)ROWS * n_vocab; i++) {
        float u = unit(&x), v = unit(&x);
        lg[i] = sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
        if (mix(&x) % 100 == 0)
            lg[i] += 6.0f * unit(&x);
    }
}

struct setting {
    const char *name;
    void (*set)(struct sp_sampler_params *p);
    bool logprobs;
};

static const struct sp_logit_bias bench_bias[] = {{11, -INFINITY}, {23, 2.5f}, {42, -1.0f}};

static void set_default(struct sp_sampler_params *p) { (void)p; }
static void set_full(struct sp_sampler_params *p) { p->top_k = 0; }
static void set_pen(struct sp_sampler_params *p)
{
    p->repeat_penalty = 1.1f;
    p->presence_penalty = 0.5f;
    p->frequency_penalty = 0.5f;
    p->logit_bias = bench_bias;
    p->n_logit_bias = sizeof bench_bias / sizeof bench_bias[0];
}
static void set_logprobs(struct sp_sampler_params *p) { p->n_logprobs = 5; }
static void set_greedy(struct sp_sampler_params *p) { p->temperature = 0.0f; }
static void set_greedy_pen(struct sp_sampler_params *p)
{
    p->temperature = 0.0f;
    p->repeat_penalty = 1.1f;
}

static const struct setting settings[] = {
    {"default", set_default, false},  {"full", set_full, false},     {"penalties", set_pen, false},
    {"logprobs", set_logprobs, true}, {"greedy", set_greedy, false}, {"greedy-pen", set_greedy_pen, false},
};

int main(int argc, char **argv)
{
    const uint32_t V = argc > 1 ? (uint32_t)atoi(argv[1]) : 49152;
    const double window = argc > 2 ? atof(argv[2]) : 0.2;
    float *lg = malloc((size_t)ROWS * V * sizeof *lg);
    sp_token hist[HIST];
    if (V < 64 || !(window > 0.0) || !lg) {
        fprintf(stderr, "usage: bench_sampler [n_vocab >= 64] [seconds per window]\n");
        return 2;
    }
    fill_rows(lg, V);
    uint64_t x = 7;
    for (int i = 0; i < HIST; i++)
        hist[i] = (sp_token)(mix(&x) % V);
    printf("%-11s %12s %12s   (n_vocab %u, best of 9 windows of %.2f s)\n", "setting", "us/token", "cpu us/token",
           V, window);
    for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++) {
        struct sp_sampler_params p;
        struct sp_sampler *s;
        struct sp_token_logprobs lp;
        sp_sampler_params_default(&p);
        settings[k].set(&p);
        if (sp_sampler_init(&s, &p, V) != SP_OK) {
            fprintf(stderr, "bench_sampler: %s\n", sp_error_message());
            return 1;
        }
        /* which tokens: the first 4096 of a fresh sequence, hashed (FNV-1a) */
        uint64_t hash = 0xcbf29ce484222325ull;
        for (int j = 0; j < 4096; j++) {
            sp_token t = sp_sampler_sample(s, lg + (size_t)(j % ROWS) * V, hist, HIST,
                                           settings[k].logprobs ? &lp : NULL);
            hash = (hash ^ (uint64_t)(uint32_t)t) * 0x100000001b3ull;
            if (settings[k].logprobs)
                hash = (hash ^ (uint64_t)(uint32_t)lp.top[lp.n_top - 1].id) * 0x100000001b3ull;
        }
        double best = INFINITY, best_cpu = INFINITY;
        long sink = 0;
        for (int w = 0; w < 9; w++) {
            double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t;
            long n = 0;
            do {
                for (int j = 0; j < 16; j++, n++)
                    sink += sp_sampler_sample(s, lg + (size_t)(n % ROWS) * V, hist, HIST,
                                              settings[k].logprobs ? &lp : NULL);
                t = clock_s(CLOCK_MONOTONIC);
            } while (t - t0 < window);
            double per = (t - t0) / (double)n, cpu = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / (double)n;
            best = per < best ? per : best;
            best_cpu = cpu < best_cpu ? cpu : best_cpu;
        }
        printf("%-11s %12.2f %12.2f   tokens %016llx%s\n", settings[k].name, best * 1e6, best_cpu * 1e6,
               (unsigned long long)hash, sink == -1 ? "!" : "");
        sp_sampler_free(s);
    }
    free(lg);
    return 0;
}
