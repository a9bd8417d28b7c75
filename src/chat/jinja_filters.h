/* Filters, tests and methods of the Jinja2 subset (jinja_filters.c), each
 * found by name in a table of {name, function}.  Above the value layer
 * (jinja.h); the parser asks which names exist, the evaluator applies them. */
#ifndef SP_CHAT_JINJA_FILTERS_H
#define SP_CHAT_JINJA_FILTERS_H

#include "chat/jinja.h"

/* Evaluated arguments of a call: positional, then keyword. */
struct jargs {
    struct jval *pos; size_t npos;
    const char **kwn; struct jval *kw; size_t nkw;
};

/* v | name(a) */
int jfilter_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                  const struct jargs *a, struct jval *out);
/* v is name(a) */
int jtest_apply(struct jctx *c, const struct jnode *at, const char *name, struct jval v,
                const struct jargs *a, bool *out);
/* Whether jinja2 has a built-in filter/test of that name (some filters
 * exist but fail when run: see the table). */
bool jfilter_known(const char *name);
bool jtest_known(const char *name);
/* Methods of str, dict, list and loop objects: s.strip(), d.get(k),
 * loop.cycle(...); the sandbox's refusal of list.append() and the like. */
int jmethod_call(struct jctx *c, const struct jnode *at, struct jval obj, const char *name,
                 const struct jargs *a, struct jval *out);

#endif
