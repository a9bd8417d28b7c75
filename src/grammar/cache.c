/* Compiled and bound grammars kept by their text (see grammar.h).
 *
 * A request that sends the schema of the one before it gets a copy of the
 * grammar already bound (sp_grammar_clone: shared tables, fresh matching
 * state) instead of compiling and binding again.  Entries are few and
 * large, so they live in a small array scanned under one mutex; the least
 * recently used goes when the array is full or the entries' bytes
 * (sp_grammar_bytes) pass the budget, and a grammar over the whole budget
 * is handed out without being kept.  Compiling happens outside the
 * lock: two threads missing on one text at once both compile, and the
 * second keeps the first's entry. */
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"

struct entry {
    uint64_t hash, last_use, bytes;
    char *key;       /* kind, trigger, NUL, text */
    size_t key_len;
    struct sp_grammar *g;
};

struct sp_grammar_cache {
    pthread_mutex_t mu;
    const struct sp_grammar_tokens *toks;
    struct entry *e;
    uint32_t n, cap;
    uint64_t clock, hits, misses;
    uint64_t bytes, max_bytes; /* kept, and the budget */
};

/* The calling thread's stop check (grammar.h); `hit` once it said stop. */
static _Thread_local struct {
    bool (*fn)(void *ctx);
    void *ctx;
    bool hit, late;    /* late: stopped by the compile's time limit */
    double deadline;   /* CLOCK_MONOTONIC seconds; 0: none */
} sp_grammar_stop;

static double sp_grammar_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sp_grammar_stop_set(bool (*fn)(void *ctx), void *ctx)
{
    sp_grammar_stop.fn = fn;
    sp_grammar_stop.ctx = ctx;
    sp_grammar_stop.hit = false;
}

bool sp_grammar_stop_now(void)
{
    if (sp_grammar_stop.hit || sp_grammar_stop.late)
        return true;
    if (sp_grammar_stop.deadline > 0 && sp_grammar_clock() > sp_grammar_stop.deadline)
        sp_grammar_stop.late = true;
    else if (sp_grammar_stop.fn)
        sp_grammar_stop.hit = sp_grammar_stop.fn(sp_grammar_stop.ctx);
    return sp_grammar_stop.hit || sp_grammar_stop.late;
}

bool sp_grammar_stop_poll(uint64_t work)
{
    if (work % SP_GRAMMAR_STOP_EVERY == 0)
        return sp_grammar_stop_now();
    return sp_grammar_stop.hit || sp_grammar_stop.late;
}

sp_status sp_grammar_prepare(enum sp_grammar_kind kind, const char *text, size_t len, const char *trigger,
                             const struct sp_grammar_tokens *t, struct sp_grammar **out)
{
    sp_grammar_stop.hit = sp_grammar_stop.late = false;
    sp_grammar_stop.deadline = sp_grammar_clock() + SP_GRAMMAR_MAX_COMPILE_MS / 1000.0;
    unsigned opts = (kind == SP_GRAMMAR_SCHEMA_FLEX || kind == SP_GRAMMAR_SCHEMA_STRICT_FLEX ? SP_SCHEMA_FLEX : 0) |
                    (kind == SP_GRAMMAR_SCHEMA_STRICT || kind == SP_GRAMMAR_SCHEMA_STRICT_FLEX ? SP_SCHEMA_CLOSED : 0);
    sp_status st = kind != SP_GRAMMAR_GBNF ? sp_grammar_compile_schema(out, text, len, opts)
                                           : sp_grammar_compile(out, text, len, NULL);
    if (st == SP_OK && trigger)
        st = sp_grammar_set_trigger(*out, trigger, strlen(trigger));
    if (st == SP_OK && t)
        st = sp_grammar_bind(*out, t);
    if (st != SP_OK) {
        sp_grammar_free(*out);
        *out = NULL;
        if (sp_grammar_stop.hit) /* failed as over budget when told to stop */
            st = sp_error_set(SP_ERR_CANCELLED, "grammar: compile stopped by the caller");
        else if (sp_grammar_stop.late)
            st = sp_error_set(SP_ERR_ARG, "grammar: too large to compile: more than %d ms of work (limit "
                              "SP_GRAMMAR_MAX_COMPILE_MS)", SP_GRAMMAR_MAX_COMPILE_MS);
    }
    sp_grammar_stop.deadline = 0;
    sp_grammar_stop.late = false;
    return st;
}

