#include "core/mem.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "core/error.h"

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
uint64_t sp_mem_peak_rss(void) { return sp_mem_status_kib("VmHWM:"); }

sp_status sp_mem_lock(void)
{
    if (mlockall(MCL_CURRENT | MCL_FUTURE) == 0)
        return SP_OK;
    int err = errno;
    struct rlimit rl = {0};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    if (rl.rlim_cur == RLIM_INFINITY)
        return sp_error_set(SP_ERR_IO, "--mlock: %s", strerror(err));
    return sp_error_set(SP_ERR_IO, "--mlock: %s (the locked-memory limit is %llu KiB; raise it with ulimit -l)",
                        strerror(err), (unsigned long long)rl.rlim_cur / 1024);
}
