/* schema_judge: the spindle side of bench/schemas/run.py, through the public
 * API only (include/spindle.h).  It loads a model once and then answers
 * requests on stdin, one reply line each on stdout:
 *
 *   V\n                     -> "V n_vocab eos\n", then one line per token:
 *                              "<special 0/1> <hex of its bytes>\n"
 *   S <kind> <len> <ms>\n<schema bytes>
 *                           -> "C <ok 0/1> <compile_us> <cpu_us> <message>\n"
 *                              (wall and this thread's CPU time)
 *                              kind: c (compact JSON) or f (any whitespace);
 *                              ms: the compile is cancelled after that long
 *                              (sp_grammar_stop_when), reported as not ok.
 *   I <len>\n<instance bytes>
 *                           -> "R <grammar 0/1> <check 0/1> <tokens,...>
 *                               <mask_us,...> <mask_cpu_us,...>
 *                               <replay_us,...> <replay_cpu_us,...> <why>\n"
 *                              (no schema compiled since the start or since
 *                              a failed compile: the tokens only, 0 0)
 *
 *   T <len>\n<text bytes>  -> "T <tokens,...>\n" (the model's tokenization)
 *
 * An instance is judged on a fresh copy of the last compiled schema (as a
 * server request that repeats a schema gets): its text is tokenized with the
 * model's tokenizer, and before each token the mask is computed (timed) and
 * the token must be in it; grammar is 1 when every token was allowed and
 * the whole text is a sentence.  Each mask's wall and CPU time (this
 * thread's) are reported; then the same tokens are replayed on another fresh
 * copy, timed again: there every state's token walks were made by the first
 * pass (shared by copies), so the replay's masks are the steady cost and the
 * first pass's also count each state's first visit.  check is
 * sp_grammar_check_text, the
 * validator that spindle runs on every finished output.  Fields that may be
 * empty are written as "-". */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spindle.h"

static double sj_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this thread (the compile runs on it): on a loaded machine the
 * wall time also counts the time other processes hold the cores. */
static double sj_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool sj_past(void *ctx)
{
    return sj_now() > *(const double *)ctx;
}

/* Reads exactly n bytes of a request body into a fresh buffer (NUL added). */
static char *sj_read_body(size_t n)
{
    if (n > ((size_t)1 << 30))
        return NULL;
    char *b = malloc(n + 1);
    if (b && fread(b, 1, n, stdin) != n) {
        free(b);
        return NULL;
    }
    if (b)
        b[n] = 0;
    return b;
}

/* One line of text: newlines and tabs become spaces, empty becomes "-". */
static void sj_put_line(const char *s)
{
    if (!s || !*s) {
        fputs("-", stdout);
        return;
    }
    for (; *s; s++)
        putchar(*s == '\n' || *s == '\r' || *s == '\t' ? ' ' : *s);
}

static int sj_vocab(const sp_model *m)
{
    uint32_t n = sp_model_n_vocab(m);
    char buf[4096];
    printf("V %" PRIu32 " %d\n", n, (int)sp_model_token_eos(m));
    for (uint32_t t = 0; t < n; t++) {
        size_t len = 0;
        bool special = sp_model_token_is_control(m, (sp_token)t);
        if (sp_model_token_to_piece(m, (sp_token)t, true, buf, sizeof buf, &len) != SP_OK)
            len = 0;
        printf("%d ", special ? 1 : 0);
        for (size_t i = 0; i < len; i++)
            printf("%02x", (unsigned char)buf[i]);
        if (!len)
            putchar('-');
        putchar('\n');
    }
    return 0;
}

static void sj_compile(const sp_model *m, sp_grammar **g, char kind, const char *text, size_t len, long ms)
{
    sp_grammar_free(*g);
    *g = NULL;
    double deadline = sj_now() + (double)ms / 1e3;
    sp_grammar_stop_when(sj_past, &deadline);
    double t0 = sj_now(), c0 = sj_cpu();
    sp_status st = sp_grammar_create(m, kind == 'f' ? SP_GRAMMAR_SCHEMA_FLEX : SP_GRAMMAR_SCHEMA, text, len, g);
    double us = (sj_now() - t0) * 1e6, cpu_us = (sj_cpu() - c0) * 1e6;
    sp_grammar_stop_when(NULL, NULL);
    printf("C %d %.1f %.1f ", st == SP_OK, us, cpu_us);
    sj_put_line(st == SP_OK ? "" : sp_error_message());
    putchar('\n');
}

/* Masks of toks[0..n) on a fresh copy of proto, each timed (wall and CPU
 * into us[] and cpu[]), stopping at the first token not allowed; returns how
 * many masks were made, *ok whether every token was allowed and the end is
 * a sentence; -1 (why set) when no copy could be made. */
