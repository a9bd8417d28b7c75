"""Quantized KV cache (--cache-type-k / --cache-type-v q8_0 | q4_0).

The cache stores keys and values as llama.cpp's Q8_0 / Q4_0 blocks inside
the paged blocks and attention reads them directly.  Held here: perplexity
on the shared text (2 windows of 512) stays close to the f16 cache's for
SmolLM2 and Gemma 3, the same whatever the batch size; greedy text starts
the same; `spindle info` predicts the KV memory from the real bytes per
position (34 / 64 and 18 / 64 of f16's) and `run` takes the flags; a bad
type is one line on stderr and exit 2.  The kernels' exactness (every ISA
row equals the scalar row, batch invariance, error against a double
reference) is tests/unit/test_kernels.c; the layout, forks and rollback
tests/unit/test_kv.c.
"""
import re

import pytest

from server_util import Server
from test_perplexity import _ppl, text_path  # noqa: F401 (a fixture)

WINDOWS = 2

# Perplexity change against the f16 cache allowed (2 windows of 512, where
# SmolLM2 moves +1.0 % / +9.3 % and Gemma 3 +0.4 % / +62 % on an AVX-512
# host; docs/quantization.md has 16 windows).
BOUND = {("smollm2", "q8_0"): 0.03, ("gemma3", "q8_0"): 0.03, ("smollm2", "q4_0"): 0.2, ("gemma3", "q4_0"): 1.0}


@pytest.fixture(scope="module")
def perplexity(run_spindle, text_path, smollm2_path, gemma3_path):
    """perplexity(model, k, v, *extra) -> PPL, each run once per module."""
    cache = {}

    def get(model, k, v, *extra):
        key = (model, k, v) + extra
        if key not in cache:
            path = smollm2_path if model == "smollm2" else gemma3_path
            r = run_spindle("perplexity", "-m", path, "-f", text_path, "--ctx", 512, "--chunks", WINDOWS,
                            "--cache-type-k", k, "--cache-type-v", v, "-t", 2, *extra, timeout=600)
            assert r.returncode == 0, r.stderr
            cache[key] = _ppl(r)[0]
        return cache[key]

    return get


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_quantized_cache_perplexity_stays_close(perplexity, model, kind):
    base = perplexity(model, "f16", "f16")
    got = perplexity(model, kind, kind)
    change = got / base - 1
    assert got != base, "the cache type changed nothing"
    assert abs(change) < BOUND[(model, kind)], (model, kind, base, got, change)
    if kind == "q4_0":  # fewer bits cost more than q8_0's
        assert got / base - 1 > perplexity(model, "q8_0", "q8_0") / base - 1 - 0.002


def test_quantized_cache_is_batch_invariant(run_spindle, text_path, smollm2_path):
    """A prompt's attention through a quantized cache does not depend on how
    the window is cut into batches."""
    out = []
    for extra in ([], ["--batch", "32"]):
        r = run_spindle("perplexity", "-m", smollm2_path, "-f", text_path, "--ctx", 128, "--chunks", 2,
                        "--cache-type-k", "q4_0", "--cache-type-v", "q8_0", *extra)
        assert r.returncode == 0, r.stderr
        out.append(_ppl(r)[0])
    assert out[0] == out[1]


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_greedy_text_starts_the_same(run_spindle, smollm2_path, gemma3_path, model):
    path = smollm2_path if model == "smollm2" else gemma3_path
    texts = {}
    for kind in ("f16", "q8_0"):
        r = run_spindle("run", "-m", path, "-p", "The capital of France is", "-n", 8, "--temp", 0,
                        "--cache-type-k", kind, "--cache-type-v", kind)
        assert r.returncode == 0, r.stderr
        texts[kind] = r.stdout
    assert texts["f16"].split()[:3] == texts["q8_0"].split()[:3], texts


def test_speculative_rollback_with_a_quantized_cache(run_spindle, smollm2_path):
    """Rejected drafts are rolled back in the quantized blocks: greedy text
    with prompt-lookup drafts equals the text without them."""
    prompt = "a b c d a b c e a b c f a b c"
    outs = []
    for extra in ([], ["--spec", "ngram", "--spec-fixed", "--json"]):  # fixed k: drafts whatever the timing
        r = run_spindle("run", "-m", smollm2_path, "-p", prompt, "-n", 60, "--temp", 0, "--cache-type-k", "q4_0",
                        "--cache-type-v", "q8_0", *extra)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout if not extra else r.json()["text"])
    spec = r.json()["speculative"]
    assert spec["drafted"] > spec["accepted"], spec  # some drafts were rolled back
    assert outs[0] == outs[1], outs


def _kv_mib(out):
    m = re.search(r"KV cache\s+([0-9.]+) MiB \(keys (\w+), values (\w+)", out)
    assert m, out
    return float(m.group(1)), m.group(2), m.group(3)


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_info_predicts_the_quantized_bytes(run_spindle, smollm2_path, gemma3_path, model):
    """f16 takes 2 bytes a value; q8_0 34 and q4_0 18 bytes per 32 values,
    sliding-window rings included."""
    path = smollm2_path if model == "smollm2" else gemma3_path
    sizes = {}
    for k, v in (("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "q4_0")):
        r = run_spindle("info", "-m", path, "--ctx", 4096, "--parallel", 2, "--cache-type-k", k, "--cache-type-v", v)
        assert r.returncode == 0, r.stderr
        mib, got_k, got_v = _kv_mib(r.stdout)
        assert (got_k, got_v) == (k, v)
        sizes[(k, v)] = mib
    f16 = sizes[("f16", "f16")]
    for (k, v), ratio in (((("q8_0", "q8_0")), 34 / 64), (("q4_0", "q4_0"), 18 / 64), (("q8_0", "q4_0"), 26 / 64)):
        assert abs(sizes[(k, v)] / f16 - ratio) < 0.002, (k, v, sizes[(k, v)], f16)


def test_serve_with_a_quantized_cache(spindle_bin, smollm2_path, run_spindle):
    """serve takes the flags: /metrics reports the q8_0 pool's bytes (what
    info predicts), a greedy completion equals itself when its prompt's
    blocks come from the prefix cache (blocks kept by bytes)."""
    args = ("--ctx", 1024, "--parallel", 2, "--cache-type-k", "q8_0", "--cache-type-v", "q8_0")
    r = run_spindle("info", "-m", smollm2_path, *args)
    assert r.returncode == 0, r.stderr
    want_mib, _, _ = _kv_mib(r.stdout)
    s = Server(spindle_bin, smollm2_path, *args)
    try:
        m = s.metrics()
        assert abs(m["spindle_memory_kv_bytes"] / 2**20 - want_mib) < 0.1, (m["spindle_memory_kv_bytes"], want_mib)
        prompt = "In the beginning God created the heaven and the earth. " * 6
        outs = []
        for _ in range(2):
            r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0})
            assert r.status_code == 200, r.text
            outs.append(r.json()["choices"][0]["text"])
        assert outs[0] == outs[1] and outs[0].strip(), outs
        assert s.metrics()["spindle_prefix_cache_hits_total"] >= 1
    finally:
        s.stop()


def test_bad_cache_type_is_refused(run_spindle, smollm2_path):
    for tool in ("run", "bench", "info"):
        args = [tool, "-m", smollm2_path, "--cache-type-k", "q5_1"] + (["-p", "hi"] if tool == "run" else [])
        r = run_spindle(*args)
        assert r.returncode == 2, (tool, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "q5_1" in r.stderr, r.stderr
