#!/usr/bin/env python3
"""scripts/goldens/embed.py OUT.json NAME=MODEL.gguf [NAME=MODEL.gguf ...]

Embedding goldens for tests/py/test_embed.py from llama.cpp's embedding path
(llama-cpp-python, `Llama(embedding=True)`; run it with the python printed by
scripts/ref-venv).  A decoder model (no <arch>.pooling_type key) is run with
each pooling (mean, cls, last) on embed_sentences.SHORT; an encoder (a file
with the key: bert) with its own pooling on embed_sentences.SENTENCES, the
retrieval queries and documents after them.  Per input it records the token
ids (llm.tokenize(text, add_bos=True, special=False)) and the vector
llm.embed(text, normalize=False) L2-normalised here, rounded to 6
significant digits (a cosine of 0.999 is far above that rounding).  Each
input is embedded on its own (a fresh sequence).  Output:
{"llama_cpp_version", "models": {NAME: {"model_file", "model_sha256",
"n_embd", "inputs": [...], "poolings": {POOLING: [{"tokens", "vector"},
...]}}}}, written atomically.
"""
import hashlib
import json
import os
import sys

import numpy as np

import llama_cpp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embed_sentences  # noqa: E402

POOLINGS = {
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
}
NAMES = {v: k for k, v in POOLINGS.items()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(path, kind, inputs):
    llm = llama_cpp.Llama(path, embedding=True, pooling_type=kind, n_ctx=512, n_batch=512, n_ubatch=512,
                          n_threads=2, verbose=False)
    rows = []
    for s in inputs:
        toks = llm.tokenize(s.encode(), add_bos=True, special=False)
        v = np.asarray(llm.embed(s, normalize=False), dtype=np.float64)
        v = v / np.linalg.norm(v)
        rows.append({"tokens": toks, "vector": [float("%.6g" % x) for x in v]})
    pooling = llm.pooling_type()
    del llm
    return rows, pooling


def model_goldens(path):
    out = {"model_file": os.path.basename(path), "model_sha256": sha256(path), "poolings": {}}
    probe = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    encoder = any(k.endswith(".pooling_type") for k in probe.metadata)
    del probe
    if encoder:
        out["inputs"] = embed_sentences.SENTENCES + embed_sentences.QUERIES + embed_sentences.DOCUMENTS
        rows, pooling = run(path, llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED, out["inputs"])
        out["poolings"][NAMES[pooling]] = rows
    else:
        out["inputs"] = embed_sentences.SHORT
        for kind in POOLINGS.values():
            out["poolings"][NAMES[kind]] = run(path, kind, out["inputs"])[0]
    out["n_embd"] = len(next(iter(out["poolings"].values()))[0]["vector"])
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    res = {"llama_cpp_version": llama_cpp.__version__, "models": {}}
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        res["models"][name] = model_goldens(path)
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, sys.argv[1])


if __name__ == "__main__":
    main()
