/* The grammar automaton on hand-written grammars: which strings it accepts,
 * parse errors with positions, and token masks on small vocabularies checked
 * against a brute-force oracle (feed each token's bytes, keep the live ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/error.h"
#include "grammar/grammar.h"

static struct sp_grammar *compile(const char *text)
{
    struct sp_grammar *g = NULL;
    sp_status st = sp_grammar_compile(&g, text, strlen(text), NULL);
    CHECK(st == SP_OK, "compile %s: %s", text, sp_error_message());
    return g;
}

static bool accepts(struct sp_grammar *g, const char *s, size_t n)
{
    sp_grammar_state st = sp_grammar_feed(g, sp_grammar_start(g), s, n);
    return sp_grammar_accepting(g, st);
}

static bool prefix_ok(struct sp_grammar *g, const char *s)
{
    return sp_grammar_feed(g, sp_grammar_start(g), s, strlen(s)) != SP_GRAMMAR_DEAD;
}

struct lang_case {
    const char *grammar;
    const char *yes[8];
    const char *no[8];
};

static const struct lang_case lang_cases[] = {
    {"root ::= \"a\" | \"bc\"", {"a", "bc"}, {"", "b", "ab", "bcc", "c"}},
    {"root ::= [a-c]+ \"!\"", {"a!", "abcabc!"}, {"!", "d!", "a", "a!!"}},
    {"root ::= \"x\"{2,3}", {"xx", "xxx"}, {"x", "xxxx", ""}},
    {"root ::= \"x\"{2}", {"xx"}, {"x", "xxx"}},
    {"root ::= \"x\"{2,} \"y\"?", {"xx", "xxxxy", "xxy"}, {"x", "xy", "y"}},
    {"root ::= [^a-z]", {"A", "0", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}, {"a", "z", "AA", ""}},
    {"root ::= .", {"a", "\n", "\xc3\xa9", "\xf4\x8f\xbf\xbf"}, {"", "ab", "\xc3", "\xed\xa0\x80", "\xff"}},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+ # digits\n", {"1", "12,3,456"}, {"", ",", "1,", "1,,2"}},
    {"root ::= ( \"(\" root \")\" )*", {"", "()", "(())()", "((()))"}, {"(", ")", "(()", "())"}},
    {"root ::= \"\\x41\\u00e9\\n\\t\\\\\\\"\"", {"A\xc3\xa9\n\t\\\""}, {"A"}},
    {"root ::= [\\x00-\\x1f\\-\\]]", {"\x01", "-", "]"}, {"a", "\\"}},
    {"root ::=\n  a\n  | b\na ::= \"a\"\nb ::= \"b\" b?", {"a", "b", "bbb"}, {"ab", ""}},
    {"root ::= \"\\u4e2d\"+", {"\xe4\xb8\xad", "\xe4\xb8\xad\xe4\xb8\xad"}, {"\xe4\xb8", ""}},
    {"root ::= x? y\nx ::= \"\"\ny ::= \"y\"", {"y"}, {"", "yy"}},
    /* alternatives inside a bounded repetition: their end states merge */
    {"root ::= ( \"a\" | \"b\" \"c\" ){0,3} \"d\"", {"d", "ad", "bcad", "aaad", "bcbcbcd"},
     {"aaaad", "bd", "", "abd"}},
};

static void test_languages(void)
{
    for (size_t i = 0; i < sizeof lang_cases / sizeof lang_cases[0]; i++) {
        const struct lang_case *c = &lang_cases[i];
        struct sp_grammar *g = compile(c->grammar);
        if (!g)
            continue;
        for (int k = 0; k < 8 && c->yes[k]; k++)
            CHECK(accepts(g, c->yes[k], strlen(c->yes[k])), "%s should accept '%s'", c->grammar, c->yes[k]);
        for (int k = 0; k < 8 && c->no[k]; k++)
            CHECK(!accepts(g, c->no[k], strlen(c->no[k])), "%s should refuse '%s'", c->grammar, c->no[k]);
        sp_grammar_free(g);
    }
    /* prefixes of a sentence stay alive, others die at once */
    struct sp_grammar *g = compile("root ::= \"{\" [0-9]+ \"}\"");
    CHECK(prefix_ok(g, "{1"), "prefix {1");
    CHECK(!prefix_ok(g, "{x"), "prefix {x");
    CHECK(!prefix_ok(g, "{}"), "prefix {}");
    sp_grammar_free(g);
}

