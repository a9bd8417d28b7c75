/* A JSON Schema of any draft (draft-4 .. 2020-12) -> the internal form the
 * compiler (grammar_schema.c) and the validator (validate.c) read.
 *
 * The draft is the root's `$schema` (draft-4, -6, -7, 2019-09, 2020-12);
 * without one, or with one not named here, every draft's vocabulary is in
 * effect.  A keyword is a validation keyword when the table below lists it
 * for the draft; every other key (annotations such as title, description,
 * examples, default, readOnly, deprecated, x-* extensions, and anything
 * unknown) is dropped, as JSON Schema says unknown keywords are.
 *
 * The internal form is 2020-12's: `items` as an array becomes
 * `prefixItems` (then `additionalItems` is `items`), draft-4's boolean
 * `exclusiveMinimum`/`exclusiveMaximum` become numbers, `dependencies`
 * splits into `dependentRequired` and `dependentSchemas`, unknown formats
 * are dropped, and in draft-4..7 the siblings of `$ref` are dropped.  The
 * values of the keywords kept are checked here (types, non-negative
 * counts, patterns that compile), so the compiler and the validator read
 * them without checks.
 *
 * References: "#" and JSON pointers ("#/$defs/a", with ~0 ~1 and %XX
 * escapes), anchors ("#name": $anchor, $dynamicAnchor, or draft-4..7 ids
 * "#name"), the root's `$id` before the fragment, and the `$id` of an
 * embedded resource.  `$recursiveRef` and `$dynamicRef` are references too
 * when the document is one resource (no embedded `$id`): the dynamic scope
 * is then the static one.  Anything else (remote documents) is refused.
 * Every target is resolved and converted here, so the nodes of the
 * internal form are shared (a recursive schema is a cycle through the
 * reference map, never through the JSON). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/schema_internal.h"

#define MAX_NEST 128
#define MAX_NODES (1u << 20)

enum {
    D4 = 1, D6 = 2, D7 = 4, D19 = 8, D20 = 16,
    D6P = D6 | D7 | D19 | D20, D7P = D7 | D19 | D20, D19P = D19 | D20, ALL = 31,
};

/* How a keyword's value is read. */
enum vk {
    V_COPY,        /* any JSON value, kept as is (enum's array checked) */
    V_TYPE,        /* a type name or a non-empty array of them */
    V_NUMBER,
    V_POSITIVE,    /* multipleOf */
    V_COUNT,       /* a non-negative integer */
    V_BOOL,
    V_PATTERN,     /* a regular expression that compiles */
    V_FORMAT,      /* a string; unknown formats are dropped */
    V_STRINGS,     /* an array of strings (required) */
    V_SCHEMA,
    V_SCHEMA_MAP,  /* an object of schemas (properties, $defs) */
    V_PATTERN_MAP, /* patternProperties: keys are patterns */
    V_SCHEMA_LIST, /* a non-empty array of schemas */
    V_ITEMS,       /* a schema, or (before 2020-12) an array of them */
    V_ADD_ITEMS,   /* read with items */
    V_EXCLUSIVE,   /* a number, or draft-4's boolean */
    V_DEPENDENCIES,
    V_DEP_REQUIRED,
    V_REF,
    V_DYN_REF,
};

