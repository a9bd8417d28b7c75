/* spindle: the public C API.
 *
 * One header for everything outside the library: the applications built
 * on it (the CLI in tools/, the HTTP server in server/, examples, language
 * bindings) include nothing else.  docs/api.md walks through the lifecycle
 * with a complete example:
 *
 *   sp_model  = a GGUF file loaded once: weights, vocabulary, chat template.
 *               Immutable after loading; shared by any number of engines and
 *               threads.
 *   sp_engine = a model put to work: KV cache, compute threads, the requests
 *               running on it.  One thread at a time drives it.
 *   sp_request = one generation (prompt, decoding parameters, its n choices
 *               or beams) inside an engine, streamed by callback or polled.
 *
 * Errors: every function that can fail returns an sp_status and leaves a
 * one-line message naming the problem, read with sp_error_message() on the
 * same thread.  Nothing in the library calls exit() or abort() or prints.
 *
 * Ownership: what a function returns through `T **out` the caller owns and
 * frees with the matching *_free (memory: sp_free); `const char *` results
 * are borrowed from their object and stay valid while it lives.  Buffers
 * passed in are only read during the call unless a comment says otherwise.
 *
 * Versions: parameter structs are filled by their *_default() function
 * first, then changed field by field, so code keeps compiling when fields are
 * added (they are added at the end).  A release that changes a struct's
 * layout or a signature changes the shared library's soname
 * (libspindle.so.SPINDLE_VERSION_MAJOR).
 *
 * Where each group is defined (libspindle is the rooms of src/;
 * docs/design.md has the table function by function): functions over the
 * public sp_model (model, vocabulary, chat prompts, making engines, grammars
 * and tool calls for a model) in src/api; errors and the machine in
 * src/core; conversations in src/conv; engines, requests and embedding runs
 * in src/engine; grammar copies, stepping and caches in src/grammar;
 * tool-call checks and parsing in src/toolcall; decoding in src/sampler;
 * perplexity and importance matrices in src/eval; quantization in
 * src/quantize; cache types in src/kv; speculative kinds in src/spec;
 * pooling in src/embed.
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SP_API __attribute__((visibility("default")))
#else
#define SP_API
#endif

#define SPINDLE_VERSION_MAJOR 0
#define SPINDLE_VERSION_MINOR 1
#define SPINDLE_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
SP_API const char *sp_version(void);

/* ------------------------------------------------------------------ errors */

typedef enum sp_status {
    SP_OK = 0,
    SP_ERR_IO,          /* file missing, unreadable, mmap failed, port in use */
    SP_ERR_FORMAT,      /* malformed model file */
    SP_ERR_UNSUPPORTED, /* valid file, but an architecture/type we do not run */
    SP_ERR_NOMEM,       /* allocation failed or a size would overflow */
    SP_ERR_ARG,         /* bad argument from the caller (flag, parameter, too small a buffer) */
    SP_ERR_CONTEXT,     /* prompt or generation does not fit the context */
    SP_ERR_FULL,        /* no free KV blocks or request slots right now (retry later) */
    SP_ERR_CANCELLED,   /* stopped by the caller */
    SP_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} sp_status;

/* The message of the last error set on this thread ("" when none); valid
 * until the next library call on this thread. */
SP_API const char *sp_error_message(void);
/* A short fixed name of a status ("format error", ...). */
SP_API const char *sp_status_name(sp_status st);
/* Sets this thread's message (printf-style, one line) and returns st, so
 * code built on the library (the server, a callback such as
 * sp_gen_params.validate) reports failures the library's way:
 * `return sp_error_set(SP_ERR_ARG, "--host '%s' ...", host);`. */
