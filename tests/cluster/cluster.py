"""Cluster test (run it through scripts/cluster-test): three `spindle serve`
replicas behind HAProxy (deploy/haproxy.cfg), scraped by Prometheus
(deploy/prometheus.yml), all on free loopback ports, started here and stopped
at the end.

The load: --clients threads send greedy completions and chat requests
through HAProxy, half of them streamed, a quarter with an X-Session-Id
header (the hashing backend).  Every answer must equal, token for token, the
reference computed up front from one replica alone.

Phases, in order:
  steady      --seconds of load: every request succeeds and answers correctly.
  rolling     under load, each replica in turn: SIGTERM, wait for its drain
              (exit 0, no request cut short), start it again, wait until
              HAProxy has it UP.  Zero failed requests.
  kill        under load, kill -9 of one replica while streams run on it.
              The only failures are requests that were on it (their
              X-Spindle-Replica header or HAProxy's log says so), each a
              clear error: a stream cut short (the client's HTTP library
              raises), HAProxy's 502 in OpenAI's shape, or, for a request on
              a reused client connection, that connection closed without an
              answer (HAProxy's way of saying "retry"; no surviving replica's
              log may have the request).  Every request sent after the kill
              succeeds.
              The replica is started again.
  affinity    no other load: conversations sharing a long system prompt, a few
              turns each, once without a key (least connections) and once
              with one (X-Session-Id, or the `user` field: consistent
              hashing).  Hashing reaches the higher prefix-cache hit rate and
              keeps each conversation on one replica; the replicas' /metrics
              agree with the clients' usage figures.
  prometheus  its HTTP API shows every replica and HAProxy scraped.
  scaling     only with --scaling S: aggregate tokens/s through HAProxy with
              3, 2 and 1 replicas up (S seconds each, after a warm-up).

The last line printed is one JSON object with the figures.  Exit status 0:
pass; 1: a check failed; 2: bad usage or setup.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from server_util import free_port, sse_events, wait_for  # noqa: E402

REPLICA_IDS = ("r1", "r2", "r3")
# The addresses deploy/haproxy.cfg and deploy/prometheus.yml use, replaced by
# free ports here.
DEPLOY_API, DEPLOY_STATS = "127.0.0.1:8080", "127.0.0.1:8404"
DEPLOY_REPLICAS = ("127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083")
# --parallel matches the HAProxy servers' maxconn; one compute thread each,
# since three replicas share this machine's cores.
REPLICA_ARGS = ("--parallel", "8", "--ctx", "1024", "--queue", "64", "--threads", "1",
                "--drain-timeout", "60")
HTTP_TIMEOUT = 300

# (kind, prompt, max_tokens): greedy requests whose answers are known.
SPECS = [
    ("completion", "The three most useful kitchen tools are", 24),
    ("completion", "A short poem about the sea:\n", 32),
    ("completion", "def fibonacci(n):", 28),
    ("completion", "The capital of France is", 12),
    ("chat", "Name three colours.", 20),
    ("chat", "What is 12 times 12?", 16),
    ("chat", "Give me one tip for sleeping well.", 32),
    ("chat", "Translate 'good morning' into Spanish.", 12),
]


class Fail(Exception):
    """A check failed; the message says which (as does wait_for's
    AssertionError on a timeout)."""


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def log(msg):
    print("cluster-test: " + msg, flush=True)


def find_tool(name):
    """The path of a Debian-installed program (haproxy lives in /usr/sbin,
    which a non-root PATH may lack), or None."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def rewrite(text, mapping, name):
    for old, new in mapping.items():
        if old not in text:
            raise SystemExit("cluster-test: %s has no '%s' to replace" % (name, old))
        text = text.replace(old, new)
    return text


# ---- the processes --------------------------------------------------------

class Proc:
    """A child process with its output in a log file."""

    def __init__(self, name, argv, workdir):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(workdir, name + ".log")
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as f:
            self.proc = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=90):
        """SIGTERM and wait; SIGKILL after timeout.  The exit status."""
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


