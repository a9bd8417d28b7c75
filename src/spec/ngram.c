/* Prompt lookup drafts: text that edits, summarises or answers from its
 * input repeats it, so the tokens that followed an earlier occurrence of
 * the sequence's last few tokens are a good guess for what comes next. */
#include <string.h>

#include "spec/spec.h"

uint32_t sp_spec_ngram(const sp_token *toks, uint32_t n, uint32_t cap, sp_token *out)
{
    for (uint32_t g = SP_SPEC_NGRAM_MAX; g >= SP_SPEC_NGRAM_MIN; g--) {
        if (n <= g || !cap)
            return 0;
        const sp_token *key = toks + n - g;
        /* the latest earlier occurrence that has a continuation */
        for (uint32_t i = n - g; i-- > 0;) {
            if (toks[i] != key[0] || memcmp(toks + i, key, g * sizeof *key))
                continue;
            uint32_t m = n - (i + g); /* tokens after it, before the sequence's end */
            m = m < cap ? m : cap;
            memcpy(out, toks + i + g, m * sizeof *out);
            return m;
        }
    }
    return 0;
}