SP_API sp_status sp_error_set(sp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees memory the library returned as the caller's (NULL is fine). */
SP_API void sp_free(void *p);

/* Copies in[0..n) to out, replacing each invalid UTF-8 sequence with
 * U+FFFD (token pieces may end inside a character); out needs 3 * n bytes.
 * Returns the bytes written (no terminator).  Thread-safe. */
SP_API size_t sp_utf8_sanitize(const char *in, size_t n, char *out);

typedef int32_t sp_token;

/* ------------------------------------------------------------------- model
 * A model is immutable once loaded: every function taking a const sp_model *
 * is thread-safe, also against the engines running it. */

typedef struct spindle_model sp_model;

typedef struct sp_model_params {
    const char *path;   /* the GGUF file, or any part of a split model (required) */
    int n_threads;      /* compute threads of engines made from this model
                           (sp_engine_params.n_threads 0); <= 0: one per core */
    bool use_mmap;      /* true: map the file (weights stay in the page cache);
                           false: read it into memory */
    bool use_mlock;     /* lock the weights in RAM (needs RLIMIT_MEMLOCK) */
    bool private_copy;  /* with use_mmap: once loaded, what is still read from the mapped
                           file (the tokenizer's and chat template's data, weights read in
                           place such as the token embeddings) is copied into the process's
                           memory, so the file may be changed, truncated or deleted while
                           the model is in use (reading a mapped file cut short raises
                           SIGBUS).  Costs that much resident memory; repacked weights are
                           copies already.  False: those bytes stay in the page cache,
                           shared, and the file must not change while the model is used. */
    bool vocab_only;    /* load the tokenizer and chat template only: tokenize,
                           detokenize and chat work, engines cannot be made */
    const char *isa;    /* kernel ISA level: NULL or "auto" (the best this CPU
                           runs, or the one $SP_ISA names), "scalar", "avx2",
                           "avxvnni", "avx512", "neon", "dotprod", "i8mm".
                           Process-wide: the first model loaded fixes it, and a
                           later load asking for another fails (SP_ERR_ARG);
                           SP_ERR_UNSUPPORTED when this CPU cannot run it */
    /* Progress of long loading steps (repacking the weights): called on the
     * loading thread with the step's name; done == total on its last call.
     * NULL: none.  sp_progress_stderr draws a line on a terminal. */
    void (*progress)(void *user, const char *what, uint64_t done, uint64_t total);
    void *progress_user;
} sp_model_params;

/* A progress callback for sp_model_params: one line on stderr, redrawn at
 * most ten times a second, only when stderr is a terminal ("what: 45%
 * (62/138 MB), 1.2 s"); user is unused. */
SP_API void sp_progress_stderr(void *user, const char *what, uint64_t done, uint64_t total);

/* path NULL, one thread per core, mmap on, mlock off, whole model, auto ISA. */
SP_API void sp_model_params_default(sp_model_params *p);

/* Loads and validates the file (every key and tensor the forward pass
 * needs).  Errors name the file and the problem: SP_ERR_IO, SP_ERR_FORMAT,
 * SP_ERR_UNSUPPORTED, SP_ERR_NOMEM, SP_ERR_ARG.  *out is NULL on failure.
 * Thread-safe. */
SP_API sp_status sp_model_load(const sp_model_params *p, sp_model **out);
/* Frees the model; every engine and detokenizer made from it must be freed
 * first, and no other thread may be using it. */
SP_API void sp_model_free(sp_model *m);

/* What a model is (for `spindle info`, benchmarks, bindings).  Strings are
 * borrowed from the model.  A vocab_only model has the path, file,
 * architecture, tokenizer and chat fields set, the rest 0. */
typedef struct sp_model_info {
    const char *path;
    const char *architecture;       /* general.architecture ("llama", "gemma3") */
    const char *tokenizer;          /* tokenizer.ggml.model ("gpt2", "llama", "bert") */
    const char *tokenizer_pre;      /* tokenizer.ggml.pre */
    const char *isa;                /* the ISA level this process runs ("avx512", ...;
                                       sp_isa_info_get names each family's) */
    uint32_t gguf_version;
    uint64_t n_tensors, n_meta;     /* tensors and metadata keys in the file */
    uint64_t file_bytes;
    uint64_t weights_bytes;         /* weight bytes read per token (matrices and head) */
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    uint32_t n_head, n_head_kv, head_dim, n_rot;
    uint32_t n_swa;                 /* sliding window in tokens; 0: none */
    uint32_t n_swa_layers;          /* layers that use it */
    float rope_base, rope_freq_scale;
    float rope_base_swa;            /* rope base of sliding-window layers (0: none) */
    float norm_eps;
    sp_token bos, eos;              /* -1 when none */
    bool has_chat_template;         /* false: a built-in format is used */
    bool tied_output;               /* the output head is token_embd */
    bool vocab_only;
    uint32_t n_packed;              /* matrices repacked at load for the kernels */
    uint64_t packed_bytes;
    const char *features;          /* the family's features in words ("QKV bias, 8 experts (2 used), ...") */
    uint64_t private_copy_bytes;    /* what sp_model_params.private_copy holds (or would): the
                                       file's bytes still read after loading */
    bool swa_chunked;               /* the window is a chunk: a position attends to its own chunk of n_swa
                                       positions only (Llama 4) */
} sp_model_info;
SP_API void sp_model_info_get(const sp_model *m, sp_model_info *out);

/* The kernel paths this process runs, by family, as ISA level names: the
 * level (sp_model_params.isa, $SP_ISA or the CPU's best) and, per family,
 * that level or the nearest one below it with kernels of the family.
 * Fixes the level when no model has been loaded yet.  Static strings. */
typedef struct sp_isa_info {
    const char *level;     /* as sp_model_info.isa */
    const char *quant;     /* file-layout quantized dots, activation quantizers */
    const char *packed;    /* 16-row packed weight tiles; NULL: weights keep the file layout */
    const char *attention; /* attention and its softmax */
    const char *ops;       /* norms, RoPE, activations */
} sp_isa_info;
SP_API void sp_isa_info_get(sp_isa_info *out);

/* The model's files: 1, or the parts of a split model in order (llama.cpp's
 * gguf-split names them NAME-00001-of-0000N.gguf ...; the first holds the
 * metadata, the tensors are spread over them).  sp_model_info's file_bytes
 * and n_tensors count them all. */
SP_API uint32_t sp_model_n_files(const sp_model *m);
/* File i (i < sp_model_n_files): its path (valid while m is), size and how
 * many tensors it holds; any out pointer may be NULL.  SP_ERR_ARG past the
 * last file. */
SP_API sp_status sp_model_file_get(const sp_model *m, uint32_t i, const char **path, uint64_t *n_bytes,
                                   uint64_t *n_tensors);

/* One tensor of the file. */
typedef struct sp_tensor_info {
    char name[128];                 /* truncated to 127 bytes */
    uint32_t type;                  /* GGUF/ggml type id */
    const char *type_name;          /* "Q4_K", "F32", ... */
    uint32_t n_dims;
    int64_t ne[4];                  /* ne[0]: row length; unused dimensions 1 */
    uint64_t n_bytes;
} sp_tensor_info;
/* i < sp_model_info.n_tensors; SP_ERR_ARG otherwise. */
SP_API sp_status sp_model_tensor_get(const sp_model *m, uint64_t i, sp_tensor_info *out);

/* Metadata.  The text of key i (i < n_meta) or the value of `key`: strings
 * as stored, numbers in decimal, booleans "true"/"false", arrays as
 * "[N x TYPE]".  Writes at most cap bytes including a NUL and sets *len to
 * the full length; SP_ERR_ARG when cap <= *len (retry with *len + 1) or the
 * key is absent. */
SP_API sp_status sp_model_meta_key(const sp_model *m, uint64_t i, char *buf, size_t cap, size_t *len);
SP_API sp_status sp_model_meta_value(const sp_model *m, const char *key, char *buf, size_t cap, size_t *len);

/* -------------------------------------------------------------- vocabulary
 * All thread-safe: the vocabulary is immutable. */

SP_API uint32_t sp_model_n_vocab(const sp_model *m);
SP_API sp_token sp_model_token_bos(const sp_model *m); /* -1 when none */
SP_API sp_token sp_model_token_eos(const sp_model *m); /* -1 when none */
/* End of generation: eos, eot, <|im_end|>, <end_of_turn>, ... */
SP_API bool sp_model_token_is_eog(const sp_model *m, sp_token t);
SP_API bool sp_model_token_is_control(const sp_model *m, sp_token t);
/* The token's text as stored in the file (NUL-terminated), NULL for a bad id. */
SP_API const char *sp_model_token_text(const sp_model *m, sp_token t);

/* Text (any bytes) to ids, exactly as llama.cpp tokenizes.  add_special:
 * BOS/EOS as the file's add_bos_token/add_eos_token say; parse_special:
 * special-token texts such as "<|im_start|>" become their ids.  Writes up to
 * cap ids and the total to *n_out; SP_ERR_ARG with *n_out the count needed
 * when cap is smaller (6 * len + 16 always suffices). */
SP_API sp_status sp_model_tokenize(const sp_model *m, const char *text, size_t len, bool add_special,
                                   bool parse_special, sp_token *out, size_t cap, size_t *n_out);
/* The bytes one token stands for (control tokens give "" unless special).
 * The bytes may end inside a UTF-8 character.  Writes up to cap bytes (no
 * NUL) and the full count to *len; SP_ERR_ARG for a bad id or when
 * cap < *len. */
SP_API sp_status sp_model_token_to_piece(const sp_model *m, sp_token t, bool special, char *buf, size_t cap,
                                         size_t *len);
/* A whole sequence to text as llama.cpp's detokenize does (e.g. the leading
 * space after BOS is dropped).  Same buffer convention as token_to_piece. */
SP_API sp_status sp_model_detokenize(const sp_model *m, const sp_token *toks, size_t n, bool special, char *buf,
                                     size_t cap, size_t *len);

/* Streaming detokenizer: push tokens one at a time, get back only complete
 * UTF-8 (a character split across tokens comes out whole with the token
 * that completes it).  One per stream; not thread-safe; must not outlive
 * its model.  Push/flush write up to cap bytes (no NUL) and the count to
 * *len; SP_ERR_ARG when cap is too small (256 + the longest token always
 * suffices) or the id is bad. */
typedef struct sp_detokenizer sp_detokenizer;
SP_API sp_status sp_detokenizer_create(const sp_model *m, bool special, sp_detokenizer **out);
SP_API sp_status sp_detokenizer_push(sp_detokenizer *d, sp_token t, char *buf, size_t cap, size_t *len);
/* Emits what is held back (an unfinished character becomes U+FFFD). */
SP_API sp_status sp_detokenizer_flush(sp_detokenizer *d, char *buf, size_t cap, size_t *len);
SP_API void sp_detokenizer_free(sp_detokenizer *d);

/* -------------------------------------------------------------------- chat
 * The model's own Jinja template (tokenizer.chat_template) rendered as HF
 * transformers does, or a built-in format when the file has none.  Work is
 * bounded for hostile templates.  Thread-safe. */

typedef struct sp_chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool", ... (NUL-terminated UTF-8) */
    const char *content; /* NUL-terminated UTF-8; NULL renders as none */
    /* Tool use; NULL leaves the key out of the message (templates test
     * `'tool_calls' in message` and `message.tool_calls is defined`).
     * tool_calls is JSON text: [{"id", "type", "function": {"name",
     * "arguments": {...}}}], arguments as an object, which templates write
     * with tojson.  tool_call_id and name label a "tool" result. */
    const char *tool_calls;
    const char *tool_call_id;
    const char *name;
    /* An assistant turn's reasoning (OpenAI-compatible servers'
     * reasoning_content): the template's message.reasoning_content, and
     * gpt-oss's message.thinking; NULL leaves it out. */
    const char *reasoning_content;
} sp_chat_msg;

