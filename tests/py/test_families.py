"""Every architecture family against llama.cpp, on small random-weight models.

tests/gguf/families.py writes each family's GGUFs (f32, q8_0, q4_k; fixed
seeds, byte-identical on every run); tests/goldens/families/<family>.json
holds llama.cpp's numbers for them (scripts/goldens/goldens_families.py) and the
sha256 of the files they came from, which the generated files must match.

For every prompt of every file:
  * tokens: identical;
  * logits at every position: each of llama.cpp's top-10 tokens is in
    spindle's top list, within the bound below;
  * greedy continuation: identical until a near-tie of the reference (the
    rules of test_goldens.py, with the f32 near-tie as tight as its bound).

The f32 bound.  With F32 weights neither engine quantizes activations: both
compute in float, round q, the K/V cache and the softmax probabilities to
f16 at the same points, and add in different orders.  The order changes a
value by ~1e-7 relative; where that moves a value across an f16 rounding
boundary, that one element changes by 2^-11 (4.9e-4) relative, and such
flips average out in the dot products that follow.  Through two layers and
the output head this leaves the top-10 logits within ~2e-4 relative of
llama.cpp's (the largest difference measured over all families is printed
by each test); the bound is 1e-3 of the position's largest top-10 |logit|
(at least 1), five times that.  A wrong operation (a bias not added, a
norm over the wrong width, a RoPE factor off by one pair, a soft-cap
missing) moves logits by 1e-2 to units.

The q8_0 and q4_k copies are held to test_goldens.py's bounds: both
engines quantize activations to 8 bits, and that rounding is discontinuous
(see test_goldens.py).  Mixture-of-experts copies add a larger
discontinuity: a token whose router scores its k-th and (k+1)-th experts
almost equally takes one or the other depending on that noise, and its
logits then differ by up to ~2 (measured: 4 of the 1,554 positions of the
eight quantized MoE files moved by 0.7 to 2.0, one of them beyond the
bound, never two in one prompt; of the 1,480 of the four quantized
qwen35moe and qwen3next files, 4 missed the bounds, never two in one
prompt; at F32 none).  One
position per prompt of those copies may therefore miss the bounds; the
f32 copies, where routing agrees exactly, may not.
"""
import math
import os
import re
import sys

import pytest

from conftest import load_golden

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
import families  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "build", "families")
FAMILIES = sorted(families.FAMILIES)
TYPES = families.TYPES

F32_RTOL = 1e-3       # of the position's largest top-10 |logit| (>= 1)
F32_NEAR_TIE = 0.01   # log-prob gap within which an f32 greedy step may pick the runner-up
Q_LOGIT_TOL = 1.5     # test_goldens.py's bounds for quantized weights
Q_NEAR_TIE = 0.6
Q_CONFIDENT_GAP = 1.0
LOGPROB_TOL = {"f32": 0.01, "q8_0": 0.75, "q4_k": 0.75, "mxfp4": 0.75}
ROUTER_FLIPS = 1      # positions per prompt a quantized mixture-of-experts copy may miss the bounds at
TOP = 40

_paths = {}


def golden(family):
    return load_golden("families/" + family)


def model_path(family, qtype):
    """The family's file, written on first use and checked against the
    golden's sha256 (regenerated once if stale)."""
    key = (family, qtype)
    if key not in _paths:
        want = {t: golden(family)["files"][t]["sha256"] for t in families.types_of(family)}
        paths = {t: os.path.join(OUT, "%s-%s.gguf" % (family, t)) for t in families.types_of(family)}
        if not all(os.path.exists(p) and families.sha256_file(p) == want[t] for t, p in paths.items()):
            os.makedirs(OUT, exist_ok=True)
            families.build_family(family, OUT)
            for t, p in paths.items():
                got = families.sha256_file(p)
                assert got == want[t], ("%s: sha256 %s, but the goldens were made from %s (regenerate them with "
                                        "scripts/goldens/goldens_families.py)" % (p, got, want[t]))
        _paths.update({(family, t): p for t, p in paths.items()})
    return _paths[key]


