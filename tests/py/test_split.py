"""Split models: SmolLM2 in the 3 parts llama.cpp's gguf-split writes
(tests/gguf/ggufsplit.py) loads from any part's path and runs exactly as the
single file; the parts are the bytes llama.cpp loaded when the golden was
made (scripts/goldens/split.py); a broken set of parts is refused with one
line naming the file; `serve --models-dir` lists a split model once."""
import hashlib
import os
import sys

import pytest

from server_util import Server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
import ggufsplit  # noqa: E402
from ggufgen import Model  # noqa: E402

N_PREDICT = 16


@pytest.fixture(scope="module")
def parts(tmp_path_factory, smollm2_path, goldens):
    d = tmp_path_factory.mktemp("split")
    return ggufsplit.split(smollm2_path, str(d / "smol"), goldens("split-smollm2")["parts"])


def greedy(run_spindle, path, prompt):
    r = run_spindle("run", "-m", path, "-p", prompt, "-n", N_PREDICT, "--temp", "0", "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    return r.json()


def test_parts_are_what_llama_cpp_loaded(parts, goldens):
    g = goldens("split-smollm2")
    assert [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in parts] == g["sha256"]
    assert g["same_as_single"] is True


def test_split_runs_as_the_single_file(run_spindle, parts, smollm2_path, goldens):
    g = goldens("split-smollm2")
    single = greedy(run_spindle, smollm2_path, g["prompt"])
    for path in (parts[0], parts[2]):  # the first part's path, or any other's
        out = greedy(run_spindle, path, g["prompt"])
        assert out["text"] == single["text"] == g["text"], path
        assert out["usage"] == single["usage"]
    logits = [run_spindle("logits", "-m", p, "-p", g["prompt"], "--top", "0") for p in (smollm2_path, parts[1])]
    assert all(r.returncode == 0 for r in logits), [r.stderr for r in logits]
    assert len(logits[0].json()["top"]) == 49152
    assert logits[0].json() == logits[1].json()


def test_info_lists_the_parts(run_spindle, parts):
    r = run_spindle("info", "-m", parts[1])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "272 tensors" in lines[0]
    listed = [ln for ln in lines if ln.startswith("part ")]
    assert len(listed) == 3
    for i, (ln, p) in enumerate(zip(listed, parts)):
        assert ln.startswith("part %d of 3:" % (i + 1)) and p in ln, ln
    counts = [int(ln.split(", ")[-1].split()[0]) for ln in listed]
    assert counts == [91, 91, 90]


def _broken(d, smollm2_path, case):
    """Writes a broken set of parts into d; returns (path to open, the file the error names)."""
    plan = ggufsplit.plan(smollm2_path, 3)
    names = [str(d / ggufsplit.part_name("m", i, 3)) for i in range(3)]
    named = names[2]
    if case == "missing part":
        plan = plan[:2]
    elif case == "wrong split.no":
        plan[2]["no"] = 1
    elif case == "wrong split.count":
        plan[1]["count"] = 4
        named = names[1]
    elif case == "duplicate tensor":
        plan[2]["tensors"] = plan[2]["tensors"] + plan[1]["tensors"][:1]
    elif case == "tensor count":
        plan[2]["tensors"] = plan[2]["tensors"][:-1]
        named = names[0]
    elif case == "part of another model":  # part 3 of a 3-part tiny model
        (d / "tiny.gguf").write_bytes(Model().build())
        plan[2] = ggufsplit.plan(str(d / "tiny.gguf"), 3)[2]
    elif case == "first part misnamed":
        names[0] = str(d / "m.gguf")
        named = names[0]
    for p, part in zip(names, plan):
        ggufsplit.write_part(p, part)
    return names[0], named


CASES = {
    "missing part": "No such file or directory",
    "wrong split.no": "key 'split.no': 1, expected 2",
    "wrong split.count": "split.count 4 and split.tensors.count 272, expected 3 and 272",
    "duplicate tensor": "in two files of the model",
    "tensor count": "key 'split.tensors.count': 272, but the 3 parts hold 271 tensors",
    "part of another model": "split.tensors.count 20, expected 3 and 272",
    "first part misnamed": "does not end in -00001-of-00003.gguf",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_parts_refused(tmp_path, run_spindle, smollm2_path, case):
    path, named = _broken(tmp_path, smollm2_path, case)
    r = run_spindle("info", "-m", path, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle: "), r.stderr
    assert CASES[case] in lines[0] and named in lines[0], lines[0]


def test_models_dir_lists_a_split_model_once(tmp_path, spindle_bin, parts, smollm2_path, goldens):
    g = goldens("split-smollm2")
    d = tmp_path / "models"
    d.mkdir()
    for p in parts:
        os.symlink(p, d / os.path.basename(p))
    os.symlink(smollm2_path, d / "single.gguf")
    s = Server(spindle_bin, None, "--models-dir", str(d), "--ctx", "512")
    try:
        r = s.get("/v1/models")
        assert r.status_code == 200, r.text
        assert sorted(m["id"] for m in r.json()["data"]) == ["single", "smol"]
        answers = {}
        for model in ("smol", "single"):
            r = s.post("/v1/completions", {"model": model, "prompt": g["prompt"], "max_tokens": N_PREDICT,
                                           "temperature": 0})
            assert r.status_code == 200, r.text
            answers[model] = r.json()["choices"][0]["text"]
        assert answers["smol"] == answers["single"] == g["text"]
        r = s.post("/v1/completions", {"model": "smol-00002-of-00003", "prompt": "hi", "max_tokens": 1})
        assert r.status_code == 404, r.text
    finally:
        assert s.stop() == 0, s.log_text()[-2000:]


def test_quantize_reads_the_parts(tmp_path, run_spindle, parts, smollm2_path):
    out = []
    for i, src in enumerate((smollm2_path, parts[0])):
        out.append(tmp_path / ("q%d.gguf" % i))
        r = run_spindle("quantize", "--allow-requantize", src, out[-1], "Q8_0")
        assert r.returncode == 0, r.stderr
    assert out[0].read_bytes() == out[1].read_bytes()  # one file, as from the single file


def test_serve_names_a_split_model_by_its_base_name(spindle_bin, parts):
    """`serve -m` on any part names the model as --models-dir does."""
    s = Server(spindle_bin, parts[1], "--ctx", "512")
    try:
        r = s.get("/v1/models")
        assert r.status_code == 200, r.text
        assert [m["id"] for m in r.json()["data"]] == ["smol"]
    finally:
        assert s.stop() == 0, s.log_text()[-2000:]
