"""`spindle serve` at the edges a deployment meets (issue 38): HEAD health
checks, SIGHUP from a supervisor, clients without the key sending large
bodies, ambiguous request framing (request smuggling), and API keys that
stay out of `ps` (--api-key-file, SPINDLE_API_KEY)."""
import json
import os
import signal
import socket
import threading
import time

import httpx
import pytest

from server_util import Server, assert_openai_error, read_until_closed, wait_for

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", api_key=KEY)
    yield s
    s.kill()


def raw_exchange(port, data, timeout=10):
    """Sends `data` on a fresh connection and returns (status, headers, body)
    of the answer, read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        got = read_until_closed(sock)
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0] else 0
    headers = {k.strip().lower(): v.strip() for k, v in
               (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
    return status, headers, body


# ---- 1. HEAD /health ----

def test_head_health_answers_like_get_without_a_body(server):
    for path in ("/health", "/v1/health"):
        r = httpx.head(server.url + path, timeout=10)  # no key, as GET /health
        assert r.status_code == 200, (path, r.status_code)
        assert r.content == b""
        assert r.headers["content-type"] == "application/json"
        g = httpx.get(server.url + path, timeout=10)
        assert g.status_code == 200 and g.json() == {"status": "ok"}
    # Other routes still want the key for HEAD (and GET).
    assert httpx.head(server.url + "/v1/models", timeout=10).status_code == 401


# ---- 3. the key is checked before the body is read ----

def test_missing_key_is_refused_before_the_body(server):
    n = 3 << 20  # under the default --max-body, so only the key can refuse it
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % n)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + b'{"prompt": "')  # and nothing more of the body
        t0 = time.monotonic()
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = sock.recv(65536)  # times out (fails) if the server waits for the body
            assert chunk, got
            got += chunk
        assert time.monotonic() - t0 < 5
    assert got.startswith(b"HTTP/1.1 401"), got[:200]


def test_unauthenticated_bodies_do_not_grow_the_server(server):
    def rss_kib():
        with open("/proc/%d/status" % server.proc.pid) as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))

    before = rss_kib()
    n = 3 << 20
    body = b'{"prompt": "' + b"a" * (n - 14) + b'"}'
    socks = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        socks.append(s)
    for s in socks:
        try:
            s.sendall(body)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
    for s in socks:
        try:
            assert s.recv(12).startswith(b"HTTP/1.1 401")
        except ConnectionResetError:
            pass
        s.close()
    # 8 bodies of 3 MiB buffered would be +24 MiB.
    assert rss_kib() - before < 8 * 1024, (before, rss_kib())


# ---- 4. ambiguous framing ----

def test_duplicate_content_length_is_refused(server):
    auth = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
    body = b'{"prompt": "Hi", "max_tokens": 1}'
    # A list in one header ("33, 73") libmicrohttpd refuses itself, with its
    # own HTML 400, before spindle sees the request.
    for cl, ours in ((b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body), len(body) + 40), True),
                     (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body), len(body)), True),
                     (b"Content-Length: %d, %d\r\n" % (len(body), len(body) + 40), False)):
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth +
               b"Content-Type: application/json\r\n" + cl + b"\r\n" + body +
               b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
        status, headers, rest = raw_exchange(server.port, req)
        assert status == 400, (cl, status, rest)
        assert headers["connection"] == "close"
        if ours:
            assert headers["content-type"] == "application/json"
            assert json.loads(rest)["error"]["type"] == "invalid_request_error"
            # Closed after the answer: nothing after the ambiguous request is served.
            assert b"HTTP/1.1" not in rest, rest


def test_http11_without_host_is_refused(server):
    status, _, body = raw_exchange(server.port, b"GET /health HTTP/1.1\r\n\r\n")
    assert status == 400, (status, body)
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    # HTTP/1.0 has no Host requirement.
    status, _, body = raw_exchange(server.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 200, (status, body)
    # A correct HTTP/1.1 request on the same server is served.
    status, _, _ = raw_exchange(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 200


# ---- 2. SIGHUP drains like SIGTERM ----

def test_sighup_drains_like_sigterm(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "512")
    try:
        out = {}

        def run():
            out["r"] = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 120,
                                                  "temperature": 0, "ignore_eos": True}, timeout=120)

        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: s.metrics()["spindle_requests_running"] == 1, what="request running")
        s.proc.send_signal(signal.SIGHUP)
        t.join(120)
        assert s.proc.wait(timeout=60) == 0, s.log_text()[-2000:]
        assert out["r"].status_code == 200, out["r"].text
        log = s.log_text()
        assert "spindle: draining: finishing 1 request(s) in flight" in log, log[-2000:]
        assert "spindle: drained" in log
    finally:
        s.kill()


# ---- 5. keys outside the command line ----

def check_key(s, key):
    assert httpx.get(s.url + "/v1/models", timeout=10).status_code == 401
    bad = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert_openai_error(bad, 401)
    ok = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer " + key}, timeout=10)
    assert ok.status_code == 200, ok.text


def test_api_key_file(spindle_bin, smollm2_path, tmp_path):
    path = tmp_path / "key"
    path.write_text("file-key-1\nsecond line ignored\n")
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--api-key-file", str(path))
    try:
        check_key(s, "file-key-1")
        with open("/proc/%d/cmdline" % s.proc.pid, "rb") as f:
            assert b"file-key-1" not in f.read()
    finally:
        s.kill()


def test_api_key_environment_and_flag_precedence(spindle_bin, smollm2_path, tmp_path):
    env = dict(os.environ, SPINDLE_API_KEY="env-key-2")
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", env=env)
    try:
        check_key(s, "env-key-2")
    finally:
        s.kill()
    path = tmp_path / "key"
    path.write_text("file-key-3\r\n")
    for args, key in ((["--api-key", "flag-key-4"], "flag-key-4"),
                      (["--api-key-file", str(path)], "file-key-3")):
        s = Server(spindle_bin, smollm2_path, "--ctx", "512", *args, env=env)
        try:
            check_key(s, key)
            r = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer env-key-2"}, timeout=10)
            assert r.status_code == 401
        finally:
            s.kill()


def test_api_key_file_errors(run_spindle, smollm2_path, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path in (empty, tmp_path / "missing", tmp_path):
        r = run_spindle("serve", "-m", smollm2_path, "--api-key-file", str(path))
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--api-key-file" in lines[0] and str(path) in lines[0], r.stderr
    r = run_spindle("serve", "-m", smollm2_path, env={"SPINDLE_API_KEY": ""})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "SPINDLE_API_KEY" in r.stderr, r.stderr


# ---- 6. requests that end before any response are logged and counted ----

def open_request(port, body):
    """Sends a non-streaming completion on a fresh socket and returns the
    socket, unread."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def test_unanswered_requests_are_logged_and_counted(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--parallel", "1")
    try:
        long = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
        running = open_request(s.port, long)
        wait_for(lambda: s.metrics()["spindle_requests_running"] == 1, what="request running")
        queued = open_request(s.port, dict(long, max_tokens=4))
        wait_for(lambda: s.metrics()["spindle_requests_queued"] == 1, what="request queued")
        queued.close()  # hung up while queued
        running.close()  # hung up mid-generation of a non-streaming answer

        def lines():
            return [ln for ln in s.log_text().splitlines()
                    if "path=/v1/completions" in ln and "status=499" in ln and "outcome=cancelled" in ln]
        wait_for(lambda: len(lines()) == 2, what="two cancelled requests logged")
        m = s.metrics()
        assert m['spindle_requests_unanswered_total{outcome="cancelled"}'] == 2, m
        assert m['spindle_requests_total{status="499"}'] == 2, m
        assert m['spindle_requests_unanswered_total{outcome="timeout"}'] == 0, m
        wait_for(lambda: s.metrics()["spindle_requests_running"] == 0, what="the cancelled request freed")
    finally:
        s.kill()