struct err_case {
    const char *grammar;
    const char *needle; /* in the message */
};

static const struct err_case err_cases[] = {
    {"root ::= \"a", "line 1, column 10: unterminated string literal"},
    {"root ::= [a-", "unterminated character class"},
    {"root ::= foo", "line 1, column 10: rule 'foo' is used but not defined"},
    {"root ::= \"a\"\n\nx ::= (\"b\"", "line 3, column"},
    {"root ::= root \"a\"", "rule 'root' is left-recursive"},
    {"root ::= a\na ::= \"b\"? root", "left-recursive"},
    {"root ::= \"a\" root", "matches no finite string"},
    {"start ::= \"a\"", "no rule named 'root'"},
    {"root ::= \"a\"{3,2}", "maximum below its minimum"},
    {"root ::= [z-a]", "range is reversed"},
    {"root ::= \"\\q\"", "unknown escape"},
    {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
    {"", "empty"},
    {"root ::= (\"a\"{1000}){1000}", "automaton states"},
    {"root = \"a\"", "expected '::='"},
};

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof err_cases / sizeof err_cases[0]; i++) {
        struct sp_grammar *g = NULL;
        sp_status st = sp_grammar_compile(&g, err_cases[i].grammar, strlen(err_cases[i].grammar), NULL);
        CHECK(st == SP_ERR_ARG && !g, "'%s' should fail", err_cases[i].grammar);
        CHECK(strstr(sp_error_message(), err_cases[i].needle) != NULL, "'%s': message '%s' lacks '%s'",
              err_cases[i].grammar, sp_error_message(), err_cases[i].needle);
        sp_grammar_free(g);
    }
}

/* ---- masks against the oracle ---- */

static const char *small_vocab[] = {
    "{", "}", "{\"", "\"", "\":", "a", "ab", "abc", "b", "1", "12", "123", ",", ",\"", "\"}",
    "}\n", " ", "\"a", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "x", "[", "]", "[1", "1]",
    "true", "tr", "ue", "null", "\"\"", "\\", "\\n", "", /* empty: never allowed */
    "<end>", "<", "t>", "<t>", "</t>", "a<t", ">", "<t>a", "t",
};

struct vocab {
    struct sp_grammar_tokens *t;
    uint32_t n;
    uint32_t lens[64];
    uint8_t kinds[64];
};

static void vocab_init(struct vocab *v)
{
    v->n = sizeof small_vocab / sizeof small_vocab[0];
    for (uint32_t i = 0; i < v->n; i++) {
        v->lens[i] = (uint32_t)strlen(small_vocab[i]);
        v->kinds[i] = !strcmp(small_vocab[i], "<end>") ? SP_GRAMMAR_TOKEN_END : SP_GRAMMAR_TOKEN_TEXT;
    }
    sp_status st = sp_grammar_tokens_init(&v->t, v->n, small_vocab, v->lens, v->kinds);
    CHECK(st == SP_OK, "tokens: %s", sp_error_message());
}

/* Compares the mask at state s with the oracle; returns allowed count. */
static uint32_t check_mask(struct sp_grammar *g, struct vocab *v, sp_grammar_state s, const char *what)
{
    const uint64_t *m = NULL;
    uint32_t n_allowed = 0;
    sp_status st = sp_grammar_mask(g, s, &m, &n_allowed);
    uint32_t oracle = 0;
    for (uint32_t i = 0; i < v->n; i++) {
        bool want;
        if (v->kinds[i] == SP_GRAMMAR_TOKEN_END)
            want = sp_grammar_accepting(g, s);
        else
            want = v->lens[i] > 0 && sp_grammar_feed(g, s, small_vocab[i], v->lens[i]) != SP_GRAMMAR_DEAD;
        oracle += want;
        bool got = st == SP_OK && (m[i >> 6] >> (i & 63) & 1);
        CHECK(got == want, "%s: token '%s' mask %d oracle %d", what, small_vocab[i], got, want);
        if (st == SP_OK && want) /* the state after it agrees with feeding */
            CHECK(sp_grammar_advance(g, s, (sp_token)i) ==
                      (v->kinds[i] == SP_GRAMMAR_TOKEN_END ? s : sp_grammar_feed(g, s, small_vocab[i], v->lens[i])),
                  "%s: advance over '%s'", what, small_vocab[i]);
    }
    CHECK(st == SP_OK ? n_allowed == oracle : oracle == 0, "%s: %u allowed, oracle %u (%s)", what, n_allowed,
          oracle, st == SP_OK ? "ok" : sp_error_message());
    return oracle;
}

