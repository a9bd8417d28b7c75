"""Speculative decoding through the CLI and the server: greedy output is
identical token for token with and without drafts, on SmolLM2 and Gemma 3
and for every draft source (prompt lookup, a draft model, the model's own
first layers), with the logprobs of every step bit-identical too (the KV
cache after rejected drafts is the one plain decoding has); sampling with
point-guess drafts gives the same tokens for the same seed under every
sampler setting; the server verifies the drafts of concurrent requests in
one step and reports drafted and accepted tokens in /metrics; bad flags
and a draft model of another vocabulary are refused with exit 2.  The
distribution test for sampled drafts and the KV-level checks are in
tests/unit/test_spec.c."""
import concurrent.futures

import pytest

from server_util import Server

# Repeats itself, so prompt lookup finds drafts; continues past the repeat,
# so some drafts are rejected.
PROMPT = ("def area(width, height):\n    return width * height\n\n"
          "def area(width, height):\n    return width * height\n\n"
          "def perimeter(width, height):\n")


def gen(run_spindle, model, *args):
    r = run_spindle("run", "-m", model, "-p", PROMPT, "-n", "48", "--json", "--logprobs", "5", *args)
    assert r.returncode == 0, r.stderr
    return r.json()


def ids(d):
    return [t["id"] for t in d["tokens"]]


def source_args(source, model):
    extra = ["--draft-model", model] if source == "draft" else []
    return ["--spec", source, "--spec-fixed", "--spec-k", "5"] + extra


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
@pytest.mark.parametrize("source", ["ngram", "draft", "self"])
def test_greedy_identical_with_every_source(run_spindle, smollm2_path, gemma3_path, model, source):
    path = smollm2_path if model == "smollm2" else gemma3_path
    plain = gen(run_spindle, path, "--temp", "0")
    spec = gen(run_spindle, path, "--temp", "0", *source_args(source, path))
    assert ids(spec) == ids(plain)
    assert spec["text"] == plain["text"]
    # every step's logprobs bit-identical: the logits after rejected drafts
    # were rolled back are those of plain decoding
    assert [(t["logprob"], t["top_logprobs"]) for t in spec["tokens"]] == \
           [(t["logprob"], t["top_logprobs"]) for t in plain["tokens"]]
    s = spec["speculative"]
    assert s["source"] == source and s["drafted"] > 0 and 0 <= s["accepted"] <= s["drafted"]
    if source == "self":
        assert s["accepted"] < s["drafted"], s  # rejections happened and were rolled back


def test_adaptive_greedy_identical(run_spindle, smollm2_path):
    """The default (adapting k, pausing where drafts do not pay) changes
    how much is drafted, never the output."""
    plain = gen(run_spindle, smollm2_path, "--temp", "0")
    for source in ("ngram", "self"):
        spec = gen(run_spindle, smollm2_path, "--temp", "0", "--spec", source)
        assert ids(spec) == ids(plain), source


@pytest.mark.parametrize("sampling", [
    ["--temp", "0.9", "--seed", "5"],
    ["--temp", "1.2", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.05", "--seed", "11"],
    ["--temp", "0.7", "--repeat-penalty", "1.3", "--presence-penalty", "0.4", "--frequency-penalty", "0.3",
     "--typical-p", "0.95", "--seed", "3"],
    ["--temp", "1.0", "--logit-bias", "13=-inf", "--seed", "8", "--n", "3"],
])
def test_point_guesses_sample_the_same_tokens(run_spindle, smollm2_path, sampling):
    """Prompt-lookup drafts are point guesses: each is checked by drawing the
    model's own token with its own sampler, so the same seed gives the same
    tokens under any setting (penalties see the drafts before them)."""
    plain = gen(run_spindle, smollm2_path, *sampling)
    spec = gen(run_spindle, smollm2_path, *sampling, *source_args("ngram", smollm2_path))
    if "choices" in plain:
        assert [ids(c) for c in spec["choices"]] == [ids(c) for c in plain["choices"]]
    else:
        assert ids(spec) == ids(plain)
    # strong penalties keep the text from repeating: no drafts to check there
    if "--repeat-penalty" not in sampling:
        assert spec["speculative"]["drafted"] > 0


def test_sampled_model_drafts_keep_lengths_and_finish(run_spindle, smollm2_path):
    """A sampled request with model drafts (the rejection rule) keeps
    max_tokens and the stop reasons."""
    for n in (1, 7, 30):
        d = gen(run_spindle, smollm2_path, "--temp", "0.8", "--seed", "2", "-n", str(n), "--ignore-eos",
                *source_args("self", smollm2_path))
        assert len(d["tokens"]) == n and d["finish_reason"] == "length"


def test_bad_flags_exit_2(run_spindle, smollm2_path, gemma3_path):
    cases = [
        (["--spec", "bogus"], "--spec"),
        (["--spec", "draft"], "--draft-model"),
        (["--spec", "ngram", "--spec-k", "0"], "--spec-k"),
        (["--spec", "self", "--spec-layers", "30"], "spec-layers"),
        (["--spec", "draft", "--draft-model", gemma3_path], "vocabulary"),
        (["--spec", "draft", "--draft-model", "/nonexistent.gguf"], "nonexistent"),
    ]
    for args, word in cases:
        r = run_spindle("run", "-m", smollm2_path, "-p", "hi", "-n", "2", *args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and word in lines[0], (args, r.stderr)


def test_serve_refuses_a_draft_model_of_another_vocabulary(spindle_bin, smollm2_path, gemma3_path):
    import subprocess
    r = subprocess.run([spindle_bin, "serve", "-m", smollm2_path, "--port", "0", "--spec", "draft",
                        "--draft-model", gemma3_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert r.returncode == 2 and "vocabulary" in r.stderr, r.stderr


def test_bench_reports_drafts(run_spindle, smollm2_path):
    r = run_spindle("bench", "-m", smollm2_path, "-p", "16", "-n", "32", "-r", "1", "-B", "2", "--json",
                    "--spec", "self", "--spec-fixed", "--spec-k", "2")
    assert r.returncode == 0, r.stderr
    d = r.json()
    assert d["spec"] == "self" and d["spec_drafted"] > 0 and d["spec_accepted"] <= d["spec_drafted"]


def test_server_verifies_every_stream_in_one_step(run_spindle, spindle_bin, smollm2_path):
    """Concurrent requests on a speculating server: each one's text equals
    `spindle run` without drafts; /metrics counts the drafts."""
    prompts = [PROMPT, "one two three one two three one two", "The capital of France is",
               "a, b, c, a, b, c, a, b,"]
    ref = []
    for p in prompts:
        r = run_spindle("run", "-m", smollm2_path, "-p", p, "-n", "32", "--temp", "0", "--json")
        assert r.returncode == 0, r.stderr
        ref.append(r.json()["text"])
    s = Server(spindle_bin, smollm2_path, "--parallel", "4", "--ctx", "512", "--spec", "ngram", "--spec-fixed")
    try:
        def one(p):
            r = s.post("/v1/completions", {"model": s.model_id, "prompt": p, "max_tokens": 32, "temperature": 0})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
            got = list(ex.map(one, prompts))
        assert got == ref
        m = s.metrics()
        assert m["spindle_spec_drafted_tokens_total"] > 0
        assert 0 < m["spindle_spec_accepted_tokens_total"] <= m["spindle_spec_drafted_tokens_total"]
    finally:
        assert s.stop() == 0, s.log_text()[-2000:]
