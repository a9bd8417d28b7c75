/* The public API's own objects (src/api).  The rest of include/spindle.h is
 * implemented by the rooms it names: sp_engine and sp_request are the
 * engine's (src/engine). */
#ifndef SP_API_INTERNAL_H
#define SP_API_INTERNAL_H

#include <pthread.h>

#include "core/mmap.h"
#include "gguf/gguf.h"
#include "gguf/split.h"
#include "spindle.h"

/* sp_model: the weights (the model room's struct sp_model) and the
 * vocabulary of one file; vocab_only models have no weights and hold the
 * file themselves. */
struct spindle_model {
    struct sp_model *weights;   /* NULL when vocab_only */
    struct sp_mapping map;      /* vocab_only: the file */
    struct sp_gguf gguf;        /* vocab_only: its parsed header */
    struct sp_gguf_parts parts; /* vocab_only: a split model's other parts */
    struct sp_vocab *vocab;
    char *path;
    char *arch;                 /* general.architecture, or NULL */
    int n_threads;
    /* The vocabulary as grammars see it (src/grammar), built by the first
     * sp_grammar_create and kept for the model's life. */
    pthread_mutex_t grammar_mu;
    struct sp_grammar_tokens *grammar_tokens;
};

/* The model's grammar table, built on first use (thread-safe). */
sp_status sp_api_grammar_tokens(const sp_model *m, const struct sp_grammar_tokens **out);
/* The model's built-in chat format for files without a template
 * (sp_model_chat_format), or NULL. */
const char *sp_api_chat_format(const sp_model *m);

#endif
