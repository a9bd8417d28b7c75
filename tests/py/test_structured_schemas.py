"""Structured output for the schemas people send (issue 34), end to end:
annotations and unknown keywords ignored, every draft's keywords, optional
properties written where the schema lists them, flexible whitespace, the
keywords the validator checks (with retries), and `spindle run` saying so
when an output is cut or invalid (exit status 3).  Schemas are written
here; every output must parse with json.loads and pass the Python
jsonschema validator (the draft the schema names)."""
import json

import jsonschema
import pytest

from server_util import Server, assert_openai_error


@pytest.fixture(scope="module")
def smollm2(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "4", "--ctx", "1024", "--max-retries", "8")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def validator_for(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def chat_schema(server, schema, seed=1, content="Reply with a realistic example as JSON.", max_tokens=200,
                **extra):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0.8,
            "seed": seed, "max_retries": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    body["response_format"].update(extra)
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["valid"] is True, choice
    return choice["message"]["content"]


ANNOTATED = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.com/person",
    "title": "Person", "description": "someone", "$comment": "written for a test", "examples": [{"name": "Ann"}],
    "x-generator": {"tool": "none"}, "javaName": "Person", "preferredOrder": ["name", "age"], "readonly": False,
    "type": "object", "additionalProperties": False, "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "maxLength": 20, "default": "Ann", "example": "Bob", "x-order": 1,
                 "deprecated": False, "readOnly": True, "_format": "name"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120, "links": [], "id": "age", "format": "int32"},
    },
}


def test_annotations_and_unknown_keywords_are_ignored(smollm2):
    text = chat_schema(smollm2, ANNOTATED, content="A person as JSON.")
    validator_for(ANNOTATED).validate(json.loads(text))


def test_optional_property_before_a_required_one(smollm2):
    # greedy after three examples: the model writes the optional "a" first,
    # where the schema lists it (once, required ones were forced first)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["b"], "additionalProperties": False}
    prompt = 'JSON: {"a":1,"b":2}\nJSON: {"a":3,"b":4}\nJSON: {"a":5,"b":6}\nJSON: '
    r = smollm2.post("/v1/completions", {"prompt": prompt, "max_tokens": 20, "temperature": 0,
                                         "json_schema": schema})
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    value = json.loads(text)
    assert list(value) == ["a", "b"], text
    jsonschema.validate(value, schema)


def test_forty_optional_properties(smollm2):
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"p%d" % i: {"type": "string", "maxLength": 10} for i in range(40)}}
    text = chat_schema(smollm2, schema, max_tokens=800)
    value = json.loads(text)
    jsonschema.validate(value, schema)
    keys = [int(k[1:]) for k in value]
    assert keys == sorted(keys), text   # in the schema's order


def test_flexible_whitespace(smollm2):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "tags": {"type": "array", "items": {"type": "string",
                                                                                   "maxLength": 8},
                                                        "maxItems": 2}},
              "required": ["name", "tags"], "additionalProperties": False}
    example = '{\n  "name": "Ann",\n  "tags": [\n    "x"\n  ]\n}'
    prompt = "JSON:\n%s\nJSON:\n%s\nJSON:\n" % (example, example.replace("Ann", "Bob"))
    texts = {}
    for ws in ("compact", "flexible"):
        r = smollm2.post("/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0,
                                             "response_format": {"type": "json_schema", "whitespace": ws,
                                                                 "json_schema": {"name": "p", "schema": schema}}})
        assert r.status_code == 200, r.text
        texts[ws] = r.json()["choices"][0]["text"]
        jsonschema.validate(json.loads(texts[ws]), schema)
    assert not any(c in texts["compact"] for c in " \n\t"), texts   # compact: the default
    assert "\n" in texts["flexible"], texts                         # the model follows the examples
    # json_object too
    r = smollm2.post("/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0,
                                         "response_format": {"type": "json_object", "whitespace": "flexible"}})
    assert r.status_code == 200, r.text
    assert isinstance(json.loads(r.json()["choices"][0]["text"]), dict)
    err = assert_openai_error(smollm2.post("/v1/completions", {
        "prompt": "x", "max_tokens": 2, "response_format": {"type": "json_object", "whitespace": 1}}), 400,
        "response_format.whitespace")
    assert "flexible" in err["message"], err


