/* Internal to src/kernels (and its tests): the table of one ISA level's
 * element-wise, norm and attention kernels.
 *
 * attention.c and ops.c hold the scalar row (portable C) and call the
 * active row; vec_avx2.c, vec_avx512.c and vec_neon.c fill their rows from
 * one implementation written over 16-float vectors (vec.inc).  Every row
 * computes the scalar row's bits: each output value goes through the same
 * IEEE operations in the same order, a lane per key, head element or
 * value (the contracts in attention.c and ops.c); tests/unit/test_kernels.c
 * compares every row this CPU runs against the scalar one bit for bit. */
#ifndef SP_KERNELS_ISA_H
#define SP_KERNELS_ISA_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/cpu.h"
#include "kernels/attention.h"

struct sp_kernels_isa {
    enum sp_isa isa;
    /* part[k] = sum of x[i]^2 in double over i % 8 == k, i ascending */
    void (*sumsq8)(const float *x, int64_t n, double part[8]);
    void (*swiglu)(const float *g, const float *u, float *y, int64_t n);
    void (*geglu)(const float *g, const float *u, float *y, int64_t n); /* u NULL: sp_gelu */
    /* sp_rope_apply (kernels.h) with the table of sp_rope_table */
    void (*rope)(float *x, const float *cs, int n_rot, int neox);
    /* heads h0 .. h0+nh-1 (one KV group) of token t: sp_attn_group's contract */
    void (*attn_group)(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf);
    /* head h of nq <= 16 queries t0.. at consecutive positions of one
     * sequence (a prompt); NULL: such tokens take attn_group one by one */
    void (*attn_block)(const struct sp_attn_args *a, int t0, int nq, int h, float *scratch);
    /* the linear layers' kernels (scan.h's contracts); NULL: the scalar row's */
    void (*conv_causal)(float *y, const float *const *rows, const float *w, const float *bias, int ch, int k,
                        bool silu);
    float (*dot16)(const float *a, const float *b, int n);
    void (*ssd_state)(float *h, const float *h0, float decay, int n, const float *u, const float *const *B,
                      const float *const *x, int ds, int hd);
    void (*ssd_out)(float *y, const float *h0, const float *c, float decay, int n, const float *w,
                    const float *const *x, int ds, int hd);
};

extern const struct sp_kernels_isa sp_kernels_scalar;
#if defined(__x86_64__)
extern const struct sp_kernels_isa sp_kernels_avx2, sp_kernels_avx512;
#elif defined(__aarch64__)
extern const struct sp_kernels_isa sp_kernels_neon;
#endif

/* The row in use (the active ISA level's, or its nearest parent's). */
const struct sp_kernels_isa *sp_kernels_active(void);
/* The row for level `name` (core/cpu.h), NULL when this CPU or build cannot
 * run it; for tests and benchmarks. */
const struct sp_kernels_isa *sp_kernels_for_isa(const char *name);
/* Makes `k` the active row, for tests and benchmarks that compare rows
 * through the public entry points; not while kernels run. */
void sp_kernels_use(const struct sp_kernels_isa *k);

/* ---- shared by the rows ---- */

/* Largest group handled at once (heads per KV head); larger groups split. */
#define SP_ATTN_GMAX 16
/* Block path: head dimensions up to this (and a multiple of 16). */
#define SP_ATTN_BLOCK_DMAX 256

/* The scalar row's group kernel: the vector rows use it for head
 * dimensions their vectors do not divide. */
void sp_attn_group_scalar(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf);

/* The softmax denominator's order, shared by every row: S[r] sums the
 * exponentials of the positions j with j % 16 == r, j ascending, and the
 * sixteen S[r] are added as a tree, halves first:
 * ((S[r] + S[r+8]) + (S[r+4] + S[r+12])) ... = sp_attn_tree16(S): sixteen
 * short chains, one vector add per 16 keys, instead of one sequential chain
 * whose add latency grows with the context. */
static inline float sp_attn_tree16(const float S[16])
{
    float t8[8], t4[4];
    for (int r = 0; r < 8; r++)
        t8[r] = S[r] + S[r + 8];
    for (int r = 0; r < 4; r++)
        t4[r] = t8[r] + t8[r + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* Head h's attention sink (-inf: none, which adds e^-inf = +0 to the
 * denominator, exactly nothing) and the softmax maximum taking it in, as
 * llama.cpp's soft_max with sinks: max(scores, sink). */
static inline float sp_attn_sink(const struct sp_attn_args *a, int h)
{
    return a->sinks ? a->sinks[h] : -INFINITY;
}
static inline float sp_attn_sink_max(float mx, float sink) { return sink > mx ? sink : mx; }

/* llama.cpp's CPU GELU as a table of f16 results indexed by the f16 bits
 * of the input (ops.c); one entry past the end so a 32-bit gather at the
 * last entry stays inside. */
extern _Float16 sp_gelu_table[(1 << 16) + 1];
void sp_gelu_table_ready(void);
/* Asks for the entries of |x| < 10 (74 KB) in this core's cache: between
 * two layers' activations a forward pass streams megabytes of weights, and
 * the lookups would otherwise miss a line at a time (half of MiniLM's
 * GELU time).  A row of a thousand values or more pays for it. */
void sp_gelu_table_warm(void);
/* The scalar row's GEGLU (the vector rows' tails; NEON's whole row). */
void sp_geglu_scalar(const float *g, const float *u, float *y, int64_t n);
void sp_rope_scalar(float *x, const float *cs, int n_rot, int neox);
/* The scalar row's linear-layer kernels (scan.c): the vector rows' fallback
 * for widths their vectors do not divide. */
void sp_conv_causal_scalar(float *y, const float *const *rows, const float *w, const float *bias, int ch, int k,
                           bool silu);
float sp_dot16_scalar(const float *a, const float *b, int n);
void sp_ssd_state_scalar(float *h, const float *h0, float decay, int n, const float *u, const float *const *B,
                         const float *const *x, int ds, int hd);
void sp_ssd_out_scalar(float *y, const float *h0, const float *c, float decay, int n, const float *w,
                       const float *const *x, int ds, int hd);
/* The scalar row's RoPE (ops.c's contract: each output one rounded product
 * and one fused multiply-add, the product of x0 fused), inline so that each
 * ISA file, whose vector row takes this form for adjacent pairs, compiles
 * fmaf to its own FMA instruction: built for baseline x86-64 (`make
 * PORTABLE=1`), a call would reach libm's fmaf once per value. */
static inline void sp_rope_rows(float *x, const float *cs, int n_rot, int neox)
{
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[i], s = cs[half + i];
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = fmaf(x0, c, -(x1 * s));
        x[b] = fmaf(x0, s, x1 * c);
    }
}

#endif