/* The template this model's chats use (the file's, or the built-in one);
 * borrowed from the model. */
SP_API const char *sp_model_chat_template(const sp_model *m);
/* Renders msgs; *text (NUL-terminated) is the caller's (sp_free).  Errors:
 * SP_ERR_ARG naming line:column for a template that fails on these
 * messages, SP_ERR_NOMEM. */
SP_API sp_status sp_model_chat_apply(const sp_model *m, const sp_chat_msg *msgs, size_t n,
                                     bool add_generation_prompt, char **text);
/* Renders with a generation prompt and tokenizes the result as `spindle run
 * --chat` and the server do (special tokens recognised, BOS added unless the
 * template wrote it).  *out is the caller's (sp_free). */
SP_API sp_status sp_model_chat_tokenize(const sp_model *m, const sp_chat_msg *msgs, size_t n, sp_token **out,
                                        size_t *n_out);

/* ------------------------------------------------------------ conversation
 * A chat front end's conversation: its messages, the prompt they make with
 * the model's chat template, trimmed to fit the context, and their JSON form
 * (OpenAI's messages array) for saving and loading.  Trimming drops whole
 * turns, oldest first (a user message and the replies after it), never a
 * system message and never the last user message.  One thread at a time. */

typedef struct sp_conv sp_conv;
SP_API sp_status sp_conv_create(sp_conv **out);
SP_API void sp_conv_free(sp_conv *c);
/* Appends a copy of (role, content).  Roles: system, user, assistant. */
SP_API sp_status sp_conv_add(sp_conv *c, const char *role, const char *content);
/* Sets the system message (the first message, added when absent); NULL or
 * "" removes it. */
SP_API sp_status sp_conv_set_system(sp_conv *c, const char *text);
/* Removes the last message (none: nothing happens). */
SP_API void sp_conv_pop(sp_conv *c);
/* Removes every message but the system message. */
SP_API void sp_conv_clear(sp_conv *c);
SP_API size_t sp_conv_count(const sp_conv *c);
/* The messages, valid until the next change. */
SP_API const sp_chat_msg *sp_conv_messages(const sp_conv *c);
/* Renders the conversation as sp_model_chat_tokenize does.  While the prompt
 * is longer than max_tokens, the oldest turn is dropped from the
 * conversation itself; *n_dropped counts the messages removed.
 * SP_ERR_CONTEXT when even the system message and the last user message do
 * not fit.  *out is the caller's (sp_free). */
SP_API sp_status sp_conv_prompt(sp_conv *c, const sp_model *m, size_t max_tokens, sp_token **out,
                                size_t *n_out, size_t *n_dropped);
/* Writes the messages as a JSON array of {"role", "content"} objects. */
SP_API sp_status sp_conv_save(const sp_conv *c, const char *path);
/* Replaces the messages with those of a file in the same form (or an object
 * with a "messages" array).  On error the conversation is unchanged. */
SP_API sp_status sp_conv_load(sp_conv *c, const char *path);

/* ------------------------------------------------------------------ engine */

typedef struct sp_engine sp_engine;

/* How the KV cache stores keys or values: f16, or llama.cpp's Q8_0 / Q4_0
 * blocks (32 values and one f16 scale: 8.5 and 4.5 bits a value), rotated
 * (Walsh-Hadamard), which attention reads directly; the head size must be
 * a multiple of 32.  Q8_0 moves the output about as much as a change of
 * matmul kernels does, Q4_0 several times more (docs/quantization.md). */
typedef enum sp_cache_type {
    SP_CACHE_F16 = 0,
    SP_CACHE_Q8_0,
    SP_CACHE_Q4_0,
} sp_cache_type;
/* "f16", "q8_0", "q4_0"; NULL for an unknown value. */
SP_API const char *sp_cache_type_name(sp_cache_type t);
/* The type named `name` (as sp_cache_type_name writes it, any case);
 * SP_ERR_ARG naming it and the choices when unknown. */
SP_API sp_status sp_cache_type_parse(const char *name, sp_cache_type *out);
/* Bytes n values take stored as `t` (n a multiple of 32 for the quantized
 * types: what a head of keys or values takes per position). */
SP_API uint64_t sp_cache_type_bytes(sp_cache_type t, uint64_t n);

/* Speculative decoding: where the drafts come from.  Drafts are verified in
 * the same batched forward as every other token, so the output is the
 * model's own: greedy output is identical token for token, and sampled
 * output has exactly the model's distribution (the same tokens for the same
 * seed when drafts are point guesses: n-gram drafts, greedy requests). */
typedef enum sp_spec_kind {
    SP_SPEC_NONE = 0,
    SP_SPEC_NGRAM,  /* prompt lookup: continue an earlier occurrence of the last tokens */
    SP_SPEC_DRAFT,  /* a smaller model with the same vocabulary (draft_model) */
    SP_SPEC_SELF,   /* the model's own first spec_layers layers and output head */
} sp_spec_kind;
/* "none", "ngram", "draft", "self"; and back (SP_ERR_ARG for another name). */
SP_API const char *sp_spec_kind_name(sp_spec_kind k);
SP_API sp_status sp_spec_kind_parse(const char *name, sp_spec_kind *out);

/* A compute thread pool that several engines share (sp_engine_params.threads):
 * their forward passes take turns on its threads, first come, first served,
 * so models loaded side by side compute on n_threads cores, not on n_threads
 * per model.  n_threads <= 0: one per online core.  Free it after every engine
 * that uses it. */
typedef struct sp_pool sp_threads;
SP_API sp_status sp_threads_create(int n_threads, sp_threads **out);
SP_API void sp_threads_free(sp_threads *t);

typedef struct sp_engine_params {
    int n_threads;       /* compute threads; 0: the model's n_threads */
    int n_ctx;           /* per-request context limit; 0: the model's training
                            context, capped at 8192 */
    int n_parallel;      /* requests running at once; 0: 1 */
    size_t kv_mem_mib;   /* KV cache size; 0: n_ctx x n_parallel positions */
    int n_batch;         /* most tokens in one forward pass; 0: 512 */
    bool swa_full;       /* keep every position of sliding-window layers
                            (no rings; lets such models use the prefix cache) */
    int n_outputs;       /* most positions with logits in one forward pass
                            (sp_engine_logits over many positions, perplexity);
                            0: 4 per parallel request, at least 16; capped at
                            n_batch */
    sp_cache_type cache_type_k; /* how the KV cache stores keys; 0: f16 */
    sp_cache_type cache_type_v; /* and values */
    /* Speculative decoding (requests with beams, explain, a grammar or
     * stages of their own decode without) */
    sp_spec_kind spec;   /* SP_SPEC_NONE: off */
    int spec_k;          /* most drafts per sequence and step, 1..32 (default 8);
                            each sequence's k adapts to its acceptance, and
                            speculation pauses where it would not pay */
    bool spec_fixed;     /* always spec_k drafts when the source has them (no
                            adapting: for tests and measurements) */
    const sp_model *draft_model; /* SP_SPEC_DRAFT: same vocabulary as the model
                            (checked: SP_ERR_ARG naming the difference); must
                            outlive the engine */
    int spec_layers;     /* SP_SPEC_SELF: layers of the draft, 1..n_layer - 1
                            (default n_layer / 2) */
    sp_threads *threads; /* NULL: the engine's own n_threads threads; else a
                            shared pool (n_threads is then its size), which
                            must outlive the engine */
} sp_engine_params;

/* Every field takes the default its comment names (spec_k 8, the rest 0). */
SP_API void sp_engine_params_default(sp_engine_params *p);

/* Allocates the KV cache and everything a step needs, once; nothing is
 * allocated per token afterwards.  The model must outlive the engine.
 * Errors: SP_ERR_ARG (a vocab_only model, a context beyond the model's
 * training context, ...), SP_ERR_NOMEM.  Thread-safe (distinct engines). */