class Replica(Proc):
    def __init__(self, spindle, model, rid, port, workdir):
        super().__init__(rid, [spindle, "serve", "-m", model, "--host", "127.0.0.1",
                               "--port", str(port), "--replica-id", rid, *REPLICA_ARGS], workdir)
        self.rid = rid
        self.url = "http://127.0.0.1:%d" % port

    def wait_ready(self, timeout=180):
        def ready():
            if not self.alive():
                raise Fail("%s exited with %s: %s" % (self.rid, self.proc.returncode,
                                                      self.log_text()[-1500:]))
            try:
                return httpx.get(self.url + "/health", timeout=5).status_code == 200
            except httpx.TransportError:
                return False
        wait_for(ready, timeout, "%s to load" % self.rid)

    def metrics(self):
        out = {}
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


class HAProxy(Proc):
    def __init__(self, workdir, api_port, stats_port, replica_ports):
        mapping = {DEPLOY_API: "127.0.0.1:%d" % api_port,
                   DEPLOY_STATS: "127.0.0.1:%d" % stats_port}
        mapping.update({a: "127.0.0.1:%d" % p for a, p in zip(DEPLOY_REPLICAS, replica_ports)})
        src = os.path.join(ROOT, "deploy", "haproxy.cfg")
        cfg = os.path.join(workdir, "haproxy.cfg")
        with open(src) as f, open(cfg, "w") as g:
            g.write(rewrite(f.read(), mapping, "deploy/haproxy.cfg"))
        super().__init__("haproxy", [find_tool("haproxy"), "-db", "-f", cfg], workdir)
        self.url = "http://127.0.0.1:%d" % api_port
        self.stats_url = "http://127.0.0.1:%d" % stats_port

    def servers(self):
        """{(backend, server): row of the stats CSV}."""
        text = httpx.get(self.stats_url + "/stats;csv", timeout=10).text
        lines = text.splitlines()
        head = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            rows[(row["pxname"], row["svname"])] = row
        return rows

    def server_of(self, request_id):
        """The replica HAProxy's log names for a request (its X-Request-Id
        is captured into the log line), or None."""
        pat = re.compile(r" spindle(?:_affinity)?/(\S+) .*\{%s\}" % re.escape(request_id))
        for line in self.log_text().splitlines():
            m = pat.search(line)
            if m:
                return m.group(1)
        return None

    def status(self, rid):
        return self.servers()[("spindle", rid)]["status"]

    def wait_status(self, rid, want, timeout=120):
        wait_for(lambda: self.status(rid) == want, timeout, "HAProxy to see %s %s" % (rid, want),
                 0.2)

    def retries(self):
        """(retries, redispatches to another replica) HAProxy has made so
        far, over both backends."""
        rows = [r for (_, sv), r in self.servers().items() if sv in REPLICA_IDS]
        return (sum(int(r.get("wretr") or 0) for r in rows),
                sum(int(r.get("wredis") or 0) for r in rows))


class Prometheus(Proc):
    def __init__(self, workdir, port, stats_port, replica_ports):
        mapping = {DEPLOY_STATS: "127.0.0.1:%d" % stats_port}
        mapping.update({a: "127.0.0.1:%d" % p for a, p in zip(DEPLOY_REPLICAS, replica_ports)})
        src = os.path.join(ROOT, "deploy", "prometheus.yml")
        cfg = os.path.join(workdir, "prometheus.yml")
        with open(src) as f, open(cfg, "w") as g:
            g.write(rewrite(f.read(), mapping, "deploy/prometheus.yml"))
        super().__init__("prometheus", [
            find_tool("prometheus"), "--config.file=" + cfg,
            "--storage.tsdb.path=" + os.path.join(workdir, "prometheus-data"),
            "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"], workdir)
        self.url = "http://127.0.0.1:%d" % port

    def query(self, q):
        r = httpx.get(self.url + "/api/v1/query", params={"query": q}, timeout=10)
        body = r.json()
        check(body.get("status") == "success", "Prometheus query %s: %s" % (q, r.text[:300]))
        return body["data"]["result"]


