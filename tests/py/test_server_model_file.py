"""The served model file changing on disk (issue 38, item 2): `spindle
serve` loads with sp_model_params.private_copy, so what it still reads from
the file after loading (the tokenizer's data, the token embeddings) is a
private copy; truncating the file in place no longer ends the server with
SIGBUS, and it answers as before."""
import os
import shutil

import pytest

from server_util import Server


@pytest.fixture()
def model_copy(tmp_path, smollm2_path):
    path = str(tmp_path / "model.gguf")
    shutil.copyfile(smollm2_path, path)
    return path


def answers(s):
    chat = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Name a colour."}],
                                           "max_tokens": 12, "temperature": 0})
    assert chat.status_code == 200, chat.text
    comp = s.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0})
    assert comp.status_code == 200, comp.text
    toks = s.post("/tokenize", {"content": "Hello, world! Merges are read here."})
    assert toks.status_code == 200, toks.text
    emb = s.post("/v1/embeddings", {"input": "a sentence to embed"})
    assert emb.status_code == 200, emb.text
    return (chat.json()["choices"][0]["message"]["content"], comp.json()["choices"][0]["text"],
            toks.json()["tokens"], emb.json()["data"][0]["embedding"])


def test_truncated_model_file_does_not_stop_the_server(spindle_bin, model_copy):
    s = Server(spindle_bin, model_copy, "--ctx", "256")
    try:
        before = answers(s)
        os.truncate(model_copy, 0)
        after = answers(s)  # the old server died here with SIGBUS
        assert after == before
        assert s.proc.poll() is None
        # overwritten in place with other bytes: still the loaded model's answers
        with open(model_copy, "wb") as f:
            f.write(b"\xff" * (1 << 20))
        assert answers(s) == before
    finally:
        s.kill()
