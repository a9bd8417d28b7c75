/* The model's recommended sampling settings (general.sampling.* in GGUF,
 * the keys llama.cpp's converters write) over llama-server's defaults. */
#include <math.h>
#include <stddef.h>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"

/* Each key, where its value goes, and the range a value must lie in. */
static const struct {
    const char *key;
    bool is_int;
    size_t off;
    double lo, hi;
} sp_sampling_keys[] = {
    {"general.sampling.temp", false, offsetof(struct sp_sampler_params, temperature), 0, 100},
    {"general.sampling.top_k", true, offsetof(struct sp_sampler_params, top_k), 0, 1 << 24},
    {"general.sampling.top_p", false, offsetof(struct sp_sampler_params, top_p), 0, 1},
    {"general.sampling.min_p", false, offsetof(struct sp_sampler_params, min_p), 0, 1},
    {"general.sampling.penalty_repeat", false, offsetof(struct sp_sampler_params, repeat_penalty),
     1e-3, 100},
    {"general.sampling.penalty_last_n", true, offsetof(struct sp_sampler_params, repeat_last_n), 0,
     1 << 24},
};

sp_status sp_engine_sampling_defaults(const struct sp_model *m, struct sp_sampler_params *p, int *n_from_model)
{
    sp_status first = SP_OK;
    sp_sampler_params_default(p);
    *n_from_model = 0;
    for (size_t i = 0; i < sizeof sp_sampling_keys / sizeof sp_sampling_keys[0]; i++) {
        const struct sp_gguf *g = &m->gguf;
        const char *key = sp_sampling_keys[i].key;
        if (!sp_gguf_find(g, key))
            continue;
        uint32_t u = 0;
        float f = 0;
        sp_status st = sp_sampling_keys[i].is_int ? sp_gguf_get_u32(g, key, false, &u)
                                                  : sp_gguf_get_f32(g, key, false, &f);
        double v = sp_sampling_keys[i].is_int ? (double)u : (double)f;
        if (st == SP_OK && !(v >= sp_sampling_keys[i].lo && v <= sp_sampling_keys[i].hi))
            st = sp_error_set(SP_ERR_FORMAT, "key '%s': %g is outside [%g, %g]", key, v,
                              sp_sampling_keys[i].lo, sp_sampling_keys[i].hi);
        if (st != SP_OK) {
            if (first == SP_OK)
                first = st; /* the message of the first bad key stays */
            continue;
        }
        char *dst = (char *)p + sp_sampling_keys[i].off;
        if (sp_sampling_keys[i].is_int)
            *(int32_t *)dst = (int32_t)u;
        else
            *(float *)dst = f;
        ++*n_from_model;
    }
    return first;
}
