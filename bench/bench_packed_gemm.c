/* Micro-benchmark: cycles per 16 rows x 32 elements and column of a packed (P16)
 * matmul tile, the number that bounds prefill and batched decode.
 *
 *   make build/bench_packed_gemm   (built by `make test` too)
 *   build/bench_packed_gemm [type] [columns] [rows]
 *   (type 65 Q4_1_P16, 66 Q8_0_P16, 67 Q5_0_P16, 68 Q4_K_P16, 69 Q6_K_P16, 70 F16_P16, 71 MXFP4_P16)
 *
 * 256 rows x 1536 (392 KB of Q4_1) stay in L2; 65536 rows stream from
 * memory.  Weights and activations are random values quantized as the
 * model does (made-up bytes make denormal scale products, which some
 * cores take slow paths for).  SP_ISA=level picks the kernels.  One
 * thread; prints the fastest of 30 windows of 30 ms, because on a shared
 * machine the slow windows measure the neighbours. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/quant_isa.h"
#include "quant/quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    sp_quant_init();
    const int type = argc > 1 ? atoi(argv[1]) : SP_TYPE_Q4_1_P16;
    const int nc = argc > 2 ? atoi(argv[2]) : 8;
    const int rows = argc > 3 ? atoi(argv[3]) : 256;
    const int K = 1536, nb = K / 32;
    const struct sp_type_traits *t = sp_type_get((uint32_t)type);
    size_t row_bytes, a_stride; /* the file type's row size, as the packed gemm takes it */
    if (!t || !t->gemm || !t->pack || rows % 16 != 0 || nc < 1 || !sp_type_row_size((uint32_t)type, K, &row_bytes) ||
        !sp_type_row_size(t->vec_dot_type, K, &a_stride)) {
        fprintf(stderr, "usage: %s [65..71] [columns >= 1] [rows, a multiple of 16]\n", argv[0]);
        return 2;
    }
    uint32_t file = 0; /* the file type packed into `type` */
    for (uint32_t ft = 0; ft < SP_TYPE_COUNT; ft++)
        if (sp_type_get(ft) && sp_type_get(ft)->packed == (uint32_t)type)
            file = ft;
    uint8_t *w = aligned_alloc(64, row_bytes * rows + 4096), *wf = malloc(row_bytes * rows);
    uint8_t *a = aligned_alloc(64, a_stride * nc + 64);
    float *s = malloc(sizeof(float) * (size_t)rows * nc), *x = malloc(sizeof(float) * K);
    if (!file || !w || !wf || !a || !s || !x) {
        fprintf(stderr, "%s: %s is not packed at this ISA level (%s)\n", argv[0], t->name, sp_quant_isa());
        return 2;
    }
    uint32_t seed = 1;
    for (int r = 0; r < rows + nc; r++) {
        for (int i = 0; i < K; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = (float)(seed >> 8) / (float)(1 << 23) - 1.0f;
        }
        if (r < rows)
            sp_type_get_ref(file)->from_float(x, wf + (size_t)r * row_bytes, K);
        else
            sp_type_get(t->vec_dot_type)->from_float(x, a + (size_t)(r - rows) * a_stride, K);
    }
    memset(w, 0, row_bytes * rows + 4096);
    t->pack(wf, row_bytes, w, K, rows);
    double best = 1e9;
    for (int rep = 0; rep < 30; rep++) {
        double t0 = now(), t1;
        long it = 0;
        do {
            t->gemm(K, s, rows, w, row_bytes, rows, a, a_stride, nc);
            it++;
            t1 = now();
        } while (t1 - t0 < 0.03);
        best = (t1 - t0) / it < best ? (t1 - t0) / it : best;
    }
    const double per = best / ((double)(rows / 16) * nb * nc);
    printf("%s, %d columns, %d rows: %.2f ns per 16 x 32 and column (%.1f cycles at 3.7 GHz), %.1f GB/s of weights\n",
           t->name, nc, rows, per * 1e9, per * 3.7e9, row_bytes * rows / best / 1e9);
    free(w);
    free(wf);
    free(a);
    free(s);
    free(x);
    return 0;
}
