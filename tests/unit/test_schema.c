/* JSON Schema -> grammar and the output validator, on schemas written here
 * (each keyword alone, then combined): which texts the grammar generates
 * (it accepts them and the validator passes them), which the validator
 * passes or refuses whatever the grammar does, which the grammar refuses,
 * and which schemas are refused with which message.  Random byte-level
 * walks through the grammars of schemas the grammar enforces exactly check
 * that every sentence it can generate is valid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "grammar/grammar.h"

#define N 6

struct scase {
    const char *schema;
    const char *gen[N];    /* the grammar accepts it, the validator passes it */
    const char *ok[N];     /* the validator passes it */
    const char *bad[N];    /* the validator refuses it */
    const char *nogram[N]; /* the grammar refuses it */
    bool exact;            /* every sentence of the grammar is valid */
};

#define DRAFT4 "\"$schema\":\"http://json-schema.org/draft-04/schema#\","
#define DRAFT7 "\"$schema\":\"http://json-schema.org/draft-07/schema#\","
#define DRAFT2020 "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","

static const struct scase cases[] = {
    /* ---- annotations and unknown keywords are ignored ---- */
    {"{\"type\":\"object\",\"title\":\"T\",\"description\":\"d\",\"$comment\":\"c\",\"examples\":[{}],"
     "\"example\":{},\"default\":{},\"readOnly\":true,\"readonly\":true,\"deprecated\":true,\"links\":[],"
     "\"x-foo\":{\"not\":1},\"javaName\":\"X\",\"preferredOrder\":[\"a\"],\"_format\":\"q\",\"id\":\"http://x/y\","
     "\"writeOnly\":false,\"frobnicate\":[1,2],\"contentMediaType\":\"text/plain\","
     "\"properties\":{\"a\":{\"type\":\"integer\",\"description\":\"x\",\"x-unit\":\"kg\",\"format\":\"int32\"}},"
     "\"required\":[\"a\"],\"additionalProperties\":false}",
     {"{\"a\":1}"}, {"{ \"a\" : 1 }"}, {"{\"a\":\"x\"}", "{}", "{\"a\":1,\"b\":2}"}, {"{}", "{\"b\":1}"}, true},
    /* properties the schema does not list: any key but the listed ones, any
     * value, after the required ones */
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
     "\"required\":[\"name\"]}",
     {"{\"name\":\"x\",\"labels\":{\"a\":[1,null]}}", "{\"name\":\"x\",\"age\":3,\"nam\":1,\"namex\":true,\"\":0}",
      "{\"name\":\"x\",\"ag\":\"y\",\"agee\":[],\"b\\\"c\":1}"},
     {"{\"nam\":1,\"name\":\"x\"}"},
     {"{\"name\":\"x\",\"age\":\"y\"}", "{\"name\":1,\"x\":1}", "{\"name\":\"x\",\"\\u0061ge\":\"y\"}"},
     {"{\"name\":\"x\",\"x\":1,\"age\":\"y\"}", "{\"name\":\"x\",\"name\":\"y\"}",
      "{\"name\":\"x\",\"age\":1,\"age\":2}", "{\"age\":1}"},
     false},
    {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":\"null\"}}}",
     {"{\"b\":\"x\"}", "{\"a\":1,\"b\":2}", "{}", "{\"abc\":1,\"\":2}", "{\"ab\":null,\"aa\":{}}"},
     {"{\"b\":1,\"a\":2}"}, {"{\"a\":\"x\"}", "{\"ab\":1}"}, {"{\"a\":\"x\"}", "{\"ab\":1}", "{\"b\":1,\"a\":\"x\"}"}, false},
    /* unlisted keys first, between and last where the object may end:
     * anywhere when nothing is required, else once the last required
     * property is written (so that a model writing unlisted keys can always
     * close the object instead); the listed ones keep their order, and one is
     * never written twice nor as an unlisted key (the unlisted keys' trie
     * excludes the listed names) */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}}",
     {"{\"x\":1,\"a\":2,\"b\":\"s\"}", "{\"a\":2,\"x\":[1],\"y\":{},\"b\":\"s\"}", "{\"a\":2,\"b\":\"s\",\"x\":null}",
      "{\"x\":1,\"b\":\"s\",\"z\":3}", "{\"ab\":1,\"a\":2,\"bb\":3,\"b\":\"s\",\"\":4}", "{\"x\":1}"},
     {"{\"b\":\"s\",\"a\":1}"},
     {"{\"a\":1,\"a\":2,\"b\":\"s\"}", "{\"x\":1,\"b\":\"s\",\"a\":\"t\"}", "{\"a\":\"t\"}"},
     {"{\"a\":1,\"b\":\"s\",\"a\":2}", "{\"x\":1,\"b\":\"s\",\"b\":\"t\"}", "{\"b\":\"s\",\"x\":1,\"a\":2}",
      "{\"x\":1,\"a\":\"s\",\"b\":\"s\"}", "{\"a\":1,\"x\":2,\"a\":3}", "{\"b\":\"s\",\"a\":1}"},
     false},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
     "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
     {"{\"a\":1,\"b\":\"s\",\"x\":2,\"c\":true,\"y\":3}", "{\"b\":\"s\",\"x\":2,\"c\":true}", "{\"b\":\"s\",\"x\":2}",
      "{\"a\":1,\"b\":\"s\",\"c\":false,\"z\":{}}"},
     {"{\"x\":1,\"b\":\"s\"}", "{\"a\":1,\"x\":2,\"b\":\"s\"}"},
     {"{\"b\":\"s\",\"c\":true,\"c\":false}", "{\"x\":1}", "{\"b\":\"s\",\"x\":1,\"c\":1}"},
     {"{\"x\":1,\"b\":\"s\"}", "{\"a\":1,\"x\":2,\"b\":\"s\"}", "{\"b\":\"s\",\"c\":true,\"c\":false}",
      "{\"b\":\"s\",\"x\":1,\"a\":1}", "{\"b\":\"s\",\"c\":true,\"b\":\"t\"}", "{\"b\":\"s\",\"x\":1,\"c\":1}"},
     false},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"null\"}},"
     "\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{\"x\":true,\"a\":1}", "{\"x\":true,\"a\":1,\"y\":false,\"b\":null,\"z\":true}", "{\"a\":1,\"x\":true}"},
     {NULL},
     {"{\"x\":1,\"a\":1}", "{\"a\":true}", "{\"a\":1,\"x\":null}"},
     {"{\"x\":1,\"a\":1}", "{\"a\":true}", "{\"x\":true,\"a\":1,\"a\":2}", "{\"a\":true,\"a\":1}",
      "{\"b\":null,\"x\":true,\"a\":1}", "{\"a\":1,\"x\":null}"},
     true},
    /* unknown format: an annotation */
    {"{\"type\":\"string\",\"format\":\"phone-number\",\"maxLength\":3}", {"\"abc\""}, {"\"+1\""}, {"\"abcd\""},
     {"\"abcd\""}, true},
    /* ---- drafts ---- */
    {"{" DRAFT4 "\"type\":\"number\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":10}", {"5", "10", "0.5"},
     {NULL}, {"0", "-1", "11"}, {"-1", "11"}, false},
    /* numbers with bounds: the integer part as written (truncated toward
     * zero) is bounded, so 0.5 fits minimum 0.3 and -0.5 fits above -2.5;
     * any number of fraction digits (MaskBench: "cpus": 0.5 was refused) */
    {"{\"type\":\"number\",\"minimum\":0.3,\"maximum\":1}", {"0.5", "0.3", "1", "0.3456789012"}, {NULL},
     {"0.2", "1.5", "-0.5", "0"}, {"2", "-0.5", "-1", "1e0"}, false},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2.5,\"maximum\":-0.25}", {"-0.5", "-2.4", "-1", "-2"}, {NULL},
     {"-2.5", "0", "-0.2", "-3"}, {"-3", "1", "0.5"}, false},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", {"0.5", "0.01"}, {NULL},
     {"0", "1", "-0.5"}, {"1.5", "-0.5", "2"}, false},
    {"{\"type\":\"number\",\"minimum\":-0.5,\"maximum\":-0.25}", {"-0.3", "-0.5"}, {NULL}, {"-0.2", "0"},
     {"0.3", "-1", "0"}, false},
    /* a member schema no value satisfies ({"not": {}}) means "never
     * present", as false does; a false patternProperties forbids the keys it
     * matches (both were refused as unsatisfiable: MaskBench's WashingtonPost
     * and Handwritten sets) */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}},\"b\":{\"type\":\"integer\"}}}", {"{\"b\":1}", "{}"},
     {NULL}, {"{\"a\":1}", "{\"b\":1,\"a\":null}"}, {"{\"a\":1}"}, true},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"not\":true}}",
     {"{\"a\":1}", "{}"}, {NULL}, {"{\"b\":1}"}, {"{\"b\":1}"}, true},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x\":false},\"additionalProperties\":true}", {"{}", "{\"a\":1}"},
     {NULL}, {"{\"xa\":1}"}, {NULL}, false},
    {"{" DRAFT4 "\"const\":3}", {"4", "\"x\""}, {"3"}, {NULL}, {NULL}, true}, /* const is draft-6 */
    {"{" DRAFT7 "\"definitions\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/definitions/s\",\"maxLength\":2}",
     {"\"abcd\""}, {"\"\""}, {"1"}, {"1"}, true}, /* $ref's siblings are ignored before 2019-09 */
    {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}", {"\"ab\""}, {NULL},
     {"\"abcd\"", "1"}, {"\"abc\""}, true},
    {"{" DRAFT7 "\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],"
     "\"additionalItems\":false}",
     {"[1,\"a\"]", "[1]", "[]"}, {NULL}, {"[1,\"a\",2]", "[\"a\"]"}, {"[1,\"a\",2]"}, true},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"string\"}}",
     {"[1,\"a\",\"b\"]"}, {NULL}, {"[1,2]"}, {"[1,2]"}, true}, /* no $schema: every draft's words */
    {"{" DRAFT2020 "\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"items\":{\"type\":\"string\"},"
     "\"additionalItems\":false}",
     {"[1,\"a\",\"b\"]"}, {NULL}, {"[1,2]"}, {NULL}, true}, /* additionalItems is not 2020-12's */
    {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependencies\":{\"a\":[\"b\"],"
     "\"b\":{\"required\":[\"c\"]}}}",
     {"{}"}, {"{\"a\":1,\"b\":2,\"c\":3}", "{\"c\":1}"}, {"{\"a\":1}", "{\"b\":1}"}, {NULL}, false},
    {"{\"$defs\":{\"n\":{\"$anchor\":\"node\",\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#node\"}}",
     {"[1,2]"}, {NULL}, {"[\"a\"]"}, {"[\"a\"]"}, true},
    {"{\"$id\":\"https://example.com/root.json\",\"$defs\":{\"n\":{\"type\":\"integer\"}},"
     "\"items\":{\"$ref\":\"https://example.com/root.json#/$defs/n\"}}",
     {"[1]"}, {NULL}, {"[\"a\"]"}, {NULL}, true},
    {"{\"$dynamicAnchor\":\"t\",\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":"
     "{\"$dynamicRef\":\"#t\"}}}}",
     {"{\"k\":[{\"k\":[]}]}", "{}"}, {NULL}, {"{\"k\":[1]}"}, {"{\"k\":[1]}"}, true},

    /* ---- properties in the schema's order, each optional one skippable in place ---- */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
     "\"required\":[\"b\"]}",
     {"{\"a\":5,\"b\":6}", "{\"b\":6}"}, {"{\"b\":6,\"a\":5}"}, {"{\"a\":5}", "{}"}, {"{\"b\":6,\"a\":5}", "{}"}, true},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"boolean\"},"
     "\"c\":{\"type\":\"boolean\"},\"d\":{\"type\":\"boolean\"}},\"required\":[\"c\"],\"additionalProperties\":false}",
     {"{\"c\":true}", "{\"a\":true,\"c\":false}", "{\"b\":true,\"c\":true,\"d\":false}",
      "{\"a\":true,\"b\":false,\"c\":true,\"d\":true}"},
     {"{\"d\":true,\"c\":true}"}, {"{\"a\":true}", "{\"c\":true,\"e\":1}"}, {"{\"a\":true,\"a\":true,\"c\":true}"},
     true},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":true}",
     {"{}", "{\"a\":null}", "{\"a\":null,\"z\":[1]}", "{\"z\":1,\"y\":2}"}, {NULL}, {"{\"a\":1}"}, {NULL}, false},
    {"{\"type\":\"object\"}", {"{}", "{\"k\":{\"n\":[1,2]}}"}, {NULL}, {"[]"}, {NULL}, true},

    /* ---- not ---- */
    {"{\"not\":{\"type\":\"string\"}}", {"1", "null", "[\"a\"]"}, {NULL}, {"\"x\""}, {"\"x\""}, false},
    {"{\"type\":\"integer\",\"not\":{\"enum\":[3]}}", {"1"}, {NULL}, {"3"}, {NULL}, false},
    {"{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"null\"}}", {"\"a\""}, {NULL}, {"null"}, {"null"}, true},
    /* ---- patternProperties and propertyNames ---- */
    {"{\"type\":\"object\",\"patternProperties\":{\"^x-[a-z]+$\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":false}",
     {"{\"x-ab\":1}", "{}"}, {NULL}, {"{\"x-ab\":\"s\"}", "{\"y\":1}"}, {"{\"y\":1}", "{\"x-ab\":\"s\"}"}, true},
    {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"patternProperties\":"
     "{\"^n\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{\"id\":1,\"name\":\"x\",\"ok\":true}", "{\"name\":\"x\",\"id\":1}", "{\"ok\":true,\"id\":1,\"no\":\"y\"}"},
     {NULL}, {"{\"name\":1}", "{\"ok\":1}", "{\"ok\":true,\"id\":\"s\"}"}, {"{\"ok\":1,\"id\":1}", "{\"ok\":true,\"id\":\"s\"}"},
     false},
    {"{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\",\"maxLength\":3}}",
     {"{\"abc\":1}"}, {NULL}, {"{\"ABC\":1}", "{\"abcd\":1}"}, {"{\"ABC\":1}"}, false},
    /* ---- if / then / else ---- */
    {"{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]},\"n\":{\"type\":\"integer\"}},"
     "\"required\":[\"kind\"],\"if\":{\"properties\":{\"kind\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"n\"]},"
     "\"else\":{\"not\":{\"required\":[\"n\"]}}}",
     {"{\"kind\":\"a\",\"n\":1}", "{\"kind\":\"b\"}"}, {NULL}, {"{\"kind\":\"a\"}", "{\"kind\":\"b\",\"n\":1}"}, {NULL},
     false},
    /* ---- dependentRequired, dependentSchemas, property counts ---- */
    {"{\"type\":\"object\",\"dependentRequired\":{\"a\":[\"b\"]},\"dependentSchemas\":{\"c\":{\"required\":[\"d\"]}}}",
     {"{}"}, {"{\"a\":1,\"b\":1}", "{\"c\":1,\"d\":2}"}, {"{\"a\":1}", "{\"c\":1}"}, {NULL}, false},
    {"{\"type\":\"object\",\"minProperties\":1,\"maxProperties\":2}", {"{\"k\":1}"}, {NULL},
     {"{}", "{\"a\":1,\"b\":2,\"c\":3}"}, {NULL}, false},
    /* ---- contains ---- */
    {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"minContains\":2,\"maxContains\":3}",
     {"[1,2]"}, {"[\"a\",1,2]"}, {"[1]", "[1,2,3,4]", "[]"}, {NULL}, false},
    {"{\"type\":\"array\",\"contains\":{\"const\":\"x\"}}", {"[\"x\"]"}, {NULL}, {"[]", "[\"y\"]"}, {NULL}, false},
    /* ---- unevaluatedProperties / unevaluatedItems ---- */
    {"{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}}],"
     "\"properties\":{\"b\":{\"type\":\"integer\"}},\"unevaluatedProperties\":false}",
     {"{\"a\":1,\"b\":2}", "{\"b\":2}"}, {"{\"b\":1,\"a\":1}"}, {"{\"c\":1}"}, {"{\"c\":1}"}, true},
    {"{\"anyOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}],"
     "\"unevaluatedProperties\":false}",
     {"{\"a\":1}"}, {"{\"a\":1,\"b\":2}"}, {"{\"c\":1}", "{\"a\":1,\"c\":2}"}, {NULL}, false},
    {"{\"prefixItems\":[{\"type\":\"integer\"}],\"unevaluatedItems\":false}", {"[1]", "[]"}, {NULL}, {"[1,2]"},
     {"[1,2]"}, true},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"unevaluatedProperties\":{\"type\":\"string\"}}",
     {"{\"a\":1,\"x\":\"s\"}"}, {NULL}, {"{\"x\":1}"}, {NULL}, false},
    /* ---- formats ---- */
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.1\"", "\"0.0.0.0\""}, {NULL},
     {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""}, {"\"256.1.1.1\""}, true},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", {"\"::1\"", "\"2001:db8::8a2e:370:7334\"", "\"::ffff:1.2.3.4\""},
     {NULL}, {"\":::\"", "\"1::2::3\""}, {"\"x\""}, false},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", {"\"example.com\"", "\"a-b.c\""}, {NULL},
     {"\"-bad.com\"", "\"a..b\""}, {"\"-bad.com\""}, true},
    {"{\"type\":\"string\",\"format\":\"uri\"}", {"\"https://example.com/a?b=1#c\"", "\"urn:isbn:0451450523\""}, {NULL},
     {"\"no scheme\"", "\"http://a b\"", "\"/relative\""}, {"\"/relative\""}, true},
    /* MaskBench's MCP set: "http://example.com/resource/{" is no URI template;
     * "{,}" is an operator without a variable */
    {"{\"type\":\"string\",\"format\":\"uri-template\"}", {"\"http://x/{id}\"", "\"/a{?q,r*}\"", "\"plain\"", "\"\""},
     {NULL}, {"\"http://x/{\"", "\"a b\"", "\"{}\"", "\"{a{b}}\"", "\"a}\"", "\"{,}\""},
     {"\"http://x/{\"", "\"a b\"", "\"{}\""}, true},
    /* a relative reference has no ":" in its first segment (MaskBench: "://" was accepted) */
    {"{\"type\":\"string\",\"format\":\"uri-reference\"}", {"\"../a?b\"", "\"\"", "\"a/b:c\"", "\"x:y\"", "\"?q:1\""},
     {NULL}, {"\"a b\"", "\"%zz\"", "\"://\"", "\"1a:b\""}, {"\"a b\"", "\"://\"", "\"1a:b\""}, true},
    {"{\"type\":\"string\",\"format\":\"byte\"}", {"\"aGVsbG8=\"", "\"\""}, {NULL}, {"\"abc\"", "\"a=bc\""}, {"\"abc\""},
     true},
    {"{\"type\":\"string\",\"format\":\"duration\"}", {"\"P3Y6M4DT12H30M5S\"", "\"P4W\"", "\"PT1H1S\"", "\"P1D\""},
     {NULL}, {"\"P\"", "\"PT\"", "\"P1H\"", "\"P1D1Y\""}, {"\"P\"", "\"P1D1Y\""}, true},
    {"{\"type\":\"string\",\"format\":\"json-pointer\"}", {"\"/a/b~0\"", "\"\""}, {NULL}, {"\"a/b\"", "\"/~2\""},
     {"\"a/b\""}, true},
    {"{\"type\":\"string\",\"format\":\"relative-json-pointer\"}", {"\"0/a\"", "\"1#\""}, {NULL}, {"\"/a\"", "\"01\""},
     {"\"/a\""}, true},
    {"{\"type\":\"string\",\"format\":\"regex\"}", {"\"^[a-z]+$\""}, {NULL}, {"\"(\""}, {NULL}, false},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\""}, {NULL}, {"\"2023-02-29\""}, {"\"2024-13-01\""},
     false},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@example.com\""}, {NULL}, {"\"a@b\"", "\"@b.com\""},
     {"\"a@b\""}, true},
    /* ---- allOf merged, also across $ref; what cannot merge is validated ---- */
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"]},"
     "{\"properties\":{\"a\":{\"maximum\":5},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":3,\"b\":\"x\"}"}, {NULL}, {"{\"a\":6,\"b\":\"x\"}", "{\"a\":3}"}, {"{\"a\":6,\"b\":\"x\"}"}, false},
    {"{\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}},"
     "\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}]}",
     {"{\"id\":1,\"name\":\"x\"}"}, {NULL}, {"{\"id\":1}", "{\"name\":\"x\"}"}, {"{\"id\":1}"}, false},
    {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^a\"},{\"pattern\":\"b$\"}]}", {"\"ab\""}, {NULL}, {"\"a\"", "\"b\""},
     {"\"b\""}, false},
    {"{\"allOf\":[{\"type\":[\"integer\",\"string\"]},{\"type\":[\"number\",\"null\"]}]}", {"1"}, {NULL},
     {"\"a\"", "null", "1.5"}, {"\"a\"", "null"}, false},
    /* ---- large counts: the validator's beyond what the grammar spells ---- */
    {"{\"type\":\"string\",\"maxLength\":5000,\"minLength\":2}", {"\"ab\""}, {NULL}, {"\"a\""}, {"\"a\""}, false},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":100000}", {"[1,2]"}, {NULL},
     {"[1]"}, {"[1]"}, false},
    /* ---- patterns beyond the regex subset: the validator's ---- */
    {"{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\"}", {"\"aa\""}, {NULL}, {"\"ab\""}, {NULL}, false},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\",\"format\":\"hostname\"}", {"\"AB\""}, {NULL}, {"\"ab\""},
     {NULL}, false},
    /* ---- enum values of another type than `type` are never generated ---- */
    {"{\"type\":\"string\",\"enum\":[\"a\",1,null]}", {"\"a\""}, {NULL}, {"1", "null"}, {"1", "null"}, true},
    /* ---- combined: an object of everything ---- */
    {"{\"type\":\"object\",\"title\":\"order\",\"properties\":{\"note\":{\"type\":\"string\",\"maxLength\":10},"
     "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"items\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":3,"
     "\"items\":{\"$ref\":\"#/$defs/item\"}},\"tags\":{\"type\":\"object\",\"patternProperties\":{\"^t\":{\"type\":"
     "\"boolean\"}},\"additionalProperties\":false},\"state\":{\"enum\":[\"new\",\"paid\"]}},"
     "\"required\":[\"id\",\"items\"],\"additionalProperties\":false,"
     "\"$defs\":{\"item\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":"
     "\"^[A-Z]{3}-[0-9]{2}$\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},\"required\":[\"sku\"],"
     "\"additionalProperties\":false}}}",
     {"{\"note\":\"hi\",\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"items\":[{\"sku\":\"ABC-12\",\"qty\":2}],"
      "\"tags\":{\"t1\":true},\"state\":\"new\"}",
      "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"items\":[{\"sku\":\"ABC-12\"}]}"},
     {NULL},
     {"{\"id\":\"x\",\"items\":[{\"sku\":\"ABC-12\"}]}", "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"items\":[]}"},
     {"{\"items\":[{\"sku\":\"ABC-12\"}],\"id\":\"123e4567-e89b-12d3-a456-426614174000\"}"}, true},
};