static const char *mask_grammars[] = {
    "root ::= \"{\" ( pair (\",\" pair)* )? \"}\"\npair ::= str \":\" val\nstr ::= \"\\\"\" [a-z\\xe9]* \"\\\"\"\n"
    "val ::= [0-9]+ | str | \"true\" | \"null\" | \"[\" ( val (\",\" val)* )? \"]\" | root",
    "root ::= \"abc\" | \"a\" \"b\"+ | [^a]",
    "root ::= (\"\\u00e9\" | \"\\u20ac\")* \"x\"",
    "root ::= item+\nitem ::= \"1\" | \"12\" | \"2\" | \"3\"",
    "root ::= \"\\\"\" ( [^\"\\\\] | \"\\\\n\" )* \"\\\"\"",
};

/* Random walks from the start: at each step check the mask, then take a
 * random allowed token. */
static void random_walks(struct sp_grammar *g, struct vocab *v, const char *label, int walks, uint64_t *rng)
{
    for (int walk = 0; walk < walks; walk++) {
        sp_grammar_state s = sp_grammar_start(g);
        for (int step = 0; step < 12; step++) {
            char what[96];
            snprintf(what, sizeof what, "%s walk %d step %d", label, walk, step);
            uint32_t n = check_mask(g, v, s, what);
            if (!n)
                break;
            const uint64_t *m;
            sp_grammar_mask(g, s, &m, NULL);
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t pick = (uint32_t)(*rng >> 33) % n, k = 0;
            sp_token t = -1;
            for (uint32_t i = 0; i < v->n; i++)
                if ((m[i >> 6] >> (i & 63) & 1) && k++ == pick)
                    t = (sp_token)i;
            if (v->kinds[t] == SP_GRAMMAR_TOKEN_END)
                break;
            s = sp_grammar_advance(g, s, t);
            CHECK(s != SP_GRAMMAR_DEAD, "%s: advanced into DEAD over '%s'", what, small_vocab[t]);
        }
    }
}

static void test_masks(void)
{
    struct vocab v;
    vocab_init(&v);
    if (!v.t)
        return;
    uint64_t rng = 42;
    for (size_t gi = 0; gi < sizeof mask_grammars / sizeof mask_grammars[0]; gi++) {
        struct sp_grammar *g = compile(mask_grammars[gi]);
        if (!g)
            continue;
        sp_status st = sp_grammar_bind(g, v.t);
        CHECK(st == SP_OK, "bind: %s", sp_error_message());
        char label[48];
        snprintf(label, sizeof label, "grammar %zu", gi);
        if (st == SP_OK)
            random_walks(g, &v, label, 40, &rng);
        struct sp_grammar_stats gs;
        sp_grammar_stats(g, &gs);
        CHECK(gs.mask_hits > 0 && gs.mask_misses > 0, "cache used: %llu hits %llu misses",
              (unsigned long long)gs.mask_hits, (unsigned long long)gs.mask_misses);
        /* a copy matches alike with its own caches, also once the original is gone */
        struct sp_grammar *c = NULL;
        CHECK(sp_grammar_clone(g, &c) == SP_OK, "clone: %s", sp_error_message());
        sp_grammar_free(g);
        snprintf(label, sizeof label, "copy of grammar %zu", gi);
        if (c)
            random_walks(c, &v, label, 20, &rng);
        sp_grammar_free(c);
    }
    /* a grammar that needs a byte no token has: a clear error, not a hang */
    struct sp_grammar *g = compile("root ::= \"a\" \"Q\"");
    if (g && sp_grammar_bind(g, v.t) == SP_OK) {
        sp_grammar_state s = sp_grammar_feed(g, sp_grammar_start(g), "a", 1);
        const uint64_t *m;
        sp_status st = sp_grammar_mask(g, s, &m, NULL);
        CHECK(st == SP_ERR_ARG && strstr(sp_error_message(), "no token"), "dead end: %s", sp_error_message());
    }
    sp_grammar_free(g);
    sp_grammar_tokens_free(v.t);
}

