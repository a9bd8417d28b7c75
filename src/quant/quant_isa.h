/* Internal to src/quant (and its tests): ggml block layouts, the hooks
 * through which the ISA files overwrite entries of the traits table, and
 * the ISA rows of sp_f16_store.
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
/* MXFP4: an E8M0 exponent e (scale 2^(e-127)) and 32 E2M1 codes, element j
 * in the low nibble of qs[j], element 16+j in the high one; code k is
 * sp_mxfp4_values[k] / 2 (the values are doubled so they are integers, and
 * the scale is halved to match: sp_e8m0_half). */
struct sp_block_mxfp4 { uint8_t e; uint8_t qs[16]; };

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
_Static_assert(sizeof(struct sp_block_mxfp4) == 17, "mxfp4");

/* The E2M1 code points times 2: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives (codes 8-15, sign bit 3). */
static const int8_t sp_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Half the E8M0 scale, 2^(e-128), exactly (e 0 and 1 as float subnormals);
 * e = 255 (NaN in the format) reads as 2^127 as in ggml. */
static inline float sp_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

/* Activation block of the packed types: 32 int8 values, their scale d and
 * s = d * sum(qs) (the Q4_1 min term), both rounded through f16 as Q8_0 and
 * Q8_1 store them but kept as float, and -128 and -16 times sum(qs) (undo
 * the unsigned bias of packed Q8_0 and Q5_0 weights). */
struct sp_block_q8_p { int8_t qs[32]; float d, s; int32_t m128, m16; };
_Static_assert(sizeof(struct sp_block_q8_p) == 48, "q8_p");

/* Packed layouts: 16 rows interleaved so one 512-bit vector holds 4 bytes
 * of each of the 16 rows, and a dot product lane is one row.  A group of 16
 * rows with nb blocks each takes nb x 16 x (file block size) bytes, so row
 * offsets stay row * file row size, and is one sequential stream (the
 * hardware prefetchers lose a stream that jumps back and forth):
 *   Q4_1_P16: per block 320 bytes: qs[4][16][4] (chunk j of row r: the
 *             file's qs[4j..4j+3]: low nibbles elements 4j.., high nibbles
 *             16+4j..), then d[16], m[16] as f16.
 *   Q8_0_P16: blocks in pairs of 1088 bytes: qs[2][8][16][4] as uint8 (file
 *             value + 128), then d[2][16] f16 (64-byte aligned pairs); an
 *             odd last block is qs then d alone.
 *   Q5_0_P16: blocks in pairs of 704 bytes: per block qs[4][16][4] as in
 *             Q4_1 and hb[16][4] (byte k of row r: bit j = fifth bit of
 *             element 4j+k, bit 4+j of element 16+4j+k, j < 4), then
 *             d[2][16]; an odd last block is qs, hb, d alone.
 *   Q4_K_P16: per super-block 2304 bytes: qs[32][16][4] (vector v, row r:
 *             the file's qs[4v..4v+3]: low nibbles elements 64(v/8) +
 *             4(v%8).., high nibbles 32 further), then the 12-byte scale
 *             fields as words [3][16][4], then d[16], dmin[16] as f16.
 *   Q6_K_P16: per super-block 3360 bytes: ql[32][16][4] (vector v, row r,
 *             byte k: low nibble the low 4 bits of element 4v+k, high
 *             nibble of element 128+4v+k), qh[16][16][4] (vector w: bits
 *             2i..2i+1 the high 2 bits of element 64i+4w+k), scales[16][16]
 *             (sub-block of 16, row) as int8, then d[16] as f16.  Stored
 *             values are q + 32 (unsigned).
 *   MXFP4_P16: per block 272 bytes: qs[4][16][4] as in Q4_1 (the file's
 *             E2M1 codes), then e[16] (the E8M0 exponents).  Kernels map
 *             a code to its doubled value + 16 (sp_mxfp4_u16, 4..28,
 *             unsigned for vpdpbusd) and start the sum at the column's
 *             -16 * sum(qs): isum is exactly the file's sum of doubled
 *             values times activations, acc = fma(isum, half(e) * dy, acc).
 *   F16_P16:  element k of the group's 16 rows at k * 32 + 2 r, as f16:
 *             one 256-bit load converts to a vector of 16 rows.  Its
 *             activations are F32 rows (no rounding), and every output is
 *             acc = fmaf(w[k], a[k], acc) for k = 0, 1, ..., n - 1: one
 *             fused chain, no horizontal sum.
 * Every output is one row's blocks in order, acc = fma(isum, dw*dy, acc)
 * (+ fma(m, s, acc) for Q4_1), for any number of columns.  The K types use
 * Q8_K activations and keep the file-layout kernels' arithmetic exactly
 * (kern_x86.inc, KQ_FINISH): per super-block the exact integer sums isum
 * (scaled sub-block dots) and msum (mins times activation sums), then
 * acc = fma(dw*dy, isum, acc) and acc = fma(-(dmin*dy), msum, acc). */
