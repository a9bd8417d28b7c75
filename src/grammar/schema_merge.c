/* allOf (and a $ref beside other keywords, and if/then branches) made one
 * schema for the grammar: the intersection where a keyword allows it
 * (bounds tighten, types and enums intersect, required lists unite,
 * properties and items merge), and otherwise one of the parts' values.
 * The result only steers generation: the validator checks every output
 * against the schema itself, so a part that could not be merged exactly
 * (a second pattern, two `not`s, two `contains`) is still enforced there.
 * Nodes are in the internal form (schema_norm.c); a $ref is replaced by
 * its target's keywords, once per chain (a recursive one stays behind as
 * the validator's). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/schema_internal.h"

#define MAX_MERGE 64

struct mg {
    const struct sp_schema *sch;
    json_t *owned;
    const json_t *stack[MAX_MERGE]; /* nodes being merged: a $ref back to one is not followed */
    int depth;
    const char *empty;              /* why the intersection is empty, or NULL */
    bool nomem;
};

static bool merge_into(struct mg *m, json_t *dst, const json_t *src);

static json_t *own(struct mg *m, json_t *x)
{
    if (!x || json_array_append_new(m->owned, x)) {
        m->nomem = true;
        return NULL;
    }
    return x;
}

/* The merge of two schemas as a new node (or one of them when the other
 * is true). */
static const json_t *merge_two(struct mg *m, const json_t *a, const json_t *b)
{
    if (json_is_true(a) || json_equal((json_t *)a, (json_t *)b))
        return b;
    if (json_is_true(b))
        return a;
    if (json_is_false(a) || json_is_false(b))
        return json_false();
    json_t *x = own(m, json_object());
    if (!x || !merge_into(m, x, a) || !merge_into(m, x, b))
        return a;
    return x;
}

static bool has_type(const json_t *types, const char *t)
{
    if (json_is_string(types))
        return !strcmp(json_string_value(types), t);
    size_t i;
    json_t *v;
    json_array_foreach(types, i, v) if (!strcmp(json_string_value(v), t)) return true;
    return false;
}

/* Types in both (integer is a number). */
static json_t *type_meet(struct mg *m, const json_t *a, const json_t *b)
{
    static const char *const all[] = {"string", "number", "integer", "boolean", "null", "object", "array"};
    json_t *out = json_array();
    if (!out) {
        m->nomem = true;
        return NULL;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *t = all[i];
        bool in_a = has_type(a, t) || (!strcmp(t, "integer") && has_type(a, "number"));
        bool in_b = has_type(b, t) || (!strcmp(t, "integer") && has_type(b, "number"));
        if (in_a && in_b && !(!strcmp(t, "integer") && json_array_size(out) &&
                              has_type(out, "number")))
            json_array_append_new(out, json_string(t));
    }
    if (!json_array_size(out)) {
        m->empty = "allOf parts allow no common type";
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *enum_meet(struct mg *m, const json_t *a, const json_t *b)
{
    json_t *out = json_array();
    size_t i, j;
    json_t *x, *y;
    if (!out) {
        m->nomem = true;
        return NULL;
    }
    json_array_foreach(a, i, x) json_array_foreach(b, j, y) if (json_equal(x, y)) {
        json_array_append(out, x);
        break;
    }
    if (!json_array_size(out)) {
        m->empty = "allOf parts allow no common enum value";
        json_decref(out);
        return NULL;
    }
    return out;
}

static bool is_lower(const char *k)
{
    return !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "minLength") ||
           !strcmp(k, "minItems") || !strcmp(k, "minProperties") || !strcmp(k, "minContains");
}

static bool is_upper(const char *k)
{
    return !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum") || !strcmp(k, "maxLength") ||
           !strcmp(k, "maxItems") || !strcmp(k, "maxProperties") || !strcmp(k, "maxContains");
}

/* Keywords whose value is one schema that every value must satisfy. */
static bool is_schema_key(const char *k)
{
    return !strcmp(k, "items") || !strcmp(k, "additionalProperties") || !strcmp(k, "propertyNames") ||
           !strcmp(k, "unevaluatedProperties") || !strcmp(k, "unevaluatedItems");
}

static bool merge_map(struct mg *m, json_t *dst, const char *k, const json_t *have, const json_t *v)
{
    json_t *out = own(m, json_object());
    if (!out || json_object_update(out, (json_t *)have))
        return false;
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)v, pk, pv) {
        json_t *old = json_object_get(out, pk);
        const json_t *nv = old ? merge_two(m, old, pv) : pv;
        if (json_object_set(out, pk, (json_t *)nv))
            return false;
    }
    return json_object_set(dst, k, out) == 0;
}

