"""spindle: run GGUF language models on the CPU from Python.

    import spindle
    m = spindle.Model("SmolLM2-135M-Instruct.Q4_1.gguf")
    print(m.generate("The capital of France is", max_tokens=16, temperature=0))
    for piece in m.chat([{"role": "user", "content": "Hi"}], stream=True):
        print(piece, end="", flush=True)
    m.chat([{"role": "user", "content": "A city as JSON"}], json_schema={"type": "object"})
    spindle.Model("all-MiniLM-L6-v2.F16.gguf").embed(["a text", "another"])

A thin layer over the C API (include/spindle.h) through ctypes.  A Model
is used by one thread at a time.  Every failure raises SpindleError with
the library's message.
"""
import ctypes
import json
from collections import namedtuple
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_int32, c_size_t, c_void_p

from . import _capi

__all__ = ["Model", "Grammar", "SpindleError", "Completion", "Token", "version"]

_lib = _capi.load()
_ERR_INTERNAL = 9  # sp_status SP_ERR_INTERNAL
_NO_CALLBACK = _capi.EVENT_FN()  # NULL: the request is polled
_GRAMMAR_GBNF, _GRAMMAR_SCHEMA, _GRAMMAR_SCHEMA_FLEX = ord("g"), ord("s"), ord("S")  # sp_grammar_kind
# sp_grammar_check_text as a C function pointer: sp_gen_params.validate
_CHECK_TEXT = ctypes.cast(_lib.sp_grammar_check_text, c_void_p).value


class SpindleError(Exception):
    """A failed library call: `status` is the status name ("argument error",
    "format error", ...), str(e) the library's one-line message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _check(st):
    if st != 0:
        raise SpindleError(_lib.sp_status_name(st).decode(), _lib.sp_error_message().decode("utf-8", "replace"))


def _parse(fn, name, what):
    """An enum value from its name through the library's parser (its
    message names the choices)."""
    v = c_int()
    st = fn(str(name).encode(), byref(v))
    if st != 0:
        raise SpindleError(_lib.sp_status_name(st).decode(),
                           "%s: %s" % (what, _lib.sp_error_message().decode("utf-8", "replace")))
    return v.value


def version():
    """The version of the loaded libspindle."""
    return _lib.sp_version().decode()


class Token:
    """One generated token: id, its text (bytes may end inside a character,
    shown with U+FFFD), its logprob and the most likely alternatives as
    (id, text, logprob) tuples (with logprobs=K)."""

    def __init__(self, id, text, logprob=None, top_logprobs=()):
        self.id = id
        self.text = text
        self.logprob = logprob
        self.top_logprobs = list(top_logprobs)

    def __repr__(self):
        return "Token(%d, %r, logprob=%r)" % (self.id, self.text, self.logprob)


class Completion:
    """The result of Model.complete(): text, finish_reason ("stop",
    "length", ...), tokens (Token list), prompt_tokens, completion_tokens.
    With a grammar: attempts (1 + retries taken), valid (the output passed
    its check) and error (why the last attempt failed, finish_reason
    "error"; None otherwise); text and tokens are the last attempt's."""

    def __init__(self, text, finish_reason, tokens, prompt_tokens, completion_tokens, attempts=1, valid=False,
                 error=None):
        self.text = text
        self.finish_reason = finish_reason
        self.tokens = tokens
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.attempts = attempts
        self.valid = valid
        self.error = error

    def __repr__(self):
        return "Completion(%r, finish_reason=%r)" % (self.text, self.finish_reason)


