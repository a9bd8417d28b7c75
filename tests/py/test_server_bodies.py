"""Request bodies whose parse would cost far more memory than their bytes
(issue 38, item 16): a JSON tree takes up to 30 times its text, so the
values and the nesting of a body are counted before it is parsed, and a body
past either limit gets a 400 naming it."""
import json

import httpx
import pytest

from server_util import Server, assert_openai_error

CTX = 512
MAX_VALUES = 65536 + 2 * CTX  # SP_API_MAX_VALUES plus 2 per context position


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--ctx", CTX)
    yield s
    s.kill()


def peak_kib(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))


def reset_peak(server):
    with open("/proc/%d/clear_refs" % server.proc.pid, "w") as f:
        f.write("5")  # VmHWM restarts from the current resident size


def test_many_tiny_messages_are_refused_before_parsing(server):
    # 120,000 messages in 3.4 MiB (under --max-body's 4 MiB)
    raw = json.dumps({"messages": [{"role": "user", "content": "x"}] * 120000},
                     separators=(",", ":")).encode()
    assert len(raw) < 4 << 20
    reset_peak(server)
    before = peak_kib(server)
    r = server.post("/v1/chat/completions", None, raw=raw)
    err = assert_openai_error(r, 400)
    assert "more than %d JSON values" % MAX_VALUES in err["message"], err
    # parsed, this body took +128 MiB at its peak
    assert peak_kib(server) - before < 32 * 1024, (before, peak_kib(server))


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize", "/detokenize", "/v1/embeddings"])
def test_deep_nesting_is_refused(server, path):
    raw = b'{"x": ' + b"[" * 100 + b"]" * 100 + b"}"
    err = assert_openai_error(server.post(path, None, raw=raw), 400)
    assert "deeper than 64 levels" in err["message"], err


def test_bodies_within_the_limits_are_served(server):
    # a prompt of token ids as long as the context allows
    ids = server.post("/tokenize", {"content": "word " * 600}).json()["tokens"][:CTX - 8]
    r = server.post("/v1/completions", {"prompt": ids, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(ids)
    # a chat of 500 messages
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "ok"} for i in range(499)]
    r = server.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:  # longer than the context, refused for that only
        assert r.json()["error"]["code"] == "context_length_exceeded", r.text
