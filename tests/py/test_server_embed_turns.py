"""/v1/embeddings beside generation (issue 38, items 6 and 14): a large
embedding request is computed a chunk at a time between generation steps,
so running streams go on; a client that hangs up stops it at the next chunk;
the drain waits for it, and its timeout answers it with 503 instead of
dropping the connection (vectors that finish in time are delivered).

Each check is about order (tokens streamed while the vectors are computed,
tokens counted before the request would have finished), not about time."""
import json
import signal
import socket
import threading
import time

import httpx
import pytest

import server_util
from server_util import Server

CTX = 256
N_INPUTS = 24
N_TOK = 250  # one input per chunk: a chunk holds at most CTX tokens


def wait_for(pred, timeout=300, what="condition"):
    return server_util.wait_for(pred, timeout=timeout, what=what, interval=0.02)


def inputs(server, n_inputs=N_INPUTS, n_tok=N_TOK):
    tok = server.post("/tokenize", {"content": " the"}).json()["tokens"][-1]
    return [[tok] * n_tok for _ in range(n_inputs)]


def embed_bytes(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data


def prompt_tokens(server):
    return server.metrics()["spindle_prompt_tokens_total"]


def wait_started(server, before):
    """Until the first chunk of an embedding request is counted (its tokens
    are counted chunk by chunk), or half a second, whichever comes first: a
    server that counts them only at the end is still computing then."""
    t0 = time.monotonic()
    wait_for(lambda: prompt_tokens(server) > before or time.monotonic() > t0 + 0.5, what="the first chunk")


class Stream(threading.Thread):
    """A streaming completion read on a thread; .tokens counts its chunks."""

    def __init__(self, server, max_tokens):
        super().__init__(daemon=True)
        self.server, self.max_tokens, self.tokens, self.error = server, max_tokens, 0, None
        self.start()

    def run(self):
        body = {"prompt": "Write a long story.", "max_tokens": self.max_tokens, "ignore_eos": True,
                "stream": True, "temperature": 0}
        try:
            with httpx.stream("POST", self.server.url + "/v1/completions", json=body, timeout=600) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        self.tokens += 1
        except httpx.HTTPError as e:
            self.error = e


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", CTX, "--parallel", "2")
    yield s
    s.kill()


def test_streams_go_on_while_a_large_batch_is_embedded(server):
    body = {"input": inputs(server)}
    st = Stream(server, CTX - 16)
    wait_for(lambda: st.tokens > 0, what="the stream's first token")
    before = prompt_tokens(server)
    post = threading.Thread(target=lambda: body.update(r=server.post("/v1/embeddings", body, timeout=600)))
    post.start()
    # prompt tokens are counted chunk by chunk: from the first chunk to the
    # 18th, the stream gets a token per chunk (generated tokens are counted
    # as the engine makes them)
    gen = "spindle_generated_tokens_total"
    m1 = wait_for(lambda: (lambda m: m if m["spindle_prompt_tokens_total"] > before else None)(server.metrics()),
                  what="the first chunk")
    m2 = wait_for(lambda: (lambda m: m if m["spindle_prompt_tokens_total"] - before >= N_TOK * N_INPUTS * 3 // 4
                           else None)(server.metrics()), what="3/4 of the chunks")
    during = m2[gen] - m1[gen]
    post.join(timeout=600)
    r = body["r"]
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["data"]) == N_INPUTS
    assert during >= N_INPUTS // 4, (during, st.tokens)
    st.join(timeout=600)
    assert st.error is None and st.tokens >= CTX - 16 - 8
    # the vectors do not depend on the chunking: the same as one at a time
    one = server.post("/v1/embeddings", {"input": body["input"][5]}).json()["data"][0]["embedding"]
    assert one == r.json()["data"][5]["embedding"]


def test_hangup_stops_the_batch(server):
    before = prompt_tokens(server)
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(embed_bytes({"input": inputs(server)}))
        wait_started(server, before)
    finally:
        sock.close()
    wait_for(lambda: "path=/v1/embeddings status=499" in server.log_text(), what="the request's log line")
    line = [ln for ln in server.log_text().splitlines() if "path=/v1/embeddings status=499" in ln][-1]
    assert "outcome=cancelled" in line, line
    done = prompt_tokens(server) - before
    assert 0 < done < N_INPUTS * N_TOK, done  # stopped part-way
    r = server.post("/v1/embeddings", {"input": "still serving"})
    assert r.status_code == 200, r.text[:300]


def test_drain_delivers_finished_vectors(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", CTX, "--drain-timeout", "600")
    try:
        before = prompt_tokens(s)
        out = {}
        t = threading.Thread(target=lambda: out.update(
            r=s.post("/v1/embeddings", {"input": inputs(s, 64)}, timeout=600)))
        t.start()
        wait_started(s, before)
        s.proc.send_signal(signal.SIGTERM)
        t.join(timeout=600)
        r = out["r"]  # the drain waited for it instead of closing its connection
        assert r.status_code == 200, r.text[:300]
        assert len(r.json()["data"]) == 64
        assert s.proc.wait(timeout=600) == 0
    finally:
        s.kill()


def test_drain_timeout_ends_the_batch_with_503(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", CTX, "--drain-timeout", "0.2")
    try:
        before = prompt_tokens(s)
        out = {}

        def post():
            try:
                out["r"] = s.post("/v1/embeddings", {"input": inputs(s, 200)}, timeout=600)
            except httpx.HTTPError as e:
                out["e"] = e

        t = threading.Thread(target=post)
        t.start()
        wait_started(s, before)
        s.proc.send_signal(signal.SIGTERM)
        t.join(timeout=600)
        assert "e" not in out, out  # answered, not dropped
        r = out["r"]
        assert r.status_code == 503, r.text[:300]
        assert r.json()["error"]["code"] == "shutting_down"
        assert s.proc.wait(timeout=600) == 0
        assert "drain cut short: ending 1 request(s)" in s.log_text()
    finally:
        s.kill()
