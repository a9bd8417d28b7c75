/* GGUF writer: key/values and tensor infos first, then each tensor's data in
 * the order the tensors were added, every tensor at an aligned offset.
 *
 * The file appears only when complete: data goes to a temporary file next to
 * the destination, which sp_gguf_writer_finish() renames over it; freeing an
 * unfinished writer removes the temporary file, so a failed run leaves
 * nothing behind.  Every size is checked: a tensor's byte count comes from
 * its type and shape, and the data written for it must add up to exactly
 * that.
 */
#ifndef SP_GGUF_WRITER_H
#define SP_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

struct sp_gguf_writer;

/* alignment: of the data section and each tensor (a power of two; 0 = 32).
 * A "general.alignment" key set later must agree with it. */
sp_status sp_gguf_writer_init(struct sp_gguf_writer **out, uint32_t alignment);
/* Removes the temporary file unless finished. */
void sp_gguf_writer_free(struct sp_gguf_writer *w);

/* Key/values, in order; setting an existing key removes it and appends the
 * new value (ggml's gguf writer does the same, so a file quantised here
 * has llama.cpp's key order). */
sp_status sp_gguf_writer_copy_kv(struct sp_gguf_writer *w, const struct sp_gguf_kv *kv);
sp_status sp_gguf_writer_set_u32(struct sp_gguf_writer *w, const char *key, uint32_t v);
sp_status sp_gguf_writer_set_str(struct sp_gguf_writer *w, const char *key, const char *s);
sp_status sp_gguf_writer_set_strs(struct sp_gguf_writer *w, const char *key, const char *const *s, uint64_t n);

/* Tensor infos, in data order (before sp_gguf_writer_open). */
sp_status sp_gguf_writer_add_tensor(struct sp_gguf_writer *w, const char *name, uint32_t n_dims,
                                    const int64_t *ne, uint32_t type);

/* Creates the temporary file beside `path` and writes everything up to the
 * first tensor's data. */
sp_status sp_gguf_writer_open(struct sp_gguf_writer *w, const char *path);
/* Appends n bytes of the current tensor's data (a tensor may take several
 * calls); padding follows each tensor's last byte. */
sp_status sp_gguf_writer_write(struct sp_gguf_writer *w, const void *data, size_t n);
/* Checks that every tensor got all its data, flushes, renames into place. */
sp_status sp_gguf_writer_finish(struct sp_gguf_writer *w);

/* Bytes the data section takes so far (after open: all of it). */
uint64_t sp_gguf_writer_data_size(const struct sp_gguf_writer *w);

#endif
