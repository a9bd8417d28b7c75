"""`spindle serve`'s queue and KV admission (issue 38, items 8 and 12):
queued requests expire and leave wherever they stand in the queue, a
request the KV cache cannot take yet is passed by smaller ones that fit, and
an `n > 1` request is either reserved whole at admission or refused, never
cut short mid-answer as if it had reached its length limit.

The requests queued behind a long generation are checked against that
generation: each assertion is about order (answered while it still runs),
not about time."""
import json
import socket
import threading

import httpx
import pytest

import server_util
from server_util import Server, assert_openai_error


def wait_for(pred, timeout=300, what="condition"):
    # generous: these tests also run against the sanitizer builds
    return server_util.wait_for(pred, timeout=timeout, what=what, interval=0.02)


class Blocker:
    """A streaming completion that generates until closed (ignore_eos, a
    large max_tokens), read on a thread; `done` is set if it ends by itself."""

    def __init__(self, server, max_tokens):
        body = {"prompt": "Write a very long story.", "max_tokens": max_tokens, "ignore_eos": True,
                "stream": True, "temperature": 0}
        data = json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.done = threading.Event()
        self.tokens = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        got = b""
        try:
            while b"data: [DONE]" not in got:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                got += chunk
                self.tokens = got.count(b"data: {")
            self.done.set()
        except OSError:
            pass

    def close(self):
        self.sock.close()
        self.thread.join(timeout=30)


class Post(threading.Thread):
    """server.post on a thread; .response once it returns."""

    def __init__(self, server, body, path="/v1/completions"):
        super().__init__(daemon=True)
        self.server, self.body, self.path, self.response = server, body, path, None
        self.start()

    def run(self):
        self.response = self.server.post(self.path, self.body, timeout=600)


def load(server):
    m = server.metrics()
    return m["spindle_requests_running"], m["spindle_requests_queued"]


@pytest.fixture(scope="module")
def one_slot(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", "2048", "--parallel", "1", "--queue", "2")
    yield s
    s.kill()


def test_queued_deadline_expires_behind_the_head(one_slot):
    s = one_slot
    b = Blocker(s, 2000)
    head = None
    try:
        wait_for(lambda: b.tokens > 0, what="the blocker's first token")
        head = Post(s, {"prompt": "Hello", "max_tokens": 4})
        wait_for(lambda: load(s) == (1, 1), what="the head queued")
        # Second in the queue with a 1 s limit: answered when the limit
        # passes, not when it reaches the head (after the 2,000 tokens).
        r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "timeout": 1}, timeout=600)
        assert r.status_code == 200, r.text
        assert r.json()["note"]["type"] == "timeout", r.text
        assert r.json()["usage"]["completion_tokens"] == 0
        assert not b.done.is_set(), "answered only after the running request ended"
        assert head.response is None
    finally:
        b.close()
    head.join(timeout=600)
    assert head.response.status_code == 200, head.response.text


def test_hangup_while_queued_frees_the_place(one_slot):
    s = one_slot
    wait_for(lambda: load(s) == (0, 0), what="idle")
    b = Blocker(s, 2000)
    head = None
    try:
        wait_for(lambda: b.tokens > 0, what="the blocker's first token")
        head = Post(s, {"prompt": "Hello", "max_tokens": 4})
        wait_for(lambda: load(s) == (1, 1), what="the head queued")
        gone = socket.create_connection(("127.0.0.1", s.port))
        body = b'{"prompt": "Bye", "max_tokens": 4}'
        gone.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait_for(lambda: load(s) == (1, 2), what="the second queued")
        # The queue is full: a third waits its turn no more.
        r = s.post("/v1/completions", {"prompt": "Full", "max_tokens": 4}, timeout=600)
        assert_openai_error(r, 429)
        gone.close()
        # The client that left loses its place behind the head at once.
        wait_for(lambda: load(s)[1] == 1 or b.done.is_set(), what="the hung-up request to leave the queue")
        assert not b.done.is_set(), "the hung-up request kept its place until the running one ended"
        r = s.post("/v1/completions", {"prompt": "Room", "max_tokens": 4, "timeout": 1}, timeout=600)
        assert r.status_code == 200, r.text  # queued (and expired there), not 429
        assert r.json()["note"]["type"] == "timeout", r.text
        assert not b.done.is_set()
    finally:
        b.close()
    head.join(timeout=600)
    assert head.response.status_code == 200, head.response.text
    wait_for(lambda: load(s) == (0, 0), what="idle")