class Grammar:
    """A GBNF grammar (llama.cpp's format, start rule "root") or a JSON
    Schema (a dict or JSON text) compiled for one model's vocabulary: made
    by Model.grammar().  Given to generate(), complete() or chat() as
    grammar=..., every token is drawn from those that can continue a
    sentence of the grammar; the finished output is checked (a schema's also
    against what no grammar enforces: uniqueItems, multipleOf, bounds on
    floats, not, ...) and generated again from the prompt with a new seed
    when it fails, up to max_retries times.  A schema's JSON is compact
    unless whitespace="flexible" (any JSON whitespace between tokens).
    Used by one thread at a time."""

    def __init__(self, model, gbnf=None, json_schema=None, whitespace="compact"):
        self._g = c_void_p()
        if (gbnf is None) == (json_schema is None):
            raise TypeError("a grammar is either gbnf or json_schema")
        if whitespace not in ("compact", "flexible") or (whitespace != "compact" and gbnf is not None):
            raise ValueError("whitespace is \"compact\" or \"flexible\", for a json_schema")
        if json_schema is not None and not isinstance(json_schema, (str, bytes)):
            json_schema = json.dumps(json_schema)
        text = gbnf if gbnf is not None else json_schema
        data = text.encode() if isinstance(text, str) else bytes(text)
        self.model = model
        kind = _GRAMMAR_GBNF if gbnf is not None else (_GRAMMAR_SCHEMA_FLEX if whitespace == "flexible"
                                                       else _GRAMMAR_SCHEMA)
        _check(_lib.sp_grammar_create(model._model, kind, data, len(data), byref(self._g)))

    def check(self, text):
        """None when `text` is a sentence of the GBNF grammar, or for a
        schema, JSON valid against all of it (any whitespace and key order),
        else why not ("$.path: problem; ...")."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        why = ctypes.create_string_buffer(1024)
        if _lib.sp_grammar_check_text(self._g, data, len(data), why, len(why)) == 0:
            return None
        return why.value.decode("utf-8", "replace")

    def close(self):
        if self._g:
            _lib.sp_grammar_free(self._g)
            self._g = c_void_p()

    def __del__(self):
        self.close()


# Python keyword -> sp_sampler_params field, for Model.generate's **sampling.
_SAMPLER_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
                   "presence_penalty", "frequency_penalty", "seed")


class _GenArgs:
    """sp_gen_params plus the memory it points into (alive until submit)."""

    def __init__(self, max_tokens, stop, logit_bias, logprobs, ignore_eos, sampling, grammar=None,
                 max_retries=2):
        self.gp = _capi.GenParams()
        _lib.sp_gen_params_default(byref(self.gp))
        unknown = set(sampling) - set(_SAMPLER_FIELDS)
        if unknown:
            raise TypeError("unknown sampling parameter(s): %s (known: %s)"
                            % (", ".join(sorted(unknown)), ", ".join(_SAMPLER_FIELDS)))
        for k, v in sampling.items():
            if v is not None:
                setattr(self.gp.sampling, k, v)
        self.gp.max_tokens = -1 if max_tokens is None else max_tokens
        if isinstance(stop, str):
            stop = [stop]
        self.stop = [s.encode() for s in stop or ()]
        if self.stop:
            self.stop_arr = (c_char_p * len(self.stop))(*self.stop)
            self.gp.stop = self.stop_arr
            self.gp.n_stop = len(self.stop)
        if logit_bias:
            self.bias = (_capi.LogitBias * len(logit_bias))(*[_capi.LogitBias(int(k), float(v))
                                                             for k, v in logit_bias.items()])
            self.gp.sampling.logit_bias = self.bias
            self.gp.sampling.n_logit_bias = len(logit_bias)
        self.gp.logprobs = -1 if logprobs is None else logprobs
        self.gp.ignore_eos = bool(ignore_eos)
        self.grammar = grammar  # alive while the request uses it
        if grammar is not None:
            self.gp.grammar = grammar._g
            self.gp.validate = _CHECK_TEXT
            self.gp.validate_ctx = grammar._g
            self.gp.max_retries = max_retries
        self.retries = grammar is not None and max_retries > 0


class Model:
    """A GGUF model file and one engine to run it.

    Model(path, n_ctx=0, n_threads=0, n_parallel=1, use_mmap=True,
          use_mlock=False, vocab_only=False, isa=None, n_batch=0,
          cache_type_k="f16", cache_type_v="f16", spec=None, spec_k=8,
          spec_fixed=False, draft_model=None, spec_layers=0)

    n_ctx 0: the model's training context (at most 8192); n_threads 0: one
    per core; vocab_only: tokenizer and chat template only (no generation);
    n_batch: most tokens in one forward pass (0: 512; also the longest
    input embed() takes).  cache_type_k / cache_type_v: how the KV cache
    stores keys and values, "f16", "q8_0" or "q4_0" (docs/quantization.md).
    Speculative decoding (docs/speculative.md; the output stays the
    model's own): spec "ngram" (prompt lookup), "draft" (draft_model: a
    path or a Model with the same vocabulary) or "self" (the first
    spec_layers layers, 0: half); spec_k the most drafts a step, spec_fixed
    always spec_k drafts (no adapting).
    """

    def __init__(self, path, n_ctx=0, n_threads=0, n_parallel=1, use_mmap=True, use_mlock=False,
                 vocab_only=False, isa=None, n_batch=0, cache_type_k="f16", cache_type_v="f16", spec=None,
                 spec_k=8, spec_fixed=False, draft_model=None, spec_layers=0):
        self._model = c_void_p()
        self._engine = c_void_p()
        self._draft, self._own_draft = None, False
        ep = self._engine_params = _capi.EngineParams()
        _lib.sp_engine_params_default(byref(ep))
        ep.n_ctx = n_ctx
        ep.n_parallel = n_parallel
        ep.n_batch = n_batch
        ep.cache_type_k = _parse(_lib.sp_cache_type_parse, cache_type_k, "cache_type_k")
        ep.cache_type_v = _parse(_lib.sp_cache_type_parse, cache_type_v, "cache_type_v")
        ep.spec = _parse(_lib.sp_spec_kind_parse, spec or "none", "spec")
        ep.spec_k = spec_k
        ep.spec_fixed = spec_fixed
        ep.spec_layers = spec_layers
        mp = _capi.ModelParams()
        _lib.sp_model_params_default(byref(mp))
        mp.path = str(path).encode()
        mp.n_threads = n_threads
        mp.use_mmap = use_mmap
        mp.use_mlock = use_mlock
        mp.vocab_only = vocab_only
        mp.isa = isa.encode() if isa else None
        _check(_lib.sp_model_load(byref(mp), byref(self._model)))
        if draft_model is not None:
            self._own_draft = not isinstance(draft_model, Model)
            self._draft = Model(draft_model, n_threads=n_threads) if self._own_draft else draft_model
            ep.draft_model = self._draft._model

    def close(self):
        """Frees the engine, a draft model it loaded, and the model (also
        done when collected)."""
        if self._engine:
            _lib.sp_engine_free(self._engine)
            self._engine = c_void_p()
        if self._own_draft and self._draft:
            self._draft.close()
        self._draft = None
        if self._model:
            _lib.sp_model_free(self._model)
            self._model = c_void_p()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _engine_get(self):
        if not self._engine:
            _check(_lib.sp_engine_create(self._model, byref(self._engine_params), byref(self._engine)))
        return self._engine

    # ---- description ----

    @property
    def info(self):
        """sp_model_info as a dict (architecture, n_layer, n_vocab, ...)."""
        i = _capi.ModelInfo()
        _lib.sp_model_info_get(self._model, byref(i))
        out = {}
        for name, _ in _capi.ModelInfo._fields_:
            v = getattr(i, name)
            out[name] = v.decode() if isinstance(v, bytes) else v
        return out

    @property
    def n_vocab(self):
        return _lib.sp_model_n_vocab(self._model)

    @property
    def n_ctx(self):
        """The context of the engine generation runs on."""
        return _lib.sp_engine_n_ctx(self._engine_get())

    @property
    def stats(self):
        """sp_engine_stats as a dict: KV cache blocks and bytes, prefix cache
        hits, memory, and the speculative drafts verified (spec_drafted)
        and kept (spec_accepted)."""
        st = _capi.EngineStats()
        _lib.sp_engine_stats_get(self._engine_get(), byref(st))
        return {name: getattr(st, name) for name, _ in _capi.EngineStats._fields_}

    def metadata(self, key):
        """The GGUF metadata value of `key` as text (KeyError when absent)."""
        n = c_size_t()
        buf = ctypes.create_string_buffer(256)
        st = _lib.sp_model_meta_value(self._model, key.encode(), buf, len(buf), byref(n))
        if st != 0 and n.value >= len(buf):
            buf = ctypes.create_string_buffer(n.value + 1)
            st = _lib.sp_model_meta_value(self._model, key.encode(), buf, len(buf), byref(n))
        if st != 0:
            raise KeyError(key)
        return buf.raw[:n.value].decode("utf-8", "replace")

    # ---- tokens ----

    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids of `text` (str or bytes), as llama.cpp tokenizes."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        cap = 6 * len(data) + 16
        out = (c_int32 * cap)()
        n = c_size_t()
        _check(_lib.sp_model_tokenize(self._model, data, len(data), add_special, parse_special, out, cap,
                                      byref(n)))
        return list(out[:n.value])

    @staticmethod
    def _text_call(fn, *args):
        """fn(*args, buf, cap, &len) with a buffer grown to the length asked."""
        n = c_size_t()
        buf = ctypes.create_string_buffer(256)
        st = fn(*args, buf, len(buf), byref(n))
        if st != 0 and n.value > len(buf):
            buf = ctypes.create_string_buffer(n.value)
            st = fn(*args, buf, len(buf), byref(n))
        _check(st)
        return buf.raw[:n.value]

    def token_to_piece(self, token, special=False):
        """The bytes one token stands for (may end inside a character)."""
        return self._text_call(_lib.sp_model_token_to_piece, self._model, token, special)

    def detokenize(self, tokens, special=False):
        """The text of a token sequence (invalid UTF-8 as U+FFFD)."""
        arr = (c_int32 * len(tokens))(*tokens)
        return self._text_call(_lib.sp_model_detokenize, self._model, arr, len(tokens),
                               special).decode("utf-8", "replace")

    # ---- chat ----

    @property
    def chat_template(self):
        return _lib.sp_model_chat_template(self._model).decode("utf-8", "replace")

    @staticmethod
    def _messages(messages):
        keep = [(m["role"].encode(), None if m.get("content") is None else m["content"].encode())
                for m in messages]
        return keep, (_capi.ChatMsg * len(keep))(*[_capi.ChatMsg(r, c) for r, c in keep])

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The prompt text the model's chat template makes of `messages`
        (dicts with "role" and "content")."""
        _keep, arr = self._messages(messages)
        text = c_void_p()
        _check(_lib.sp_model_chat_apply(self._model, arr, len(messages), add_generation_prompt, byref(text)))
        try:
            return ctypes.string_at(text).decode("utf-8", "replace")
        finally:
            _lib.sp_free(text)

    def chat_tokens(self, messages):
        """The prompt tokens of a chat, as `spindle run --chat` makes them."""
        _keep, arr = self._messages(messages)
        toks = ctypes.POINTER(c_int32)()
        n = c_size_t()
        _check(_lib.sp_model_chat_tokenize(self._model, arr, len(messages), byref(toks), byref(n)))
        try:
            return list(toks[:n.value])
        finally:
            _lib.sp_free(toks)

    # ---- generation ----

    def _events(self, prompt, args):
        return _Request(self._engine_get(), self._prompt_tokens(prompt), args)

    def _prompt_tokens(self, prompt):
        return list(prompt) if not isinstance(prompt, (str, bytes)) else self.tokenize(prompt)

    # ---- constrained output ----

    def grammar(self, gbnf=None, json_schema=None):
        """A Grammar for this model from GBNF text or a JSON Schema (a dict
        or JSON text), to give to several requests (generate(grammar=g));
        a bad one raises SpindleError naming the line and column, or the
        schema keyword and its JSON path."""
        return Grammar(self, gbnf=gbnf, json_schema=json_schema)

    def _constraint(self, grammar, json_schema, response_format=None):
        """The Grammar a request's keywords ask for, or None."""
        if sum(x is not None for x in (grammar, json_schema, response_format)) > 1:
            raise TypeError("grammar, json_schema and response_format exclude each other")
        if isinstance(grammar, Grammar):
            if grammar.model is not self:
                raise ValueError("the grammar was made for another Model")
            return grammar
        if grammar is not None:
            return Grammar(self, gbnf=grammar)
        if json_schema is not None:
            return Grammar(self, json_schema=json_schema)
        if response_format is None:
            return None
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "text":
            return None
        ws = response_format.get("whitespace", "compact")
        if kind == "json_object":
            schema = response_format.get("schema")
            if schema is None and ws == "compact":
                return Grammar(self, gbnf=_lib.sp_grammar_json_object_gbnf())
            return Grammar(self, json_schema=schema if schema is not None else {"type": "object"}, whitespace=ws)
        if kind == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema")
            if schema is None:
                raise ValueError("response_format json_schema needs json_schema.schema")
            return Grammar(self, json_schema=schema, whitespace=ws)
        raise ValueError("response_format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}, "
                         "not %r" % (response_format,))

    # ---- generation ----

    def complete(self, prompt, max_tokens=256, stop=None, logprobs=None, logit_bias=None, ignore_eos=False,
                 grammar=None, json_schema=None, max_retries=2, **sampling):
        """Generates a continuation and returns a Completion with every
        token (and, with logprobs=K, each token's logprob and top K).
        `prompt` is text or a list of token ids; sampling keywords:
        temperature (0: greedy), top_k, top_p, min_p, typical_p,
        repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
        seed.  max_tokens None: until the context is full.  Constrained
        output: grammar (a Grammar or GBNF text) or json_schema (a dict or
        JSON text), with up to max_retries (0..16) new attempts when the
        output fails its check; a Completion whose every attempt failed has
        finish_reason "error" and says why in .error."""
        args = _GenArgs(max_tokens, stop, logit_bias, logprobs, ignore_eos, sampling,
                        self._constraint(grammar, json_schema), max_retries)
        pieces, tokens, last = [], [], None
        for ev in self._events(prompt, args):
            last = ev
            if ev.retry:
                pieces, tokens = [], []
                continue
            pieces.append(ev.text)
            if ev.finish:
                continue
            piece = self.token_to_piece(ev.id).decode("utf-8", "replace")
            if ev.lp:
                top = [(t, self.token_to_piece(t).decode("utf-8", "replace"), p) for t, p in ev.lp[1]]
                tokens.append(Token(ev.id, piece, ev.lp[0], top))
            else:
                tokens.append(Token(ev.id, piece))
        return Completion(b"".join(pieces).decode("utf-8", "replace"), last.finish, tokens, last.n_prompt,
                          last.n_generated, last.attempt, last.valid, last.error)

    def generate(self, prompt, max_tokens=256, temperature=None, stream=False, stop=None, logit_bias=None,
                 ignore_eos=False, grammar=None, json_schema=None, max_retries=2, **sampling):
        """The generated text for `prompt` (text or token ids), or with
        stream=True an iterator of text pieces as they are generated.
        temperature 0 is greedy (the same text as `spindle run --temp 0`);
        other keywords as for complete().  Constrained output that fails
        every attempt raises SpindleError saying why; a stream that may be
        retried (a grammar, max_retries > 0) holds each attempt's text back
        and gives it in one piece once it passed its check."""
        sampling["temperature"] = temperature
        args = _GenArgs(max_tokens, stop, logit_bias, None, ignore_eos, sampling,
                        self._constraint(grammar, json_schema), max_retries)
        pieces = self._pieces(self._events(prompt, args), args.retries)
        return pieces if stream else "".join(pieces)

    @staticmethod
    def _pieces(events, hold):
        """The text of events as pieces; with `hold`, an attempt's text in
        one piece at its end (a retry voids what it sent)."""
        held = []
        for ev in events:
            if ev.retry:
                held = []
            elif ev.finish == "error":
                raise SpindleError("invalid output", ev.error or "the generation ended with an error")
            elif ev.text and hold:
                held.append(ev.text)
            elif ev.text:
                yield ev.text.decode("utf-8", "replace")
        if held:
            yield b"".join(held).decode("utf-8", "replace")

    def chat(self, messages, max_tokens=256, temperature=None, stream=False, stop=None, logit_bias=None,
             ignore_eos=False, grammar=None, json_schema=None, response_format=None, max_retries=2, **sampling):
        """The assistant's reply to `messages` (dicts with "role" and
        "content"), rendered with the model's chat template; stream=True
        gives an iterator of pieces.  response_format is OpenAI's:
        {"type": "json_object"} (any JSON object; with "schema": that
        schema, as llama-cpp-python takes it) or {"type": "json_schema",
        "json_schema": {"schema": {...}}}; other keywords as generate()."""
        return self.generate(self.chat_tokens(messages), max_tokens, temperature, stream, stop, logit_bias,
                             ignore_eos, self._constraint(grammar, json_schema, response_format), None,
                             max_retries, **sampling)

    # ---- embeddings ----

    @property
    def pooling(self):
        """How embed() pools by default: "mean", "cls" or "last" (the file's
        <arch>.pooling_type; mean when it has none)."""
        return _lib.sp_pooling_name(_lib.sp_model_pooling(self._model)).decode()

    @property
    def n_embd(self):
        """The length of an embedding vector."""
        return _lib.sp_engine_n_embd(self._engine_get())

    def embed(self, input, pooling=None, normalize=True):
        """The embedding of `input`, a text or a list of token ids: a list
        of n_embd floats, the model's final-normed hidden states pooled over
        the input's tokens (docs/embeddings.md); a list of inputs gives a
        list of vectors, computed in shared forward passes (a vector does
        not depend on what it is batched with).  Texts are tokenized as
        `spindle embed` tokenizes a line.  pooling: "mean", "cls" or "last"
        (None: Model.pooling); normalize False: the pooled state as it is
        (True: unit L2 length).  Each input needs 1 to min(n_ctx, n_batch)
        tokens."""
        single = isinstance(input, (str, bytes)) or (isinstance(input, (list, tuple)) and input and
                                                     all(isinstance(t, int) for t in input))
        inputs = [input] if single else list(input)
        params = _capi.EmbedParams(0 if pooling is None else _parse(_lib.sp_pooling_parse, pooling, "pooling"),
                                   not normalize)
        toks = [(c_int32 * len(t))(*t) for t in (self._prompt_tokens(x) for x in inputs)]
        ptrs = (POINTER(c_int32) * len(toks))(*[ctypes.cast(t, POINTER(c_int32)) for t in toks])
        lens = (c_size_t * len(toks))(*[len(t) for t in toks])
        n_embd = self.n_embd
        out = (c_float * (n_embd * len(toks)))()
        if toks:
            _check(_lib.sp_engine_embed(self._engine_get(), ptrs, lens, len(toks), byref(params), out))
        vectors = [out[i * n_embd:(i + 1) * n_embd] for i in range(len(toks))]
        return vectors[0] if single else vectors

    def logits(self, prompt):
        """The next-token logits (a list of n_vocab floats) after `prompt`
        (text or token ids)."""
        tokens = self._prompt_tokens(prompt)
        arr = (c_int32 * len(tokens))(*tokens)
        out = []
        n_vocab = self.n_vocab

        def on_logits(_user, _pos, row):
            out[:] = row[:n_vocab]

        cb = _capi.LOGITS_FN(on_logits)
        _check(_lib.sp_engine_logits(self._engine_get(), arr, len(tokens), len(tokens) - 1 if tokens else 0, cb,
                                     None))
        return out


