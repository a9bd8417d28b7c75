"""`spindle serve` against hostile or broken clients, beyond
test_server_failures.py: a client hanging up at every phase of a request
(while sending headers, while sending the body, during prefill, while a
non-streaming answer is being generated, mid-stream), a reader that takes
one byte a second, and a request body trickled in a byte at a time.  After
each, the server must keep serving, hold no KV blocks, and never answer 5xx.

One server serves the module (starting one per test is slow under the
sanitizers); every test first checks it is idle, so leftovers from the
previous test show up as a failure there."""
import socket
import threading
import time

import httpx
import pytest

import server_util
from server_util import Server

CTX = 2048


def wait_for(pred, timeout=300, what="condition"):
    # generous default: these tests also run against the sanitizer builds
    return server_util.wait_for(pred, timeout=timeout, what=what, interval=0.02)


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", CTX, "--parallel", "4")
    # /health answers 503 while the model loads (more polls under the
    # sanitizers): those are the only 5xx allowed.
    s.startup_5xx = five_xx(s.metrics())
    yield s
    s.kill()


def five_xx(m):
    return {k: v for k, v in m.items() if k.startswith('spindle_requests_total{status="5')}


def assert_idle_and_serving(server):
    """No request left running or queued, no KV block held, no 5xx so far,
    and a fresh request is answered."""
    wait_for(lambda: (lambda m: m["spindle_requests_running"] == 0
                      and m["spindle_requests_queued"] == 0)(server.metrics()), what="idle")
    m = wait_for(lambda: (lambda m: m if m["spindle_kv_blocks_used"] == 0 else None)(
        server.metrics()), what="KV blocks freed")
    assert five_xx(m) == server.startup_5xx, (five_xx(m), server.startup_5xx)
    r = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0},
                    timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    assert server.proc.poll() is None, server.log_text()[-2000:]
    return m


def raw_request(path, body, content_length=None):
    """The bytes of a POST with a JSON body (Content-Length may lie)."""
    n = len(body) if content_length is None else content_length
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (path.encode(), n)) + body


def long_prompt(server, n_tokens):
    words = "The old lighthouse keeper counted the ships that passed each night. " * 400
    toks = server.post("/tokenize", {"content": words}).json()["tokens"]
    assert len(toks) > n_tokens
    r = server.post("/detokenize", {"tokens": toks[:n_tokens]})
    assert r.status_code == 200, r.text
    return r.json()["content"]


def test_hangup_while_sending_headers(server):
    assert_idle_and_serving(server)
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        time.sleep(0.2)
        sock.close()
    assert_idle_and_serving(server)


def test_hangup_during_request_body(server):
    base = assert_idle_and_serving(server)
    body = b'{"prompt": "Tell me a long story.", "max_tokens": 50}'
    for cut in (1, len(body) // 2, len(body) - 1):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(raw_request("/v1/completions", body)[:-(len(body) - cut)])
        time.sleep(0.3)
        sock.close()
    m = assert_idle_and_serving(server)
    # Nothing half-received was run.
    assert m["spindle_generated_tokens_total"] - base["spindle_generated_tokens_total"] <= 3


def test_hangup_during_prefill(server):
    base = assert_idle_and_serving(server)
    prompt = long_prompt(server, CTX - 200)
    body = ('{"prompt": %s, "max_tokens": 100, "ignore_eos": true, "temperature": 0}'
            % httpx.Request("POST", "http://x", json=prompt).content.decode()).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(raw_request("/v1/completions", body))
        # A ~1,850-token prefill takes seconds even unsanitized on 2 cores;
        # the scheduler only publishes its load after a step, so /metrics
        # cannot show the prefill while it runs: hang up half a second in.
        time.sleep(0.5)
        m = server.metrics()
    finally:
        sock.close()
    assert m["spindle_generated_tokens_total"] - base["spindle_generated_tokens_total"] <= 3, \
        "prefill already over"
    m = assert_idle_and_serving(server)
    # The 100 tokens were never all generated: the request was cancelled.
    assert m["spindle_generated_tokens_total"] - base["spindle_generated_tokens_total"] < 100


def test_hangup_during_non_streaming_generation(server):
    base = assert_idle_and_serving(server)
    body = b'{"prompt": "Write a story.", "max_tokens": 1500, "ignore_eos": true, "temperature": 0}'
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(raw_request("/v1/completions", body))
        wait_for(lambda: server.metrics()["spindle_generated_tokens_total"]
                 > base["spindle_generated_tokens_total"] + 5, timeout=300, what="generation")
    finally:
        sock.close()
    m = assert_idle_and_serving(server)
    assert m["spindle_generated_tokens_total"] - base["spindle_generated_tokens_total"] < 1500


@pytest.mark.parametrize("chat", [False, True])
def test_hangup_mid_stream(server, chat):
    base = assert_idle_and_serving(server)
    if chat:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "Write a long story."}]}
    else:
        path = "/v1/completions"
        body = {"prompt": "Write a long story."}
    body.update({"max_tokens": 1500, "ignore_eos": True, "stream": True, "n": 2})
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(raw_request(path, httpx.Request("POST", "http://x", json=body).content))
        got = b""
        while got.count(b"data: ") < 4:
            chunk = sock.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    finally:
        sock.close()
    m = assert_idle_and_serving(server)
    assert m["spindle_generated_tokens_total"] - base["spindle_generated_tokens_total"] < 3000