#define SP_P16_ROWS 16
/* Byte offsets of block b's quants and scales inside a group of nb blocks. */
static inline size_t sp_p16_q4_1_qs(int64_t b) { return (size_t)b * 320; }
static inline size_t sp_p16_q4_1_dm(int64_t b) { return (size_t)b * 320 + 256; }
static inline size_t sp_p16_q8_0_qs(int64_t b) { return (size_t)(b / 2) * 1088 + (size_t)(b & 1) * 512; }
static inline size_t sp_p16_q8_0_d(int64_t nb, int64_t b)
{
    return (size_t)(b / 2) * 1088 + ((b | 1) < nb ? 1024 : 512) + (size_t)(b & 1) * 32;
}
static inline size_t sp_p16_q5_0_qs(int64_t b) { return (size_t)(b / 2) * 704 + (size_t)(b & 1) * 320; }
static inline size_t sp_p16_q5_0_hb(int64_t b) { return sp_p16_q5_0_qs(b) + 256; }
static inline size_t sp_p16_q5_0_d(int64_t nb, int64_t b)
{
    return (size_t)(b / 2) * 704 + ((b | 1) < nb ? 640 : 320) + (size_t)(b & 1) * 32;
}
static inline size_t sp_p16_mxfp4_qs(int64_t b) { return (size_t)b * 272; }
static inline size_t sp_p16_mxfp4_e(int64_t b) { return (size_t)b * 272 + 256; }
/* MXFP4 codes' doubled values + 16 (sp_mxfp4_values + 16) */
static const uint8_t sp_mxfp4_u16[16] = {16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4};
#define SP_P16_Q4_K_BYTES 2304 /* a group's super-block: 16 x 144 */
#define SP_P16_Q4_K_SC 2048
#define SP_P16_Q4_K_D 2240
#define SP_P16_Q4_K_DMIN 2272
#define SP_P16_Q6_K_BYTES 3360 /* 16 x 210 */
#define SP_P16_Q6_K_QH 2048
#define SP_P16_Q6_K_SC 3072
#define SP_P16_Q6_K_D 3328
void sp_q8_p_from_float_ref(const float *x, void *vy, int64_t n);
void sp_q8_p_to_float_ref(const void *vx, float *y, int64_t n);
void sp_q4_1_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_q8_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_q5_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_q4_K_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_q6_K_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_f16_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_mxfp4_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows);
void sp_q4_1_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                          const void *a, size_t a_stride, int nc);
void sp_q8_0_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                          const void *a, size_t a_stride, int nc);
void sp_q5_0_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                          const void *a, size_t a_stride, int nc);
void sp_q4_K_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                          const void *a, size_t a_stride, int nc);
void sp_q6_K_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                          const void *a, size_t a_stride, int nc);
void sp_mxfp4_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                           const void *a, size_t a_stride, int nc);
void sp_f16_p16_gemm_ref(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                         const void *a, size_t a_stride, int nc);

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

/* Element e (0..255) of a Q4_K super-block's quants, 0..15. */
static inline int sp_q4k_q(const uint8_t *qs, int e)
{
    int c = e / 64, l = e % 32;
    return (e % 64) < 32 ? (qs[32 * c + l] & 0xF) : (qs[32 * c + l] >> 4);
}

/* Element e (0..255) of a Q6_K super-block, -32..31. */
static inline int sp_q6k_q(const struct sp_block_q6_K *b, int e)
{
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    uint8_t lb = b->ql[64 * h + l + 32 * (k & 1)];
    int lo = k < 2 ? (lb & 0xF) : (lb >> 4);
    int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | (hi << 4)) - 32;
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

/* Overwrite the entries this ISA level accelerates, on a table built for
 * its parent level (core/cpu.h); only call when sp_isa_runs says so. */
void sp_quant_register_avx2(struct sp_type_traits *table);
void sp_quant_register_avxvnni(struct sp_type_traits *table);
void sp_quant_register_avx512(struct sp_type_traits *table);
void sp_quant_register_neon(struct sp_type_traits *table);
void sp_quant_register_dotprod(struct sp_type_traits *table);
void sp_quant_register_i8mm(struct sp_type_traits *table);

/* sp_f16_store's rows (quant.h): the scalar one, a (_Float16) cast per
 * value (ref.c), and the vector conversions of the levels that have one
 * (16 values a step, rounded to nearest even as the cast; a strided
 * destination, a key's place in its tile, gets them one by one; the tail is
 * the scalar row's).  A level without a row uses its parent's. */
typedef void (*sp_f16_store_fn)(uint16_t *dst, size_t stride, const float *src, int64_t n);
void sp_f16_store_scalar(uint16_t *dst, size_t stride, const float *src, int64_t n);
#if defined(__x86_64__)
void sp_f16_store_avx2(uint16_t *dst, size_t stride, const float *src, int64_t n);
void sp_f16_store_avx512(uint16_t *dst, size_t stride, const float *src, int64_t n);
#elif defined(__aarch64__)
void sp_f16_store_neon(uint16_t *dst, size_t stride, const float *src, int64_t n);
#endif
/* The row of level `name` (core/cpu.h), NULL when this CPU or build cannot
 * run it; for tests. */
sp_f16_store_fn sp_f16_store_for_isa(const char *name);

/* Copies into out[SP_TYPE_COUNT] the table sp_quant_init would build with
 * SP_ISA=isa (a core/cpu.h level name); false when this CPU or build
 * cannot run that level.  For tests and benchmarks. */
bool sp_quant_table_for_isa(const char *isa, struct sp_type_traits *out);

#endif