def _cases():
    for fam in FAMILIES:
        for t in families.types_of(fam):
            for i, p in enumerate(golden(fam)["files"][t]["prompts"]):
                yield pytest.param(fam, t, i, id="%s-%s/%s" % (fam, t, p["name"]))


CASES = list(_cases())


def _prompt(fam, qtype, i):
    return golden(fam)["files"][qtype]["prompts"][i]


def _position_error(qtype, pos, top, gold):
    """Why spindle's top list at one position fails llama.cpp's top-10
    (None: it agrees); also the largest difference (relative for f32)."""
    ours = {int(i): float(v) for i, v in top}
    scale = max(1.0, max(abs(v) for _, v in gold))
    worst = 0.0
    for gid, gv in gold:
        if gid not in ours:
            return "position %d: llama.cpp's top-10 token %d (%.4f) not in spindle's top %d" % (pos, gid, gv, TOP), 0
        d = abs(ours[gid] - gv)
        bound = F32_RTOL * scale if qtype == "f32" else Q_LOGIT_TOL
        worst = max(worst, d / scale if qtype == "f32" else d)
        if d > bound:
            return "position %d token %d: spindle %.5f, llama.cpp %.5f (bound %.5f)" % (
                pos, gid, ours[gid], gv, bound), worst
    top1, gap = int(top[0][0]), gold[0][1] - gold[1][1]
    if qtype == "f32" or gap > Q_CONFIDENT_GAP:
        if top1 != gold[0][0] and gap > 2 * F32_RTOL * scale:
            return "position %d: spindle's top-1 %d, llama.cpp's %d leads by %.4f" % (pos, top1, gold[0][0], gap), worst
    elif top1 not in [g[0] for g in gold[:3]]:
        return "position %d: near-tie, spindle's top-1 %d not in %s" % (pos, top1, gold[:3]), worst
    return None, worst


@pytest.mark.parametrize("fam,qtype,index", CASES)
def test_tokens_and_logits_at_every_position(fam, qtype, index, run_spindle):
    p = _prompt(fam, qtype, index)
    r = run_spindle("logits", "-m", model_path(fam, qtype), "-p", p["text"], "--from", 0, "--top", TOP)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = r.json()
    assert doc["tokens"] == p["tokens"]
    steps = doc["steps"]
    assert len(steps) == len(p["top10"])
    errors, worst = [], 0.0
    for pos, (step, gold) in enumerate(zip(steps, p["top10"])):
        err, w = _position_error(qtype, pos, step["top"], gold)
        worst = max(worst, w)
        if err:
            errors.append(err)
    allowed = ROUTER_FLIPS if qtype != "f32" and "experts" in families.FAMILIES[fam] else 0
    assert len(errors) <= allowed, "; ".join(errors[:5])
    print("%s-%s/%s: largest difference %.2e %s%s" % (fam, qtype, p["name"], worst,
                                                       "relative" if qtype == "f32" else "absolute",
                                                       "; " + errors[0] if errors else ""))


