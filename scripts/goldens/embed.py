#!/usr/bin/env python3
"""scripts/goldens/embed.py OUT.json NAME=MODEL.gguf [NAME=MODEL.gguf ...]

Embedding goldens for tests/py/test_embed.py from llama.cpp's embedding path
(llama-cpp-python, `Llama(embedding=True)`; run it with the python printed by
scripts/ref-venv).  For every model, every pooling (mean, cls, last) and
every sentence of SENTENCES it records the token ids
(llm.tokenize(text, add_bos=True, special=False)) and the pooled vector
llm.embed(text, normalize=False) L2-normalised here, rounded to 6
significant digits (a cosine of 0.999 is far above that rounding).  Each
sentence is embedded on its own (a fresh sequence).  Output:
{"llama_cpp_version", "sentences", "models": {NAME: {"model_file",
"model_sha256", "n_embd", "poolings": {POOLING: [{"tokens", "vector"}, ...]}}}},
written atomically.
"""
import hashlib
import json
import os
import sys

import numpy as np

import llama_cpp

SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Quantum computers use qubits that can be in superpositions of states.",
    "How do I bake sourdough bread at home?",
    "Stock markets fell sharply after the central bank raised interest rates.",
]

POOLINGS = {
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_goldens(path):
    out = {"model_file": os.path.basename(path), "model_sha256": sha256(path), "poolings": {}}
    for name, kind in POOLINGS.items():
        llm = llama_cpp.Llama(path, embedding=True, pooling_type=kind, n_ctx=512, n_batch=512, n_ubatch=512,
                              n_threads=2, verbose=False)
        rows = []
        for s in SENTENCES:
            toks = llm.tokenize(s.encode(), add_bos=True, special=False)
            v = np.asarray(llm.embed(s, normalize=False), dtype=np.float64)
            v = v / np.linalg.norm(v)
            rows.append({"tokens": toks, "vector": [float("%.6g" % x) for x in v]})
        out["n_embd"] = len(rows[0]["vector"])
        out["poolings"][name] = rows
        del llm
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    res = {"llama_cpp_version": llama_cpp.__version__, "sentences": SENTENCES, "models": {}}
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
