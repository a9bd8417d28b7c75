"""`spindle serve --models-dir`: one server for every GGUF file of a
directory, each model loaded on the first request that names it, at most
--models-max loaded, the least recently used idle one unloaded first
(server/router.c)."""
import datetime
import json
import os
import re
import socket
import threading

import httpx
import pytest

from server_util import Server, assert_openai_error, wait_for

# the same for the one-model servers that give the expected answers
FLAGS = ("--ctx", "512", "--parallel", "2")
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
MAX_TOKENS = 12


def complete(server, model, prompt):
    r = server.post("/v1/completions",
                    {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == model, body
    return body["choices"][0]["text"]


@pytest.fixture(scope="module")
def expected(spindle_bin, smollm2_path, gemma3_path):
    """Each model's greedy answers from a server of that model alone."""
    out = {}
    for key, path in (("smollm2", smollm2_path), ("gemma3", gemma3_path)):
        s = Server(spindle_bin, path, *FLAGS)
        try:
            out[key] = {p: complete(s, s.model_id, p) for p in PROMPTS}
        finally:
            s.stop()
    assert out["smollm2"] != out["gemma3"]  # so a request answered by the wrong model shows
    return out


@pytest.fixture
def models_dir(tmp_path, smollm2_path, gemma3_path):
    """Three models: SmolLM2, Gemma 3, and SmolLM2 again under another name."""
    d = tmp_path / "models"
    d.mkdir()
    os.symlink(smollm2_path, d / "smollm2.gguf")
    os.symlink(gemma3_path, d / "gemma3.gguf")
    os.symlink(smollm2_path, d / "smol-copy.gguf")
    return d


# which one-model server's answers each model of models_dir gives
SOURCE = {"smollm2": "smollm2", "gemma3": "gemma3", "smol-copy": "smollm2"}


def listed(server):
    r = server.get("/v1/models")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list"
    return {m["id"]: m for m in body["data"]}


def serve_dir(spindle_bin, d, *args):
    return Server(spindle_bin, None, "--models-dir", str(d), *FLAGS, *args)


def test_three_models_two_loaded(spindle_bin, models_dir, expected):
    s = serve_dir(spindle_bin, models_dir, "--models-max", "2")
    try:
        models = listed(s)
        assert sorted(models) == sorted(SOURCE)
        assert all(m["status"] == {"value": "unloaded"} for m in models.values()), models
        tags = s.get("/api/tags").json()["models"]
        assert sorted(t["name"] for t in tags) == sorted(SOURCE)

        # every model at once, two prompts each: the third model waits for
        # one of the first two to be idle, which is then unloaded
        answers, errors = {}, []

        def ask(model, prompt):
            try:
                answers[(model, prompt)] = complete(s, model, prompt)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=ask, args=(m, p)) for m in SOURCE for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for (model, prompt), text in answers.items():
            assert text == expected[SOURCE[model]][prompt], (model, prompt)
        assert len(answers) == len(SOURCE) * len(PROMPTS)

        # round robin over three models in two places: every request after
        # the second loads its model again
        order = ["gemma3", "smollm2", "smol-copy"] * 2
        for model in order:
            assert complete(s, model, PROMPTS[0]) == expected[SOURCE[model]][PROMPTS[0]], model

        models = listed(s)
        loaded = sorted(m for m, e in models.items() if e["status"]["value"] == "loaded")
        assert loaded == sorted(order[-2:])
        assert all(models[m]["context_length"] == 512 for m in loaded)
        assert sorted(m["name"] for m in s.get("/api/ps").json()["models"]) == loaded
        log = s.log_text()
        for model in SOURCE:
            assert len(re.findall(r"loaded model '%s' in [0-9.]+ s" % re.escape(model), log)) >= 2, log
        assert "least recently used; --models-max 2" in log
    finally:
        assert s.stop() == 0


def test_routes_by_model_name(spindle_bin, models_dir, expected):
    s = serve_dir(spindle_bin, models_dir, "--models-max", "1")
    try:
        err = assert_openai_error(s.post("/v1/completions", {"model": "nope", "prompt": "x"}), 404, "model")
        assert err["code"] == "model_not_found"
        err = assert_openai_error(s.post("/v1/completions", {"prompt": "x"}), 400, "model")
        assert "GET /v1/models" in err["message"]
        assert_openai_error(s.get("/v1/models/nope"), 404, "model")
        # Ollama's clients add ":latest"
        r = s.post("/api/generate", {"model": "gemma3:latest", "prompt": "Hi", "stream": False,
                                     "options": {"num_predict": 4, "temperature": 0}})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "gemma3"
        one = s.get("/v1/models/gemma3").json()
        assert one["id"] == "gemma3" and one["status"] == {"value": "loaded"}, one
        r = s.post("/tokenize", {"model": "smollm2", "content": "Hello"})
        assert r.status_code == 200 and r.json()["tokens"], r.text
        r = s.post("/v1/chat/completions", {"model": "smol-copy", "max_tokens": 4, "temperature": 0,
                                            "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200 and r.json()["model"] == "smol-copy", r.text
    finally:
        assert s.stop() == 0


def test_deleted_model_disappears(spindle_bin, models_dir, smollm2_path, expected):
    s = serve_dir(spindle_bin, models_dir)
    try:
        assert complete(s, "smol-copy", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        os.unlink(models_dir / "smol-copy.gguf")
        assert sorted(listed(s)) == ["gemma3", "smollm2"]
        err = assert_openai_error(s.post("/v1/completions", {"model": "smol-copy", "prompt": "x"}), 404)
        assert err["code"] == "model_not_found"
        assert "unloaded model 'smol-copy' (its file is gone)" in s.log_text()
        # a file added later is served too
        os.symlink(smollm2_path, models_dir / "late.gguf")
        assert "late" in listed(s)
        assert complete(s, "late", PROMPTS[1]) == expected["smollm2"][PROMPTS[1]]
    finally:
        assert s.stop() == 0


def test_bad_file_listed_with_its_error(spindle_bin, models_dir, smollm2_path, expected):
    (models_dir / "garbage.gguf").write_bytes(b"this is not a model\n" * 100)
    with open(smollm2_path, "rb") as f:
        (models_dir / "cut.gguf").write_bytes(f.read(1 << 16))
    s = serve_dir(spindle_bin, models_dir, "--models-max", "2")
    try:
        for name, words in (("garbage", "not a GGUF file"), ("cut", "cut.gguf")):
            err = assert_openai_error(s.post("/v1/completions", {"model": name, "prompt": "x"}), 500, "model")
            assert err["code"] == "model_load_failed" and words in err["message"], err
            entry = listed(s)[name]
            assert entry["status"]["value"] == "unloaded" and entry["status"]["failed"] is True, entry
            assert entry["status"]["error"] and "\n" not in entry["status"]["error"], entry
            assert entry["status"]["error"] in err["message"]
        # the others serve, and the bad files hold no place among the two loaded
        for model in ("smollm2", "gemma3"):
            assert complete(s, model, PROMPTS[0]) == expected[SOURCE[model]][PROMPTS[0]]
        assert "unloaded model" not in s.log_text()
        # a file that is fixed loads
        os.unlink(models_dir / "garbage.gguf")
        os.symlink(smollm2_path, models_dir / "garbage.gguf")
        assert complete(s, "garbage", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        assert "failed" not in listed(s)["garbage"]["status"]
    finally:
        assert s.stop() == 0


def loaded(server):
    """The loaded models, as /api/ps lists them ({name: entry})."""
    r = server.get("/api/ps")
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["models"]}


def generate(server, model, **extra):
    body = {"model": model, "prompt": "Hi", "stream": False, "options": {"num_predict": 2, "temperature": 0}}
    body.update(extra)
    r = server.post("/api/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_keep_alive_unloads_idle_models(spindle_bin, models_dir):
    """--keep-alive 1s unloads a model a second after its last request; a
    request's keep_alive sets its model's own (-1: forever, "1h"); keep_alive
    0 with no prompt unloads at once, and no prompt only loads."""
    s = serve_dir(spindle_bin, models_dir, "--keep-alive", "1s")
    try:
        generate(s, "gemma3", keep_alive=-1)
        generate(s, "smollm2")
        wait_for(lambda: sorted(loaded(s)) == ["gemma3"], timeout=30, what="smollm2 unloaded for idleness")
        assert "unloaded model 'smollm2' (idle for its keep-alive of 1 s)" in s.log_text()
        assert listed(s)["smollm2"]["status"] == {"value": "unloaded"}
        assert loaded(s)["gemma3"]["expires_at"].startswith("2318"), loaded(s)
        # a per-request keep_alive replaces the server's for that model
        generate(s, "smol-copy", keep_alive="1h")
        ps = loaded(s)
        assert sorted(ps) == ["gemma3", "smol-copy"], ps
        at = datetime.datetime.fromisoformat(ps["smol-copy"]["expires_at"][:26] + "+00:00")
        left = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        assert 3000 < left <= 3600, ps
        # a request with no prompt only loads (Ollama's preload) ...
        r = s.post("/api/generate", {"model": "smollm2", "keep_alive": "1h"})
        assert r.status_code == 200 and r.json()["done_reason"] == "load" and r.json()["response"] == "", r.text
        assert "smollm2" in loaded(s)
        # ... and with keep_alive 0 unloads at once (chat: no messages)
        r = s.post("/api/chat", {"model": "gemma3:latest", "messages": [], "keep_alive": 0})
        assert r.status_code == 200, r.text
        assert r.json()["done_reason"] == "unload" and r.json()["message"]["content"] == "", r.text
        r = s.post("/api/generate", {"model": "smol-copy", "keep_alive": "0s"})
        assert r.status_code == 200 and r.json()["done_reason"] == "unload", r.text
        assert sorted(loaded(s)) == ["smollm2"]
        # keep_alive 0 on a request with a prompt: unloaded once it is answered
        generate(s, "gemma3", keep_alive=0)
        wait_for(lambda: "gemma3" not in loaded(s), timeout=30, what="gemma3 unloaded after its request")
        # Ollama's forms: a Go duration, seconds as a string or a number, negative: forever
        for ka, hours in (("1h30m", 1.5), ("5400", 1.5), (5400.0, 1.5), ("90m0.5s", 1.5), ("-1m", None)):
            generate(s, "smollm2", keep_alive=ka)
            at = loaded(s)["smollm2"]["expires_at"]
            if hours is None:
                assert at.startswith("2318"), (ka, at)
            else:
                left = (datetime.datetime.fromisoformat(at[:26] + "+00:00") -
                        datetime.datetime.now(datetime.timezone.utc)).total_seconds()
                assert 5000 < left <= 5401, (ka, at)
        # bad values: Ollama's error shape
        for bad in ("soon", "5 m", "1h-5m", "", "m", True, [1], {"s": 1}):
            r = s.post("/api/generate", {"model": "smollm2", "prompt": "Hi", "keep_alive": bad})
            assert r.status_code == 400 and "keep_alive" in r.json()["error"], (bad, r.text)
        r = s.post("/api/generate", {"model": "nope", "keep_alive": 0})
        assert r.status_code == 404 and "nope" in r.json()["error"], r.text
    finally:
        assert s.stop() == 0


def test_keep_alive_zero_unloads_after_each_request(spindle_bin, models_dir, expected):
    s = serve_dir(spindle_bin, models_dir, "--keep-alive", "0")
    try:
        assert complete(s, "smollm2", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        wait_for(lambda: loaded(s) == {}, timeout=30, what="smollm2 unloaded after its request")
        assert "unloaded model 'smollm2' (idle for its keep-alive of 0 s)" in s.log_text()
    finally:
        assert s.stop() == 0


def test_memory_budget(spindle_bin, models_dir, smollm2_path, expected):
    """--memory-budget 250M (with FLAGS: SmolLM2 holds about 132 MiB,
    Gemma 3 about 290 MiB, its file 241 MiB): one SmolLM2 fits, two do not,
    so loading the second unloads the first; Gemma 3 loads once, is
    measured, and is refused (507) from then on."""
    s = serve_dir(spindle_bin, models_dir, "--memory-budget", "250M")
    try:
        assert complete(s, "smollm2", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        ps = loaded(s)
        assert list(ps) == ["smollm2"] and ps["smollm2"]["size"] > os.path.getsize(smollm2_path), ps
        assert complete(s, "smol-copy", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        assert list(loaded(s)) == ["smol-copy"]
        assert "unloaded model 'smollm2' (least recently used; --memory-budget 250.0 MiB)" in s.log_text()
        # both at once: one waits for the other to be done
        answers, errors = {}, []

        def ask(model):
            try:
                answers[model] = complete(s, model, PROMPTS[1])
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=ask, args=(m,)) for m in ("smollm2", "smol-copy")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert answers == {m: expected["smollm2"][PROMPTS[1]] for m in ("smollm2", "smol-copy")}
        assert len(loaded(s)) == 1
        for _ in range(2):
            err = assert_openai_error(s.post("/v1/completions", {"model": "gemma3", "prompt": "x"}), 507, "model")
            assert err["code"] == "model_too_large", err
            assert re.search(r"needs 2[0-9][0-9]\.[0-9] MiB of memory .*more than --memory-budget 250\.0 MiB",
                             err["message"]), err
        entry = listed(s)["gemma3"]
        assert entry["status"]["failed"] is True and "--memory-budget" in entry["status"]["error"], entry
        assert s.log_text().count("loading model 'gemma3'") == 1
        assert complete(s, "smollm2", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
    finally:
        assert s.stop() == 0


def test_waiter_that_hangs_up_leaves(spindle_bin, models_dir, expected):
    """--models-max 1: while a stream holds SmolLM2, a request for Gemma 3
    waits for room; its client hangs up, and it leaves the wait (logged,
    counted as cancelled): Gemma 3 is never loaded."""
    s = serve_dir(spindle_bin, models_dir, "--models-max", "1")
    try:
        body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 480, "ignore_eos": True,
                "temperature": 0, "stream": True}
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=300) as holder:
            assert holder.status_code == 200
            lines = holder.iter_lines()  # kept: dropping it closes the stream
            next(lines)  # SmolLM2 is loaded and held
            waiter = socket.create_connection(("127.0.0.1", s.port))
            req = json.dumps({"model": "gemma3", "prompt": "Hi", "max_tokens": 4}).encode()
            waiter.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(req), req))
            wait_for(lambda: s.metrics()["spindle_requests_waiting_for_model"] == 1, timeout=30,
                     what="the request for gemma3 to wait")
            waiter.close()
            wait_for(lambda: "a request waiting for model 'gemma3' is cancelled: its client hung up" in s.log_text(),
                     timeout=30, what="the waiter to leave")
            m = s.metrics()
            assert m["spindle_requests_waiting_for_model"] == 0
            assert m['spindle_requests_unanswered_total{outcome="cancelled"}'] == 1, m
            del lines
        # the holder is gone too: SmolLM2 serves on, and nobody loaded Gemma 3
        assert complete(s, "smollm2", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        assert listed(s)["gemma3"]["status"] == {"value": "unloaded"}
        assert "loading model 'gemma3'" not in s.log_text()
    finally:
        assert s.stop() == 0


def test_metrics_per_model_and_health(spindle_bin, models_dir, smollm2_path, expected):
    """With several models, each engine's gauges and counters carry
    model="NAME" (escaped), a model's lines leave with it, the process's
    resident memory is one line; /health is 503 once no model can be served."""
    os.symlink(smollm2_path, models_dir / 'q"uote.gguf')
    s = serve_dir(spindle_bin, models_dir, "--models-max", "2")
    try:
        m = s.metrics()
        assert not [k for k in m if k.startswith("spindle_kv_blocks_total")], m
        assert m["spindle_memory_resident_bytes"] > 0
        for model in ("gemma3", 'q"uote'):
            r = s.post("/v1/completions", {"model": model, "prompt": PROMPTS[0], "max_tokens": 3, "temperature": 0})
            assert r.status_code == 200, r.text
        m = s.metrics()
        for name in ("spindle_kv_blocks_total", "spindle_memory_weights_bytes", "spindle_requests_running",
                     "spindle_prefix_cache_hits_total", "spindle_spec_drafted_tokens_total"):
            assert name not in m, name  # no unlabelled line beside the models'
            assert name + '{model="gemma3"}' in m and name + '{model="q\\"uote"}' in m, (name, m)
        assert m['spindle_memory_weights_bytes{model="gemma3"}'] > m['spindle_memory_weights_bytes{model="q\\"uote"}']
        assert m['spindle_kv_blocks_total{model="gemma3"}'] > 0
        assert s.get("/health").status_code == 200
        # gemma3 unloaded: its lines go
        r = s.post("/api/generate", {"model": "gemma3", "keep_alive": 0})
        assert r.status_code == 200 and r.json()["done_reason"] == "unload", r.text
        m = s.metrics()
        assert 'spindle_kv_blocks_total{model="gemma3"}' not in m and 'spindle_kv_blocks_total{model="q\\"uote"}' in m
        # no file left that loads: /health 503
        for f in models_dir.iterdir():
            f.unlink()
        (models_dir / "bad.gguf").write_bytes(b"not a model")
        assert s.get("/health").status_code == 200  # not tried yet
        assert s.post("/v1/completions", {"model": "bad", "prompt": "x"}).status_code == 500
        r = s.get("/health")
        assert r.status_code == 503 and r.json() == {"status": "no_model"}, r.text
        os.symlink(smollm2_path, models_dir / "smollm2.gguf")
        assert s.get("/health").status_code == 200
    finally:
        assert s.stop() == 0


def test_serves_the_store_without_m(spindle_bin, run_spindle, tmp_path, smollm2_path, expected):
    """No -m and no --models-dir: the models of `spindle pull`'s store, under
    their full names (a store written here as pull writes it)."""
    root = tmp_path / "store"
    d = root / "hf.co" / "test-org" / "SmolLM2-GGUF" / "Q4_1"
    d.mkdir(parents=True)
    os.symlink(smollm2_path, d / "smol.gguf")
    files = [{"name": "smol.gguf", "hub_path": "smol.gguf", "size": os.path.getsize(smollm2_path),
              "sha256": "0" * 64}]
    (d / "manifest.json").write_text(json.dumps({
        "name": "test-org/SmolLM2-GGUF:Q4_1", "repo": "test-org/SmolLM2-GGUF", "quant": "Q4_1",
        "source": "test", "revision": "main", "files": files, "pulled": "2026-01-01T00:00:00Z"}))
    env = dict(os.environ, SPINDLE_MODELS=str(root))
    name = "test-org/SmolLM2-GGUF:Q4_1"
    s = Server(spindle_bin, None, *FLAGS, env=env)
    try:
        assert sorted(listed(s)) == [name]
        assert complete(s, name, PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        r = run_spindle("rm", name, env=env)
        assert r.returncode == 0, r
        assert listed(s) == {}
        assert_openai_error(s.post("/v1/completions", {"model": name, "prompt": "x"}), 404, "model")
    finally:
        assert s.stop() == 0


def test_models_dir_flags(run_spindle, models_dir, smollm2_path, tmp_path):
    cases = [
        (["--models-dir", str(tmp_path / "none")], "is not a directory"),
        (["--models-dir", str(models_dir), "-m", smollm2_path], "not both"),
        (["--models-dir", str(models_dir), "--alias", "x"], "--alias"),
        (["--alias", "x"], "--alias"),
        (["-m", smollm2_path, "--models-max", "2"], "--models-max goes with --models-dir"),
        (["--models-dir", str(models_dir), "--models-max", "0"], "--models-max wants"),
        (["-m", smollm2_path, "--keep-alive", "5m"], "--keep-alive goes with --models-dir"),
        (["--models-dir", str(models_dir), "--keep-alive", "5 minutes"], "--keep-alive wants"),
        (["--models-dir", str(models_dir), "--keep-alive", "1x"], "--keep-alive wants"),
        (["-m", smollm2_path, "--memory-budget", "8G"], "--memory-budget goes with --models-dir"),
        (["--models-dir", str(models_dir), "--memory-budget", "8X"], "--memory-budget wants"),
        (["--models-dir", str(models_dir), "--memory-budget", "0"], "--memory-budget wants"),
    ]
    for args, words in cases:
        r = run_spindle("serve", "--port", "0", *args)
        assert r.returncode == 2, (args, r)
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_models_share_one_compute_pool(spindle_bin, models_dir, expected):
    """Every loaded model computes on the same --threads threads (their
    forward passes take turns): a second loaded model adds its scheduler's
    thread, not another pool of workers."""
    s = serve_dir(spindle_bin, models_dir, "--threads", "4", "--models-max", "3")

    def workers():  # the compute pool's threads beside the caller (named sp-compute)
        names = []
        for t in os.listdir("/proc/%d/task" % s.proc.pid):
            try:
                with open("/proc/%d/task/%s/comm" % (s.proc.pid, t)) as f:
                    names.append(f.read().strip())
            except FileNotFoundError:  # a connection's thread that just ended
                pass
        return names.count("sp-compute")
    try:
        assert complete(s, "smollm2", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        assert workers() == 3
        assert complete(s, "smol-copy", PROMPTS[0]) == expected["smollm2"][PROMPTS[0]]
        assert workers() == 3  # with a pool per model: 6
        # both models at once, answers as from servers of their own
        out = {}
        ts = [threading.Thread(target=lambda m=m, p=p: out.__setitem__((m, p), complete(s, m, p)))
              for m in ("smollm2", "smol-copy") for p in PROMPTS]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert out == {(m, p): expected["smollm2"][p] for m in ("smollm2", "smol-copy") for p in PROMPTS}
    finally:
        s.stop()