SP_API sp_status sp_engine_create(const sp_model *m, const sp_engine_params *p, sp_engine **out);
/* Frees the engine.  Requests in callback mode still running are freed
 * without further events; polled requests must still be given to
 * sp_request_free (they report no more events). */
SP_API void sp_engine_free(sp_engine *e);

/* Everything below that takes an engine must be called by one thread at a
 * time (the engine's owner); callbacks run on that thread. */
SP_API int sp_engine_n_ctx(const sp_engine *e);
SP_API int sp_engine_n_threads(const sp_engine *e);

typedef struct sp_engine_stats {
    uint32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: idle in the prefix cache */
    uint32_t kv_block_tokens;       /* positions per block */
    uint64_t kv_bytes;              /* KV cache size */
    uint64_t prefix_hits, prefix_tokens_reused;
    uint32_t n_running;             /* requests admitted and not finished */
    /* Memory the engine holds, all of it written when the engine is made
     * (resident from the start, so `spindle info` can predict a process's
     * peak): */
    uint64_t mem_weights;           /* weights read in place or repacked (the
                                       embedding table only when it is also the
                                       output head: otherwise only the rows of
                                       tokens seen are read) */
    uint64_t mem_kv;                /* the KV cache, with a sliding-window ring
                                       per parallel request */
    uint64_t mem_kv_rings;          /* part of mem_kv: the rings, allocated when
                                       a request first needs one */
    uint64_t mem_scratch;           /* forward-pass buffers, logits, step buffers */
    uint64_t mem_resident;          /* the process's resident memory now */
    uint64_t spec_drafted, spec_accepted; /* speculative decoding: draft tokens
                                       verified, and those the model kept */
    /* Models with linear (recurrent) layers keep each sequence's state in a
     * slot, allocated when a sequence first needs one (all 0 otherwise): */
    uint64_t state_bytes_per_seq;   /* one slot: every linear layer's grid
                                       state and its rings of recent inputs */
    uint64_t mem_state;             /* a slot per parallel request */
    uint32_t state_slots_used;      /* slots held by sequences now */
    uint32_t state_snapshots;       /* prefix-cache snapshots held */
    uint64_t state_snapshot_bytes;  /* one snapshot (a grid state and the
                                       convolutions' history per layer) */
    uint64_t mem_state_snapshots;   /* the snapshots' budget, allocated as
                                       prompts fill it */
} sp_engine_stats;
SP_API void sp_engine_stats_get(const sp_engine *e, sp_engine_stats *out);

/* Timing of the last request that finished on this engine. */
typedef struct sp_engine_timing {
    double t_prefill_s, t_decode_s, t_first_token_s;
    uint32_t n_prefill, n_decode;   /* prompt tokens computed (not cached); tokens generated */
    uint32_t n_drafted, n_accepted; /* speculative decoding: drafts verified, drafts kept */
} sp_engine_timing;
SP_API void sp_engine_timing_get(const sp_engine *e, sp_engine_timing *out);

/* Runs one step: one batched forward pass for every running request (a
 * token of each choice, plus prompt chunks of requests still prefilling),
 * then sampling and events.  Returns the number of requests still running
 * (>= 0), or -1 with an error set (an internal failure; the requests are
 * finished with SP_FINISH_ERROR). */
SP_API int sp_engine_step(sp_engine *e);

/* Raw logits after every position >= first of the prompt, in order:
 * fn(user, pos, logits[n_vocab]) (the buffer is valid during the call only).
 * The same batched forward as generation, so position p's logits equal
 * those a decode step at p sees.  Runs to completion inside the call, beside
 * any running requests.  Errors: SP_ERR_CONTEXT, SP_ERR_FULL, SP_ERR_ARG. */
typedef void (*sp_logits_fn)(void *user, size_t pos, const float *logits);
SP_API sp_status sp_engine_logits(sp_engine *e, const sp_token *prompt, size_t n_prompt, size_t first,
                                  sp_logits_fn fn, void *user);

/* ----------------------------------------------------------------- grammar
 * Constrained output: a GBNF grammar (llama.cpp's format: rules,
 * alternation, grouping, * + ? {m,n}, literals, character classes,
 * comments) or a JSON Schema, compiled for one model's vocabulary.  Given
 * to a request (sp_gen_params.grammar), every token is drawn from those
 * that can continue a sentence of the grammar, and an end-of-generation
 * token only where the text so far is one.  docs/structured-output.md lists
 * the schema keywords.  A grammar is used by one thread at a time (the
 * requests of one engine may share it); sp_grammar_clone makes copies for
 * other threads. */

typedef struct sp_grammar sp_grammar;

typedef enum sp_grammar_kind {
    SP_GRAMMAR_GBNF = 'g',   /* GBNF text, start rule "root" */
    SP_GRAMMAR_SCHEMA = 's', /* a JSON Schema (JSON text): outputs are also validated against it;
                                compact JSON (no whitespace) */
    SP_GRAMMAR_SCHEMA_FLEX = 'S', /* the same, with any JSON whitespace between tokens */
    SP_GRAMMAR_SCHEMA_STRICT = 't', /* SP_GRAMMAR_SCHEMA with objects closed: a property the schema
                                       does not list is written only where additionalProperties,
                                       patternProperties or minProperties asks for one (OpenAI's
                                       strict mode); the others leave them open, as JSON Schema does */
    SP_GRAMMAR_SCHEMA_STRICT_FLEX = 'T', /* the same, with any JSON whitespace between tokens */
} sp_grammar_kind;

/* Compiles text[0..len) and prepares it for m's vocabulary (the first
 * grammar of a model also builds the model's table of token bytes).
 * Errors: SP_ERR_ARG with "line L, column C: ..." for GBNF; for a schema,
 * the problem and its JSON path: a malformed or unsatisfiable schema, or a
 * keyword that can be neither enforced nor checked ("$ref
 * 'https://x/y.json' is not in this schema ... at $.properties.a");
 * SP_ERR_NOMEM.  Annotations and unknown keywords are ignored.
 * The model must outlive the grammar.  Thread-safe. */
SP_API sp_status sp_grammar_create(const sp_model *m, sp_grammar_kind kind, const char *text, size_t len,
                                   sp_grammar **out);
/* Until called again, grammar compiles and binds on the calling thread
 * (sp_grammar_create, sp_grammar_cache_get, the grammars of a request's
 * tools and schemas) call stop(ctx) every 65,536 steps of work and end
 * with SP_ERR_CANCELLED once it returns true; a server stops the compile of
 * a client that left.  stop NULL: never (the default). */
SP_API void sp_grammar_stop_when(bool (*stop)(void *ctx), void *ctx);
/* A copy for one more user: shares g's compiled form, has its own matching
 * state.  Any number of threads may copy g at once while no request uses it. */
SP_API sp_status sp_grammar_clone(sp_grammar *g, sp_grammar **out);
/* Frees a grammar or a copy (NULL is fine); no request may still use it. */
SP_API void sp_grammar_free(sp_grammar *g);
/* Checks a finished output: SP_OK when text[0..len) is, for GBNF, a
 * sentence of the grammar, and for a schema, JSON valid against the whole
 * schema (any whitespace and key order; also what no grammar enforces:
 * uniqueItems, multipleOf, bounds on floats, not, ...); SP_ERR_ARG
 * otherwise, with the failures in why[0..cap) ("$.path: problem; ...").
 * The shape of sp_gen_params.validate, grammar being the sp_grammar. */
SP_API sp_status sp_grammar_check_text(void *grammar, const char *text, size_t len, char *why, size_t cap);

/* The GBNF of one JSON object (OpenAI's response_format json_object);
 * static. */
SP_API const char *sp_grammar_json_object_gbnf(void);