# One event of a request: lp is None or (logprob, [(id, logprob), ...]);
# finish None or its name; attempt, retry, valid and error as
# sp_token_event's (error None or text).
_Event = namedtuple("_Event", "id text lp finish n_prompt n_generated attempt retry valid error")


class _Request:
    """A submitted request in polling mode, iterated as an _Event per
    event.  Stepping the engine happens while iterating; the request is
    freed (cancelled if unfinished) when the iteration ends, on close(), or
    when it is collected."""

    def __init__(self, engine, tokens, args):
        self._engine = engine
        self._args = args  # the grammar is used, not copied
        self._req = c_void_p()
        self._ev = _capi.TokenEvent()
        arr = (c_int32 * len(tokens))(*tokens)
        _check(_lib.sp_request_submit(engine, arr, len(tokens), byref(args.gp), _NO_CALLBACK, None,
                                      byref(self._req)))

    def __iter__(self):
        return self

    def __next__(self):
        ev = self._ev
        while self._req and not _lib.sp_request_poll(self._req, byref(ev)):
            if _lib.sp_request_done(self._req):
                self.close()
            elif _lib.sp_engine_step(self._engine) < 0:
                self.close()
                _check(_ERR_INTERNAL)
        if not self._req:
            raise StopIteration
        lp = None
        if ev.lp:
            r = ev.lp[0]
            lp = (r.logprob, [(r.top[k].id, r.top[k].logprob) for k in range(r.n_top)])
        text = ctypes.string_at(ev.text, ev.len) if ev.len else b""
        return _Event(ev.id, text, lp, _capi.FINISH_NAMES.get(ev.finish, "error"), ev.n_prompt, ev.n_generated,
                      ev.attempt, ev.retry, ev.valid, ev.error.decode("utf-8", "replace") if ev.error else None)

    def close(self):
        if self._req:
            _lib.sp_request_free(self._req)
            self._req = c_void_p()

    def __del__(self):
        self.close()
