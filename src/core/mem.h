/* The process's memory: resident set now and at its peak, and locking it
 * in RAM. */
#ifndef SP_CORE_MEM_H
#define SP_CORE_MEM_H

#include <stdint.h>

#include "spindle.h"

/* Resident bytes now (VmRSS) and the peak so far (VmHWM); 0 when unknown. */
uint64_t sp_mem_rss(void);
uint64_t sp_mem_peak_rss(void);

/* Locks every present and future page of the process in RAM (mlockall).
 * SP_ERR_IO naming the limit when the system refuses. */
sp_status sp_mem_lock(void);

#endif
