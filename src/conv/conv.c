/* Conversations: messages, trimming to the context, JSON files (the
 * contracts are in include/spindle.h).  Built on the public API only. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "spindle.h"

#define SP_CONV_MAX_MESSAGES 100000

struct sp_conv {
    struct sp_chat_msg *msgs; /* role and content owned (malloc'd) */
    size_t n, cap;
};

static const char *const sp_conv_roles[] = {"system", "user", "assistant"};

static const char *sp_conv_role(const char *role)
{
    for (size_t i = 0; i < sizeof sp_conv_roles / sizeof sp_conv_roles[0]; i++)
        if (!strcmp(role, sp_conv_roles[i]))
            return sp_conv_roles[i];
    return NULL;
}

sp_status sp_conv_create(struct sp_conv **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? SP_OK : sp_error_set(SP_ERR_NOMEM, "conversation: out of memory");
}

static void sp_conv_drop(struct sp_conv *c, size_t i, size_t k)
{
    if (k == 0)
        return; /* msgs may still be NULL */
    for (size_t j = i; j < i + k; j++)
        free((char *)c->msgs[j].content);
    memmove(c->msgs + i, c->msgs + i + k, (c->n - i - k) * sizeof *c->msgs);
    c->n -= k;
}

void sp_conv_free(struct sp_conv *c)
{
    if (!c)
        return;
    sp_conv_drop(c, 0, c->n);
    free(c->msgs);
    free(c);
}

/* Inserts a copy of content at position i. */
static sp_status sp_conv_insert(struct sp_conv *c, size_t i, const char *role, const char *content)
{
    const char *r = sp_conv_role(role);
    if (!r)
        return sp_error_set(SP_ERR_ARG, "conversation: unknown role '%.40s'", role);
    if (c->n == SP_CONV_MAX_MESSAGES)
        return sp_error_set(SP_ERR_ARG, "conversation: more than %d messages",
                            SP_CONV_MAX_MESSAGES);
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct sp_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m)
            return sp_error_set(SP_ERR_NOMEM, "conversation: out of memory");
        c->msgs = m;
        c->cap = cap;
    }
    char *copy = strdup(content ? content : "");
    if (!copy)
        return sp_error_set(SP_ERR_NOMEM, "conversation: out of memory");
    memmove(c->msgs + i + 1, c->msgs + i, (c->n - i) * sizeof *c->msgs);
    c->msgs[i] = (struct sp_chat_msg){.role = r, .content = copy};
    c->n++;
    return SP_OK;
}

sp_status sp_conv_add(struct sp_conv *c, const char *role, const char *content)
{
    return sp_conv_insert(c, c->n, role, content);
}

sp_status sp_conv_set_system(struct sp_conv *c, const char *text)
{
    bool has = c->n && !strcmp(c->msgs[0].role, "system");
    if (has)
        sp_conv_drop(c, 0, 1);
    return text && text[0] ? sp_conv_insert(c, 0, "system", text) : SP_OK;
}

void sp_conv_pop(struct sp_conv *c)
{
    if (c->n)
        sp_conv_drop(c, c->n - 1, 1);
}

void sp_conv_clear(struct sp_conv *c)
{
    size_t keep = c->n && !strcmp(c->msgs[0].role, "system");
    sp_conv_drop(c, keep, c->n - keep);
}

size_t sp_conv_count(const struct sp_conv *c)
{
    return c->n;
}

const struct sp_chat_msg *sp_conv_messages(const struct sp_conv *c)
{
    return c->msgs;
}

/* The oldest turn: from the first non-system message up to (not including)
 * the next user message.  0 when only the last user turn is left. */
static size_t sp_conv_oldest_turn(const struct sp_conv *c, size_t *start)
{
    size_t i = 0;
    while (i < c->n && !strcmp(c->msgs[i].role, "system"))
        i++;
    size_t j = i + 1;
    while (j < c->n && strcmp(c->msgs[j].role, "user"))
        j++;
    *start = i;
    return j < c->n ? j - i : 0;
}

sp_status sp_conv_prompt(struct sp_conv *c, const sp_model *m, size_t max_tokens, sp_token **out, size_t *n_out,
                         size_t *n_dropped)
{
    *out = NULL;
    *n_out = 0;
    *n_dropped = 0;
    for (;;) {
        sp_status st = sp_model_chat_tokenize(m, c->msgs, c->n, out, n_out);
        if (st != SP_OK || *n_out <= max_tokens)
            return st;
        size_t start, k = sp_conv_oldest_turn(c, &start);
        if (k == 0) {
            size_t n = *n_out;
            free(*out);
            *out = NULL;
            *n_out = 0;
            return sp_error_set(SP_ERR_CONTEXT,
                                "the last message makes a prompt of %zu tokens; at most %zu fit",
                                n, max_tokens);
        }
        free(*out);
        sp_conv_drop(c, start, k);
        *n_dropped += k;
    }
}

sp_status sp_conv_save(const struct sp_conv *c, const char *path)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < c->n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(c->msgs[i].role));
        json_object_set_new(o, "content", json_string(c->msgs[i].content));
        json_array_append_new(arr, o);
    }
    int rc = arr ? json_dump_file(arr, path, JSON_INDENT(2)) : -1;
    json_decref(arr);
    return rc == 0 ? SP_OK : sp_error_set(SP_ERR_IO, "%s: cannot write", path);
}

sp_status sp_conv_load(struct sp_conv *c, const char *path)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sp_error_set(SP_ERR_IO, "%s: %s (line %d)", path, jerr.text, jerr.line);
    json_t *arr = json_is_object(root) ? json_object_get(root, "messages") : root;
    sp_status st = SP_OK;
    struct sp_conv *fresh = NULL;
    if (!json_is_array(arr)) {
        st = sp_error_set(SP_ERR_ARG, "%s: expected an array of messages", path);
        goto free_root;
    }
    if ((st = sp_conv_create(&fresh)) != SP_OK)
        goto free_root;
    for (size_t i = 0; i < json_array_size(arr) && st == SP_OK; i++) {
        json_t *m = json_array_get(arr, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !content)
            st = sp_error_set(SP_ERR_ARG, "%s: message %zu needs a string role and content",
                              path, i);
        else
            st = sp_conv_add(fresh, role, content);
    }
    if (st == SP_OK) {
        struct sp_conv t = *c;
        *c = *fresh;
        *fresh = t;
    }
    sp_conv_free(fresh);
free_root:
    json_decref(root);
    if (st != SP_OK && !strstr(sp_error_message(), path))
        sp_error_wrap(st, "%s", path);
    return st;
}