/* Merged states: x{0,30} of a two-way alternative keeps about one state
 * per copy, not three. */
static void test_minimize(void)
{
    struct sp_grammar *g = compile("root ::= ( [a-z] | \"\\\\\" [nt] ){0,30} \"x\"");
    if (!g)
        return;
    struct sp_grammar_stats gs;
    sp_grammar_stats(g, &gs);
    CHECK(gs.n_states <= 2 * 30 + 4, "%u states for 30 copies", gs.n_states);
    CHECK(accepts(g, "ab\\nx", 5) && !accepts(g, "a\\x", 3), "language kept");
    sp_grammar_free(g);
}

/* Many distinct byte sets (300 classes) whose edges merge once their targets
 * do: minimizing unites them into sets it has not seen (a table of sets
 * sized for all of them, not for a few). */
static void test_minimize_many_sets(void)
{
    char *text = malloc(300 * 24 + 32);
    if (!text)
        return;
    size_t n = (size_t)sprintf(text, "root ::= ( ");
    for (int i = 0; i < 300; i++) {
        int lo = 0x21 + i / 80, hi = lo + 1 + i % 80;
        n += (size_t)sprintf(text + n, "%s[\\x%02X-\\x%02X] \"x\"", i ? " | " : "", lo, hi);
    }
    sprintf(text + n, " )");
    struct sp_grammar *g = compile(text);
    free(text);
    if (!g)
        return;
    struct sp_grammar_stats gs;
    sp_grammar_stats(g, &gs);
    CHECK(gs.n_states <= 4, "%u states: the 300 alternatives are one edge", gs.n_states);
    CHECK(accepts(g, "!x", 2) && accepts(g, "sx", 2) && !accepts(g, "~x", 2) && !accepts(g, "!", 1),
          "language kept");
    sp_grammar_free(g);
}

/* Lazy grammars: free text, then the grammar from its trigger on. */
static void test_lazy(void)
{
    struct vocab v;
    vocab_init(&v);
    if (!v.t)
        return;
    struct sp_grammar *g = compile("root ::= \"<t>\" [ab]+ \"</t>\"");
    CHECK(g && sp_grammar_set_trigger(g, "<t>", 3) == SP_OK, "trigger: %s", sp_error_message());
    if (!g)
        return;
    CHECK(accepts(g, "", 0) && accepts(g, "x1", 2) && accepts(g, "x<<t>ab</t>", 11), "free text, then a call");
    CHECK(!accepts(g, "x<t>ab", 6) && !prefix_ok(g, "<t>x") && !prefix_ok(g, "1<<t>a</t>1"), "the call is checked");
    CHECK(prefix_ok(g, "<<t") && prefix_ok(g, "tt<t") && prefix_ok(g, "<t<t"), "partial triggers are text");
    CHECK(sp_grammar_set_trigger(g, "<t>", 3) == SP_ERR_ARG, "set once");
    CHECK(sp_grammar_bind(g, v.t) == SP_OK, "bind: %s", sp_error_message());
    uint64_t rng = 7;
    random_walks(g, &v, "lazy", 60, &rng);
    /* "<t>a" completes the trigger and continues; "a<t" only starts it */
    sp_grammar_state s = sp_grammar_start(g);
    check_mask(g, &v, s, "lazy start");
    check_mask(g, &v, sp_grammar_feed(g, s, "<", 1), "lazy after <");
    check_mask(g, &v, sp_grammar_feed(g, s, "<t", 2), "lazy after <t");
    sp_grammar_free(g);
    struct sp_grammar *h = compile("root ::= \"a\" \"<t>\"");
    CHECK(h && sp_grammar_set_trigger(h, "<t>", 3) == SP_ERR_ARG && strstr(sp_error_message(), "do not start"),
          "a grammar must start with its trigger: %s", sp_error_message());
    sp_grammar_free(h);
    sp_grammar_tokens_free(v.t);
}

/* The cache: a hit is a copy of the kept grammar; errors are not kept; the
 * least recently used entry goes first. */
