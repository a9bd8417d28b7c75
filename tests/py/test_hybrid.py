"""Models with linear (recurrent) layers, on the random-weight files of
tests/gguf/families.py (their numbers against llama.cpp are
test_families.py's), through the engine: the state of every sequence in a
batch with others, chunked prefill, forks for n > 1, the prefix cache
resuming a prompt from a state snapshot, speculative decoding's roll back,
what `spindle info` and /metrics report, and the refusals.

A linear layer's state advances on a grid of 64-position chunks aligned to
absolute positions (docs/design.md, "Sequence memory"), so every position's
output is one fixed function of the tokens before it: each comparison
below is exact."""
import concurrent.futures
import os
import re
import sys

import pytest

from server_util import Server
from test_families import golden, model_path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
import families  # noqa: E402

LINEAR = [f for f in sorted(families.FAMILIES) if families.is_linear(f)]
GRID = 64
ROLLBACK = 33  # src/state/state.h: SP_STATE_ROLLBACK


def _linear_layer(spec, i):
    """Whether layer i of a family's test model is linear."""
    if "attn_layers" in spec:
        return i not in spec["attn_layers"]
    if "pattern" in spec:
        return spec["pattern"][i] == "M"
    if "conv_layers" in spec:
        return i in spec["conv_layers"]
    if "delta" in spec:
        return (i + 1) % 4 != 0
    return True


def _prompts(fam):
    return [p["text"] for p in golden(fam)["files"]["f32"]["prompts"]]


@pytest.fixture(scope="module", params=LINEAR)
def server(request, spindle_bin):
    s = Server(spindle_bin, model_path(request.param, "f32"), "--parallel", "4", "--ctx", "1024")
    s.family = request.param
    yield s
    rc = s.stop()
    assert rc == 0, s.log_text()[-2000:]