# ---- requests ---------------------------------------------------------------

def request_body(spec, stream):
    kind, prompt, max_tokens = spec
    body = {"max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def request_path(spec):
    return "/v1/chat/completions" if spec[0] == "chat" else "/v1/completions"


def answer_text(spec, choice):
    return choice["message"]["content"] if spec[0] == "chat" else choice["text"]


def delta_text(spec, choice):
    return (choice["delta"].get("content") or "") if spec[0] == "chat" else choice["text"]


class Result:
    """One request: when, where (X-Spindle-Replica), and how it ended."""

    def __init__(self, rid, spec, stream, session):
        self.rid, self.spec, self.stream, self.session = rid, spec, stream, session
        self.t0 = time.monotonic()
        self.t1 = None
        self.replica = None
        self.status = None
        self.err = None          # None: answered correctly
        self.err_code = None     # the OpenAI error code, when there was a body
        self.cut = False         # the connection broke (a transport error)
        self.tokens = 0


def send(client, base, rid, spec, ref, stream, session, inflight):
    """One request (X-Request-Id: rid) through `base`; compares the answer
    with ref = (text, completion_tokens).  Never raises: the Result says
    what happened."""
    res = Result(rid, spec, stream, session)
    headers = {"X-Request-Id": rid}
    if session:
        headers["X-Session-Id"] = session
    body = request_body(spec, stream)
    url = base + request_path(spec)
    try:
        if stream:
            with client.stream("POST", url, json=body, headers=headers) as r:
                res.status, res.replica = r.status_code, r.headers.get("x-spindle-replica")
                if r.status_code != 200:
                    r.read()
                    return error_result(res, r)
                inflight[id(res)] = res
                text, finish, done, usage = "", None, False, None
                for ev in sse_events(r):
                    if ev == "[DONE]":
                        done = True
                        continue
                    if "error" in ev:
                        res.err = "error event: %s" % ev["error"].get("message")
                        res.err_code = ev["error"].get("code")
                        return res
                    usage = ev.get("usage") or usage
                    for ch in ev["choices"]:
                        text += delta_text(spec, ch)
                        finish = ch.get("finish_reason") or finish
                tokens = usage["completion_tokens"] if usage else -1
                compare(res, text, tokens, ref, done and finish in ("stop", "length"))
        else:
            r = client.post(url, json=body, headers=headers)
            res.status, res.replica = r.status_code, r.headers.get("x-spindle-replica")
            if r.status_code != 200:
                return error_result(res, r)
            out = r.json()
            ch = out["choices"][0]
            compare(res, answer_text(spec, ch), out["usage"]["completion_tokens"], ref,
                    ch["finish_reason"] in ("stop", "length"))
    except (httpx.HTTPError, ValueError, KeyError) as e:
        res.err = "%s: %s" % (type(e).__name__, e)
        res.cut = isinstance(e, httpx.TransportError)
    finally:
        res.t1 = time.monotonic()
        inflight.pop(id(res), None)
    return res


def error_result(res, r):
    res.err = "HTTP %d: %s" % (r.status_code, r.text[:200])
    try:
        res.err_code = r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        pass
    return res


def compare(res, text, tokens, ref, finished):
    if not finished:
        res.err = "no finish_reason / [DONE]"
    elif (text, tokens) != ref:
        res.err = "wrong answer: %r (%d tokens), expected %r (%d tokens)" % (
            text[:80], tokens, ref[0][:80], ref[1])
    else:
        res.tokens = tokens


def references(base):
    """The expected (text, completion_tokens) of every SPECS entry, from one
    replica directly."""
    def one(spec):
        r = httpx.post(base + request_path(spec), json=request_body(spec, False),
                       timeout=HTTP_TIMEOUT)
        check(r.status_code == 200, "reference request: %s" % r.text[:300])
        out = r.json()
        return spec, (answer_text(spec, out["choices"][0]), out["usage"]["completion_tokens"])
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        return dict(ex.map(one, SPECS))


class Load:
    """n client threads sending random SPECS through HAProxy until stop()."""

    def __init__(self, base, refs, n, seed):
        self.base, self.refs, self.n, self.seed = base, refs, n, seed
        self.results = []
        self.inflight = {}
        self.mu = threading.Lock()
        self.halt = threading.Event()
        self.threads = []

    def _client(self, i):
        rng = random.Random(self.seed * 1000 + i)
        n = 0
        with httpx.Client(timeout=HTTP_TIMEOUT) as client:
            while not self.halt.is_set():
                n += 1
                spec = rng.choice(SPECS)
                session = "load-%d" % rng.randrange(16) if rng.random() < 0.25 else None
                res = send(client, self.base, "load%d-%d-%d" % (self.seed, i, n), spec,
                           self.refs[spec], rng.random() < 0.5, session, self.inflight)
                with self.mu:
                    self.results.append(res)

    def start(self):
        self.t0 = time.monotonic()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(self.n)]
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        """Ends the load once every client's request in flight is answered."""
        self.halt.set()
        for t in self.threads:
            t.join(timeout=HTTP_TIMEOUT + 30)
        check(not any(t.is_alive() for t in self.threads), "a client thread hung")
        self.t1 = time.monotonic()
        return self.results

    def streams_on(self, rid):
        return sum(1 for r in list(self.inflight.values()) if r.stream and r.replica == rid)