static const struct kw {
    const char *name;
    uint8_t drafts;
    uint8_t vk;
} kws[] = {
    {"$ref", ALL, V_REF},
    {"$recursiveRef", D19, V_DYN_REF},
    {"$dynamicRef", D20, V_DYN_REF},
    {"type", ALL, V_TYPE},
    {"enum", ALL, V_COPY},
    {"const", D6P, V_COPY},
    {"multipleOf", ALL, V_POSITIVE},
    {"maximum", ALL, V_NUMBER},
    {"minimum", ALL, V_NUMBER},
    {"exclusiveMaximum", ALL, V_EXCLUSIVE},
    {"exclusiveMinimum", ALL, V_EXCLUSIVE},
    {"maxLength", ALL, V_COUNT},
    {"minLength", ALL, V_COUNT},
    {"pattern", ALL, V_PATTERN},
    {"format", ALL, V_FORMAT},
    {"items", ALL, V_ITEMS},
    {"additionalItems", D4 | D6 | D7 | D19, V_ADD_ITEMS},
    {"prefixItems", D20, V_SCHEMA_LIST},
    {"maxItems", ALL, V_COUNT},
    {"minItems", ALL, V_COUNT},
    {"uniqueItems", ALL, V_BOOL},
    {"contains", D6P, V_SCHEMA},
    {"maxContains", D19P, V_COUNT},
    {"minContains", D19P, V_COUNT},
    {"unevaluatedItems", D19P, V_SCHEMA},
    {"maxProperties", ALL, V_COUNT},
    {"minProperties", ALL, V_COUNT},
    {"required", ALL, V_STRINGS},
    {"properties", ALL, V_SCHEMA_MAP},
    {"patternProperties", ALL, V_PATTERN_MAP},
    {"additionalProperties", ALL, V_SCHEMA},
    {"propertyNames", D6P, V_SCHEMA},
    {"unevaluatedProperties", D19P, V_SCHEMA},
    {"dependencies", D4 | D6 | D7, V_DEPENDENCIES},
    {"dependentRequired", D19P, V_DEP_REQUIRED},
    {"dependentSchemas", D19P, V_SCHEMA_MAP},
    {"allOf", ALL, V_SCHEMA_LIST},
    {"anyOf", ALL, V_SCHEMA_LIST},
    {"oneOf", ALL, V_SCHEMA_LIST},
    {"not", ALL, V_SCHEMA},
    {"if", D7P, V_SCHEMA},
    {"then", D7P, V_SCHEMA},
    {"else", D7P, V_SCHEMA},
};

static const struct {
    const char *uri; /* after "http(s)://", before an optional '#' */
    uint8_t draft;
} drafts[] = {
    {"json-schema.org/draft-04/schema", D4},
    {"json-schema.org/draft-06/schema", D6},
    {"json-schema.org/draft-07/schema", D7},
    {"json-schema.org/draft/2019-09/schema", D19},
    {"json-schema.org/draft/2020-12/schema", D20},
};

/* ---- a pointer -> pointer map ---- */

struct pmap {
    const void **key;
    const void **val;
    size_t cap, n;
};

