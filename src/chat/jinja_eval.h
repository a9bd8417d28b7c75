/* The Jinja2-subset evaluator (jinja_eval.c): runs a parsed template. */
#ifndef SP_CHAT_JINJA_EVAL_H
#define SP_CHAT_JINJA_EVAL_H

#include "chat/jinja.h"

/* Binds name to v in scope s (replacing an existing binding there). */
int jscope_define(struct jctx *c, struct jscope *s, const char *name, struct jval v);

/* Runs the root node, appending output to c->out. */
int jexec_root(struct jctx *c, struct jnode *root);

#endif
