/* spindle chat: a multi-turn terminal chat on the engine's one loop.
 *
 * Lines are read with libedit (editing, history); a line starting with '/'
 * is a command (table below), anything else is the next user message.  The
 * conversation (src/conv) renders with the model's chat template and drops
 * its oldest turns when it outgrows the context.  Ctrl-C stops the answer
 * being written (the request is cancelled, the text so far is kept); at the
 * prompt it clears the line.  Ctrl-D at the prompt exits. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <editline/readline.h>

#include "args.h"
#include "spindle.h"
#include "tools.h"

static const char sp_chat_usage[] =
    "usage: spindle chat -m MODEL [options]\n"
    "  --system TEXT        system message\n"
    "  --ctx N  -t THREADS  context size and compute threads\n"
    "  --temp T --top-k K --top-p P --min-p P --typical-p P --repeat-penalty R\n"
    "  --repeat-last-n N --presence-penalty P --frequency-penalty P --seed S\n"
    "  --max-tokens N       longest answer (default: until the context is full)\n"
    "Sampling defaults: the model's recommendation (GGUF general.sampling.*), else\n"
    "temp 0.8, top-k 40, top-p 0.95, min-p 0.05.  Type /help in the chat for commands.\n";

/* ---- settings: flags (--temp 0.7) and /set temp 0.7 share this table ---- */

enum sp_setting_type { SP_SET_FLOAT, SP_SET_INT, SP_SET_U64 };

static const struct sp_setting {
    const char *name, *alias;
    enum sp_setting_type type;
    size_t off;          /* into struct sp_gen_params */
    double lo, hi;
} sp_settings[] = {
    {"temp", "temperature", SP_SET_FLOAT, offsetof(struct sp_gen_params, sampling.temperature), 0, 100},
    {"top-k", "top_k", SP_SET_INT, offsetof(struct sp_gen_params, sampling.top_k), 0, 1 << 24},
    {"top-p", "top_p", SP_SET_FLOAT, offsetof(struct sp_gen_params, sampling.top_p), 0, 1},
    {"min-p", "min_p", SP_SET_FLOAT, offsetof(struct sp_gen_params, sampling.min_p), 0, 1},
    {"typical-p", "typical_p", SP_SET_FLOAT, offsetof(struct sp_gen_params, sampling.typical_p), 0, 1},
    {"repeat-penalty", "repeat_penalty", SP_SET_FLOAT,
     offsetof(struct sp_gen_params, sampling.repeat_penalty), 1e-3, 100},
    {"repeat-last-n", "repeat_last_n", SP_SET_INT,
     offsetof(struct sp_gen_params, sampling.repeat_last_n), -1, 1 << 24},
    {"presence-penalty", "presence_penalty", SP_SET_FLOAT,
     offsetof(struct sp_gen_params, sampling.presence_penalty), -2, 2},
    {"frequency-penalty", "frequency_penalty", SP_SET_FLOAT,
     offsetof(struct sp_gen_params, sampling.frequency_penalty), -2, 2},
    {"seed", NULL, SP_SET_U64, offsetof(struct sp_gen_params, sampling.seed), 0, 0},
    {"max-tokens", "max_tokens", SP_SET_INT, offsetof(struct sp_gen_params, max_tokens), -1, 1 << 24},
};
#define SP_N_SETTINGS (sizeof sp_settings / sizeof sp_settings[0])

static const struct sp_setting *sp_setting_find(const char *name)
{
    for (size_t i = 0; i < SP_N_SETTINGS; i++)
        if (!strcmp(name, sp_settings[i].name) ||
            (sp_settings[i].alias && !strcmp(name, sp_settings[i].alias)))
            return &sp_settings[i];
    return NULL;
}

/* Sets one field from text; false with a one-line reason in err. */
static bool sp_setting_set(const struct sp_setting *s, const char *v, struct sp_gen_params *gp,
                           char *err, size_t n_err)
{
    char *end = NULL;
    errno = 0;
    void *dst = (char *)gp + s->off;
    if (s->type == SP_SET_U64) {
        unsigned long long x = strtoull(v, &end, 10);
        if (!v[0] || *end || errno || v[0] == '-') {
            snprintf(err, n_err, "%s: '%s' is not a non-negative integer", s->name, v);
            return false;
        }
        *(uint64_t *)dst = x;
        return true;
    }
    double d = strtod(v, &end);
    if (!v[0] || *end || !(d >= s->lo && d <= s->hi) ||
        (s->type == SP_SET_INT && d != floor(d))) {
        snprintf(err, n_err, "%s: '%s' is not a%s in %g..%g", s->name, v,
                 s->type == SP_SET_INT ? "n integer" : " number", s->lo, s->hi);
        return false;
    }
    if (s->type == SP_SET_INT)
        *(int32_t *)dst = (int32_t)d;
    else
        *(float *)dst = (float)d;
    return true;
}

