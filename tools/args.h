/* Flag parsing shared by the subcommands: strict numbers with ranges, so a
 * bad flag is one clear line and exit status 2. */
#ifndef SP_TOOLS_ARGS_H
#define SP_TOOLS_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_args {
    int argc;
    char **argv;
    int i;           /* index of the current flag */
    bool failed;     /* an error was printed */
};

/* True when argv[i] equals one of the names (e.g. "-n", "--n-predict"). */
bool sp_args_is(const struct sp_args *a, const char *name, const char *alias);
/* The value after the current flag (advances i); NULL + error if missing. */
const char *sp_args_value(struct sp_args *a);
/* The value after the current flag as a model: a file path, or the name
 * of a stored model (tools/store.h: sp_store_model_path), resolved to its
 * file.  NULL + error (failed set) if missing, unknown or ambiguous. */
const char *sp_args_model(struct sp_args *a);
bool sp_args_long(struct sp_args *a, long long lo, long long hi, long long *out);
bool sp_args_int(struct sp_args *a, int lo, int hi, int *out);
bool sp_args_float(struct sp_args *a, double lo, double hi, float *out);
bool sp_args_u64(struct sp_args *a, uint64_t *out);

/* The KV cache flags run, serve, bench, info and perplexity share:
 * --cache-type-k/-ctk T and --cache-type-v/-ctv T (f16, q8_0, q4_0).  True
 * when argv[i] is one of them; its value goes into *k or *v (a bad one is
 * reported and sets failed). */
bool sp_args_cache_type(struct sp_args *a, sp_cache_type *k, sp_cache_type *v);

/* Reads a whole file ("-" = stdin) into a malloc'd buffer (NUL added). */
char *sp_read_file(const char *path, size_t *len);

#endif