static size_t pmap_slot(const struct pmap *m, const void *k)
{
    size_t i = (size_t)(sp_schema_hash((uintptr_t)k)) & (m->cap - 1);
    while (m->key[i] && m->key[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static const void *pmap_get(const struct pmap *m, const void *k)
{
    return m->cap ? m->val[pmap_slot(m, k)] : NULL;
}

static bool pmap_put(struct pmap *m, const void *k, const void *v)
{
    if (2 * (m->n + 1) > m->cap) {
        struct pmap g = {0};
        g.cap = m->cap ? m->cap * 2 : 64;
        g.key = calloc(g.cap, sizeof *g.key);
        g.val = calloc(g.cap, sizeof *g.val);
        if (!g.key || !g.val) {
            free(g.key);
            free(g.val);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->key[i]) {
                size_t j = pmap_slot(&g, m->key[i]);
                g.key[j] = m->key[i];
                g.val[j] = m->val[i];
                g.n++;
            }
        free(m->key);
        free(m->val);
        *m = g;
    }
    size_t i = pmap_slot(m, k);
    m->n += !m->key[i];
    m->key[i] = k;
    m->val[i] = v;
    return true;
}

static void pmap_free(struct pmap *m)
{
    free(m->key);
    free(m->val);
}

/* ---- the schema ---- */

struct sp_schema {
    json_t *orig;          /* the text as parsed */
    json_t *owned;         /* every node made here */
    const json_t *root;    /* internal form of orig */
    uint8_t draft;
    bool one_resource;     /* no embedded $id */
    const char *root_id;   /* the root's $id without its fragment, or NULL */
    size_t root_id_len;
    struct pmap conv;      /* orig node -> internal node */
    struct pmap refs;      /* internal node holding $ref -> internal target */
    struct sp_jpath path;
    uint32_t n_nodes;
    int depth;
    bool failed;
    sp_status st;          /* of the failure */
};

static void fail(struct sp_schema *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct sp_schema *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->st = sp_error_set(SP_ERR_ARG, "json schema: %s at %s", msg, s->path.s);
    s->failed = true;
}

static void nomem(struct sp_schema *s)
{
    if (!s->failed)
        s->st = sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
    s->failed = true;
}

/* A node made here: kept alive by s->owned. */
static json_t *own(struct sp_schema *s, json_t *x)
{
    if (!x || json_array_append_new(s->owned, x)) {
        nomem(s);
        return NULL;
    }
    return x;
}

static const struct kw *find_kw(const char *k)
{
    for (size_t i = 0; i < sizeof kws / sizeof kws[0]; i++)
        if (!strcmp(kws[i].name, k))
            return &kws[i];
    return NULL;
}

bool sp_schema_is_keyword(const char *k) { return find_kw(k) != NULL; }

static uint8_t draft_of(const json_t *root)
{
    const json_t *v = json_is_object(root) ? json_object_get(root, "$schema") : NULL;
    const char *u = json_string_value(v);
    if (!u)
        return ALL;
    if (!strncmp(u, "https://", 8))
        u += 8;
    else if (!strncmp(u, "http://", 7))
        u += 7;
    for (size_t i = 0; i < sizeof drafts / sizeof drafts[0]; i++) {
        size_t n = strlen(drafts[i].uri);
        if (!strncmp(u, drafts[i].uri, n) && (!u[n] || !strcmp(u + n, "#")))
            return drafts[i].draft;
    }
    return ALL;
}

static bool too_old(const json_t *root)
{
    const json_t *v = json_is_object(root) ? json_object_get(root, "$schema") : NULL;
    const char *u = json_string_value(v);
    return u && (strstr(u, "json-schema.org/draft-03/") || strstr(u, "json-schema.org/draft-02/") ||
                 strstr(u, "json-schema.org/draft-01/") || strstr(u, "json-schema.org/schema#draft-0"));
}

/* ---- references ---- */

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                                                        : -1;
}

/* The node a JSON pointer (after '#', URI-escaped) names inside `at`. */
static const json_t *walk_pointer(const json_t *at, const char *p)
{
    while (*p == '/' && at) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            int c = (unsigned char)*p++;
            if (c == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
                c = hexval(p[0]) * 16 + hexval(p[1]);
                p += 2;
            }
            if (n >= sizeof tok - 1)
                return NULL;
            tok[n++] = (char)c;
        }
        tok[n] = '\0';
        size_t k = 0; /* ~0 and ~1 after percent-decoding */
        for (size_t i = 0; i < n; i++) {
            if (tok[i] == '~' && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
                tok[k++] = tok[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[k++] = tok[i];
            }
        }
        tok[k] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, tok);
        } else if (json_is_array(at)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            at = *end || !*tok || idx < 0 ? NULL : json_array_get(at, (size_t)idx);
        } else {
            at = NULL;
        }
    }
    return *p ? NULL : at;
}

/* A subschema of `at` (depth-first) with the anchor `name`, or whose $id
 * (id in draft-4: old_id) is `id` when id is given. */
static const json_t *find_node(const json_t *at, const char *name, const char *id, bool old_id, int depth)
{
    if (depth > MAX_NEST)
        return NULL;
    if (json_is_object(at)) {
        if (id) {
            const json_t *v = json_object_get(at, "$id");
            if (!v && old_id)
                v = json_object_get(at, "id");
            if (json_is_string(v) && !strcmp(json_string_value(v), id))
                return at;
        } else {
            static const char *const keys[] = {"$anchor", "$dynamicAnchor"};
            for (int i = 0; i < 2; i++)
                if (json_is_string(json_object_get(at, keys[i])) &&
                    !strcmp(json_string_value(json_object_get(at, keys[i])), name))
                    return at;
            for (int i = 0; i < 1 + old_id; i++) { /* draft-4..7: "$id": "#name" (draft-4: "id") */
                const json_t *v = json_object_get(at, i ? "id" : "$id");
                if (json_is_string(v) && json_string_value(v)[0] == '#' && !strcmp(json_string_value(v) + 1, name))
                    return at;
            }
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)at, k, v) {
            if (!strcmp(k, "enum") || !strcmp(k, "const"))
                continue; /* values, not schemas */
            const json_t *r = find_node(v, name, id, old_id, depth + 1);
            if (r)
                return r;
        }
    } else if (json_is_array(at)) {
        size_t i;
        json_t *v;
        json_array_foreach((json_t *)at, i, v) {
            const json_t *r = find_node(v, name, id, old_id, depth + 1);
            if (r)
                return r;
        }
    }
    return NULL;
}