sp_status sp_grammar_cache_new(struct sp_grammar_cache **out, const struct sp_grammar_tokens *t,
                               uint32_t max_entries)
{
    struct sp_grammar_cache *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c || !(c->e = calloc(max_entries ? max_entries : 1, sizeof *c->e))) {
        free(c);
        return sp_error_set(SP_ERR_NOMEM, "grammar cache: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->toks = t;
    c->cap = max_entries ? max_entries : 1;
    c->max_bytes = SP_GRAMMAR_CACHE_BYTES;
    *out = c;
    return SP_OK;
}

void sp_grammar_cache_free(struct sp_grammar_cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n; i++) {
        free(c->e[i].key);
        sp_grammar_free(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 0x100000001b3ull;
    return h;
}

/* The entry holding key, or NULL (under the lock). */
static struct entry *find(struct sp_grammar_cache *c, uint64_t h, const char *key, size_t n)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].key_len == n && !memcmp(c->e[i].key, key, n))
            return &c->e[i];
    return NULL;
}

/* Drops the least recently used entry (under the lock; c->n > 0). */
static void evict_one(struct sp_grammar_cache *c)
{
    struct entry *e = &c->e[0];
    for (uint32_t i = 1; i < c->n; i++)
        if (c->e[i].last_use < e->last_use)
            e = &c->e[i];
    free(e->key);
    sp_grammar_free(e->g);
    c->bytes -= e->bytes;
    *e = c->e[--c->n];
}

/* Evicts least recently used entries until `extra` more bytes and one more
 * entry fit (under the lock). */
static void make_room(struct sp_grammar_cache *c, uint64_t extra, uint32_t entries)
{
    while (c->n && (c->n + entries > c->cap || c->bytes + extra > c->max_bytes))
        evict_one(c);
}

/* Keeps g under key (taking both), evicting least recently used entries
 * until it fits; returns the entry (under the lock).  The caller has checked
 * that g alone fits the byte budget. */
static struct entry *insert(struct sp_grammar_cache *c, uint64_t h, char *key, size_t n, struct sp_grammar *g,
                            uint64_t bytes)
{
    make_room(c, bytes, 1);
    struct entry *e = &c->e[c->n++];
    *e = (struct entry){h, 0, bytes, key, n, g};
    c->bytes += bytes;
    return e;
}

void sp_grammar_cache_set_max_bytes(struct sp_grammar_cache *c, uint64_t max_bytes)
{
    pthread_mutex_lock(&c->mu);
    c->max_bytes = max_bytes ? max_bytes : SP_GRAMMAR_CACHE_BYTES;
    make_room(c, 0, 0);
    pthread_mutex_unlock(&c->mu);
}

sp_status sp_grammar_cache_get(struct sp_grammar_cache *c, enum sp_grammar_kind kind, const char *text, size_t len,
                               const char *trigger, struct sp_grammar **out, bool *hit)
{
    size_t tl = trigger ? strlen(trigger) : 0, n = 1 + tl + 1 + len;
    char *key = malloc(n);
    sp_status st;
    *out = NULL;
    if (hit)
        *hit = false;
    if (!key)
        return sp_error_set(SP_ERR_NOMEM, "grammar cache: out of memory");
    key[0] = (char)kind;
    memcpy(key + 1, trigger ? trigger : "", tl);
    key[1 + tl] = '\0';
    memcpy(key + 2 + tl, text, len);
    uint64_t h = key_hash(key, n);
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, h, key, n);
    if (e) {
        e->last_use = ++c->clock;
        c->hits++;
        st = sp_grammar_clone(e->g, out);
        pthread_mutex_unlock(&c->mu);
        free(key);
        if (hit)
            *hit = true;
        return st;
    }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    struct sp_grammar *g = NULL;
    if ((st = sp_grammar_prepare(kind, text, len, trigger, c->toks, &g)) != SP_OK) {
        free(key);
        return st;
    }
    uint64_t bytes = sp_grammar_bytes(g);
    pthread_mutex_lock(&c->mu);
    e = find(c, h, key, n);
    if (e) { /* another thread compiled it meanwhile */
        sp_grammar_free(g);
        free(key);
    } else if (bytes > c->max_bytes) { /* too large to keep: this request has it alone */
        pthread_mutex_unlock(&c->mu);
        free(key);
        *out = g;
        return SP_OK;
    } else {
        e = insert(c, h, key, n, g, bytes);
    }
    e->last_use = ++c->clock;
    st = sp_grammar_clone(e->g, out);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void sp_grammar_cache_stats(struct sp_grammar_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
