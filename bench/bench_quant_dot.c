/* Micro-benchmark: vec_dot and gemm throughput per type and ISA, in GB/s of
 * weight bytes streamed.  Two working sets: "cache" (fits in L2) and "mem"
 * (64 MiB of weights, well past L3) which is what decode sees.
 *
 *   make build/bench_quant_dot   (built by `make test` too)
 *   build/bench_quant_dot [type-name ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/quant_isa.h"
#include "quant/quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: robust to a shared machine */
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { K = 1536, NTOK = 4 };

static double run(const struct sp_type_traits *t, const uint8_t *w, size_t wrow, int64_t rows,
                  const uint8_t *a, size_t arow, int tokens, double min_s)
{
    static float out[NTOK * 65536];
    double t0 = now(), t1;
    long iters = 0;
    do {
        if (tokens == 1) {
            for (int64_t r = 0; r < rows; r++) t->vec_dot(K, &out[r & 65535], w + r * wrow, a);
        } else {
            for (int64_t r = 0; r + 4 <= rows; r += 4)
                t->gemm(K, out, 4, w + r * wrow, wrow, 4, a, arow, tokens);
        }
        iters++;
        t1 = now();
    } while (t1 - t0 < min_s);
    return (double)iters * rows * wrow / (t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
    static const uint32_t types[] = {SP_TYPE_Q4_1, SP_TYPE_Q8_0, SP_TYPE_Q4_K, SP_TYPE_Q6_K,
                                     SP_TYPE_Q5_0, SP_TYPE_F16, SP_TYPE_F32, SP_TYPE_Q4_0,
                                     SP_TYPE_Q5_1, SP_TYPE_Q5_K, SP_TYPE_Q3_K, SP_TYPE_Q2_K,
                                     SP_TYPE_BF16};
    static const char *isas[] = {"scalar", "avx2", "avx512"};
    static struct sp_type_traits tab[SP_TYPE_COUNT];
    float *x = malloc(sizeof(float) * K);
    for (int i = 0; i < K; i++) x[i] = (float)((i * 7919) % 200 - 100) / 50.0f;
    printf("%-6s %-6s %10s %10s %12s\n", "isa", "type", "cache GB/s", "mem GB/s", "gemm4 GB/s*");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const struct sp_type_traits *ref = sp_type_get_ref(types[k]);
        if (argc > 1) {
            int want = 0;
            for (int i = 1; i < argc; i++) want |= !strcmp(argv[i], ref->name);
            if (!want) continue;
        }
        size_t wrow, arow;
        sp_type_row_size(types[k], K, &wrow);
        sp_type_row_size(ref->vec_dot_type, K, &arow);
        int64_t rows_mem = (64 << 20) / (int64_t)wrow, rows_cache = (512 << 10) / (int64_t)wrow;
        rows_mem &= ~3;
        rows_cache &= ~3;
        uint8_t *w = malloc(wrow * rows_mem), *a = malloc(arow * NTOK);
        for (int64_t r = 0; r < rows_mem; r += 1)
            if (r < 64) ref->from_float(x, w + r * wrow, K);
            else memcpy(w + r * wrow, w + (r % 64) * wrow, wrow);
        for (int c = 0; c < NTOK; c++) sp_type_get_ref(ref->vec_dot_type)->from_float(x, a + c * arow, K);
        for (size_t s = 0; s < 3; s++) {
            if (!sp_quant_table_for_isa(isas[s], tab)) continue;
            const struct sp_type_traits *t = &tab[types[k]];
            double gc = run(t, w, wrow, rows_cache, a, arow, 1, s == 0 ? 0.05 : 0.2);
            double gm = run(t, w, wrow, rows_mem, a, arow, 1, s == 0 ? 0.05 : 0.3);
            double gg = t->gemm ? run(t, w, wrow, rows_mem, a, arow, NTOK, 0.3) : 0;
            printf("%-6s %-6s %10.2f %10.2f %12.2f\n", isas[s], ref->name, gc, gm, gg);
        }
        free(w);
        free(a);
    }
    printf("* gemm4: 4 tokens per weight pass; GB/s of weights, so x4 for dot throughput\n");
    free(x);
    return 0;
}
