"""POST /tokenize and /detokenize over HTTP, in llama.cpp's shapes, on a fixture model."""
import json

import pytest

from conftest import request


@pytest.fixture
def server(start_server, models):
    return start_server(models["small"])


def post(server, path, body, headers=None):
    status, headers_, raw = request(server.port, "POST", path, body, headers)
    return status, headers_, json.loads(raw)


def test_tokenize_and_detokenize_round_trip(server):
    text = "The quick brown fox <|im_end|> jumps."
    status, _, t = post(server, "/tokenize", {"content": text})
    assert status == 200
    assert t["tokens"] and all(isinstance(i, int) for i in t["tokens"])
    status, _, d = post(server, "/detokenize", {"tokens": t["tokens"]})
    assert status == 200 and d == {"content": text}


def test_with_pieces_pairs_each_id_with_its_text(server):
    status, _, plain = post(server, "/tokenize", {"content": "hello world"})
    status, _, t = post(server, "/tokenize", {"content": "hello world", "with_pieces": True})
    assert status == 200
    assert [p["id"] for p in t["tokens"]] == plain["tokens"]
    assert "".join(p["piece"] for p in t["tokens"]) == "hello world"


def test_oversized_or_wrong_input_is_a_400_naming_the_field(server):
    status, _, e = post(server, "/tokenize", {"content": "a" * (1 << 20) + "a"})
    assert status == 400 and e["error"]["param"] == "content"
    assert "limit is 1048576 bytes" in e["error"]["message"]
    status, _, e = post(server, "/detokenize", {"tokens": [0] * ((1 << 18) + 1)})
    assert status == 400 and "the limit is 262144" in e["error"]["message"]
    status, _, e = post(server, "/detokenize", {"tokens": [1, 10 ** 9]})
    assert status == 400 and "'tokens[1]' is 1000000000" in e["error"]["message"]


def test_routes_take_post_only_and_are_counted(server):
    status, headers, _ = request(server.port, "GET", "/tokenize")
    assert status == 405 and headers["allow"] == "POST, OPTIONS"
    assert server.metric("ember_http_requests_total", route="/tokenize", status="405") == 1
    assert post(server, "/detokenize", {"tokens": []})[0] == 200
    assert server.metric("ember_http_requests_total", route="/detokenize", status="200") == 1


def test_api_key_is_required_when_set(start_server, models):
    s = start_server(models["small"], "--api-key", "sekrit")
    assert post(s, "/tokenize", {"content": "x"})[0] == 401
    status, _, t = post(s, "/tokenize", {"content": "x"}, {"Authorization": "Bearer sekrit"})
    assert status == 200 and t["tokens"]