static struct sp_grammar *compile_schema(const char *schema, bool flexible)
{
    struct sp_grammar *g = NULL;
    sp_status st = sp_grammar_compile_schema(&g, schema, strlen(schema), flexible);
    CHECK(st == SP_OK && g, "compile %.200s: %s", schema, sp_error_message());
    return g;
}

static bool grammar_accepts(struct sp_grammar *g, const char *s)
{
    return sp_grammar_accepting(g, sp_grammar_feed(g, sp_grammar_start(g), s, strlen(s)));
}

static bool valid(const char *schema, const char *text, char *why, size_t cap)
{
    return sp_grammar_validate(schema, strlen(schema), text, strlen(text), why, cap) == SP_OK;
}

/* A random sentence of g, byte by byte (structural bytes favoured so that
 * strings end); false when none ends within the steps. */
static bool random_sentence(struct sp_grammar *g, uint64_t *rng, char *out, size_t cap)
{
    sp_grammar_state s = sp_grammar_start(g);
    size_t n = 0;
    while (n + 1 < cap) {
        unsigned char allowed[256];
        int k = 0;
        for (int b = 1; b < 256; b++) {
            char c = (char)b;
            if (sp_grammar_feed(g, s, &c, 1) != SP_GRAMMAR_DEAD)
                allowed[k++] = (unsigned char)b;
        }
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(*rng >> 33);
        if (sp_grammar_accepting(g, s) && (!k || r % 3 == 0))
            break;
        if (!k)
            return false;
        unsigned char pick = allowed[r % (unsigned)k];
        for (int i = 0; i < k && r % 2; i++) /* half the time: a structural byte when there is one */
            if (strchr("\"]},:", allowed[(i + r) % (unsigned)k]) && allowed[(i + r) % (unsigned)k]) {
                pick = allowed[(i + r) % (unsigned)k];
                break;
            }
        out[n++] = (char)pick;
        s = sp_grammar_feed(g, s, (const char *)&pick, 1);
    }
    out[n] = '\0';
    return n + 1 < cap && sp_grammar_accepting(g, s);
}