@pytest.mark.parametrize("fam,qtype,index", CASES)
def test_greedy_continuation(fam, qtype, index, run_spindle):
    p = _prompt(fam, qtype, index)
    n = golden(fam)["greedy_tokens"]
    r = run_spindle("run", "-m", model_path(fam, qtype), "-p", p["text"], "--json", "--temp", "0", "-n", n)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = r.json()
    ours = [int(t["id"]) for t in doc["tokens"]]
    lps = [float(t["logprob"]) for t in doc["tokens"]]
    gold = p["greedy"]
    near_tie = F32_NEAR_TIE if qtype == "f32" else Q_NEAR_TIE
    k = 0
    while k < min(len(ours), len(gold)) and ours[k] == gold[k]:
        assert math.isfinite(lps[k]) and abs(lps[k] - p["greedy_logprobs"][k]) <= LOGPROB_TOL[qtype], (
            "step %d: logprob %.4f, llama.cpp %.4f" % (k, lps[k], p["greedy_logprobs"][k]))
        k += 1
    if k == len(gold) or (k == len(gold) - 1 and len(ours) == k):
        return  # all of it (an end-of-generation token may end spindle's list)
    assert k < len(ours), "spindle stopped after %d tokens; llama.cpp continues with %s" % (k, gold[k:k + 5])
    alts = {int(i): lp for i, lp in p["greedy_top5"][k]}
    assert ours[k] in alts, "step %d: spindle chose %d, not in llama.cpp's top-5 %s" % (k, ours[k],
                                                                                       p["greedy_top5"][k])
    gap = alts[gold[k]] - alts[ours[k]]
    assert gap <= near_tie, "step %d: spindle chose %d over llama.cpp's %d, which led by %.4f" % (
        k, ours[k], gold[k], gap)
    print("%s-%s/%s: greedy identical for %d/%d tokens, then a near-tie (%.4f)" % (fam, qtype, p["name"], k,
                                                                                   len(gold), gap))


