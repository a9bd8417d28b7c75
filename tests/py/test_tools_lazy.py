"""Lazy tool-call grammars through the official openai client: with
tool_choice auto, the answer is free text until the model writes the
template's trigger, and from there the call (its name and its arguments) is
held by the functions' schemas.  SmolLM2-135M with two templates that know
tools (set into a copy of its GGUF): Hermes/Qwen-style (calls inside
<tool_call> tags, trigger '<tool_call>') and Llama-3-style (a bare JSON call
with "parameters", trigger '{"name"').

The small model never calls a tool on its own with these prompts: a logit
bias on the first tokens of the trigger ('<tool' or '{"name') steers it into
one, greedy, so every run is the same; the bias stays on through the call,
and the schema still holds every argument.  Without the bias the same
request answers in free text: nothing constrains it before the trigger."""
import json

import jsonschema
import pytest

from server_util import Server, gguf_with_chat_template
from test_tools import TOOLS  # get_weather and get_time, as the tool tests call them

TURNS = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') + '<|im_end|>\\n' }}"
         "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
HERMES = (
    "{%- if tools %}{{- '<|im_start|>system\\nYou are a function calling AI model. You may call one or more "
    "functions to assist with the user query. Here are the available tools: <tools>\\n' }}"
    "{%- for t in tools %}{{- t | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools>\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}" + TURNS)
LLAMA3 = (
    "{%- if tools %}{{- '<|im_start|>system\\nGiven the following functions, please respond with a JSON for a "
    "function call with its proper arguments that best answers the given prompt.\\n\\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not use "
    "variables.\\n\\n' }}{%- for t in tools %}{{- t | tojson }}{{- '\\n\\n' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}" + TURNS)
# template, the text whose tokens are biased, the bias
STYLES = {"hermes": (HERMES, "<tool", 5), "llama3": (LLAMA3, '{"name', 10)}


@pytest.fixture(scope="module", params=sorted(STYLES))
def server(request, spindle_bin, smollm2_path, tmp_path_factory):
    template, steer, bias = STYLES[request.param]
    path = str(tmp_path_factory.mktemp("tools") / ("SmolLM2-%s.gguf" % request.param))
    gguf_with_chat_template(smollm2_path, path, template)
    s = Server(spindle_bin, path, "--ctx", "2048")
    toks = s.post("/tokenize", {"content": steer, "add_special": False}).json()["tokens"]
    assert 1 <= len(toks) <= 3, toks
    s.steer = {str(t): bias for t in toks}
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def stream(server, city, **kw):
    """One streamed auto answer: (content, [(name, arguments)], finish_reason)."""
    content, calls, finish = "", {}, None
    chunks = server.openai().chat.completions.create(
        model=server.model_id, messages=[{"role": "user", "content": "What is the weather in %s right now?" % city}],
        tools=TOOLS, tool_choice="auto", stream=True, temperature=0, seed=1, max_tokens=80,
        parallel_tool_calls=False, extra_body={"max_retries": 0}, **kw)
    for chunk in chunks:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"name": "", "arguments": ""})
                if d.function and d.function.name:
                    c["name"] += d.function.name
                if d.function and d.function.arguments:
                    c["arguments"] += d.function.arguments
            finish = ch.finish_reason or finish
    return content, [(c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish


def test_auto_text_is_free_before_the_trigger(server):
    content, calls, finish = stream(server, "Paris")
    assert not calls and finish in ("stop", "length") and content.strip(), (content, calls, finish)
    assert not content.lstrip().startswith(("{", "<tool_call>")), content


@pytest.mark.parametrize("city", ["Paris", "Tokyo", "Lima"])
def test_streamed_auto_call_has_valid_arguments(server, city):
    content, calls, finish = stream(server, city, logit_bias=server.steer)
    assert len(calls) == 1 and finish == "tool_calls", (content, calls, finish)
    name, arguments = calls[0]
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    jsonschema.validate(json.loads(arguments), schema)
