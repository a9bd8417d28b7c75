#!/usr/bin/env python3
"""Before/after figures for issue 38's queue, embedding and connection items
(docs/reliability.md, "Before and after").  Not a test: it prints seconds.

    build/venv/bin/python tests/soak/measure_hardening.py SPINDLE MODEL queue|embed|slowloris|grammar

queue:     --parallel 1 --queue 4; a 400-token stream runs, one request is
           queued, then a request with "timeout": 2 is queued behind it:
           seconds until it is answered.  Then a queued client hangs up with
           the queue full: seconds until a new request is queued (not 429).
embed:     a 400-token stream runs; a /v1/embeddings request of 32 inputs x
           500 tokens is sent: the longest gap between the stream's tokens
           while it runs, and how long a 3-token completion sent meanwhile
           takes.
slowloris: 520 connections each send a request line and then a header line
           every 5 s: seconds until /health answers (60 s cap).
grammar:   a 400-token stream runs while another client sends a large JSON
           schema: the compile's wall time and the stream's longest gap.
"""
import json
import os
import selectors
import socket
import sys
import threading
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
from server_util import Server  # noqa: E402


class Stream(threading.Thread):
    def __init__(self, url, max_tokens):
        super().__init__(daemon=True)
        self.url, self.max_tokens, self.times = url, max_tokens, []
        self.start()

    def run(self):
        body = {"prompt": "Write a long story.", "max_tokens": self.max_tokens, "ignore_eos": True,
                "stream": True, "temperature": 0}
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=900) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        self.times.append(time.monotonic())
        except httpx.HTTPError:
            pass

    def max_gap(self, t0, t1):
        ts = [t for t in self.times if t0 <= t <= t1]
        ts = [t0] + ts + [t1]
        return max(b - a for a, b in zip(ts, ts[1:]))


def wait(pred, timeout=600):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def queued(s):
    return s.metrics()["spindle_requests_queued"]


def measure_queue(spindle, model):
    s = Server(spindle, model, "--ctx", "512", "--parallel", "1", "--queue", "2")
    try:
        st = Stream(s.url, 400)
        wait(lambda: st.times)
        head = threading.Thread(target=lambda: s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4}),
                                daemon=True)
        head.start()
        wait(lambda: queued(s) == 1)
        t0 = time.monotonic()
        r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "timeout": 2})
        print("queue: request with timeout 2 s behind the head answered after %.1f s (%d)"
              % (time.monotonic() - t0, r.status_code))
        st.join()
        head.join()
        st = Stream(s.url, 400)
        wait(lambda: st.times)
        head = threading.Thread(target=lambda: s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4}),
                                daemon=True)
        head.start()
        wait(lambda: queued(s) == 1)
        body = b'{"prompt": "Bye", "max_tokens": 4}'
        gone = socket.create_connection(("127.0.0.1", s.port))
        gone.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait(lambda: queued(s) == 2)
        gone.close()
        t0 = time.monotonic()
        while True:
            r = s.post("/v1/completions", {"prompt": "Room", "max_tokens": 1, "timeout": 0.5})
            if r.status_code != 429:
                break
            time.sleep(0.1)
        print("queue: after a queued client hung up with the queue full, a new request was queued after %.1f s"
              % (time.monotonic() - t0))
        st.join()
    finally:
        s.kill()


def measure_embed(spindle, model):
    s = Server(spindle, model, "--ctx", "512", "--parallel", "2")
    try:
        tok = s.post("/tokenize", {"content": " the"}).json()["tokens"][-1]
        st = Stream(s.url, 400)
        wait(lambda: len(st.times) > 5)
        out = {}

        def embed():
            t = time.monotonic()
            r = s.post("/v1/embeddings", {"input": [[tok] * 500] * 32}, timeout=900)
            out["embed"] = (t, time.monotonic(), r.status_code)

        e = threading.Thread(target=embed)
        e.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 3}, timeout=900)
        small = time.monotonic() - t0
        e.join()
        t0, t1, code = out["embed"]
        print("embed: 32 x 500 tokens took %.1f s (%d); the stream's longest gap meanwhile %.2f s; "
              "a 3-token completion sent meanwhile took %.2f s (%d)"
              % (t1 - t0, code, st.max_gap(t0, t1), small, r.status_code))
        st.join()
    finally:
        s.kill()


