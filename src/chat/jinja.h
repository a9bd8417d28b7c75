/* Internal interface of the Jinja2-subset interpreter behind chat.h: the
 * types every part shares and the value layer (jinja_value.c).
 *
 * The parts stack without cycles, each calling only those below it:
 *   jinja_value.c    arena, errors, values, access   (this header)
 *   jinja_filters.c  filters, tests, methods         (jinja_filters.h)
 *   jinja_parse.c    lexer and parser                (jinja_parse.h)
 *   jinja_eval.c     evaluator                       (jinja_eval.h)
 *   chat.c           the environment and sp_chat_render.
 *
 * Everything a render allocates (tokens, AST, values, scopes) lives in one
 * arena freed at the end of the render, so values are plain structs holding
 * pointers and need no reference counting.  Functions that can fail return
 * -1 after recording a message in the context (first error wins) and 0 on
 * success. */
#ifndef SP_CHAT_JINJA_H
#define SP_CHAT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* ---- arena ---------------------------------------------------------------- */
struct jarena_block;
struct jarena {
    struct jarena_block *head;
    size_t used_total; /* bytes handed out, capped at SP_CHAT_MAX_MEMORY */
    bool nomem;        /* malloc failed (vs. the cap was hit) */
};
void *jarena_alloc(struct jarena *a, size_t n); /* zeroed; NULL on cap/OOM */
void jarena_free(struct jarena *a);

/* ---- values ---------------------------------------------------------------- */
enum jtype {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_DICT, JV_NS, JV_MACRO, JV_FUNC, JV_LOOP,
};

struct jlist;
struct jdict;
struct jmacro;
struct jloop;

struct jval {
    enum jtype t;
    bool markup; /* JV_STR made by |safe (markupsafe.Markup): `+` escapes a plain str it meets */
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s; /* UTF-8, not NUL-terminated */
        struct jlist *l;
        struct jdict *d;                       /* JV_DICT and JV_NS */
        struct jmacro *m;
        int fn;                                /* JV_FUNC: enum jfunc */
        struct jloop *loop;
    } u;
    const char *uname; /* JV_UNDEF: the missing name, for messages (may be NULL) */
};

struct jlist {
    size_t n, cap;
    struct jval *v;
    bool tuple;
    bool gen;           /* a Python generator/iterator (jinja2 filters return these) */
    const char *poison; /* generator whose iteration raises this (jinja2 errors lazily) */
};
struct jdict { size_t n, cap; struct jval *k, *v; };

enum jfunc { JF_RAISE, JF_STRFTIME, JF_NAMESPACE, JF_RANGE, JF_DICT };

/* ---- AST ------------------------------------------------------------------- */
enum jnode_kind {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE,
    JN_CALL, JN_FILTER, JN_TEST, JN_UNARY, JN_BINARY, JN_AND, JN_OR, JN_NOT,
    JN_COMPARE, JN_COND,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_FILTERBLOCK,
    JN_BREAK, JN_CONTINUE,
};

enum jop {
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_CONCAT,
    JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN, JO_NEG, JO_POS,
};

struct jnode {
    enum jnode_kind kind;
    int line, col;
    int op;                    /* enum jop; JN_TEST: 1 when negated ("is not") */
    struct jval lit;           /* JN_LIT, JN_TEXT (string) */
    const char *name;          /* NUL-terminated: JN_NAME, attr, filter/test/macro name */
    struct jnode *a, *b, *c;   /* operands; JN_SLICE: a[b:c:d] with d in `d` */
    struct jnode *d;
    struct jnode **args; size_t nargs;       /* call/filter/test args, list items, body */
    const char **kwnames; struct jnode **kwargs; size_t nkw; /* keyword args, dict */
    struct jnode **body; size_t nbody;       /* statements */
    struct jnode **alt; size_t nalt;         /* else/elif branch statements */
    const char **targets; size_t ntargets;   /* for/set targets, macro params */
};

