#!/usr/bin/env python3
"""scripts/goldens/goldens_families.py [FAMILY ...]

Goldens for the architecture families (tests/py/test_families.py): for each
family of tests/gguf/families.py, writes its three small random-weight
GGUF copies (f32, q8_0, q4_k, and a family's extra ones: families.py --types) with build/venv's python, runs each through
the reference implementation llama-cpp-python and writes
tests/goldens/families/<family>.json:

  files.<type>.sha256   of the GGUF the numbers were made from (the test
                        regenerates the file and checks it)
  prompts[i].tokens     llm.tokenize(text, add_bos=True, special=False); families
                        with linear (recurrent) layers (families.py
                        --list-linear) get a fifth prompt of about 175
                        tokens, whose state crosses two grid points
  prompts[i].top10      at every position: the 10 highest next-token
                        logits [[id, logit], ...] (descending, ties: lower id)
  prompts[i].greedy     GREEDY_TOKENS tokens of our own greedy loop (numpy
                        argmax of the raw logits, lowest id on ties), with
                        greedy_logprobs and greedy_top5 ([[id, logprob]]) at
                        each step
  chunks                families with chunked attention (families.py
                        --list-chunked): token ids crossing the first chunk
                        boundary (CHUNK_BEFORE positions before it to
                        CHUNK_AFTER after), chunks.from, and in each file
                        chunk_top10: the top-10 logits at every position from
                        chunks.from on, each position decoded alone after the
                        prefix (only those rows: all of them would be GBs)
  quantize.<ftype>      families of QUANTIZE: llama.cpp's quantization of the
                        f32 copy (llama_model_quantize): the output's sha256
                        and each tensor's type
  variants.<name>.quantize.<ftype>
                        the same for the family's variants of
                        QUANTIZE_VARIANTS (families.py --variant: the model in
                        another layout the converter writes)

Run it with the reference venv's python (scripts/ref-venv prints it):
    $(scripts/ref-venv) scripts/goldens/goldens_families.py
Values are rounded to 4 decimals (the tightest bound a test uses is 1e-2).
"""
import json
import os
import subprocess
import sys

import numpy as np

from model import log_softmax, sha256_file, top_k  # scripts/goldens/model.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "goldens", "families")
MODELS_DIR = os.path.join(ROOT, "build", "families")
GEN = os.path.join(ROOT, "tests", "gguf", "families.py")
VENV_PY = os.path.join(ROOT, "build", "venv", "bin", "python")
TYPES = ("f32", "q8_0", "q4_k")
GREEDY_TOKENS = 24
# Families whose f32 copy is also quantized by llama.cpp (llama_model_quantize)
# to these file types (name: llama.cpp's ftype id); the golden records the
# output's sha256, which `spindle quantize` must reproduce.
QUANTIZE = {"gpt-oss": {"MXFP4_MOE": 38}, "deepseek2": {"Q4_K_M": 15, "Q8_0": 7}}
QUANTIZE_VARIANTS = {"deepseek2-nextn": {"Q4_K_M": 15, "Q8_0": 7}}
LLAMA_SETTINGS = dict(n_ctx=4096, n_batch=1024, n_threads=2, logits_all=True, verbose=False, seed=0)

PROMPTS = [
    ("plain", "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea, "
              "there lived an old fisherman who"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"),
    ("non_english", "Français : Le chat dort sur la table.\nDeutsch: Die Katze schläft auf dem Tisch.\n"
                    "Русский:"),
    ("long", "The history of timekeeping is a story of steadily shrinking errors. Early sundials divided "
             "daylight into unequal hours that stretched in summer and shrank in winter. Water clocks worked at "
             "night but drifted as their vessels clogged with mineral deposits. Mechanical clocks with verge "
             "escapements appeared in European towers in the thirteenth century, yet they could lose a quarter "
             "of an hour each day. In summary,"),
]


# The linear families' extra prompt: longer than two chunks of the state
# grid (64 positions; about 175 tokens), so a position's output reads a grid
# state computed from the chunks before it, and the prompt's end a grid
# state computed from another.
LONG_PROMPT = ("very_long", (
    "Before the railways, every town kept its own time, set by the sun at local noon, so that a traveller going "
    "west found his watch running fast at each stop. When trains began to run to timetables, the difference became "
    "a hazard: two companies sharing a line might disagree by several minutes about when a train was due, and "
    "stations displayed clocks with two or three faces. Britain adopted railway time, taken from Greenwich by "
    "telegraph, in the eighteen-forties; North American railroads agreed on four zones in 1883, and an "
    "international conference chose the prime meridian a year later. Local time lingered in some cities for "
    "decades, and church bells sometimes rang to the old hour while the station clock showed the new one. Only "
    "when radio time signals reached homes did most people stop setting their clocks by the nearest steeple. "
    "Looking back, historians note that"))


CHUNK_BEFORE, CHUNK_AFTER = 32, 128


def chunk_ids(chunk):
    """Token ids past the first chunk: a fixed pseudo-random walk over the
    vocabulary's ordinary ids."""
    return [3 + (i * 7919) % 50000 for i in range(chunk + CHUNK_AFTER)]


def run_chunks(path, ids, start):
    """The top-10 logits at positions start.. of ids: the prefix in batches,
    then each position alone (its logits only)."""
    from llama_cpp import Llama

    settings = dict(LLAMA_SETTINGS, n_ctx=len(ids) + 128, logits_all=False)
    llm = Llama(model_path=path, **settings)
    n_vocab = llm.n_vocab()
    llm.eval(ids[:start])
    top10 = []
    for tok in ids[start:]:
        llm.eval([tok])
        row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).astype(np.float32)
        top10.append([[int(i), r4(row[i])] for i in top_k(row, 10)])
    return top10


