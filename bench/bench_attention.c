/* Micro-benchmark: attention alone, the part of a decode step that grows
 * with the context, or of a prompt's prefill that grows with its square.
 *
 *   make build/bench_attention   (built by `make test` too)
 *   build/bench_attention [context] [threads] [kv heads] [heads] [head dim] [layers] [queries] [interleave]
 *                         [sequences] [cache type]
 *
 * queries > 1: a prompt chunk, the last `queries` positions of the context
 * in one batch (a 512-token prefill: context 512, queries 512).
 * interleave > 1: that many sequences grow side by side, a block each in
 * turn, in a cache just big enough for them (as batched decode fills the
 * engine's cache; src/kv places them in runs).
 * sequences > 1: batched decode, one query at the end of each of that many
 * of those sequences (queries must be 1).
 * cache type: how keys and values are stored, f16 (default), q8_0 or q4_0.
 * Defaults are SmolLM2-135M's shape (3 KV heads, 9 heads, 64 values, 30
 * layers) at 2,048 positions on 2 threads: 47 MB of f16 K/V, more than the
 * caches hold, so each token streams it from memory like the real decode
 * step.  Prints the best of 20 windows of 0.2 s as microseconds per batch
 * (all layers; one token unless `queries`) and the K/V bytes read per
 * second (as stored: fewer for a quantized cache), and the least CPU time
 * of the process per batch over those windows: on a machine shared with
 * other work, with one thread, the figure that does not count the time
 * others had the core. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "kernels/attention.h"
#include "kv/kv.h"

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

int main(int argc, char **argv)
{
    const int P = argc > 1 ? atoi(argv[1]) : 2048, nth = argc > 2 ? atoi(argv[2]) : 2;
    const int HKV = argc > 3 ? atoi(argv[3]) : 3, H = argc > 4 ? atoi(argv[4]) : 9;
    const int D = argc > 5 ? atoi(argv[5]) : 64, L = argc > 6 ? atoi(argv[6]) : 30;
    const int NQ0 = argc > 7 ? atoi(argv[7]) : 1, NS = argc > 9 ? atoi(argv[9]) : 1;
    const int IL0 = argc > 8 ? atoi(argv[8]) : 1, IL = IL0 > NS ? IL0 : NS, NQ = NS > 1 ? NS : NQ0;
    sp_cache_type ct = SP_CACHE_F16;
    struct sp_pool *pool;
    struct sp_kv *kv;
    struct sp_kv_seq seq = {0}, other[64] = {{0}};
    if (P < 1 || NQ < 1 || (NS == 1 && NQ > P) || (NS > 1 && NQ0 != 1) || IL < 1 || IL > 65 || HKV < 1 || H % HKV ||
        D % 16 || L < 1 || (argc > 10 && sp_cache_type_parse(argv[10], &ct) != SP_OK) ||
        sp_pool_init(&pool, nth) != SP_OK ||
        sp_kv_new(&kv, &(struct sp_kv_shape){.n_layer = (uint32_t)L, .n_head_kv = (uint32_t)HKV, .head_dim = (uint32_t)D,
                                             .type_k = ct, .type_v = ct},
                  (uint32_t)((sp_kv_blocks_for((uint64_t)P) + 1) * IL)) != SP_OK) {
        fprintf(stderr, "usage: %s [context] [threads] [kv heads] [heads] [head dim] [layers] [queries] [interleave] "
                        "[sequences] [f16|q8_0|q4_0]\n", argv[0]);
        return 2;
    }
    for (uint32_t n = 16; n < (uint32_t)P + 16; n += 16) /* a block each, in turn */
        for (int s = 0; s < IL; s++)
            if (sp_kv_seq_reserve(kv, s ? &other[s - 1] : &seq, n < (uint32_t)P ? n : (uint32_t)P) != SP_OK)
                return 1;
    /* small values, 1/8 + noise */
    float *kr = malloc(sizeof(float) * HKV * D), *vr = malloc(sizeof(float) * HKV * D);
    if (!kr || !vr)
        return 1;
    for (int s = 0; s < IL; s++)
        for (int l = 0; l < L; l++)
            for (int p = 0; p < P; p++) {
                for (uint32_t i = 0; i < (uint32_t)(HKV * D); i++) {
                    const uint32_t x = ((uint32_t)((s * L + l) * P + p) * (uint32_t)(HKV * D) + i) * 2654435761u;
                    kr[i] = 0.125f + (float)(x >> 22) / 8192.0f;
                    vr[i] = 0.125f + (float)(x >> 12 & 0x3ff) / 8192.0f;
                }
                sp_kv_store(kv, s ? &other[s - 1] : &seq, (uint32_t)l, (uint32_t)p, kr, vr);
            }
    free(kr), free(vr);
    size_t per = sp_attention_scratch_floats(P, D);
    float *q = malloc(sizeof(float) * NQ * H * D), *out = malloc(sizeof(float) * NQ * H * D);
    float *scratch = malloc(sizeof(float) * per * (size_t)sp_pool_chunks_for(nth));
    const struct sp_kv_seq **seqs = malloc(sizeof *seqs * NQ);
    int32_t *pos = malloc(sizeof *pos * NQ), *plan = malloc(sizeof *plan * sp_attention_plan_ints(NQ, H));
    if (!q || !out || !scratch || !seqs || !pos || !plan)
        return 1;
    for (int i = 0; i < NQ * H * D; i++)
        q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int t = 0; t < NQ; t++) {
        seqs[t] = NS > 1 && t > 0 ? &other[t - 1] : &seq;
        pos[t] = NS > 1 ? P - 1 : P - NQ + t;
    }
    struct sp_attn_args a = {.kv = kv, .n_tok = NQ, .q = q, .q_stride = (size_t)H * D, .seqs = seqs, .pos = pos,
                             .n_head = H, .n_head_kv = HKV, .head_dim = D, .scale = 0.125f, .out = out,
                             .out_stride = (size_t)H * D, .scratch = scratch, .scratch_per_thread = per,
                             .max_pos = P, .plan = plan};
    double best = 1e9, best_cpu = 1e9;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t1;
        long it = 0;
        do {
            for (int l = 0; l < L; l++) {
                a.layer = (uint32_t)l;
                sp_attention(pool, &a);
            }
            it++;
            t1 = now();
        } while (t1 - t0 < 0.2);
        best = (t1 - t0) / it < best ? (t1 - t0) / it : best;
        const double cpu = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / it;
        best_cpu = cpu < best_cpu ? cpu : best_cpu;
    }
    const double bytes = (double)P * NS * L * HKV * 2 * (double)sp_cache_type_bytes(ct, (uint64_t)D);
    printf("context %d, %d queries, %d sequences, %d threads, %d/%d heads, D %d, %d layers, %s cache: %.1f us per "
           "batch, %.1f GB/s of K/V, %.1f us of CPU per batch\n", P, NQ, NS, nth, HKV, H, D, L, sp_cache_type_name(ct),
           best * 1e6, bytes / best / 1e9, best_cpu * 1e6);
    free(q), free(out), free(scratch), free(seqs), free(pos), free(plan);
    sp_kv_seq_release(kv, &seq);
    for (int s = 1; s < IL; s++)
        sp_kv_seq_release(kv, &other[s - 1]);
    sp_kv_free(kv);
    sp_pool_free(pool);
    return 0;
}
