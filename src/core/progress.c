/* Progress callbacks and the terminal line (progress.h). */
#define _GNU_SOURCE
#include "core/progress.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void sp_progress_report(const struct sp_progress *p, const char *what, uint64_t done,
                        uint64_t total)
{
    if (p && p->fn)
        p->fn(p->user, what, done, total);
}

static double sp_progress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sp_progress_stderr(void *user, const char *what, uint64_t done, uint64_t total)
{
    /* One step at a time, from one thread (the loader): plain statics. */
    static double t_start, t_drawn;
    static char step[64];
    (void)user;
    if (!isatty(STDERR_FILENO))
        return;
    double now = sp_progress_now();
    if (strncmp(step, what, sizeof step - 1)) {
        snprintf(step, sizeof step, "%s", what);
        t_start = now;
        t_drawn = 0;
    }
    bool last = done >= total;
    if (!last && now - t_drawn < 0.1)
        return;
    t_drawn = now;
    fprintf(stderr, "\r\033[K%s: %3.0f%% (%.0f/%.0f MB), %.1f s%s", what,
            total ? 100.0 * (double)done / (double)total : 100.0, done / 1e6, total / 1e6,
            now - t_start, last ? "\n" : "");
    if (last)
        step[0] = '\0';
}
