"""Shared pytest fixtures for spindle's end-to-end tests (tests/py).

Fixtures
  spindle_bin    absolute path of the spindle binary under test: $SPINDLE
                 (scripts/run-tests sets it) or build/spindle. Fails, never
                 skips, when it is missing.
  smollm2_path   absolute path of SmolLM2-135M-Instruct Q4_1 (scripts/fetch-model)
  gemma3_path    absolute path of Gemma 3 270M Q4_K_M (scripts/fetch-model)
  embed_path     absolute path of all-MiniLM-L6-v2 F16 (scripts/fetch-model embed)
  run_spindle    run_spindle(*args, input=None, timeout=...) -> CliResult with
                 .args, .returncode, .stdout, .stderr (text) and .json()
  goldens        goldens(name) -> parsed tests/goldens/<name>.json

Models are fetched once per session; fetch-model is a no-op when the file is
already present with the right sha256.

The `slow` marker: the tests listed in SLOW below, which `make test` leaves to
`make test-slow` (CI runs both).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDENS_DIR = os.path.join(ROOT, "tests", "goldens")
FETCH_MODEL = os.path.join(ROOT, "scripts", "fetch-model")

# Generous default: the slowest CLI calls (64-token greedy runs over a 600-token
# prompt on 2 cores, under AddressSanitizer) must still finish.
DEFAULT_TIMEOUT = float(os.environ.get("SP_TEST_TIMEOUT", "300"))


class CliResult:
    """The outcome of one spindle invocation."""

    def __init__(self, args, returncode, stdout, stderr):
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def json(self):
        """stdout parsed as JSON; a parse failure names the command and stderr."""
        try:
            return json.loads(self.stdout)
        except ValueError as e:
            raise AssertionError("stdout of %s is not JSON (%s); stderr: %s; stdout: %r"
                                 % (self.cmdline(), e, self.stderr.strip()[-2000:], self.stdout[:500]))

    def cmdline(self):
        return " ".join(self.args)

    def __repr__(self):
        return "CliResult(%s -> %d)" % (self.cmdline(), self.returncode)


# Whole-model numerics that take seconds to tens of seconds each on 2 cores
# and repeat what a faster test of `make test` already checks for the same
# code path: the slow tier, `make test-slow` (pytest -m slow).  Node ids
# without the file name; a bare name takes every parametrization.
SLOW = {
    # the ring cache of a sliding-window model over 4k positions (18 s);
    # test_families.py's test_all_local_layers_ring_matches_full_cache
    # checks the ring against the full cache in make test
    "test_sliding_window_ring_matches_full_cache",
    # perplexity against llama.cpp: [repacked-smollm2] stays in make test
    "test_perplexity_matches_llama_cpp[file-layout-gemma3]",
    "test_perplexity_matches_llama_cpp[file-layout-smollm2]",
    "test_perplexity_matches_llama_cpp[repacked-gemma3]",
    # an importance matrix over 32 chunks of text and two quantizations
    "test_imatrix_brings_q3_closer",
    # quantized caches' perplexity on Gemma 3 (SmolLM2's stay in make test)
    "test_quantized_cache_perplexity_stays_close[q8_0-gemma3]",
    "test_quantized_cache_perplexity_stays_close[q4_0-gemma3]",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left to make test-slow (tests/py/conftest.py SLOW)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.name in SLOW or item.originalname in SLOW:
            item.add_marker(pytest.mark.slow)


def _spindle_path():
    path = os.environ.get("SPINDLE") or os.path.join(ROOT, "build", "spindle")
    return os.path.abspath(path)


def _fetch_model(name):
    r = subprocess.run([FETCH_MODEL, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, cwd=ROOT)
    if r.returncode != 0:
        pytest.fail("scripts/fetch-model %s failed (exit %d): %s"
                    % (name, r.returncode, r.stderr.strip().splitlines()[-1:] or ""), pytrace=False)
    path = r.stdout.strip()
    if not os.path.isfile(path):
        pytest.fail("scripts/fetch-model %s printed %r, which is not a file" % (name, path),
                    pytrace=False)
    return path


@pytest.fixture(scope="session")
def spindle_bin():
    path = _spindle_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail("spindle binary not found at %s (build it with make, or set SPINDLE)" % path,
                    pytrace=False)
    return path


@pytest.fixture(scope="session")
def smollm2_path():
    return _fetch_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path():
    return _fetch_model("gemma3-270m")


@pytest.fixture(scope="session")
def embed_path():
    return _fetch_model("embed")


@pytest.fixture(scope="session")
def run_spindle(spindle_bin):
    """Returns run(*args, input=None, timeout=DEFAULT_TIMEOUT, env=None) -> CliResult.

    args are passed after the binary (str() applied to each). input is text
    for stdin (stdin is /dev/null otherwise). env entries are added to the
    current environment. A timeout fails the test with the command line.
    """
    def run(*args, input=None, timeout=DEFAULT_TIMEOUT, env=None):
        argv = [spindle_bin] + [str(a) for a in args]
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        try:
            r = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=None if input is not None else subprocess.DEVNULL,
                               text=True, errors="replace", timeout=timeout, env=full_env,
                               cwd=ROOT)
        except subprocess.TimeoutExpired:
            pytest.fail("timed out after %.0fs: %s" % (timeout, " ".join(argv)), pytrace=False)
        return CliResult(argv, r.returncode, r.stdout, r.stderr)

    return run


def load_golden(name):
    """Parsed tests/goldens/<name>.json (name without .json)."""
    path = os.path.join(GOLDENS_DIR, name + ".json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def goldens():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load_golden(name)
        return cache[name]

    return get