def measure_slowloris(spindle, model):
    s = Server(spindle, model, "--ctx", "256")
    socks = []
    try:
        sel = selectors.DefaultSelector()
        for _ in range(520):
            so = socket.create_connection(("127.0.0.1", s.port))
            so.setblocking(False)
            so.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(so)
            sel.register(so, selectors.EVENT_READ)
        stop = threading.Event()

        def trickle():
            i = 0
            while not stop.wait(5):
                for so in socks:
                    try:
                        so.send(b"X-%d: y\r\n" % i)
                    except OSError:
                        pass
                i += 1

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(2)
        t0 = time.monotonic()
        try:
            r = httpx.get(s.url + "/health", timeout=60)
            print("slowloris: with 520 trickling connections /health answered %d after %.1f s"
                  % (r.status_code, time.monotonic() - t0))
        except httpx.HTTPError as e:
            print("slowloris: with 520 trickling connections /health got no answer in %.0f s (%s)"
                  % (time.monotonic() - t0, type(e).__name__))
        stop.set()
    finally:
        for so in socks:
            so.close()
        s.kill()


def heavy_schema():
    # four long patterned strings: about two seconds of compile and bind on
    # SmolLM2's vocabulary
    props = {"f%d" % i: {"type": "string", "pattern": "^[a-zA-Z0-9 ]{%d,%d}$" % (100 + i, 200 + i)}
             for i in range(4)}
    return {"type": "object", "properties": props, "required": list(props)}


def measure_grammar(spindle, model):
    s = Server(spindle, model, "--ctx", "512")
    try:
        st = Stream(s.url, 400)
        wait(lambda: len(st.times) > 5)
        t0 = time.monotonic()
        r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "json_schema": heavy_schema()}, timeout=900)
        t1 = time.monotonic()
        print("grammar: a request whose schema compiles on its connection thread answered %d after %.2f s; "
              "a running stream's longest gap meanwhile %.2f s" % (r.status_code, t1 - t0, st.max_gap(t0, t1)))
        st.join()
        schema = heavy_schema()
        schema["properties"]["g"] = {"type": "integer"}  # not the cached one
        body = json.dumps({"prompt": "x", "max_tokens": 1, "json_schema": schema}).encode()
        so = socket.create_connection(("127.0.0.1", s.port))
        so.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: gone\r\nContent-Length: %d\r\n\r\n"
                   % len(body) + body)
        so.close()
        wait(lambda: "request_id=gone" in s.log_text())
        ln = [x for x in s.log_text().splitlines() if "request_id=gone" in x][0]
        print("grammar: a client that hangs up during the compile: its request ended after %s ms"
              % ln.split("duration_ms=")[1].split()[0])
        schema["properties"]["h"] = {"type": "integer"}
        out = {}

        def post():
            try:
                out["r"] = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "json_schema": schema},
                                  timeout=900).status_code
            except httpx.HTTPError as e:
                out["r"] = "no answer (%s)" % type(e).__name__

        t = threading.Thread(target=post)
        t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        s.proc.send_signal(15)
        t.join()
        t1 = time.monotonic() - t0
        s.proc.wait(timeout=600)
        print("grammar: SIGTERM during a compile: %s after %.2f s; the server exited after %.2f s"
              % (out["r"], t1, time.monotonic() - t0))
    finally:
        s.kill()


if __name__ == "__main__":
    spindle, model, what = sys.argv[1], sys.argv[2], sys.argv[3]
    {"queue": measure_queue, "embed": measure_embed, "slowloris": measure_slowloris,
     "grammar": measure_grammar}[what](spindle, model)
