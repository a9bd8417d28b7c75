"""`spindle serve` under failure: client disconnects, timeouts, a full
queue, missing API keys, and graceful shutdown.  Each test starts its own
server so one test's leftovers cannot hide another's bug."""
import socket
import threading
import time

import httpx
import openai
import pytest

from server_util import Server, assert_openai_error, sse_events, wait_for


def long_body(server, stream=True, max_tokens=2000, **kw):
    body = {"model": server.model_id, "prompt": "Write a very long story about a dragon.",
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    body.update(kw)
    return body


@pytest.fixture
def server(spindle_bin, smollm2_path, request):
    args = getattr(request, "param", ())
    kw = {}
    if "api_key" in args:
        kw["api_key"] = "s3cret"
        args = tuple(a for a in args if a != "api_key")
    s = Server(spindle_bin, smollm2_path, "--ctx", "2048", *args, **kw)
    yield s
    s.kill()


def test_disconnect_mid_stream_frees_blocks(server):
    base = server.metrics()
    blocks_free = base["spindle_kv_blocks_free"]
    with httpx.stream("POST", server.url + "/v1/completions", json=long_body(server),
                      timeout=60) as r:
        assert r.status_code == 200
        # Keep the generator referenced: dropping it would close the
        # response (and the connection) right here.
        events = sse_events(r)
        for _ in range(5):
            next(events)
        m = server.metrics()
        assert m["spindle_requests_running"] == 1, m
        assert m["spindle_kv_blocks_used"] > base["spindle_kv_blocks_used"]
    # The connection is closed: the server cancels the sequence and the
    # blocks come back.
    wait_for(lambda: server.metrics()["spindle_requests_running"] == 0, what="cancel")
    m = wait_for(lambda: (lambda m: m if m["spindle_kv_blocks_free"] >= blocks_free else None)(
        server.metrics()), what="blocks back")
    assert m["spindle_kv_blocks_used"] == base["spindle_kv_blocks_used"]
    assert m["spindle_generated_tokens_total"] < 1000  # it did not run to the end
    assert httpx.get(server.url + "/health").status_code == 200


def test_disconnect_while_queued(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "2048", "--parallel", "1")
    try:
        with httpx.stream("POST", s.url + "/v1/completions", json=long_body(s, max_tokens=300),
                          timeout=120) as r:
            assert r.status_code == 200
            # A second client waits in the queue, then hangs up.
            sock = socket.create_connection(("127.0.0.1", s.port))
            body = b'{"prompt":"queued","max_tokens":50}'
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            wait_for(lambda: s.metrics()["spindle_requests_queued"] == 1, what="queued")
            sock.close()
            wait_for(lambda: s.metrics()["spindle_requests_queued"] == 0, what="dequeued")
        wait_for(lambda: s.metrics()["spindle_requests_running"] == 0, what="idle")
        m = s.metrics()
        assert m["spindle_kv_blocks_used"] == 0
    finally:
        s.kill()


def test_request_timeout_returns_what_it_has(server):
    t0 = time.monotonic()
    r = server.post("/v1/completions", long_body(server, stream=False, timeout=1.0))
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["note"]["type"] == "timeout"
    assert 0 < body["usage"]["completion_tokens"] < 2000
    assert len(body["choices"][0]["text"]) > 0
    assert elapsed < 20

    # Streaming: the stream ends normally, with the note on the last choice chunk.
    events = []
    with httpx.stream("POST", server.url + "/v1/completions",
                      json=long_body(server, timeout=1.0), timeout=60) as r:
        assert r.status_code == 200
        events = list(sse_events(r))
    assert events[-1] == "[DONE]"
    last = events[-2]
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["note"]["type"] == "timeout"
    wait_for(lambda: server.metrics()["spindle_requests_running"] == 0, what="idle")


@pytest.mark.parametrize("server", [("--timeout", "1")], indirect=True)
def test_server_timeout_flag(server):
    # The openai client reads through a note-bearing stream without raising.
    client = server.openai()
    c = client.completions.create(model=server.model_id, prompt="Tell me a story.",
                                  max_tokens=2000, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert c.choices[0].finish_reason == "length"
    assert 0 < c.usage.completion_tokens < 2000
    chunks = list(client.completions.create(model=server.model_id, prompt="Tell me a story.",
                                            max_tokens=2000, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("server", [("--parallel", "1", "--queue", "1")], indirect=True)
def test_queue_full_gets_429(server):
    running = httpx.stream("POST", server.url + "/v1/completions", json=long_body(server),
                           timeout=60)
    r1 = running.__enter__()
    assert r1.status_code == 200
    # One more waits in the queue (a raw socket: its response never comes)...
    sock = socket.create_connection(("127.0.0.1", server.port))
    body = b'{"prompt":"queued","max_tokens":5}'
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for(lambda: server.metrics()["spindle_requests_queued"] == 1, what="queued")
    # ...and the next is refused.
    r = server.post("/v1/completions", {"prompt": "one too many", "max_tokens": 5})
    err = assert_openai_error(r, 429)
    assert err["code"] == "rate_limit_exceeded"
    assert r.headers["retry-after"] == "1"
    with pytest.raises(openai.RateLimitError):
        server.openai().completions.create(model=server.model_id, prompt="x", max_tokens=2)
    assert server.metrics()['spindle_requests_total{status="429"}'] >= 2
    running.__exit__(None, None, None)
    sock.close()
    wait_for(lambda: server.metrics()["spindle_requests_running"] == 0, what="idle")
    r = server.post("/v1/completions", {"prompt": "now it fits", "max_tokens": 3})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("server", [("api_key",)], indirect=True)
def test_api_key(server):
    assert httpx.get(server.url + "/health").status_code == 200
    for path in ("/v1/models", "/metrics"):
        assert_openai_error(httpx.get(server.url + path), 401)
        assert_openai_error(httpx.get(server.url + path,
                                      headers={"Authorization": "Bearer wrong"}), 401)
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2},
                   headers={"Authorization": "Bearer s3cret!"})
    assert_openai_error(r, 401)
    # Without the key, unknown routes and wrong methods look like every other
    # route: 401, so routes cannot be probed.
    assert_openai_error(httpx.get(server.url + "/no/such/route"), 401)
    assert_openai_error(httpx.get(server.url + "/v1/completions"), 401)
    assert_openai_error(httpx.post(server.url + "/health", json={}), 401)
    key = {"Authorization": "Bearer s3cret"}
    assert_openai_error(httpx.get(server.url + "/no/such/route", headers=key), 404)
    assert_openai_error(httpx.get(server.url + "/v1/completions", headers=key), 405)
    import openai as oa
    bad = oa.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(oa.AuthenticationError):
        bad.models.list()
    good = server.openai()
    assert good.models.list().data[0].id == server.model_id
    c = good.completions.create(model=server.model_id, prompt="Hi", max_tokens=2)
    assert c.usage.completion_tokens >= 1


def test_graceful_shutdown_finishes_streams(server):
    results = {}
    started = threading.Barrier(3)

    def client(i):
        text, finish, done = "", None, False
        # Long enough (~2 s alone) that the drain is still under way when
        # the test looks at /health, even on a loaded machine.
        with httpx.stream("POST", server.url + "/v1/completions",
                          json=long_body(server, max_tokens=300), timeout=120) as r:
            assert r.status_code == 200
            first = True
            for ev in sse_events(r):
                if first:
                    started.wait()
                    first = False
                if ev == "[DONE]":
                    done = True
                    break
                for ch in ev["choices"]:
                    text += ch["text"]
                    finish = ch["finish_reason"] or finish
        results[i] = (text, finish, done)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    started.wait(timeout=120)
    server.proc.send_signal(15)
    # New work is refused while the two streams finish.
    r = wait_for(lambda: (lambda r: r if r.status_code == 503 else None)(
        httpx.get(server.url + "/health")), what="503 health")
    assert r.json()["status"] == "draining"
    r = server.post("/v1/completions", {"prompt": "late", "max_tokens": 2})
    assert_openai_error(r, 503)
    for t in threads:
        t.join(timeout=120)
    assert server.proc.wait(timeout=60) == 0
    assert len(results) == 2
    for text, finish, done in results.values():
        assert done and finish == "length" and len(text) > 0


@pytest.mark.parametrize("server", [("--kv-mem", "1", "--parallel", "4")], indirect=True)
def test_small_kv_pool_refuses_or_queues(server):
    # A prompt that can never fit the pool is a 400 before any streaming.
    r = server.post("/v1/completions", {"prompt": "hello " * 200, "max_tokens": 4,
                                        "stream": True})
    err = assert_openai_error(r, 400, "prompt")
    assert err["code"] == "context_length_exceeded"
    # Requests that fit one at a time wait for blocks instead of failing.
    total = server.metrics()["spindle_kv_blocks_total"]
    assert total <= 4

    def one(i):
        r = server.post("/v1/completions", {"prompt": "Tell me about number %d." % i,
                                            "max_tokens": 8, "temperature": 0,
                                            "ignore_eos": True})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["completion_tokens"]

    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as ex:
        counts = list(ex.map(one, range(6)))
    assert counts == [8] * 6, counts
    wait_for(lambda: server.metrics()["spindle_kv_blocks_used"] == 0, what="blocks back")
