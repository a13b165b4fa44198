"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages) over raw HTTP against
fixture models: the message shape, max_tokens required, stop sequences, the typed event
stream, auth by x-api-key, errors in Anthropic's shape, a departing streaming client cancelled;
then the official `anthropic` client (create, stream, a tool round trip, count_tokens) against
the default model."""
import json

import pytest

from conftest import connect, request, send_request, wait_for
from test_compat import default_model_path  # the default model's file

KEY = "anthropic-key"
MSG = "/v1/messages"
HI = [{"role": "user", "content": "Hello there"}]
AUTH = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def small(ember, models):
    from conftest import Server
    s = Server(ember, models["small"], "--ctx-size", "512", "--api-key", KEY,
               "--max-body-bytes", "65536")
    try:
        s.wait_ready(60)
        yield s
    finally:
        s.stop()


def post(server, body, path=MSG, headers=None):
    status, h, raw = request(server.port, "POST", path, body, {**AUTH, **(headers or {})})
    return status, h, json.loads(raw) if raw else None


def events(raw):
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:]
        out.append(data)
    return out


def test_create_answers_a_message_with_usage_and_a_stop_reason(small):
    status, _, m = post(small, {"model": "default", "max_tokens": 4, "messages": HI,
                                "system": [{"type": "text", "text": "Be brief."}]})
    assert status == 200, m
    assert m["id"].startswith("msg_") and m["type"] == "message" and m["role"] == "assistant"
    assert m["model"] == "default"
    assert [b["type"] for b in m["content"]] == ["text"]
    assert m["stop_reason"] in ("max_tokens", "end_turn") and m["stop_sequence"] is None
    assert 1 <= m["usage"]["output_tokens"] <= 4
    if m["stop_reason"] == "max_tokens":
        assert m["usage"]["output_tokens"] == 4
    status, _, n = post(small, {"model": "default", "messages": HI,
                                "system": [{"type": "text", "text": "Be brief."}]},
                        path=MSG + "/count_tokens")
    assert status == 200 and n == {"input_tokens": m["usage"]["input_tokens"]}


def test_max_tokens_is_required_and_errors_take_anthropics_shape(small):
    status, _, e = post(small, {"model": "default", "messages": HI})
    assert status == 400
    assert e["type"] == "error" and e["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e["error"]["message"]
    status, _, e = post(small, {"model": "claude-x", "max_tokens": 4, "messages": HI})
    assert status == 404 and e["error"]["type"] == "not_found_error"
    assert "claude-x" in e["error"]["message"]
    deep = "[" * 200 + "]" * 200
    status, _, e = post(small, '{"model":"default","max_tokens":4,"messages":' + deep + "}")
    assert status == 400 and e["type"] == "error" and "deeper" in e["error"]["message"]


def test_http_errors_on_the_messages_routes_take_anthropics_shape(small):
    status, h, raw = request(small.port, "GET", MSG, None, AUTH)
    assert status == 405 and "POST" in h["allow"]
    e = json.loads(raw)
    assert e["type"] == "error" and e["error"]["type"] == "invalid_request_error"
    big = {"model": "default", "max_tokens": 1, "messages": [{"role": "user", "content": "x" * 70000}]}
    status, _, raw = request(small.port, "POST", MSG + "/count_tokens", big, AUTH)
    assert status == 413
    e = json.loads(raw)
    assert e["type"] == "error" and e["error"]["type"] == "request_too_large"
    assert "65536" in e["error"]["message"]


def test_x_api_key_and_bearer_are_both_accepted_and_a_wrong_key_is_401(small):
    body = {"model": "default", "max_tokens": 1, "messages": HI}
    assert request(small.port, "POST", MSG, body, {"x-api-key": KEY})[0] == 200
    assert request(small.port, "POST", MSG, body, {"Authorization": "Bearer " + KEY})[0] == 200
    status, _, raw = request(small.port, "POST", MSG, body, {"x-api-key": "nope"})
    assert status == 401
    assert json.loads(raw)["error"]["type"] == "authentication_error"
    # The key works for the OpenAI routes too, as Anthropic-style clients send it.
    assert request(small.port, "GET", "/v1/models", None, {"x-api-key": KEY})[0] == 200


def test_a_stop_sequence_ends_the_text_before_it_and_is_named(small):
    body = {"model": "default", "max_tokens": 24, "messages": HI, "temperature": 0}
    status, _, full = post(small, body)
    assert status == 200, full
    text = full["content"][0]["text"]
    # A stop sequence from the middle of the greedy answer (not found earlier in it).
    for start in range(len(text) // 3, len(text) - 2):
        stop = text[start:start + 3]
        if text.find(stop) == start and stop.strip():
            break
    else:
        pytest.skip("the greedy answer is too short to cut")
    status, _, cut = post(small, {**body, "stop_sequences": ["zzzzqq", stop]})
    assert status == 200, cut
    assert cut["stop_reason"] == "stop_sequence" and cut["stop_sequence"] == stop
    assert cut["content"][0]["text"] == text[:start]


def test_the_stream_sends_typed_events_in_order(small):
    status, h, raw = request(small.port, "POST", MSG,
                             {"model": "default", "max_tokens": 5, "messages": HI,
                              "stream": True}, AUTH)
    assert status == 200 and h["content-type"].startswith("text/event-stream")
    ev = events(raw)
    types = [e["type"] for e in ev]
    assert types[:3] == ["message_start", "ping", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[3:-3]) <= {"content_block_delta"}
    assert ev[0]["message"]["id"].startswith("msg_") and ev[0]["message"]["usage"]["input_tokens"] > 0
    assert ev[2]["content_block"] == {"type": "text", "text": ""}
    assert all(e["delta"]["type"] == "text_delta" for e in ev[3:-3])
    assert ev[-2]["delta"]["stop_reason"] in ("max_tokens", "end_turn")
    assert ev[-2]["usage"]["output_tokens"] <= 5


@pytest.mark.heavy
def test_a_streaming_client_that_leaves_is_cancelled(start_server, models):
    big = start_server(models["big"], "--ctx-size", "4096")
    sock = connect(big.port)
    send_request(sock, "POST", MSG, {"model": "default", "max_tokens": 3000, "messages": HI,
                                     "stream": True})
    got = b""
    while b"content_block_delta" not in got:
        got += sock.recv(65536)
    sock.close()
    wait_for(lambda: big.metric("ember_cancellations_total", cause="client") == 1,
             what="client cancellation")
    wait_for(lambda: big.metric("ember_in_flight_requests") == 0, what="no request in flight")
    assert big.metric("ember_generated_tokens_total") < 3000


# ---- the official client, against the default model ----

WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(ember):
    anthropic = pytest.importorskip("anthropic")
    from conftest import Server
    s = Server(ember, default_model_path(), "--ctx-size", "2048", "--api-key", KEY)
    try:
        s.wait_ready(120)
        yield anthropic.Anthropic(base_url=s.base, api_key=KEY, max_retries=0, timeout=120)
    finally:
        s.stop()


@pytest.mark.heavy
def test_client_create_and_count_tokens(client):
    m = client.messages.create(model="default", max_tokens=16, system="You are terse.",
                               messages=[{"role": "user", "content": "Say hi"}])
    assert m.type == "message" and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    n = client.messages.count_tokens(model="default", system="You are terse.",
                                     messages=[{"role": "user", "content": "Say hi"}])
    assert n.input_tokens == m.usage.input_tokens


@pytest.mark.heavy
def test_client_stream_gives_the_same_text_as_its_deltas(client):
    with client.messages.stream(model="default", max_tokens=16,
                                messages=[{"role": "user", "content": "Count to five"}]) as st:
        deltas = "".join(st.text_stream)
        final = st.get_final_message()
    assert deltas and final.content[0].text == deltas
    assert final.usage.output_tokens >= 1


@pytest.mark.heavy
def test_client_tool_round_trip(client):
    first = client.messages.create(model="default", max_tokens=64, messages=ASK, tools=[WEATHER],
                                   tool_choice={"type": "tool", "name": "get_weather"},
                                   extra_body={"temperature": 0})
    assert first.stop_reason == "tool_use"
    use = [b for b in first.content if b.type == "tool_use"][0]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert isinstance(use.input, dict) and isinstance(use.input.get("city"), str)
    history = ASK + [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": "18 C and sunny"}]}]
    final = client.messages.create(model="default", max_tokens=32, messages=history,
                                   tools=[WEATHER], extra_body={"temperature": 0})
    assert final.content and final.stop_reason in ("end_turn", "max_tokens", "tool_use")


@pytest.mark.heavy
def test_client_streams_a_tool_call_as_input_json_deltas(client):
    with client.messages.stream(model="default", max_tokens=64, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "any"}, extra_body={"temperature": 0}) as st:
        kinds = [e.type for e in st]
        final = st.get_final_message()
    assert "input_json" in kinds  # the SDK's event for an input_json_delta
    assert final.stop_reason == "tool_use"
    use = [b for b in final.content if b.type == "tool_use"][0]
    assert isinstance(use.input.get("city"), str)
