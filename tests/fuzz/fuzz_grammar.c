/* libFuzzer target: the input is GBNF text, compiled, bound to a small
 * vocabulary, then walked: a few steps of masks and advances.  Any result
 * is fine except a crash, a sanitizer report, a hang, or a mask that allows
 * a token the automaton then refuses.
 *
 *   make fuzz   (scripts/run-fuzz runs it on tests/fuzz/corpus/grammar) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static const char *const vocab[] = {"{", "}", "\"", "a", "ab", "1", "12", ",", " ", "[", "]", "\xc3", "\xa9",
                                    "\xc3\xa9", "null", "true", "\\", "x\"", "-", "<end>"};
#define N_VOCAB (sizeof vocab / sizeof vocab[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sp_grammar_tokens *toks;
    if (!toks) {
        uint32_t lens[N_VOCAB];
        uint8_t kinds[N_VOCAB];
        for (size_t i = 0; i < N_VOCAB; i++) {
            lens[i] = (uint32_t)strlen(vocab[i]);
            kinds[i] = i == N_VOCAB - 1 ? SP_GRAMMAR_TOKEN_END : SP_GRAMMAR_TOKEN_TEXT;
        }
        if (sp_grammar_tokens_init(&toks, N_VOCAB, vocab, lens, kinds) != SP_OK)
            __builtin_trap();
    }
    struct sp_grammar *g = NULL;
    if (sp_grammar_compile(&g, (const char *)data, size, NULL) != SP_OK) {
        if (g)
            __builtin_trap();
        return 0;
    }
    if (sp_grammar_bind(g, toks) == SP_OK) {
        sp_grammar_state s = sp_grammar_start(g);
        for (int step = 0; step < 8 && s != SP_GRAMMAR_DEAD; step++) {
            const uint64_t *m;
            if (sp_grammar_mask(g, s, &m, NULL) != SP_OK)
                break;
            sp_token pick = -1;
            for (uint32_t i = 0; i < N_VOCAB; i++)
                if ((m[0] >> i) & 1 && (pick < 0 || (size + (size_t)step) % 3 == i % 3))
                    pick = (sp_token)i;
            if (pick < 0 || pick == (sp_token)(N_VOCAB - 1))
                break;
            s = sp_grammar_advance(g, s, pick);
            if (s == SP_GRAMMAR_DEAD)
                __builtin_trap(); /* the mask allowed it */
        }
    }
    sp_grammar_free(g);
    return 0;
}
