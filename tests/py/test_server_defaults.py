"""Sampling defaults of `spindle serve` (the model's general.sampling.*
recommendation, else llama-server's; the --temp/--top-k/... flags), the
`explain` request extension, and the one-line-per-request log."""
import json
import os
import sys

import pytest

from server_util import Server, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
from ggufgen import T_F32, T_U32, Model  # noqa: E402

QUESTION = [{"role": "user", "content": "Name three fruits."}]
LLAMA_SERVER = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0}


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "2", "--ctx", "1024")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def chat(server, **kw):
    body = {"messages": QUESTION, "max_tokens": 24}
    body.update(kw)
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_models_shows_llama_server_defaults(server):
    m = server.get("/v1/models").json()["data"][0]
    assert m["sampling_defaults"] == LLAMA_SERVER
    assert "sampling defaults: temperature 0.8, top_k 40" in server.log_text()


def test_unset_sampling_gets_the_defaults(server):
    # Deliberately not OpenAI's temperature 1 without truncation any more:
    # a seeded request without sampling fields equals one that spells out
    # llama-server's defaults, and differs from temperature 1, no filters.
    implicit = [chat(server, seed=s)["choices"][0]["message"]["content"] for s in range(4)]
    explicit = [chat(server, seed=s, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
                ["choices"][0]["message"]["content"] for s in range(4)]
    assert implicit == explicit
    openai = [chat(server, seed=s, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
              ["choices"][0]["message"]["content"] for s in range(4)]
    assert openai != implicit


def test_flags_and_model_metadata_set_the_defaults(spindle_bin, run_spindle, tmp_path):
    m = Model()
    m.set_kv("general.sampling.temp", T_F32, 0.5)
    m.set_kv("general.sampling.top_k", T_U32, 7)
    m.set_kv("general.sampling.top_p", T_F32, 0.9)
    path = tmp_path / "recommends.gguf"
    path.write_bytes(m.build())
    s = Server(spindle_bin, str(path), "--ctx", "128", "--min-p", "0.2")
    try:
        d = s.get("/v1/models").json()["data"][0]["sampling_defaults"]
        assert d == {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.2, "repeat_penalty": 1.0}
        assert "(3 from the model's metadata)" in s.log_text()
        # a request without sampling uses them: its explain shows the stages
        r = s.post("/v1/completions", {"prompt": "hello", "max_tokens": 2, "explain": True,
                                       "ignore_eos": True})
        stages = r.json()["choices"][0]["explain"][0]["stages"]
        assert [(st["name"], st["param"]) for st in stages][1:] == [
            ("top-k", 7), ("temperature", pytest.approx(0.5)), ("top-p", pytest.approx(0.9)),
            ("min-p", pytest.approx(0.2))]
    finally:
        assert s.stop() == 0
    # the flags win over the file; --temp 0 makes unset requests greedy
    s = Server(spindle_bin, str(path), "--ctx", "128", "--temp", "0", "--top-k", "3")
    try:
        d = s.get("/v1/models").json()["data"][0]["sampling_defaults"]
        assert d["temperature"] == 0 and d["top_k"] == 3 and d["top_p"] == 0.9
    finally:
        assert s.stop() == 0
    r = run_spindle("serve", "-m", str(path), "--top-p", "1.5")
    assert r.returncode == 2 and "--top-p" in r.stderr


def test_explain_extension(server):
    out = chat(server, explain=True, seed=3, max_tokens=8)
    ch = out["choices"][0]
    xs = ch["explain"]
    assert len(xs) == out["usage"]["completion_tokens"]
    assert "".join(x["token"]["text"] for x in xs) == ch["message"]["content"]
    for x in xs:
        names = [s["name"] for s in x["stages"]]
        assert names == ["penalties", "top-k", "temperature", "top-p", "min-p"]
        kept = [s["kept"] for s in x["stages"]]
        assert kept[0] == x["n_vocab"] and kept[1] == 40 and kept == sorted(kept, reverse=True)
        chosen = [c for c in x["candidates"] if c["id"] == x["token"]["id"]]
        assert len(chosen) == 1 and chosen[0]["removed_by"] is None and chosen[0]["p"][-1] > 0
        for c in x["candidates"]:
            assert len(c["p"]) == len(names) and 0 <= c["raw"] <= 1
            if c["removed_by"] is not None:
                i = names.index(c["removed_by"])
                assert all(p is not None for p in c["p"][:i]) and all(p is None for p in c["p"][i:])
        survivors = [c["p"][-1] for c in x["candidates"] if c["p"][-1] is not None]
        assert sum(survivors) <= 1 + 1e-5
    # greedy has its own stage; streaming carries one record per chunk
    with server.openai().chat.completions.create(messages=QUESTION, model=server.model_id,
                                                 max_tokens=4, temperature=0, stream=True,
                                                 extra_body={"explain": True}) as stream:
        recs = [ch.choices[0].model_extra.get("explain") for ch in stream if ch.choices]
    recs = [r for r in recs if r]
    assert len(recs) >= 1
    assert all(r["stages"][-1]["name"] == "greedy" and r["stages"][-1]["kept"] == 1 for r in recs)
    # without the field nothing is added
    assert "explain" not in chat(server, max_tokens=2)["choices"][0]
    r = server.post("/v1/chat/completions", {"messages": QUESTION, "explain": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "explain"


def test_request_log_lines(server, spindle_bin, smollm2_path):
    out = chat(server, max_tokens=6, temperature=0)
    # the line is written once the response is complete, which may be just
    # after the client has read it
    lines = wait_for(lambda: [ln for ln in server.log_text().splitlines()
                              if "id=" + out["id"] + " " in ln], 10, "the log line")
    assert len(lines) == 1, server.log_text()[-2000:]
    f = dict(kv.split("=", 1) for kv in lines[0].split()[2:])
    assert lines[0].startswith("spindle: request ")
    assert f["method"] == "POST" and f["path"] == "/v1/chat/completions" and f["status"] == "200"
    assert int(f["prompt_tokens"]) == out["usage"]["prompt_tokens"]
    assert int(f["completion_tokens"]) == out["usage"]["completion_tokens"]
    assert float(f["ttft_ms"]) > 0 and float(f["tokens_per_s"]) > 0
    server.get("/health")
    assert "path=/health" not in server.log_text()
    assert "request_id" not in f  # the client sent no X-Request-Id
    # the server is shared with other tests, which may have logged 400s
    # before: wait for one more
    def bad_lines():
        return [ln for ln in server.log_text().splitlines() if "path=/v1/chat/completions status=400 " in ln]
    n_before = len(bad_lines())
    r = server.post("/v1/chat/completions", {"messages": []},
                    headers={"X-Request-Id": "trace 7\"x"})
    assert r.status_code == 400
    # a balancer's trace id is logged, one token, quotes and spaces replaced
    wait_for(lambda: len(bad_lines()) > n_before, 10, "the 400")
    line = bad_lines()[n_before]
    assert line.split()[-1] == "request_id=trace?7?x", line

    s = Server(spindle_bin, smollm2_path, "--ctx", "256", "--log-format", "json")
    try:
        r = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0},
                   headers={"X-Request-Id": "lb-42"})
        rid = r.json()["id"]
        rec = wait_for(lambda: [x for x in (json.loads(ln) for ln in s.log_text().splitlines()
                                            if ln.startswith("{")) if x.get("id") == rid],
                       10, "the JSON log line")
        assert len(rec) == 1, rec
        assert rec[0]["event"] == "request" and rec[0]["status"] == 200
        assert rec[0]["completion_tokens"] == 3 and rec[0]["tokens_per_s"] > 0
        assert rec[0]["request_id"] == "lb-42"
    finally:
        assert s.stop() == 0
