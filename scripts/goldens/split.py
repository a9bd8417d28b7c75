#!/usr/bin/env python3
"""scripts/goldens/split.py MODEL_PATH OUT.json

The split-model golden for tests/py/test_split.py, made with the reference
implementation llama-cpp-python (run it with the python printed by
scripts/ref-venv): splits MODEL_PATH (SmolLM2-135M-Instruct Q4_1) into
PARTS parts with tests/gguf/ggufsplit.py, loads the first part with
llama_cpp.Llama (which finds and loads the others) and the single file, and
records

  sha256            each part's sha256: the bytes llama.cpp loaded, which the
                    test's own split must reproduce
  text              llama.cpp's greedy completion of PROMPT (N_PREDICT tokens)
                    from the parts
  same_as_single    the parts' completion and last-position logits equal the
                    single file's
"""
import hashlib
import json
import os
import sys
import tempfile

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import ggufsplit  # noqa: E402

PARTS = 3
PROMPT = "The capital of France is"
N_PREDICT = 16


def run(path):
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=2, logits_all=True, verbose=False, seed=0)
    text = llm.create_completion(PROMPT, max_tokens=N_PREDICT, temperature=0)["choices"][0]["text"]
    toks = llm.tokenize(PROMPT.encode(), add_bos=False)
    llm.reset()
    llm.eval(toks)
    return text, np.array(llm.scores[len(toks) - 1])


def main():
    src, out = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        paths = ggufsplit.split(src, os.path.join(d, "smol"), PARTS)
        sums = [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths]
        text, logits = run(paths[0])
    single_text, single_logits = run(src)
    golden = {"model_file": os.path.basename(src), "parts": PARTS, "sha256": sums, "prompt": PROMPT,
              "n_predict": N_PREDICT, "llama_cpp_version": llama_cpp.__version__, "text": text,
              "same_as_single": text == single_text and bool(np.array_equal(logits, single_logits))}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