/* Does any subschema below the root have an $id (another resource; `id`
 * in draft-4: old_id)? */
static bool has_embedded_id(const json_t *at, bool old_id, int depth)
{
    if (depth > MAX_NEST)
        return true;
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(at)) {
        json_object_foreach((json_t *)at, k, v) {
            if (!strcmp(k, "enum") || !strcmp(k, "const"))
                continue;
            if (depth > 0 && (!strcmp(k, "$id") || (old_id && !strcmp(k, "id"))) && json_is_string(v) &&
                json_string_value(v)[0] != '#')
                return true;
            if (has_embedded_id(v, old_id, depth + 1))
                return true;
        }
    } else if (json_is_array(at)) {
        json_array_foreach((json_t *)at, i, v) if (has_embedded_id(v, old_id, depth + 1)) return true;
    }
    return false;
}

/* The original node a reference names, or NULL (failure set). */
static const json_t *resolve_orig(struct sp_schema *s, const char *ref)
{
    const char *hash = strchr(ref, '#');
    size_t base_len = hash ? (size_t)(hash - ref) : strlen(ref);
    const char *frag = hash ? hash + 1 : "";
    const json_t *at = s->orig;
    if (base_len) {
        if (s->root_id && base_len == s->root_id_len && !strncmp(ref, s->root_id, base_len)) {
            at = s->orig;
        } else {
            char id[512];
            if (base_len >= sizeof id) {
                fail(s, "$ref '%.80s' is not in this schema (remote references are not fetched)", ref);
                return NULL;
            }
            memcpy(id, ref, base_len);
            id[base_len] = '\0';
            at = find_node(s->orig, NULL, id, s->draft & D4, 0);
            if (!at) {
                fail(s, "$ref '%.80s' is not in this schema (remote references are not fetched)", ref);
                return NULL;
            }
        }
    }
    const json_t *t;
    if (!*frag || *frag == '/')
        t = walk_pointer(at, frag);
    else
        t = find_node(at, frag, NULL, s->draft & D4, 0);
    if (!t)
        fail(s, "$ref '%.80s' points at nothing", ref);
    return t;
}

/* ---- conversion ---- */

static const json_t *convert(struct sp_schema *s, const json_t *x);

static bool set(struct sp_schema *s, json_t *out, const char *k, json_t *v)
{
    if (!v)
        return false;
    if (json_object_set_new(out, k, v)) {
        nomem(s);
        return false;
    }
    return true;
}

/* A converted subschema as a new reference for `out` (or NULL). */
static json_t *sub(struct sp_schema *s, const json_t *x, const char *fmt, const char *arg)
{
    size_t old = sp_jpath_push(&s->path, fmt, arg);
    const json_t *c = convert(s, x);
    sp_jpath_pop(&s->path, old);
    return c ? json_incref((json_t *)c) : NULL;
}