def summarize(results, seconds):
    ok = [r for r in results if r.err is None]
    by_replica = {}
    for r in ok:
        by_replica[r.replica] = by_replica.get(r.replica, 0) + 1
    tokens = sum(r.tokens for r in ok)
    return {"requests": len(results), "ok": len(ok), "failed": len(results) - len(ok),
            "streamed": sum(1 for r in results if r.stream),
            "with_session": sum(1 for r in results if r.session),
            "by_replica": dict(sorted((str(k), v) for k, v in by_replica.items())),
            "completion_tokens": tokens, "seconds": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0}


def failures_text(results, limit=8):
    bad = [r for r in results if r.err is not None]
    return "; ".join("[%s %s on %s] %s" % (r.spec[0], "stream" if r.stream else "plain",
                                           r.replica, r.err) for r in bad[:limit])


# ---- the cluster ------------------------------------------------------------

class Cluster:
    def __init__(self, spindle, model, workdir):
        self.workdir = workdir
        ports = {rid: free_port() for rid in REPLICA_IDS}
        api, stats, prom = free_port(), free_port(), free_port()
        self.replicas = {rid: Replica(spindle, model, rid, ports[rid], workdir)
                         for rid in REPLICA_IDS}
        rports = [ports[rid] for rid in REPLICA_IDS]
        self.haproxy = HAProxy(workdir, api, stats, rports)
        self.prometheus = Prometheus(workdir, prom, stats, rports)
        self.refs = None

    def procs(self):
        return list(self.replicas.values()) + [self.haproxy, self.prometheus]

    def start(self):
        for p in self.procs():
            p.start()
        for rep in self.replicas.values():
            rep.wait_ready()
        for rid in REPLICA_IDS:
            self.haproxy.wait_status(rid, "UP")

        def prometheus_ready():
            check(self.prometheus.alive(), "prometheus exited: %s"
                  % self.prometheus.log_text()[-1500:])
            try:
                return httpx.get(self.prometheus.url + "/-/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                return False
        wait_for(prometheus_ready, 60, "Prometheus to start")
        self.refs = references(self.replicas["r1"].url)

    def restart(self, rid):
        """Starts a stopped replica again and waits until HAProxy has it UP;
        returns the seconds that took."""
        t = time.monotonic()
        rep = self.replicas[rid]
        rep.start()
        rep.wait_ready()
        self.haproxy.wait_status(rid, "UP")
        return time.monotonic() - t

    def cached_totals(self):
        """Prompt tokens and cached prompt tokens over every replica's /metrics."""
        p = c = 0
        for rep in self.replicas.values():
            m = rep.metrics()
            p += m["spindle_prompt_tokens_total"]
            c += m["spindle_prompt_tokens_cached_total"]
        return p, c


# ---- the phases ---------------------------------------------------------------

def phase_steady(cl, args):
    load = Load(cl.haproxy.url, cl.refs, args.clients, seed=1).start()
    time.sleep(args.seconds)
    results = load.stop()
    s = summarize(results, load.t1 - load.t0)
    check(s["failed"] == 0, "steady: %d of %d requests failed: %s"
          % (s["failed"], s["requests"], failures_text(results)))
    check(set(s["by_replica"]) == set(REPLICA_IDS),
          "steady: not every replica served requests: %s" % s["by_replica"])
    return s


def drained_count(text):
    """The N of the last 'draining: finishing N request(s)' line of a log."""
    lines = [l for l in text.splitlines() if "draining: finishing" in l]
    check(lines, "no drain line in the replica's log")
    return int(lines[-1].split("finishing ")[1].split(" ")[0])


def phase_rolling(cl, args):
    retries0 = cl.haproxy.retries()
    load = Load(cl.haproxy.url, cl.refs, args.clients, seed=2).start()
    time.sleep(3)
    restarts = []
    for rid in REPLICA_IDS:
        rep = cl.replicas[rid]
        log_start = len(rep.log_text())
        t = time.monotonic()
        rep.proc.terminate()
        try:
            rc = rep.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise Fail("rolling: %s did not finish its drain in 120 s" % rid)
        drain_s = time.monotonic() - t
        text = rep.log_text()[log_start:]
        check(rc == 0, "rolling: %s exited with %s after SIGTERM" % (rid, rc))
        check("drain cut short" not in text, "rolling: %s cut requests short: %s" % (rid, text))
        in_flight = drained_count(text)
        back_s = cl.restart(rid)
        restarts.append({"replica": rid, "in_flight_at_sigterm": in_flight,
                         "drain_s": round(drain_s, 1), "back_up_s": round(back_s, 1)})
        log("rolling: %s drained %d request(s) in %.1f s, back UP after %.1f s"
            % (rid, in_flight, drain_s, back_s))
    time.sleep(3)
    results = load.stop()
    s = summarize(results, load.t1 - load.t0)
    check(s["failed"] == 0, "rolling: %d of %d requests failed: %s"
          % (s["failed"], s["requests"], failures_text(results)))
    check(sum(r["in_flight_at_sigterm"] for r in restarts) > 0,
          "rolling: no replica had a request in flight at SIGTERM; the drain went untested")
    s["restarts"] = restarts
    retries1 = cl.haproxy.retries()
    s["haproxy_retries"] = retries1[0] - retries0[0]
    s["haproxy_redispatches"] = retries1[1] - retries0[1]
    return s


def phase_kill(cl, args):
    victim = "r2"
    rep = cl.replicas[victim]
    load = Load(cl.haproxy.url, cl.refs, args.clients, seed=3).start()
    wait_for(lambda: load.streams_on(victim) >= 2, 120, "two streams running on " + victim)
    streams_running = load.streams_on(victim)
    rep.proc.kill()
    rep.proc.wait()
    t_kill = time.monotonic()   # requests sent from here on cannot reach it
    time.sleep(args.after_kill)
    results = load.stop()
    bad = [r for r in results if r.err is not None]
    traced = silent = 0
    for r in bad:
        closed = False
        if r.replica is None:
            # A stream cut before its headers reached the client: HAProxy's
            # log says where it ran.
            r.replica = cl.haproxy.server_of(r.rid)
            traced += r.replica is not None
        if r.replica is None and r.cut:
            # A request on a reused client connection whose replica closed
            # without answering: HAProxy closes the client's connection
            # without a response or a log line, so that the client may
            # retry.  Every replica logs each request it answers with its
            # X-Request-Id; no survivor may have this one.
            survivors = [rid for rid in REPLICA_IDS if rid != victim and
                         re.search(r" request_id=%s$" % re.escape(r.rid),
                                   cl.replicas[rid].log_text(), re.M)]
            check(not survivors, "kill: %s answered request %s, yet the client got no answer: %s"
                  % (survivors, r.rid, r.err))
            r.replica, closed = victim, True
            silent += 1
        what = "[%s %s on %s] %s" % (r.spec[0], "stream" if r.stream else "plain", r.replica,
                                     r.err)
        check(r.t0 < t_kill, "kill: a request sent after the kill failed: " + what)
        check(r.replica == victim, "kill: a request on a surviving replica failed: " + what)
        clear = ((r.stream and r.cut) or closed or
                 (r.status == 502 and r.err_code == "replica_failed"))
        check(clear, "kill: a failure without a clear error: " + what)
    check(bad, "kill: no request failed, so the kill hit nothing")
    after = [r for r in results if r.t0 >= t_kill]
    check(after, "kill: no request was sent after the kill")
    s = summarize(results, load.t1 - load.t0)
    s.update({"killed": victim, "streams_running_on_it": streams_running,
              "failed_streams": sum(1 for r in bad if r.stream),
              "failed_streams_without_headers": traced,
              "failed_non_streamed_502": sum(1 for r in bad if not r.stream and r.status == 502),
              "failed_closed_unanswered": silent,
              "sent_after_kill": len(after),
              "sent_after_kill_ok": sum(1 for r in after if r.err is None)})
    s["back_up_s"] = round(cl.restart(victim), 1)
    return s


WORDS = ("order invoice shipping warranty refund parcel address account password delivery "
         "store receipt battery charger screen keyboard cable adapter router printer "
         "monday friday morning evening quickly politely carefully exactly").split()


def system_prompt(tag):
    rng = random.Random(tag)
    rules = ["Rule %d: when a customer asks about %s, explain the %s policy %s." % (
        i, rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)) for i in range(1, 25)]
    return ("You are the support assistant of the %s electronics store. " % tag
            + " ".join(rules) + " Answer in one short sentence.")


