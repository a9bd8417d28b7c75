/* The process's memory from /proc/self/status (mem.h). */
#include "core/mem.h"

#include <stdio.h>
#include <string.h>

static uint64_t sp_mem_status_kib(const char *field)
{
    char line[256];
    uint64_t kib = 0;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && sscanf(line + n, " %llu", (unsigned long long *)&kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

uint64_t sp_mem_rss(void) { return sp_mem_status_kib("VmRSS:"); }

void sp_process_memory(uint64_t *resident, uint64_t *peak)
{
    if (resident)
        *resident = sp_mem_rss();
    if (peak)
        *peak = sp_mem_status_kib("VmHWM:");
}