def r4(x):
    return round(float(x), 4)


def run_file(path, prompts_in):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=path, **LLAMA_SETTINGS)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()
    prompts = []
    for name, text in prompts_in:
        llm.reset()
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.eval(tokens)
        scores = np.array(llm.scores[:len(tokens), :n_vocab], dtype=np.float32)
        top10 = [[[int(i), r4(row[i])] for i in top_k(row, 10)] for row in scores]
        row = scores[-1]
        greedy, greedy_lp, greedy_top5 = [], [], []
        for _ in range(GREEDY_TOKENS):
            lp, _ = log_softmax(row)
            tok = int(np.argmax(row))
            greedy.append(tok)
            greedy_lp.append(r4(lp[tok]))
            greedy_top5.append([[int(i), r4(lp[i])] for i in top_k(lp, 5)])
            if llama_cpp.llama_vocab_is_eog(vocab, tok) or len(greedy) == GREEDY_TOKENS:
                break
            llm.eval([tok])
            row = np.array(llm.scores[llm.n_tokens - 1, :n_vocab], dtype=np.float32)
        prompts.append({"name": name, "text": text, "tokens": [int(t) for t in tokens], "top10": top10,
                        "greedy": greedy, "greedy_logprobs": greedy_lp, "greedy_top5": greedy_top5})
        print("  %-12s %3d tokens, greedy %s" % (name, len(tokens), greedy[:8]), file=sys.stderr)
    return {"file": os.path.basename(path), "sha256": sha256_file(path), "n_vocab": int(n_vocab),
            "prompts": prompts}


def quantize_file(path, ftype):
    """llama.cpp's quantization of path to ftype: the output's sha256 and
    each tensor's type name."""
    import ctypes
    import tempfile
    import llama_cpp
    sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
    import quantmodel

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "q.gguf")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.nthread = 2
        if llama_cpp.llama_model_quantize(path.encode(), out.encode(), ctypes.byref(params)) != 0:
            raise RuntimeError("llama_model_quantize failed on %s" % path)
        _, tensors = quantmodel.read_gguf(out)
        return {"ftype": ftype, "sha256": sha256_file(out),
                "types": {n: quantmodel.TYPE_NAME[t["type"]] for n, t in sorted(tensors.items())}}


def quantize_family(fam, doc):
    """doc's quantize and variants entries for family fam."""
    for name, ftype in QUANTIZE.get(fam, {}).items():
        doc.setdefault("quantize", {})[name] = quantize_file(os.path.join(MODELS_DIR, "%s-f32.gguf" % fam), ftype)
    variants = subprocess.run([VENV_PY, GEN, "--list-variants", fam], check=True, capture_output=True,
                              text=True).stdout.split()
    for variant in variants:
        if variant not in QUANTIZE_VARIANTS:
            continue
        path = subprocess.run([VENV_PY, GEN, "--out", MODELS_DIR, "--variant", variant], check=True,
                              capture_output=True, text=True).stdout.strip()
        q = doc.setdefault("variants", {}).setdefault(variant, {}).setdefault("quantize", {})
        for name, ftype in QUANTIZE_VARIANTS[variant].items():
            q[name] = quantize_file(path, ftype)


def main(argv):
    import llama_cpp

    families = argv[1:] or subprocess.run([VENV_PY, GEN, "--list"], check=True, capture_output=True,
                                          text=True).stdout.split()
    linear = subprocess.run([VENV_PY, GEN, "--list-linear"], check=True, capture_output=True, text=True).stdout.split()
    chunked = dict(ln.split() for ln in subprocess.run([VENV_PY, GEN, "--list-chunked"], check=True,
                                                        capture_output=True, text=True).stdout.splitlines())
    os.makedirs(OUT_DIR, exist_ok=True)
    for fam in families:
        subprocess.run([VENV_PY, GEN, "--out", MODELS_DIR, "--family", fam], check=True,
                       stdout=subprocess.DEVNULL)
        doc = {"family": fam, "llama_cpp_version": llama_cpp.__version__,
               "settings": {k: v for k, v in LLAMA_SETTINGS.items() if k != "verbose"},
               "greedy_tokens": GREEDY_TOKENS, "files": {}}
        types = subprocess.run([VENV_PY, GEN, "--types", fam], check=True, capture_output=True,
                               text=True).stdout.split()
        for t in types:
            print("%s %s" % (fam, t), file=sys.stderr)
            prompts = PROMPTS + [LONG_PROMPT] if fam in linear else PROMPTS
            doc["files"][t] = run_file(os.path.join(MODELS_DIR, "%s-%s.gguf" % (fam, t)), prompts)
            if fam in chunked:
                chunk = int(chunked[fam])
                doc["chunks"] = {"ids": chunk_ids(chunk), "from": chunk - CHUNK_BEFORE}
                doc["files"][t]["chunk_top10"] = run_chunks(os.path.join(MODELS_DIR, "%s-%s.gguf" % (fam, t)),
                                                            doc["chunks"]["ids"], doc["chunks"]["from"])
        quantize_family(fam, doc)
        out = os.path.join(OUT_DIR, fam + ".json")
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
