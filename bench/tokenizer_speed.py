#!/usr/bin/env python3
"""Tokenizer throughput: spindle vs llama.cpp (llama-cpp-python) on the same text.

usage: bench/tokenizer_speed.py [--spindle build/spindle] [--mb 4] [SMOLLM2.gguf [GEMMA3.gguf]]

Builds a few MB of mixed text by repeating tests/goldens/tokenizer-corpus.txt
(code, JSON, many scripts, emoji), encodes it once with `spindle tokenize
--file F --no-bos` and once with llama_cpp.Llama(vocab_only=True).tokenize,
checks both give the same ids, and reports MB/s.  spindle's time excludes its
start-up (measured on an empty input).  Also reports the Gemma 3 vocab load
time (spindle tokenize of an empty input, best of 5).  Run with a python
that has llama_cpp (e.g. /tmp/refvenv/bin/python); model paths default to
`scripts/fetch-model smollm2-135m` / `gemma3-270m`.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fetch(name):
    return subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), name],
                          capture_output=True, text=True, check=True).stdout.strip()


def run_spindle(binary, model, path):
    t = time.perf_counter()
    r = subprocess.run([binary, "tokenize", "-m", model, "--no-bos", "--file", path],
                       capture_output=True, check=True)
    return time.perf_counter() - t, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", default=os.path.join(ROOT, "build", "spindle"))
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    smollm = a.models[0] if a.models else fetch("smollm2-135m")
    gemma = a.models[1] if len(a.models) > 1 else fetch("gemma3-270m")

    with open(os.path.join(ROOT, "tests", "goldens", "tokenizer-corpus.txt"), "rb") as f:
        unit = f.read().replace(b"\n__ggml_vocab_test__\n", b"\n")
    data = unit * max(1, int(a.mb * 1e6 / len(unit)))
    mb = len(data) / 1e6

    with tempfile.TemporaryDirectory() as tmp:
        big, empty = os.path.join(tmp, "big.txt"), os.path.join(tmp, "empty.txt")
        open(big, "wb").write(data)
        open(empty, "wb").close()

        import llama_cpp
        results = {}
        for name, model in (("smollm2-135m", smollm), ("gemma3-270m", gemma)):
            base = min(run_spindle(a.spindle, model, empty)[0] for _ in range(5))
            best, out = None, None
            for _ in range(3):
                t, out = run_spindle(a.spindle, model, big)
                best = t if best is None or t < best else best
            sp_ids = [int(x) for x in out.split()]
            sp_s = max(best - base, 1e-9)

            llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
            ref_best = None
            for _ in range(3):
                t = time.perf_counter()
                ref_ids = llm.tokenize(data, add_bos=False, special=False)
                t = time.perf_counter() - t
                ref_best = t if ref_best is None or t < ref_best else ref_best
            same = sp_ids == ref_ids
            results[name] = (mb / sp_s, mb / ref_best, base, same, len(sp_ids))
            print("%-13s %.1f MB, %d tokens: spindle %.2f MB/s, llama.cpp %.2f MB/s, same ids: %s; "
                  "load+exit (empty input) %.0f ms" % (name, mb, len(sp_ids), mb / sp_s, mb / ref_best,
                                                      "yes" if same else "NO", base * 1e3))
        if not all(r[3] for r in results.values()):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