static void test_cache(void)
{
    struct vocab v;
    vocab_init(&v);
    struct sp_grammar_cache *c = NULL;
    if (!v.t || sp_grammar_cache_new(&c, v.t, 2) != SP_OK)
        return;
    const char *a = mask_grammars[0], *b = mask_grammars[1], *d = mask_grammars[2];
    struct sp_grammar *g = NULL;
    bool hit = true;
    uint64_t rng = 3;
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && !hit, "miss");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && hit, "hit");
    if (g)
        random_walks(g, &v, "cached", 20, &rng);
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), "{", &g, &hit) == SP_OK && !hit,
          "the trigger is part of the key");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, b, strlen(b), NULL, &g, &hit) == SP_OK && !hit, "b");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, d, strlen(d), NULL, &g, &hit) == SP_OK && !hit, "d");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, b, strlen(b), NULL, &g, &hit) == SP_OK && hit, "b kept");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && !hit, "a evicted");
    sp_grammar_free(g);
    for (int i = 0; i < 2; i++) {
        CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, "root ::= (", 10, NULL, &g, &hit) == SP_ERR_ARG && !g &&
                  !hit, "an error each time");
    }
    uint64_t hits, misses;
    sp_grammar_cache_stats(c, &hits, &misses);
    CHECK(hits == 2 && misses == 7, "%llu hits %llu misses", (unsigned long long)hits, (unsigned long long)misses);
    sp_grammar_cache_free(c);
    sp_grammar_tokens_free(v.t);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Grammar bombs (a few bytes of nested repetition) fail fast with the
 * budget's error instead of compiling for minutes. */
static void test_budget(void)
{
    static const struct {
        char kind;
        const char *text;
    } bombs[] = {
        {'g', "root ::= (.{0,100}){0,100}"},
        {'g', "root ::= (.{0,60}){0,60}"},
        {'s', "{\"type\":\"string\",\"pattern\":\"^(.*){1000}$\"}"},
    };
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        struct sp_grammar *g = NULL;
        const char *t = bombs[i].text;
        double t0 = now_s();
        sp_status st = bombs[i].kind == 'g' ? sp_grammar_compile(&g, t, strlen(t), NULL)
                                            : sp_grammar_compile_schema(&g, t, strlen(t), false);
        double dt = now_s() - t0;
        CHECK(st == SP_ERR_ARG && !g, "'%s' should fail", t);
        CHECK(strstr(sp_error_message(), "limit SP_GRAMMAR_MAX_") != NULL, "'%s': message '%s' names no limit", t,
              sp_error_message());
        CHECK(dt < 1.0, "'%s' took %.2f s", t, dt);
        sp_grammar_free(g);
    }
}

/* The cache's byte budget: entries go least recently used first until the
 * rest fit, and a grammar larger than the budget is handed out, not kept. */
static void test_cache_bytes(void)
{
    struct vocab v;
    vocab_init(&v);
    struct sp_grammar_cache *c = NULL;
    if (!v.t || sp_grammar_cache_new(&c, v.t, 8) != SP_OK)
        return;
    const char *a = mask_grammars[0], *b = mask_grammars[1];
    struct sp_grammar *g = NULL;
    bool hit = true;
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && !hit, "a");
    uint64_t ba = g ? sp_grammar_bytes(g) : 0;
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, b, strlen(b), NULL, &g, &hit) == SP_OK && !hit, "b");
    uint64_t bb = g ? sp_grammar_bytes(g) : 0;
    sp_grammar_free(g);
    CHECK(ba > 0 && bb > 0, "sizes %llu %llu", (unsigned long long)ba, (unsigned long long)bb);
    sp_grammar_cache_set_max_bytes(c, (ba > bb ? ba : bb) + 1); /* room for one: a goes */
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, b, strlen(b), NULL, &g, &hit) == SP_OK && hit, "b kept");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && !hit, "a evicted");
    sp_grammar_free(g);
    CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, b, strlen(b), NULL, &g, &hit) == SP_OK && !hit,
          "b evicted for a");
    sp_grammar_free(g);
    sp_grammar_cache_set_max_bytes(c, 1); /* nothing fits: handed out, never kept */
    for (int i = 0; i < 2; i++) {
        CHECK(sp_grammar_cache_get(c, SP_GRAMMAR_GBNF, a, strlen(a), NULL, &g, &hit) == SP_OK && g && !hit,
              "too large to keep");
        if (g)
            CHECK(sp_grammar_start(g) != SP_GRAMMAR_DEAD, "usable");
        sp_grammar_free(g);
    }
    sp_grammar_cache_free(c);
    sp_grammar_tokens_free(v.t);
}

