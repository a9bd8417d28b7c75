"""The Python package (bindings/python): `pip install ./bindings/python`
builds libspindle.so into it, and spindle.Model generates what `spindle
run` generates, streams, chats, tokenizes, reports logprobs, embeds as
`spindle embed` does, constrains output to a grammar or JSON Schema with
checks and retries, decodes speculatively to the same text, stores the KV
cache quantized, and raises SpindleError with the library's message.  Installed into a temporary
directory (no change to build/venv), imported in this process."""
import ctypes
import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_library import make_env, run_plain  # noqa: F401 (a fixture)

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def spindle_pkg(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-index", "--target", str(target), os.path.join(ROOT, "bindings", "python")],
                       env=make_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:]
    assert (target / "spindle" / "libspindle.so").is_file(), "the library is not inside the package"
    sys.path.insert(0, str(target))
    try:
        importlib.invalidate_caches()
        mod = importlib.import_module("spindle")
        assert mod.__file__.startswith(str(target)), mod.__file__
        yield mod
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("spindle", None)
        sys.modules.pop("spindle._capi", None)


@pytest.fixture(scope="module")
def model(spindle_pkg, smollm2_path):
    m = spindle_pkg.Model(smollm2_path, n_ctx=1024)
    yield m
    m.close()


def test_versions_agree(spindle_pkg):
    import importlib.metadata
    assert spindle_pkg.version() == importlib.metadata.version("spindle")


def test_greedy_text_equals_spindle_run(model, run_plain, smollm2_path):
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 32, "--temp", 0)
    assert want.returncode == 0, want.stderr
    assert model.generate(PROMPT, max_tokens=32, temperature=0) == want.stdout
    pieces = list(model.generate(PROMPT, max_tokens=32, temperature=0, stream=True))
    assert len(pieces) > 10 and "".join(pieces) == want.stdout


def test_sampling_stop_and_chat_equal_spindle_run(model, run_plain, smollm2_path):
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 24, "--temp", 0.9, "--seed", 7,
                       "--top-k", 20, "--repeat-penalty", 1.2)
    assert model.generate(PROMPT, max_tokens=24, temperature=0.9, seed=7, top_k=20, repeat_penalty=1.2) == \
        want.stdout
    want = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 32, "--temp", 0, "--stop", ".")
    got = model.generate(PROMPT, max_tokens=32, temperature=0, stop=".")
    assert got == want.stdout and "." not in got
    want = run_plain("run", "-m", smollm2_path, "--chat", "-p", "Name a colour.", "-n", 16, "--temp", 0)
    msgs = [{"role": "user", "content": "Name a colour."}]
    assert model.chat(msgs, max_tokens=16, temperature=0) == want.stdout
    assert "Name a colour." in model.apply_chat_template(msgs)


def test_tokenize_and_detokenize(model, run_plain, smollm2_path):
    text = "Hello, world! Grüße 日本"
    ids = model.tokenize(text)
    r = run_plain("tokenize", "-m", smollm2_path, text)
    assert ids == [int(x) for x in r.stdout.split()]
    assert model.detokenize(ids) == text
    assert b"".join(model.token_to_piece(t) for t in ids).decode() == text
    assert model.tokenize("<|im_start|>", parse_special=True) == [1]


def test_logprobs_equal_spindle_run(model, run_plain, smollm2_path):
    r = run_plain("run", "-m", smollm2_path, "-p", PROMPT, "-n", 6, "--temp", 0, "--logprobs", 3, "--json")
    want = r.json()
    c = model.complete(PROMPT, max_tokens=6, temperature=0, logprobs=3)
    assert c.text == want["text"] and c.finish_reason == want["finish_reason"]
    assert c.prompt_tokens == want["usage"]["prompt_tokens"] and c.completion_tokens == 6
    assert [t.id for t in c.tokens] == [t["id"] for t in want["tokens"]]
    for got, exp in zip(c.tokens, want["tokens"]):
        assert got.logprob == pytest.approx(exp["logprob"], abs=1e-6)
        assert [(i, p) for i, _, p in got.top_logprobs] == \
            [(e["id"], pytest.approx(e["logprob"], abs=1e-6)) for e in exp["top_logprobs"]]
    # the logits agree with `spindle logits`
    top = run_plain("logits", "-m", smollm2_path, "-p", PROMPT, "--top", 3).json()["top"]
    logits = model.logits(PROMPT)
    assert len(logits) == model.n_vocab
    assert [i for i, _ in top] == sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:3]


def test_errors_are_exceptions_with_the_message(spindle_pkg, model, tmp_path):
    with pytest.raises(spindle_pkg.SpindleError) as e:
        spindle_pkg.Model(tmp_path / "missing.gguf")
    assert "missing.gguf" in str(e.value) and e.value.status
    with pytest.raises(spindle_pkg.SpindleError, match="max_tokens"):
        model.generate(PROMPT, max_tokens=0)
    with pytest.raises(spindle_pkg.SpindleError, match="context"):
        model.generate("word " * 2000, max_tokens=4)
    with pytest.raises(TypeError, match="top_z"):
        model.generate(PROMPT, top_z=3)


