"""spindle as a library: the public header is all the tools use, `make
install` gives a shared library with a versioned soname, a static one, the
header and a pkg-config file that examples/simple.c builds against, and the
C API keeps its contracts (tests/api/test_api.c).  Also the CLI defects the
library work fixed: `serve` refuses a bad model before it listens, and
`run -n 0` is refused like the server's max_tokens 0.  And what an installed
CLI is expected to do: `--version`, `--help` on every subcommand, `make
install` putting `spindle` in PREFIX/bin and a spindle.pc whose rpath lets a
program built in a prefix of one's own run, `serve --host` taking a name."""
import glob
import os
import re
import signal
import socket
import subprocess
import time

import httpx
import pytest

from conftest import ROOT, CliResult
from server_util import START_TIMEOUT, free_port, wait_for

PUBLIC_USERS = ("tools", "server", "examples", "tests/api", "bench/schemas")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def make_env():
    """The environment for a make run from inside `make test` (no jobserver
    of the parent make)."""
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    return env


def build_dir(spindle_bin):
    return os.path.dirname(spindle_bin)


@pytest.fixture(scope="session")
def run_plain():
    """Like run_spindle, with build/spindle of the default build (made when
    missing).  The installed library and the Python package are that build,
    and floating-point results differ between optimisation levels, so their
    output is compared with this binary (under `make test` it is $SPINDLE;
    under `make test-asan` $SPINDLE is the -O1 sanitizer build)."""
    r = subprocess.run(["make", "-s", "build/spindle", "build/libspindle.so"], cwd=ROOT, env=make_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:]
    exe = os.path.join(ROOT, "build", "spindle")

    def run(*args, timeout=300):
        argv = [exe] + [str(a) for a in args]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                           text=True, errors="replace", timeout=timeout, cwd=ROOT)
        return CliResult(argv, r.returncode, r.stdout, r.stderr)

    return run


def test_public_users_include_only_the_public_header():
    """Every header a public user includes that lives under src/ is a leak
    of a room's secrets; tools/ may also use its own headers."""
    leaks = []
    files = [f for d in PUBLIC_USERS for f in glob.glob(os.path.join(ROOT, d, "*.[ch]"))]
    assert any(f.endswith("tools/run.c") for f in files)
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            if os.path.exists(os.path.join(ROOT, "src", name)) or name.startswith(("src/", "../src", "../../src")):
                leaks.append("%s includes %s" % (os.path.relpath(path, ROOT), name))
    assert not leaks, "public users must include only spindle.h: " + "; ".join(leaks)


def test_server_includes_only_its_own_headers_and_the_public_header():
    """server/ is an application of the library: besides its own headers
    ("server/...") it includes spindle.h and system headers, never a
    library room's header (a relative path out of the folder counts too)."""
    leaks = []
    files = glob.glob(os.path.join(ROOT, "server", "*.[ch]"))
    assert any(f.endswith("scheduler.c") for f in files)
    assert not os.path.exists(os.path.join(ROOT, "src", "server")), "the server is not a room of the library"
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            if name.startswith("server/") or name == "spindle.h":
                continue
            if os.path.exists(os.path.join(ROOT, "src", name)) or ".." in name or name.startswith("src/"):
                leaks.append("%s includes %s" % (os.path.relpath(path, ROOT), name))
    assert not leaks, "server/ must include only its own headers and spindle.h: " + "; ".join(leaks)


