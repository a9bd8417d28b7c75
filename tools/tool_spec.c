#include "tool_spec.h"

#include <stddef.h>

#include "tools.h"

void sp_tool_spec_init(struct sp_tool_spec *s)
{
    sp_engine_params ep;
    sp_engine_params_default(&ep);
    *s = (struct sp_tool_spec){.kind = SP_SPEC_NONE, .k = ep.spec_k};
}

bool sp_tool_spec_flag(struct sp_args *a, struct sp_tool_spec *s)
{
    if (sp_args_is(a, "--spec", NULL)) {
        const char *v = sp_args_value(a);
        if (v && sp_spec_kind_parse(v, &s->kind) != SP_OK) {
            sp_tool_fail("--spec: '%s' is not ngram, draft, self or none", v);
            a->failed = true;
        }
    } else if (sp_args_is(a, "--spec-k", NULL)) {
        sp_args_int(a, 1, 32, &s->k);
    } else if (sp_args_is(a, "--spec-layers", NULL)) {
        sp_args_int(a, 1, 1 << 16, &s->layers);
    } else if (sp_args_is(a, "--spec-fixed", NULL)) {
        s->fixed = true;
    } else if (sp_args_is(a, "--draft-model", NULL)) {
        s->draft_path = sp_args_model(a);
    } else {
        return false;
    }
    return true;
}

bool sp_tool_spec_load(struct sp_tool_spec *s, int n_threads, sp_engine_params *ep)
{
    ep->spec = s->kind;
    ep->spec_k = s->k;
    ep->spec_fixed = s->fixed;
    ep->spec_layers = s->layers;
    if (s->draft_path) {
        sp_model_params mp;
        sp_model_params_default(&mp);
        mp.path = s->draft_path;
        mp.n_threads = n_threads;
        if (sp_model_load(&mp, &s->draft) != SP_OK) {
            sp_tool_fail("--draft-model: %s", sp_error_message());
            return false;
        }
    }
    ep->draft_model = s->draft;
    return true;
}

void sp_tool_spec_free(struct sp_tool_spec *s)
{
    sp_model_free(s->draft);
    s->draft = NULL;
}
