#!/usr/bin/env python3
"""Tokenizer goldens from llama.cpp (via llama-cpp-python).

usage: tokenizer.py [NAME=]MODEL.gguf ...

For every string of tests/goldens/tokenizer-corpus.txt (strings separated by
"\\n__ggml_vocab_test__\\n", as in the ggml-vocab-*.inp files) writes the ids
that llama.cpp gives with add_bos=True, special=False ("ids") and with
add_bos=True, special=True ("ids_special") to tests/goldens/tokenizer-NAME.json.
NAME defaults to smollm2-135m / gemma3-270m when the file name says so, else
to the file's stem.  Run with a python that has llama_cpp, e.g.
/tmp/refvenv/bin/python scripts/goldens/tokenizer.py $(scripts/fetch-model smollm2-135m)
"""
import json
import os
import sys

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "goldens", "tokenizer-corpus.txt")
SEP = "\n__ggml_vocab_test__\n"


def corpus():
    with open(CORPUS, "rb") as f:
        data = f.read().decode("utf-8")
    parts = data.split(SEP)
    assert parts[-1] == "", "corpus must end with the separator"
    return parts[:-1]


def default_name(path):
    base = os.path.basename(path).lower()
    if "smollm2" in base:
        return "smollm2-135m"
    if "gemma-3" in base or "gemma3" in base:
        return "gemma3-270m"
    return os.path.splitext(base)[0]


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    texts = corpus()
    for arg in argv:
        name, _, path = arg.rpartition("=")
        if not name:
            name = default_name(path)
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        cases = []
        for t in texts:
            b = t.encode("utf-8")
            cases.append({
                "text": t,
                "ids": llm.tokenize(b, add_bos=True, special=False),
                "ids_special": llm.tokenize(b, add_bos=True, special=True),
            })
        out = os.path.join(ROOT, "tests", "goldens", "tokenizer-%s.json" % name)
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"model": name, "source": os.path.basename(path),
                       "reference": "llama-cpp-python %s" % llama_cpp.__version__,
                       "add_bos": True, "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print("wrote %s (%d strings)" % (os.path.relpath(out, ROOT), len(cases)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
