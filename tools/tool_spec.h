/* The speculative-decoding flags shared by run, bench and serve:
 *   --spec ngram|draft|self  --spec-k N  --spec-fixed  --draft-model M
 *   --spec-layers L */
#ifndef SP_TOOL_SPEC_H
#define SP_TOOL_SPEC_H

#include "args.h"
#include "spindle.h"

struct sp_tool_spec {
    sp_spec_kind kind;
    int k, layers;
    bool fixed;
    const char *draft_path;
    sp_model *draft;        /* loaded by sp_tool_spec_load */
};

#define SP_TOOL_SPEC_USAGE                                                                          \
    "  --spec ngram|draft|self  speculative decoding: prompt lookup, a draft model (--draft-model M,\n" \
    "                       same vocabulary), or the model's first --spec-layers L layers\n"            \
    "  --spec-k N           most drafts per step (default 8; adapts to acceptance)  --spec-fixed: always N\n"

void sp_tool_spec_init(struct sp_tool_spec *s);
/* Consumes the current flag when it is one of these (true); a bad value
 * prints the error and sets a->failed. */
bool sp_tool_spec_flag(struct sp_args *a, struct sp_tool_spec *s);
/* Loads the draft model (with n_threads) and fills ep's fields; prints the
 * error and returns false on failure. */
bool sp_tool_spec_load(struct sp_tool_spec *s, int n_threads, sp_engine_params *ep);
void sp_tool_spec_free(struct sp_tool_spec *s);

#endif
