/* src/conv: messages, the system message, and the JSON files (trimming to
 * the context needs a model: tests/py/test_chat_cli.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "spindle.h"

static char path[64];

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_messages(void)
{
    struct sp_conv *c;
    CHECK(sp_conv_create(&c) == SP_OK, "init");
    sp_conv_clear(c); /* empty: nothing to do */
    CHECK(sp_conv_set_system(c, NULL) == SP_OK && sp_conv_count(c) == 0, "no system to remove");
    CHECK(sp_conv_add(c, "user", "hi") == SP_OK, "user");
    CHECK(sp_conv_add(c, "assistant", "hello") == SP_OK, "assistant");
    CHECK(sp_conv_add(c, "wizard", "x") == SP_ERR_ARG, "unknown role refused");
    CHECK(sp_conv_set_system(c, "be brief") == SP_OK && sp_conv_count(c) == 3, "system added");
    CHECK(!strcmp(sp_conv_messages(c)[0].role, "system") &&
              !strcmp(sp_conv_messages(c)[1].content, "hi"), "system first");
    CHECK(sp_conv_set_system(c, "be kind") == SP_OK && sp_conv_count(c) == 3 &&
              !strcmp(sp_conv_messages(c)[0].content, "be kind"), "system replaced");
    sp_conv_pop(c);
    CHECK(sp_conv_count(c) == 2 && !strcmp(sp_conv_messages(c)[1].content, "hi"), "pop");
    sp_conv_clear(c);
    CHECK(sp_conv_count(c) == 1 && !strcmp(sp_conv_messages(c)[0].role, "system"),
          "clear keeps the system message");
    CHECK(sp_conv_set_system(c, "") == SP_OK && sp_conv_count(c) == 0, "system removed");
    sp_conv_free(c);
}

static void test_files(void)
{
    struct sp_conv *c, *d;
    CHECK(sp_conv_create(&c) == SP_OK && sp_conv_create(&d) == SP_OK, "init");
    sp_conv_set_system(c, "sys \"quoted\"\n");
    sp_conv_add(c, "user", "caf\xc3\xa9");
    sp_conv_add(c, "assistant", "");
    CHECK(sp_conv_save(c, path) == SP_OK, "save");
    CHECK(sp_conv_load(d, path) == SP_OK && sp_conv_count(d) == 3, "load");
    for (size_t i = 0; i < 3 && sp_conv_count(d) == 3; i++)
        CHECK(!strcmp(sp_conv_messages(c)[i].role, sp_conv_messages(d)[i].role) &&
                  !strcmp(sp_conv_messages(c)[i].content, sp_conv_messages(d)[i].content),
              "message %zu round-trips", i);
    write_file("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    CHECK(sp_conv_load(d, path) == SP_OK && sp_conv_count(d) == 1, "an object with messages");
    const char *bad[] = {
        "", "[", "{\"a\": 1}", "[1]", "[{\"role\": \"user\"}]",
        "[{\"role\": \"user\", \"content\": 5}]", "[{\"role\": \"robot\", \"content\": \"x\"}]",
        "[{\"role\": \"user\", \"content\": \"x\", \"content\": \"y\"}]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(bad[i]);
        CHECK(sp_conv_load(d, path) != SP_OK && sp_conv_count(d) == 1 &&
                  strstr(sp_error_message(), path),
              "bad file %zu refused, conversation unchanged, message names the file: %s", i,
              sp_error_message());
    }
    CHECK(sp_conv_load(d, "/no/such/file.json") == SP_ERR_IO, "missing file");
    CHECK(sp_conv_save(c, "/no/such/dir/x.json") == SP_ERR_IO, "unwritable path");
    sp_conv_free(c);
    sp_conv_free(d);
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/spindle-test-conv-%d.json", (int)getpid());
    test_messages();
    test_files();
    unlink(path);
    return sp_check_report("conv");
}
