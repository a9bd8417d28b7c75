/* Shared by the files of src/toolcall (not an interface for other rooms). */
#ifndef SP_TOOLCALL_INTERNAL_H
#define SP_TOOLCALL_INTERNAL_H

#include "toolcall/toolcall.h"

struct sp_toolcall_parser;

/* How one family of templates writes calls.  The calls of one answer are
 *   begin open CALL close [sep open CALL close]... end
 * where CALL is a JSON object {"name": ..., <args_key>: {...}} (with an
 * optional "id" when call_id), unless the row's own grammar and byte
 * functions read another syntax (Harmony: the name in the message header,
 * the arguments its body). */
struct sp_toolcall_format {
    const char *name;
    const char *marker;     /* chosen when the template's source holds it; NULL: the fallback */
    bool native;            /* the template renders tools, calls and results itself */
    const char *begin, *open, *close, *sep, *end;
    const char *args_key;
    const char *trigger;    /* where a call starts (auto): a prefix of begin open CALL */
    int id_len;             /* ids the template wants: 0 "call_" and 24 characters, else that many */
    bool parallel;          /* may write several calls */
    bool call_id;           /* CALL may carry "id" */
    bool text_first;        /* text (the model's analysis) may precede calls even when they are required */
    bool empty_content;     /* a message without content has "" (llama.cpp's messages for this family) */
    const char *reasoning_alias; /* the key the template reads a message's reasoning under, besides
                                    reasoning_content (NULL: none) */
    /* the syntax: the grammar of an answer's calls and the parser's step (format.c's generic ones,
       or harmony.c's) */
    sp_status (*grammar)(const struct sp_toolcall *tc, char **gbnf);
    void (*byte)(struct sp_toolcall_parser *p, char c);
};

struct sp_toolcall_fn {
    char *name;
    char *params;           /* the parameters schema, compact JSON text */
};

struct sp_toolcall {
    const struct sp_toolcall_format *f;
    enum sp_toolcall_choice choice;
    bool parallel;          /* the request allows several calls and the format can write them */
    struct sp_toolcall_fn *fn;
    size_t n_fn;
    size_t named;           /* SP_TOOLCALL_NAMED: the function */
    char *tools;            /* the request's tools array, compact JSON */
};

/* The function called `name`, or NULL. */
const struct sp_toolcall_fn *sp_toolcall_find(const struct sp_toolcall *tc, const char *name, size_t len);

#endif