FEATURES = {
    "llama3": ["RoPE frequency factors (rope_freqs)", "grouped-query attention (2 query heads per KV head)"],
    "mistral": ["sliding window 128 on 2 of 2 layers"],
    "qwen2": ["QKV bias", "RoPE halves (NEOX)"],
    "qwen3": ["QK-norm (per head)"],
    "phi3": ["LongRoPE (long factors above 2048 positions", "fused QKV", "fused gate-up"],
    "gemma2": ["GeGLU", "sliding window 32 on 1 of 2 layers", "soft-cap: attention 4, final logits 6", "post-norms"],
    "qwen2moe": ["QKV bias", "8 experts (2 used, softmax router, width 256) + shared expert"],
    "qwen3moe": ["QK-norm (per head)", "8 experts (2 used, softmax router, weights renormalized, width 256)"],
    "olmoe": ["QK-norm (whole rows)", "8 experts (2 used, softmax router, width 256)"],
    "mixtral": ["8 experts (2 used, softmax router, weights renormalized, width 256)"],
    "mamba2": ["Mamba-2 on 2 of 2 layers (8 heads x 64, state 64, 2 groups, convolution 4)", "no feed-forward"],
    "lfm2": ["gated short convolutions on 3 of 4 layers (3 taps)", "QK-norm (per head)", "RoPE halves (NEOX)"],
    "granitehybrid": ["Mamba-2 on 2 of 3 layers (8 heads x 64, state 64, 2 groups, convolution 4)",
                      "no position encoding in attention (NoPE)", "scales: embeddings 0.5, residuals 0.75, logits 1/4"],
    "granitehybrid-moe": ["Mamba-2 on 3 of 4 layers (8 heads x 64, state 64, 2 groups, convolution 4)",
                          "no position encoding in attention (NoPE)", "scales: embeddings 2, residuals 0.5, logits 1/3",
                          "8 experts (2 used, softmax router, weights renormalized, width 256) + shared expert"],
    "qwen35": ["gated delta rule on 3 of 4 layers (4 value heads x 64, 2 key heads, convolution 4)",
               "gated attention (sigmoid)", "QK-norm (per head)", "RoPE halves (NEOX)"],
    "qwen35moe": ["gated delta rule on 3 of 4 layers (4 value heads x 64, 2 key heads, convolution 4)",
                  "gated attention (sigmoid)", "RoPE halves (NEOX)",
                  "8 experts (2 used, softmax router, weights renormalized, width 128) + shared expert"],
    "qwen3next": ["gated delta rule on 3 of 4 layers (4 value heads x 64, 2 key heads, convolution 4)",
                  "value heads grouped by key head",
                  "gated attention (sigmoid)", "RoPE halves (NEOX)",
                  "8 experts (2 used, softmax router, weights renormalized, width 128) + shared expert"],
    "smollm3": ["RoPE adjacent pairs", "no RoPE on 1 of 4 layers (NoPE every 4 layers)"],
    "mistral3": ["RoPE adjacent pairs", "YaRN RoPE scaling 4 (original context 32, beta 32/1, attention factor 1.13863)",
                 "attention temperature 0.1 per 32 positions"],
    "granite": ["RoPE adjacent pairs", "scales: embeddings 2, residuals 0.5, logits 1/4"],
    "cohere2": ["RoPE adjacent pairs", "no RoPE on the global layers (1 of 4, NoPE)", "logits x 0.25",
                "parallel attention and feed-forward", "LayerNorm without bias", "sliding window 16 on 3 of 4 layers"],
    "exaone4": ["RoPE halves (NEOX)", "no pre-norms", "QK-norm (per head)", "post-norms"],
    "glm4": ["RoPE adjacent pairs", "QKV bias", "post-norms", "fused gate-up"],
    "llama4": ["RoPE adjacent pairs", "no RoPE on 1 of 4 layers (NoPE every 4 layers)",
               "QK-norm (L2 per head after RoPE, on 3 of 4 layers)",
               "attention temperature 0.1 per 8192 positions on the NoPE layers",
               "attention chunks of 8192 on 3 of 4 layers",
               "8 experts (1 used, sigmoid router, width 256) + shared expert",
               "experts on 2 of 4 layers (the others dense), router weights on the expert input"],
    "nemotron_h": ["Mamba-2 on 2 of 5 layers (8 heads x 64, state 64, 2 groups, convolution 4)",
                   "feed-forward alone on 2 layers (ReLU^2, no gate)", "no position encoding in attention (NoPE)"],
    "gemma4": ["GeGLU", "RoPE halves (NEOX)", "QK-norm (per head)", "RoPE frequency factors (rope_freqs) on the global "
               "layers", "sliding window 16 on 3 of 5 layers", "soft-cap: final logits 30", "attention scale 1",
               "values RMS-normed", "values = keys on 1 of 5 layers",
               "local layers 2 KV heads of 32, global layers 1 of 64", "feed-forward widths 512 to 1024 by layer",
               "2 of 5 layers read an earlier layer's keys and values (shared KV)",
               "per-layer embeddings (32 per layer)", "layer output scales on 5 of 5 layers", "post-norms"],
    "gemma3n": ["GeGLU", "RoPE halves (NEOX)", "QK-norm (per head)", "sliding window 16 on 17 of 22 layers",
                "soft-cap: final logits 30", "attention scale 1", "values RMS-normed",
                "2 of 22 layers read an earlier layer's keys and values (shared KV)",
                "per-layer embeddings (256 per layer)", "AltUp (4 streams, stream 0 active)", "Laurel (rank 64)",
                "sparse feed-forward gates (Gaussian top-k) on 10 of 22 layers", "post-norms"],
    "gemma4-moe": ["GeGLU", "local layers 2 KV heads of 32, global layers 1 of 64", "attention scale 1",
                   "8 experts (2 used, softmax router, weights renormalized, width 128) beside the dense feed-forward",
                   "expert output scales, router input scale", "post-norms"],
    "gpt-oss": ["clamped SwiGLU", "RoPE halves (NEOX)", "attention output bias", "router and expert biases",
                "attention sinks", "QKV bias", "YaRN RoPE scaling 4 (original context 32, beta 32/1",
                "sliding window 16 on 2 of 4 layers", "8 experts (4 used, top-k softmax router, width 256)"],
    "deepseek2": ["RoPE adjacent pairs", "multi-head latent attention (cache: latent 128 + RoPE key 32 per position; "
                  "heads 96/64 wide, query LoRA)", "YaRN RoPE scaling 4 (original context 32, beta 32/1",
                  "8 experts (2 used, sigmoid router, weights renormalized, width 128) + shared expert",
                  "expert groups: 2 best of 4", "expert weights x 2.5", "experts on 2 of 3 layers (the others dense)"],
}


