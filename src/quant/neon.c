/* Packed 16-row tiles for aarch64, baseline AdvSIMD (every aarch64 CPU): widening multiplies
 * (packed_neon.inc).  The file-layout dots stay the scalar oracle's. */
#include "quant/isa.h"

#if defined(__aarch64__)
#define KFN(name) name##_neon
#define SP_NEON_SDOT 0
#define SP_NEON_MMLA 0
#include "quant/packed_neon.inc"

void sp_quant_register_neon(struct sp_type_traits *table) { register_packed_neon(table); }
#endif