/* Grammars kept by their text, for a server whose requests repeat them:
 * each get returns a copy (sp_grammar_clone) of the grammar compiled the
 * first time, at most max_entries of them, least recently used out first.
 * Made for m's vocabulary (m NULL: grammars are compiled but bound to no
 * vocabulary: they check text and constrain no request).  Thread-safe; m
 * must outlive the cache. */
typedef struct sp_grammar_cache sp_grammar_cache;
SP_API sp_status sp_grammar_cache_create(const sp_model *m, uint32_t max_entries, sp_grammar_cache **out);
/* Frees the cache and its grammars (copies handed out live on). */
SP_API void sp_grammar_cache_free(sp_grammar_cache *c);
/* A grammar for (kind, text[0..len), trigger), the caller's (sp_grammar_free);
 * *hit (optional): it was kept.  trigger (NULL: none) makes the grammar
 * lazy: output before the trigger text is free, the rest must be a
 * sentence of the grammar, which starts with the trigger.  Errors as
 * sp_grammar_create's (not kept). */
SP_API sp_status sp_grammar_cache_get(sp_grammar_cache *c, sp_grammar_kind kind, const char *text, size_t len,
                                      const char *trigger, sp_grammar **out, bool *hit);

/* Stepping a grammar by hand, for a caller that picks tokens itself (the
 * engine does the same for a request's sp_gen_params.grammar).  A state is
 * a small integer, copied freely; SP_GRAMMAR_DEAD is the state nothing
 * follows.  The state values belong to g and its copies; g is used by one
 * thread at a time. */
typedef uint32_t sp_grammar_state;
#define SP_GRAMMAR_DEAD 0u
/* The state before any output. */
SP_API sp_grammar_state sp_grammar_start(sp_grammar *g);
/* The tokens that may follow state s: *mask points at n_vocab bits (bit
 * i % 64 of word i / 64: token i allowed), valid until the next call on g;
 * *n_allowed (optional): how many.  End-of-generation tokens are allowed
 * exactly where s accepts.  SP_ERR_ARG when no token is allowed (the
 * message says why), SP_ERR_NOMEM; a grammar from a cache made without a
 * model has no vocabulary (SP_ERR_ARG). */
SP_API sp_status sp_grammar_mask(sp_grammar *g, sp_grammar_state s, const uint64_t **mask, uint32_t *n_allowed);
/* The state after token id; SP_GRAMMAR_DEAD when id may not follow s (an
 * end-of-generation token leaves an accepting s as it is). */
SP_API sp_grammar_state sp_grammar_advance(sp_grammar *g, sp_grammar_state s, sp_token id);
/* Whether the output up to s is a whole sentence of the grammar. */
SP_API bool sp_grammar_accepting(sp_grammar *g, sp_grammar_state s);
/* ------------------------------------------------------------ embeddings
 * One vector of n_embd floats per input: the model's forward pass without
 * the output head, its final-normed hidden states pooled over the input's
 * tokens (docs/embeddings.md). */

typedef enum sp_pooling {
    SP_POOLING_DEFAULT = 0, /* the file's <arch>.pooling_type (mean, cls or last); mean when absent or none */
    SP_POOLING_MEAN,        /* average of every token's state */
    SP_POOLING_CLS,         /* the first token's state */
    SP_POOLING_LAST,        /* the last token's state */
} sp_pooling;
/* "mean", "cls", "last" ("default" for SP_POOLING_DEFAULT); NULL for an unknown value. */
SP_API const char *sp_pooling_name(sp_pooling p);
/* The pooling named `name` ("mean", "cls", "last", any case); SP_ERR_ARG
 * naming it and the choices when unknown. */
SP_API sp_status sp_pooling_parse(const char *name, sp_pooling *out);
/* What SP_POOLING_DEFAULT means for this model (never SP_POOLING_DEFAULT). */
SP_API sp_pooling sp_model_pooling(const sp_model *m);

typedef struct sp_embed_params {
    sp_pooling pooling;  /* SP_POOLING_DEFAULT: sp_model_pooling */
    bool no_normalize;   /* false: each vector scaled to unit L2 length */
} sp_embed_params;

/* Embeds n_inputs token sequences into out [n_inputs][n_embd].  Each input
 * needs 1 to min(n_ctx, n_batch) tokens (SP_ERR_CONTEXT naming the input
 * otherwise: an input is computed in one forward pass).  As many inputs as
 * fit in n_batch tokens share a forward pass; each token attends to its own
 * input only, so a vector does not depend on what it is batched with.  Runs
 * to completion inside the call, beside any running requests.  p NULL: all
 * defaults.  Errors: SP_ERR_ARG, SP_ERR_CONTEXT, SP_ERR_FULL (the KV cache
 * cannot hold one input), SP_ERR_NOMEM. */
SP_API sp_status sp_engine_embed(sp_engine *e, const sp_token *const *inputs, const size_t *n_tokens,
                                 size_t n_inputs, const sp_embed_params *p, float *out);
/* Vector length sp_engine_embed writes (the model's n_embd). */
SP_API int sp_engine_n_embd(const sp_engine *e);
/* Most tokens one input may have: min(n_ctx, n_batch). */
SP_API int sp_engine_embed_max_tokens(const sp_engine *e);

/* -------------------------------------------------------------- tool calls
 * OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` for a model's
 * chat template: the format the template writes calls in (Hermes/Qwen,
 * Llama 3, Mistral, or plain JSON for templates without tools) is chosen
 * from the template's source.  An sp_toolcall holds one request's tools;
 * it gives the prompt (sp_toolcall_chat_tokenize), the grammar of the calls
 * and their check for sp_gen_params, and reads calls back out of the output
 * (sp_toolcall_parser).  One thread builds it; once built it is only read,
 * by any number of threads (the engine's check, the response builder). */

typedef struct sp_toolcall sp_toolcall;

typedef enum sp_toolcall_choice {
    SP_TOOLCALL_NONE,     /* no call: the answer is text */
    SP_TOOLCALL_AUTO,     /* text or calls, the model decides */
    SP_TOOLCALL_REQUIRED, /* one or more calls */
    SP_TOOLCALL_NAMED,    /* exactly one call of the named function */
} sp_toolcall_choice;

/* Reads a request's tools (a JSON array), tool_choice and
 * parallel_tool_calls (JSON values; NULL when absent), all NUL-terminated
 * JSON text, for m's chat template (m NULL: plain JSON calls).  Errors:
 * SP_ERR_ARG with the message saying what is wrong and param[0..cap)
 * naming the field ("tools[1].function.name"); SP_ERR_NOMEM. */
SP_API sp_status sp_toolcall_create(const sp_model *m, const char *tools, const char *choice, const char *parallel,
                                    char *param, size_t cap, sp_toolcall **out);
SP_API void sp_toolcall_free(sp_toolcall *tc);
SP_API sp_toolcall_choice sp_toolcall_choice_of(const sp_toolcall *tc);
/* The grammar of the calls (GBNF text, the caller's: sp_free) and, for
 * `auto`, the trigger that starts it (static; NULL otherwise): give both to
 * sp_grammar_cache_get.  SP_ERR_ARG for tool_choice none (no grammar) or
 * parameters no grammar can express. */
SP_API sp_status sp_toolcall_grammar(const sp_toolcall *tc, char **gbnf, const char **trigger);
/* The check of a finished output, in the shape of sp_gen_params.validate
 * (ctx: the sp_toolcall): every call names a function of the request and
 * its arguments are valid for that function's parameter schema. */
SP_API sp_status sp_toolcall_check(void *tc, const char *text, size_t len, char *why, size_t cap);

