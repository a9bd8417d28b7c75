"""spindle: run GGUF language models on the CPU from Python.

    import spindle
    m = spindle.Model("SmolLM2-135M-Instruct.Q4_1.gguf")
    print(m.generate("The capital of France is", max_tokens=16, temperature=0))
    for piece in m.chat([{"role": "user", "content": "Hi"}], stream=True):
        print(piece, end="", flush=True)

A thin layer over the C API (include/spindle.h) through ctypes.  A Model
is used by one thread at a time.  Every failure raises SpindleError with
the library's message.
"""
import ctypes
from ctypes import byref, c_char_p, c_int32, c_size_t, c_void_p

from . import _capi

__all__ = ["Model", "SpindleError", "Completion", "Token", "version"]

_lib = _capi.load()
_ERR_INTERNAL = 9  # sp_status SP_ERR_INTERNAL
_NO_CALLBACK = _capi.EVENT_FN()  # NULL: the request is polled


class SpindleError(Exception):
    """A failed library call: `status` is the status name ("argument error",
    "format error", ...), str(e) the library's one-line message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _check(st):
    if st != 0:
        raise SpindleError(_lib.sp_status_name(st).decode(), _lib.sp_error_message().decode("utf-8", "replace"))


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
    "length", ...), tokens (Token list), prompt_tokens, completion_tokens."""

    def __init__(self, text, finish_reason, tokens, prompt_tokens, completion_tokens):
        self.text = text
        self.finish_reason = finish_reason
        self.tokens = tokens
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens

    def __repr__(self):
        return "Completion(%r, finish_reason=%r)" % (self.text, self.finish_reason)


# Python keyword -> sp_sampler_params field, for Model.generate's **sampling.
_SAMPLER_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
                   "presence_penalty", "frequency_penalty", "seed")


class _GenArgs:
    """sp_gen_params plus the memory it points into (alive until submit)."""

    def __init__(self, max_tokens, stop, logit_bias, logprobs, ignore_eos, sampling):
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


class Model:
    """A GGUF model file and one engine to run it.

    Model(path, n_ctx=0, n_threads=0, n_parallel=1, use_mmap=True,
          use_mlock=False, vocab_only=False, isa=None)

    n_ctx 0: the model's training context (at most 8192); n_threads 0: one
    per core; vocab_only: tokenizer and chat template only (no generation).
    """

    def __init__(self, path, n_ctx=0, n_threads=0, n_parallel=1, use_mmap=True, use_mlock=False,
                 vocab_only=False, isa=None):
        self._model = c_void_p()
        self._engine = c_void_p()
        mp = _capi.ModelParams()
        _lib.sp_model_params_default(byref(mp))
        mp.path = str(path).encode()
        mp.n_threads = n_threads
        mp.use_mmap = use_mmap
        mp.use_mlock = use_mlock
        mp.vocab_only = vocab_only
        mp.isa = isa.encode() if isa else None
        _check(_lib.sp_model_load(byref(mp), byref(self._model)))
        self._engine_params = _capi.EngineParams()
        _lib.sp_engine_params_default(byref(self._engine_params))
        self._engine_params.n_ctx = n_ctx
        self._engine_params.n_parallel = n_parallel

    def close(self):
        """Frees the engine and the model (also done when collected)."""
        if self._engine:
            _lib.sp_engine_free(self._engine)
            self._engine = c_void_p()
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

    def complete(self, prompt, max_tokens=256, stop=None, logprobs=None, logit_bias=None, ignore_eos=False,
                 **sampling):
        """Generates a continuation and returns a Completion with every
        token (and, with logprobs=K, each token's logprob and top K).
        `prompt` is text or a list of token ids; sampling keywords:
        temperature (0: greedy), top_k, top_p, min_p, typical_p,
        repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
        seed.  max_tokens None: until the context is full."""
        args = _GenArgs(max_tokens, stop, logit_bias, logprobs, ignore_eos, sampling)
        pieces, tokens, finish, n_prompt, n_gen = [], [], None, 0, 0
        for tid, text, lp, fin, n_prompt, n_gen in self._events(prompt, args):
            pieces.append(text)
            if fin:
                finish = fin
                continue
            piece = self.token_to_piece(tid).decode("utf-8", "replace")
            if lp:
                top = [(t, self.token_to_piece(t).decode("utf-8", "replace"), p) for t, p in lp[1]]
                tokens.append(Token(tid, piece, lp[0], top))
            else:
                tokens.append(Token(tid, piece))
        return Completion(b"".join(pieces).decode("utf-8", "replace"), finish, tokens, n_prompt, n_gen)

    def generate(self, prompt, max_tokens=256, temperature=None, stream=False, stop=None, logit_bias=None,
                 ignore_eos=False, **sampling):
        """The generated text for `prompt` (text or token ids), or with
        stream=True an iterator of text pieces as they are generated.
        temperature 0 is greedy (the same text as `spindle run --temp 0`);
        other keywords as for complete()."""
        sampling["temperature"] = temperature
        args = _GenArgs(max_tokens, stop, logit_bias, None, ignore_eos, sampling)
        pieces = (text.decode("utf-8", "replace") for _id, text, _lp, _fin, _np, _ng in self._events(prompt, args)
                  if text)
        return pieces if stream else "".join(pieces)

    def chat(self, messages, max_tokens=256, temperature=None, stream=False, stop=None, logit_bias=None,
             ignore_eos=False, **sampling):
        """The assistant's reply to `messages` (dicts with "role" and
        "content"), rendered with the model's chat template; stream=True
        gives an iterator of pieces."""
        return self.generate(self.chat_tokens(messages), max_tokens, temperature, stream, stop, logit_bias,
                             ignore_eos, **sampling)

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


class _Request:
    """A submitted request in polling mode, iterated as (id, text, lp,
    finish, n_prompt, n_generated) per event, where lp is None or
    (logprob, [(id, logprob), ...]).  Stepping the engine happens while
    iterating; the request is freed (cancelled if unfinished) when the
    iteration ends, on close(), or when it is collected."""

    def __init__(self, engine, tokens, args):
        self._engine = engine
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
        return (ev.id, text, lp, _capi.FINISH_NAMES.get(ev.finish, "error"), ev.n_prompt, ev.n_generated)

    def close(self):
        if self._req:
            _lib.sp_request_free(self._req)
            self._req = c_void_p()

    def __del__(self):
        self.close()
