/* libFuzzer target: the input is a JSON Schema.  Compiled to GBNF (which
 * must then compile as a grammar: the generator never writes a grammar its
 * own compiler refuses), and used to validate the input itself as an
 * instance.  Any result is fine except a crash, a sanitizer report, a hang,
 * or a refusal of the generated grammar.
 *
 *   make fuzz   (scripts/run-fuzz runs it on tests/fuzz/corpus/schema) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *gbnf = NULL;
    if (size > 1 << 16)
        return 0;
    if (sp_grammar_from_schema((const char *)data, size, &gbnf) == SP_OK) {
        struct sp_grammar *g = NULL;
        sp_status st = sp_grammar_compile(&g, gbnf, strlen(gbnf), NULL);
        /* the grammar may be too large for the state limit, or match no
         * finite string (an unsatisfiable recursion); never malformed */
        if (st != SP_OK && !strstr(sp_error_message(), "automaton states") &&
            !strstr(sp_error_message(), "no finite string"))
            __builtin_trap();
        sp_grammar_free(g);
        free(gbnf);
    }
    char why[256];
    sp_grammar_validate((const char *)data, size, (const char *)data, size, why, sizeof why);
    return 0;
}
