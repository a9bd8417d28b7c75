/* Packed 16-row tiles for aarch64, FEAT_I8MM (smmla, two columns at a time) on top of the dot products: Armv8.6 cores
 * (packed_neon.inc).  The file-layout dots stay the scalar oracle's. */
#include "quant/quant_isa.h"

#if defined(__aarch64__)
#define KFN(name) name##_i8mm
#define SP_NEON_SDOT 1
#define SP_NEON_MMLA 1
#include "quant/packed_neon.inc"

void sp_quant_register_i8mm(struct sp_type_traits *table) { register_packed_i8mm(table); }
#endif