def test_stopping_a_stream_early_frees_the_request(model):
    """The engine runs one request at a time: a stream left early must not
    keep its slot."""
    for _ in range(3):
        it = model.generate(PROMPT, max_tokens=50, temperature=0, stream=True)
        assert next(it) and next(it)
        del it
    assert model.generate(PROMPT, max_tokens=4, temperature=0)


def test_vocab_only(spindle_pkg, smollm2_path, model):
    v = spindle_pkg.Model(smollm2_path, vocab_only=True)
    assert v.tokenize("Hello") == model.tokenize("Hello") and v.info["vocab_only"]
    assert v.metadata("general.architecture") == "llama"
    with pytest.raises(spindle_pkg.SpindleError, match="vocab_only"):
        v.generate("Hello", max_tokens=2)
    v.close()


def test_struct_layouts_match_the_header(spindle_pkg, tmp_path):
    """Every ctypes struct has the C struct's size and field offsets."""
    capi = importlib.import_module("spindle._capi")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <spindle.h>", "int main(void) {",
             'printf("{");']
    for cname, cls in capi.STRUCTS.items():
        lines.append('printf("\\"%s\\": [%%zu", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('printf(", %%zu", offsetof(%s, %s));' % (cname, field))
        lines.append('printf("],");')
    lines += ['printf("\\"end\\": 0}\\n");', "return 0; }"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-I" + os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    c = json.loads(subprocess.run([str(exe)], stdout=subprocess.PIPE, text=True, check=True).stdout)
    for cname, cls in capi.STRUCTS.items():
        py = [ctypes.sizeof(cls)] + [getattr(cls, f).offset for f, _ in cls._fields_]
        assert py == c[cname], (cname, py, c[cname])


# ---- embeddings, constrained output, speculative decoding, KV cache types ----

SENTENCES = ["The cat sat on the mat.", "A dog slept in the sun.", "Grüße aus Köln"]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}}}
REPEAT = "Count: one two three four five six seven eight nine ten. Again: one two three four"


def _spindle_embed(run_plain, model, tmp_path, *args):
    f = tmp_path / "lines.txt"
    f.write_text("\n".join(SENTENCES) + "\n")
    r = run_plain("embed", "-m", model, "--file", f, *args)
    assert r.returncode == 0, r.stderr
    # 9 significant digits: each float32 printed is that float exactly
    return [[ctypes.c_float(v).value for v in json.loads(line)] for line in r.stdout.splitlines()]


def test_embed_equals_spindle_embed(spindle_pkg, run_plain, embed_path, smollm2_path, tmp_path):
    with spindle_pkg.Model(embed_path) as e:
        assert e.pooling == "mean" and e.n_embd == 384
        want = _spindle_embed(run_plain, embed_path, tmp_path)
        got = e.embed(SENTENCES)
        assert got == want
        assert e.embed(SENTENCES[1]) == want[1]                        # alone as batched
        assert e.embed(e.tokenize(SENTENCES[0])) == want[0]            # token ids
        assert e.embed([]) == []
        assert sum(x * x for x in got[0]) == pytest.approx(1.0, abs=1e-5)
    with spindle_pkg.Model(smollm2_path, n_ctx=256) as m:
        want = _spindle_embed(run_plain, smollm2_path, tmp_path, "--pooling", "last", "--no-normalize")
        got = m.embed(SENTENCES, pooling="last", normalize=False)
        assert got == want and sum(x * x for x in got[0]) > 2.0
        with pytest.raises(spindle_pkg.SpindleError, match="pooling.*'max'"):
            m.embed("x", pooling="max")
        with pytest.raises(spindle_pkg.SpindleError, match="input"):
            m.embed(["fine", "word " * 600])


def test_json_schema_output_is_valid_and_equals_spindle_run(model, run_plain, smollm2_path, tmp_path):
    import jsonschema
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    want = run_plain("run", "-m", smollm2_path, "--chat", "-p", msgs[0]["content"], "--json-schema", schema_file,
                     "-n", 96, "--temp", 0)
    assert want.returncode == 0, want.stderr
    got = model.chat(msgs, json_schema=SCHEMA, max_tokens=96, temperature=0)
    assert got == want.stdout
    jsonschema.validate(json.loads(got), SCHEMA)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    assert model.chat(msgs, response_format=fmt, max_tokens=96, temperature=0) == got
    g = model.grammar(json_schema=json.dumps(SCHEMA))
    assert model.chat(msgs, grammar=g, max_tokens=96, temperature=0) == got   # a Grammar is reused
    assert g.check(got) is None
    assert "maxLength 20" in g.check('{"name":"%s","age":1,"tags":[]}' % ("x" * 30))
    # any key order and whitespace the schema allows
    assert g.check('{ "tags": ["a"],\n  "age": 3, "name": "Ann" }') is None
    # sampled: every answer parses and matches
    for seed in range(3):
        c = model.complete(model.chat_tokens(msgs), json_schema=SCHEMA, max_tokens=96, temperature=1.0, seed=seed)
        assert c.finish_reason == "stop" and c.valid, (c.text, c.error)
        jsonschema.validate(json.loads(c.text), SCHEMA)
    # any JSON object
    ask = [{"role": "user", "content": 'Reply with a JSON object with the key "ok" set to true.'}]
    assert json.loads(model.chat(ask, response_format={"type": "json_object"}, max_tokens=64,
                                 temperature=0)) == {"ok": True}