CHUNKED = [f for f in FAMILIES if "chunk" in families.FAMILIES[f]]


@pytest.mark.parametrize("fam,qtype", [(f, t) for f in CHUNKED for t in TYPES])
def test_chunked_attention_across_a_chunk(fam, qtype, run_spindle):
    """Chunked attention (Llama 4: llama.cpp's fixed chunk of 8192) past the
    first chunk: a position after the boundary sees only its own chunk in
    the local layers, and the global layers' temperature steps up at
    position 8191.  llama.cpp's top-10 at every position from 32 before the
    boundary to 128 after (each decoded alone there; here in one prompt
    batch), within the bounds above; a quantized MoE copy may miss at
    ROUTER_FLIPS positions per 100."""
    g = golden(fam)
    ids, start = g["chunks"]["ids"], g["chunks"]["from"]
    r = run_spindle("logits", "-m", model_path(fam, qtype), "--ids", " ".join(map(str, ids)), "--from", start,
                    "--top", TOP, "--ctx", len(ids) + 128)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = r.json()["steps"]
    gold = g["files"][qtype]["chunk_top10"]
    assert len(steps) == len(gold) == len(ids) - start
    errors, worst = [], 0.0
    for i, (step, want) in enumerate(zip(steps, gold)):
        err, w = _position_error(qtype, start + i, step["top"], want)
        worst = max(worst, w)
        if err:
            errors.append(err)
    allowed = ROUTER_FLIPS * -(-len(gold) // 100) if qtype != "f32" else 0
    assert len(errors) <= allowed, "%d positions: %s" % (len(errors), "; ".join(errors[:5]))
    print("%s-%s/chunks: largest difference %.2e %s" % (fam, qtype, worst, "relative" if qtype == "f32" else
                                                       "absolute"))


@pytest.mark.parametrize("fam", FAMILIES)
def test_info_names_family_and_features(fam, run_spindle):
    r = run_spindle("info", "-m", model_path(fam, "q4_k"))
    assert r.returncode == 0, r.stderr
    assert "architecture:    %s\n" % families.FAMILIES[fam]["arch"] in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("features:"))
    for f in FEATURES[fam]:
        assert f in line, "%r not in %r" % (f, line)


@pytest.mark.parametrize("fam", [f for f in FAMILIES if any("experts" in w for w in FEATURES[f])])
def test_info_counts_every_expert_as_weights(fam, run_spindle):
    """All experts stay in memory (any token may pick any): `spindle info`
    counts them as weights, not as runtime.  Weights are every tensor of
    the file but the embedding table of an untied head (its rows are read
    one per token), each padded to 64 bytes."""
    import gguf
    path = model_path(fam, "q4_k")
    r = run_spindle("info", "-m", path)
    assert r.returncode == 0, r.stderr
    got = float(re.search(r"^  weights +([0-9.]+) MiB", r.stdout, re.M).group(1))
    tensors = gguf.GGUFReader(path).tensors
    untied = any(t.name == "output.weight" for t in tensors)
    want = sum(int(t.n_bytes) for t in tensors if not (untied and t.name == "token_embd.weight")) / 2**20
    assert abs(got - want) < 0.1 + 64 * len(tensors) / 2**20, (got, want)


def test_features_cover_every_family():
    assert sorted(FEATURES) == FAMILIES


def test_all_local_layers_ring_matches_full_cache(run_spindle):
    """Mistral's layers are all local (window 128): over 1,500 positions the
    rings (window + batch = 640 positions) wrap twice, and every position's
    logits must equal those of the full cache (--swa-full)."""
    path = model_path("mistral", "q8_0")
    ids = " ".join(str(3 + (i * 7919) % 31000) for i in range(1500))
    a = run_spindle("logits", "-m", path, "--ids", ids, "--from", 1300, "--top", 3)
    b = run_spindle("logits", "-m", path, "--ids", ids, "--from", 1300, "--top", 3, "--swa-full")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    sa, sb = a.json()["steps"], b.json()["steps"]
    assert len(sa) == 200 and sa == sb