/* Renders msgs with m's chat template and tokenizes them as
 * sp_model_chat_tokenize does, with the request's tools (tc; NULL: none)
 * given to the template in the form its call format wants.  Here a
 * message's tool_calls is OpenAI's request form, JSON text of
 * [{"id", "type", "function": {"name", "arguments": "<JSON object text>"}}];
 * tool results are "tool" messages with tool_call_id.  Errors: SP_ERR_ARG
 * (tool_calls that are not JSON; for a template that takes calls as they
 * are, arguments that are not a JSON object; a template that fails; the
 * message names the message), SP_ERR_NOMEM.  *out is the caller's (sp_free).
 * Thread-safe. */
SP_API sp_status sp_toolcall_chat_tokenize(const sp_model *m, const sp_toolcall *tc, const sp_chat_msg *msgs,
                                           size_t n, sp_token **out, size_t *n_out);
/* The same with variables for the template: vars is JSON text of an object
 * (NULL: none) whose keys become globals of the template, as HF's
 * apply_chat_template takes keyword arguments (enable_thinking,
 * reasoning_effort, ...).  The names the renderer defines (messages,
 * tools, add_generation_prompt, bos_token, eos_token and its functions)
 * are reserved: SP_ERR_ARG naming the key, as for vars that are not an
 * object. */
SP_API sp_status sp_toolcall_chat_tokenize_vars(const sp_model *m, const sp_toolcall *tc, const sp_chat_msg *msgs,
                                                size_t n, const char *vars, sp_token **out, size_t *n_out);

/* Reading calls out of one choice's output, also incrementally for a
 * stream: text that may still turn into a call is held back until it is
 * known not to.  One parser per choice, used by one thread at a time; tc
 * must outlive it. */
typedef enum sp_toolcall_event_kind {
    SP_TOOLCALL_TEXT, /* content text */
    SP_TOOLCALL_CALL, /* a call begins: index, id, name (text) */
    SP_TOOLCALL_ARGS, /* a piece of the arguments' JSON text of call `index` */
} sp_toolcall_event_kind;

typedef struct sp_toolcall_event {
    sp_toolcall_event_kind kind;
    int index;
    const char *id;     /* SP_TOOLCALL_CALL */
    const char *text;   /* valid during the callback */
    size_t len;
} sp_toolcall_event;
typedef sp_status (*sp_toolcall_fn)(void *user, const sp_toolcall_event *ev);

typedef struct sp_toolcall_parser sp_toolcall_parser;
SP_API sp_status sp_toolcall_parser_new(sp_toolcall_parser **out, const sp_toolcall *tc);
SP_API void sp_toolcall_parser_free(sp_toolcall_parser *p);
/* Forgets everything read (an attempt that is retried). */
SP_API void sp_toolcall_parser_reset(sp_toolcall_parser *p);
/* Reads more output; `last`: the output ends here (held text is released).
 * Events go to fn on this thread; a status other than SP_OK from fn stops
 * the feed and is returned. */
SP_API sp_status sp_toolcall_parser_feed(sp_toolcall_parser *p, const char *text, size_t len, bool last,
                                         sp_toolcall_fn fn, void *user);
/* Calls begun so far. */
SP_API int sp_toolcall_parser_calls(const sp_toolcall_parser *p);

/* -------------------------------------------------------------- decoding */

#define SP_MAX_LOGPROBS 20

typedef struct sp_logit_bias {
    sp_token id;
    float bias;   /* finite or -INFINITY (ban); +INFINITY and NaN are rejected */
} sp_logit_bias;

/* The decoding chain, applied in this order: logit bias, penalties
 * (repeat: logit > 0 ? logit / r : logit * r; then presence and frequency
 * as OpenAI's), the grammar mask (a request with a grammar), [logprobs are
 * taken here], top-k, temperature, softmax, top-p, min-p, typical-p, the
 * seeded draw.  Greedy (argmax after bias, penalties and the mask, ties to
 * the lowest id) when temperature <= 0.  The same seed and inputs give the
 * same tokens on every thread count. */
typedef struct sp_sampler_params {
    float temperature;      /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off; <= 0 keeps only the top token */
    float min_p;            /* <= 0: off */
    float typical_p;        /* >= 1: off */
    float repeat_penalty;   /* 1: off; must be > 0 */
    int32_t repeat_last_n;  /* penalty window: 0 = penalties off, -1 = whole history */
    float presence_penalty; /* 0: off */
    float frequency_penalty;/* 0: off */
    uint64_t seed;
    /* Copied when the request is submitted; ids must lie in [0, n_vocab).
     * Repeated ids add up. */
    const sp_logit_bias *logit_bias;
    size_t n_logit_bias;
    int32_t n_logprobs;     /* in a request: taken from sp_gen_params.logprobs */
} sp_sampler_params;

/* llama.cpp's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat penalty off (1.0, window 64), no presence/frequency penalty,
 * typical-p off, seed 0, no bias, no logprobs. */
SP_API void sp_sampler_params_default(sp_sampler_params *p);

/* The sampling settings a model recommends: sp_sampler_params_default()
 * with the file's general.sampling.* keys (temp, top_k, top_p, min_p,
 * penalty_repeat, penalty_last_n) laid over it; *n_from_model counts the
 * keys used.  A key of the wrong type or out of range is left out and
 * reported as SP_ERR_FORMAT naming it (the others still apply: *p is always
 * usable).  A vocab_only model gives the defaults.  Thread-safe. */
SP_API sp_status sp_model_sampling_defaults(const sp_model *m, sp_sampler_params *p, int *n_from_model);

/* Stages of one's own: a request can extend its decoding chain with
 * stages written by the caller (sp_gen_params.stages), llama.cpp-style:
 * each has a name, an apply that reshapes the candidates, and optional
 * accept, reset, clone and free.  A stage runs just before the built-in
 * stage named by `before`; several at one point run in array order.
 *
 * apply sees the surviving candidates as {id, logit} pairs, in no
 * particular order.  It may change logits (-INFINITY bans a token; NaN
 * counts as -INFINITY), drop candidates (move the kept ones to the front
 * and lower *n) and reorder them, never add any or repeat an id; at least
 * one candidate with a logit above -INFINITY must remain.  Logits are
 * before temperature: once the temperature stage has run, the
 * probabilities are recomputed from the logits apply leaves, at the
 * request's temperature, over the survivors.  A candidate dropped before
 * SP_STAGE_LOGPROBS is banned (like a logit_bias of -INFINITY: logprobs
 * never list it); after it, it only leaves the draw.  apply may run more
 * than once for one token (`explain` runs the chain once without drawing),
 * so it changes no state: the state changes in accept and reset.
 *
 * Each choice of a request runs its own copy of the state, made at submit
 * by clone (n copies for n choices); the library frees each copy with
 * free when the request leaves its engine, and never frees the caller's
 * `user`.  Without clone every choice shares `user` and free is never
 * called.  Callbacks run on the engine's thread: clone inside
 * sp_request_submit, the others inside sp_engine_step.  `explain` shows
 * each such stage as a column under its name (while SP_EXPLAIN_STAGES
 * columns last).  Requests with stages decode without speculative drafts
 * and cannot use beams (SP_ERR_ARG). */
typedef struct sp_token_logit {
    sp_token id;
    float logit;
} sp_token_logit;

/* The built-in stages in chain order (sp_sampler_params above).  With
 * temperature <= 0, top-k to typical-p are left out and the chain ends in
 * the greedy argmax at SP_STAGE_DRAW. */
typedef enum sp_stage_point {
    SP_STAGE_LOGIT_BIAS = 0, /* first of all: the model's logits */
    SP_STAGE_PENALTIES,
    SP_STAGE_GRAMMAR,
    SP_STAGE_LOGPROBS,       /* after the grammar mask; logprobs are taken here */
    SP_STAGE_TOP_K,
    SP_STAGE_TEMPERATURE,
    SP_STAGE_TOP_P,
    SP_STAGE_MIN_P,
    SP_STAGE_TYPICAL_P,
    SP_STAGE_DRAW,           /* last: just before the draw or the greedy argmax */
} sp_stage_point;

