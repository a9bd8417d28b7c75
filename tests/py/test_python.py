"""The Python package (bindings/python): `pip install ./bindings/python`
builds libspindle.so into it, and spindle.Model generates what `spindle
run` generates, streams, chats, tokenizes, reports logprobs, and raises
SpindleError with the library's message.  Installed into a temporary
directory (no change to build/venv), imported in this process."""
import ctypes
import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_library import make_env, run_plain  # noqa: F401 (a fixture)

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def spindle_pkg(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-index", "--target", str(target), os.path.join(ROOT, "bindings", "python")],
                       env=make_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:]
    assert (target / "spindle" / "libspindle.so").is_file(), "the library is not inside the package"
    sys.path.insert(0, str(target))
    try:
        importlib.invalidate_caches()
        mod = importlib.import_module("spindle")
        assert mod.__file__.startswith(str(target)), mod.__file__
        yield mod
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("spindle", None)
        sys.modules.pop("spindle._capi", None)


@pytest.fixture(scope="module")
def model(spindle_pkg, smollm2_path):
    m = spindle_pkg.Model(smollm2_path, n_ctx=1024)
    yield m
    m.close()


def test_versions_agree(spindle_pkg):
    import importlib.metadata
    assert spindle_pkg.version() == importlib.metadata.version("spindle")


def test_greedy_text_equals_spindle_run(model, run_plain, smollm2_path):
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 32, "--temp", 0)
    assert want.returncode == 0, want.stderr
    assert model.generate(PROMPT, max_tokens=32, temperature=0) == want.stdout
    pieces = list(model.generate(PROMPT, max_tokens=32, temperature=0, stream=True))
    assert len(pieces) > 10 and "".join(pieces) == want.stdout


def test_sampling_stop_and_chat_equal_spindle_run(model, run_plain, smollm2_path):
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 24, "--temp", 0.9, "--seed", 7,
                       "--top-k", 20, "--repeat-penalty", 1.2)
    assert model.generate(PROMPT, max_tokens=24, temperature=0.9, seed=7, top_k=20, repeat_penalty=1.2) == \
        want.stdout
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 32, "--temp", 0, "--stop", ".")
    got = model.generate(PROMPT, max_tokens=32, temperature=0, stop=".")
    assert got == want.stdout and "." not in got
    want = run_plain("run", "-m", smollm2_path, "--chat", "-p", "Name a colour.", "-n", 16, "--temp", 0)
    msgs = [{"role": "user", "content": "Name a colour."}]
    assert model.chat(msgs, max_tokens=16, temperature=0) == want.stdout
    assert "Name a colour." in model.apply_chat_template(msgs)


def test_tokenize_and_detokenize(model, run_plain, smollm2_path):
    text = "Hello, world! Grüße 日本"
    ids = model.tokenize(text)
    r = run_plain("tokenize", "-m", smollm2_path, text)
    assert ids == [int(x) for x in r.stdout.split()]
    assert model.detokenize(ids) == text
    assert b"".join(model.token_to_piece(t) for t in ids).decode() == text
    assert model.tokenize("<|im_start|>", parse_special=True) == [1]


def test_logprobs_equal_spindle_run(model, run_plain, smollm2_path):
    r = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 6, "--temp", 0, "--logprobs", 3, "--json")
    want = r.json()
    c = model.complete(PROMPT, max_tokens=6, temperature=0, logprobs=3)
    assert c.text == want["text"] and c.finish_reason == want["finish_reason"]
    assert c.prompt_tokens == want["usage"]["prompt_tokens"] and c.completion_tokens == 6
    assert [t.id for t in c.tokens] == [t["id"] for t in want["tokens"]]
    for got, exp in zip(c.tokens, want["tokens"]):
        assert got.logprob == pytest.approx(exp["logprob"], abs=1e-6)
        assert [(i, p) for i, _, p in got.top_logprobs] == \
            [(e["id"], pytest.approx(e["logprob"], abs=1e-6)) for e in exp["top_logprobs"]]
    # the logits agree with `spindle logits`
    top = run_plain("logits", "-m", smollm2_path, "-p", PROMPT, "--top", 3).json()["top"]
    logits = model.logits(PROMPT)
    assert len(logits) == model.n_vocab
    assert [i for i, _ in top] == sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:3]


def test_errors_are_exceptions_with_the_message(spindle_pkg, model, tmp_path):
    with pytest.raises(spindle_pkg.SpindleError) as e:
        spindle_pkg.Model(tmp_path / "missing.gguf")
    assert "missing.gguf" in str(e.value) and e.value.status
    with pytest.raises(spindle_pkg.SpindleError, match="max_tokens"):
        model.generate(PROMPT, max_tokens=0)
    with pytest.raises(spindle_pkg.SpindleError, match="context"):
        model.generate("word " * 2000, max_tokens=4)
    with pytest.raises(TypeError, match="top_z"):
        model.generate(PROMPT, top_z=3)


def test_stopping_a_stream_early_frees_the_request(model):
    """The engine runs one request at a time: a stream left early must not
    keep its slot."""
    for _ in range(3):
        it = model.generate(PROMPT, max_tokens=50, temperature=0, stream=True)
        assert next(it) and next(it)
        del it
    assert model.generate(PROMPT, max_tokens=4, temperature=0)


def test_vocab_only(spindle_pkg, smollm2_path, model):
    v = spindle_pkg.Model(smollm2_path, vocab_only=True)
    assert v.tokenize("Hello") == model.tokenize("Hello") and v.info["vocab_only"]
    assert v.metadata("general.architecture") == "llama"
    with pytest.raises(spindle_pkg.SpindleError, match="vocab_only"):
        v.generate("Hello", max_tokens=2)
    v.close()


def test_struct_layouts_match_the_header(spindle_pkg, tmp_path):
    """Every ctypes struct has the C struct's size and field offsets."""
    capi = importlib.import_module("spindle._capi")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <spindle.h>", "int main(void) {",
             'printf("{");']
    for cname, cls in capi.STRUCTS.items():
        lines.append('printf("\\"%s\\": [%%zu", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('printf(", %%zu", offsetof(%s, %s));' % (cname, field))
        lines.append('printf("],");')
    lines += ['printf("\\"end\\": 0}\\n");', "return 0; }"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-I" + os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    c = json.loads(subprocess.run([str(exe)], stdout=subprocess.PIPE, text=True, check=True).stdout)
    for cname, cls in capi.STRUCTS.items():
        py = [ctypes.sizeof(cls)] + [getattr(cls, f).offset for f, _ in cls._fields_]
        assert py == c[cname], (cname, py, c[cname])
