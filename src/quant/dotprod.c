/* Packed 16-row tiles for aarch64, FEAT_DotProd (sdot): Cortex-A55/A76 and later, Apple M1
 * (packed_neon.inc).  The file-layout dots stay the scalar oracle's. */
#include "quant/quant_isa.h"

#if defined(__aarch64__)
#define KFN(name) name##_dotprod
#define SP_NEON_SDOT 1
#define SP_NEON_MMLA 0
#include "quant/packed_neon.inc"

void sp_quant_register_dotprod(struct sp_type_traits *table) { register_packed_dotprod(table); }
#endif