static void test_cases(void)
{
    char why[512];
    uint64_t rng = 1234;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct scase *c = &cases[i];
        struct sp_grammar *g = compile_schema(c->schema, false);
        if (!g)
            continue;
        for (int k = 0; k < N && c->gen[k]; k++) {
            CHECK(grammar_accepts(g, c->gen[k]), "case %zu: the grammar should accept %s", i, c->gen[k]);
            CHECK(valid(c->schema, c->gen[k], why, sizeof why), "case %zu: %s should be valid: %s", i, c->gen[k], why);
        }
        for (int k = 0; k < N && c->ok[k]; k++)
            CHECK(valid(c->schema, c->ok[k], why, sizeof why), "case %zu: %s should be valid: %s", i, c->ok[k], why);
        for (int k = 0; k < N && c->bad[k]; k++) {
            CHECK(!valid(c->schema, c->bad[k], why, sizeof why) && why[0], "case %zu: %s should be invalid", i,
                  c->bad[k]);
            if (c->exact)
                CHECK(!grammar_accepts(g, c->bad[k]), "case %zu: an exact grammar accepts invalid %s", i, c->bad[k]);
        }
        for (int k = 0; k < N && c->nogram[k]; k++)
            CHECK(!grammar_accepts(g, c->nogram[k]), "case %zu: the grammar should refuse %s", i, c->nogram[k]);
        /* sentences of an exact grammar are valid; any grammar's are JSON
         * (but for a key written twice among properties the schema leaves
         * open: the grammar does not remember keys; the validator refuses
         * them and the output is retried) */
        int done = 0;
        for (int w = 0; w < 24; w++) {
            char text[400];
            if (!random_sentence(g, &rng, text, sizeof text))
                continue;
            done++;
            bool ok = valid(c->schema, text, why, sizeof why) || strstr(why, "duplicate object key");
            CHECK(ok || (!c->exact && !strstr(why, "not valid JSON")), "case %zu: generated %s: %s", i, text, why);
        }
        CHECK(done > 0, "case %zu: no random sentence ended", i);
        sp_grammar_free(g);
    }
}

