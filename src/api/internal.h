/* The public API's own objects (src/api).  The rest of include/spindle.h is
 * implemented by the rooms it names: sp_engine and sp_request are the
 * engine's (src/engine), the server is src/server. */
#ifndef SP_API_INTERNAL_H
#define SP_API_INTERNAL_H

#include "core/mmap.h"
#include "gguf/gguf.h"
#include "spindle.h"

/* sp_model: the weights (the model room's struct sp_model) and the
 * vocabulary of one file; vocab_only models have no weights and hold the
 * file themselves. */
struct spindle_model {
    struct sp_model *weights;   /* NULL when vocab_only */
    struct sp_mapping map;      /* vocab_only: the file */
    struct sp_gguf gguf;        /* vocab_only: its parsed header */
    struct sp_vocab *vocab;
    char *path;
    char *arch;                 /* general.architecture, or NULL */
    int n_threads;
};

#endif
