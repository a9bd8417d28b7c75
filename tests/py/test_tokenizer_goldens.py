"""spindle tokenize must give llama.cpp's ids for every corpus string.

Goldens: tests/goldens/tokenizer-<model>.json (scripts/goldens/tokenizer.py).
"tekken" is the mistral3 family's F32 file (tests/gguf/families.py): a BPE
vocabulary under Mistral's tekken split, made with
`scripts/goldens/tokenizer.py tekken=build/families/mistral3-f32.gguf`;
"gpt-4o" is llama.cpp's llama-bpe test vocabulary under the gpt-4o split
(gpt-oss, Llama 4; tests/gguf/families.py write_vocab), made with
`scripts/goldens/tokenizer.py gpt-4o=FILE` on that file.
Binary: $SPINDLE (as scripts/run-tests sets it), $SP_SPINDLE, or build/spindle.  Models: `scripts/fetch-model NAME`,
or $SP_MODEL_SMOLLM2 / $SP_MODEL_GEMMA3 when set.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPINDLE = os.environ.get("SPINDLE") or os.environ.get("SP_SPINDLE") or os.path.join(ROOT, "build", "spindle")
MODELS = {"smollm2-135m": "SP_MODEL_SMOLLM2", "gemma3-270m": "SP_MODEL_GEMMA3"}


def model_path(name, tmp_dir):
    if name == TEKKEN:
        from test_families import model_path as family_path
        return family_path("mistral3", "f32")
    if name == GPT4O:
        from test_families import families
        return families.write_vocab("llama-bpe", GPT4O, os.path.join(tmp_dir, "gpt-4o.gguf"))
    env = os.environ.get(MODELS[name])
    if env:
        return env
    out = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), name],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def goldens(name):
    with open(os.path.join(ROOT, "tests", "goldens", "tokenizer-%s.json" % name), encoding="utf-8") as f:
        return json.load(f)["cases"]


def tokenize(model, text, special):
    args = [SPINDLE, "tokenize", "-m", model, "--file", "-"] + (["--special"] if special else [])
    r = subprocess.run(args, input=text.encode("utf-8"), capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    line = r.stdout.decode().strip()
    return [int(x) for x in line.split()] if line else []


TEKKEN, GPT4O = "tekken", "gpt-4o"
NAMES = list(MODELS) + [TEKKEN, GPT4O]
CASES = [(m, i) for m in NAMES for i in range(len(goldens(m)))]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("vocab"))
    return {m: model_path(m, tmp) for m in NAMES}


@pytest.mark.parametrize("model,index", CASES)
def test_golden(paths, model, index):
    case = goldens(model)[index]
    assert tokenize(paths[model], case["text"], False) == case["ids"], repr(case["text"])
    assert tokenize(paths[model], case["text"], True) == case["ids_special"], repr(case["text"])


def test_bad_arguments(paths):
    r = subprocess.run([SPINDLE, "tokenize", "-m", paths["smollm2-135m"]], capture_output=True)
    assert r.returncode == 2 and r.stderr.startswith(b"spindle: ")
    r = subprocess.run([SPINDLE, "tokenize", "-m", "/nonexistent.gguf", "x"], capture_output=True)
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1


def test_detokenize_roundtrip(paths):
    text = "Hello, wörld! 日本語 😀"
    ids = tokenize(paths["smollm2-135m"], text, False)
    r = subprocess.run([SPINDLE, "detokenize", "-m", paths["smollm2-135m"]] + [str(i) for i in ids],
                       capture_output=True, check=True)
    assert r.stdout.decode("utf-8") == text + "\n"