static json_t *sub_list(struct sp_schema *s, const json_t *v, const char *k, bool nonempty)
{
    if (!json_is_array(v) || (nonempty && !json_array_size(v))) {
        fail(s, "'%s' must be a%s array of schemas", k, nonempty ? " non-empty" : "n");
        return NULL;
    }
    json_t *a = json_array();
    if (!a) {
        nomem(s);
        return NULL;
    }
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        char step[32];
        snprintf(step, sizeof step, "[%zu]", i);
        size_t old = sp_jpath_push(&s->path, ".%s%s", k, step);
        const json_t *c = convert(s, x);
        sp_jpath_pop(&s->path, old);
        if (!c || json_array_append(a, (json_t *)c)) {
            if (c)
                nomem(s);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *sub_map(struct sp_schema *s, const json_t *v, const char *k, bool patterns)
{
    if (!json_is_object(v)) {
        fail(s, "'%s' must be an object of schemas", k);
        return NULL;
    }
    json_t *m = json_object();
    if (!m) {
        nomem(s);
        return NULL;
    }
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)v, pk, pv) {
        size_t old = sp_jpath_push(&s->path, ".%s.%.80s", k, pk);
        if (patterns && !sp_schema_pattern_ok(pk)) {
            fail(s, "'%.60s' is not a valid regular expression", pk);
            sp_jpath_pop(&s->path, old);
            json_decref(m);
            return NULL;
        }
        const json_t *c = convert(s, pv);
        sp_jpath_pop(&s->path, old);
        if (!c || json_object_set(m, pk, (json_t *)c)) {
            if (c)
                nomem(s);
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

static bool is_type_name(const char *t)
{
    static const char *const names[] = {"string", "number", "integer", "boolean", "null", "object", "array"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(t, names[i]))
            return true;
    return false;
}

static bool check_type(struct sp_schema *s, const json_t *v)
{
    if (json_is_string(v)) {
        if (!is_type_name(json_string_value(v))) {
            fail(s, "unknown type '%.40s'", json_string_value(v));
            return false;
        }
        return true;
    }
    if (!json_is_array(v)) {
        fail(s, "'type' must be a string or an array of strings");
        return false;
    }
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        if (!json_is_string(t)) {
            fail(s, "'type' must hold strings");
            return false;
        }
        if (!is_type_name(json_string_value(t))) {
            fail(s, "unknown type '%.40s'", json_string_value(t));
            return false;
        }
    }
    return true;
}

static bool check_strings(struct sp_schema *s, const json_t *v, const char *k)
{
    size_t i;
    json_t *x;
    if (!json_is_array(v)) {
        fail(s, "'%s' must be an array of strings", k);
        return false;
    }
    json_array_foreach(v, i, x) if (!json_is_string(x)) {
        fail(s, "'%s' must be an array of strings", k);
        return false;
    }
    return true;
}

/* A reference: checked and converted now, recorded for sp_schema_target. */
static bool add_ref(struct sp_schema *s, json_t *out, const char *k, const json_t *v)
{
    if (!json_is_string(v)) {
        fail(s, "'%s' must be a string", k);
        return false;
    }
    const char *ref = json_string_value(v);
    if (strcmp(k, "$ref")) { /* $recursiveRef, $dynamicRef */
        if (!s->one_resource) {
            fail(s, "'%s' in a schema with embedded resources ($id below the root) is not supported", k);
            return false;
        }
        if (!strcmp(k, "$recursiveRef") && strcmp(ref, "#")) {
            fail(s, "'$recursiveRef' must be \"#\"");
            return false;
        }
    }
    size_t old = sp_jpath_push(&s->path, " (%s %.80s)", k, ref);
    const json_t *t = resolve_orig(s, ref);
    const json_t *c = t ? convert(s, t) : NULL;
    sp_jpath_pop(&s->path, old);
    if (!c)
        return false;
    if (!pmap_put(&s->refs, out, c)) {
        nomem(s);
        return false;
    }
    return set(s, out, "$ref", json_string(ref));
}

/* exclusiveMinimum/exclusiveMaximum: draft-4's boolean form becomes the
 * number form (the minimum/maximum beside it goes). */
static bool add_exclusive(struct sp_schema *s, json_t *out, const json_t *x, const char *k, const json_t *v)
{
    bool lo = !strcmp(k, "exclusiveMinimum");
    const char *plain = lo ? "minimum" : "maximum";
    if (json_is_number(v))
        return set(s, out, k, json_incref((json_t *)v));
    if (!json_is_boolean(v)) {
        fail(s, "'%s' must be a number (or, in draft-4, a boolean)", k);
        return false;
    }
    const json_t *b = json_object_get(x, plain);
    if (json_is_false(v) || !b)
        return true;
    if (!json_is_number(b)) {
        fail(s, "'%s' must be a number", plain);
        return false;
    }
    json_object_del(out, plain);
    return set(s, out, k, json_incref((json_t *)b));
}

static bool add_items(struct sp_schema *s, json_t *out, const json_t *x, const json_t *v)
{
    if (!json_is_array(v))
        return set(s, out, "items", sub(s, v, ".%s", "items"));
    if (s->draft == D20) {
        fail(s, "'items' must be a schema in draft 2020-12 (prefixItems holds the tuple)");
        return false;
    }
    if (!set(s, out, "prefixItems", sub_list(s, v, "items", false)))
        return false;
    const json_t *add = json_object_get(x, "additionalItems");
    if (add && (s->draft & (D4 | D6 | D7 | D19)))
        return set(s, out, "items", sub(s, add, ".%s", "additionalItems"));
    return true;
}

static bool add_dependencies(struct sp_schema *s, json_t *out, const char *k, const json_t *v)
{
    if (!json_is_object(v)) {
        fail(s, "'%s' must be an object", k);
        return false;
    }
    bool schemas = !strcmp(k, "dependencies") || !strcmp(k, "dependentSchemas");
    bool names = !strcmp(k, "dependencies") || !strcmp(k, "dependentRequired");
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)v, pk, pv) {
        const char *dst;
        json_t *val;
        size_t old = sp_jpath_push(&s->path, ".%s.%.80s", k, pk);
        if (names && json_is_array(pv)) {
            dst = "dependentRequired";
            val = check_strings(s, pv, k) ? json_incref(pv) : NULL;
        } else if (schemas && (json_is_object(pv) || json_is_boolean(pv))) {
            dst = "dependentSchemas";
            const json_t *c = convert(s, pv);
            val = c ? json_incref((json_t *)c) : NULL;
        } else {
            fail(s, "'%s' values must be %s", k, schemas && names ? "arrays of names or schemas"
                                                 : names        ? "arrays of names"
                                                                : "schemas");
            val = NULL;
            dst = NULL;
        }
        sp_jpath_pop(&s->path, old);
        if (!val)
            return false;
        json_t *m = json_object_get(out, dst);
        if (!m && !set(s, out, dst, json_object()))
            return false;
        m = json_object_get(out, dst);
        if (json_object_set_new(m, pk, val)) {
            nomem(s);
            return false;
        }
    }
    return true;
}

