"""The build: `make` only compiles, and says what to run when the C
libraries are missing; installing is scripts/setup's (run by `make setup`,
`make test`, `make run` and .ci/run)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(*args, env=None):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def recording_env(tmp_path):
    """PATH with a dpkg-query that notes each call (scripts/setup asks it
    which Debian packages are installed) and then runs the real one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "dpkg-query-called"
    fake = bin_dir / "dpkg-query"
    fake.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec /usr/bin/dpkg-query "$@"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return env, marker


def test_plain_make_installs_nothing(tmp_path):
    env, marker = recording_env(tmp_path)
    r = make("-n", "all", env=env)
    assert r.returncode == 0, r.stderr
    assert not any(line.lstrip().startswith("scripts/setup") for line in r.stdout.splitlines()), r.stdout
    assert not marker.exists(), "parsing the Makefile ran scripts/setup"
    r = make("setup", env=env)
    assert r.returncode == 0, r.stderr
    assert marker.exists(), "make setup did not run scripts/setup"


def test_make_without_the_libraries_says_to_run_setup():
    env = {k: v for k, v in os.environ.items() if k != "PKG_CONFIG_PATH"}
    env["PKG_CONFIG_LIBDIR"] = "/nonexistent"
    r = make("deps", env=env)
    assert r.returncode != 0
    assert "scripts/setup" in r.stderr and "not installed" in r.stderr, r.stderr