/* Schemas refused, and why. */
static void test_refusals(void)
{
    static const struct {
        const char *schema, *needle;
    } bad[] = {
        {"{\"$ref\":\"https://example.com/other.json\"}", "not in this schema"},
        {"{\"$ref\":\"#/$defs/missing\"}", "points at nothing"},
        {"{\"$id\":\"https://a/b\",\"$defs\":{\"x\":{\"$id\":\"https://a/c\",\"$dynamicAnchor\":\"n\"}},"
         "\"$dynamicRef\":\"#n\"}", "embedded resources"},
        {"{\"$schema\":\"http://json-schema.org/draft-03/schema#\",\"type\":\"string\"}", "draft-03"},
        {"{\"type\":\"string\",\"minLength\":-1}", "non-negative integer"},
        {"{\"type\":\"strin\"}", "unknown type"},
        {"{\"type\":\"string\",\"pattern\":\"(\"}", "not a valid regular expression"},
        {"{\"properties\":{\"a\":{\"patternProperties\":{\"[\":{}}}}}", "at $.properties.a.patternProperties.["},
        {"{\"enum\":[]}", "empty enum"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "minItems 3 > maxItems 1"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "no common type"},
        {"{\"not\":{}}", "'not'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}},\"required\":[\"a\"]}",
         "required property 'a' can have no value"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"],"
         "\"additionalProperties\":false}", "required property 'b'"},
        {"[1]", "a schema must be an object or a boolean"},
        {"{\"type\":\"string\",\"pattern\":\"^(.*){1000}$\"}", "limit SP_GRAMMAR_MAX_"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sp_grammar *g = NULL;
        sp_status st = sp_grammar_compile_schema(&g, bad[i].schema, strlen(bad[i].schema), false);
        CHECK(st == SP_ERR_ARG && !g, "%s should be refused", bad[i].schema);
        CHECK(strstr(sp_error_message(), bad[i].needle) != NULL, "%s: '%s' lacks '%s'", bad[i].schema,
              sp_error_message(), bad[i].needle);
        sp_grammar_free(g);
    }
}

/* Many optional properties compile to a grammar linear in their number,
 * and any of them can be written where it stands. */
static void test_many_properties(void)
{
    uint32_t states[3];
    static const int counts[3] = {10, 40, 160};
    static const char *const kinds[2] = {"{\"type\":\"string\",\"maxLength\":20}", "{\"type\":\"boolean\"}"};
    for (int kind = 0; kind < 2; kind++) {
        for (int j = 0; j < 3; j++) {
            char *s = malloc(65536);
            size_t n = (size_t)snprintf(s, 65536, "{\"type\":\"object\",\"properties\":{");
            for (int p = 0; p < counts[j]; p++)
                n += (size_t)snprintf(s + n, 65536 - n, "%s\"p%d\":%s", p ? "," : "", p, kinds[kind]);
            snprintf(s + n, 65536 - n, "}%s}", j == 1 ? ",\"required\":[\"p39\"]" : "");
            struct sp_grammar *g = compile_schema(s, false);
            states[j] = 0;
            if (g) {
                struct sp_grammar_stats gs;
                sp_grammar_stats(g, &gs);
                states[j] = gs.n_states;
                const char *v = kind ? "true" : "\"x\"";
                char text[256];
                snprintf(text, sizeof text, "{\"p3\":%s,\"p7\":%s%s}", v, v, j == 1 ? ",\"p39\":false" : "");
                if (j == 1 && !kind)
                    snprintf(text, sizeof text, "{\"p3\":\"x\",\"p39\":\"y\"}");
                CHECK(grammar_accepts(g, text), "%d properties: %s", counts[j], text);
                CHECK(j == 1 || grammar_accepts(g, "{}"), "%d properties: {}", counts[j]);
                CHECK(!grammar_accepts(g, kind ? "{\"p7\":true,\"p3\":true}" : "{\"p7\":\"x\",\"p3\":\"x\"}"),
                      "%d properties: out of order", counts[j]);
            }
            sp_grammar_free(g);
            free(s);
        }
        /* linear: 16 times the properties, at most 20 times the states */
        CHECK(states[0] && states[2] <= 20 * states[0], "kind %d: %u states for 10, %u for 160", kind, states[0],
              states[2]);
    }
}

/* Flexible whitespace: any JSON whitespace between tokens; compact: none.
 * The validator takes any. */
static void test_whitespace(void)
{
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                         "{\"type\":\"integer\"}},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}";
    const char *spaced[] = {"{ \"a\" : [ 1 , 2 ] }", "{\n  \"a\": [\n    1\n  ],\n\t\"b\" :\"x\"\r\n}",
                            "{\"a\":[]}"};
    struct sp_grammar *flex = compile_schema(schema, true), *compact = compile_schema(schema, false);
    char why[256];
    for (size_t i = 0; flex && compact && i < sizeof spaced / sizeof spaced[0]; i++) {
        CHECK(grammar_accepts(flex, spaced[i]), "flexible: %s", spaced[i]);
        CHECK(grammar_accepts(compact, spaced[i]) == (i == 2), "compact: %s", spaced[i]);
        CHECK(valid(schema, spaced[i], why, sizeof why), "validator: %s: %s", spaced[i], why);
    }
    CHECK(flex && !grammar_accepts(flex, "{\"a\":[1 2]}"), "flexible still needs commas");
    CHECK(flex && !grammar_accepts(flex, "{\"a\":[]}\n") && !grammar_accepts(flex, " {\"a\":[]}"),
          "nothing before or after the value");
    CHECK(valid(schema, "\n{\"a\":[]} ", why, sizeof why), "the validator takes whitespace around it: %s", why);
    /* an enum's or const's objects and arrays take the same whitespace
     * (MaskBench's instances are spaced: {"bar": 2, "foo": 1} was refused) */
    struct sp_grammar *e = compile_schema("{\"enum\":[{\"bar\":2,\"foo\":[1,{}]},\"x\"]}", true);
    CHECK(e && grammar_accepts(e, "{\"bar\": 2, \"foo\": [1, {}]}") && grammar_accepts(e, "{ \"bar\" :2,\"foo\":[ 1 ,{ } ] }"),
          "flexible enum objects");
    CHECK(e && grammar_accepts(e, "\"x\"") && !grammar_accepts(e, "{\"bar\": 2}") && !grammar_accepts(e, "\" x\""),
          "only the enum's values");
    sp_grammar_free(e);
    e = compile_schema("{\"const\":[1,2]}", true);
    CHECK(e && grammar_accepts(e, "[1, 2]") && !grammar_accepts(e, "[1, 2, 3]"), "flexible const array");
    sp_grammar_free(e);
    sp_grammar_free(flex);
    sp_grammar_free(compact);
}

/* Counted strings are spelled out (a copy of a character's automaton per
 * position) up to a budget per schema; past it lengths are the
 * validator's, so many long strings stay within the state limit. */
static void test_counts(void)
{
    struct sp_grammar *g = compile_schema("{\"type\":\"string\",\"minLength\":200,\"maxLength\":250}", false);
    char text[600] = "\"";
    if (g) {
        memset(text + 1, 'a', 200);
        text[201] = '"';
        text[202] = '\0';
        CHECK(grammar_accepts(g, text), "200 characters");
        text[200] = '"';
        text[201] = '\0';
        CHECK(!grammar_accepts(g, text), "199 characters");
    }
    sp_grammar_free(g);
    /* 300 strings of up to 200 characters: the first ten are spelled out,
     * the rest are free in the grammar and checked by the validator */
    char *s = malloc(1 << 16);
    size_t n = (size_t)snprintf(s, 1 << 16, "{\"type\":\"object\",\"properties\":{");
    for (int p = 0; p < 300; p++)
        n += (size_t)snprintf(s + n, (1 << 16) - n, "%s\"p%d\":{\"type\":\"string\",\"maxLength\":200}", p ? "," : "", p);
    snprintf(s + n, (1 << 16) - n, "},\"required\":[\"p0\",\"p299\"],\"additionalProperties\":false}");
    g = compile_schema(s, false);
    if (g) {
        struct sp_grammar_stats gs;
        sp_grammar_stats(g, &gs);
        CHECK(gs.n_states < 40000, "%u states", gs.n_states);
        char *long_one = malloc(1000), why[256];
        snprintf(long_one, 1000, "{\"p0\":\"x\",\"p299\":\"%0300d\"}", 0);
        CHECK(grammar_accepts(g, long_one), "past the budget the grammar leaves the length free");
        CHECK(!valid(s, long_one, why, sizeof why) && strstr(why, "maxLength 200"), "and the validator checks it");
        snprintf(long_one, 1000, "{\"p0\":\"%0201d\",\"p299\":\"x\"}", 0);
        CHECK(!grammar_accepts(g, long_one), "within the budget the grammar holds the length");
        free(long_one);
    }
    sp_grammar_free(g);
    free(s);
}

/* open, then n items (fmt formatted with the item's index twice) joined
 * by sep, then close; malloc'd. */
static char *joined(const char *open, const char *fmt, const char *sep, int n, const char *close)
{
    size_t cap = strlen(open) + strlen(close) + (size_t)n * (strlen(fmt) + strlen(sep) + 24) + 1;
    char *t = malloc(cap);
    size_t k = (size_t)snprintf(t, cap, "%s", open);
    for (int i = 0; i < n; i++) {
        k += (size_t)snprintf(t + k, cap - k, "%s", i ? sep : "");
        k += (size_t)snprintf(t + k, cap - k, fmt, i, i);
    }
    snprintf(t + k, cap - k, "%s", close);
    return t;
}

/* Large counts (lengths, items, properties, patterns' repetitions; nested)
 * compile to small automata: the grammar spells a count up to 256 within a
 * budget per schema and takes no more than that of it, the validator checks
 * the rest.
 * Texts at both ends of the range pass both; one past either end is
 * refused by the validator; one short of what the grammar enforces is
 * refused by the grammar too. */
static void test_large_counts(void)
{
    char s300[400], s260[300];
    snprintf(s300, sizeof s300, "{\"s\":\"%0300d\",\"t\":[1,2]}", 0);
    snprintf(s260, sizeof s260, "\"k%%d\":\"%0260d\"", 0);
    const struct {
        const char *schema, *open, *fmt, *sep, *close;
        int lo, hi; /* the count range (hi < 0: no maximum) */
        int few;    /* a count the grammar refuses */
    } cases[] = {
        {"{\"type\":\"string\",\"minLength\":10000}", "\"", "a", "", "\"", 10000, -1, 100},
        {"{\"type\":\"string\",\"minLength\":300,\"maxLength\":10000}", "\"", "\xc3\xa9", "", "\"", 300, 10000, 255},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":500,\"maxItems\":600}", "[", "%d", ",", "]",
         500, 600, 255},
        {"{\"type\":\"array\",\"minItems\":500,\"items\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\","
         "\"minLength\":300,\"maxLength\":10000},\"t\":{\"type\":\"array\",\"minItems\":2,\"maxItems\":1000}},"
         "\"required\":[\"s\"]}}",
         "[", s300, ",", "]", 500, -1, 10},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":300,"
         "\"maxProperties\":400}",
         "{", "\"k%d\":%d", ",", "}", 300, 400, 200},
        {"{\"type\":\"object\",\"patternProperties\":{\"^k[0-9]{1,4}$\":{\"type\":\"string\",\"minLength\":260}},"
         "\"additionalProperties\":false,\"minProperties\":300}",
         "{", s260, ",", "}", 300, -1, 100},
    };
    char why[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sp_grammar *g = compile_schema(cases[i].schema, false);
        if (!g)
            continue;
        struct sp_grammar_stats gs;
        sp_grammar_stats(g, &gs);
        CHECK(gs.n_states < 20000, "case %zu: %u states", i, gs.n_states);
        const int counts[5] = {cases[i].lo, cases[i].hi, cases[i].lo - 1, cases[i].hi + 1, cases[i].few};
        for (int k = 0; k < 5; k++) {
            if (counts[k] < 0 || (k == 3 && cases[i].hi < 0))
                continue;
            char *t = joined(cases[i].open, cases[i].fmt, cases[i].sep, counts[k], cases[i].close);
            bool ok = valid(cases[i].schema, t, why, sizeof why), gram = grammar_accepts(g, t);
            if (k < 2)
                CHECK(ok && gram, "case %zu: %d: valid %d (%s), grammar %d", i, counts[k], ok, why, gram);
            else
                CHECK(!ok && (k < 4 || !gram), "case %zu: %d: valid %d, grammar %d", i, counts[k], ok, gram);
            free(t);
        }
        sp_grammar_free(g);
    }
    /* 40 arrays of 200 to 256 items: the first ones are spelled, the rest
     * are the validator's once the budget is spent */
    char *s = malloc(1 << 16);
    size_t n = (size_t)snprintf(s, 1 << 16, "{\"type\":\"object\",\"properties\":{");
    for (int p = 0; p < 40; p++)
        n += (size_t)snprintf(s + n, (1 << 16) - n, "%s\"p%d\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                              "\"minItems\":200,\"maxItems\":256}", p ? "," : "", p);
    snprintf(s + n, (1 << 16) - n, "},\"required\":[\"p0\",\"p39\"]}");
    struct sp_grammar *g = compile_schema(s, false);
    if (g) {
        struct sp_grammar_stats gs;
        sp_grammar_stats(g, &gs);
        CHECK(gs.n_states < 20000, "40 arrays: %u states", gs.n_states);
        char *few = joined("[", "%d", ",", 100, "]"), *enough = joined("[", "%d", ",", 200, "]");
        char *t = malloc(4096);
        snprintf(t, 4096, "{\"p0\":%s,\"p39\":%s}", enough, few);
        CHECK(grammar_accepts(g, t) && !valid(s, t, why, sizeof why) && strstr(why, "minItems"),
              "past the budget the count is the validator's");
        snprintf(t, 4096, "{\"p0\":%s,\"p39\":%s}", few, enough);
        CHECK(!grammar_accepts(g, t), "within the budget the grammar holds the count");
        snprintf(t, 4096, "{\"p0\":%s,\"p39\":%s}", enough, enough);
        CHECK(grammar_accepts(g, t) && valid(s, t, why, sizeof why), "valid: %s", why);
        free(t);
        free(few);
        free(enough);
    }
    sp_grammar_free(g);
    /* 60 patterns of up to 1000 characters (more than the automaton's
     * state limit when all are spelled): the first ones are, the rest are
     * the validator's */
    n = (size_t)snprintf(s, 1 << 16, "{\"type\":\"object\",\"properties\":{");
    for (int p = 0; p < 60; p++)
        n += (size_t)snprintf(s + n, (1 << 16) - n, "%s\"p%d\":{\"type\":\"string\",\"pattern\":\"^.{0,1000}$\"}",
                              p ? "," : "", p);
    snprintf(s + n, (1 << 16) - n, "}}");
    g = compile_schema(s, false);
    if (g) {
        char *t = malloc(2048);
        for (int k = 0; k < 3; k++) {
            int len = k == 2 ? 1000 : 1001;
            snprintf(t, 2048, "{\"%s\":\"%0*d\"}", k == 0 ? "p0" : "p59", len, 0);
            bool ok = valid(s, t, why, sizeof why), gram = grammar_accepts(g, t);
            CHECK(k == 0 ? !ok && !gram : k == 1 ? !ok && gram : ok && gram, "pattern %d: valid %d, grammar %d", k,
                  ok, gram);
        }
        free(t);
    }
    sp_grammar_free(g);
    free(s);
}

