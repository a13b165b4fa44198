"""ember serve's OpenAI API: real clients (the openai package, raw sockets) on a fixture model."""
import json
import socket
import subprocess
import time

import openai
import pytest

from conftest import SEED, connect, parse_response, read_all, request, send_request, wait_for

CHAT = {"model": "default", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def server(start_server, models):
    return start_server(models["small"], "--max-body-bytes", "65536", "--ctx-size", "512")


def client(server, key="unused"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=60)


def test_listener_is_up_before_the_model_finishes_loading(server):
    text = "".join(server.lines)
    assert text.index("listening on") < text.index("model loaded")


def test_health_ready_and_models(server):
    assert request(server.port, "GET", "/health")[0] == 200
    status, _, body = request(server.port, "GET", "/ready")
    assert status == 200 and json.loads(body)["status"] == "ready"
    ids = [m.id for m in client(server).models.list().data]
    assert "default" in ids and len(ids) == 2


def test_openai_chat_non_streaming(server):
    r = client(server).chat.completions.create(messages=CHAT["messages"], model="default",
                                               max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0


def test_openai_chat_streaming_carries_content_deltas(server):
    stream = client(server).chat.completions.create(
        messages=CHAT["messages"], model="default", max_tokens=16, stream=True, seed=SEED,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content, "a normal streamed answer carries its content deltas"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"] or finals == ["stop"]
    assert chunks[-1].usage.completion_tokens <= 16


def test_openai_completions_both_ways(server):
    c = client(server)
    r = c.completions.create(model="default", prompt="Once upon", max_tokens=8, seed=1,
                             temperature=0)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 8
    pieces = [ch.choices[0].text for ch in c.completions.create(
        model="default", prompt="Once upon", max_tokens=8, stream=True, seed=1, temperature=0)
        if ch.choices]
    assert "".join(pieces) == r.choices[0].text  # same seed, greedy: same text


def test_unseeded_requests_vary_and_a_given_seed_reproduces(server):
    # Issue 42: the default seed was a constant, so five unseeded requests at temperature 1 gave
    # one answer. Each now draws a fresh seed; 24 sampled tokens repeating in all five would
    # take the same 24 draws five times.
    body = {"model": "default", "prompt": "Once upon", "max_tokens": 24, "temperature": 1.0}

    def text(b):
        status, _, raw = request(server.port, "POST", "/v1/completions", b)
        assert status == 200, raw
        return json.loads(raw)["choices"][0]["text"]

    assert len({text(body) for _ in range(5)}) > 1
    seeded = {**body, "seed": 1234}
    assert len({text(seeded) for _ in range(3)}) == 1


def test_stop_string_is_not_emitted(server):
    c = client(server)
    full = c.completions.create(model="default", prompt="abc", max_tokens=40, temperature=0).choices[0].text
    assert len(full) > 6
    stop = full[3:6]
    r = c.completions.create(model="default", prompt="abc", max_tokens=40, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert full.startswith(r.choices[0].text)


def test_sse_byte_format(server):
    with connect(server.port) as s:
        send_request(s, "POST", "/v1/chat/completions",
                     {**CHAT, "stream": True, "max_tokens": 6,
                      "stream_options": {"include_usage": True}})
        status, headers, body = parse_response(read_all(s))
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert body.endswith(b"data: [DONE]\n\n")
    events = body.split(b"\n\n")
    assert events[-1] == b""
    events = events[:-1]
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events)
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert payloads[-2]["choices"][0]["finish_reason"] in ("length", "stop")
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["total_tokens"] > 0
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)


def error_of(port, body, path="/v1/chat/completions", headers=None):
    status, hdrs, raw = request(port, "POST", path, body, headers)
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return status, hdrs, err


def test_errors_are_openai_error_json_with_the_right_status(server):
    p = server.port
    status, _, e = error_of(p, '{"model": "default", "messages": [')
    assert status == 400 and e["code"] == "invalid_json"
    status, _, e = error_of(p, {**CHAT, "temperature": "warm"})
    assert status == 400 and e["param"] == "temperature" and e["code"] == "invalid_type"
    status, _, e = error_of(p, {"model": "default", "messages": []})
    assert status == 400 and e["param"] == "messages"
    status, _, e = error_of(p, {**CHAT, "n": 0})
    assert status == 400 and e["param"] == "n"
    status, _, e = error_of(p, {**CHAT, "tools": [{"type": "retrieval"}]})
    assert status == 400 and e["param"] == "tools[0]"
    status, _, e = error_of(p, {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}],
                                "tool_choice": {"type": "function", "function": {"name": "g"}}})
    assert status == 400 and e["param"] == "tool_choice" and "'g'" in e["message"]
    status, _, e = error_of(p, {**CHAT, "model": "gpt-4"})
    assert status == 404 and "'default'" in e["message"] and "gpt-4" in e["message"]


