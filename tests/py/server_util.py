"""Helpers for the `spindle serve` tests: start a server on a free loopback
port, wait for /health, talk to it with httpx, stop it with SIGTERM."""
import json
import os
import signal
import socket
import subprocess
import time

import httpx

START_TIMEOUT = float(os.environ.get("SP_SERVER_START_TIMEOUT", "180"))


def wait_for(pred, timeout=30, what="condition", interval=0.05):
    """Polls pred() until it returns something truthy (returned), or fails
    after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for " + what)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `spindle serve` subprocess."""

    def __init__(self, spindle_bin, model_path, *args, api_key=None, env=None, preexec_fn=None):
        """api_key: passed as --api-key and sent by headers(); env: the
        server's environment (default: this process's); preexec_fn: run in
        the child before exec (e.g. to lower a resource limit)."""
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.api_key = api_key
        self.model_id = os.path.basename(model_path)
        if self.model_id.endswith(".gguf"):
            self.model_id = self.model_id[:-5]
        argv = [spindle_bin, "serve", "-m", model_path, "--port", str(self.port)]
        argv += [str(a) for a in args]
        if api_key:
            argv += ["--api-key", api_key]
        self.argv = argv
        self.log_path = "/tmp/spindle-serve-%d.log" % self.port
        self.log = open(self.log_path, "w+b")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=preexec_fn)
        self._wait_ready()

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("spindle serve exited with %d: %s"
                                     % (self.proc.returncode, self.log_text()[-2000:]))
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
                assert r.status_code == 503, r.text
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError("spindle serve not ready after %.0fs" % START_TIMEOUT)

    def headers(self):
        return {"Authorization": "Bearer " + self.api_key} if self.api_key else {}

    def post(self, path, body, timeout=300, headers=None, raw=None):
        h = self.headers()
        h.update(headers or {})
        if raw is not None:
            return httpx.post(self.url + path, content=raw, headers=h, timeout=timeout)
        return httpx.post(self.url + path, json=body, headers=h, timeout=timeout)

    def get(self, path, timeout=30):
        return httpx.get(self.url + path, headers=self.headers(), timeout=timeout)

    def metrics(self):
        """/metrics as {name-with-labels: float}."""
        r = self.get("/metrics")
        assert r.status_code == 200, r.text
        out = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def openai(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key or "unused",
                             max_retries=0, **kw)

    def stop(self, timeout=120):
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("spindle serve did not exit within %ds of SIGTERM" % timeout)
        self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sse_events(response):
    """Yields the parsed `data:` payloads of a streaming httpx response
    (the string "[DONE]" for the terminator)."""
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        yield payload if payload == "[DONE]" else json.loads(payload)


def assert_openai_error(r, status, param=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    if param is not None:
        assert err["param"] == param, err
    return err