def test_the_library_links_no_http_and_embeds_no_page(spindle_bin):
    """libspindle is the engine: no HTTP library (server or client) among its dependencies
    (the shared library's NEEDED entries, spindle.pc), none of its objects
    calls libmicrohttpd or libcurl or carries the chat page, and the server's entry
    points are not in the public header.  The spindle binary has them."""
    build = build_dir(spindle_bin)
    so = os.path.join(build, "libspindle.so")
    if os.path.exists(so):
        dyn = subprocess.run(["readelf", "-d", so], stdout=subprocess.PIPE, text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        assert needed and not [n for n in needed if "microhttpd" in n or "edit" in n or "curl" in n], needed
    syms = subprocess.run(["nm", os.path.join(build, "libspindle.a")], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, check=True).stdout
    assert " T sp_model_load" in syms
    assert not re.search(r"\b(U|T) (MHD_\w+|curl_\w+|sp_webui_\w+|sp_server_run)\b", syms), \
        re.findall(r"\b(?:U|T) (?:MHD_\w+|curl_\w+|sp_webui_\w+|sp_server_run)\b", syms)[:5]
    pc = open(os.path.join(ROOT, "spindle.pc.in")).read()
    assert "jansson" in pc and "microhttpd" not in pc and "curl" not in pc
    header = open(os.path.join(ROOT, "include", "spindle.h")).read()
    assert "sp_server_" not in header and "sp_grammar_benchmark" not in header \
        and "sp_memory_read_bandwidth" not in header
    exe = subprocess.run(["nm", spindle_bin], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    assert re.search(r" [Tt] sp_server_run\b", exe) and re.search(r" U MHD_start_daemon\b", exe)
    assert re.search(r" U curl_easy_perform\b", exe)   # spindle pull's client, in the CLI only
    assert re.search(r" U EVP_DigestInit_ex\b", exe)  # its sha256: OpenSSL's, not our own


def test_install_and_build_the_example(tmp_path, run_plain, smollm2_path):
    prefix = tmp_path / "prefix"
    r = subprocess.run(["make", "-s", "install", "PREFIX=%s" % prefix], cwd=ROOT, env=make_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:]
    lib = prefix / "lib"
    real = sorted(p.name for p in lib.iterdir() if p.name.startswith("libspindle.so.") and not p.is_symlink())
    assert len(real) == 1 and re.fullmatch(r"libspindle\.so\.\d+\.\d+\.\d+", real[0]), real
    major = real[0].split(".")[2]
    assert os.readlink(lib / ("libspindle.so." + major)) == real[0]
    assert os.readlink(lib / "libspindle.so") == "libspindle.so." + major
    assert (lib / "libspindle.a").is_file() and (prefix / "include" / "spindle.h").is_file()
    dyn = subprocess.run(["readelf", "-d", str(lib / real[0])], stdout=subprocess.PIPE, text=True).stdout
    assert "Library soname: [libspindle.so.%s]" % major in dyn
    # only the public API is exported: every symbol is declared in spindle.h
    header = (prefix / "include" / "spindle.h").read_text()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib / real[0])], stdout=subprocess.PIPE,
                          text=True).stdout.split()[2::3]
    assert "sp_model_load" in syms and "sp_engine_step" in syms
    private = [s for s in syms if not re.search(r"\b%s\(" % re.escape(s), header)]
    assert not private, "exported but not in spindle.h: %s" % private[:20]

    env = dict(os.environ, PKG_CONFIG_PATH=str(lib / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "spindle"], env=env, stdout=subprocess.PIPE,
                           text=True, check=True).stdout.split()
    assert "-lspindle" in flags
    static = subprocess.run(["pkg-config", "--libs", "--static", "spindle"], env=env, stdout=subprocess.PIPE,
                            text=True, check=True).stdout.split()
    assert "-ljansson" in static and "-lmicrohttpd" not in static and "-lcurl" not in static, static
    exe = tmp_path / "simple"
    src = os.path.join(ROOT, "examples", "simple.c")
    code = open(src).read()
    assert code.count("\n") <= 80
    assert "```c\n" + code + "```" in open(os.path.join(ROOT, "docs", "api.md")).read(), \
        "docs/api.md shows another examples/simple.c"
    r = subprocess.run(["cc", src] + flags + ["-o", str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    prompt = "The capital of France is"
    # spindle.pc's rpath finds the library: no LD_LIBRARY_PATH
    run_env = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run([str(exe), smollm2_path, prompt, "24"], env=run_env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    want = run_plain("run", "-m", smollm2_path, "-p", prompt, "-n", 24, "--temp", 0)
    assert want.returncode == 0, want.stderr
    assert r.stdout == want.stdout + "\n" and len(want.stdout) > 20, (r.stdout, want.stdout)
    assert r.stderr.strip() == "[length]"
    r = subprocess.run([str(prefix / "bin" / "spindle"), "--version"], env=run_env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "spindle %s\n" % header_version(), (r.stdout, r.stderr)


def test_c_api_contracts(tmp_path, spindle_bin, smollm2_path):
    """tests/api/test_api.c against the library under test (linked
    statically from its build directory, with its sanitizers if it has
    them)."""
    archive = os.path.join(build_dir(spindle_bin), "libspindle.a")
    assert os.path.isfile(archive), archive
    nm = subprocess.run(["nm", archive], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    san = ["-fsanitize=address,undefined"] if "__asan_" in nm else []
    pkgs = subprocess.run(["pkg-config", "--libs", "jansson", "libpcre2-8", "libutf8proc"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    exe = tmp_path / "test_api"
    r = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g"] + san +
                       ["-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "tests", "unit"),
                        os.path.join(ROOT, "tests", "api", "test_api.c"), archive] + pkgs + ["-lm", "-pthread",
                                                                                             "-o", str(exe)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    r = subprocess.run([str(exe), smollm2_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=600, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert r.returncode == 0 and re.search(r"test_api: \d+ passed, 0 failed", r.stdout), r.stdout + r.stderr


def one_line_exit_2(r):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle: "), r.stderr


def port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("case", ["missing", "malformed", "ctx too large"])
def test_serve_refuses_a_bad_model_before_listening(spindle_bin, smollm2_path, tmp_path, case):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["serve", "--port", port]
    if case == "missing":
        args += ["-m", str(tmp_path / "none.gguf")]
    elif case == "malformed":
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(open(smollm2_path, "rb").read(4096))  # a header cut short
        args += ["-m", str(bad)]
    else:
        args += ["-m", smollm2_path, "--ctx", 1 << 20]
    # A server that listened first would print "listening" and wait for the
    # failure; the port is checked while the command runs.
    p = subprocess.Popen([spindle_bin] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    listened = False
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        listened |= not port_is_free(port)
        time.sleep(0.01)
    out, err = p.communicate(timeout=60)
    assert not listened, "the port was bound before the failure"
    r = type("R", (), {"returncode": p.returncode, "stderr": err})
    one_line_exit_2(r)
    assert "listening" not in err and out == ""


def test_run_n_0_is_refused(run_spindle, smollm2_path):
    # (the old -n 0 meant "no limit": --ctx 64 keeps that run short)
    r = run_spindle("run", "-m", smollm2_path, "-p", "Once upon a time", "-n", 0, "--ctx", 64, "--temp", 0)
    one_line_exit_2(r)
    assert "-n 0" in r.stderr and r.stdout == ""
    ok = run_spindle("run", "-m", smollm2_path, "-p", "Once upon a time", "-n", -1, "--ctx", 64, "--temp", 0,
                     "--ignore-eos")
    assert ok.returncode == 0, ok.stderr
    used = re.search(r"prompt tokens: (\d+) .* generated tokens: (\d+) .* stop reason: length", ok.stderr)
    assert used and int(used.group(1)) + int(used.group(2)) == 64, ok.stderr  # -1: until the context is full


def header_version():
    """MAJOR.MINOR.PATCH from include/spindle.h's SPINDLE_VERSION_* macros."""
    text = open(os.path.join(ROOT, "include", "spindle.h")).read()
    return ".".join(re.search(r"^#define SPINDLE_VERSION_%s (\d+)$" % part, text, re.M).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


SUBCOMMANDS = ("run", "chat", "serve", "bench", "info", "quantize", "perplexity", "imatrix", "embed", "logits",
               "tokenize", "detokenize", "pull", "list", "rm")


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_cli_version(run_spindle, flag):
    r = run_spindle(flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "spindle %s\n" % header_version() and r.stderr == "", (r.stdout, r.stderr)


def test_cli_help_lists_every_subcommand(run_spindle):
    r = run_spindle("--help")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.split("commands:\n", 1)[1].splitlines() if line.strip()]
    assert tuple(names) == SUBCOMMANDS, "the subcommands changed: update SUBCOMMANDS (their --help is tested)"
    assert "--version" in r.stdout


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_cli_subcommand_help(run_spindle, cmd, flag):
    """Needs no model: the usage on stdout, exit 0, nothing on stderr."""
    r = run_spindle(cmd, flag)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "usage" in r.stdout and "spindle %s" % cmd in r.stdout and r.stderr == "", (r.stdout, r.stderr)


def test_cli_serve_host_name(spindle_bin, smollm2_path, tmp_path):
    """--host takes a name (resolved with getaddrinfo); the server answers
    on it and says where it listens."""
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    p = subprocess.Popen([spindle_bin, "serve", "-m", smollm2_path, "--host", "localhost", "--port", str(port),
                          "--ctx", "256", "--parallel", "1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def healthy():
            assert p.poll() is None, "spindle serve exited with %s: %s" % (p.returncode,
                                                                            (tmp_path / "serve.log").read_text())
            try:
                return httpx.get("http://localhost:%d/health" % port, timeout=2).status_code == 200
            except httpx.TransportError:
                return False
        wait_for(healthy, timeout=START_TIMEOUT, what="spindle serve --host localhost")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    assert "listening on http://localhost:%d " % port in (tmp_path / "serve.log").read_text()


def test_cli_serve_host_that_does_not_resolve(run_spindle, smollm2_path):
    r = run_spindle("serve", "-m", smollm2_path, "--host", "no-such-host.invalid", "--port", free_port(),
                    timeout=120)
    one_line_exit_2(r)
    assert "no-such-host.invalid" in r.stderr and "does not resolve" in r.stderr and r.stdout == ""