# ---- a request the KV cache cannot take yet ----

@pytest.fixture(scope="module")
def small_kv(spindle_bin, smollm2_path):
    # 3 slots over a cache of about 768 positions: a 500-token request and a
    # 400-token one cannot run together, a short one fits beside either.
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--parallel", "3", "--kv-mem", "17")
    yield s
    s.kill()


def test_small_request_passes_a_head_the_cache_cannot_take(small_kv):
    s = small_kv
    total = s.metrics()["spindle_kv_blocks_total"]
    assert 33 + 27 > total > 33 + 1, total  # 16-token blocks: the budgets below
    b = Blocker(s, 490)
    head = None
    try:
        wait_for(lambda: b.tokens > 0, what="the blocker's first token")
        head = Post(s, {"prompt": "Hello", "max_tokens": 400, "ignore_eos": True, "temperature": 0})
        wait_for(lambda: load(s) == (1, 1), what="the head waiting for blocks")
        r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "temperature": 0}, timeout=600)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 3
        assert not b.done.is_set(), "the short request waited behind the head"
        assert head.response is None and load(s)[1] == 1
    finally:
        b.close()
    # The head is not starved: it runs once the blocks come back.
    head.join(timeout=600)
    assert head.response.status_code == 200, head.response.text
    assert head.response.json()["usage"]["completion_tokens"] == 400


# ---- item 12: n > 1 and the KV pool ----

@pytest.fixture(scope="module")
def one_ctx_pool(spindle_bin, smollm2_path):
    # one slot, a pool of about one context: 16-position blocks
    s = Server(spindle_bin, smollm2_path, "--ctx", "512", "--parallel", "1")
    yield s
    s.kill()


def test_choices_that_cannot_all_be_held_are_refused(one_ctx_pool):
    s = one_ctx_pool
    total = s.metrics()["spindle_kv_blocks_total"]
    assert 32 <= total < 40, total
    body = {"prompt": "Write a story.", "n": 4, "max_tokens": 200, "ignore_eos": True}
    r = s.post("/v1/completions", body)
    err = assert_openai_error(r, 400)
    assert err["code"] == "context_length_exceeded", err
    assert "KV cache" in err["message"] and "lower n or max_tokens" in err["message"], err
    # What fits is reserved whole: every choice runs to its max_tokens.
    body.update(n=2, max_tokens=200)
    r = s.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert len(choices) == 2
    assert r.json()["usage"]["completion_tokens"] == 400
    assert all(c["finish_reason"] == "length" for c in choices)


def test_choices_without_max_tokens_share_the_pool(one_ctx_pool):
    s = one_ctx_pool
    total = int(s.metrics()["spindle_kv_blocks_total"])
    # max_tokens unset: "until the context is full", where a choice's
    # context is its reserved share of the pool when that is smaller
    body = {"messages": [{"role": "user", "content": "Write a story."}], "n": 4, "ignore_eos": True}
    r = s.post("/v1/chat/completions", body, timeout=600)
    assert r.status_code == 200, r.text
    j = r.json()
    assert len(j["choices"]) == 4
    assert all(c["finish_reason"] == "length" for c in j["choices"])
    p = j["usage"]["prompt_tokens"]
    # the pool: the prompt's blocks, one copy of its last block per choice,
    # and an equal share of the rest each; every choice reaches the same length
    p_blocks = (p + 15) // 16
    own = (total - p_blocks - 4) // 4
    assert j["usage"]["completion_tokens"] == 4 * ((p_blocks + own) * 16 - p), (j["usage"], p)
