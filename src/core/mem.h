/* The process's memory: resident set now and at its peak (public as
 * sp_process_memory). */
#ifndef SP_CORE_MEM_H
#define SP_CORE_MEM_H

#include <stdint.h>

#include "spindle.h"

/* Resident bytes now (VmRSS); 0 when unknown. */
uint64_t sp_mem_rss(void);

#endif