def user_turn(tag, conv, turn):
    rng = random.Random("%s-%d-%d" % (tag, conv, turn))
    return "Customer %d, question %d: " % (conv, turn + 1) + " ".join(
        rng.choice(WORDS) for _ in range(30)) + "?"


def conversations(cl, tag, keyed, n_conv, turns):
    """n_conv conversations of `turns` turns, all with the same system prompt,
    in rounds: every conversation's next turn is sent at once, as users who
    pause between turns do (a client that sends its next turn the moment
    the last answer arrives would find its replica least loaded and return
    to it by chance).  keyed: even conversations send X-Session-Id, odd ones
    the `user` field.  Returns the hit rate and where the turns went."""
    system = system_prompt(tag)
    p0, c0 = cl.cached_totals()
    msgs = [[{"role": "system", "content": system}] for _ in range(n_conv)]
    seen = [[] for _ in range(n_conv)]   # (prompt_tokens, cached_tokens, replica)

    def turn(i, t):
        cid = "%s-conversation-%d" % (tag, i)
        msgs[i].append({"role": "user", "content": user_turn(tag, i, t)})
        body = {"messages": msgs[i], "max_tokens": 12, "temperature": 0}
        headers = {}
        if keyed and i % 2 == 0:
            headers["X-Session-Id"] = cid
        elif keyed:
            body["user"] = cid
        r = httpx.post(cl.haproxy.url + "/v1/chat/completions", json=body, headers=headers,
                       timeout=HTTP_TIMEOUT)
        check(r.status_code == 200, "affinity: %s" % r.text[:300])
        out = r.json()
        u = out["usage"]
        seen[i].append((u["prompt_tokens"],
                        (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                        r.headers["x-spindle-replica"]))
        msgs[i].append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})

    rng = random.Random(tag)
    with concurrent.futures.ThreadPoolExecutor(max_workers=n_conv) as ex:
        for t in range(turns):
            order = list(range(n_conv))
            rng.shuffle(order)
            list(ex.map(lambda i: turn(i, t), order))
    prompt = sum(p for c in seen for p, _, _ in c)
    cached = sum(k for c in seen for _, k, _ in c)
    p1, c1 = cl.cached_totals()
    check((p1 - p0, c1 - c0) == (prompt, cached),
          "affinity: the replicas' /metrics count %d prompt / %d cached tokens, the clients "
          "%d / %d" % (p1 - p0, c1 - c0, prompt, cached))
    return {"requests": n_conv * turns, "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 3),
            "conversations_on_one_replica": sum(1 for c in seen
                                                if len({rid for _, _, rid in c}) == 1),
            "conversations": n_conv}