static void sp_settings_print(const struct sp_gen_params *gp)
{
    for (size_t i = 0; i < SP_N_SETTINGS; i++) {
        const void *src = (const char *)gp + sp_settings[i].off;
        if (sp_settings[i].type == SP_SET_FLOAT)
            printf("  %-18s %g\n", sp_settings[i].name, (double)*(const float *)src);
        else if (sp_settings[i].type == SP_SET_INT)
            printf("  %-18s %d\n", sp_settings[i].name, (int)*(const int32_t *)src);
        else
            printf("  %-18s %llu\n", sp_settings[i].name,
                   (unsigned long long)*(const uint64_t *)src);
    }
}

/* ---- the conversation loop: read a line, stream the answer, until EOF ---- */

static volatile sig_atomic_t sp_interrupted;

static void sp_on_sigint(int sig)
{
    (void)sig;
    sp_interrupted = 1;
}

struct sp_chat {
    sp_model *m;
    struct sp_engine *e;
    struct sp_conv *conv;
    struct sp_gen_params gp;
    char *answer;                 /* the reply being streamed */
    size_t len, cap;
    bool oom;
    /* the last answer, for /stats */
    uint32_t n_prompt, n_cached, n_generated;
    struct sp_engine_timing timing;
    enum sp_finish finish;
    bool fresh_seed;              /* no --seed: each answer draws a new one */
};

static void sp_chat_event(void *user, const struct sp_token_event *ev)
{
    struct sp_chat *c = user;
    if (ev->len) {
        fwrite(ev->text, 1, ev->len, stdout);
        fflush(stdout);
        if (c->len + ev->len + 1 > c->cap) {
            size_t cap = (c->cap ? c->cap * 2 : 4096) + ev->len;
            char *p = realloc(c->answer, cap);
            if (!p) {
                c->oom = true;
                return;
            }
            c->answer = p;
            c->cap = cap;
        }
        memcpy(c->answer + c->len, ev->text, ev->len);
        c->len += ev->len;
        c->answer[c->len] = '\0';
    }
    c->n_prompt = ev->n_prompt;
    c->n_cached = ev->n_cached;
    c->n_generated = ev->n_generated;
    if (ev->finish != SP_FINISH_NONE)
        c->finish = ev->finish;
}

/* Answers the conversation's last user message, streaming to stdout. */
static void sp_chat_answer(struct sp_chat *c)
{
    int n_ctx = sp_engine_n_ctx(c->e);
    int reserve = c->gp.max_tokens > 0 && c->gp.max_tokens < n_ctx / 2 ? c->gp.max_tokens
                                                                        : n_ctx / 4;
    sp_token *toks = NULL;
    size_t n_toks = 0, n_dropped = 0;
    sp_status st = sp_conv_prompt(c->conv, c->m, (size_t)(n_ctx - reserve), &toks, &n_toks, &n_dropped);
    if (n_dropped)
        printf("(the conversation outgrew the context of %d tokens: dropped the %zu oldest "
               "messages)\n", n_ctx, n_dropped);
    if (st != SP_OK) {
        printf("error: %s (the message is not kept)\n", sp_error_message());
        sp_conv_pop(c->conv);
        return;
    }
    struct sp_request *req = NULL;
    c->len = 0;
    c->oom = false;
    c->finish = SP_FINISH_NONE;
    sp_interrupted = 0;
    if (c->fresh_seed && getrandom(&c->gp.sampling.seed, sizeof c->gp.sampling.seed, 0) < 0)
        c->gp.sampling.seed++;
    st = sp_request_submit(c->e, toks, n_toks, &c->gp, sp_chat_event, c, &req);
    sp_free(toks);
    if (st != SP_OK) {
        printf("error: %s (the message is not kept)\n", sp_error_message());
        sp_conv_pop(c->conv);
        return;
    }
    bool cancelled = false;
    while (sp_engine_step(c->e) > 0) {
        if (sp_interrupted && !cancelled) {
            sp_request_cancel(req);
            cancelled = true;
        }
    }
    sp_engine_timing_get(c->e, &c->timing);
    printf(cancelled ? "\n[stopped]\n" : "\n");
    if (c->oom || sp_conv_add(c->conv, "assistant", c->len ? c->answer : "") != SP_OK)
        printf("error: out of memory\n");
}

/* ---- commands ---- */

static void sp_cmd_help(struct sp_chat *c, const char *arg);

