"""Hostile and edge-case GGUF files (tests/gguf/): every malformed variant is
refused with one line naming the problem and exit status 2; valid edge cases
load and generate."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
import variants  # noqa: E402
from ggufgen import Model  # noqa: E402

VARIANTS = variants.variant_list()


def test_at_least_40_variants():
    assert len(VARIANTS) >= 40


def _write(tmp_path, name, data):
    p = tmp_path / (name + ".gguf")
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("name,expect,mutate,post", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_malformed_refused(tmp_path, run_spindle, name, expect, mutate, post):
    path = _write(tmp_path, name, variants.build_variant(mutate, post))
    r = run_spindle("info", "-m", path, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("spindle: "), lines[0]
    assert expect in lines[0], "expected %r in %r" % (expect, lines[0])
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_clean_model_loads_and_runs(tmp_path, run_spindle):
    path = _write(tmp_path, "clean", Model().build())
    r = run_spindle("info", "-m", path)
    assert r.returncode == 0, r.stderr
    assert "architecture:    llama" in r.stdout
    r = run_spindle("run", "-m", path, "-p", "hello", "-n", "8", "--temp", "0", "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    assert r.json()["usage"]["completion_tokens"] == 8


@pytest.mark.parametrize("name,mutate", variants.valid_edge_cases(), ids=[v[0] for v in variants.valid_edge_cases()])
def test_valid_edge_cases_load(tmp_path, run_spindle, name, mutate):
    m = Model()
    mutate(m)
    path = _write(tmp_path, name, m.build())
    r = run_spindle("info", "-m", path)
    assert r.returncode == 0, r.stderr
    r = run_spindle("run", "-m", path, "-p", "hi", "-n", "4", "--temp", "0", "--ignore-eos")
    assert r.returncode == 0, r.stderr


def test_missing_file(run_spindle, tmp_path):
    r = run_spindle("info", "-m", str(tmp_path / "nope.gguf"))
    assert r.returncode == 2
    assert "nope.gguf" in r.stderr and "No such file" in r.stderr


def test_multi_token_prediction_layers_are_not_run(tmp_path, run_spindle):
    """block_count counts nextn_predict_layers trailing layers (a draft
    head): the model is the layers before them, whatever those hold."""
    plain = _write(tmp_path, "plain", Model(seed=5, n_layer=2).build())
    m = Model(seed=5, n_layer=3)  # layers 0 and 1 drawn as in the plain model's
    m.set_kv("llama.nextn_predict_layers", variants.T_U32, 1)
    m.add_tensor("blk.2.nextn.eh_proj.weight", [128, 64])
    mtp = _write(tmp_path, "mtp", m.build())
    args = ("-p", "hello world", "--from", 0, "--top", 5)
    a, b = run_spindle("logits", "-m", plain, *args), run_spindle("logits", "-m", mtp, *args)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    info = run_spindle("info", "-m", mtp)
    assert info.returncode == 0 and "layers:          2" in info.stdout, info.stdout
    m.set_kv("llama.nextn_predict_layers", variants.T_U32, 0)  # then layer 2 runs and its extra tensor is refused
    r = run_spindle("info", "-m", _write(tmp_path, "mtp0", m.build()))
    assert r.returncode == 2 and "blk.2.nextn.eh_proj.weight" in r.stderr, r.stderr