def phase_affinity(cl, args):
    least = conversations(cl, "leastconn", False, args.conversations, args.turns)
    hashed = conversations(cl, "hashed", True, args.conversations, args.turns)
    check(hashed["conversations_on_one_replica"] == args.conversations,
          "affinity: keyed conversations moved between replicas: %s" % hashed)
    check(hashed["hit_rate"] > least["hit_rate"],
          "affinity: hashing's hit rate %.3f is not above least connections' %.3f"
          % (hashed["hit_rate"], least["hit_rate"]))
    return {"leastconn": least, "hashed": hashed}


def phase_prometheus(cl, args):
    def all_up():
        res = cl.prometheus.query('up{job="spindle"}')
        return len(res) == len(REPLICA_IDS) and all(r["value"][1] == "1" for r in res)
    wait_for(all_up, 60, "Prometheus to scrape every replica", 1)
    info = cl.prometheus.query("spindle_replica_info")
    replicas = sorted(r["metric"]["replica"] for r in info)
    check(replicas == list(REPLICA_IDS), "Prometheus sees replicas %s" % replicas)
    hap = cl.prometheus.query('up{job="haproxy"}')
    check(len(hap) == 1 and hap[0]["value"][1] == "1", "Prometheus: HAProxy not scraped: %s"
          % hap)
    active = wait_for(
        lambda: cl.prometheus.query('haproxy_backend_active_servers{proxy="spindle"}'),
        30, "HAProxy's backend metrics in Prometheus", 1)
    tokens = cl.prometheus.query("sum(spindle_generated_tokens_total)")
    check(tokens and float(tokens[0]["value"][1]) > 0, "Prometheus: no generated tokens")
    return {"spindle_targets_up": len(replicas), "replicas": replicas,
            "haproxy_active_servers": float(active[0]["value"][1]),
            "generated_tokens_now": float(tokens[0]["value"][1])}


