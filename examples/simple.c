/* simple MODEL PROMPT [N]: load a GGUF model and stream a greedy
 * continuation of PROMPT (at most N tokens, default 64) to stdout.
 *
 *   cc simple.c $(pkg-config --cflags --libs spindle) -o simple
 *
 * The whole lifecycle of the public API: load a model, make an engine,
 * submit a request, step the engine until it finishes, free both. */
#include <spindle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs inside sp_engine_step() for every token (and once at the end). */
static void on_token(void *user, const sp_token_event *ev)
{
    fwrite(ev->text, 1, ev->len, stdout);
    fflush(stdout);
    if (ev->finish != SP_FINISH_NONE)
        *(sp_finish *)user = ev->finish;
}

static int fail(const char *what)
{
    fprintf(stderr, "simple: %s: %s\n", what, sp_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N]\n", argv[0]);
        return 2;
    }
    sp_model_params mp;
    sp_model_params_default(&mp);
    mp.path = argv[1];
    sp_model *model;
    if (sp_model_load(&mp, &model) != SP_OK)
        return fail("load");

    sp_engine_params ep;
    sp_engine_params_default(&ep); /* the model's context, one request at a time */
    sp_engine *engine;
    if (sp_engine_create(model, &ep, &engine) != SP_OK) {
        sp_model_free(model);
        return fail("engine");
    }

    sp_gen_params gp;
    sp_gen_params_default(&gp);
    gp.sampling.temperature = 0.0f; /* greedy */
    gp.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    sp_finish finish = SP_FINISH_NONE;
    int rc = 0;
    if (sp_request_submit_text(engine, argv[2], strlen(argv[2]), false, &gp, on_token, &finish, NULL) != SP_OK)
        rc = fail("submit");
    for (int running = 1; rc == 0 && running > 0;)
        if ((running = sp_engine_step(engine)) < 0)
            rc = fail("step");
    printf("\n");
    fprintf(stderr, "[%s]\n", sp_finish_name(finish));
    sp_engine_free(engine);
    sp_model_free(model);
    return rc;
}
