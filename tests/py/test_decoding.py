"""Decoding strategies on SmolLM2 through `spindle run --json`: seeds,
greedy equivalences, thread-count determinism, logprobs, beams, n, stop
strings split across tokens."""
import math

import numpy as np
import pytest

PROMPT = "Once upon a time, in a small village by the sea,"


def run_json(run_spindle, model, *args):
    r = run_spindle("run", "-m", model, "-p", PROMPT, "--json", *args)
    assert r.returncode == 0, r.stderr
    return r.json()


def test_same_seed_same_text_other_seed_differs(run_spindle, smollm2_path):
    a = run_json(run_spindle, smollm2_path, "-n", "32", "--temp", "0.9", "--seed", "42")
    b = run_json(run_spindle, smollm2_path, "-n", "32", "--temp", "0.9", "--seed", "42")
    c = run_json(run_spindle, smollm2_path, "-n", "32", "--temp", "0.9", "--seed", "43")
    assert a["text"] == b["text"]
    assert [t["id"] for t in a["tokens"]] == [t["id"] for t in b["tokens"]]
    assert a["text"] != c["text"]


def test_top_k_1_equals_greedy(run_spindle, smollm2_path):
    g = run_json(run_spindle, smollm2_path, "-n", "32", "--temp", "0")
    k1 = run_json(run_spindle, smollm2_path, "-n", "32", "--temp", "1.5", "--top-k", "1", "--seed", "7")
    assert [t["id"] for t in g["tokens"]] == [t["id"] for t in k1["tokens"]]


def test_greedy_ignores_temperature_filters(run_spindle, smollm2_path):
    g = run_json(run_spindle, smollm2_path, "-n", "24", "--temp", "0")
    g2 = run_json(run_spindle, smollm2_path, "-n", "24", "--temp", "0", "--top-p", "0.1", "--min-p", "0.5")
    assert g["text"] == g2["text"]


def test_thread_count_does_not_change_greedy(run_spindle, smollm2_path):
    t1 = run_json(run_spindle, smollm2_path, "-n", "48", "--temp", "0", "-t", "1")
    t2 = run_json(run_spindle, smollm2_path, "-n", "48", "--temp", "0", "-t", "2")
    t3 = run_json(run_spindle, smollm2_path, "-n", "48", "--temp", "0", "-t", "3")
    assert t1["text"] == t2["text"] == t3["text"]


def test_logprobs_sum_to_total_and_are_consistent(run_spindle, smollm2_path):
    d = run_json(run_spindle, smollm2_path, "-n", "20", "--temp", "0", "--logprobs", "5")
    total = sum(t["logprob"] for t in d["tokens"])
    assert math.isclose(total, d["logprob"], rel_tol=1e-5, abs_tol=1e-4)
    for t in d["tokens"]:
        top = t["top_logprobs"]
        assert len(top) == 5
        assert all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(4))
        # greedy: the chosen token is the most likely one
        assert top[0]["id"] == t["id"]
        assert math.isclose(top[0]["logprob"], t["logprob"], abs_tol=1e-6)
        assert t["logprob"] <= 0.0


def test_beams_1_equals_greedy(run_spindle, smollm2_path):
    g = run_json(run_spindle, smollm2_path, "-n", "24", "--temp", "0")
    b = run_json(run_spindle, smollm2_path, "-n", "24", "--beams", "1")
    assert g["text"] == b["text"]


def teacher_forced_logprobs(run_spindle, model, prompt_ids, continuation):
    """log p(continuation[i] | prompt, continuation[:i]) for every i, from the
    full next-token logits of one teacher-forced forward pass."""
    ids = prompt_ids + continuation[:-1]
    r = run_spindle("logits", "-m", model, "--ids", " ".join(map(str, ids)),
                    "--from", str(len(prompt_ids) - 1), "--top", "0")
    assert r.returncode == 0, r.stderr
    steps = r.json()["steps"]
    assert len(steps) == len(continuation)
    out = []
    for step, tok in zip(steps, continuation):
        logits = np.array([lg for _, lg in step["top"]], dtype=np.float64)
        lse = logits.max() + math.log(np.exp(logits - logits.max()).sum())
        by_id = {i: lg for i, lg in step["top"]}
        out.append(by_id[tok] - lse)
    return out