# Keywords the validator checks (the grammar may allow more: retries) and
# those the grammar now enforces.
KEYWORD_SCHEMAS = [
    {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "lives": {"type": "integer",
                                                                                  "minimum": 1, "maximum": 9}},
     "required": ["kind"], "additionalProperties": False,
     "if": {"properties": {"kind": {"const": "cat"}}}, "then": {"required": ["lives"]},
     "else": {"not": {"required": ["lives"]}}},
    {"type": "object", "patternProperties": {"^tag_[a-z]{1,6}$": {"type": "boolean"}},
     "additionalProperties": False, "minProperties": 1, "maxProperties": 3},
    {"type": "object", "properties": {"card": {"type": "string", "pattern": "^[0-9]{4}$"},
                                      "cvc": {"type": "string", "pattern": "^[0-9]{3}$"}},
     "dependentRequired": {"card": ["cvc"]}, "required": ["card"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 20}, "maxItems": 4,
     "contains": {"minimum": 10}, "minContains": 1},
    {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,8}$"}, "maxProperties": 3,
     "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 99}},
    {"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1,
                                                                "maximum": 999}},
                        "required": ["id"]}},
     "allOf": [{"$ref": "#/$defs/base"},
               {"properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"]}],
     "unevaluatedProperties": False},
    {"type": "object", "properties": {
        "ip": {"type": "string", "format": "ipv4"}, "host": {"type": "string", "format": "hostname"},
        "wait": {"type": "string", "format": "duration"}, "home": {"type": "string", "format": "uri"}},
     "required": ["ip", "host", "wait", "home"], "additionalProperties": False},
    {"type": "string", "not": {"enum": ["", "none"]}, "maxLength": 5000},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
     "items": [{"type": "string", "maxLength": 10}, {"type": "integer"}], "additionalItems": False,
     "minItems": 2},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
     "properties": {"score": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 10}},
     "required": ["score"], "additionalProperties": False, "dependencies": {"score": ["score"]}},
]


@pytest.mark.parametrize("i", range(len(KEYWORD_SCHEMAS)))
def test_keywords_enforced_or_checked(smollm2, i):
    schema = KEYWORD_SCHEMAS[i]
    text = chat_schema(smollm2, schema, seed=i + 1)
    validator_for(schema).validate(json.loads(text))


def test_run_cli_cut_or_invalid_output_exit_3(run_spindle, smollm2_path, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"text": {"type": "string", "minLength": 100}},
                                  "required": ["text"]}))
    r = run_spindle("run", "-m", smollm2_path, "--chat", "-p", "Write.", "-n", "6", "--json-schema", schema)
    assert r.returncode == 3, (r.returncode, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.startswith("spindle:")]
    assert len(lines) == 1 and "incomplete" in lines[0] and "length" in lines[0], r.stderr
    with pytest.raises(ValueError):
        json.loads(r.stdout)   # the partial text is still printed
    assert r.stdout.startswith('{"text"'), r.stdout
    # invalid after every retry: exit 3 too
    never = tmp_path / "never.json"
    never.write_text(json.dumps({"type": "integer", "minimum": 1, "maximum": 99, "multipleOf": 101}))
    r = run_spindle("run", "-m", smollm2_path, "-p", "A number:", "-n", "8", "--json-schema", never,
                    "--max-retries", "1", "--seed", "3")
    assert r.returncode == 3 and "multiple of 101" in r.stderr and "attempt 2 of 2" in r.stderr, r.stderr
    # flexible whitespace on the CLI; a bad value is bad input (2)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                                     "maximum": 9}},
                              "required": ["n"], "additionalProperties": False}))
    r = run_spindle("run", "-m", smollm2_path, "-p", 'JSON:\n{\n  "n": 1\n}\nJSON:\n{\n  "n": 2\n}\nJSON:\n',
                    "-n", "20", "--temp", "0", "--json-schema", ok, "--json-whitespace", "flexible")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n"] in range(10) and "\n" in r.stdout, r.stdout
    r = run_spindle("run", "-m", smollm2_path, "-p", "x", "--json-schema", ok, "--json-whitespace", "wide")
    assert r.returncode == 2 and "compact nor flexible" in r.stderr, r.stderr
    # what can be neither enforced nor checked: one line naming it, exit 2
    remote = tmp_path / "remote.json"
    remote.write_text(json.dumps({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}},
                                  "title": "ignored", "x-note": 1}))
    r = run_spindle("run", "-m", smollm2_path, "-p", "x", "--json-schema", remote)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "$ref 'https://example.com/a.json'" in lines[0] \
        and "$.properties.a" in lines[0], r.stderr