static long sj_walk(sp_grammar *proto, const sp_token *toks, size_t n, double *us, double *cpu, bool *ok,
                    char *why, size_t cap)
{
    sp_grammar *g = NULL;
    if (sp_grammar_clone(proto, &g) != SP_OK) {
        snprintf(why, cap, "judge: %s", sp_error_message());
        return -1;
    }
    size_t walked = 0;
    sp_grammar_state s = sp_grammar_start(g);
    for (; walked < n; walked++) {
        const uint64_t *mask;
        double a = sj_now(), c = sj_cpu();
        sp_status ms = sp_grammar_mask(g, s, &mask, NULL);
        cpu[walked] = (sj_cpu() - c) * 1e6;
        us[walked] = (sj_now() - a) * 1e6;
        uint32_t t = (uint32_t)toks[walked];
        if (ms != SP_OK || !((mask[t / 64] >> (t % 64)) & 1)) {
            walked++;
            s = SP_GRAMMAR_DEAD;
            break;
        }
        s = sp_grammar_advance(g, s, toks[walked]);
    }
    *ok = s != SP_GRAMMAR_DEAD && sp_grammar_accepting(g, s);
    sp_grammar_free(g);
    return (long)walked;
}

static void sj_put_times(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%.2f" : "%.2f", v[i]);
    fputs(n ? " " : "- ", stdout);
}

static void sj_instance(const sp_model *m, sp_grammar *proto, const char *text, size_t len)
{
    size_t cap = 6 * len + 16, n = 0;
    sp_token *toks = malloc(cap * sizeof *toks);
    double *us = malloc(4 * cap * sizeof *us);
    char why[512] = "";
    size_t walked = 0, replayed = 0;
    bool gram = false, check = false, again = false;
    if (!toks || !us || sp_model_tokenize(m, text, len, false, false, toks, cap, &n) != SP_OK) {
        n = 0;
        snprintf(why, sizeof why, "judge: %s", toks && us ? sp_error_message() : "out of memory");
        goto out;
    }
    if (!proto) {
        snprintf(why, sizeof why, "judge: no grammar (tokens only)");
        goto out;
    }
    long w = sj_walk(proto, toks, n, us, us + cap, &gram, why, sizeof why);
    long r = w < 0 ? -1 : sj_walk(proto, toks, n, us + 2 * cap, us + 3 * cap, &again, why, sizeof why);
    if (w < 0 || r < 0)
        goto out;
    walked = (size_t)w;
    replayed = (size_t)r;
    check = sp_grammar_check_text(proto, text, len, why, sizeof why) == SP_OK;
    if (check)
        why[0] = 0;
out:
    printf("R %d %d ", gram, check);
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", (int)toks[i]);
    fputs(n ? " " : "- ", stdout);
    sj_put_times(us, walked);
    sj_put_times(us + cap, walked);
    sj_put_times(us + 2 * cap, replayed);
    sj_put_times(us + 3 * cap, replayed);
    sj_put_line(why);
    putchar('\n');
    free(us);
    free(toks);
}

static void sj_tokenize(const sp_model *m, const char *text, size_t len)
{
    size_t cap = 6 * len + 16, n = 0;
    sp_token *toks = malloc(cap * sizeof *toks);
    if (!toks || sp_model_tokenize(m, text, len, false, false, toks, cap, &n) != SP_OK)
        n = 0;
    fputs("T ", stdout);
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", (int)toks[i]);
    puts(n ? "" : "-");
    free(toks);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: schema_judge MODEL.gguf  (requests on stdin; see bench/schemas/run.py)\n");
        return 2;
    }
    sp_model_params p;
    sp_model_params_default(&p);
    p.path = argv[1];
    sp_model *m = NULL;
    if (sp_model_load(&p, &m) != SP_OK) {
        fprintf(stderr, "schema_judge: %s\n", sp_error_message());
        return 2;
    }
    /* The first grammar of a model builds its token table: pay that here,
     * not in the first schema's compile time. */
    sp_grammar *g = NULL;
    if (sp_grammar_create(m, SP_GRAMMAR_SCHEMA, "{}", 2, &g) != SP_OK) {
        fprintf(stderr, "schema_judge: %s\n", sp_error_message());
        sp_model_free(m);
        return 2;
    }
    sp_grammar_free(g);
    g = NULL;
    char line[256];
    int rc = 0;
    while (fgets(line, sizeof line, stdin)) {
        char kind = 0;
        size_t len = 0;
        long ms = 0;
        if (line[0] == 'V') {
            sj_vocab(m);
        } else if (sscanf(line, "S %c %zu %ld", &kind, &len, &ms) == 3) {
            char *b = sj_read_body(len);
            if (!b) {
                rc = 2;
                break;
            }
            sj_compile(m, &g, kind, b, len, ms);
            free(b);
        } else if (sscanf(line, "T %zu", &len) == 1) {
            char *b = sj_read_body(len);
            if (!b) {
                rc = 2;
                break;
            }
            sj_tokenize(m, b, len);
            free(b);
        } else if (sscanf(line, "I %zu", &len) == 1) {
            char *b = sj_read_body(len);
            if (!b) {
                rc = 2;
                break;
            }
            sj_instance(m, g, b, len);
            free(b);
        } else {
            fprintf(stderr, "schema_judge: bad request line\n");
            rc = 2;
            break;
        }
        fflush(stdout);
    }
    sp_grammar_free(g);
    sp_model_free(m);
    return rc;
}
