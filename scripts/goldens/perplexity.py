#!/usr/bin/env python3
"""scripts/goldens/perplexity.py [--full] OUT.json TEXT MODEL.gguf [MODEL.gguf ...]

Perplexity goldens for tests/py/test_perplexity.py: llama-perplexity's
method computed with the reference implementation llama-cpp-python (run it
with the python printed by scripts/ref-venv) on the text of
scripts/fetch-text.

Method (llama.cpp tools/perplexity, perplexity()): tokenize the whole text
with the vocabulary's BOS; cut non-overlapping windows of CTX tokens; per
window reset the context, put BOS in the first slot when the vocabulary adds
one, evaluate all CTX tokens in one batch, and score positions CTX/2 ..
CTX-2 against the next token with log-softmax (max subtracted in float,
exponentials summed in double).  PPL = exp(mean NLL), error =
PPL * sqrt(var(NLL) / (n - 1)).

For each model it records the value after the first WINDOWS_SHORT windows
(what the test recomputes on 2 cores) and, with --full, over every full
window of the text (what docs/quantization.md reports).
"""
import hashlib
import json
import math
import os
import sys

import numpy as np

import llama_cpp

CTX = 512
WINDOWS_SHORT = 8


def perplexity(model, text, n_windows=None):
    llm = llama_cpp.Llama(model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, logits_all=True, n_threads=1, verbose=False)
    toks = llm.tokenize(text, add_bos=True, special=False)
    add_bos = llm._model.add_bos_token()
    bos = llm.token_bos()
    total = len(toks) // CTX
    n = total if n_windows is None else min(n_windows, total)
    nll = nll2 = 0.0
    count = 0
    first = CTX // 2
    for w in range(n):
        win = list(toks[w * CTX:(w + 1) * CTX])
        if add_bos:
            win[0] = bos
        llm.reset()
        llm.eval(win)
        logits = np.asarray(llm.scores[:CTX], dtype=np.float32)
        for j in range(first, CTX - 1):
            row = logits[j]
            mx = row.max()
            s = np.exp(row - mx).astype(np.float64).sum()
            v = float(row[toks[w * CTX + j + 1]] - mx) - math.log(s)
            nll -= v
            nll2 += v * v
            count += 1
        print("  %s window %d/%d" % (os.path.basename(model), w + 1, n), file=sys.stderr)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    return {"windows": n, "scored": count, "ppl": ppl, "ppl_err": math.sqrt(var / (count - 1)) * ppl,
            "n_tokens": len(toks)}


def main():
    args = [a for a in sys.argv[1:] if a != "--full"]
    if len(args) < 3:
        raise SystemExit(__doc__)
    out, text_path, models = args[0], args[1], args[2:]
    text = open(text_path, "rb").read()
    g = {"llama_cpp_version": llama_cpp.__version__, "ctx": CTX, "text": os.path.basename(text_path),
         "text_sha256": hashlib.sha256(text).hexdigest(), "models": {}}
    for m in models:
        g["models"][os.path.basename(m)] = {"short": perplexity(m, text, WINDOWS_SHORT)}
        if "--full" in sys.argv:
            g["models"][os.path.basename(m)]["full"] = perplexity(m, text)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(g, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