static void sp_cmd_system(struct sp_chat *c, const char *arg)
{
    if (sp_conv_set_system(c->conv, arg) != SP_OK)
        printf("error: %s\n", sp_error_message());
    else
        printf(arg[0] ? "system message set\n" : "system message removed\n");
}

static void sp_cmd_set(struct sp_chat *c, const char *arg)
{
    char name[32], value[64], err[160];
    if (sscanf(arg, "%31s %63s", name, value) != 2) {
        printf("settings (/set NAME VALUE):\n");
        sp_settings_print(&c->gp);
        return;
    }
    const struct sp_setting *s = sp_setting_find(name);
    if (!s)
        printf("error: no setting '%s' (type /set to list them)\n", name);
    else if (!sp_setting_set(s, value, &c->gp, err, sizeof err))
        printf("error: %s\n", err);
    else
        printf("%s = %s\n", s->name, value);
}

static void sp_cmd_clear(struct sp_chat *c, const char *arg)
{
    (void)arg;
    sp_conv_clear(c->conv);
    printf("conversation cleared (the system message stays)\n");
}

static void sp_cmd_save(struct sp_chat *c, const char *arg)
{
    if (!arg[0])
        printf("usage: /save FILE\n");
    else if (sp_conv_save(c->conv, arg) != SP_OK)
        printf("error: %s\n", sp_error_message());
    else
        printf("saved %zu messages to %s\n", sp_conv_count(c->conv), arg);
}

static void sp_cmd_load(struct sp_chat *c, const char *arg)
{
    if (!arg[0]) {
        printf("usage: /load FILE\n");
        return;
    }
    if (sp_conv_load(c->conv, arg) != SP_OK) {
        printf("error: %s\n", sp_error_message());
        return;
    }
    size_t n = sp_conv_count(c->conv);
    printf("loaded %zu messages from %s\n", n, arg);
    const struct sp_chat_msg *m = sp_conv_messages(c->conv);
    for (size_t i = 0; i < n; i++)
        printf("  %s: %.70s%s\n", m[i].role, m[i].content, strlen(m[i].content) > 70 ? "..." : "");
}

static void sp_cmd_stats(struct sp_chat *c, const char *arg)
{
    (void)arg;
    const struct sp_engine_timing *t = &c->timing;
    int n_ctx = sp_engine_n_ctx(c->e);
    uint32_t used = c->n_prompt + c->n_generated;
    printf("last answer: %u prompt tokens (%u cached), %u generated, stop reason %s\n",
           c->n_prompt, c->n_cached, c->n_generated, sp_finish_name(c->finish));
    printf("time to first token: %.1f ms | prefill: %.1f tokens/s | decode: %.1f tokens/s\n",
           t->t_first_token_s * 1e3, t->t_prefill_s > 0 ? t->n_prefill / t->t_prefill_s : 0.0,
           t->t_decode_s > 0 && t->n_decode > 1 ? (t->n_decode - 1) / t->t_decode_s : 0.0);
    printf("context used: %u of %d tokens (%.0f%%), %zu messages\n", used, n_ctx,
           100.0 * used / n_ctx, sp_conv_count(c->conv));
}

static void sp_cmd_exit(struct sp_chat *c, const char *arg);

static const struct sp_command {
    const char *name, *args, *help;
    void (*fn)(struct sp_chat *c, const char *arg);
} sp_commands[] = {
    {"/system", "TEXT", "set the system message (empty: remove it)", sp_cmd_system},
    {"/set", "NAME VALUE", "change a sampling setting (/set alone lists them)", sp_cmd_set},
    {"/clear", "", "start over (keeps the system message)", sp_cmd_clear},
    {"/save", "FILE", "save the conversation (OpenAI messages JSON)", sp_cmd_save},
    {"/load", "FILE", "load a conversation saved with /save", sp_cmd_load},
    {"/stats", "", "tokens, time to first token, speed, context used", sp_cmd_stats},
    {"/help", "", "this list", sp_cmd_help},
    {"/exit", "", "leave (or Ctrl-D)", sp_cmd_exit},
};

static bool sp_chat_quit;

static void sp_cmd_exit(struct sp_chat *c, const char *arg)
{
    (void)c;
    (void)arg;
    sp_chat_quit = true;
}

static void sp_cmd_help(struct sp_chat *c, const char *arg)
{
    (void)c;
    (void)arg;
    for (size_t i = 0; i < sizeof sp_commands / sizeof sp_commands[0]; i++)
        printf("  %-8s %-11s %s\n", sp_commands[i].name, sp_commands[i].args, sp_commands[i].help);
    printf("  Ctrl-C stops an answer; Ctrl-D exits.\n");
}