static bool add_keyword(struct sp_schema *s, json_t *out, const json_t *x, const char *k, const json_t *v,
                        const struct kw *kw)
{
    switch (kw->vk) {
    case V_COPY:
        if (!strcmp(k, "enum") && !json_is_array(v)) {
            fail(s, "'enum' must be an array");
            return false;
        }
        return set(s, out, k, json_incref((json_t *)v));
    case V_TYPE:
        return check_type(s, v) && set(s, out, k, json_incref((json_t *)v));
    case V_NUMBER:
    case V_POSITIVE:
        if (!json_is_number(v) || (kw->vk == V_POSITIVE && !(json_number_value(v) > 0))) {
            fail(s, "'%s' must be a %snumber", k, kw->vk == V_POSITIVE ? "positive " : "");
            return false;
        }
        return set(s, out, k, json_incref((json_t *)v));
    case V_COUNT:
        /* 1.0 is a non-negative integer to JSON Schema */
        if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 9e15 &&
            json_real_value(v) == (double)(json_int_t)json_real_value(v))
            return set(s, out, k, json_integer((json_int_t)json_real_value(v)));
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            fail(s, "'%s' must be a non-negative integer", k);
            return false;
        }
        return set(s, out, k, json_incref((json_t *)v));
    case V_BOOL:
        if (!json_is_boolean(v)) {
            fail(s, "'%s' must be a boolean", k);
            return false;
        }
        return set(s, out, k, json_incref((json_t *)v));
    case V_PATTERN:
        if (!json_is_string(v)) {
            fail(s, "'%s' must be a string", k);
            return false;
        }
        if (!sp_schema_pattern_ok(json_string_value(v))) {
            fail(s, "'pattern' '%.60s' is not a valid regular expression", json_string_value(v));
            return false;
        }
        return set(s, out, k, json_incref((json_t *)v));
    case V_FORMAT:
        if (!json_is_string(v)) {
            fail(s, "'format' must be a string");
            return false;
        }
        return !sp_schema_format_known(json_string_value(v)) || set(s, out, k, json_incref((json_t *)v));
    case V_STRINGS:
        return check_strings(s, v, k) && set(s, out, k, json_incref((json_t *)v));
    case V_SCHEMA:
        return set(s, out, k, sub(s, v, ".%s", k));
    case V_SCHEMA_MAP:
        return set(s, out, k, sub_map(s, v, k, false));
    case V_PATTERN_MAP:
        return set(s, out, k, sub_map(s, v, k, true));
    case V_SCHEMA_LIST:
        return set(s, out, k, sub_list(s, v, k, strcmp(k, "prefixItems") != 0));
    case V_ITEMS:
        return add_items(s, out, x, v);
    case V_ADD_ITEMS:
        return true; /* with items; alone it means nothing */
    case V_EXCLUSIVE:
        return add_exclusive(s, out, x, k, v);
    case V_DEPENDENCIES:
    case V_DEP_REQUIRED:
        return add_dependencies(s, out, k, v);
    case V_REF:
    case V_DYN_REF:
        return add_ref(s, out, k, v);
    }
    return true;
}

