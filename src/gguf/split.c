/* Split GGUF models: every part mapped and parsed, the tensors of parts
 * 2..N appended to the first part's table.  Part i (0-based) of N is the
 * file PREFIX-%05u-of-%05u.gguf with i + 1 and N, as llama.cpp names them;
 * split.count is a uint16 there, so N <= 65535 here. */
#include "gguf/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define SP_SPLIT_MAX 65535u

/* The split keys of one parsed file; *count 0 when the file is not a
 * part of a split model (split.count absent, 0 or 1). */
struct sp_split_keys {
    uint32_t no, count, n_tensors;
};

static sp_status sp_split_keys_get(const struct sp_gguf *g, const char *path, struct sp_split_keys *k)
{
    sp_status st;
    uint32_t count = 0;
    memset(k, 0, sizeof *k);
    if ((st = sp_gguf_get_u32(g, "split.count", false, &count)) != SP_OK)
        return sp_error_wrap(st, "%s", path);
    if (count <= 1)
        return SP_OK;
    if (count > SP_SPLIT_MAX)
        return sp_error_set(SP_ERR_FORMAT, "%s: key 'split.count': %u parts, at most %u", path, count, SP_SPLIT_MAX);
    if ((st = sp_gguf_get_u32(g, "split.no", true, &k->no)) != SP_OK ||
        (st = sp_gguf_get_u32(g, "split.tensors.count", true, &k->n_tensors)) != SP_OK)
        return sp_error_wrap(st, "%s", path);
    if (k->no >= count)
        return sp_error_set(SP_ERR_FORMAT, "%s: key 'split.no': %u, expected below split.count %u", path, k->no,
                            count);
    k->count = count;
    return SP_OK;
}

/* Maps and parses one file; on failure nothing is held. */
static sp_status sp_split_open_one(struct sp_mapping *map, struct sp_gguf *g, const char *path, unsigned flags)
{
    sp_status st = sp_mapping_init(map, path, flags);
    if (st != SP_OK)
        return st;
    if ((st = sp_gguf_init(g, map->data, map->size)) != SP_OK) {
        sp_error_wrap(st, "%s", path);
        sp_mapping_free(map);
    }
    return st;
}

/* The path of part i of n, given the PREFIX (malloc'd; NULL: no memory). */
static char *sp_split_path(const char *prefix, size_t prefix_len, uint32_t i, uint32_t n)
{
    size_t cap = prefix_len + 32;
    char *p = malloc(cap);
    if (p)
        snprintf(p, cap, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, prefix, i + 1, n);
    return p;
}

/* The length of PREFIX in `path`, the name of part k->no of k->count. */
static sp_status sp_split_prefix(const char *path, const struct sp_split_keys *k, size_t *len)
{
    char suffix[40];
    size_t n = strlen(path);
    int s = snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", k->no + 1, k->count);
    if (s <= 0 || (size_t)s >= n || strcmp(path + n - (size_t)s, suffix) != 0)
        return sp_error_set(SP_ERR_FORMAT,
                            "%s: part %u of a %u-part split model, but its name does not end in %s "
                            "(the parts are found by name, as gguf-split writes them)",
                            path, k->no + 1, k->count, suffix);
    *len = n - (size_t)s;
    return SP_OK;
}

/* Part i of the model `first` opened, checked and appended. */
static sp_status sp_split_add(struct sp_gguf *g, struct sp_gguf_parts *parts, const struct sp_split_keys *first,
                              uint32_t i, unsigned flags)
{
    struct sp_split_keys k;
    const char *path = parts->paths[i];
    sp_status st = sp_split_open_one(&parts->maps[i - 1], &parts->g[i - 1], path, flags);
    if (st != SP_OK)
        return sp_error_wrap(st, "part %u of %u", i + 1, first->count);
    parts->n = i;
    if ((st = sp_split_keys_get(&parts->g[i - 1], path, &k)) != SP_OK)
        return st;
    if (!k.count)
        return sp_error_set(SP_ERR_FORMAT, "%s: no split.count key: not a part of a split model", path);
    if (k.count != first->count || k.n_tensors != first->n_tensors)
        return sp_error_set(SP_ERR_FORMAT,
                            "%s: split.count %u and split.tensors.count %u, expected %u and %u as in %s "
                            "(a part of another model?)",
                            path, k.count, k.n_tensors, first->count, first->n_tensors, parts->paths[0]);
    if (k.no != i)
        return sp_error_set(SP_ERR_FORMAT, "%s: key 'split.no': %u, expected %u (the file's name says part %u)", path,
                            k.no, i, i + 1);
    if ((st = sp_gguf_append(g, &parts->g[i - 1], i)) != SP_OK)
        return sp_error_wrap(st, "%s", path);
    return SP_OK;
}

