"""Soak test for `spindle serve` (run it through tests/soak/run-soak).

Starts one server (SmolLM2-135M by default) and drives it with --clients
concurrent client threads for a warm-up (--warmup seconds) and then the
measured run (--seconds).  Each client loops, picking per request:
  * 10%  a valid streaming request it abandons mid-stream (closes the socket)
  * 10%  an invalid request (bad JSON, bad types, out-of-range values,
         unknown routes, invalid UTF-8): it must get a 4xx
  * 10%  a valid streaming request read slowly (a pause between lines)
  * 70%  a valid request (completions or chat, streaming or not) with a random
         prompt length and random decoding parameters
Pass (exit 0) when, over warm-up and run:
  * every valid request completes (200 with finish_reasons, a stream ends in
    [DONE]) or is refused with 429; no 5xx at all, no transport error on a
    request the client did not abandon itself;
  * the server is still alive, and exits 0 on SIGTERM at the end;
  * once idle, /metrics shows no running or queued request and
    spindle_kv_blocks_used == 0;
  * resident memory (VmRSS) idle after the run is within --max-drift (5%)
    of resident memory idle after the warm-up;
  * the server log holds no sanitizer report.
The last line printed is one JSON object with the figures.  Exit 1 on
failure, 2 on bad usage or setup errors.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from server_util import Server  # noqa: E402

WORDS = ("the a river stone light quick brown fox jumps over lazy dog city night music "
         "garden paper window ocean story machine number seven blue green winter summer "
         "why how what when où naïve café 世界 😀 привет").split()

INVALID = [
    ("/v1/completions", b'{"prompt": "x", "max_tokens": '),
    ("/v1/completions", b'not json at all'),
    ("/v1/completions", b''),
    ("/v1/completions", b'{"prompt": 5}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": -3}'),
    ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}'),
    ("/v1/completions", b'{"prompt": "x", "n": 100000}'),
    ("/v1/completions", b'{"prompt": "x", "top_p": 7}'),
    ("/v1/completions", b'{"prompt": "x", "stop": [1, 2]}'),
    ("/v1/completions", b'{"prompt": "\xff\xfe bad utf8"}'),
    ("/v1/completions", b'[1, 2, 3]'),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"abc": 1}}'),
    ("/v1/chat/completions", b'{"messages": "hi"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": 3, "content": "x"}]}'),
    ("/v1/chat/completions", b'{"messages": []}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e30}'),
    ("/v1/nope", b'{}'),
    ("/v1/completions", b'{' * 5000),
]


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.counts = {}
        self.failures = []
        self.served = 0
        self.tokens = 0

    def add(self, key, n=1):
        with self.mu:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, msg):
        with self.mu:
            self.failures.append(msg)


def rand_prompt(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.choice((1, 3, 10, 40, 120, 200))))


def rand_body(rng, model, stream):
    chat = rng.random() < 0.5
    body = {"model": model, "max_tokens": rng.randint(1, 40), "stream": stream}
    if chat:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": rand_prompt(rng)}]
        if rng.random() < 0.3:
            body["messages"].insert(0, {"role": "system", "content": " ".join(
                rng.choice(WORDS) for _ in range(rng.randint(1, 30)))})
    else:
        path = "/v1/completions"
        body["prompt"] = rand_prompt(rng)
    r = rng.random()
    if r < 0.3:
        body["temperature"] = 0
    else:
        body["temperature"] = round(rng.uniform(0.1, 1.5), 2)
        if rng.random() < 0.5:
            body["top_k"] = rng.randint(1, 100)
        if rng.random() < 0.5:
            body["top_p"] = round(rng.uniform(0.1, 1.0), 2)
        if rng.random() < 0.3:
            body["min_p"] = round(rng.uniform(0.0, 0.3), 2)
        if rng.random() < 0.5:
            body["seed"] = rng.randint(0, 1 << 31)
    if rng.random() < 0.2:
        body["presence_penalty"] = round(rng.uniform(-1, 1), 2)
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(WORDS)]
    if rng.random() < 0.1:
        body["n"] = 2
    if rng.random() < 0.1 and not chat:
        body["logprobs"] = rng.randint(0, 5)
    if rng.random() < 0.2:
        body["ignore_eos"] = True
    return path, body


def check_stream(resp, stats, what, slow=0.0, abandon_after=None):
    """Reads an SSE stream; returns True when it ended in [DONE]."""
    finished = set()
    n_events = 0
    for line in resp.iter_lines():
        if slow:
            time.sleep(slow)
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        if payload == "[DONE]":
            return True, finished
        ev = json.loads(payload)
        if "error" in ev:
            stats.fail("%s: error event in stream: %s" % (what, payload[:300]))
            return False, finished
        for ch in ev.get("choices", []):
            if ch.get("finish_reason"):
                finished.add(ch.get("index", 0))
        n_events += 1
        if abandon_after is not None and n_events >= abandon_after:
            return None, finished
    stats.fail("%s: stream ended without [DONE]" % what)
    return False, finished


def one_request(url, rng, model, stats, count):
    kind = rng.random()
    if kind < 0.1:
        mode = "disconnect"
    elif kind < 0.2:
        mode = "invalid"
    elif kind < 0.3:
        mode = "slow"
    else:
        mode = "valid"
    if mode == "invalid":
        path, raw = rng.choice(INVALID)
        try:
            r = httpx.post(url + path, content=raw, timeout=120,
                           headers={"Content-Type": "application/json"})
        except httpx.TransportError as e:
            stats.fail("invalid %s %r: transport error %r" % (path, raw[:60], e))
            return
        if count:
            stats.add("invalid_%d" % r.status_code)
        if not 400 <= r.status_code < 500:
            stats.fail("invalid %s %r: status %d %s" % (path, raw[:60], r.status_code, r.text[:200]))
        return
    stream = mode != "valid" or rng.random() < 0.6
    path, body = rand_body(rng, model, stream)
    what = "%s %s %s" % (mode, path, json.dumps(body)[:200])
    try:
        if not stream:
            r = httpx.post(url + path, json=body, timeout=300)
            if count:
                stats.add("%s_%d" % (mode, r.status_code))
            if r.status_code == 429:
                time.sleep(float(r.headers.get("retry-after", "1")))
                return
            if r.status_code != 200:
                stats.fail("%s: status %d %s" % (what, r.status_code, r.text[:300]))
                return
            j = r.json()
            n = body.get("n", 1)
            if len(j["choices"]) != n or any(not c.get("finish_reason") for c in j["choices"]):
                stats.fail("%s: incomplete response %s" % (what, r.text[:300]))
                return
            if count:
                with stats.mu:
                    stats.served += 1
                    stats.tokens += j["usage"]["completion_tokens"]
            return
        with httpx.stream("POST", url + path, json=body, timeout=300) as r:
            if count:
                stats.add("%s_%d" % (mode, r.status_code))
            if r.status_code == 429:
                r.read()
                time.sleep(float(r.headers.get("retry-after", "1")))
                return
            if r.status_code != 200:
                r.read()
                stats.fail("%s: status %d %s" % (what, r.status_code, r.text[:300]))
                return
            abandon = rng.randint(1, 6) if mode == "disconnect" else None
            done, finished = check_stream(r, stats, what, slow=0.25 if mode == "slow" else 0.0,
                                          abandon_after=abandon)
            if done is None:
                return  # abandoned on purpose: leaving the block closes the socket
            if done and len(finished) != body.get("n", 1):
                stats.fail("%s: finish_reason missing (%s)" % (what, sorted(finished)))
            elif done and count:
                with stats.mu:
                    stats.served += 1
    except httpx.TransportError as e:
        stats.fail("%s: transport error %r" % (what, e))


def client_loop(url, seed, model, stats, stop_at, count):
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        one_request(url, rng, model, stats, count)


def drive(url, model, n_clients, seconds, seed, stats, count):
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=client_loop, daemon=True,
                                args=(url, seed * 1000 + i, model, stats, stop_at, count))
               for i in range(n_clients)]
    for t in threads:
        t.start()
    # A client finishes its last request after stop_at: give it time.
    for t in threads:
        t.join(timeout=seconds + 600)
    if any(t.is_alive() for t in threads):
        stats.fail("clients still busy 600 s after the end of the run")


def fill_kv(server, n_seqs, ctx):
    """Runs n_seqs prefills of nearly ctx tokens at once, with distinct
    prompts, so that every KV block has been written once and the pool's
    first-touch page faults happen before the memory baseline is taken
    (the pool holds n_seqs x ctx positions: all but a block or two get
    written)."""
    errors = []

    def prompt_of(i, n_tokens):
        words = "%d %s" % (i, " ".join(WORDS[(i + k) % len(WORDS)] for k in range(2 * n_tokens)))
        toks = server.post("/tokenize", {"content": words}).json()["tokens"]
        r = server.post("/detokenize", {"tokens": toks[1:n_tokens]})  # [0] may be BOS
        r.raise_for_status()
        return r.json()["content"]

    def one(p):
        r = server.post("/v1/completions", {"prompt": p, "max_tokens": 1}, timeout=600)
        if r.status_code != 200:
            errors.append("KV fill request: %d %s" % (r.status_code, r.text[:300]))

    prompts = [prompt_of(i, ctx - 8) for i in range(n_seqs)]
    threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(errors[0])


def five_xx(m):
    return {k: v for k, v in m.items() if k.startswith('spindle_requests_total{status="5')}


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def wait_idle(server, timeout=120):
    deadline = time.monotonic() + timeout
    m = None
    while time.monotonic() < deadline:
        m = server.metrics()
        if m["spindle_requests_running"] == 0 and m["spindle_requests_queued"] == 0:
            time.sleep(0.5)  # let freed connections' threads finish
            return server.metrics()
        time.sleep(0.2)
    raise AssertionError("server not idle after %ds: %s" % (timeout, m))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--queue", type=int, default=16,
                    help="server --queue: below --clients so that 429s happen")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-drift", type=float, default=5.0, help="percent")
    ap.add_argument("--spindle", default=os.environ.get("SPINDLE", os.path.join(ROOT, "build", "spindle")))
    ap.add_argument("--model", default=None, help="GGUF path (default: fetch-model smollm2-135m)")
    a = ap.parse_args()

    model_path = a.model
    if not model_path:
        r = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), "smollm2-135m"],
                           stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print("soak: scripts/fetch-model failed", file=sys.stderr)
            return 2
        model_path = r.stdout.strip()
    if not os.access(a.spindle, os.X_OK):
        print("soak: no spindle binary at %s" % a.spindle, file=sys.stderr)
        return 2

    server = Server(a.spindle, model_path, "--ctx", a.ctx, "--parallel", a.parallel,
                    "--queue", a.queue)
    stats_warm, stats = Stats(), Stats()
    result = {"seconds": a.seconds, "clients": a.clients, "parallel": a.parallel,
              "spindle": os.path.relpath(a.spindle, ROOT)}
    try:
        # /health answers 503 while the model loads: not counted as failures.
        startup_5xx = five_xx(server.metrics())
        t0 = time.monotonic()
        fill_kv(server, a.parallel, a.ctx)
        t1 = time.monotonic()
        drive(server.url, server.model_id, a.clients, a.warmup, a.seed, stats_warm, False)
        wait_idle(server)
        rss_warm = rss_kib(server.proc.pid)
        t2 = time.monotonic()
        drive(server.url, server.model_id, a.clients, a.seconds, a.seed + 1, stats, True)
        m = wait_idle(server)
        rss_end = rss_kib(server.proc.pid)
        t3 = time.monotonic()
        result["phase_s"] = {"kv_fill": round(t1 - t0, 1), "warmup": round(t2 - t1, 1),
                             "run": round(t3 - t2, 1)}
        alive = server.proc.poll() is None
        if not alive:
            stats.fail("server died with status %s" % server.proc.returncode)
        if m["spindle_kv_blocks_used"] != 0:
            stats.fail("KV blocks still used when idle: %s" % m["spindle_kv_blocks_used"])
        drift = 100.0 * (rss_end - rss_warm) / rss_warm
        if abs(drift) > a.max_drift:
            stats.fail("resident memory drifted %.2f%% (%d -> %d KiB)" % (drift, rss_warm, rss_end))
        if five_xx(m) != startup_5xx:
            stats.fail("server counted 5xx answers: %s (at startup: %s)" % (five_xx(m), startup_5xx))
        result.update({
            "requests": sum(stats.counts.values()),
            "served": stats.served,
            "completion_tokens_nonstream": stats.tokens,
            "by_kind_status": dict(sorted(stats.counts.items())),
            "rss_warm_kib": rss_warm, "rss_end_kib": rss_end, "rss_drift_pct": round(drift, 2),
            "kv_blocks_used_idle": m["spindle_kv_blocks_used"],
            "kv_blocks_total": m["spindle_kv_blocks_total"],
            "generated_tokens_total": m["spindle_generated_tokens_total"],
        })
        status = server.stop()
        if status != 0:
            stats.fail("spindle serve exited %s after SIGTERM" % status)
    finally:
        server.kill()
    with open(server.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    for needle in ("AddressSanitizer", "runtime error", "ThreadSanitizer", "LeakSanitizer"):
        if needle in log:
            stats.fail("sanitizer report in the server log (%s): %s"
                       % (needle, log[log.index(needle) - 200:][:2000]))
    failures = stats_warm.failures + stats.failures
    for f in failures[:30]:
        print("soak: FAIL: " + f)
    result["failures"] = len(failures)
    result["pass"] = not failures
    print(json.dumps(result))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
