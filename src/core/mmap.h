/* A read-only memory mapping of a whole file, made once per model. */
#ifndef SP_CORE_MMAP_H
#define SP_CORE_MMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_mapping {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    bool copied;         /* read into anonymous memory (SP_MAP_READ) */
};

#define SP_MAP_READ 1u   /* read the file into memory instead of mapping it */
#define SP_MAP_LOCK 2u   /* mlock the pages */

/* Maps `path` (flags: SP_MAP_*).  SP_ERR_IO with the path and errno text on
 * failure; SP_ERR_NOMEM when the pages cannot be locked. */
sp_status sp_mapping_init(struct sp_mapping *m, const char *path, unsigned flags);
void sp_mapping_free(struct sp_mapping *m);
/* Tells the kernel the whole pages inside [p, p + len) of the mapping will
 * not be read soon (they leave the resident set; a later read maps them
 * again from the page cache).  For weights that were copied at load.  Does
 * nothing for a copied file (its pages have no file behind them). */
void sp_mapping_drop(const struct sp_mapping *m, const void *p, size_t len);

/* A byte range of a mapping. */
struct sp_span {
    size_t off, len;
};

/* Replaces a file mapping by anonymous memory at the same address holding
 * the same bytes, except those in the n_skip spans `skip` (which read as
 * zero from then on): pointers into the mapping stay valid, and the file
 * may change or be truncated without affecting them (a file mapping cut
 * short raises SIGBUS where it is read).  The copied pages are resident
 * (and locked with `lock`).  Nothing for a copied file.  SP_ERR_NOMEM when
 * the memory cannot be had (the mapping is then unchanged). */
sp_status sp_mapping_detach(struct sp_mapping *m, struct sp_span *skip, size_t n_skip, bool lock);

/* Anonymous memory of at least `size` bytes, 2 MiB aligned and backed by
 * huge pages where the kernel allows (streamed weights: the hardware
 * prefetchers stop at page ends and every 4 KiB page costs a TLB walk).
 * NULL when out of memory; free with sp_huge_free(p, size). */
void *sp_huge_alloc(size_t size);
void sp_huge_free(void *p, size_t size);

#endif
