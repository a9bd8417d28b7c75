/* Tokenizer: text <-> token ids, read from the GGUF file itself.
 *
 * Supports tokenizer.ggml.model = gpt2 (byte-level BPE), llama (SentencePiece
 * BPE with byte fallback), bert (WordPiece), gemma4 (BPE merges over raw
 * UTF-8 with spaces as U+2581 and <0xXX> byte fallback), with the
 * pre-tokenizer named by tokenizer.ggml.pre.  Must produce exactly
 * llama.cpp's ids.
 * Works on vocabulary-only files (no weights).
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "spindle.h"

struct sp_vocab; /* opaque; immutable after init, safe to share across threads */

/* Builds the vocabulary from `g` (borrowed; strings are copied or indexed,
 * so the vocab may outlive nothing but the mapping).  SP_ERR_FORMAT naming
 * the key when tokenizer arrays are missing or disagree; SP_ERR_UNSUPPORTED
 * for an unknown model/pre kind. */
sp_status sp_vocab_init(struct sp_vocab **out, const struct sp_gguf *g);
void sp_vocab_free(struct sp_vocab *v);

uint32_t sp_vocab_size(const struct sp_vocab *v);
sp_token sp_vocab_bos(const struct sp_vocab *v); /* -1 when none */
sp_token sp_vocab_eos(const struct sp_vocab *v); /* -1 when none */
/* End-of-generation: eos, eot, <|im_end|>, <end_of_turn>, ... */
bool sp_vocab_is_eog(const struct sp_vocab *v, sp_token t);
bool sp_vocab_is_control(const struct sp_vocab *v, sp_token t);
/* Id of the token whose text is exactly `text`, or -1. */
sp_token sp_vocab_find(const struct sp_vocab *v, const char *text);
const char *sp_vocab_model_name(const struct sp_vocab *v); /* "gpt2", "llama", "bert", "gemma4" */
const char *sp_vocab_pre_name(const struct sp_vocab *v);
/* The raw text of token `t` as stored in the file, or NULL for a bad id. */
const char *sp_vocab_token_text(const struct sp_vocab *v, sp_token t);
/* True when concatenating the pieces of encode(x) gives back x for valid
 * UTF-8 x (byte-level BPE, Gemma 4's BPE, SentencePiece with byte fallback
 * after its one added leading space); false for WordPiece, which lowercases
 * and drops accents and whitespace. */
bool sp_vocab_lossless(const struct sp_vocab *v);
/* The file's tokenizer.chat_template, or NULL. */
const char *sp_vocab_chat_template(const struct sp_vocab *v);

/* Encodes `len` bytes of `text` (any bytes, need not be valid UTF-8).
 * add_special: add BOS/EOS as the file's add_bos_token / add_eos_token say.
 * parse_special: recognise special/control token texts in `text`.
 * Writes up to `cap` ids to `out` and the total count to *n_out; when the
 * total exceeds cap, returns SP_ERR_ARG with *n_out = the needed count.
 * The count can exceed `len` (SentencePiece byte fallback may give three
 * ids for one space); 6 * len + 16 always suffices. */
sp_status sp_tokenize(const struct sp_vocab *v, const char *text, size_t len,
                      bool add_special, bool parse_special,
                      sp_token *out, size_t cap, size_t *n_out);
/* As sp_tokenize, into a malloc'd array of all the ids (*out, which the
 * caller frees; NULL on failure). */
sp_status sp_tokenize_alloc(const struct sp_vocab *v, const char *text, size_t len, bool add_special,
                            bool parse_special, sp_token **out, size_t *n_out);

/* The bytes token `t` stands for (byte tokens give their byte, SentencePiece
 * and Gemma 4 '▁' becomes ' ', byte-level BPE is un-mapped).  Control tokens
 * give "" unless `special`.  Returns the byte count (may exceed cap: then
 * nothing is written and the caller retries bigger; buf may be NULL when cap
 * is 0); -1 for an invalid id. */
int sp_token_to_piece(const struct sp_vocab *v, sp_token t, bool special,
                      char *buf, size_t cap);

/* Whole-sequence decode as llama.cpp's detokenize does (e.g. the SPM leading
 * space removal after BOS).  Same return convention as sp_token_to_piece
 * (buf may be NULL when cap is 0, to size the text). */
int64_t sp_detokenize(const struct sp_vocab *v, const sp_token *toks, size_t n,
                      bool special, char *buf, size_t cap);

/* Streaming detokenizer: feed token pieces, get out only complete UTF-8;
 * an incomplete trailing sequence is held until it completes or flush(). */
struct sp_detok {
    const struct sp_vocab *vocab;
    bool special;
    /* false after init (pieces are emitted as llama.cpp's server does);
     * set it to true to drop the SentencePiece prefix space of the first
     * piece, as sp_detokenize does. */
    bool first;
    char pending[8];
    int n_pending;
};
void sp_detok_init(struct sp_detok *d, const struct sp_vocab *v, bool special);
/* Appends the complete text for `t` to out (cap bytes); returns bytes
 * written, or -1 if cap is too small (cap >= 256 + longest token is enough). */
int sp_detok_push(struct sp_detok *d, sp_token t, char *out, size_t cap);
/* Emits what is held back (invalid tail bytes become U+FFFD). */
int sp_detok_flush(struct sp_detok *d, char *out, size_t cap);

#endif