static void sp_chat_command(struct sp_chat *c, const char *line)
{
    size_t n = strcspn(line, " \t");
    const char *arg = line + n + strspn(line + n, " \t");
    for (size_t i = 0; i < sizeof sp_commands / sizeof sp_commands[0]; i++) {
        if (strlen(sp_commands[i].name) == n && !strncmp(line, sp_commands[i].name, n)) {
            sp_commands[i].fn(c, arg);
            return;
        }
    }
    printf("unknown command '%.*s' (/help lists them)\n", (int)n, line);
}

/* ---- main ---- */

static int sp_chat_loop(struct sp_chat *c)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sp_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    rl_catch_signals = 0;
    printf("spindle chat: context %d tokens. /help for commands, Ctrl-D to leave.\n",
           sp_engine_n_ctx(c->e));
    while (!sp_chat_quit) {
        sp_interrupted = 0;
        char *line = readline("> ");
        if (!line) {
            if (sp_interrupted) {
                printf("\n");
                continue; /* Ctrl-C at the prompt: a fresh line */
            }
            printf("\n");
            break; /* Ctrl-D */
        }
        const char *s = line + strspn(line, " \t");
        if (s[0])
            add_history(line);
        if (s[0] == '/') {
            sp_chat_command(c, s);
        } else if (s[0]) {
            if (sp_conv_add(c->conv, "user", s) != SP_OK)
                printf("error: %s\n", sp_error_message());
            else
                sp_chat_answer(c);
        }
        free(line);
    }
    return 0;
}

int sp_tool_chat(int argc, char **argv)
{
    sp_model_params mp;
    sp_engine_params ep;
    struct sp_args a = {argc, argv, 1, false};
    const char *system = NULL;
    /* flags given, applied over the model's defaults once it is loaded */
    struct sp_gen_params flags;
    bool set[SP_N_SETTINGS] = {false};
    char err[160];
    struct sp_chat c;
    memset(&c, 0, sizeof c);
    sp_model_params_default(&mp);
    sp_engine_params_default(&ep);
    sp_gen_params_default(&flags);
    for (; a.i < argc && !a.failed; a.i++) {
        const char *f = argv[a.i];
        const struct sp_setting *s = !strncmp(f, "--", 2) ? sp_setting_find(f + 2) : NULL;
        if (sp_args_is(&a, "-h", "--help")) {
            fputs(sp_chat_usage, stdout);
            return 0;
        } else if (s) {
            const char *v = sp_args_value(&a);
            if (v && !sp_setting_set(s, v, &flags, err, sizeof err))
                return sp_tool_fail("chat: --%s", err);
            set[s - sp_settings] = true;
        } else if (sp_args_is(&a, "-m", "--model")) mp.path = sp_args_model(&a);
        else if (sp_args_is(&a, "--system", NULL)) system = sp_args_value(&a);
        else if (sp_args_is(&a, "--ctx", "-c")) sp_args_int(&a, 16, 1 << 20, &ep.n_ctx);
        else if (sp_args_is(&a, "-t", "--threads")) sp_args_int(&a, 1, 512, &ep.n_threads);
        else
            return sp_tool_fail("chat: unknown option '%s' (see spindle chat --help)", f);
    }
    if (a.failed)
        return 2;
    if (!mp.path)
        return sp_tool_fail("chat: -m MODEL is required");
    ep.n_parallel = 1;
    mp.progress = sp_progress_stderr;
    int rc = 2;
    if (sp_model_load(&mp, &c.m) != SP_OK || sp_engine_create(c.m, &ep, &c.e) != SP_OK) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    sp_gen_params_default(&c.gp);
    int n_model = 0;
    if (sp_model_sampling_defaults(c.m, &c.gp.sampling, &n_model) != SP_OK)
        fprintf(stderr, "spindle: ignoring a sampling recommendation of the model: %s\n",
                sp_error_message());
    for (size_t i = 0; i < SP_N_SETTINGS; i++)
        if (set[i]) {
            size_t sz = sp_settings[i].type == SP_SET_U64 ? 8 : 4;
            memcpy((char *)&c.gp + sp_settings[i].off, (char *)&flags + sp_settings[i].off, sz);
        }
    c.fresh_seed = !set[sp_setting_find("seed") - sp_settings];
    if (sp_conv_create(&c.conv) != SP_OK || (system && sp_conv_set_system(c.conv, system) != SP_OK)) {
        sp_tool_fail("%s", sp_error_message());
        goto done;
    }
    rc = sp_chat_loop(&c);
done:
    sp_conv_free(c.conv);
    free(c.answer);
    sp_engine_free(c.e);
    sp_model_free(c.m);
    return rc;
}
