#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "tools.h"

bool sp_args_is(const struct sp_args *a, const char *name, const char *alias)
{
    const char *s = a->argv[a->i];
    return !strcmp(s, name) || (alias && !strcmp(s, alias));
}

const char *sp_args_value(struct sp_args *a)
{
    if (a->i + 1 >= a->argc) {
        sp_tool_fail("%s needs a value", a->argv[a->i]);
        a->failed = true;
        return NULL;
    }
    return a->argv[++a->i];
}

const char *sp_args_model(struct sp_args *a)
{
    const char *flag = a->argv[a->i], *v = sp_args_value(a);
    const char *path = v ? sp_store_model_path(flag, v) : NULL;
    if (v && !path)
        a->failed = true;
    return path;
}

bool sp_args_cache_type(struct sp_args *a, sp_cache_type *k, sp_cache_type *v)
{
    bool is_k = sp_args_is(a, "--cache-type-k", "-ctk");
    if (!is_k && !sp_args_is(a, "--cache-type-v", "-ctv"))
        return false;
    const char *flag = a->argv[a->i], *val = sp_args_value(a);
    if (val && sp_cache_type_parse(val, is_k ? k : v) != SP_OK) {
        sp_tool_fail("%s: %s", flag, sp_error_message());
        a->failed = true;
    }
    return true;
}

bool sp_args_long(struct sp_args *a, long long lo, long long hi, long long *out)
{
    const char *flag = a->argv[a->i], *v = sp_args_value(a);
    char *end;
    if (!v)
        return false;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        sp_tool_fail("%s: '%s' is not an integer in %lld..%lld", flag, v, lo, hi);
        a->failed = true;
        return false;
    }
    *out = x;
    return true;
}

bool sp_args_int(struct sp_args *a, int lo, int hi, int *out)
{
    long long x;
    if (!sp_args_long(a, lo, hi, &x))
        return false;
    *out = (int)x;
    return true;
}

bool sp_args_u64(struct sp_args *a, uint64_t *out)
{
    const char *flag = a->argv[a->i], *v = sp_args_value(a);
    char *end;
    if (!v)
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') {
        sp_tool_fail("%s: '%s' is not a non-negative integer", flag, v);
        a->failed = true;
        return false;
    }
    *out = x;
    return true;
}

bool sp_args_float(struct sp_args *a, double lo, double hi, float *out)
{
    const char *flag = a->argv[a->i], *v = sp_args_value(a);
    char *end;
    if (!v)
        return false;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || isnan(x) || x < lo || x > hi) {
        sp_tool_fail("%s: '%s' is not a number in %g..%g", flag, v, lo, hi);
        a->failed = true;
        return false;
    }
    *out = (float)x;
    return true;
}

char *sp_read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 1 << 16, n = 0;
    char *buf = NULL;
    if (!f)
        return NULL;
    buf = malloc(cap + 1);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    if (f != stdin)
        fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

void sp_tool_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}
