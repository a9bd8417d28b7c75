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
