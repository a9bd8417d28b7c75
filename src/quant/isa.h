/* Internal to src/quant (and its tests): ggml block layouts and the hooks
 * through which the ISA files overwrite entries of the traits table.
 *
 * The block structs match ggml's byte for byte (GGUF tensors are read in
 * place from the mmap); their sizes are checked with static asserts. */
#ifndef SP_QUANT_ISA_H
#define SP_QUANT_ISA_H

#include <stdint.h>

#include "quant/quant.h"

#define SP_QK 32    /* elements per Q4_0..Q8_1 block */
#define SP_QK_K 256 /* elements per K-quant super-block */

struct sp_block_q4_0 { uint16_t d; uint8_t qs[16]; };
struct sp_block_q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct sp_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct sp_block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct sp_block_q8_0 { uint16_t d; int8_t qs[32]; };
struct sp_block_q8_1 { uint16_t d, s; int8_t qs[32]; }; /* s = d * sum(qs) */
struct sp_block_q2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct sp_block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct sp_block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct sp_block_q5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct sp_block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct sp_block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

_Static_assert(sizeof(struct sp_block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(struct sp_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(struct sp_block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(struct sp_block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(struct sp_block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(struct sp_block_q8_1) == 36, "q8_1");
_Static_assert(sizeof(struct sp_block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(struct sp_block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(struct sp_block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(struct sp_block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(struct sp_block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(struct sp_block_q8_K) == 292, "q8_K");

/* Unpacks the 12-byte Q4_K/Q5_K scale field into 8 six-bit scales and
 * 8 six-bit mins (ggml's get_scale_min_k4 layout). */
static inline void sp_q4k_scales(const uint8_t q[12], uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* Unpacks the 12-byte Q3_K scale field into 16 signed scales (value - 32). */
static inline void sp_q3k_scales(const uint8_t q[12], int8_t sc[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (q[j] & 0xF) : (q[j - 8] >> 4);
        int hi = (q[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        sc[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* Overwrite the entries this ISA accelerates; only call after checking the
 * CPU (sp_cpu_features). avx512 builds on avx2 (it calls it first). */
void sp_quant_register_avx2(struct sp_type_traits *table);
void sp_quant_register_avx512(struct sp_type_traits *table);

/* Copies into out[SP_TYPE_COUNT] the table sp_quant_init would build with
 * SP_ISA=isa ("scalar", "avx2", "avx512"); false when this CPU or build
 * cannot run that ISA.  For tests and benchmarks. */
bool sp_quant_table_for_isa(const char *isa, struct sp_type_traits *out);

#endif
