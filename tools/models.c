/* spindle list and spindle rm: the models in the store (tools/store.h). */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "store.h"
#include "tools.h"

/* spindle list: one line per stored model, NAME QUANT SIZE PATH, sorted by
 * name; a model whose files are missing says so. */
int sp_tool_list(int argc, char **argv)
{
    char root[4096];
    struct sp_store_model *m = NULL;
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: spindle list\n"
                 "  the models spindle pull stored ($SPINDLE_MODELS, default ~/.cache/spindle):\n"
                 "  name, quantization, size and the file -m NAME loads");
            return 0;
        }
        return sp_tool_fail("list: unknown argument '%s'", argv[i]);
    }
    if (!sp_store_root(root, sizeof root))
        return 2;
    if (!sp_store_scan(root, &m, &n)) {
        sp_tool_fail("list: cannot read %s: out of memory", root);
        return 1;
    }
    int w_name = 4, w_quant = 5;
    for (size_t i = 0; i < n; i++) {
        int a = (int)(strlen(m[i].name.org) + 1 + strlen(m[i].name.repo)), b = (int)strlen(m[i].name.quant);
        w_name = a > w_name ? a : w_name;
        w_quant = b > w_quant ? b : w_quant;
    }
    if (n)
        printf("%-*s  %-*s  %10s  %s\n", w_name, "NAME", w_quant, "QUANT", "SIZE", "PATH");
    else
        fprintf(stderr, "spindle: list: no models stored in %s\n", root);
    for (size_t i = 0; i < n; i++) {
        char repo[256], size[32];
        snprintf(repo, sizeof repo, "%s/%s", m[i].name.org, m[i].name.repo);
        sp_tool_bytes(m[i].bytes, size, sizeof size);
        printf("%-*s  %-*s  %10s  %s%s\n", w_name, repo, w_quant, m[i].name.quant, size, m[i].path,
               m[i].complete ? "" : "  (files missing: pull it again)");
    }
    sp_store_models_free(m, n);
    return 0;
}

/* spindle rm NAME: removes one stored model (its folder), named as -m
 * names it; never a path. */
int sp_tool_rm(int argc, char **argv)
{
    char root[4096], name[256], size[32];
    struct sp_store_name q;
    struct sp_store_model *m = NULL;
    size_t n = 0;
    int rc = 2, lock = -1, e;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        puts("usage: spindle rm NAME\n"
             "  removes a stored model: ORG/REPO:QUANT, or any part of it that names one model\n"
             "  (REPO, REPO:QUANT, ORG/REPO)");
        return 0;
    }
    if (argc != 2)
        return sp_tool_fail("rm: give one stored model's name (see spindle rm --help)");
    if (!sp_store_name_parse(argv[1], &q))
        return sp_tool_fail("rm: '%s' is not a model name: [hf.co/][ORG/]REPO[:QUANT]", argv[1]);
    if (!sp_store_root(root, sizeof root))
        return 2;
    if (!sp_store_scan(root, &m, &n)) {
        sp_tool_fail("rm: cannot read %s: out of memory", root);
        return 1;
    }
    const struct sp_store_model *hit = sp_store_find(m, n, &q, "rm", argv[1]);
    if (!hit)
        goto done;
    sp_store_name_format(&hit->name, name, sizeof name);
    sp_tool_bytes(hit->bytes, size, sizeof size);
    rc = 1;
    lock = open(hit->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
        sp_tool_fail("rm: %s: %s", name, lock < 0 ? strerror(errno) : "a spindle pull of it is running");
        goto done;
    }
    if ((e = sp_store_remove_dir(root, hit->dir)) != 0) {
        sp_tool_fail("rm: removing %s: %s", hit->dir, strerror(e));
        goto done;
    }
    fprintf(stderr, "spindle: rm: removed %s (%s, %s)\n", name, size, hit->dir);
    rc = 0;
done:
    if (lock >= 0)
        close(lock);
    sp_store_models_free(m, n);
    return rc;
}
