"""spindle pull / list / rm and -m NAME, against a small Hugging Face hub
served by the test itself (the tests never reach the real hub).

FakeHub (http.server on 127.0.0.1, threaded) answers the hub's URL layout
with its headers:
  GET /api/models/ORG/REPO?blobs=true    the model listing (id, sha,
      siblings[].rfilename, size, lfs.sha256/size/pointerSize); an unknown
      repository is 401 without a token and 404 with one, as the hub
      answers; a renamed repository redirects (307) to its new id
  GET /ORG/REPO/resolve/REV/FILE          302 to the blob on another host
      name (http://localhost:PORT/blob/SHA256), with X-Repo-Commit,
      X-Linked-Size, X-Linked-Etag and ETag, as the hub sends before its CDN
  GET /blob/SHA256                        the bytes, Range: bytes=N- -> 206
      with Content-Range; a file set to be cut sends half of what it
      promised and closes the connection
Every request is logged with its path and headers.
"""
import hashlib
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gguf"))
import ggufsplit  # noqa: E402
from ggufgen import Model  # noqa: E402

REPO = "tiny/Tiny-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def gguf_bytes(seed):
    return Model(seed=seed).build()


class FakeHub:
    def __init__(self):
        self.repos = {}       # "org/repo" -> {"files": {rfilename: bytes}, "sha": {rfilename: listed sha256}}
        self.aliases = {}     # old "org/repo" -> new
        self.blobs = {}       # sha256 -> bytes
        self.cuts = {}        # sha256 -> how many more responses to cut
        self.before_body = None   # called before a blob's body is sent
        self.ranges = True        # False: Range is ignored (200, the whole file)
        self.gated = set()        # repos whose files need a token: 401 without one
        self.raw = {}             # repo -> the listing's body as given (hostile listings)
        self.log = []
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with hub.lock:
                    hub.log.append((self.path, dict(self.headers)))
                hub.answer(self)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # a client that stops reading (a full disk, a bad range) is expected
                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def add(self, repo, files, wrong_sha=()):
        entry = {"files": dict(files), "sha": {}}
        for name, data in files.items():
            sha = hashlib.sha256(data).hexdigest()
            self.blobs[sha] = data
            entry["sha"][name] = ("0" * 64) if name in wrong_sha else sha
        self.repos[repo] = entry

    def requests(self, prefix):
        with self.lock:
            return [(p, h) for p, h in self.log if p.startswith(prefix)]

    # --- answers ---------------------------------------------------------
    def send(self, h, status, body=b"", headers=()):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def answer(self, h):
        path, _, query = h.path.partition("?")
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)", path)
        if m:
            return self.listing(h, m.group(1), query)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self.resolve(h, m.group(1), m.group(2), m.group(3))
        m = re.fullmatch(r"/blob/([0-9a-f]{64})", path)
        if m and m.group(1) in self.blobs:
            return self.blob(h, m.group(1))
        self.send(h, 404, b"Entry not found", [("X-Error-Code", "EntryNotFound")])

    def listing(self, h, repo, query):
        if repo in self.aliases:
            return self.send(h, 307, b"", [("Location", "/api/models/%s?%s" % (self.aliases[repo], query))])
        if repo in self.raw:
            return self.send(h, 200, self.raw[repo], [("Content-Type", "application/json")])
        if repo not in self.repos:
            status = 404 if h.headers.get("Authorization") else 401
            return self.send(h, status, json.dumps({"error": "Repository not found"}).encode(),
                             [("Content-Type", "application/json"), ("X-Error-Code", "RepoNotFound")])
        assert query == "blobs=true", query
        r = self.repos[repo]
        siblings = []
        for name, data in r["files"].items():
            s = {"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
            if name.endswith(".gguf"):
                s["lfs"] = {"sha256": r["sha"][name], "size": len(data), "pointerSize": 134}
            siblings.append(s)
        body = json.dumps({"_id": "66f0", "id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                           "gated": False, "tags": ["gguf"], "siblings": siblings}).encode()
        self.send(h, 200, body, [("Content-Type", "application/json")])

    def resolve(self, h, repo, rev, name):
        r = self.repos.get(repo)
        if not r or rev not in ("main", COMMIT) or name not in r["files"]:
            return self.send(h, 404, b"Entry not found", [("X-Error-Code", "EntryNotFound")])
        if repo in self.gated and not h.headers.get("Authorization"):
            return self.send(h, 401, b"Access to model %s is restricted." % repo.encode(),
                             [("X-Error-Code", "GatedRepo")])
        data = r["files"][name]
        sha = hashlib.sha256(data).hexdigest()
        # the hub's CDN is another host: the redirect goes to another name
        self.send(h, 302, b"", [("Location", "http://localhost:%d/blob/%s" % (self.port, sha)),
                                ("X-Repo-Commit", COMMIT), ("X-Linked-Size", str(len(data))),
                                ("X-Linked-Etag", '"%s"' % sha), ("ETag", '"%s"' % sha)])

    def blob(self, h, sha):
        data = self.blobs[sha]
        start = 0
        rng = h.headers.get("Range") if self.ranges else None
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-", rng)
            start = int(m.group(1))
            if start >= len(data):
                return self.send(h, 416, b"", [("Content-Range", "bytes */%d" % len(data))])
        body = data[start:]
        h.send_response(206 if rng else 200)
        if rng:
            h.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("ETag", '"%s"' % sha)
        h.end_headers()
        if self.before_body:
            self.before_body()
        with self.lock:
            cut = self.cuts.get(sha, 0) > 0
            if cut:
                self.cuts[sha] -= 1
        if cut:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.close()


@pytest.fixture
def tiny_repo(hub):
    files = {"Tiny-Q4_K_M.gguf": gguf_bytes(0), "Tiny-Q8_0.gguf": gguf_bytes(1),
             "mmproj-Tiny-F16.gguf": b"GGUF projector", "README.md": b"# Tiny\n"}
    hub.add(REPO, files)
    return files


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def sp(run_spindle, hub, store):
    """Runs spindle against the fake hub and the test's store."""
    def run(*args, env=None, **kw):
        e = {"HF_ENDPOINT": hub.url, "SPINDLE_MODELS": str(store), "HF_TOKEN": "", "NO_PROXY": "*"}
        e.update(env or {})
        return run_spindle(*args, env=e, timeout=120, **kw)
    return run


def model_dir(store, repo=REPO, quant="Q4_K_M"):
    return store / "hf.co" / repo / quant


def files_under(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


def error_line(r):
    """The one error line of a failed command (the pull: step lines aside)."""
    lines = [l for l in r.stderr.strip().splitlines() if not l.startswith("pull: ")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("spindle: "), lines[0]
    return lines[0]


def test_pull_default_quant_and_use_it_by_name(sp, hub, store, tiny_repo):
    r = sp("pull", "hf.co/" + REPO)
    assert r.returncode == 0, r.stderr
    path = model_dir(store) / "Tiny-Q4_K_M.gguf"
    assert r.stdout == "%s\n" % path
    assert path.read_bytes() == tiny_repo["Tiny-Q4_K_M.gguf"]
    assert files_under(store) == [os.path.join("hf.co", REPO, "Q4_K_M", f)
                                  for f in ("Tiny-Q4_K_M.gguf", "manifest.json")]
    man = json.loads((model_dir(store) / "manifest.json").read_text())
    assert man["name"] == REPO + ":Q4_K_M" and man["repo"] == REPO and man["quant"] == "Q4_K_M"
    assert man["source"] == hub.url and man["revision"] == COMMIT
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", man["pulled"])
    data = tiny_repo["Tiny-Q4_K_M.gguf"]
    assert man["files"] == [{"name": "Tiny-Q4_K_M.gguf", "hub_path": "Tiny-Q4_K_M.gguf", "size": len(data),
                             "sha256": hashlib.sha256(data).hexdigest()}]
    # not a terminal: step lines only, no progress line
    assert "\r" not in r.stderr and all(l.startswith("pull: ") for l in r.stderr.splitlines()), r.stderr
    # the listing with blobs, the file at the listed commit, redirected to the blob
    assert [p for p, _ in hub.requests("/api/")] == ["/api/models/%s?blobs=true" % REPO]
    assert [p for p, _ in hub.requests("/" + REPO)] == ["/%s/resolve/%s/Tiny-Q4_K_M.gguf" % (REPO, COMMIT)]
    assert len(hub.requests("/blob/")) == 1

    r = sp("info", "-m", REPO + ":Q4_K_M")
    assert r.returncode == 0, r.stderr
    assert "file:            %s" % path in r.stdout
    for name in ("Tiny-GGUF", "tiny/tiny-gguf", "hf.co/" + REPO, "Tiny-GGUF:q4_k_m"):
        r = sp("run", "-m", name, "-p", "hi", "-n", "3", "--temp", "0", "--ignore-eos", "--json")
        assert r.returncode == 0, (name, r.stderr)
        assert r.json()["usage"]["completion_tokens"] == 3
    r = sp("tokenize", "-m", "Tiny-GGUF", "hi")
    assert r.returncode == 0 and r.stdout.split(), r.stderr


def test_explicit_quant_list_rm_and_ambiguous_names(sp, hub, store, tiny_repo):
    assert sp("pull", REPO).returncode == 0
    r = sp("pull", REPO + ":q8_0")
    assert r.returncode == 0, r.stderr
    q8 = model_dir(store, quant="Q8_0") / "Tiny-Q8_0.gguf"
    assert r.stdout.strip() == str(q8) and q8.read_bytes() == tiny_repo["Tiny-Q8_0.gguf"]

    r = sp("list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "QUANT", "SIZE", "PATH"]
    rows = [l.split() for l in lines[1:]]
    kib = "%.1f" % (len(tiny_repo["Tiny-Q8_0.gguf"]) / 1024)
    assert rows == [[REPO, "Q4_K_M", "%.1f" % (len(tiny_repo["Tiny-Q4_K_M.gguf"]) / 1024), "KiB",
                     str(model_dir(store) / "Tiny-Q4_K_M.gguf")],
                    [REPO, "Q8_0", kib, "KiB", str(q8)]]

    for name in ("Tiny-GGUF", REPO):
        r = sp("info", "-m", name)
        assert r.returncode == 2
        line = error_line(r)
        assert "ambiguous" in line and REPO + ":Q4_K_M" in line and REPO + ":Q8_0" in line, line
    r = sp("info", "-m", "Tiny-GGUF:Q8_0")
    assert r.returncode == 0 and str(q8) in r.stdout, r.stderr
    r = sp("rm", "Tiny-GGUF")
    assert r.returncode == 2 and "ambiguous" in error_line(r)

    r = sp("rm", "Tiny-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    assert "removed " + REPO + ":Q8_0" in r.stderr
    assert not (store / "hf.co" / REPO / "Q8_0").exists()
    r = sp("list")
    assert [l.split()[:2] for l in r.stdout.splitlines()[1:]] == [[REPO, "Q4_K_M"]]
    # now one model answers to the short name
    r = sp("info", "-m", "Tiny-GGUF")
    assert r.returncode == 0, r.stderr
    r = sp("rm", "Tiny-GGUF:Q8_0")
    assert r.returncode == 2 and "no stored model" in error_line(r) and REPO + ":Q4_K_M" in r.stderr
    assert sp("rm", REPO).returncode == 0
    assert files_under(store) == [] and not (store / "hf.co").exists()
    r = sp("list")
    assert r.returncode == 0 and r.stdout == "" and "no models stored" in r.stderr


def test_a_missing_quantization_names_those_there_are(sp, store, tiny_repo):
    r = sp("pull", REPO + ":Q5_K_S")
    assert r.returncode == 2
    line = error_line(r)
    assert "no GGUF file of Q5_K_S" in line and "Q4_K_M, Q8_0" in line, line
    assert "F16" not in line      # the multimodal projector is no model
    assert not store.exists() or files_under(store) == []


def test_quant_tags_match_whole_words(sp, hub, store):
    hub.add("org/Words", {"W-Q4_K.gguf": b"GGUF a", "W-Q4_K_M.gguf": b"GGUF b", "W-UD-Q4_K_XL.gguf": b"GGUF c",
                          "W-Q4_K_XL.gguf": b"GGUF d"})
    r = sp("pull", "org/Words:Q4_K")
    assert r.returncode == 0, r.stderr
    assert (model_dir(store, "org/Words", "Q4_K") / "W-Q4_K.gguf").read_bytes() == b"GGUF a"
    r = sp("pull", "org/Words:Q4_K_XL")
    assert r.returncode == 2
    line = error_line(r)
    assert "several GGUF files of Q4_K_XL" in line and "W-UD-Q4_K_XL.gguf" in line, line
    r = sp("pull", "org/Words:ud-q4_k_xl")
    assert r.returncode == 0, r.stderr
    assert (model_dir(store, "org/Words", "UD-Q4_K_XL") / "W-UD-Q4_K_XL.gguf").read_bytes() == b"GGUF c"


def test_split_gguf_is_fetched_whole(sp, hub, store):
    blob = os.urandom(3000)
    parts = {"Q4_K_M/Big-Q4_K_M-%05d-of-00003.gguf" % (i + 1): blob[i * 1000:(i + 1) * 1000] for i in range(3)}
    hub.add("org/Big-GGUF", dict(parts, **{"Big-Q8_0.gguf": b"GGUF q8"}))
    r = sp("pull", "org/Big-GGUF")
    assert r.returncode == 0, r.stderr
    d = model_dir(store, "org/Big-GGUF")
    names = ["Big-Q4_K_M-%05d-of-00003.gguf" % (i + 1) for i in range(3)]
    assert r.stdout.strip() == str(d / names[0])
    assert b"".join((d / n).read_bytes() for n in names) == blob
    man = json.loads((d / "manifest.json").read_text())
    assert [f["name"] for f in man["files"]] == names
    assert [f["hub_path"] for f in man["files"]] == ["Q4_K_M/" + n for n in names]
    assert [f["sha256"] for f in man["files"]] == [hashlib.sha256(parts["Q4_K_M/" + n]).hexdigest() for n in names]
    r = sp("list")
    assert "2.9 KiB" in r.stdout and str(d / names[0]) in r.stdout, r.stdout
    # a set with a part missing is refused
    hub.add("org/Holes", {"H-Q4_K_M-00001-of-00003.gguf": b"a", "H-Q4_K_M-00003-of-00003.gguf": b"c"})
    r = sp("pull", "org/Holes")
    assert r.returncode == 1 and "incomplete split set" in error_line(r)


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "no-range"])
def test_a_cut_download_resumes_in_the_same_run(sp, hub, store, tiny_repo, ranges):
    """The second try asks for the rest; a server that ignores Range and
    sends the whole file (200) is written from the start again."""
    data = tiny_repo["Tiny-Q4_K_M.gguf"]
    sha = hashlib.sha256(data).hexdigest()
    hub.cuts[sha] = 1
    hub.ranges = ranges
    r = sp("pull", REPO)
    assert r.returncode == 0, r.stderr
    assert "connection lost at %d of %d bytes" % (len(data) // 2, len(data)) in r.stderr
    assert (model_dir(store) / "Tiny-Q4_K_M.gguf").read_bytes() == data
    ranges = [h.get("Range") for _, h in hub.requests("/blob/")]
    assert ranges == [None, "bytes=%d-" % (len(data) // 2)]
    assert files_under(model_dir(store)) == ["Tiny-Q4_K_M.gguf", "manifest.json"]


def test_pulled_split_model_runs_by_name(sp, hub, store, tmp_path):
    """A split model pulled whole loads from its name: every part (ggufsplit:
    gguf-split's layout), answering as the single file does."""
    single = tmp_path / "single.gguf"
    single.write_bytes(gguf_bytes(2))
    files = {}
    for i, part in enumerate(ggufsplit.plan(str(single), 3)):
        p = tmp_path / ggufsplit.part_name("Split-Q8_0", i, 3)
        ggufsplit.write_part(str(p), part)
        files[p.name] = p.read_bytes()
    hub.add("org/Split-GGUF", files)
    r = sp("pull", "org/Split-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    r = sp("info", "-m", "Split-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith("part ")]) == 3, r.stdout
    args = ("-p", "hello", "-n", "6", "--temp", "0", "--ignore-eos")
    by_name, by_file = sp("run", "-m", "org/Split-GGUF:Q8_0", *args), sp("run", "-m", single, *args)
    assert by_name.returncode == 0 and by_file.returncode == 0, (by_name.stderr, by_file.stderr)
    assert by_name.stdout == by_file.stdout


def test_a_split_set_cut_in_its_second_part(sp, hub, store):
    """The first part, verified, has its final name; the second stays
    .partial; the next pull keeps the first (checked again) and resumes the
    second."""
    parts = {"S-Q8_0-%05d-of-00002.gguf" % (i + 1): os.urandom(4000) for i in range(2)}
    hub.add("org/Split", parts)
    second = parts["S-Q8_0-00002-of-00002.gguf"]
    hub.cuts[hashlib.sha256(second).hexdigest()] = 5
    r = sp("pull", "org/Split:Q8_0")
    assert r.returncode == 1 and "network error" in error_line(r)
    d = model_dir(store, "org/Split", "Q8_0")
    assert files_under(d) == ["S-Q8_0-00001-of-00002.gguf", "S-Q8_0-00002-of-00002.gguf.partial"]
    r = sp("pull", "org/Split:Q8_0")
    assert r.returncode == 0, r.stderr
    assert "S-Q8_0-00001-of-00002.gguf: already here, sha256 ok" in r.stderr
    assert "S-Q8_0-00002-of-00002.gguf: resuming at 3875 of 4000 bytes" in r.stderr
    assert [(d / n).read_bytes() for n in sorted(parts)] == [parts[n] for n in sorted(parts)]


def test_one_pull_of_a_model_at_a_time(sp, hub, store, tiny_repo):
    import fcntl
    d = model_dir(store)
    d.mkdir(parents=True)
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = sp("pull", REPO)
        assert r.returncode == 1 and "another spindle is pulling or removing " + REPO in error_line(r)
    finally:
        os.close(fd)
    assert sp("pull", REPO).returncode == 0


def test_a_cut_download_resumes_in_the_next_run(sp, hub, store, tiny_repo):
    data = tiny_repo["Tiny-Q4_K_M.gguf"]
    hub.cuts[hashlib.sha256(data).hexdigest()] = 5
    r = sp("pull", REPO)
    assert r.returncode == 1
    line = error_line(r)
    assert "network error" in line and "spindle pull again resumes" in line, line
    d = model_dir(store)
    have = 0
    for _ in range(5):                # each try brings half of what is left
        have += (len(data) - have) // 2
    assert files_under(d) == ["Tiny-Q4_K_M.gguf.partial"]
    assert (d / "Tiny-Q4_K_M.gguf.partial").read_bytes() == data[:have]
    assert sp("list").stdout == ""          # not stored
    assert sp("info", "-m", "Tiny-GGUF").returncode == 2

    n_before = len(hub.requests("/blob/"))
    r = sp("pull", REPO)
    assert r.returncode == 0, r.stderr
    assert "resuming at %d of %d bytes" % (have, len(data)) in r.stderr
    assert [h.get("Range") for _, h in hub.requests("/blob/")[n_before:]] == ["bytes=%d-" % have]
    assert (d / "Tiny-Q4_K_M.gguf").read_bytes() == data
    assert files_under(d) == ["Tiny-Q4_K_M.gguf", "manifest.json"]


def test_a_wrong_sha256_is_refused_and_nothing_stored(sp, hub, store):
    hub.add("org/Bad", {"Bad-Q4_K_M.gguf": gguf_bytes(2)}, wrong_sha={"Bad-Q4_K_M.gguf"})
    r = sp("pull", "org/Bad")
    assert r.returncode == 1
    line = error_line(r)
    assert "sha256 mismatch" in line and "nothing stored" in line and "0" * 64 in line, line
    assert files_under(store) == [] and not (store / "hf.co").exists()


def test_unknown_repositories_and_bad_names_exit_2(sp, hub, store, tiny_repo):
    r = sp("pull", "nobody/Nothing-GGUF")
    assert r.returncode == 2
    line = error_line(r)
    assert "no repository nobody/Nothing-GGUF" in line and "HTTP 401" in line and "HF_TOKEN" in line, line
    r = sp("pull", "nobody/Nothing-GGUF", env={"HF_TOKEN": "hf_SECRETtoken"})
    assert r.returncode == 2 and "HTTP 404" in error_line(r)
    assert "SECRET" not in r.stderr + r.stdout
    for bad in ("Tiny-GGUF", "a//b", "../x/y", "org/-x", "org/a--b", "org/x:Q4 K", "org/x:", "x" * 97 + "/y", ""):
        r = sp("pull", bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert "not a model name" in error_line(r) or "give a model" in r.stderr, (bad, r.stderr)
    r = sp("pull", REPO, "--bogus")
    assert r.returncode == 2 and "unknown option" in error_line(r)
    assert len(hub.requests("/api/")) == 2
    assert not store.exists() or files_under(store) == []


def test_http_errors_on_a_file_keep_nothing_empty(sp, hub, store, tiny_repo):
    """A gated repository lists its files to anyone but serves them with a
    token only; the error says so, and no empty folder stays behind."""
    hub.gated.add(REPO)
    r = sp("pull", REPO)
    assert r.returncode == 1
    line = error_line(r)
    assert "answered HTTP 401 for Tiny-Q4_K_M.gguf" in line and "set HF_TOKEN" in line, line
    assert store.exists() and files_under(store) == [] and not (store / "hf.co").exists()
    r = sp("pull", REPO, env={"HF_TOKEN": "hf_x"})
    assert r.returncode == 0, r.stderr


def _listing(*siblings, **extra):
    return json.dumps(dict({"id": "org/Hostile", "sha": COMMIT, "siblings": list(siblings)}, **extra)).encode()


def _lfs(name, size=10, sha="ab" * 32):
    return {"rfilename": name, "size": size, "lfs": {"sha256": sha, "size": size, "pointerSize": 134}}


@pytest.mark.parametrize("body,status,words", [
    (_listing(_lfs("../evil-Q4_K_M.gguf"), _lfs("/abs-Q4_K_M.gguf"), _lfs("a/../b-Q4_K_M.gguf"),
              _lfs(".hidden-Q4_K_M.gguf"), _lfs("a//b-Q4_K_M.gguf"), {"rfilename": 7}, {}, 3),
     2, "has no GGUF files"),
    (_listing(_lfs("x-Q4_K_M.gguf", size=1 << 60)), 1, "no sha256 and size"),
    (_listing(_lfs("x-Q4_K_M.gguf", sha="zz" * 32)), 1, "no sha256 and size"),
    (_listing({"rfilename": "x-Q4_K_M.gguf", "size": 10}), 1, "no sha256 and size"),
    (_listing(_lfs("x-Q4_K_M.gguf"), _lfs("x-Q4_K_M.gguf")), 1, "lists x-Q4_K_M.gguf more than once"),
    (_listing(_lfs("x-Q4_K_M.gguf"), id="not an id"), 1, "not a model listing"),
    (_listing(_lfs("x-Q4_K_M.gguf"), id="../x"), 1, "not ORG/REPO"),
    (b"<html>rate limited</html>", 1, "not a model listing"),
    (b"[]", 1, "not a model listing"),
], ids=["unsafe-names", "huge-size", "bad-sha", "not-lfs", "twice", "bad-id", "bad-id-2", "html", "array"])
def test_hostile_listings_are_refused(sp, hub, store, tmp_path, body, status, words):
    hub.raw["org/Hostile"] = body
    r = sp("pull", "org/Hostile")
    assert r.returncode == status, r.stderr
    assert words in error_line(r)
    assert files_under(tmp_path) == [] and not hub.requests("/blob/")


def test_a_renamed_repository_is_stored_under_its_new_id(sp, hub, store, tiny_repo):
    hub.aliases["old-org/Tiny-GGUF"] = REPO
    r = sp("pull", "old-org/Tiny-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(model_dir(store, quant="Q8_0") / "Tiny-Q8_0.gguf")


def test_the_token_goes_to_the_hub_only(sp, hub, store, tiny_repo):
    r = sp("pull", REPO, env={"HF_TOKEN": "hf_SECRETtoken"})
    assert r.returncode == 0, r.stderr
    assert "SECRET" not in r.stderr + r.stdout
    assert "SECRET" not in (model_dir(store) / "manifest.json").read_text()
    for prefix in ("/api/", "/" + REPO):
        assert [h.get("Authorization") for _, h in hub.requests(prefix)] == ["Bearer hf_SECRETtoken"]
    # the CDN (another host name) gets no token
    assert [h.get("Authorization") for _, h in hub.requests("/blob/")] == [None]


def test_network_errors_are_one_line(sp, store):
    r = sp("pull", REPO, env={"HF_ENDPOINT": "http://127.0.0.1:1"})
    assert r.returncode == 1
    line = error_line(r)
    assert "cannot reach http://127.0.0.1:1" in line, line
    r = sp("pull", REPO, env={"HF_ENDPOINT": "ftp://example"})
    assert r.returncode == 2 and "HF_ENDPOINT" in error_line(r)


def test_a_stored_copy_and_offline_never_touch_the_network(sp, hub, store, tiny_repo):
    assert sp("pull", REPO).returncode == 0
    n = len(hub.log)
    dead = {"HF_ENDPOINT": "http://127.0.0.1:1"}
    for args in ((REPO,), ("hf.co/tiny/tiny-gguf:q4_k_m",), (REPO, "--offline")):
        r = sp("pull", *args, env=dead)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(model_dir(store) / "Tiny-Q4_K_M.gguf")
        assert "stored already (no network used)" in r.stderr
    r = sp("pull", REPO + ":Q8_0", "--offline")
    assert r.returncode == 1 and "--offline" in error_line(r)
    assert len(hub.log) == n
    # a file of a stored model gone: it is pulled again
    (model_dir(store) / "Tiny-Q4_K_M.gguf").unlink()
    r = sp("list")
    assert "files missing" in r.stdout
    r = sp("run", "-m", REPO, "-p", "hi", "-n", "1")
    assert r.returncode == 2 and "missing" in error_line(r)
    r = sp("pull", REPO)
    assert r.returncode == 0, r.stderr
    assert (model_dir(store) / "Tiny-Q4_K_M.gguf").read_bytes() == tiny_repo["Tiny-Q4_K_M.gguf"]


def test_m_an_existing_path_wins_and_unknown_names_exit_2(sp, run_spindle, hub, store, tmp_path, tiny_repo,
                                                          spindle_bin):
    assert sp("pull", REPO).returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    (work / "Tiny-GGUF").write_bytes(gguf_bytes(5))
    env = dict(os.environ, SPINDLE_MODELS=str(store))
    r = subprocess.run([spindle_bin, "info", "-m", "Tiny-GGUF"], cwd=work, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "file:            Tiny-GGUF " in r.stdout
    name = "nobody/Nothing:Q4_K_M"
    for args in (("info", "-m", name), ("run", "-m", name, "-p", "hi"), ("serve", "-m", name, "--port", "0"),
                 ("tokenize", "-m", name, "x"), ("bench", "-m", name),
                 ("run", "-m", REPO, "-p", "hi", "--spec", "draft", "--draft-model", name)):
        r = sp(*args)
        assert r.returncode == 2, (args, r.stderr)
        line = error_line(r)
        assert "nobody/Nothing:Q4_K_M: no such file, and no stored model" in line, line
        assert "stored: " + REPO + ":Q4_K_M" in line, line
    # a path that is no name still gets the loader's message
    r = sp("info", "-m", str(tmp_path / "nope.gguf"))
    assert r.returncode == 2 and "nope.gguf" in error_line(r)


def test_progress_line_on_a_terminal(spindle_bin, hub, store, tiny_repo):
    master, slave = pty.openpty()
    env = dict(os.environ, HF_ENDPOINT=hub.url, SPINDLE_MODELS=str(store), NO_PROXY="*")
    p = subprocess.Popen([spindle_bin, "pull", REPO], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    text = out.decode()
    assert p.returncode == 0, text
    size = "%.1f KiB" % (len(tiny_repo["Tiny-Q4_K_M.gguf"]) / 1024)
    assert re.search(r"\rTiny-Q4_K_M\.gguf  %s / %s  [0-9.]+ \S+/s" % (size, size), text), text


def _tmpfs(path, size):
    """Mounts a tmpfs of size at path; False when this machine does not let us."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(path)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode == 0


def test_a_full_disk_leaves_nothing_behind(sp, hub, tmp_path):
    """On a 1 MiB tmpfs (root can mount one; elsewhere a file-size limit,
    RLIMIT_FSIZE, stands in for it and the error is EFBIG): a download
    larger than the free space is refused before it starts, and one that
    meets a full disk midway (the server fills the disk first) fails with
    ENOSPC; neither leaves a file behind."""
    big = b"GGUF" + os.urandom(2 << 20)
    small = b"GGUF" + os.urandom(600 << 10)
    hub.add("org/Big", {"Big-Q4_K_M.gguf": big, "Big-Q8_0.gguf": small})
    disk = tmp_path / "disk"
    store = disk / "store"
    if _tmpfs(disk, "1m"):
        try:
            r = sp("pull", "org/Big", env={"SPINDLE_MODELS": str(store)})
            assert r.returncode == 1
            line = error_line(r)
            assert "not enough space" in line and "2.0 MiB" in line, line
            assert files_under(disk) == []

            def fill():
                with open(disk / "filler", "wb") as f:
                    try:
                        f.write(b"\0" * (1 << 20))
                    except OSError:
                        pass
            hub.before_body = fill
            r = sp("pull", "org/Big:Q8_0", env={"SPINDLE_MODELS": str(store)})
            assert r.returncode == 1
            line = error_line(r)
            assert "No space left on device" in line and "Big-Q8_0.gguf.partial" in line, line
            assert files_under(disk) == ["filler"] and not (store / "hf.co").exists()
        finally:
            subprocess.run(["umount", "-l", str(disk)])
        return
    import resource

    def limit():
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    env = dict(os.environ, HF_ENDPOINT=hub.url, SPINDLE_MODELS=str(store), NO_PROXY="*")
    spindle = os.environ.get("SPINDLE") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "spindle")
    r = subprocess.run([spindle, "pull", "org/Big"], env=env, preexec_fn=limit, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 1
    assert "File too large" in r.stderr.strip().splitlines()[-1], r.stderr
    assert not (store / "hf.co").exists()