def test_gbnf_grammar_and_retries(spindle_pkg, model):
    for seed in range(4):
        assert model.generate("Is water wet? Answer:", grammar='root ::= " yes" | " no"', max_tokens=8,
                              temperature=1.0, seed=seed) in (" yes", " no")
    stream = list(model.generate("Is water wet? Answer:", grammar='root ::= " yes" | " no"', max_tokens=8,
                                 temperature=0, stream=True))
    assert len(stream) == 1 and stream[0] in (" yes", " no")   # held back until checked
    # no grammar enforces multipleOf: every attempt is checked and retried
    never = {"type": "integer", "minimum": 1, "maximum": 99, "multipleOf": 101}
    assert model.grammar(json_schema=never).check("23") == "$: 23 is not a multiple of 101"
    c = model.complete("A number:", json_schema=never, max_retries=3, max_tokens=8, temperature=0.8, seed=1)
    assert c.finish_reason == "error" and c.attempts == 4 and not c.valid
    assert "multiple of 101" in c.error and "attempt 4 of 4" in c.error
    with pytest.raises(spindle_pkg.SpindleError, match="multiple of 101"):
        model.generate("A number:", json_schema=never, max_retries=1, max_tokens=8, temperature=0.8, seed=1)
    with pytest.raises(spindle_pkg.SpindleError, match="line 1"):
        model.grammar(gbnf="root ::= (")
    with pytest.raises(spindle_pkg.SpindleError, match="not in this schema"):
        model.grammar(json_schema={"$ref": "https://example.com/other.json"})
    assert model.grammar(json_schema={"not": {"type": "string"}}).check('"x"') == "$: matches the schema of 'not'"
    with pytest.raises(spindle_pkg.SpindleError, match="max_retries"):
        model.generate("x", grammar='root ::= "a"', max_retries=17)
    with pytest.raises(TypeError, match="exclude"):
        model.chat([{"role": "user", "content": "x"}], json_schema={}, response_format={"type": "json_object"})
    with pytest.raises(ValueError, match="response_format"):
        model.chat([{"role": "user", "content": "x"}], response_format={"type": "xml"})


@pytest.mark.parametrize("spec", [dict(spec="ngram"), dict(spec="self", spec_layers=15), dict(spec="draft")])
def test_speculative_decoding_keeps_the_greedy_text(spindle_pkg, model, smollm2_path, spec):
    want = model.generate(REPEAT, max_tokens=48, temperature=0)
    if spec["spec"] == "draft":
        spec = dict(spec, draft_model=smollm2_path)   # the model itself: a draft with its vocabulary
    with spindle_pkg.Model(smollm2_path, n_ctx=1024, spec_k=4, spec_fixed=True, **spec) as s:
        assert s.generate(REPEAT, max_tokens=48, temperature=0) == want
        st = s.stats
        assert st["spec_drafted"] > 0 and 0 < st["spec_accepted"] <= st["spec_drafted"], st
    assert model.stats["spec_drafted"] == 0


def test_speculative_options_are_checked(spindle_pkg, smollm2_path, gemma3_path):
    with pytest.raises(spindle_pkg.SpindleError, match="spec.*'fast'"):
        spindle_pkg.Model(smollm2_path, spec="fast")
    with spindle_pkg.Model(smollm2_path, spec="draft", draft_model=gemma3_path) as s:
        with pytest.raises(spindle_pkg.SpindleError, match="vocabular"):
            s.generate("Hi", max_tokens=2)


def test_kv_cache_types_equal_spindle_run(spindle_pkg, run_plain, model, smollm2_path):
    want = run_plain("run", "-m", smollm2_path, "-p", REPEAT, "-n", 24, "--temp", 0, "--ctx", 1024,
                     "--cache-type-k", "q8_0", "--cache-type-v", "q4_0")
    assert want.returncode == 0, want.stderr
    with spindle_pkg.Model(smollm2_path, n_ctx=1024, cache_type_k="q8_0", cache_type_v="q4_0") as q:
        assert q.generate(REPEAT, max_tokens=24, temperature=0) == want.stdout
        # keys 8.5 and values 4.5 bits a value against 16 + 16
        assert q.stats["kv_bytes"] == pytest.approx(model.stats["kv_bytes"] * (8.5 + 4.5) / 32, rel=0.01)
    with pytest.raises(spindle_pkg.SpindleError, match="cache_type_v.*f16, q8_0 or q4_0"):
        spindle_pkg.Model(smollm2_path, cache_type_v="q9")
