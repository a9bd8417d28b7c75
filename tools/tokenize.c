/* spindle tokenize -m MODEL [--no-bos] [--special] [--file F | TEXT]
 *   prints the token ids on one line, separated by spaces.  --file - reads
 *   the exact bytes of stdin.  Without --no-bos, BOS/EOS are added as the
 *   model's add_bos_token / add_eos_token say; --special parses special-token
 *   texts such as <|im_start|>.
 * spindle detokenize -m MODEL ID...
 *   prints the text of the ids (special tokens rendered). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spindle.h"
#include "store.h"
#include "tools.h"

/* The model's vocabulary only (works on vocabulary-only files); NULL after
 * printing the error. */
static sp_model *vocab_open(const char *path)
{
    sp_model_params mp;
    sp_model *m = NULL;
    sp_model_params_default(&mp);
    mp.path = path;
    mp.vocab_only = true;
    if (sp_model_load(&mp, &m) != SP_OK)
        sp_tool_fail("%s", sp_error_message());
    return m;
}

static const char sp_tokenize_usage[] =
    "usage: spindle tokenize -m MODEL [--no-bos] [--special] (--file F | TEXT)\n"
    "  prints the token ids of TEXT (or of the bytes of F; - = stdin) on one line\n"
    "  --no-bos    add no BOS/EOS (default: as the model's add_bos_token/add_eos_token say)\n"
    "  --special   parse special-token texts such as <|im_start|>\n";

static const char sp_detokenize_usage[] =
    "usage: spindle detokenize -m MODEL ID...\n"
    "  prints the text of the token ids (special tokens rendered)\n";

static char *read_stream(FILE *in, size_t *n)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, in);
        len += r;
        if (len < cap) {
            if (ferror(in)) {
                free(buf);
                return NULL;
            }
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    *n = len;
    return buf;
}

int sp_tool_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *text = NULL;
    bool add_bos = true, special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(sp_tokenize_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(argv[i], "--no-bos"))
            add_bos = false;
        else if (!strcmp(argv[i], "--special"))
            special = true;
        else if (argv[i][0] == '-' && argv[i][1])
            return sp_tool_fail("tokenize: unknown option '%s' (see spindle tokenize --help)", argv[i]);
        else if (!text)
            text = argv[i];
        else
            return sp_tool_fail("tokenize: more than one TEXT argument");
    }
    if (!model)
        return sp_tool_fail("tokenize: -m MODEL is required (see spindle tokenize --help)");
    if (!(model = sp_store_model_path("-m", model)))
        return 2;
    if ((file != NULL) == (text != NULL))
        return sp_tool_fail("tokenize: give exactly one of --file F or TEXT");
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        FILE *in = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!in)
            return sp_tool_fail("tokenize: cannot open '%s'", file);
        buf = read_stream(in, &len);
        if (in != stdin)
            fclose(in);
        if (!buf)
            return sp_tool_fail("tokenize: cannot read '%s'", file);
    }
    sp_model *m = vocab_open(model);
    if (!m) {
        free(buf);
        return 2;
    }
    const char *src = file ? buf : text;
    if (!file)
        len = strlen(text);
    size_t cap = len + 16, n = 0;
    sp_token *ids = malloc(cap * sizeof *ids);
    sp_status st = ids ? sp_model_tokenize(m, src, len, add_bos, special, ids, cap, &n) : SP_ERR_NOMEM;
    if (st == SP_ERR_ARG && n > cap) { /* cannot happen: at most one id per byte plus specials */
        free(ids);
        cap = n;
        ids = malloc(cap * sizeof *ids);
        st = ids ? sp_model_tokenize(m, src, len, add_bos, special, ids, cap, &n) : SP_ERR_NOMEM;
    }
    int rc = 0;
    if (st != SP_OK) {
        rc = sp_tool_fail("tokenize: %s", st == SP_ERR_NOMEM && !ids ? "out of memory" : sp_error_message());
    } else {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    free(buf);
    sp_model_free(m);
    return rc;
}

int sp_tool_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    int first_id = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(sp_detokenize_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model = argv[++i];
        } else {
            first_id = i;
            break;
        }
    }
    if (!model)
        return sp_tool_fail("detokenize: -m MODEL is required (see spindle detokenize --help)");
    if (!(model = sp_store_model_path("-m", model)))
        return 2;
    size_t n = (size_t)(argc - first_id);
    sp_token *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return sp_tool_fail("detokenize: out of memory");
    for (size_t i = 0; i < n; i++) {
        char *end;
        long x = strtol(argv[first_id + (int)i], &end, 10);
        if (*end || end == argv[first_id + (int)i] || x < 0 || x > INT32_MAX) {
            free(ids);
            return sp_tool_fail("detokenize: bad token id '%s'", argv[first_id + (int)i]);
        }
        ids[i] = (sp_token)x;
    }
    sp_model *m = vocab_open(model);
    int rc = 0;
    if (!m) {
        free(ids);
        return 2;
    }
    for (size_t i = 0; i < n; i++) {
        if ((uint32_t)ids[i] >= sp_model_n_vocab(m)) {
            rc = sp_tool_fail("detokenize: token id %d out of range (vocabulary has %u)", ids[i],
                              sp_model_n_vocab(m));
            goto done;
        }
    }
    size_t cap = 256 + n * 16, k = 0;
    char *out = malloc(cap);
    sp_status st = out ? sp_model_detokenize(m, ids, n, true, out, cap, &k) : SP_ERR_NOMEM;
    if (st == SP_ERR_ARG && k > cap) {
        free(out);
        cap = k;
        out = malloc(cap);
        st = out ? sp_model_detokenize(m, ids, n, true, out, cap, &k) : SP_ERR_NOMEM;
    }
    if (st != SP_OK) {
        rc = sp_tool_fail("detokenize: out of memory");
    } else {
        fwrite(out, 1, k, stdout);
        printf("\n");
    }
    free(out);
done:
    free(ids);
    sp_model_free(m);
    return rc;
}
