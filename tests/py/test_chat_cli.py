"""`spindle chat` driven as a person would, in a terminal: tmux runs it,
send-keys types, capture-pane reads the screen.  Two turns, a /set, Ctrl-C
during an answer, /save then /load, the context trimmed, Ctrl-D to leave."""
import json
import os
import shlex
import subprocess
import uuid

import pytest

from conftest import ROOT
from server_util import wait_for


class Tmux:
    """A tmux server of its own (-L socket), so that no other tmux on the
    machine, and no other test's server shutting down, can interfere."""

    def __init__(self, argv, width=160, height=50):
        self.name = "spindle-test-" + uuid.uuid4().hex[:8]
        self.tmux = ["tmux", "-L", self.name]
        cmd = " ".join(shlex.quote(a) for a in argv) + "; echo EXIT=$?; sleep 600"
        r = subprocess.run(self.tmux + ["new-session", "-d", "-s", self.name, "-x", str(width),
                                        "-y", str(height), cmd],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, "tmux new-session failed: " + r.stdout

    def keys(self, *keys):
        subprocess.run(self.tmux + ["send-keys", "-t", self.name] + list(keys), check=True)

    def type(self, line):
        self.keys("-l", line)
        self.keys("Enter")

    def screen(self):
        r = subprocess.run(self.tmux + ["capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name],
                           stdout=subprocess.PIPE, text=True, check=True)
        return r.stdout

    def wait(self, pred, what, timeout=120):
        try:
            return wait_for(lambda: pred(self.screen()), timeout, what, interval=0.1)
        except AssertionError as e:
            raise AssertionError("%s; the screen:\n%s" % (e, self.screen()[-3000:])) from None

    def kill(self):
        subprocess.run(self.tmux + ["kill-server"], stderr=subprocess.DEVNULL)


def prompts(screen):
    """Lines the chat printed its prompt on ("> " plus whatever was typed)."""
    return [ln for ln in screen.splitlines() if ln == ">" or ln.startswith("> ")]


@pytest.fixture
def tmux():
    sessions = []

    def start(*argv):
        t = Tmux(list(argv))
        sessions.append(t)
        return t

    yield start
    for t in sessions:
        t.kill()


def test_two_turns_set_ctrl_c_save_load(tmux, spindle_bin, smollm2_path, run_spindle, tmp_path):
    question = "What is the capital of France? Answer in one sentence."
    ref = run_spindle("run", "-m", smollm2_path, "--chat", "-p", question, "--temp", "0", "-n", "48")
    assert ref.returncode == 0, ref.stderr
    t = tmux(spindle_bin, "chat", "-m", smollm2_path, "--ctx", "1024", "--max-tokens", "48",
             "-t", "2")
    t.wait(lambda s: "Ctrl-D to leave" in s and s.rstrip().endswith(">"), "the chat to start")

    t.type("/set temp 0")
    t.wait(lambda s: "temp = 0" in s, "/set to answer")
    t.type(question)
    t.wait(lambda s: len(prompts(s)) >= 3, "the first answer")
    screen = t.screen()
    first = screen.split(question + "\n", 1)[1].split("\n>", 1)[0]
    assert first.strip() == ref.stdout.strip()      # the same template, engine and greedy pick

    t.type("And what is the capital of Italy? Answer in one word.")
    t.wait(lambda s: len(prompts(s)) >= 4, "the second answer")
    second = t.screen().split("Answer in one word.\n", 1)[1].split("\n>", 1)[0]
    assert second.strip(), t.screen()

    # Ctrl-C stops the answer, not the program (greedy on this request
    # repeats itself rather than ending, so the answer is still running)
    t.type("/set max-tokens 2000")
    t.type("Write a very long story about a dragon and a knight, in ten chapters.")
    t.wait(lambda s: "in ten chapters.\n" in s and len(s.split("in ten chapters.\n", 1)[1]) > 20,
           "the story to start")
    t.keys("C-c")
    t.wait(lambda s: "[stopped]" in s, "the answer to stop", timeout=30)
    t.wait(lambda s: s.rstrip().endswith(">"), "the prompt after Ctrl-C", timeout=30)
    t.type("/stats")
    t.wait(lambda s: "context used:" in s, "/stats")
    stats = t.screen()
    assert "stop reason cancelled" in stats and "time to first token" in stats
    assert "tokens/s" in stats
    # history: Up recalls the last line (libedit), Enter runs it again
    t.keys("Up")
    t.wait(lambda s: s.rstrip().endswith("> /stats"), "the recalled line")
    t.keys("Enter")
    t.wait(lambda s: s.count("context used:") == 2, "/stats run again from history")

    # /save, /clear, /load: the same six messages come back
    path = tmp_path / "conv.json"
    t.type("/save " + str(path))
    t.wait(lambda s: "saved 6 messages" in s, "/save")
    saved = json.loads(path.read_text())
    assert [m["role"] for m in saved] == ["user", "assistant"] * 3
    assert saved[0]["content"] == question and saved[1]["content"].strip() == ref.stdout.strip()
    t.type("/clear")
    t.wait(lambda s: "conversation cleared" in s, "/clear")
    t.type("/load " + str(path))
    t.wait(lambda s: "loaded 6 messages" in s, "/load")
    t.type("/save " + str(tmp_path / "again.json"))
    t.wait(lambda s: s.count("saved 6 messages") == 2, "the second /save")
    assert json.loads((tmp_path / "again.json").read_text()) == saved
    t.type("/load /no/such/file.json")
    t.wait(lambda s: "error:" in s and "/no/such/file.json" in s, "a clear /load error")

    # Ctrl-D leaves with status 0
    t.keys("C-d")
    t.wait(lambda s: "EXIT=0" in s, "the chat to exit", timeout=30)


def test_context_outgrown_drops_oldest_turns(tmux, spindle_bin, smollm2_path, tmp_path):
    t = tmux(spindle_bin, "chat", "-m", smollm2_path, "--ctx", "160", "--max-tokens", "30",
             "--system", "You answer in one short sentence.", "--seed", "3", "-t", "2")
    t.wait(lambda s: "Ctrl-D to leave" in s, "the chat to start")
    for i, topic in enumerate(["the sea", "mountains", "rivers", "forests", "deserts"]):
        t.type("Tell me about %s." % topic)
        t.wait(lambda s, n=i + 2: len(prompts(s)) >= n, "answer %d" % (i + 1))
    t.wait(lambda s: "dropped the" in s, "the trim notice")
    assert "outgrew the context of 160 tokens" in t.screen()
    t.type("/save " + str(tmp_path / "trimmed.json"))
    t.wait(lambda s: "saved" in s, "/save")
    msgs = json.loads((tmp_path / "trimmed.json").read_text())
    assert msgs[0] == {"role": "system", "content": "You answer in one short sentence."}
    assert msgs[1]["role"] == "user" and "the sea" not in msgs[1]["content"]
    assert msgs[-2]["content"] == "Tell me about deserts."


def test_make_run_is_the_chat_on_a_terminal(tmux, spindle_bin, smollm2_path):
    demo = os.path.join(ROOT, "scripts", "demo")
    env = dict(os.environ, SPINDLE=spindle_bin)
    # not a terminal (CI): one streamed answer, then exit
    r = subprocess.run([demo], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout and "spindle run" in r.stderr
    # a terminal: the chat
    t = tmux("env", "SPINDLE=" + spindle_bin, demo)
    t.wait(lambda s: "spindle chat: context" in s, "the chat from scripts/demo")
    t.keys("C-d")
    t.wait(lambda s: "EXIT=0" in s, "the chat to exit", timeout=30)


def test_load_progress_only_on_a_terminal(tmux, spindle_bin, smollm2_path, run_spindle):
    info = run_spindle("info", "-m", smollm2_path)
    assert "repacked" in info.stdout, info.stdout   # this model's weights are repacked here
    piped = run_spindle("run", "-m", smollm2_path, "-p", "hi", "-n", "1")
    assert piped.returncode == 0 and "repacking" not in piped.stderr
    t = tmux(spindle_bin, "run", "-m", smollm2_path, "-p", "hi", "-n", "1")
    t.wait(lambda s: "EXIT=0" in s, "spindle run to finish")
    line = [ln for ln in t.screen().splitlines() if ln.startswith("repacking weights:")]
    assert line and "100% (" in line[-1] and " MB), " in line[-1], t.screen()