static bool merge_key(struct mg *m, json_t *dst, const char *k, const json_t *v)
{
    json_t *have = json_object_get(dst, k);
    if (!have || json_equal(have, (json_t *)v))
        return json_object_set(dst, k, (json_t *)v) == 0;
    if (!strcmp(k, "required")) {
        json_t *u = own(m, json_copy(have));
        size_t i, j;
        json_t *x, *y;
        if (!u)
            return false;
        json_array_foreach(v, i, x) {
            bool dup = false;
            json_array_foreach(u, j, y) dup |= json_equal(x, y);
            if (!dup)
                json_array_append(u, x);
        }
        return json_object_set(dst, k, u) == 0;
    }
    if (!strcmp(k, "properties") || !strcmp(k, "patternProperties") || !strcmp(k, "dependentRequired") ||
        !strcmp(k, "dependentSchemas"))
        return merge_map(m, dst, k, have, v);
    if (is_schema_key(k))
        return json_object_set(dst, k, (json_t *)merge_two(m, have, v)) == 0;
    if (!strcmp(k, "prefixItems")) {
        json_t *u = own(m, json_array());
        size_t n = json_array_size(have) > json_array_size(v) ? json_array_size(have) : json_array_size(v);
        for (size_t i = 0; u && i < n; i++) {
            const json_t *a = json_array_get(have, i), *b = json_array_get(v, i);
            json_array_append(u, (json_t *)(a && b ? merge_two(m, a, b) : a ? a : b));
        }
        return u && json_object_set(dst, k, u) == 0;
    }
    if (!strcmp(k, "type")) {
        json_t *t = type_meet(m, have, v);
        return t ? json_object_set_new(dst, k, t) == 0 : !m->nomem;
    }
    if (!strcmp(k, "enum")) {
        json_t *e = enum_meet(m, have, v);
        return e ? json_object_set_new(dst, k, e) == 0 : !m->nomem;
    }
    if (!strcmp(k, "const")) {
        m->empty = "allOf parts require different constants";
        return true;
    }
    if (is_lower(k) || is_upper(k)) {
        double a = json_number_value(have), b = json_number_value(v);
        if (is_lower(k) ? b > a : b < a)
            return json_object_set(dst, k, (json_t *)v) == 0;
        return true;
    }
    if (!strcmp(k, "uniqueItems"))
        return json_is_true(v) ? json_object_set(dst, k, (json_t *)v) == 0 : true;
    /* pattern, format, multipleOf, not, contains, if, anyOf, oneOf ...: the
     * first part's value; the validator checks the others */
    return true;
}

static bool merge_into(struct mg *m, json_t *dst, const json_t *src)
{
    if (!src || m->nomem)
        return false;
    if (json_is_true(src))
        return true;
    if (json_is_false(src)) {
        m->empty = "allOf with a false schema";
        return true;
    }
    for (int i = 0; i < m->depth; i++)
        if (m->stack[i] == src)
            return true; /* a reference back into itself: left to the validator */
    if (m->depth >= MAX_MERGE)
        return true;
    m->stack[m->depth++] = src;
    const char *k;
    json_t *v;
    bool ok = true;
    json_object_foreach((json_t *)src, k, v) {
        if (!strcmp(k, "allOf")) {
            size_t i;
            json_t *part;
            json_array_foreach(v, i, part) ok = ok && merge_into(m, dst, part);
        } else if (!strcmp(k, "$ref")) {
            ok = merge_into(m, dst, sp_schema_target(m->sch, src));
        } else {
            ok = merge_key(m, dst, k, v);
        }
        if (!ok)
            break;
    }
    m->depth--;
    if (!ok)
        m->nomem = true;
    return ok;
}

const json_t *sp_schema_merge(const struct sp_schema *sch, json_t *owned, const json_t *base,
                              const char *const *without, const json_t *const *parts, size_t n_parts,
                              const char **empty)
{
    struct mg m = {.sch = sch, .owned = owned};
    json_t *out = own(&m, json_object());
    *empty = NULL;
    if (!out)
        return NULL;
    /* base without the keys named (and its allOf/$ref merged in) */
    json_t *b = json_object();
    if (!b) {
        m.nomem = true;
    } else {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)base, k, v) {
            bool skip = false;
            for (const char *const *w = without; w && *w; w++)
                skip |= !strcmp(k, *w);
            if (!skip)
                json_object_set(b, k, v);
        }
        if (json_object_get(b, "$ref")) { /* targets are looked up by the node holding the $ref */
            merge_into(&m, out, sp_schema_target(sch, base));
            json_object_del(b, "$ref");
        }
        merge_into(&m, out, b);
        json_decref(b);
    }
    for (size_t i = 0; i < n_parts && !m.nomem; i++)
        merge_into(&m, out, parts[i]);
    if (m.nomem) {
        sp_error_set(SP_ERR_NOMEM, "json schema: out of memory");
        return NULL;
    }
    *empty = m.empty;
    return out;
}
