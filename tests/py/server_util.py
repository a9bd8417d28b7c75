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
        """model_path: given as -m (None: none, e.g. with --models-dir in
        args); api_key: passed as --api-key and sent by headers(); env: the
        server's environment (default: this process's); preexec_fn: run in
        the child before exec (e.g. to lower a resource limit)."""
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.api_key = api_key
        self.model_id = os.path.basename(model_path) if model_path else None
        if self.model_id and self.model_id.endswith(".gguf"):
            self.model_id = self.model_id[:-5]
        argv = [spindle_bin, "serve"] + (["-m", model_path] if model_path else []) + ["--port", str(self.port)]
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



def read_until_closed(sock):
    """Every byte sock receives until the server closes it (or resets it)."""
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got

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


def gguf_with_chat_template(src, dst, template):
    """Copies the GGUF model `src` to `dst` with tokenizer.chat_template set
    to `template` (the tensors' bytes unchanged: their offsets are relative
    to the data section, which is re-aligned after the new metadata)."""
    import struct
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(f, vtype):
        if vtype in sizes:
            f.read(sizes[vtype])
        elif vtype == 8:
            f.read(struct.unpack("<Q", f.read(8))[0])
        elif vtype == 9:
            etype, n = struct.unpack("<IQ", f.read(12))
            for _ in range(n):
                skip_value(f, etype)
        else:
            raise ValueError("unknown GGUF value type %d" % vtype)

    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    with open(src, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF", src
        kvs, alignment, found = [], 32, False
        for _ in range(n_kv):
            start = f.tell()
            key = f.read(struct.unpack("<Q", f.read(8))[0]).decode()
            vtype = struct.unpack("<I", f.read(4))[0]
            vstart = f.tell()
            skip_value(f, vtype)
            end = f.tell()
            if key == "general.alignment":
                f.seek(vstart)
                alignment = struct.unpack("<I", f.read(4))[0]
                f.seek(end)
            if key == "tokenizer.chat_template":
                found = True
                kvs.append(string(key) + struct.pack("<I", 8) + string(template))
            else:
                f.seek(start)
                kvs.append(f.read(end - start))
        if not found:
            kvs.append(string("tokenizer.chat_template") + struct.pack("<I", 8) + string(template))
        infos_start = f.tell()
        for _ in range(n_tensors):
            f.read(struct.unpack("<Q", f.read(8))[0])
            n_dims = struct.unpack("<I", f.read(4))[0]
            f.read(8 * n_dims + 4 + 8)
        infos_end = f.tell()
        f.seek(infos_start)
        infos = f.read(infos_end - infos_start)
        data_start = (infos_end + alignment - 1) // alignment * alignment
        f.seek(data_start)
        with open(dst, "wb") as out:
            head = struct.pack("<4sIQQ", magic, version, n_tensors, len(kvs)) + b"".join(kvs) + infos
            out.write(head + b"\0" * ((-len(head)) % alignment))
            while True:
                chunk = f.read(1 << 24)
                if not chunk:
                    break
                out.write(chunk)