def test_beam_search_scores_are_the_models(run_spindle, smollm2_path):
    # What beam search guarantees (it does not guarantee beating greedy: the
    # greedy prefix can be pruned): every returned beam's log-probability is
    # the sum of its tokens' log-probabilities under the model, each equal to
    # a teacher-forced forward pass over the beam's text; beams are distinct
    # and returned best first.
    b = run_json(run_spindle, smollm2_path, "-n", "16", "--beams", "4", "--n", "2", "--logprobs", "0")
    assert len(b["choices"]) == 2
    prompt_ids = run_spindle("logits", "-m", smollm2_path, "-p", PROMPT, "--top", "1").json()["tokens"]
    seen = set()
    for c in b["choices"]:
        ids = [t["id"] for t in c["tokens"]]
        assert ids and tuple(ids) not in seen
        seen.add(tuple(ids))
        assert math.isclose(sum(t["logprob"] for t in c["tokens"]), c["logprob"], abs_tol=1e-3)
        forced = teacher_forced_logprobs(run_spindle, smollm2_path, prompt_ids, ids)
        for t, want in zip(c["tokens"], forced):
            assert math.isclose(t["logprob"], want, abs_tol=2e-3), (t, want)
    a, z = b["choices"]
    if len(a["tokens"]) == len(z["tokens"]):
        assert a["logprob"] >= z["logprob"] - 1e-6


def test_n_samples_share_prompt_and_differ(run_spindle, smollm2_path):
    d = run_json(run_spindle, smollm2_path, "-n", "16", "--temp", "1.0", "--seed", "5", "--n", "3")
    texts = [c["text"] for c in d["choices"]]
    assert len(texts) == 3
    assert len(set(texts)) > 1
    assert d["usage"]["completion_tokens"] == sum(len(c["tokens"]) for c in d["choices"])


def test_stop_string_split_across_tokens(run_spindle, smollm2_path):
    full = run_json(run_spindle, smollm2_path, "-n", "40", "--temp", "0")["text"]
    # pick a stop string that spans a token boundary in the greedy text
    d = run_json(run_spindle, smollm2_path, "-n", "40", "--temp", "0")
    pieces = [t["text"] for t in d["tokens"]]
    acc, cut = "", None
    for i in range(2, len(pieces) - 1):
        acc = "".join(pieces[:i])
        if len(pieces[i]) >= 2 and len(acc) >= 2:
            stop = acc[-2:] + pieces[i][:2]
            if full.find(stop) == len(acc) - 2:
                cut = (stop, len(acc) - 2)
                break
    assert cut, "no token boundary to test in %r" % full
    stop, at = cut
    s = run_json(run_spindle, smollm2_path, "-n", "40", "--temp", "0", "--stop", stop)
    assert s["finish_reason"] == "stop"
    assert s["text"] == full[:at]
    # streaming output (plain run) holds back the partial stop and never prints it
    r = run_spindle("run", "-m", smollm2_path, "-p", PROMPT, "-n", "40", "--temp", "0", "--stop", stop)
    assert r.returncode == 0
    assert r.stdout == full[:at]
    assert "stop reason: stop" in r.stderr


def test_logit_bias_bans_greedy_token(run_spindle, smollm2_path):
    g = run_json(run_spindle, smollm2_path, "-n", "1", "--temp", "0")
    first = g["tokens"][0]["id"]
    b = run_json(run_spindle, smollm2_path, "-n", "1", "--temp", "0", "--logit-bias", "%d=-inf" % first)
    assert b["tokens"][0]["id"] != first


def test_explain_prints_stages(run_spindle, smollm2_path):
    r = run_spindle("run", "-m", smollm2_path, "-p", PROMPT, "-n", "2", "--temp", "0.7", "--top-k", "5",
                    "--explain", "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert "top-k" in r.stderr


@pytest.mark.parametrize("flag,value", [("--temp", "abc"), ("-n", "-5"), ("--top-p", "2"), ("--ctx", "1"),
                                        ("--logit-bias", "x=1"), ("--bogus", None)])
def test_bad_flags_exit_2(run_spindle, smollm2_path, flag, value):
    args = ["run", "-m", smollm2_path, "-p", "hi", flag] + ([value] if value is not None else [])
    r = run_spindle(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("spindle: ") and len(r.stderr.strip().splitlines()) == 1


def test_prompt_longer_than_context(run_spindle, smollm2_path):
    r = run_spindle("run", "-m", smollm2_path, "-p", "word " * 200, "--ctx", "64")
    assert r.returncode == 2
    assert "context" in r.stderr