def _complete(server, prompt, n=24, **extra):
    body = {"model": server.model_id, "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2}
    body.update(extra)
    r = server.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def _choice(doc):
    c = doc["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"]


def test_sequences_batched_together_equal_each_alone(server):
    """Every golden prompt (the longest past two grid points) alone, then
    all at once in four parallel slots: the same text and the same logprobs,
    bit for bit."""
    prompts = _prompts(server.family)
    alone = [_choice(_complete(server, p)) for p in prompts]
    assert len({a[0] for a in alone}) == len(prompts)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as ex:
        together = list(ex.map(lambda p: _choice(_complete(server, p)), prompts))
    for p, a, b in zip(prompts, alone, together):
        assert a == b, p[:40]


def test_prefix_cache_resumes_from_a_state_snapshot(server):
    """A long prompt twice: the second time the prefix cache gives back its positions
    up to the last grid point before its last token (a snapshot of the
    state there), and the continuation is the one computed from scratch."""
    prompt = "Notes. " + max(_prompts(server.family), key=len)  # not cached by the tests before
    before = server.metrics()
    first = _complete(server, prompt)
    second = _complete(server, prompt)
    n_prompt = second["usage"]["prompt_tokens"]
    assert n_prompt > 2 * GRID
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == (n_prompt - 1) // GRID * GRID
    assert _choice(second) == _choice(first)
    after = server.metrics()
    assert after["spindle_prefix_cache_hits_total"] > before["spindle_prefix_cache_hits_total"]
    assert after["spindle_state_snapshots"] >= 1
    assert after["spindle_state_bytes_per_sequence"] > 0


@pytest.mark.parametrize("fam", LINEAR)
def test_chunked_prefill_is_bit_identical(fam, run_spindle, tmp_path):
    """Perplexity over two 256-token windows, prefilled in batches of 512,
    37 and 1 token: the same numbers to the last printed digit."""
    text = tmp_path / "text.txt"
    text.write_text(" ".join(p for p in _prompts(fam)) * 3)
    out = []
    for b in (512, 37, 1):
        r = run_spindle("perplexity", "-m", model_path(fam, "q8_0"), "-f", text, "--ctx", 256, "--chunks", 2,
                        "--batch", b)
        assert r.returncode == 0, r.stderr
        out.append(re.findall(r"PPL = \S+", r.stdout + r.stderr))
    assert out[0] and out[0] == out[1] == out[2], out


@pytest.mark.parametrize("fam", LINEAR)
def test_forked_choices_keep_their_own_state(fam, run_spindle):
    """n = 3 samples fork the prompt's state three ways: choice i is the
    single run with seed + i (each copy then diverges on its own)."""
    path, prompt = model_path(fam, "q8_0"), _prompts(fam)[0]
    three = run_spindle("run", "-m", path, "-p", prompt, "-n", 40, "--temp", 0.9, "--seed", 11, "--n", 3, "--json")
    assert three.returncode == 0, three.stderr
    texts = [c["text"] for c in three.json()["choices"]]
    assert len(set(texts)) == 3
    for i in range(3):
        one = run_spindle("run", "-m", path, "-p", prompt, "-n", 40, "--temp", 0.9, "--seed", 11 + i, "--json")
        assert one.returncode == 0, one.stderr
        assert one.json()["text"] == texts[i], i


@pytest.mark.parametrize("fam", LINEAR)
def test_info_prints_the_state_per_sequence(fam, run_spindle):
    """`spindle info` prints the state beside the KV cache: per sequence,
    every linear layer's one grid state, its input ring (C - 1 + 33
    positions of what the chunked state reads: a chunk and a roll back), its
    convolution ring (33 + taps - 1 positions of the raw inputs) and the
    convolution's taps - 1 inputs before the grid state, in f32, and the
    slot's floor and each layer's held grid point (4 bytes each)."""
    spec = families.FAMILIES[fam]
    if "ssm" in spec:  # Mamba-2: x, B, C, dt, L per position
        dc, di, ds, ng, hd = spec["ssm"]
        nh, conv = di // hd, di + 2 * ng * ds
        layer = nh * ds * hd + (GRID - 1 + ROLLBACK) * (conv + 2 * nh) + (ROLLBACK + 2 * (dc - 1)) * conv
    elif "delta" in spec:  # k, L, u per position (q, v, beta and g are read at their own position only)
        dc, nk, nv, w = spec["delta"]
        conv = (2 * nk + nv) * w
        layer = nv * w * w + (GRID - 1 + ROLLBACK) * (nk * w + nv + nv * w) + (ROLLBACK + 2 * (dc - 1)) * conv
    else:  # LFM2: the convolution's inputs only
        layer = (ROLLBACK + 2 * (spec["conv_taps"] - 1)) * spec["n_embd"]
    n_linear = sum(1 for i in range(spec["n_layer"]) if _linear_layer(spec, i))
    want = n_linear * layer * 4 + (spec["n_layer"] + 1) * 4
    r = run_spindle("info", "-m", model_path(fam, "q8_0"), "--parallel", 3)
    assert r.returncode == 0, r.stderr
    m = re.search(r"^  state +([0-9.]+) MiB \(linear layers' recurrent state: ([0-9.]+) MiB per sequence", r.stdout,
                  re.M)
    assert m, r.stdout
    assert abs(float(m.group(2)) - want / 2**20) < 0.01, (m.group(2), want / 2**20)
    assert abs(float(m.group(1)) - 3 * want / 2**20) < 0.06  # printed to 0.1 MiB
    if n_linear == spec["n_layer"]:  # no attention layer: no KV bytes
        assert re.search(r"^  KV cache +0\.0 MiB", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("fam", LINEAR)
def test_self_speculation_is_refused(fam, run_spindle):
    """The first layers cannot draft ahead of a linear layer's state: one
    line naming the model and what works instead, exit 2."""
    r = run_spindle("run", "-m", model_path(fam, "q8_0"), "-p", "hello", "-n", 4, "--spec", "self")
    assert r.returncode == 2
    assert "linear (recurrent) layers" in r.stderr and "ngram" in r.stderr, r.stderr


@pytest.mark.parametrize("fam", LINEAR)
def test_draft_rollback_keeps_greedy_exact(fam, run_spindle):
    """Speculative decoding with an attention draft model of the same
    vocabulary (the qwen2 test model, whose guesses the linear model rejects)
    rolls the state back after every rejected draft, across grid points (an
    80-token prompt and 60 tokens, 5 drafts a step): each step's token and
    logprobs are those of plain decoding, bit for bit."""
    path, prompt = model_path(fam, "q8_0"), _prompts(fam)[3]
    args = ("run", "-m", path, "-p", prompt, "-n", 60, "--temp", 0, "--json", "--logprobs", 3)
    plain = run_spindle(*args)
    spec = run_spindle(*args, "--spec", "draft", "--draft-model", model_path("qwen2", "q8_0"), "--spec-fixed",
                       "--spec-k", 5)
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    a, b = plain.json(), spec.json()
    assert b["usage"]["prompt_tokens"] > GRID and len(b["tokens"]) == 60
    assert [(t["id"], t["logprob"], t["top_logprobs"]) for t in b["tokens"]] == \
           [(t["id"], t["logprob"], t["top_logprobs"]) for t in a["tokens"]]
    s = b["speculative"]
    assert s["source"] == "draft" and s["drafted"] > 0 and s["accepted"] < s["drafted"], s


def _variant(tmp_path, fam, edit):
    """The family's q8_0 file with one thing changed by edit(builder)."""
    b = families.Builder(fam, dict(families.FAMILIES[fam]), seed=7)
    b.build()
    edit(b)
    path = tmp_path / ("%s-variant.gguf" % fam)
    b.write(str(path), "q8_0")
    return path


def _set_key(b, suffix, value):
    b.kv = [(k, value if k.endswith("." + suffix) else v, t, s) for k, v, t, s in b.kv]


def _set_tensor(b, name, make):
    b.tensors = [(n, shape, kind, make if n == name else mk) for n, shape, kind, mk in b.tensors]


REFUSALS = [
    ("mamba2", lambda b: _set_key(b, "ssm.conv_kernel", 9), "ssm.conv_kernel': 9, expected 1..8"),
    ("mamba2", lambda b: _set_key(b, "ssm.group_count", 3), "ssm.group_count': 3 groups do not divide 8 heads"),
    ("mamba2", lambda b: _set_tensor(b, "blk.1.ssm_a", lambda rng: families.np.full((8, 1), 0.5, families.np.float32)),
     "blk.1.ssm_a': 0.5 in head 0, expected a finite value <= 0"),
    ("lfm2", lambda b: _set_key(b, "attention.head_count_kv", [0, 2, 0]),
     "3 values, expected one or 4 (one per layer)"),
    ("granitehybrid", lambda b: (b.key("expert_count", 4, families.VT.UINT32),
                                 b.key("expert_used_count", 2, families.VT.UINT32)),
     "tensor 'blk.0.ffn_gate_inp.weight': missing"),
    ("granitehybrid-moe", lambda b: _set_key(b, "expert_used_count", 9),
     "expert_used_count': 9, expected 1..8 (expert_count)"),
    ("qwen3next", lambda b: b.mat("blk.0.ssm_in.weight", 2 * 128 + 2 * 256, 256),
     "blk.0.ssm_in.weight': a fused q/k/v/z projection is not supported"),
    ("qwen35moe", lambda b: _set_key(b, "expert_count", 0), "expert_count': 0, but expert_used_count is 2"),
]


@pytest.mark.parametrize("fam,edit,expect", REFUSALS, ids=[r[2][:30] for r in REFUSALS])
def test_malformed_files_are_refused(fam, edit, expect, run_spindle, tmp_path):
    r = run_spindle("info", "-m", _variant(tmp_path, fam, edit))
    assert r.returncode == 2 and expect in r.stderr, r.stderr


def _logits(run_spindle, path):
    ids = " ".join(str(3 + (i * 4507) % 30000) for i in range(40))
    r = run_spindle("logits", "-m", path, "--ids", ids, "--from", 0, "--top", 8)
    assert r.returncode == 0, r.stderr
    return r.json()["steps"]


def test_granitehybrid_dense_with_the_converters_expert_keys(run_spindle, tmp_path):
    """Granite 4.0-H Micro as llama.cpp's converter writes it: expert_count 0,
    expert_used_count 0 and expert_shared_feed_forward_length beside the
    dense feed-forward; the keys change nothing (the model stays dense, as
    in llama.cpp): the logits of the file without them, bit for bit."""
    def keys(b):
        b.key("expert_count", 0, families.VT.UINT32)
        b.key("expert_used_count", 0, families.VT.UINT32)
        b.key("expert_shared_feed_forward_length", 512, families.VT.UINT32)
    path = _variant(tmp_path, "granitehybrid", keys)
    r = run_spindle("info", "-m", path)
    assert r.returncode == 0 and "experts" not in r.stdout, r.stderr + r.stdout
    plain = tmp_path / "plain.gguf"
    b = families.Builder("granitehybrid", dict(families.FAMILIES["granitehybrid"]), seed=7)
    b.build()
    b.write(str(plain), "q8_0")
    assert _logits(run_spindle, path) == _logits(run_spindle, str(plain))


def test_granitehybrid_experts_without_a_shared_expert(run_spindle, tmp_path):
    """Without expert_shared_feed_forward_length (or with 0) a Granite
    4.0-H file's experts run alone, with no ffn_*_shexp tensors: the logits
    of the same weights whose shared expert's down projection is zero, bit
    for bit (every other tensor drawn alike)."""
    shexp = ("ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")

    def zero_down(b):
        b.tensors = [(n, shape, kind, (lambda mk: lambda rng: mk(rng) * 0)(mk) if n.endswith(shexp[2]) else mk)
                     for n, shape, kind, mk in b.tensors]

    def drop(b):  # the dropped tensors' values are still drawn, before the next tensor's
        out, pending = [], []
        for n, shape, kind, mk in b.tensors:
            if n.endswith(shexp):
                pending.append(mk)
                continue
            if pending:
                mk = (lambda mk, before: lambda rng: [p(rng) for p in before] and mk(rng))(mk, pending)
                pending = []
            out.append((n, shape, kind, mk))
        b.tensors = out
        b.kv = [kv for kv in b.kv if not kv[0].endswith(".expert_shared_feed_forward_length")]

    alone = _variant(tmp_path, "granitehybrid-moe", drop)
    os.replace(alone, tmp_path / "alone.gguf")
    zeroed = _variant(tmp_path, "granitehybrid-moe", zero_down)
    r = run_spindle("info", "-m", tmp_path / "alone.gguf")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("features:"))
    assert "8 experts (2 used" in line and "shared expert" not in line, line
    assert _logits(run_spindle, str(tmp_path / "alone.gguf")) == _logits(run_spindle, str(zeroed))


def test_lfm2_sliding_window_applies_to_its_attention_layers(run_spindle, tmp_path):
    """LFM2's attention.sliding_window, when the file gives one, makes every
    attention layer local (llama.cpp's rule); the convolutions are not
    attention and keep their state."""
    path = _variant(tmp_path, "lfm2", lambda b: b.key("attention.sliding_window", 32, families.VT.UINT32))
    r = run_spindle("info", "-m", path)
    assert r.returncode == 0, r.stderr
    assert "sliding window 32 on 1 of 4 layers" in r.stdout, r.stdout