def cpu_seconds(pid):
    """User plus system CPU seconds a process has used (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_now(cl):
    """CPU seconds so far of the replicas running, HAProxy, and this process
    (the clients)."""
    reps = sum(cpu_seconds(r.proc.pid) for r in cl.replicas.values() if r.alive())
    t = os.times()
    return reps, cpu_seconds(cl.haproxy.proc.pid), t.user + t.system


def phase_scaling(cl, args):
    """Aggregate tokens/s through HAProxy with 3, then 2, then 1 replica up,
    and the cores the replicas, HAProxy and the clients used meanwhile."""
    rows = []
    for n in (3, 2, 1):
        if n < len(REPLICA_IDS):
            rid = REPLICA_IDS[n]
            check(cl.replicas[rid].stop() == 0, "scaling: %s did not exit 0" % rid)
            cl.haproxy.wait_status(rid, "DOWN")
        load = Load(cl.haproxy.url, cl.refs, args.clients, seed=10 + n).start()
        time.sleep(5)
        with load.mu:
            k0, t0, cpu0 = len(load.results), time.monotonic(), cpu_now(cl)
        time.sleep(args.scaling)
        with load.mu:
            window, t1, cpu1 = load.results[k0:], time.monotonic(), cpu_now(cl)
        results = load.stop()
        check(all(r.err is None for r in results), "scaling (%d replicas): %s"
              % (n, failures_text(results)))
        row = summarize(window, t1 - t0)
        row["replicas"] = n
        for k, a, b in zip(("replica_cores", "haproxy_cores", "client_cores"), cpu0, cpu1):
            row[k] = round((b - a) / (t1 - t0), 2)
        rows.append(row)
        log("scaling: %d replica(s): %.1f tokens/s (%d requests in %.0f s; cores used: "
            "replicas %.2f, HAProxy %.2f, clients %.2f)"
            % (n, row["tokens_per_s"], row["requests"], row["seconds"], row["replica_cores"],
               row["haproxy_cores"], row["client_cores"]))
    return rows


# ---- main ---------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spindle", default=os.path.join(ROOT, "build", "spindle"))
    ap.add_argument("--model", required=True, help="GGUF model for the replicas")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60, help="steady load")
    ap.add_argument("--after-kill", type=float, default=10,
                    help="load after the kill -9 before counting")
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--scaling", type=float, default=0,
                    help="seconds per replica count for the tokens/s table (0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    for tool in ("haproxy", "prometheus"):
        if not find_tool(tool):
            print("cluster-test: %s not found; run scripts/setup --cluster" % tool,
                  file=sys.stderr)
            return 2
    if not os.access(args.spindle, os.X_OK):
        print("cluster-test: %s is not built; run make" % args.spindle, file=sys.stderr)
        return 2
    # SIGTERM (from `timeout`) unwinds through the finally below, which stops
    # every process started here.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    workdir = tempfile.mkdtemp(prefix="spindle-cluster-")
    cl = Cluster(os.path.abspath(args.spindle), os.path.abspath(args.model), workdir)
    report = {"clients": args.clients, "loadavg_start": os.getloadavg()[0]}
    phases = [("steady", phase_steady), ("rolling", phase_rolling), ("kill", phase_kill),
              ("affinity", phase_affinity), ("prometheus", phase_prometheus)]
    if args.scaling > 0:
        phases.append(("scaling", phase_scaling))
    failure = None
    t_all = time.monotonic()
    try:
        log("starting 3 replicas, HAProxy and Prometheus (logs in %s)" % workdir)
        cl.start()
        for name, fn in phases:
            t = time.monotonic()
            log("%s ..." % name)
            report[name] = fn(cl, args)
            log("%s: passed in %.0f s: %s" % (name, time.monotonic() - t,
                                              json.dumps(report[name])))
    except (Fail, AssertionError, httpx.HTTPError) as e:
        failure = "%s: %s" % (type(e).__name__, e)
    finally:
        for p in cl.procs():
            code = p.stop()
            if isinstance(p, Replica) and code not in (0, None) and not failure:
                failure = "%s exited with %s on SIGTERM" % (p.name, code)
        if failure:
            for p in cl.procs():
                log("--- last lines of %s:\n%s" % (p.log_path, p.log_text()[-2000:]))
            log("FAILED: " + failure)
    rc = 1 if failure else 0
    report["seconds"] = round(time.monotonic() - t_all, 1)
    report["loadavg_end"] = os.getloadavg()[0]
    report["passed"] = rc == 0
    if failure:
        report["failure"] = failure
    if rc == 0 and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report))
    return rc


if __name__ == "__main__":
    sys.exit(main())