static const json_t *convert(struct sp_schema *s, const json_t *x)
{
    if (s->failed)
        return NULL;
    if (json_is_boolean(x))
        return x;
    if (!json_is_object(x)) {
        fail(s, "a schema must be an object or a boolean");
        return NULL;
    }
    const json_t *done = pmap_get(&s->conv, x);
    if (done)
        return done;
    if (++s->n_nodes > MAX_NODES) {
        fail(s, "more than %u schemas", MAX_NODES);
        return NULL;
    }
    if (s->depth >= MAX_NEST) {
        fail(s, "schema nested deeper than %d", MAX_NEST);
        return NULL;
    }
    json_t *out = own(s, json_object());
    if (!out || !pmap_put(&s->conv, x, out)) {
        nomem(s);
        return NULL;
    }
    s->depth++;
    /* draft-4..7: a $ref's siblings are ignored */
    bool ref_only = json_object_get(x, "$ref") && !(s->draft & D19P);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)x, k, v) {
        const struct kw *kw = find_kw(k);
        if (!kw || !(kw->drafts & s->draft) || (ref_only && strcmp(k, "$ref")))
            continue;
        if (!add_keyword(s, out, x, k, v, kw))
            break;
    }
    s->depth--;
    return s->failed ? NULL : out;
}

sp_status sp_schema_load(const char *text, size_t len, struct sp_schema **out)
{
    json_error_t jerr;
    *out = NULL;
    struct sp_schema *s = calloc(1, sizeof *s);
    if (!s)
        return sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
    sp_jpath_init(&s->path);
    s->orig = json_loadb(text ? text : "", text ? len : 0, JSON_REJECT_DUPLICATES, &jerr);
    if (!s->orig) {
        sp_error_set(SP_ERR_ARG, "json schema: not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                     jerr.column);
        sp_schema_free(s);
        return SP_ERR_ARG;
    }
    if (!(s->owned = json_array())) {
        sp_schema_free(s);
        return sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
    }
    s->draft = draft_of(s->orig);
    if (too_old(s->orig))
        fail(s, "draft-03 and older schemas are not supported ($schema names one)");
    const json_t *id = json_is_object(s->orig) ? json_object_get(s->orig, "$id") : NULL;
    if (!id && json_is_object(s->orig) && (s->draft & D4))
        id = json_object_get(s->orig, "id");
    if (json_is_string(id) && json_string_value(id)[0] != '#') {
        s->root_id = json_string_value(id);
        const char *h = strchr(s->root_id, '#');
        s->root_id_len = h ? (size_t)(h - s->root_id) : strlen(s->root_id);
    }
    s->one_resource = !has_embedded_id(s->orig, s->draft & D4, 0);
    s->root = convert(s, s->orig);
    if (s->failed) {
        sp_status st = s->st;
        sp_schema_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

const json_t *sp_schema_root(const struct sp_schema *s) { return s->root; }

const json_t *sp_schema_target(const struct sp_schema *s, const json_t *node)
{
    return pmap_get(&s->refs, node);
}

void sp_schema_free(struct sp_schema *s)
{
    if (!s)
        return;
    pmap_free(&s->conv);
    pmap_free(&s->refs);
    json_decref(s->owned);
    json_decref(s->orig);
    free(s);
}

bool sp_schema_pattern_ok(const char *pat)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    pcre2_code_free(re);
    return re != NULL;
}
