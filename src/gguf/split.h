/* A model in one GGUF file or in the parts llama.cpp's gguf-split writes:
 * PREFIX-00001-of-0000N.gguf ... PREFIX-0000N-of-0000N.gguf, each with the
 * keys split.no (0-based), split.count (N) and split.tensors.count (the
 * model's tensors, all parts together); the first part holds the metadata,
 * the tensors are spread over the parts.
 *
 * sp_gguf_split_open maps and parses every part: the first into *map and
 * *g, whose tensor table then covers every part's tensors (sp_gguf_append),
 * the others into *parts.  Every part's keys are checked against the
 * first's (a missing part, a wrong split.no or split.count, a tensor in two
 * parts, a tensor count that does not add up are SP_ERR_FORMAT or
 * SP_ERR_IO naming the file). */
#ifndef SP_GGUF_SPLIT_H
#define SP_GGUF_SPLIT_H

#include "core/mmap.h"
#include "gguf/gguf.h"

struct sp_gguf_parts {
    uint32_t n;               /* files beyond the first (0: a single file) */
    struct sp_mapping *maps;  /* [n]: parts 2..N */
    struct sp_gguf *g;        /* [n]: their parsed headers */
    char **paths;             /* [n + 1]: every file, the first part first; NULL-terminated */
};

/* Opens the model at `path`: a single file, or any part of a split model
 * (the first part is found by the file name, as llama.cpp names parts).
 * map_flags: SP_MAP_*.  On failure everything is freed. */
sp_status sp_gguf_split_open(struct sp_mapping *map, struct sp_gguf *g, struct sp_gguf_parts *parts,
                             const char *path, unsigned map_flags);
void sp_gguf_parts_free(struct sp_gguf_parts *parts);

/* The mapping of file i (0: `first`, i > 0: part i + 1); NULL past the end. */
const struct sp_mapping *sp_gguf_parts_map(const struct sp_gguf_parts *parts, const struct sp_mapping *first,
                                           uint32_t i);

#endif
