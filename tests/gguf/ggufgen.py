"""A small GGUF writer for tests: a tiny valid llama-architecture model with
random weights and a byte-level vocabulary, plus ways to corrupt it.

The writer builds the file from parts (header, key/values, tensor infos,
padding, data), so each malformed variant changes exactly one thing.
"""
import struct

import numpy as np

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8


def byte_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def s_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def s_val(vtype, v):
    fmt = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
           T_BOOL: "<B", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
    if vtype == T_STR:
        return s_str(v)
    if vtype == T_ARR:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(s_val(etype, x) for x in items)
    return struct.pack(fmt[vtype], v)


def q8_0(x):
    """Quantize rows (last dim multiple of 32) to ggml Q8_0 bytes."""
    x = x.reshape(-1, 32).astype(np.float32)
    d = np.abs(x).max(axis=1) / 127.0
    q = np.round(x / np.where(d == 0, 1, d)[:, None]).astype(np.int8)
    out = bytearray()
    for i in range(x.shape[0]):
        out += np.float16(d[i]).tobytes() + q[i].tobytes()
    return bytes(out)


class Model:
    """Parts of a tiny llama GGUF (Mixtral-style with n_expert > 0: a router
    and 3-D expert stacks instead of the dense feed-forward); build()
    assembles them."""

    def __init__(self, seed=0, n_embd=64, n_head=4, n_head_kv=2, n_layer=2, n_ff=128, n_expert=0, n_expert_used=0):
        rng = np.random.default_rng(seed)
        bu = byte_unicode()
        tokens = [bu[b] for b in range(256)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        types = [1] * 256 + [3, 3, 3]
        self.n_vocab = len(tokens)
        self.version = 3
        self.alignment = 32
        self.kv = [  # (key, vtype, value)
            ("general.architecture", T_STR, "llama"),
            ("general.alignment", T_U32, 32),
            ("llama.context_length", T_U32, 256),
            ("llama.embedding_length", T_U32, n_embd),
            ("llama.block_count", T_U32, n_layer),
            ("llama.feed_forward_length", T_U32, n_ff),
            ("llama.attention.head_count", T_U32, n_head),
            ("llama.attention.head_count_kv", T_U32, n_head_kv),
            ("llama.rope.freq_base", T_F32, 10000.0),
            ("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5),
            ("tokenizer.ggml.model", T_STR, "gpt2"),
            ("tokenizer.ggml.pre", T_STR, "gpt-2"),
            ("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
            ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
            ("tokenizer.ggml.merges", T_ARR, (T_STR, [])),
            ("tokenizer.ggml.bos_token_id", T_U32, 256),
            ("tokenizer.ggml.eos_token_id", T_U32, 256),
            ("tokenizer.ggml.add_bos_token", T_BOOL, 0),
        ]
        if n_expert:
            self.kv += [("llama.expert_count", T_U32, n_expert), ("llama.expert_used_count", T_U32, n_expert_used)]
        hd = n_embd // n_head
        shapes = [("token_embd.weight", (n_embd, self.n_vocab), GGML_Q8_0 if n_embd % 32 == 0 else GGML_F32),
                  ("output_norm.weight", (n_embd,), GGML_F32)]
        for i in range(n_layer):
            shapes += [
                (f"blk.{i}.attn_norm.weight", (n_embd,), GGML_F32),
                (f"blk.{i}.attn_q.weight", (n_embd, n_head * hd), GGML_Q8_0),
                (f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * hd), GGML_Q8_0),
                (f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * hd), GGML_Q8_0),
                (f"blk.{i}.attn_output.weight", (n_head * hd, n_embd), GGML_Q8_0),
                (f"blk.{i}.ffn_norm.weight", (n_embd,), GGML_F32),
            ]
            if n_expert:
                shapes += [
                    (f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert), GGML_F32),
                    (f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff, n_expert), GGML_Q8_0),
                    (f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff, n_expert), GGML_Q8_0),
                    (f"blk.{i}.ffn_down_exps.weight", (n_ff, n_embd, n_expert), GGML_Q8_0),
                ]
            else:
                shapes += [
                    (f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), GGML_Q8_0),
                    (f"blk.{i}.ffn_up.weight", (n_embd, n_ff), GGML_Q8_0),
                    (f"blk.{i}.ffn_down.weight", (n_ff, n_embd), GGML_Q8_0),
                ]
        self.rng = rng
        self.tensors = []  # dicts: name, dims, type, data, offset (None = computed)
        for name, dims, ty in shapes:
            self.add_tensor(name, dims, ty)
        self.n_tensors_override = None
        self.n_kv_override = None
        self.truncate = None

    def add_tensor(self, name, dims, ty=GGML_F32, values=None):
        """Appends a tensor (dims in ggml order, ne0 first): random (vectors
        around 1), or the given values."""
        n = int(np.prod(dims))
        if values is not None:
            arr = np.asarray(values, dtype=np.float32).reshape(n)
        elif len(dims) == 1:
            arr = (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)
        else:
            arr = (self.rng.standard_normal(n) / np.sqrt(dims[0])).astype(np.float32)
        data = q8_0(arr) if ty == GGML_Q8_0 else arr.tobytes()
        self.tensors.append({"name": name, "dims": list(dims), "type": ty, "data": data, "offset": None})

    def set_arch(self, arch):
        """Renames the architecture and its "llama." keys."""
        self.kv = [(arch + k[5:] if isinstance(k, str) and k.startswith("llama.") else k, t, v)
                   for k, t, v in self.kv]
        self.set_kv("general.architecture", T_STR, arch)

    def set_kv(self, key, vtype, value):
        for i, (k, _, _) in enumerate(self.kv):
            if k == key:
                self.kv[i] = (key, vtype, value)
                return
        self.kv.append((key, vtype, value))

    def del_kv(self, key):
        self.kv = [e for e in self.kv if e[0] != key]

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)

    def build(self):
        head = b"GGUF" + struct.pack("<I", self.version)
        n_t = self.n_tensors_override if self.n_tensors_override is not None else len(self.tensors)
        n_kv = self.n_kv_override if self.n_kv_override is not None else len(self.kv)
        head += struct.pack("<QQ", n_t, n_kv)
        kvb = b""
        for k, vt, v in self.kv:
            if isinstance(k, bytes):  # raw entry: key and value bytes as given
                kvb += k + struct.pack("<I", vt) + v
            else:
                kvb += s_str(k) + struct.pack("<I", vt) + s_val(vt, v)
        # data layout
        offs, pos = [], 0
        for t in self.tensors:
            pos = (pos + self.alignment - 1) // self.alignment * self.alignment
            offs.append(pos if t["offset"] is None else t["offset"])
            pos += len(t["data"])
        self.offsets = offs
        tib = b""
        for t, off in zip(self.tensors, offs):
            name = t["name"].encode() if isinstance(t["name"], str) else t["name"]
            tib += s_str(name) + struct.pack("<I", len(t["dims"]))
            tib += b"".join(struct.pack("<Q", d) for d in t["dims"])
            tib += struct.pack("<IQ", t["type"], off)
        meta = head + kvb + tib
        self.sections = {"kv_start": len(head), "infos_start": len(head) + len(kvb), "data_start": len(meta)}
        pad = (-len(meta)) % self.alignment if self.alignment else 0
        data = bytearray()
        for t, off in zip(self.tensors, offs):
            if len(data) <= off < len(data) + (1 << 20):  # hostile offsets: data left out
                data += b"\0" * (off - len(data))
                data += t["data"]
        out = meta + b"\0" * pad + bytes(data)
        if self.truncate is not None:
            out = out[: self.truncate(len(meta), len(out))]
        return out
