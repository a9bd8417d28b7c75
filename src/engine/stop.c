/* Stop sequences; the contract is in stop.h.
 *
 * Each feed looks at B = held ++ piece.  No stop string can end inside the
 * held part (it would have stopped earlier), so only end positions in the
 * piece are tried.  Cost per feed: O(|B| * total stop length) in the worst
 * case, with |held| < SP_STOP_MAX_LEN; pieces are a token or a few. */
#include "engine/stop.h"

#include <string.h>

#include "core/error.h"

sp_status sp_stop_init(struct sp_stop *st, const char *const *stops, size_t n_stops)
{
    memset(st, 0, sizeof *st);
    if (n_stops > SP_STOP_MAX_STRINGS)
        return sp_error_set(SP_ERR_ARG, "stop: %zu stop strings, at most %d allowed", n_stops,
                            SP_STOP_MAX_STRINGS);
    if (n_stops > 0 && !stops)
        return sp_error_set(SP_ERR_ARG, "stop: stop list is NULL");
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i])
            return sp_error_set(SP_ERR_ARG, "stop: stop string %zu is NULL", i);
        size_t len = strnlen(stops[i], SP_STOP_MAX_LEN + 1);
        if (len == 0)
            return sp_error_set(SP_ERR_ARG, "stop: stop string %zu is empty", i);
        if (len > SP_STOP_MAX_LEN)
            return sp_error_set(SP_ERR_ARG, "stop: stop string %zu is longer than %d bytes", i,
                                SP_STOP_MAX_LEN);
        memcpy(st->str[i], stops[i], len);
        st->len[i] = len;
    }
    st->n = n_stops;
    return SP_OK;
}

/* Byte i of B = held ++ piece. */
static inline char byte_at(const struct sp_stop *st, const char *piece, size_t i)
{
    return i < st->n_held ? st->held[i] : piece[i - st->n_held];
}

/* Does B[start .. start + len) equal s[0 .. len)? */
static bool match_at(const struct sp_stop *st, const char *piece, size_t start, const char *s,
                     size_t len)
{
    for (size_t j = 0; j < len; j++)
        if (byte_at(st, piece, start + j) != s[j])
            return false;
    return true;
}

static void copy_out(const struct sp_stop *st, const char *piece, size_t n, char *out)
{
    if (!out)
        return;
    size_t from_held = n < st->n_held ? n : st->n_held;
    memcpy(out, st->held, from_held);
    if (n > from_held)
        memcpy(out + from_held, piece, n - from_held);
}

sp_status sp_stop_feed(struct sp_stop *st, const char *piece, size_t len, char *out,
                       struct sp_stop_result *r)
{
    r->n_emit = 0;
    r->stopped = st->stopped;
    if (len > 0 && !piece)
        return sp_error_set(SP_ERR_ARG, "stop: piece is NULL");
    if (st->stopped)
        return SP_OK;
    size_t total = st->n_held + len;

    /* earliest completed stop string; the longest one at the same end */
    for (size_t end = st->n_held + 1; end <= total; end++) {
        size_t best = 0;
        for (size_t k = 0; k < st->n; k++) {
            size_t l = st->len[k];
            if (l <= end && l > best && match_at(st, piece, end - l, st->str[k], l))
                best = l;
        }
        if (best > 0) {
            r->n_emit = end - best;
            r->stopped = true;
            copy_out(st, piece, r->n_emit, out);
            st->n_held = 0;
            st->stopped = true;
            return SP_OK;
        }
    }

    /* hold back the longest suffix of B that is a proper prefix of a stop */
    size_t hold = 0;
    for (size_t k = 0; k < st->n; k++) {
        size_t l = st->len[k] - 1;
        if (l > total)
            l = total;
        for (; l > hold; l--)
            if (match_at(st, piece, total - l, st->str[k], l)) {
                hold = l;
                break;
            }
    }
    r->n_emit = total - hold;
    copy_out(st, piece, r->n_emit, out);

    char next[SP_STOP_MAX_LEN];
    for (size_t i = 0; i < hold; i++)
        next[i] = byte_at(st, piece, r->n_emit + i);
    memcpy(st->held, next, hold);
    st->n_held = hold;
    return SP_OK;
}

size_t sp_stop_flush(struct sp_stop *st, char *out)
{
    size_t n = st->stopped ? 0 : st->n_held;
    if (out)
        memcpy(out, st->held, n);
    st->n_held = 0;
    return n;
}