#define SP_MAX_STAGES 8

typedef struct sp_stage {
    const char *name;        /* required; copied (its first 31 bytes) */
    sp_stage_point before;
    void *user;              /* the caller's state (or the template of clone's copies) */
    /* Required.  Reshapes cand[0..*n) as above; history is the choice's
     * tokens so far (prompt, then generated).  An error status (with
     * sp_error_set) ends the choice with SP_FINISH_ERROR and that message. */
    sp_status (*apply)(void *user, sp_token_logit *cand, size_t *n, const sp_token *history, size_t n_history);
    void (*accept)(void *user, sp_token t); /* the token the choice drew, end tokens too */
    void (*reset)(void *user);              /* the choice starts over from its prompt (a retry) */
    void *(*clone)(void *user);             /* a copy of the state; NULL: out of memory */
    void (*free)(void *user);               /* frees a copy clone made */
} sp_stage;

/* Everything about one request but its prompt. */
typedef struct sp_gen_params {
    sp_sampler_params sampling;
    int32_t max_tokens;         /* most tokens per choice; < 0: until the context is
                                   full; 0 is refused (SP_ERR_ARG) */
    const char *const *stop;    /* stop strings (copied at submit); the text
                                   stops before the first one that appears */
    size_t n_stop;
    int n;                      /* choices sharing one prefill, 1..16; 0: 1 */
    int beams;                  /* beam search width; <= 1: off (1: greedy) */
    float length_penalty;       /* beam score = logprob / len^length_penalty */
    bool ignore_eos;            /* end-of-generation tokens do not stop */
    int logprobs;               /* < 0: none; K >= 0: each token's logprob and the top K */
    bool explain;               /* each token event carries its sp_explain */
    /* Constrained output.  grammar: made from this engine's model, used by
     * the request until its last event; each token is drawn from those the
     * grammar allows, an end token only where it accepts.  A choice that
     * stops (end token or stop string) is checked: the grammar must accept
     * its text, and validate (optional; sp_grammar_check_text checks a
     * schema) must return SP_OK for it, writing why it fails to
     * why[0..cap).  If not, the choice starts over from the prompt with a
     * new seed, up to max_retries (0..16) times (not with beams: beam
     * search is deterministic), and then ends with SP_FINISH_ERROR.  Output
     * cut at max_tokens is not checked.  A state where the grammar allows
     * no token ends the choice with SP_FINISH_ERROR. */
    sp_grammar *grammar;
    sp_status (*validate)(void *ctx, const char *text, size_t len, char *why, size_t cap);
    void *validate_ctx;
    int max_retries;
    /* Stages of one's own (sp_stage above), at most SP_MAX_STAGES; the
     * array is copied at submit. */
    const sp_stage *stages;
    size_t n_stages;
} sp_gen_params;

/* sp_sampler_params_default(), max_tokens -1, n 1, no beams, length
 * penalty 1, no stop strings, no logprobs, no grammar, no retries, no stages of one's own. */
SP_API void sp_gen_params_default(sp_gen_params *gp);

typedef enum sp_finish {
    SP_FINISH_NONE = 0,
    SP_FINISH_STOP,      /* end-of-generation token or a stop string */
    SP_FINISH_LENGTH,    /* max_tokens or the context limit */
    SP_FINISH_CANCELLED, /* sp_request_cancel() */
    SP_FINISH_ERROR,
} sp_finish;
/* "none", "stop", "length", "cancelled", "error". */
SP_API const char *sp_finish_name(sp_finish f);

/* Log-probabilities of one sampled token: OpenAI's meaning, the model's
 * distribution after the request's bias and penalties, before any sampling
 * filter or temperature.  top[] holds the n_top most likely tokens, most
 * likely first (ties: lowest id); banned tokens are never listed. */
typedef struct sp_token_logprobs {
    float logprob;          /* of the sampled token */
    int n_top;
    struct {
        sp_token id;
        float logprob;
    } top[SP_MAX_LOGPROBS];
} sp_token_logprobs;

/* What one step of the chain did to the most likely tokens: the data behind
 * `spindle run --explain` and the server's `explain` request extension.
 * Rows are the top 8 of the raw logits and the top 8 after bias and
 * penalties (up to 16 distinct tokens, most likely raw first).  Stages are
 * the active ones in chain order; each has a name, its setting and, per
 * row, the probability among the survivors after it (-1: removed there or
 * earlier).  Names: "penalties" (logit bias and repeat/presence/frequency
 * penalties, probabilities at temperature 1),
 * "grammar" (the tokens a request's grammar allows), "top-k",
 * "temperature", "top-p", "min-p", "typical-p", "greedy" (temperature
 * 0: only the argmax survives), and the name of each of the request's own
 * stages (sp_stage). */
#define SP_EXPLAIN_ROWS 16
#define SP_EXPLAIN_STAGES 10

typedef struct sp_explain_stage {
    char name[16];
    float param;            /* k, T or p; NAN for stages without one */
    uint32_t kept;          /* candidates surviving this stage */
    float p[SP_EXPLAIN_ROWS];
} sp_explain_stage;

typedef struct sp_sampler_explain {
    sp_token chosen;        /* the token drawn */
    uint32_t n_vocab;
    uint32_t n_rows;
    sp_token row[SP_EXPLAIN_ROWS];
    float raw[SP_EXPLAIN_ROWS];   /* softmax of the unmodified logits */
    uint32_t n_stages;
    sp_explain_stage stage[SP_EXPLAIN_STAGES];
} sp_explain;

/* Prints *x as a table: one row per token (its text from m, which may be
 * NULL) with its probability after each stage ("-" once filtered out), the
 * survivors per stage, and the chosen token. */
SP_API void sp_explain_print(const sp_explain *x, const sp_model *m, FILE *out);

/* One event per generated token of one choice, and a final one per choice
 * (finish != SP_FINISH_NONE, id -1).  `text` is the text this token releases:
 * complete UTF-8, stop strings removed, possibly empty while held back; the
 * final event carries what was still held.  Pointers are valid during the
 * callback (polling: until the next sp_request_poll or sp_engine_step). */
typedef struct sp_token_event {
    int choice;                     /* 0..n-1 */
    sp_token id;                    /* -1 on the final event */
    const char *text;
    size_t len;
    const sp_token_logprobs *lp;    /* NULL unless gp.logprobs >= 0 */
    const sp_explain *explain;      /* the step that chose id; NULL unless
                                          gp.explain, and on final events */
    sp_finish finish;
    /* usage, valid on every event */
    uint32_t n_prompt, n_cached, n_generated;
    double logprob_sum;             /* over this choice's generated tokens */
    /* Constrained output: the attempt this event belongs to (1, 2, ...).
     * An event with `retry` set (id -1, finish NONE) says the attempt
     * failed its check (`error` says why) and everything this choice sent
     * since its last retry is void; the next attempt follows.  A final
     * event with SP_FINISH_ERROR may carry `error` too (grammar dead end,
     * every attempt invalid); `valid`: a final STOP event passed its check. */
    int attempt;
    bool retry, valid;
    const char *error;
} sp_token_event;
typedef void (*sp_event_fn)(void *user, const sp_token_event *ev);

/* ---------------------------------------------------------------- requests */

typedef struct sp_request sp_request;

/* Admits a request; it starts with the next sp_engine_step().  The prompt
 * and gp (stop strings and logit bias included) are copied.
 *
 * Callback mode (fn != NULL): fn(user, event) runs inside sp_engine_step()
 * on the engine's thread and must not call back into the engine except
 * sp_request_cancel.  The engine frees the request after its last final
 * event; *out (optional) is valid until then.
 * Polling mode (fn == NULL, out required): events queue in the request;
 * read them with sp_request_poll(), and free it with sp_request_free()
 * (before it finishes: it stops there).
 *
 * Errors: SP_ERR_CONTEXT when the prompt (plus one token) can never fit the
 * context or the KV cache (the message says how many tokens and the limit);
 * SP_ERR_FULL when it would fit but slots or blocks are short right now
 * (retry after a step); SP_ERR_ARG for bad parameters (naming the field). */