@pytest.mark.parametrize("fam,qtype", [("qwen2moe", "q4_k"), ("mixtral", "q4_k"), ("llama4", "q4_k"),
                                      ("gpt-oss", "mxfp4"), ("gemma4-moe", "q4_k"), ("deepseek2", "q4_k"),
                                      ("granitehybrid-moe", "q4_k")])
def test_experts_batch_invariant(fam, qtype, run_spindle):
    """A token's logits do not depend on what else is in the batch, though
    the batch's rows are grouped by expert: the last position of each prefix,
    computed in batches of 5 to 60 tokens, equals the same position of the
    60-token batch, bit for bit (gpt-oss: with its expert biases, attention
    sinks on the prompt's block path and MXFP4 experts)."""
    path = model_path(fam, qtype)
    ids = [3 + (i * 4507) % 30000 for i in range(60)]
    full = run_spindle("logits", "-m", path, "--ids", " ".join(map(str, ids)), "--from", 0, "--top", 8)
    assert full.returncode == 0, full.stderr
    steps = full.json()["steps"]
    for n in (5, 17, 33, 59):
        r = run_spindle("logits", "-m", path, "--ids", " ".join(map(str, ids[:n])), "--top", 8)
        assert r.returncode == 0, r.stderr
        assert r.json()["top"] == steps[n - 1]["top"], "prefix of %d tokens" % n


@pytest.mark.parametrize("fam", ["gemma4", "gemma3n"])
def test_shared_kv_batch_invariant_and_ring_equals_full_cache(fam, run_spindle):
    """Gemma 4's and Gemma 3n's layers reading another layer's keys and
    values and their per-layer inputs (Gemma 3n: also its AltUp streams,
    Laurel branch and sparse gates): the last position of each prefix,
    computed in batches of 5 to 60 tokens, equals the same position of the
    60-token batch, bit for bit; and their local layers (the shared ones
    reading their source's ring) give the same logits with every layer in
    the paged cache (--swa-full)."""
    path = model_path(fam, "q8_0")
    ids = " ".join(str(3 + (i * 4507) % 30000) for i in range(60))
    full = run_spindle("logits", "-m", path, "--ids", ids, "--from", 0, "--top", 8)
    paged = run_spindle("logits", "-m", path, "--ids", ids, "--from", 0, "--top", 8, "--swa-full")
    assert full.returncode == 0 and paged.returncode == 0, full.stderr + paged.stderr
    steps = full.json()["steps"]
    assert steps == paged.json()["steps"]
    for n in (5, 17, 33, 59):
        r = run_spindle("logits", "-m", path, "--ids", " ".join(ids.split()[:n]), "--top", 8)
        assert r.returncode == 0, r.stderr
        assert r.json()["top"] == steps[n - 1]["top"], "prefix of %d tokens" % n


def test_gemma3n_chunked_prefill_is_bit_identical(run_spindle, tmp_path):
    """Gemma 3n's AltUp streams, Laurel branch, sparse gates and shared KV
    over prompts longer than a prefill chunk: perplexity over two 128-token
    windows (eight sliding windows each), prefilled in batches of 512, 37
    and 1 token, gives the same numbers to the last printed digit."""
    text = tmp_path / "text.txt"
    text.write_text(" ".join(p["text"] for p in golden("gemma3n")["files"]["f32"]["prompts"]) * 3)
    out = []
    for b in (512, 37, 1):
        r = run_spindle("perplexity", "-m", model_path("gemma3n", "q8_0"), "-f", text, "--ctx", 128, "--chunks", 2,
                        "--batch", b)
        assert r.returncode == 0, r.stderr
        out.append(re.findall(r"PPL = \S+", r.stdout + r.stderr))
    assert out[0] and out[0] == out[1] == out[2], out