# ---- 7. the replica id (the host name by default) only for authenticated clients ----

def test_replica_header_only_with_the_key(server, spindle_bin, smollm2_path):
    for r in (httpx.get(server.url + "/health", timeout=10),
              httpx.head(server.url + "/health", timeout=10),
              httpx.get(server.url + "/v1/models", timeout=10),
              httpx.get(server.url + "/", timeout=10),
              httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer nope"}, timeout=10)):
        assert "x-spindle-replica" not in r.headers, (r.request.url, r.status_code, r.headers)
    for r in (server.get("/health"), server.get("/v1/models"), server.get("/nope")):
        assert r.headers.get("x-spindle-replica"), (r.request.url, r.headers)
    with server.openai().chat.completions.with_streaming_response.create(
            model=server.model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            stream=True) as r:
        assert r.headers.get("x-spindle-replica")
    # Without a key (the cluster test's replicas behind HAProxy) every answer names it.
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--replica-id", "r7")
    try:
        assert httpx.get(s.url + "/health", timeout=10).headers.get("x-spindle-replica") == "r7"
        assert httpx.get(s.url + "/nope", timeout=10).headers.get("x-spindle-replica") == "r7"
    finally:
        s.kill()


# ---- 8. unknown fields of a chat message are refused like the request's own ----

def test_unknown_message_fields_are_refused(server):
    def chat(msg):
        return server.post("/v1/chat/completions", {"messages": [msg], "max_tokens": 1}, timeout=60)
    r = chat({"role": "user", "content": "hi", "bogus": 1})
    err = assert_openai_error(r, 400, "messages[0].bogus")
    assert err["code"] == "unknown_parameter" and "bogus" in err["message"], err
    r = chat({"role": "user", "content": "hi", "audio": {"id": "a1"}})
    assert assert_openai_error(r, 400, "messages[0].audio")["code"] == "unsupported_parameter"
    r = chat({"role": "user", "content": "hi", "name": "ann"})
    assert r.status_code == 200, r.text
    # an assistant turn as OpenAI's own answers carry it, echoed back
    r = server.post("/v1/chat/completions", {"max_tokens": 1, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "refusal": None, "annotations": [], "audio": None,
         "function_call": None, "tool_calls": None},
        {"role": "user", "content": "again"}]}, timeout=60)
    assert r.status_code == 200, r.text


# ---- 9. grammar bombs fail fast with the compile budget's error ----

def test_grammar_bombs_are_refused_fast(server):
    bombs = [
        ("/v1/completions", {"prompt": "x", "max_tokens": 1, "grammar": "root ::= (.{0,100}){0,100}"},
         "grammar"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "name": "bomb", "schema": {"type": "string",
                                                                 "pattern": "^(.*){1000}$"}}}},
         None),
    ]
    for path, body, param in bombs:
        t0 = time.monotonic()
        r = server.post(path, body, timeout=30)
        dt = time.monotonic() - t0
        err = assert_openai_error(r, 400, param)
        assert "limit SP_GRAMMAR_MAX_" in err["message"], err
        assert dt < 5, (path, dt)
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
