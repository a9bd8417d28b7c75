/* The model store: models `spindle pull` fetched, kept under one folder
 * ($SPINDLE_MODELS, default ~/.cache/spindle) as
 *   ROOT/hf.co/ORG/REPO/QUANT/{the GGUF file(s), manifest.json}
 * and found by name.  A model is stored when its manifest.json exists: pull
 * writes it last, after every file is verified and under its final name.
 *
 * Names: [hf.co/][ORG/]REPO[:QUANT].  ORG and REPO follow the hub's repo id
 * rules (letters, digits, '_', '-', '.'; first and last a letter, digit or
 * '_'; no "--" or ".."; at most 96 characters); QUANT is letters, digits,
 * '_' and '-' (at most 32, starting with a letter or digit) and is kept in
 * upper case.  Stored names compare without regard to case.
 *
 * This is the one place a -m argument becomes a file: sp_store_model_path. */
#ifndef SP_TOOLS_STORE_H
#define SP_TOOLS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_STORE_ID_MAX 96
#define SP_STORE_QUANT_MAX 32
#define SP_STORE_DEFAULT_QUANT "Q4_K_M"

/* A name; an empty field was not given. */
struct sp_store_name {
    char org[SP_STORE_ID_MAX + 1];
    char repo[SP_STORE_ID_MAX + 1];
    char quant[SP_STORE_QUANT_MAX + 1];
};

/* Parses s; false when it is not a name.  The quant is upper-cased. */
bool sp_store_name_parse(const char *s, struct sp_store_name *out);
/* True when s is a repo id part (ORG or REPO) by the hub's rules. */
bool sp_store_id_ok(const char *s);
/* "ORG/REPO:QUANT" into buf. */
void sp_store_name_format(const struct sp_store_name *n, char *buf, size_t cap);

/* The store's folder into buf; false (after printing one line) when
 * neither $SPINDLE_MODELS nor $HOME is set. */
bool sp_store_root(char *buf, size_t cap);
/* ROOT/hf.co/ORG/REPO/QUANT into buf (a full name); false if too long. */
bool sp_store_model_dir(const char *root, const struct sp_store_name *n, char *buf, size_t cap);

/* One file of a model, as its manifest records it. */
struct sp_store_file {
    char *name;        /* file name in the model's folder */
    char *hub_path;    /* path in the hub repository */
    uint64_t size;
    char sha256[65];
};

/* One stored model. */
struct sp_store_model {
    struct sp_store_name name;
    char *dir;                  /* its folder */
    char *path;                 /* its first file: what -m loads */
    uint64_t bytes;             /* all its files */
    size_t n_files;
    bool complete;              /* every file there with the manifest's size */
};

/* Every stored model under root, sorted by name.  A manifest that cannot be
 * read is reported on stderr and its model left out.  False when out of
 * memory. */
bool sp_store_scan(const char *root, struct sp_store_model **out, size_t *n);
void sp_store_models_free(struct sp_store_model *m, size_t n);

/* The one model of m[0..n) that q names (missing fields match anything);
 * NULL after printing one line naming the candidates ("what: ..."), or
 * naming the stored models when none matches. */
const struct sp_store_model *sp_store_find(const struct sp_store_model *m, size_t n, const struct sp_store_name *q,
                                           const char *what, const char *arg);

/* Writes dir/manifest.json (through a temporary file and a rename).
 * 0, or an errno value. */
int sp_store_manifest_write(const char *dir, const struct sp_store_name *n, const char *source, const char *revision,
                            const struct sp_store_file *files, size_t n_files);

/* The model file a -m argument names: arg itself when a file of that name
 * exists, or when it reads as a path rather than a name (it starts with
 * '/', '.' or '~', or ends in .gguf: the loader then reports it); else the
 * first file of the one stored model the name matches.  NULL after printing
 * one line (flag: the option, for the message).  The string lives until the
 * process exits. */
const char *sp_store_model_path(const char *flag, const char *arg);

/* Removes a model's folder (its files, manifest and any partial download)
 * and the ORG/REPO folders above it left empty.  0, or an errno value. */
int sp_store_remove_dir(const char *root, const char *dir);

#endif
