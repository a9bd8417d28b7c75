"""spindle quantize against llama.cpp's quantizer (tests/goldens/quantize-*.json,
made by scripts/goldens/quantize.py with llama-cpp-python): for every file
type, each tensor gets the same type and byte-identical data and the whole
file is byte-identical, on a small F32 model (tests/gguf/quantmodel.py; also
with rows no block size divides) and on SmolLM2 converted to F16; with an importance matrix, every tensor too.  Bad input is one line on stderr, exit 2 and no file
left behind."""
import hashlib
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import quantmodel  # noqa: E402

GOLDENS = os.path.join(ROOT, "tests", "goldens")


def _golden(name):
    with open(os.path.join(GOLDENS, "quantize-%s.json" % name)) as f:
        return json.load(f)


TINY = _golden("tiny")
ODD = _golden("odd")
SMOL = _golden("smollm2")


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _summary(path):
    _, tensors = quantmodel.read_gguf(path)
    return {n: [quantmodel.TYPE_NAME[t["type"]], _sha(t["data"])[:20]] for n, t in sorted(tensors.items())}


def _diff(got, want):
    """The tensors that differ, for the assertion message."""
    return {n: (got.get(n), want.get(n)) for n in sorted(set(got) | set(want)) if got.get(n) != want.get(n)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("q") / "tiny-f32.gguf"
    p.write_bytes(quantmodel.tiny_f32_model())
    assert _sha(p.read_bytes()) == TINY["input_sha256"], "tests/gguf/quantmodel.py no longer builds the golden's input"
    return str(p)


def _quantize(run_spindle, src, dst, ftype, *extra):
    r = run_spindle("quantize", "-t", "2", *extra, src, dst, ftype, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("ftype", sorted(TINY["types"]))
def test_tiny_matches_llama_cpp(tmp_path, run_spindle, tiny, ftype):
    out = str(tmp_path / "out.gguf")
    r = _quantize(run_spindle, tiny, out, ftype)
    got = _summary(out)
    assert got == TINY["types"][ftype], _diff(got, TINY["types"][ftype])
    with open(out, "rb") as f:  # key order and padding too: the whole file is llama.cpp's
        assert _sha(f.read()) == TINY["files"][ftype]
    kv, _ = quantmodel.read_gguf(out)
    src_kv, _ = quantmodel.read_gguf(tiny)
    assert kv["general.quantization_version"] == (4, 2)
    assert kv["general.file_type"][1] == {"F32": 0, "F16": 1, "BF16": 32}.get(ftype, kv["general.file_type"][1])
    for k, v in src_kv.items():  # metadata and tokenizer copied
        if k != "general.file_type":
            assert kv[k] == v, k
    assert "bits per weight" in r.stdout


@pytest.mark.parametrize("ftype", sorted(ODD["types"]))
def test_rows_no_block_divides_fall_back_to_f16(tmp_path, run_spindle, ftype):
    """FFN-down rows of 360 (neither 256 nor 32 divides them): every type,
    the 32-element ones included, falls back to F16 there as llama.cpp's
    quantizer does, and the whole file is llama.cpp's."""
    src = tmp_path / "odd-f32.gguf"
    src.write_bytes(quantmodel.tiny_f32_model(quantmodel.ODD_FF))
    assert _sha(src.read_bytes()) == ODD["input_sha256"], "tests/gguf/quantmodel.py no longer builds the golden's input"
    out = str(tmp_path / "out.gguf")
    _quantize(run_spindle, str(src), out, ftype)
    got = _summary(out)
    assert got == ODD["types"][ftype], _diff(got, ODD["types"][ftype])
    assert got["blk.0.ffn_down.weight"][0] == "F16"
    with open(out, "rb") as f:
        assert _sha(f.read()) == ODD["files"][ftype]


@pytest.mark.parametrize("ftype", sorted(TINY["imatrix_types"]))
def test_tiny_imatrix_matches_llama_cpp(tmp_path, run_spindle, tiny, ftype):
    im = tmp_path / "tiny.imatrix.gguf"
    im.write_bytes(quantmodel.imatrix_gguf(quantmodel.tiny_imatrix()))
    out = str(tmp_path / "out.gguf")
    r = _quantize(run_spindle, tiny, out, ftype, "--imatrix", str(im))
    got = _summary(out)
    want = TINY["imatrix_types"][ftype]
    assert got == want, _diff(got, want)
    assert "with importance weights" in r.stdout
    kv, _ = quantmodel.read_gguf(out)
    assert kv["quantize.imatrix.entries_count"][1] == 56


@pytest.fixture(scope="module")
def smol_f16(tmp_path_factory, smollm2_path, spindle_bin):
    import subprocess
    p = str(tmp_path_factory.mktemp("q") / "smollm2-f16.gguf")
    r = subprocess.run([spindle_bin, "quantize", "--allow-requantize", smollm2_path, p, "F16"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    with open(p, "rb") as f:
        assert _sha(f.read()) == SMOL["input_sha256"]
    return p


@pytest.mark.parametrize("ftype", sorted(SMOL["types"]))
def test_smollm2_matches_llama_cpp(tmp_path, run_spindle, smol_f16, ftype):
    out = str(tmp_path / "out.gguf")
    _quantize(run_spindle, smol_f16, out, ftype)
    got = _summary(out)
    assert got == SMOL["types"][ftype], _diff(got, SMOL["types"][ftype])
    with open(out, "rb") as f:
        assert _sha(f.read()) == SMOL["files"][ftype]


def test_smollm2_f16_same_as_llama_cpp():
    # the F16 input itself: llama.cpp dequantizes the Q4_1 file to the same bytes
    assert SMOL["llama_cpp_f16_identical"] is True


def _refused(run_spindle, tmp_path, *args, expect):
    before = set(os.listdir(tmp_path))
    r = run_spindle("quantize", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle: "), r.stderr
    assert expect in lines[0], lines[0]
    assert set(os.listdir(tmp_path)) == before, "left files behind: %s" % (set(os.listdir(tmp_path)) - before)


def test_unknown_type(tmp_path, run_spindle, tiny):
    _refused(run_spindle, tmp_path, tiny, str(tmp_path / "o.gguf"), "Q7_K", expect="unknown type 'Q7_K'")


def test_not_a_model(tmp_path, run_spindle):
    txt = tmp_path / "notes.txt"
    txt.write_text("hello\n" * 100)
    _refused(run_spindle, tmp_path, str(txt), str(tmp_path / "o.gguf"), "Q8_0", expect="notes.txt")
    im = tmp_path / "only.imatrix.gguf"
    im.write_bytes(quantmodel.imatrix_gguf(quantmodel.tiny_imatrix()))
    _refused(run_spindle, tmp_path, str(im), str(tmp_path / "o.gguf"), "Q8_0", expect="not a model")


def test_unwritable_output(tmp_path, run_spindle, tiny):
    _refused(run_spindle, tmp_path, tiny, str(tmp_path / "no-such-dir" / "o.gguf"), "Q8_0", expect="cannot create")


def test_truncated_imatrix(tmp_path, run_spindle, tiny):
    full = quantmodel.imatrix_gguf(quantmodel.tiny_imatrix())
    im = tmp_path / "cut.imatrix.gguf"
    im.write_bytes(full[: len(full) - 1000])
    _refused(run_spindle, tmp_path, "--imatrix", str(im), tiny, str(tmp_path / "o.gguf"), "Q4_K_M", expect="imatrix")


def test_requantize_needs_flag(tmp_path, run_spindle, tiny):
    q8 = str(tmp_path / "q8.gguf")
    _quantize(run_spindle, tiny, q8, "Q8_0")
    _refused(run_spindle, tmp_path, q8, str(tmp_path / "o.gguf"), "Q4_0", expect="--allow-requantize")
    r = run_spindle("quantize", "--allow-requantize", q8, str(tmp_path / "back.gguf"), "F32")
    assert r.returncode == 0, r.stderr
