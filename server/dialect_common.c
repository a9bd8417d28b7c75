/* What the dialects' translations share (dialect.h): checking a request's
 * fields against the dialect's rules, spindle's extensions, running the
 * translated request through the one parser with the dialect's field
 * names in its errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/dialect.h"

#define SP_API_INVALID "invalid_request_error"

static const char *const sp_extensions[] = {
    "min_p", "typical_p", "repeat_penalty", "repeat_last_n", "seed", "grammar", "json_schema", "max_retries",
    "timeout", "ignore_eos", "cache_prompt", "n_keep", "chat_template_kwargs", "reasoning_format",
};

bool sp_dialect_extension(const char *key)
{
    for (size_t i = 0; i < sizeof sp_extensions / sizeof sp_extensions[0]; i++)
        if (!strcmp(key, sp_extensions[i]))
            return true;
    return false;
}

void sp_dialect_copy_extensions(json_t *dst, const json_t *src)
{
    for (size_t i = 0; i < sizeof sp_extensions / sizeof sp_extensions[0]; i++) {
        json_t *v = json_object_get(src, sp_extensions[i]);
        if (v)
            json_object_set(dst, sp_extensions[i], v);
    }
}

sp_status sp_dialect_check_fields(const json_t *obj, const struct sp_field_rule *rules, size_t n,
                                  const char *prefix, struct sp_api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const struct sp_field_rule *rule = NULL;
        for (size_t i = 0; i < n && !rule; i++)
            if (!strcmp(key, rules[i].name))
                rule = &rules[i];
        char param[96];
        snprintf(param, sizeof param, "%s%.60s", prefix, key);
        if (rule && rule->use == SP_FIELD_UNSUPPORTED && !json_is_null(v))
            return sp_api_fail(err, 400, SP_API_INVALID, "unsupported_parameter", param,
                               "'%s' is not supported by this server.", param);
        if (!rule && !(prefix[0] == '\0' && sp_dialect_extension(key)))
            return sp_api_fail(err, 400, SP_API_INVALID, "unknown_parameter", param,
                               "Unrecognized request argument supplied: %s", param);
    }
    return SP_OK;
}

json_t *sp_dialect_load(const char *body, size_t len, struct sp_api_error *err)
{
    return sp_api_json_load(body, len, JSON_REJECT_DUPLICATES, SP_API_MAX_VALUES, err);
}

/* Replaces every `'from` (a quoted field name, or its start) in s with `'to`. */
static void sp_rename_quoted(char *s, size_t cap, const char *from, const char *to)
{
    char pat[80], out[sizeof ((struct sp_api_error *)0)->message];
    snprintf(pat, sizeof pat, "'%s", from);
    size_t o = 0, np = strlen(pat), nt = strlen(to);
    for (const char *p = s; *p && o + 1 < sizeof out;) {
        char next = p[np];
        if (!strncmp(p, pat, np) && (next == '\'' || next == '.' || next == '[')) {
            if (o + nt + 2 >= sizeof out)
                break;
            out[o++] = '\'';
            memcpy(out + o, to, nt);
            o += nt;
            p += np;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    snprintf(s, cap, "%s", out);
}

sp_status sp_dialect_parse(struct sp_api_request *out, enum sp_api_kind kind, const json_t *oai,
                           const sp_model *model, const struct sp_api_limits *lim, struct sp_api_error *err,
                           const char *const (*map)[2], size_t n_map)
{
    sp_status st = sp_api_request_from_json(out, kind, oai, 0, model, lim, err);
    if (st == SP_OK)
        return st;
    for (size_t i = 0; i < n_map; i++) {
        size_t n = strlen(map[i][0]);
        if (!strncmp(err->param, map[i][0], n) && (!err->param[n] || err->param[n] == '.' || err->param[n] == '[')) {
            char rest[64];
            snprintf(rest, sizeof rest, "%s", err->param + n);
            snprintf(err->param, sizeof err->param, "%s%s", map[i][1], rest);
        }
        sp_rename_quoted(err->message, sizeof err->message, map[i][0], map[i][1]);
    }
    return st;
}

const char *sp_dialect_string(const json_t *obj, const char *key, const char *param, bool *bad,
                              struct sp_api_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_string(v)) {
        *bad = true;
        sp_api_fail(err, 400, SP_API_INVALID, "invalid_type", param, "Invalid type for '%s': expected a string.",
                    param);
        return NULL;
    }
    return json_string_value(v);
}

void sp_dialect_time(char *buf, size_t cap)
{
    sp_dialect_time_in(buf, cap, 0);
}

void sp_dialect_time_in(char *buf, size_t cap, double seconds)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (seconds > 0 && seconds < 1e10) {
        double ns = (double)ts.tv_nsec + (seconds - floor(seconds)) * 1e9;
        ts.tv_sec += (time_t)floor(seconds) + (time_t)(ns / 1e9);
        ts.tv_nsec = (long)fmod(ns, 1e9);
    }
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%09ldZ", day, (long)ts.tv_nsec);
}

json_t *sp_dialect_args(const char *text)
{
    json_error_t jerr;
    json_t *o = text ? json_loads(text, 0, &jerr) : NULL;
    if (json_is_object(o))
        return o;
    json_decref(o);
    return json_object();
}
