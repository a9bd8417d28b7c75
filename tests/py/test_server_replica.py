"""`spindle serve` as one replica behind a load balancer: the replica id in
every response header and in /metrics, /health during the drain, and the
drain timeout that ends requests still in flight.  deploy/haproxy.cfg relies
on each of these; scripts/cluster-test checks them through HAProxy."""
import socket
import threading
import time

import httpx
import openai
import pytest

from server_util import Server, assert_openai_error, sse_events, wait_for

REPLICA = "r-7.eu:b"


def long_body(server, stream, max_tokens=1900):
    return {"model": server.model_id, "prompt": "Write a very long story about a dragon.",
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}


def running_and_queued(server, running, queued):
    m = server.metrics()
    return m["spindle_requests_running"] == running and m["spindle_requests_queued"] == queued


def test_replica_id_in_every_response_and_metrics(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--replica-id", REPLICA)
    try:
        responses = [
            httpx.get(s.url + "/health"),
            s.get("/v1/models"),
            s.get("/metrics"),
            s.get("/v1/nothing"),
            s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
            s.post("/v1/completions", {"prompt": "Hi", "temperature": 9}),
        ]
        for r in responses:
            assert r.headers.get("x-spindle-replica") == REPLICA, (r.request.url, r.headers)
        assert [r.status_code for r in responses] == [200, 200, 200, 404, 200, 400]
        with httpx.stream("POST", s.url + "/v1/chat/completions", timeout=60,
                          json={"messages": [{"role": "user", "content": "Hi"}],
                                "max_tokens": 3, "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["x-spindle-replica"] == REPLICA
            assert list(sse_events(r))[-1] == "[DONE]"
        # The official client exposes it through the raw response.
        raw = s.openai().completions.with_raw_response.create(model=s.model_id, prompt="Hi",
                                                              max_tokens=2)
        assert raw.headers["x-spindle-replica"] == REPLICA
        m = s.metrics()
        assert m['spindle_replica_info{replica="%s"}' % REPLICA] == 1
        assert [k for k in m if k.startswith("spindle_replica_info")] == [
            'spindle_replica_info{replica="%s"}' % REPLICA]
    finally:
        assert s.stop() == 0


def test_default_replica_id_is_the_host_name(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "512")
    try:
        allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")
        want = "".join(ch if ch in allowed else "-" for ch in socket.gethostname())[:64]
        assert httpx.get(s.url + "/health").headers["x-spindle-replica"] == want
        assert s.metrics()['spindle_replica_info{replica="%s"}' % want] == 1
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("flag,value", [
    ("--replica-id", ""), ("--replica-id", "a b"), ("--replica-id", 'x"y'),
    ("--replica-id", "r" * 65), ("--drain-timeout", "-1"), ("--drain-timeout", "soon"),
])
def test_bad_replica_flags_exit_2(run_spindle, smollm2_path, flag, value):
    r = run_spindle("serve", "-m", smollm2_path, "--port", "0", flag, value, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], r.stderr


def test_drain_timeout_ends_requests_in_flight(spindle_bin, smollm2_path):
    """SIGTERM with --drain-timeout 5: /health says draining; after 5 s the
    stream still running ends with an error event the OpenAI client raises,
    the non-streamed request and the queued one get a 503, and the server
    exits 0."""
    s = Server(spindle_bin, smollm2_path, "--ctx", "2048", "--parallel", "2", "--queue", "4",
               "--drain-timeout", "5", "--replica-id", "r1")
    try:
        out = {}
        got_tokens = threading.Event()

        def streamer():
            text = ""
            body = long_body(s, True)
            extra = {"ignore_eos": body.pop("ignore_eos")}
            try:
                for chunk in s.openai().completions.create(**body, extra_body=extra):
                    text += chunk.choices[0].text
                    got_tokens.set()
                out["stream"] = ("finished", text)
            except Exception as e:  # noqa: BLE001 - the assertions below name it
                out["stream"] = (e, text)
            finally:
                got_tokens.set()

        def plain(key):
            out[key] = s.post("/v1/completions", long_body(s, False), timeout=120)

        threads = [threading.Thread(target=streamer),
                   threading.Thread(target=plain, args=("plain",))]
        for t in threads:
            t.start()
        assert got_tokens.wait(120) and "stream" not in out, out
        wait_for(lambda: running_and_queued(s, 2, 0), what="two running")
        queued = threading.Thread(target=plain, args=("queued",))
        queued.start()
        threads.append(queued)
        wait_for(lambda: running_and_queued(s, 2, 1), what="one queued")

        t0 = time.monotonic()
        s.proc.terminate()
        r = wait_for(lambda: (lambda r: r if r.status_code == 503 else None)(
            httpx.get(s.url + "/health")), what="503 health")
        assert r.json() == {"status": "draining"}
        assert r.headers["x-spindle-replica"] == "r1"
        assert time.monotonic() - t0 < 5, "the drain ended before the check"
        for t in threads:
            t.join(timeout=60)
        assert s.proc.wait(timeout=30) == 0
        elapsed = time.monotonic() - t0
        assert 4.5 < elapsed < 30, elapsed

        err, text = out["stream"]
        assert isinstance(err, openai.APIError), out["stream"]
        assert "shut down" in err.message and err.body["code"] == "shutting_down", err.body
        assert len(text) > 0
        for key in ("plain", "queued"):
            e = assert_openai_error(out[key], 503)
            assert e["code"] == "shutting_down", e
            assert out[key].headers["x-spindle-replica"] == "r1"
        log = s.log_text()
        assert "drain cut short: ending 3 request(s)" in log, log[-2000:]
    finally:
        s.kill()


def test_second_signal_ends_an_unlimited_drain(spindle_bin, smollm2_path):
    """--drain-timeout 0 waits as long as requests run; a second SIGTERM ends
    them at once, the stream with its error event and no [DONE]."""
    s = Server(spindle_bin, smollm2_path, "--ctx", "2048", "--drain-timeout", "0")
    try:
        with httpx.stream("POST", s.url + "/v1/completions", json=long_body(s, True),
                          timeout=120) as r:
            assert r.status_code == 200
            events = sse_events(r)
            for _ in range(3):
                assert "choices" in next(events)
            s.proc.terminate()
            wait_for(lambda: httpx.get(s.url + "/health").status_code == 503,
                     what="503 health")
            time.sleep(0.5)
            assert s.proc.poll() is None, "an unlimited drain ended while a stream ran"
            s.proc.terminate()
            rest = list(events)
        assert rest and "[DONE]" not in rest, rest[-3:]
        assert rest[-1]["error"]["code"] == "shutting_down", rest[-1]
        assert all("choices" in ev for ev in rest[:-1])
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.kill()


def test_drain_answers_every_connection_until_the_balancer_stops(spindle_bin, smollm2_path):
    """A balancer keeps sending to a replica until the first 503 tells it of
    the drain.  Eight clients send requests on fresh connections, as HAProxy
    does, each stopping at its first answer that is not 200; SIGTERM comes
    while they run.  Each must end on a 503 or a refused connection, never
    on a connection closed with its request unanswered (which a balancer
    may not replay): the replica answers 503 until nothing has arrived for
    a while, then exits 0."""
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--replica-id", "r1")
    request = b"GET /v1/models HTTP/1.1\r\nHost: spindle\r\nConnection: close\r\n\r\n"
    ends, started = [], threading.Barrier(9)

    def client():
        started.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
                    sock.sendall(request)
                    data = b""
                    while chunk := sock.recv(65536):
                        data += chunk
            except ConnectionRefusedError:
                ends.append("refused")
                return
            except OSError as e:
                ends.append("reset: %r" % e)
                return
            if not data:
                ends.append("closed unanswered")
                return
            status = int(data.split(b" ", 2)[1])
            if status != 200:
                ends.append(status)
                return
        ends.append("still 200 after 30 s")

    threads = [threading.Thread(target=client) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.5)
        s.proc.terminate()
        for t in threads:
            t.join(timeout=60)
        assert s.proc.wait(timeout=30) == 0
        assert len(ends) == 8 and all(e in (503, "refused") for e in ends), ends
        assert 503 in ends, ends
        assert "drained" in s.log_text()
    finally:
        s.kill()