def test_prompt_longer_than_the_context_names_both_numbers(server):
    long_prompt = "word " * 3000
    status, _, e = error_of(server.port, {"model": "default", "prompt": long_prompt},
                            path="/v1/completions")
    assert status == 400 and e["code"] == "context_length_exceeded"
    assert "512" in e["message"]
    n = int(e["message"].split("has ")[1].split(" ")[0])
    assert n > 512


def test_body_over_the_limit_is_413(server):
    big = {**CHAT, "pad": "x" * 70000}
    status, _, e = error_of(server.port, big)
    assert status == 413


def test_unknown_route_is_404_and_wrong_method_405(server):
    assert request(server.port, "GET", "/nope")[0] == 404
    assert request(server.port, "GET", "/v1/chat/completions")[0] == 405


def test_api_key_is_required_when_set(start_server, models):
    s = start_server(models["small"], "--api-key", "sekrit")
    status, _, e = error_of(s.port, CHAT)
    assert status == 401
    status, _, e = error_of(s.port, CHAT, headers={"Authorization": "Bearer wrong"})
    assert status == 401
    with pytest.raises(openai.AuthenticationError):
        client(s, "nope").models.list()
    r = client(s, "sekrit").chat.completions.create(messages=CHAT["messages"], model="default",
                                                    max_tokens=2)
    assert r.choices[0].message.role == "assistant"
    assert request(s.port, "GET", "/health")[0] == 200  # probes need no key


def test_overloaded_is_429_with_retry_after(start_server, models):
    s = start_server(models["big"], "--max-sequences", "1", "--max-queued", "0")
    sock = connect(s.port)
    send_request(sock, "POST", "/v1/completions", {"model": "default", "prompt": "x",
                                                   "max_tokens": 3000, "seed": SEED})
    wait_for(lambda: s.metric("ember_active_sequences") == 1, what="one active sequence")
    status, hdrs, raw = request(s.port, "POST", "/v1/completions",
                                {"model": "default", "prompt": "y", "max_tokens": 4})
    sock.close()
    assert status == 429, raw
    assert int(hdrs["retry-after"]) > 0
    assert json.loads(raw)["error"]["code"] == "overloaded"


def test_slow_loris_clients_do_not_delay_a_normal_request(start_server, models):
    s = start_server(models["small"], "--header-timeout", "1")
    loris = []
    for _ in range(20):
        c = connect(s.port)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes
        loris.append(c)
    t0 = time.monotonic()
    r = client(s).chat.completions.create(messages=CHAT["messages"], model="default", max_tokens=4)
    assert r.choices and time.monotonic() - t0 < 1.0
    # The header deadline (1 s for the whole head) closes every one of them.
    for c in loris:
        c.settimeout(5)
        try:
            assert c.recv(1) == b""
        except ConnectionResetError:
            pass
        c.close()


def test_metrics_pass_promtool(server):
    client(server).chat.completions.create(messages=CHAT["messages"], model="default", max_tokens=3,
                                           seed=SEED)
    request(server.port, "GET", "/nope")
    status, hdrs, body = request(server.port, "GET", "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr
    text = body.decode()
    assert 'ember_http_requests_total{route="/v1/chat/completions",status="200"} 1' in text
    assert "ember_time_to_first_token_seconds_count 1" in text


def test_logprobs_are_reported_per_token(server):
    r = client(server).chat.completions.create(messages=CHAT["messages"], model="default",
                                               max_tokens=4, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content)