SP_API sp_status sp_request_submit(sp_engine *e, const sp_token *prompt, size_t n_prompt,
                                   const sp_gen_params *gp, sp_event_fn fn, void *user, sp_request **out);
/* The same with a text prompt, tokenized as sp_model_tokenize(add_special
 * true, parse_special) does. */
SP_API sp_status sp_request_submit_text(sp_engine *e, const char *text, size_t len, bool parse_special,
                                        const sp_gen_params *gp, sp_event_fn fn, void *user,
                                        sp_request **out);
/* Ends the request at the next step with SP_FINISH_CANCELLED (final events
 * are still delivered). */
SP_API void sp_request_cancel(sp_request *r);
/* Polling mode: the next queued event (true), or false when none is
 * waiting.  The event's pointers are valid until the next call of this or
 * sp_engine_step. */
SP_API bool sp_request_poll(sp_request *r, sp_token_event *ev);
/* Polling mode: true once every choice's final event has been polled. */
SP_API bool sp_request_done(const sp_request *r);
/* Polling mode: frees the request; one still running stops at once (no
 * final event) and its slot and KV blocks are free for the next submit.
 * May be called before or after sp_engine_free, not inside an event
 * callback. */
SP_API void sp_request_free(sp_request *r);

/* -------------------------------------------------------------- quality
 * How well a model predicts a text, as llama-perplexity measures it, and
 * how far a quantized model's predictions move from the original's.  Texts
 * are tokenized as llama-perplexity does (BOS first when the vocabulary
 * adds one, special-token texts not parsed) and cut into non-overlapping
 * windows; each window runs from an empty cache, its first token replaced
 * by BOS when the vocabulary adds one, and the positions of its second half
 * predict their next token.  The engine needs n_ctx >= the window (make it
 * with n_ctx = n_batch = n_outputs = the window for the fewest passes).  It
 * runs to completion inside the call, on the engine's thread. */

typedef struct sp_perplexity_result {
    size_t n_tokens;    /* tokens of the whole text */
    size_t n_windows;   /* evaluated so far */
    size_t n_scored;    /* positions scored */
    double ppl, ppl_err; /* exp(mean -log p) and its standard error */
    /* against a saved base (kl_base_in), otherwise 0: */
    double base_ppl;    /* the base model's perplexity on the same positions */
    double kl_mean, kl_err, kl_p99, kl_max; /* KL(base || this model) per position */
    double top1_same;   /* fraction of positions whose most likely token is the base's */
} sp_perplexity_result;

typedef struct sp_perplexity_params {
    int n_window;             /* tokens per window, >= 4 (default 512) */
    size_t max_windows;       /* 0: every full window of the text */
    const char *kl_base_out;  /* save this model's log-probabilities here
                                 (2 bytes a vocabulary entry a position; NULL: no) */
    const char *kl_base_in;   /* compare with a file saved so (NULL: no); it must
                                 come from the same text, window and vocabulary */
    /* After each window with the running values (KL: mean only); NULL: none. */
    void (*progress)(void *user, const sp_perplexity_result *r, size_t n_windows_total);
    void *progress_user;
} sp_perplexity_params;

/* Window 512, every window, no KL files, no progress. */
SP_API void sp_perplexity_params_default(sp_perplexity_params *p);

/* Perplexity of text[0..len) (and KL divergence against a saved base).
 * Errors: SP_ERR_ARG when the text holds no full window or the window does
 * not fit the engine's context; SP_ERR_IO / SP_ERR_FORMAT for the KL files
 * (a base file from another text, window or vocabulary is refused).  An
 * output file is written under a temporary name and renamed at the end:
 * nothing is left behind on failure. */
SP_API sp_status sp_engine_perplexity(sp_engine *e, const char *text, size_t len, const sp_perplexity_params *p,
                                      sp_perplexity_result *r);

/* An importance matrix for sp_model_quantize: for every layer matrix, the
 * sum over the text's tokens of each input column's squared activation
 * (the output head and embeddings are left out), in llama.cpp's imatrix
 * GGUF format, over the same windows as sp_engine_perplexity. */
typedef struct sp_imatrix_params {
    int n_window;             /* tokens per window, >= 4 (default 512) */
    size_t max_windows;       /* 0: every full window */
    const char *dataset;      /* the text's name, recorded in the file; NULL: "" */
    /* After each window (done, total in windows); NULL: none. */
    void (*progress)(void *user, const char *what, uint64_t done, uint64_t total);
    void *progress_user;
} sp_imatrix_params;
SP_API void sp_imatrix_params_default(sp_imatrix_params *p);
/* Writes out_path (atomically); *n_windows (optional): windows evaluated.
 * Errors as sp_engine_perplexity's. */
SP_API sp_status sp_engine_imatrix(sp_engine *e, const char *text, size_t len, const char *out_path,
                                   const sp_imatrix_params *p, size_t *n_windows);

/* ------------------------------------------------------------ quantization
 * A model file to another weight type, as llama.cpp's llama_model_quantize
 * does it: the same per-tensor rules (output head, embeddings, attention V,
 * FFN down, the fallbacks when a row does not split into a type's blocks),
 * byte-identical output without an importance matrix.  Metadata and
 * tokenizer are copied; general.file_type and the quantization version set.
 * docs/quantization.md lists the types with their size and quality. */

typedef struct sp_quantize_params {
    const char *type;         /* file type: "Q4_K_M", "Q8_0", "F16", ... (any case;
                                 Q3_K, Q4_K, Q5_K mean the _M mixes; see
                                 sp_quantize_type_name) */
    int n_threads;            /* <= 0: one per core */
    bool allow_requantize;    /* accept quantized input (Q8_0 and below): each
                                 requantization loses quality */
    const char *imatrix;      /* importance matrix (sp_engine_imatrix or
                                 llama-imatrix) for the K-quants; NULL: none */
    /* After each tensor (done, total in input bytes); NULL: none.
     * sp_progress_stderr draws a line on a terminal. */
    void (*progress)(void *user, const char *what, uint64_t done, uint64_t total);
    void *progress_user;
} sp_quantize_params;

typedef struct sp_quantize_stats {
    uint64_t bytes_in, bytes_out;   /* tensor data */
    uint64_t n_elements;
    uint32_t n_tensors, n_converted;
    uint32_t n_fallback;            /* tensors given a fallback type */
    uint32_t n_imatrix;             /* tensors quantized with importance weights */
} sp_quantize_stats;

/* Type NULL (required), one thread per core, no requantizing, no imatrix. */
SP_API void sp_quantize_params_default(sp_quantize_params *p);
/* The i-th file type's name ("Q4_K_M") and, through `about` (optional), a
 * line describing it; NULL past the last. */
SP_API const char *sp_quantize_type_name(size_t i, const char **about);
/* Writes out_path under a temporary name renamed at the end (nothing is
 * left behind on failure).  Errors: SP_ERR_ARG (an unknown type,
 * requantizing without allow_requantize, an importance matrix that does not
 * fit the model), SP_ERR_IO (cannot read or write), SP_ERR_FORMAT (not a
 * GGUF model, a malformed importance matrix).  stats may be NULL.
 * Thread-safe. */
SP_API sp_status sp_model_quantize(const char *in_path, const char *out_path, const sp_quantize_params *p,
                                   sp_quantize_stats *stats);

/* ---------------------------------------------------------------- machine */

/* This process's resident memory now and its peak so far, in bytes (0 where
 * /proc does not tell). */
SP_API void sp_process_memory(uint64_t *resident, uint64_t *peak);

#ifdef __cplusplus
}
#endif
#endif