@pytest.mark.parametrize("fam", FAMILIES)
def test_trailing_dimensions_of_one_are_the_same_shape(fam, run_spindle, tmp_path):
    """Every tensor recorded with one more dimension of 1 (vectors [n, 1],
    as llama.cpp's converter writes e.g. qwen2moe's ffn_gate_inp_shexp; the
    loader treats them as the same shape) loads and gives the same logits
    as the family's own f32 file, bit for bit."""
    ones = families.with_trailing_ones(model_path(fam, "f32"), str(tmp_path / "ones.gguf"))
    ids = [3 + (i * 4507) % 30000 for i in range(12)]
    want = run_spindle("logits", "-m", model_path(fam, "f32"), "--ids", " ".join(map(str, ids)), "--from", 0,
                       "--top", 8)
    got = run_spindle("logits", "-m", ones, "--ids", " ".join(map(str, ids)), "--from", 0, "--top", 8)
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert got.json()["steps"] == want.json()["steps"]


@pytest.mark.parametrize("variant", sorted(families.VARIANTS))
def test_converter_layout_variants(variant, run_spindle, tmp_path):
    """A family written in another layout its converter produces (Gemma 4's
    experts as one fused ffn_gate_up_exps stack) loads, matches llama.cpp's
    numbers for the family (its golden: same tokens, logits at every
    position within the f32 bound) and gives the family's own file's
    logits bit for bit."""
    fam = families.VARIANTS[variant][0]
    path = families.build_variant(variant, str(tmp_path))
    for p in golden(fam)["files"]["f32"]["prompts"]:
        r = run_spindle("logits", "-m", path, "-p", p["text"], "--from", 0, "--top", TOP)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.json()["tokens"] == p["tokens"]
        steps = r.json()["steps"]
        assert len(steps) == len(p["top10"])
        errors = [e for e in (_position_error("f32", i, st["top"], g)[0]
                              for i, (st, g) in enumerate(zip(steps, p["top10"]))) if e]
        assert not errors, "%s: %s" % (p["name"], "; ".join(errors[:5]))
        own = run_spindle("logits", "-m", model_path(fam, "f32"), "-p", p["text"], "--from", 0, "--top", TOP)
        assert own.returncode == 0 and own.json()["steps"] == steps, p["name"]


def _deepseek2_variant(tmp_path, name, **change):
    spec = dict(families.FAMILIES["deepseek2"], **change)
    b = families.Builder(name, spec, seed=spec["seed"])
    b.build()
    path = str(tmp_path / (name + ".gguf"))
    b.write(path, "f32")
    return path


def test_deepseek2_layouts(run_spindle, tmp_path):
    """DeepSeek V2-Lite's layout (one attn_q, no query LoRA; softmax
    gating, no groups, two shared experts) loads and says so; a gating
    function other than softmax (1) and sigmoid (2), and expert groups that
    do not hold the used experts, are refused naming the key (exit 2)."""
    lite = _deepseek2_variant(tmp_path, "lite", mla=(0, 128, 64, 32, 64), ds_moe=(1, 1, 2, 1.0, 1, 1))
    r = run_spindle("info", "-m", lite)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("features:"))
    assert "heads 96/64 wide)" in line and "softmax router" in line and "expert groups" not in line, line
    for name, change, key in (("gating", dict(ds_moe=(4, 2, 1, 2.5, 3, 1)), "deepseek2.expert_gating_func"),
                              ("groups", dict(ds_moe=(4, 1, 1, 2.5, 2, 1), experts=(8, 4, 128)),
                               "deepseek2.expert_group_count")):
        r = run_spindle("info", "-m", _deepseek2_variant(tmp_path, name, **change))
        assert r.returncode == 2 and key in r.stderr, (name, r.returncode, r.stderr)


