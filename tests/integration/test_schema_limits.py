"""Limits on what a request may nest and how large its schemas may be, through the real server
(text/json_limits.h, docs/operations.md "Limits on requests"): a schema or tool definition
nested 10,000 or 100,000 deep is a 400 that names the limit, not a crashed front and worker; a
schema past the schema limits is a 400 naming the limit; a wide schema within them is served;
a schema the grammar cannot enforce is a 400 naming the parameter before any token, also when
the worker is the one that compiles it. Each case runs against both engines."""
import json

import pytest

from conftest import request
from test_worker import children


def chat(port, extra_json):
    """POST a chat request whose body ends with the raw JSON members `extra_json` (built as
    text: Python's json module cannot write 10,000 levels)."""
    body = ('{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":4,'
            '"temperature":0,' + extra_json + "}")
    status, _, raw = request(port, "POST", "/v1/chat/completions", body, timeout=120)
    return status, json.loads(raw)


def nested_properties(levels):
    return '{"type":"object","properties":{"a":' * levels + '{"type":"string"}' + "}}" * levels


def nested_arrays(levels):
    return '{"type":"array","items":' * levels + "{}" + "}" * levels


def schema_format(schema_text):
    return ('"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":'
            + schema_text + "}}")


def tools(parameters_text, choice):
    return ('"tools":[{"type":"function","function":{"name":"f","parameters":'
            + parameters_text + '}}],"tool_choice":"' + choice + '"')


@pytest.fixture(params=["subprocess", "in-process"])
def server(request, start_server, models):
    return start_server(models["small"], "--engine", request.param)


def assert_still_serving(s, worker):
    status, j = chat(s.port, '"stream":false')
    assert status == 200, j
    if worker is not None:
        assert children(s.pid) == [worker], "the worker was not restarted"


def test_deep_schemas_and_tools_are_a_400_naming_the_limit_not_a_crash(server):
    worker = children(server.pid)[0] if children(server.pid) else None
    body_limit = "nests arrays and objects deeper than 128 levels (limit 128)"
    for extra in [schema_format(nested_arrays(10_000)),
                  schema_format(nested_properties(5_000)),
                  tools(nested_properties(10_000), "required"),
                  tools(nested_arrays(100_000), "auto")]:
        status, j = chat(server.port, extra)
        assert status == 400, j
        assert body_limit in j["error"]["message"], j
    # Within the body's depth but past the schema's: the schema limit, and where.
    status, j = chat(server.port, schema_format(nested_properties(40)))
    assert status == 400, j
    assert j["error"]["param"] == "response_format.json_schema.schema", j
    assert "nests deeper than 32 levels (limit 32)" in j["error"]["message"], j
    status, j = chat(server.port, tools(nested_properties(40), "required"))
    assert status == 400, j
    assert j["error"]["param"] == "tools", j
    assert "tool 'f' parameters: #/properties/a" in j["error"]["message"], j
    assert_still_serving(server, worker)


def wide(n):
    props = ",".join(f'"p{i}":{{"type":"string"}}' for i in range(n))
    return '{"type":"object","properties":{' + props + "}}"


def test_schema_size_limits_are_a_400_naming_them_and_a_wide_schema_within_is_served(server):
    worker = children(server.pid)[0] if children(server.pid) else None
    status, j = chat(server.port, schema_format(wide(5_001)))
    assert status == 400, j
    assert "over 5000 properties and definitions in total (limit 5000)" in j["error"]["message"], j
    enum = '{"enum":[' + ",".join(str(i) for i in range(1_001)) + "]}"
    status, j = chat(server.port, schema_format(enum))
    assert status == 400, j
    assert "over 1000 enum values in total (limit 1000)" in j["error"]["message"], j
    # 5,000 optional properties: every key may follow every earlier one. Compiled in time and
    # memory linear in the schema, it is answered like any other request.
    status, j = chat(server.port, schema_format(wide(5_000)))
    assert status == 200, j
    assert j["choices"][0]["message"]["content"].startswith("{"), j
    assert_still_serving(server, worker)


def test_a_schema_the_grammar_cannot_enforce_is_a_400_naming_the_parameter(server):
    """With a worker, only the worker compiles the schema: its refusal comes back as this 400."""
    status, j = chat(server.port, schema_format('{"type":"string","pattern":"^a"}'))
    assert status == 400, j
    assert j["error"]["param"] == "response_format.json_schema.schema", j
    assert j["error"]["message"] == ("response_format.json_schema.schema: #: the schema feature "
                                     "'pattern' is not supported"), j
    status, j = chat(server.port, tools('{"anyOf":[{"type":"object"},{"type":"object"}]}',
                                        "required"))
    assert status == 400, j
    assert j["error"]["param"] == "tools", j
    assert j["error"]["message"].startswith("tools: tool 'f' parameters: #: 'anyOf'"), j
