/* A read-only memory mapping of a whole file, made once per model. */
#ifndef SP_CORE_MMAP_H
#define SP_CORE_MMAP_H

#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_mapping {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
};

/* Maps `path`; SP_ERR_IO with the path and errno text on failure. */
sp_status sp_mapping_init(struct sp_mapping *m, const char *path);
void sp_mapping_free(struct sp_mapping *m);

#endif
