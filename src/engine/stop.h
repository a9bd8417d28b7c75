/* Stop sequences over streamed text.
 *
 * The engine feeds each new piece of generated text (any length, pieces may
 * split a stop string anywhere).  sp_stop_feed() says how many bytes may be
 * emitted now: text that could still be the start of a stop string is held
 * back until it is decided.  When a stop string completes, the text before it
 * is released, the stop string itself (and anything after it) is never
 * emitted, and the object stays stopped.  At the end of generation (EOS,
 * length) sp_stop_flush() releases what is held.
 *
 * The bytes to emit are, in order, the text held from earlier calls followed
 * by the start of the new piece: the emitted stream is always a prefix of
 * everything fed.  A caller that keeps the generated text itself can use the
 * counts alone; otherwise pass `out` and the bytes are copied there.
 *
 * If several stop strings match, the one that completes first (earliest end
 * byte) wins, and at the same end byte the longest one, so with stops "ab"
 * and "abc" the text "abc" stops after "ab" and emits nothing.
 *
 * Matching is on bytes.  If the text and the stop strings are valid UTF-8,
 * held-back text starts on a character boundary, so emitted text never ends
 * inside a character that the stop logic split.
 *
 * struct sp_stop is a plain value with fixed-size storage (no allocation, no
 * free): embed it in the sequence and call sp_stop_init() again to reuse it. */
#ifndef SP_ENGINE_STOP_H
#define SP_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "spindle.h"

#define SP_STOP_MAX_STRINGS 16
#define SP_STOP_MAX_LEN 256   /* bytes per stop string, without a terminator */

struct sp_stop {
    size_t n;                                  /* stop strings */
    size_t len[SP_STOP_MAX_STRINGS];
    char str[SP_STOP_MAX_STRINGS][SP_STOP_MAX_LEN];
    size_t n_held;                             /* < SP_STOP_MAX_LEN */
    char held[SP_STOP_MAX_LEN];
    bool stopped;
};

struct sp_stop_result {
    size_t n_emit;   /* bytes safe to emit now (held text first, then the piece) */
    bool stopped;    /* a stop string completed (now or before) */
};

/* Copy n_stops NUL-terminated stop strings (n_stops may be 0: nothing ever
 * stops and nothing is held).  SP_ERR_ARG for more than SP_STOP_MAX_STRINGS
 * strings, an empty string, or one longer than SP_STOP_MAX_LEN bytes. */
sp_status sp_stop_init(struct sp_stop *st, const char *const *stops, size_t n_stops);

/* Feed piece[0..len).  If out is not NULL it receives the r->n_emit bytes to
 * emit and must hold at least len + SP_STOP_MAX_LEN bytes (no terminator is
 * written).  After a stop, further feeds emit nothing.  SP_ERR_ARG when piece
 * is NULL with len > 0. */
sp_status sp_stop_feed(struct sp_stop *st, const char *piece, size_t len, char *out,
                       struct sp_stop_result *r);

/* Release the held text (nothing when stopped): returns the byte count and,
 * if out is not NULL, copies them there (room for SP_STOP_MAX_LEN bytes). */
size_t sp_stop_flush(struct sp_stop *st, char *out);

#endif