def test_gemma3n_refusals(run_spindle, tmp_path):
    """Gemma 3n shares KV from layer 20 on (llama.cpp's fixed start): a
    3-layer file without sharing loads, one whose shared_kv_layers says
    otherwise is refused naming the key, and so are more AltUp streams than
    spindle holds (exit 2)."""
    def variant(name, **change):
        spec = dict(families.FAMILIES["gemma3n"], n_layer=3, **change)
        b = families.Builder(name, spec, seed=spec["seed"])
        b.build()
        path = str(tmp_path / (name + ".gguf"))
        b.write(path, "f32")
        return path

    r = run_spindle("info", "-m", variant("plain", shared_kv=0))
    assert r.returncode == 0, r.stderr
    assert "shared KV" not in r.stdout and "AltUp (4 streams" in r.stdout, r.stdout
    for name, change, key in (("shared", dict(shared_kv=1), "gemma3n.attention.shared_kv_layers"),
                              ("streams", dict(shared_kv=0, altup=9), "gemma3n.altup_num_inputs")):
        r = run_spindle("info", "-m", variant(name, **change))
        assert r.returncode == 2 and key in r.stderr, (name, r.returncode, r.stderr)


def test_llama4_builtin_chat_format(run_spindle):
    """A Llama 4 file without a template chats in Llama 4's header format
    (llama.cpp's built-in "llama4", which renders these messages to the
    text below after the BOS its tokenizer adds): the chat prompt's tokens
    are those of that text, and its greedy first token is the text's."""
    path = model_path("llama4", "f32")
    text = ("<|endoftext|><|header_start|>system<|header_end|>\n\nBe brief.<|eot|><|header_start|>user<|header_end|>"
            "\n\nHello there<|eot|><|header_start|>assistant<|header_end|>\n\n")
    tok = run_spindle("tokenize", "-m", path, "--no-bos", "--special", text)
    assert tok.returncode == 0, tok.stderr
    ids = tok.stdout.split()
    want = run_spindle("logits", "-m", path, "--ids", " ".join(ids), "--top", 1)
    got = run_spindle("run", "-m", path, "--chat", "--system", "Be brief.", "-p", "  Hello there ", "-n", 1, "--temp", 0,
                      "--json")
    assert want.returncode == 0 and got.returncode == 0, want.stderr + got.stderr
    assert got.json()["usage"]["prompt_tokens"] == len(ids)
    assert got.json()["tokens"][0]["id"] == want.json()["top"][0][0]


def _quantize_cases():
    for f in FAMILIES:
        for t in sorted(golden(f).get("quantize", {})):
            yield pytest.param(f, None, t, id="%s-%s" % (f, t))
        for v, doc in sorted(golden(f).get("variants", {}).items()):
            for t in sorted(doc.get("quantize", {})):
                yield pytest.param(f, v, t, id="%s-%s" % (v, t))


@pytest.mark.parametrize("fam,variant,ftype", list(_quantize_cases()))
def test_quantize_matches_llama_cpp(fam, variant, ftype, run_spindle, tmp_path):
    """`spindle quantize` of the family's f32 copy (or a variant's) gives
    every tensor llama.cpp's type and writes llama.cpp's file byte for byte
    (gpt-oss's MXFP4_MOE: experts MXFP4, every other matrix Q8_0;
    deepseek2's Q4_K_M and Q8_0: attn_k_b, attn_v_b, attn_kv_a_mqa and the
    multi-token-prediction layer's tensors under the general rules, the
    latent norms F32)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
    import quantmodel
    want = golden(fam)["quantize"][ftype] if variant is None else golden(fam)["variants"][variant]["quantize"][ftype]
    src = model_path(fam, "f32") if variant is None else families.build_variant(variant, str(tmp_path))
    out = str(tmp_path / "q.gguf")
    r = run_spindle("quantize", "-t", "2", src, out, ftype)
    assert r.returncode == 0, r.stderr[-2000:]
    _, tensors = quantmodel.read_gguf(out)
    got = {n: quantmodel.TYPE_NAME[t["type"]] for n, t in sorted(tensors.items())}
    assert got == want["types"], {n: (got.get(n), want["types"].get(n)) for n in set(got) | set(want["types"])
                                  if got.get(n) != want["types"].get(n)}
    assert families.sha256_file(out) == want["sha256"]