/* ---- render context -------------------------------------------------------- */
struct jbuf { char *p; size_t n, cap; };

struct jscope {
    struct jscope *parent;
    size_t n, cap;
    const char **names;
    struct jval *vals;
};

struct jctx {
    struct jarena arena;
    const char *src;
    char err[256];
    bool failed;
    uint64_t steps;
    int depth;          /* current eval/exec recursion depth */
    int macro_depth;
    int64_t now_unix;   /* <0: use the local current time */
    struct jbuf *out;   /* where output goes (swapped while capturing) */
    struct jscope *globals;
    struct jscope *top;  /* template-level scope (parent of macro scopes) */
    int loop_ctl;       /* 1 break, 2 continue pending */
};

/* Records the first error of a render (at a node's or a source position;
 * line 0: none) and returns -1. */
int jerr(struct jctx *c, const struct jnode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int jerr_pos(struct jctx *c, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The error of using undefined value v where a value is needed. */
int jerr_undef(struct jctx *c, const struct jnode *at, struct jval v);

/* ---- value helpers (jinja_value.c) ----------------------------------------- */
struct jval jv_undef(const char *name);
struct jval jv_none(void);
struct jval jv_bool(bool b);
struct jval jv_int(int64_t i);
struct jval jv_float(double f);
struct jval jv_strn(const char *p, size_t n);
int jv_str_dup(struct jctx *c, const char *p, size_t n, struct jval *out);
struct jlist *jlist_new(struct jctx *c, size_t cap);
int jlist_push(struct jctx *c, struct jlist *l, struct jval v);
struct jdict *jdict_new(struct jctx *c, size_t cap);
int jdict_set(struct jctx *c, struct jdict *d, struct jval k, struct jval v);
struct jval *jdict_get(struct jdict *d, struct jval k);
struct jval *jdict_gets(struct jdict *d, const char *key);

bool jv_truthy(struct jval v);
bool jv_equal(struct jval a, struct jval b);
/* -2 on incomparable types (caller raises), else -1/0/1. */
int jv_compare(struct jval a, struct jval b);
const char *jv_type_name(struct jval v);

int jbuf_put(struct jctx *c, struct jbuf *b, const char *p, size_t n);
int jbuf_puts(struct jctx *c, struct jbuf *b, const char *s);
/* str(v) as Python prints it (None, True, 1.5, ['a'], {'k': 1}); "" for undefined. */
int jv_to_str(struct jctx *c, struct jval v, struct jbuf *b);
int jv_stringify(struct jctx *c, struct jval v, struct jval *out);
/* json.dumps(v, ensure_ascii=False, indent=indent) (indent<0: none). */
int jv_to_json(struct jctx *c, const struct jnode *at, struct jval v, int indent, int level,
               struct jbuf *b);
/* Python float repr. */
void jfloat_repr(double f, char *buf, size_t cap);

/* ---- access ------------------------------------------------------------------ */
struct jmacro { const struct jnode *def; struct jscope *closure; };
struct jloop { struct jlist *items; size_t i; };

/* An int or bool as an index. */
bool jv_index(struct jval k, int64_t *i);

/* Python-style iteration: list/tuple items, dict keys, string characters;
 * undefined iterates as empty; anything else is an error. */
int jv_iterate(struct jctx *c, const struct jnode *at, struct jval v, struct jlist **out);
/* obj.name as jinja2's getattr does it (undefined when missing). */
int jv_getattr(struct jctx *c, const struct jnode *at, struct jval obj, const char *name,
               struct jval *out);
/* obj[key] as jinja2's getitem does it (undefined when missing). */
int jv_getitem(struct jctx *c, const struct jnode *at, struct jval obj, struct jval key,
               struct jval *out);

/* UTF-8 code point helpers: count and byte offset of code point i. */
size_t jutf8_len(const char *p, size_t n);
size_t jutf8_offset(const char *p, size_t n, size_t cp_index);

#endif