/* ---- the fast walk against the plain one ----
 * A generated vocabulary of many string-like tokens (letters, digits,
 * spaces, quotes, backslashes, JSON punctuation, UTF-8 letters; shared
 * prefixes): walks that accept trie subtrees whole from the byte summaries
 * and take regions (made by earlier grammars of the vocabulary too) must
 * give the same masks, bit for bit, as walks visiting every node and as
 * every token fed byte by byte. */

#define GEN_VOCAB 3000

static const char *fast_grammars[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\",\"maxLength\":6}},\"n\":{\"type\":\"integer\"},\"k\":{\"enum\":[\"ab\",\"a b\"]}},"
    "\"required\":[\"name\"]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\"}}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}",
    "{\"type\":\"string\",\"pattern\":\"^[a-z \\u00e0-\\u00e8]*$\"}",
    /* a first character that leads to the string's loop: walks take the
     * loop's region below a first UTF-8 character */
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1}}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\",\"minLength\":1}}",
};

static void gen_vocab(char **bytes, uint32_t *lens, uint8_t *kinds, uint64_t *rng)
{
    static const char *pieces[] = {"a", "b", "e", "x", "ab", " ", "  ", "1", "9", "\"", "\\", "\\n", "\\\"",
                                   "{", "}", ":", ",", "[", "]", "\xc3\xa9", "\xe2\x82\xac", "\n", "\t", "_",
                                   "\":", "\",\"", "-", ".", "\xc3", "\xa9", "\xf0\x9f\x98\x80", "\xc3\xa0"};
    static const char *utf8[] = {"\xc3\xa9", "\xc3\xa0", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    const uint32_t n_pieces = sizeof pieces / sizeof pieces[0];
    for (uint32_t i = 0; i < GEN_VOCAB; i++) {
        bytes[i] = malloc(64);
        lens[i] = 0;
        kinds[i] = i == 7 ? SP_GRAMMAR_TOKEN_END : SP_GRAMMAR_TOKEN_TEXT;
        if (!bytes[i])
            continue;
        if (i > 0 && i % 3 == 0 && lens[i - 1] < 40) { /* extend the previous token: deep subtrees */
            memcpy(bytes[i], bytes[i - 1], lens[i - 1]);
            lens[i] = lens[i - 1];
        }
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t n = 1 + (uint32_t)(*rng >> 60) % 6;
        for (uint32_t k = 0; k < n; k++) {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(*rng >> 33) % 100;
            /* mostly string characters, ASCII (which the JSON string state loops
             * on) or UTF-8 (which lead back to it) */
            const char *p = r < 60 ? pieces[r % 8] : r < 80 ? utf8[r % 4] : pieces[(uint32_t)(*rng >> 12) % n_pieces];
            size_t pl = strlen(p);
            if (lens[i] + pl <= 56) {
                memcpy(bytes[i] + lens[i], p, pl);
                lens[i] += (uint32_t)pl;
            }
        }
    }
}

/* The mask m of state s against every token fed byte by byte: a text
 * token is allowed when its bytes keep s alive, the end token (7) when s
 * accepts. */
static void brute_force(struct sp_grammar *g, sp_grammar_state s, const uint64_t *m, char **bytes,
                        const uint32_t *lens, const char *label, int walk, int step)
{
    uint32_t wrong = 0, first = 0;
    for (uint32_t i = 0; i < GEN_VOCAB; i++) {
        bool ok = i == 7 ? sp_grammar_accepting(g, s)
                         : lens[i] && sp_grammar_feed(g, s, bytes[i], lens[i]) != SP_GRAMMAR_DEAD;
        if (ok != (bool)(m[i >> 6] >> (i & 63) & 1) && !wrong++)
            first = i;
    }
    CHECK(!wrong, "%s walk %d step %d: %u tokens against brute force (first %u)", label, walk, step, wrong, first);
}

static void compare_walks(struct sp_grammar *fast, struct sp_grammar *plain, char **bytes, const uint32_t *lens,
                          const char *label, uint64_t *rng)
{
    for (int walk = 0; walk < 25; walk++) {
        sp_grammar_state sf = sp_grammar_start(fast), sp = sp_grammar_start(plain);
        for (int step = 0; step < 10; step++) {
            const uint64_t *mf = NULL, *mp = NULL;
            uint32_t nf = 0, np = 0;
            sp_status stf = sp_grammar_mask(fast, sf, &mf, &nf);
            sp_status stp = sp_grammar_mask(plain, sp, &mp, &np);
            CHECK(stf == stp && nf == np, "%s walk %d step %d: fast %d/%u plain %d/%u", label, walk, step, stf, nf,
                  stp, np);
            if (stf != SP_OK || stp != SP_OK || nf != np)
                break;
            CHECK(!memcmp(mf, mp, (GEN_VOCAB + 63) / 64 * 8), "%s walk %d step %d: masks differ", label, walk, step);
            brute_force(fast, sf, mf, bytes, lens, label, walk, step);
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t pick = (uint32_t)(*rng >> 33) % nf, k = 0;
            sp_token t = -1;
            for (uint32_t i = 0; i < GEN_VOCAB && t < 0; i++)
                if ((mf[i >> 6] >> (i & 63) & 1) && k++ == pick)
                    t = (sp_token)i;
            if (t == 7) /* the end token */
                break;
            sf = sp_grammar_advance(fast, sf, t);
            sp = sp_grammar_advance(plain, sp, t);
        }
    }
}

static void test_fast_walk(void)
{
    char *bytes[GEN_VOCAB];
    uint32_t lens[GEN_VOCAB];
    uint8_t kinds[GEN_VOCAB];
    uint64_t rng = 7;
    gen_vocab(bytes, lens, kinds, &rng);
    struct sp_grammar_tokens *t = NULL;
    CHECK(sp_grammar_tokens_init(&t, GEN_VOCAB, (const char *const *)bytes, lens, kinds) == SP_OK, "tokens: %s",
          sp_error_message());
    uint64_t whole = 0, region = 0;
    size_t n_schemas = sizeof fast_grammars / sizeof fast_grammars[0];
    size_t n_gbnf = sizeof mask_grammars / sizeof mask_grammars[0];
    for (size_t gi = 0; t && gi < n_schemas + n_gbnf; gi++) {
        struct sp_grammar *g[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            sp_status st = gi < n_schemas
                               ? sp_grammar_compile_schema(&g[k], fast_grammars[gi], strlen(fast_grammars[gi]), 0)
                               : sp_grammar_compile(&g[k], mask_grammars[gi - n_schemas],
                                                    strlen(mask_grammars[gi - n_schemas]), NULL);
            CHECK(st == SP_OK, "compile %zu: %s", gi, sp_error_message());
            CHECK(st != SP_OK || sp_grammar_bind(g[k], t) == SP_OK, "bind %zu: %s", gi, sp_error_message());
        }
        if (g[0] && g[1]) {
            sp_grammar_set_plain_walk(g[1], true);
            char label[32];
            snprintf(label, sizeof label, "fast walk %zu", gi);
            compare_walks(g[0], g[1], bytes, lens, label, &rng);
            struct sp_grammar_stats s0, s1;
            sp_grammar_stats(g[0], &s0);
            sp_grammar_stats(g[1], &s1);
            CHECK(s1.n_whole == 0, "%s: the plain walk took %llu subtrees whole", label,
                  (unsigned long long)s1.n_whole);
            whole += s0.n_whole;
            region += s0.n_region;
        }
        sp_grammar_free(g[0]);
        sp_grammar_free(g[1]);
    }
    CHECK(whole > 100, "the fast walk took only %llu subtrees whole", (unsigned long long)whole);
    CHECK(region > 20, "the fast walk took only %llu first-level subtrees from regions", (unsigned long long)region);
    sp_grammar_tokens_free(t);
    for (uint32_t i = 0; i < GEN_VOCAB; i++)
        free(bytes[i]);
}

int main(void)
{
    test_languages();
    test_errors();
    test_masks();
    test_fast_walk();
    test_minimize();
    test_minimize_many_sets();
    test_lazy();
    test_cache();
    test_budget();
    test_cache_bytes();
    return sp_check_report("test_grammar");
}