/* Closed objects (SP_SCHEMA_CLOSED, the server's strict json_schema and
 * tool calls): only the listed properties, unless the schema asks for more;
 * the same schema left open takes any other key after the required ones. */
static void test_closed(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                    "\"b\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"null\"}}}},\"required\":[\"a\"]}";
    struct sp_grammar *open = compile_schema(s, false), *closed = NULL;
    sp_status st = sp_grammar_compile_schema(&closed, s, strlen(s), SP_SCHEMA_CLOSED);
    CHECK(st == SP_OK && closed, "closed: %s", sp_error_message());
    if (open && closed) {
        const char *extra[] = {"{\"a\":1,\"x\":2}", "{\"a\":1,\"x\":2,\"b\":{\"c\":null}}", "{\"a\":1,\"b\":{\"c\":null,\"d\":[]}}", "{\"a\":1,\"b\":{\"d\":1}}"};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
            CHECK(grammar_accepts(open, extra[i]), "open accepts %s", extra[i]);
            CHECK(!grammar_accepts(closed, extra[i]), "closed refuses %s", extra[i]);
        }
        CHECK(grammar_accepts(closed, "{\"a\":1,\"b\":{\"c\":null}}") && grammar_accepts(closed, "{\"a\":1}"),
              "closed keeps the listed ones");
    }
    sp_grammar_free(open);
    sp_grammar_free(closed);
    /* a map (no property listed) and additionalProperties stay open when closed */
    const char *map = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                      "\"additionalProperties\":{\"type\":\"string\"}}";
    st = sp_grammar_compile_schema(&closed, map, strlen(map), SP_SCHEMA_CLOSED);
    CHECK(st == SP_OK && closed && grammar_accepts(closed, "{\"a\":1,\"x\":\"y\"}") &&
              !grammar_accepts(closed, "{\"a\":1,\"x\":2}"),
          "additionalProperties holds when closed");
    sp_grammar_free(closed);
    st = sp_grammar_compile_schema(&closed, "{\"type\":\"object\"}", 17, SP_SCHEMA_CLOSED);
    CHECK(st == SP_OK && closed && grammar_accepts(closed, "{\"x\":[1]}"), "an object that lists none takes any");
    sp_grammar_free(closed);
}

int main(void)
{
    test_closed();
    test_cases();
    test_refusals();
    test_many_properties();
    test_whitespace();
    test_counts();
    test_large_counts();
    return sp_check_report("test_schema");
}