def timed_requests(server, n):
    """n short requests one after another; returns the slowest one's seconds."""
    worst = 0.0
    for i in range(n):
        t0 = time.monotonic()
        r = server.post("/v1/completions", {"prompt": "Count: %d" % i, "max_tokens": 4,
                                            "temperature": 0}, timeout=120)
        worst = max(worst, time.monotonic() - t0)
        assert r.status_code == 200, r.text
    return worst


def test_slow_reader_does_not_block_others(server):
    assert_idle_and_serving(server)
    baseline = timed_requests(server, 2)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = {"prompt": "Write a very long story.", "max_tokens": 1000, "ignore_eos": True,
            "stream": True, "temperature": 0}
    sock.sendall(raw_request("/v1/completions", httpx.Request("POST", "http://x", json=body).content))
    stop = threading.Event()
    got = []

    def read_slowly():  # one byte a second
        while not stop.is_set():
            b = sock.recv(1)
            if not b:
                break
            got.append(b)
            stop.wait(1.0)

    t = threading.Thread(target=read_slowly)
    t.start()
    try:
        # Let the slow stream fill every buffer between the engine and the reader.
        wait_for(lambda: server.metrics()["spindle_generated_tokens_total"] > 0, what="tokens")
        time.sleep(5)
        worst = timed_requests(server, 4)
        # Others are served about as fast as with nobody reading slowly.
        assert worst < max(10.0, 5 * baseline), (worst, baseline)
        data = b"".join(got)
        assert len(data) >= 3
        assert data[:12] == b"HTTP/1.1 200"[:len(data)], data
    finally:
        stop.set()
        t.join(timeout=10)
        sock.close()
    assert_idle_and_serving(server)


def test_trickled_body_does_not_block_others(server):
    assert_idle_and_serving(server)
    baseline = timed_requests(server, 2)
    body = b'{"prompt": "Hi there", "max_tokens": 4, "temperature": 0}'
    sock = socket.create_connection(("127.0.0.1", server.port))
    req = raw_request("/v1/completions", body)
    head = len(req) - len(body)
    sock.sendall(req[:head])
    result = {}

    def trickle():  # the body one byte every 0.2 s
        for i in range(len(body)):
            sock.sendall(body[i:i + 1])
            time.sleep(0.2)
        resp = b""
        while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            resp += chunk
        result["resp"] = resp

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(1)
        worst = timed_requests(server, 4)
        assert worst < max(10.0, 5 * baseline), (worst, baseline)
        assert t.is_alive(), "the body was meant to be still trickling"
        t.join(timeout=120)
        assert not t.is_alive()
    finally:
        sock.close()
    resp = result["resp"]
    assert resp.startswith(b"HTTP/1.1 200"), resp[:300]
    assert b'"completion_tokens"' in resp
    assert_idle_and_serving(server)
