/* Weight and activation types: one traits table, indexed by the ggml type id.
 *
 * ref.c holds the scalar oracle for every type (dequantize, quantize, dot);
 * the ISA files (avx2.c, avxvnni.c, avx512.c, neon*.c) replace entries at
 * start-up via sp_quant_init(), for the ISA level core/cpu.h chooses.  Every fast entry is tested
 * against the oracle (tests/unit/test_quant.c).
 *
 * Batch invariance: vec_dot() and gemm() must give bit-identical results for
 * the same (row, activation) pair, whatever the tile shape, so a token's
 * logits do not depend on how many tokens share a matmul.
 */
#ifndef SP_QUANT_H
#define SP_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

enum sp_type {
    SP_TYPE_F32 = 0,
    SP_TYPE_F16 = 1,
    SP_TYPE_Q4_0 = 2,
    SP_TYPE_Q4_1 = 3,
    SP_TYPE_Q5_0 = 6,
    SP_TYPE_Q5_1 = 7,
    SP_TYPE_Q8_0 = 8,
    SP_TYPE_Q8_1 = 9,
    SP_TYPE_Q2_K = 10,
    SP_TYPE_Q3_K = 11,
    SP_TYPE_Q4_K = 12,
    SP_TYPE_Q5_K = 13,
    SP_TYPE_Q6_K = 14,
    SP_TYPE_Q8_K = 15,
    SP_TYPE_BF16 = 30,
    SP_TYPE_MXFP4 = 39, /* OCP microscaling FP4: E2M1 values, one E8M0 scale per 32 */
    /* Internal types (never read from a file; ids above ggml's): weights
     * repacked at load into 16-row interleaved tiles, and their activation
     * type.  Layouts in quant_isa.h; see src/quant/packed.c. */
    SP_TYPE_Q8_P = 64,
    SP_TYPE_Q4_1_P16 = 65,
    SP_TYPE_Q8_0_P16 = 66,
    SP_TYPE_Q5_0_P16 = 67,
    SP_TYPE_Q4_K_P16 = 68,
    SP_TYPE_Q6_K_P16 = 69,
    SP_TYPE_F16_P16 = 70,
    SP_TYPE_MXFP4_P16 = 71,
    SP_TYPE_COUNT = 72
};

/* s = dot(w[0..n), a[0..n)): w a row of the weight type, a a row of the
 * type's vec_dot_type (n a multiple of both block sizes). */
typedef void (*sp_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);
/* Tile: s[c * s_stride + r] = vec_dot(n, w + r*w_stride, a + c*a_stride) for
 * r < nr, c < nc; bit-identical to vec_dot for each element. */
typedef void (*sp_gemm_fn)(int64_t n, float *s, size_t s_stride,
                           const void *w, size_t w_stride, int nr,
                           const void *a, size_t a_stride, int nc);

struct sp_type_traits {
    const char *name;         /* "Q4_1" */
    uint32_t block_size;      /* elements per block */
    uint32_t type_size;       /* bytes per block */
    bool is_weight;           /* accepted as a model tensor type */
    void (*to_float)(const void *x, float *y, int64_t n);   /* n % block_size == 0 */
    void (*from_float)(const float *x, void *y, int64_t n); /* quantize; NULL if none */
    enum sp_type vec_dot_type; /* activation type rows are dotted with */
    sp_vec_dot_fn vec_dot;
    sp_gemm_fn gemm;          /* optional fast tile; NULL = loop over vec_dot */
    /* Repacking at load.  On a file type: the packed type its rows become
     * when the active ISA has a kernel for it (0: stays as read).  On a
     * packed type: pack() turns n_rows (a multiple of 16) rows of n elements
     * of the file type, src_row_bytes apart, into dst, which holds as many
     * bytes; its gemm takes nr a multiple of 16 and row offsets of 16k rows
     * (w_stride is the file type's row size). */
    uint32_t packed;
    void (*pack)(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
};

/* Builds the table of the active ISA level (sp_isa_active: the best this
 * CPU runs, or SP_ISA=name); idempotent, thread-safe. */
void sp_quant_init(void);
/* ISA level of the file-layout dot products and quantizers in use
 * ("avx512", "avx2", "dotprod", "scalar", ...). */
const char *sp_quant_isa(void);
/* ISA level of the packed tiles weights are repacked for, or NULL when
 * weights stay in the file layout. */
const char *sp_quant_packed_isa(void);

/* Traits of a known type id, NULL otherwise. */
const struct sp_type_traits *sp_type_get(uint32_t type);
/* Bytes of a row of n elements; false when n is not a multiple of the block
 * size or the type is unknown. */
bool sp_type_row_size(uint32_t type, int64_t n, size_t *out);

/* Packed type for rows of `type` under the active ISA when n_rows allows it
 * (a multiple of 16), else 0.  SP_REPACK=0 in the environment turns
 * repacking off (benchmarks). */
uint32_t sp_type_packed_for(uint32_t type, int64_t n_rows);

/* Scalar reference table (the oracle); never modified. */
const struct sp_type_traits *sp_type_get_ref(uint32_t type);

/* IEEE half and bfloat16 conversions. */
float sp_f16_to_f32(uint16_t h);
uint16_t sp_f32_to_f16(float f);
float sp_bf16_to_f32(uint16_t h);
uint16_t sp_f32_to_bf16(float f);
/* dst[i * stride] = src[i] rounded to f16 (nearest even), i < n: the K/V
 * cache's stores.  A per-ISA row (quant_isa.h: without F16C a portable
 * build would convert in software), every row the scalar cast's bits. */
void sp_f16_store(uint16_t *dst, size_t stride, const float *src, int64_t n);

#endif
