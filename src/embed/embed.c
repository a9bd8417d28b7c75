#include "embed/embed.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

static const char *const sp_pooling_names[] = {"default", "mean", "cls", "last"};

const char *sp_pooling_name(sp_pooling p)
{
    return (unsigned)p < sizeof sp_pooling_names / sizeof sp_pooling_names[0] ? sp_pooling_names[p] : NULL;
}

sp_status sp_pooling_parse(const char *name, sp_pooling *out)
{
    for (int i = SP_POOLING_MEAN; i <= SP_POOLING_LAST; i++)
        if (name && strcasecmp(name, sp_pooling_names[i]) == 0) {
            *out = (sp_pooling)i;
            return SP_OK;
        }
    return sp_error_set(SP_ERR_ARG, "unknown pooling '%s' (mean, cls, last)", name ? name : "(null)");
}

sp_pooling sp_embed_pooling_of(uint32_t pooling_type)
{
    switch (pooling_type) {
    case 2: return SP_POOLING_CLS;
    case 3: return SP_POOLING_LAST;
    default: return SP_POOLING_MEAN;
    }
}

void sp_embed_rows(sp_pooling p, int n_tok, int *first, int *count)
{
    *first = p == SP_POOLING_LAST ? n_tok - 1 : 0;
    *count = p == SP_POOLING_MEAN ? n_tok : 1;
}

void sp_embed_pool(sp_pooling p, const float *rows, size_t stride, int count, int n, int normalize, float *out)
{
    /* sums in double: a long input's mean does not depend on float rounding order */
    for (int i = 0; i < n; i++) {
        double acc = 0.0;
        for (int r = 0; r < count; r++)
            acc += rows[(size_t)r * stride + i];
        out[i] = (float)(p == SP_POOLING_MEAN ? acc / count : acc);
    }
    if (!normalize)
        return;
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)out[i] * out[i];
    if (ss > 0.0) {
        float inv = (float)(1.0 / sqrt(ss));
        for (int i = 0; i < n; i++)
            out[i] *= inv;
    }
}
