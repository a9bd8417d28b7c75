"""Models and a reader for the quantization tests.

tiny_f32_model() builds a small llama-architecture model with F32 weights
(deterministic: numpy's default_rng), shaped so llama.cpp's per-tensor type
rules all come into play: rows of 256 (K-quant super-blocks) in the
attention and FFN-up/gate matrices, rows of 352 (not a multiple of 256,
so the K-quant fallbacks) in FFN down, 4 query heads sharing 1 KV head
(grouped-query rules), 8 layers (the use-more-bits layer pattern) and tied
embeddings (token_embd takes the output head's type).  A few rows of
blk.0.attn_q.weight are zero, constant, tiny, huge, one-signed or on a
quarter grid, for the quantisers' edge paths.  tiny_f32_model(ODD_FF):
the same with FFN-down rows of 360, which no block size divides.

read_gguf(path) returns (kv, tensors): kv maps keys to (vtype, value) for
scalars and strings; tensors maps names to dicts with type, dims and the
raw data bytes.
"""
import struct

import numpy as np

import ggufgen

N_EMBD, N_HEAD, N_HEAD_KV, N_LAYER, N_FF = 256, 4, 1, 8, 352
ODD_FF = 360  # FFN-down rows that 32 does not divide either: every type falls back to F16 there


def tiny_f32_model(n_ff=N_FF):
    m = ggufgen.Model(n_embd=N_EMBD, n_head=N_HEAD, n_head_kv=N_HEAD_KV, n_layer=N_LAYER, n_ff=n_ff)
    rng = np.random.default_rng(1234)
    for t in m.tensors:
        dims = t["dims"]
        n = int(np.prod(dims))
        if len(dims) == 1:
            arr = (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        else:
            rows = n // dims[0]
            # rows of different magnitudes, as trained matrices have
            scale = np.exp(0.5 * rng.standard_normal((rows, 1))) / np.sqrt(dims[0])
            arr = (rng.standard_normal((rows, dims[0])) * scale).astype(np.float32)
            if t["name"] == "blk.0.attn_q.weight":
                arr[0] = 0
                arr[1] = 0.25
                arr[2] = 1e-20 * rng.standard_normal(dims[0])
                arr[3, ::17] = 40.0
                arr[4] = np.abs(arr[4])
                arr[5] = -np.abs(arr[5])
                arr[6] = np.round(arr[6] * 8) / 8
                arr[7, :128] = 0
            arr = arr.reshape(-1)
        t["type"] = ggufgen.GGML_F32
        t["data"] = arr.astype("<f4").tobytes()
    return m.build()


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}

# ggml type id -> (block size, bytes per block)
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
             10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2), 39: (32, 17)}
TYPE_NAME = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K",
             11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16", 39: "MXFP4"}


def read_gguf(path):
    b = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = b[pos:pos + n]
        pos += n
        return s.decode("utf-8", "replace")

    def value(vt):
        if vt == 8:
            return string()
        if vt == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(_SCALAR[vt])

    assert b[:4] == b"GGUF", path
    pos = 4
    take("<I")
    n_t, n_kv = take("<Q"), take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        vt = take("<I")
        kv[k] = (vt, value(vt))
    align = kv.get("general.alignment", (4, 32))[1]
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        ty, off = take("<I"), take("<Q")
        infos.append((name, dims, ty, off))
    data0 = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, ty, off in infos:
        blk, size = TYPE_SIZE[ty]
        n = int(np.prod(dims))
        nbytes = n // blk * size
        tensors[name] = {"type": ty, "dims": dims, "data": b[data0 + off:data0 + off + nbytes]}
    return kv, tensors


def tiny_imatrix():
    """Importance weights for every matrix of tiny_f32_model() except the
    embeddings: {name: [float] * columns}, positive, some columns 100x the
    others (as real activations have)."""
    rng = np.random.default_rng(99)
    out = {}
    names = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    for i in range(N_LAYER):
        for n in names:
            cols = N_FF if n == "ffn_down" else N_EMBD
            w = rng.random(cols) * np.where(rng.random(cols) < 0.05, 100.0, 1.0)
            out["blk.%d.%s.weight" % (i, n)] = [float(np.float32(v)) for v in w]
    return out


def imatrix_gguf(imatrix, chunks=1, truncate=None):
    """imatrix (as tiny_imatrix returns) in llama.cpp's imatrix GGUF format,
    counts 1 (so in_sum2 / counts is exact)."""
    m = ggufgen.Model()
    m.kv = [("general.type", ggufgen.T_STR, "imatrix"),
            ("imatrix.datasets", ggufgen.T_ARR, (ggufgen.T_STR, ["quantmodel"])),
            ("imatrix.chunk_count", ggufgen.T_U32, chunks),
            ("imatrix.chunk_size", ggufgen.T_U32, 512)]
    m.tensors = []
    for name, w in sorted(imatrix.items()):
        m.tensors.append({"name": name + ".in_sum2", "dims": [len(w), 1], "type": ggufgen.GGML_F32,
                          "data": np.asarray(w, dtype="<f4").tobytes(), "offset": None})
        m.tensors.append({"name": name + ".counts", "dims": [1, 1], "type": ggufgen.GGML_F32,
                          "data": np.asarray([1.0], dtype="<f4").tobytes(), "offset": None})
    b = m.build()
    return b if truncate is None else b[:truncate]
