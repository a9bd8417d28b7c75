/* Progress of a long step (loading and repacking a model): the library
 * reports through a callback and never prints; a front end passes
 * sp_progress_stderr, which draws one line on a terminal and nothing
 * otherwise. */
#ifndef SP_CORE_PROGRESS_H
#define SP_CORE_PROGRESS_H

#include <stdint.h>

#include "spindle.h"

struct sp_progress {
    /* `what` names the step; done == total is the last call of a step. */
    void (*fn)(void *user, const char *what, uint64_t done, uint64_t total);
    void *user;
};

/* Calls p->fn when p and p->fn are set. */
void sp_progress_report(const struct sp_progress *p, const char *what, uint64_t done,
                        uint64_t total);

/* sp_progress_stderr (a line on stderr when it is a terminal) is public:
 * include/spindle.h. */

#endif
