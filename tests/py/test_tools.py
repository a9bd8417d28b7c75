"""Tool calling through the official openai client, on SmolLM2 and Gemma 3
(their templates know no tools: spindle describes the tools in the system
message and reads plain JSON calls): a forced call whose arguments pass
the jsonschema validator, then the tool's result, then a final answer;
streamed tool_calls that reassemble to the same call; tool_choice none,
named, required and auto; parallel_tool_calls; bad definitions -> 400."""
import json

import jsonschema
import pytest

from server_util import Server, assert_openai_error

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 2, "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a timezone.",
    "parameters": {"type": "object", "properties": {
        "tz": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
        "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def server(request, spindle_bin):
    path = request.getfixturevalue(request.param + "_path")
    s = Server(spindle_bin, path, "--parallel", "4", "--ctx", "2048")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def schema_of(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def check_call(call):
    assert call.type == "function" and call.id.startswith("call_"), call
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, schema_of(call.function.name))
    return args


def ask(server, stream=False, **kw):
    """One chat request; returns (content, tool_calls as [(id, name, arguments)], finish_reason);
    the calls of an answer that finished with tool_calls are checked against their schemas."""
    client = server.openai()
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 120)
    if not stream:
        r = client.chat.completions.create(model=server.model_id, **kw)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        finish = r.choices[0].finish_reason
        # a call cut by max_tokens ("length") holds the arguments written so far
        for c in m.tool_calls or [] if finish == "tool_calls" else []:
            check_call(c)
        return m.content, calls, finish
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(model=server.model_id, stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                if d.id:
                    assert c["id"] is None, "the id comes once"
                    c["id"] = d.id
                if d.function and d.function.name:
                    c["name"] += d.function.name
                if d.function and d.function.arguments:
                    c["arguments"] += d.function.arguments
            finish = ch.finish_reason or finish
    assert sorted(calls) == list(range(len(calls))), calls
    return content or None, [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish


def test_forced_call_result_and_answer(server):
    content, calls, finish = ask(server, tools=TOOLS, seed=5, temperature=0.7,
                                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert finish == "tool_calls" and content is None and len(calls) == 1, (content, calls, finish)
    call_id, name, arguments = calls[0]
    assert name == "get_weather"
    args = json.loads(arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    # the client sends the call back with the tool's result
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"temperature": 21, "sky": "clear"})}]
    content, calls, finish = ask(server, messages=history, tools=TOOLS, tool_choice="none", seed=6, max_tokens=60)
    assert calls == [] and isinstance(content, str) and content.strip(), (content, calls)
    assert finish in ("stop", "length")
    # the same history without tools in the request renders too
    content, calls, finish = ask(server, messages=history, seed=6, max_tokens=20)
    assert calls == [] and isinstance(content, str)


def test_stream_reassembles_to_the_same_call(server):
    kw = dict(tools=TOOLS, tool_choice="required", seed=11, temperature=0.8, parallel_tool_calls=False)
    _, whole, finish = ask(server, **kw)
    # token by token (no retries), and held until checked (retries allowed): the same call
    for retries in (0, 2):
        _, streamed, sfinish = ask(server, stream=True, extra_body={"max_retries": retries}, **kw)
        assert sfinish == finish == "tool_calls"
        assert [(n, a) for _, n, a in streamed] == [(n, a) for _, n, a in whole], (streamed, whole)
        assert all(i.startswith("call_") for i, _, _ in streamed)
        check_args = json.loads(streamed[0][2])
        jsonschema.validate(check_args, schema_of(streamed[0][1]))


def test_tool_choice_modes(server):
    # none: text, no calls
    content, calls, finish = ask(server, tools=TOOLS, tool_choice="none", seed=1, max_tokens=30)
    assert calls == [] and isinstance(content, str) and finish in ("stop", "length")
    # named: that function, once
    for name in ("get_weather", "get_time"):
        _, calls, finish = ask(server, tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}},
                               seed=2)
        assert finish == "tool_calls" and [c[1] for c in calls] == [name], calls
    # required: one call or more, each of a given function with valid arguments (ask() validates)
    _, calls, finish = ask(server, tools=TOOLS, tool_choice="required", seed=3, max_tokens=200,
                           messages=[{"role": "user", "content": "Weather in Paris and the time in Europe/Paris?"}])
    assert calls and finish in ("tool_calls", "length"), (calls, finish)
    # parallel_tool_calls false: exactly one
    _, calls, finish = ask(server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, seed=3)
    assert len(calls) == 1 and finish == "tool_calls", calls
    # auto: text or calls, whichever the model picks; finished calls are valid (ask() checks), streamed
    # too; a call cut by max_tokens ends with "length"
    for stream in (False, True):
        content, calls, finish = ask(server, stream=stream, tools=TOOLS, seed=4, max_tokens=60,
                                     extra_body={"max_retries": 0})
        assert calls or content, (content, calls)
        assert finish in (("tool_calls", "length") if calls else ("stop", "length")), (content, calls, finish)


def test_auto_call_once_it_starts(server):
    # a bias on the tokens of '{"name' steers the model into a call's opening (a small model
    # rarely calls on its own); from the trigger on the grammar holds, so the call is valid
    toks = server.post("/tokenize", {"content": '{"name', "add_special": False}).json()["tokens"]
    assert 1 <= len(toks) <= 3, toks
    content, calls, finish = ask(server, tools=[WEATHER], parallel_tool_calls=False, seed=8, max_tokens=80,
                                 logit_bias={str(t): 10 for t in toks})
    assert len(calls) == 1 and calls[0][1] == "get_weather" and finish == "tool_calls", (content, calls, finish)


BAD_FN = {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize("body,param,needle", [
    ({"tools": []}, "tools", "1 to 128"),
    ({"tools": {"type": "function"}}, "tools", "array"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0]", "'function'"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name", "letters"),
    ({"tools": [BAD_FN, BAD_FN]}, "tools[1].function.name", "twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]},
     "tools[0].function.parameters", "'not'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools[0].function.parameters", "'object'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "params": {}}}]}, "tools[0].function", "'params'"),
    ({"tools": [BAD_FN], "tool_choice": "always"}, "tool_choice", "none, auto"),
    ({"tools": [BAD_FN], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice", "'g'"),
    ({"tool_choice": "auto"}, "tool_choice", "only allowed when 'tools'"),
    ({"parallel_tool_calls": True}, "parallel_tool_calls", "only allowed when 'tools'"),
    ({"tools": [BAD_FN], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
    ({"tools": [BAD_FN], "response_format": {"type": "json_object"}}, "tools", "cannot be combined"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0]", "not a JSON object"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}]},
     "messages[1].tool_call_id", "tool_call_id"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls", "assistant"),
    ({"functions": [{"name": "f"}]}, "functions", "not supported"),
])
def test_bad_tools_are_400(server, body, param, needle):
    full = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    full.update(body)
    err = assert_openai_error(server.post("/v1/chat/completions", full), 400, param)
    assert needle in err["message"], err


def test_tools_only_on_chat(server):
    err = assert_openai_error(server.post("/v1/completions", {"prompt": "x", "tools": [BAD_FN]}), 400, "tools")
    assert "not supported" in err["message"], err
