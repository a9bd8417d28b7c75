/* The Jinja2-subset parser (jinja_parse.c): source -> AST (jinja.h). */
#ifndef SP_CHAT_JINJA_PARSE_H
#define SP_CHAT_JINJA_PARSE_H

#include "chat/jinja.h"

/* Parses NUL-terminated source (already newline-normalised by the caller)
 * into a root statement list; rejects unknown filter and test names where
 * jinja2 does at compile time. */
int jparse(struct jctx *c, const char *src, struct jnode **root);

#endif