sp_status sp_gguf_split_open(struct sp_mapping *map, struct sp_gguf *g, struct sp_gguf_parts *parts,
                             const char *path, unsigned map_flags)
{
    struct sp_split_keys k;
    size_t prefix_len = 0;
    sp_status st;
    memset(parts, 0, sizeof *parts);
    if ((st = sp_split_open_one(map, g, path, map_flags)) != SP_OK)
        return st;
    if ((st = sp_split_keys_get(g, path, &k)) != SP_OK)
        goto fail;
    if (!k.count) {
        if (!(parts->paths = calloc(2, sizeof *parts->paths)) || !(parts->paths[0] = strdup(path)))
            goto nomem;
        return SP_OK;
    }
    if ((st = sp_split_prefix(path, &k, &prefix_len)) != SP_OK)
        goto fail;
    parts->maps = calloc(k.count - 1, sizeof *parts->maps);
    parts->g = calloc(k.count - 1, sizeof *parts->g);
    parts->paths = calloc((size_t)k.count + 1, sizeof *parts->paths); /* NULL-terminated */
    if (!parts->maps || !parts->g || !parts->paths)
        goto nomem;
    for (uint32_t i = 0; i < k.count; i++)
        if (!(parts->paths[i] = sp_split_path(path, prefix_len, i, k.count)))
            goto nomem;
    if (k.no != 0) { /* another part named: the model opens from the first */
        uint32_t count = k.count;
        sp_gguf_free(g);
        sp_mapping_free(map);
        if ((st = sp_split_open_one(map, g, parts->paths[0], map_flags)) != SP_OK) {
            sp_error_wrap(st, "part 1 of %u", count);
            goto fail_unmapped;
        }
        if ((st = sp_split_keys_get(g, parts->paths[0], &k)) != SP_OK)
            goto fail;
        if (k.count != count || k.no != 0) {
            st = sp_error_set(SP_ERR_FORMAT, "%s: split.no %u of split.count %u, expected part 1 of %u",
                              parts->paths[0], k.no, k.count, count);
            goto fail;
        }
    }
    for (uint32_t i = 1; i < k.count; i++)
        if ((st = sp_split_add(g, parts, &k, i, map_flags)) != SP_OK)
            goto fail;
    if (g->n_tensors != k.n_tensors) {
        st = sp_error_set(SP_ERR_FORMAT, "%s: key 'split.tensors.count': %u, but the %u parts hold %llu tensors",
                          parts->paths[0], k.n_tensors, k.count, (unsigned long long)g->n_tensors);
        goto fail;
    }
    parts->n = k.count - 1;
    return SP_OK;

nomem:
    st = sp_error_set(SP_ERR_NOMEM, "%s: no memory for the parts of a split model", path);
fail:
    sp_gguf_free(g);
    sp_mapping_free(map);
fail_unmapped:
    sp_gguf_parts_free(parts);
    return st;
}

void sp_gguf_parts_free(struct sp_gguf_parts *parts)
{
    for (uint32_t i = 0; i < parts->n; i++) {
        sp_gguf_free(&parts->g[i]);
        sp_mapping_free(&parts->maps[i]);
    }
    for (uint32_t i = 0; parts->paths && parts->paths[i]; i++)
        free(parts->paths[i]);
    free(parts->maps);
    free(parts->g);
    free(parts->paths);
    memset(parts, 0, sizeof *parts);
}

const struct sp_mapping *sp_gguf_parts_map(const struct sp_gguf_parts *parts, const struct sp_mapping *first,
                                           uint32_t i)
{
    return i == 0 ? first : i <= parts->n ? &parts->maps[i - 1] : NULL;
}
