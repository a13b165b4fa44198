"""HTTP/1.1 message framing (RFC 9112) over a raw socket: transfer codings ember does not decode
are refused with 501, framing it cannot trust with 400, and either way the connection closes
(what followed the head was never read, so it must not be taken for a next request). An
absolute-form target routes by its path.
"""
import json
import re
import socket

import pytest

from conftest import Server, connect, parse_response

BODY = json.dumps({"model": "default", "prompt": "hi", "max_tokens": 2}).encode()
# A body shaped like a second request: answered, it would show as a second status line.
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def server(ember, models):
    s = Server(ember, models["small"])
    s.wait_ready()
    yield s
    s.stop()


def chunked(data):
    return b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"


def exchange(port, raw):
    """Sends `raw` on a keep-alive connection and reads until the server closes it: a server that
    leaves the connection open fails here with a timeout. Returns (status, headers, body, all the
    bytes read)."""
    with connect(port, timeout=10) as s:
        s.sendall(raw)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                raise AssertionError("the connection stayed open after: " +
                                     b"".join(chunks).decode("latin-1"))
            if not b:  # closed by the server
                break
            chunks.append(b)
    data = b"".join(chunks)
    status, headers, body = parse_response(data)
    return status, headers, body, data


def head(method, target, headers, version="1.1"):
    lines = [f"{method} {target} HTTP/{version}", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def assert_refused_and_closed(server, raw, status, words):
    got, headers, body, data = exchange(server.port, raw)
    assert got == status, data
    assert headers.get("connection", "").lower() == "close", data
    assert words in json.loads(body)["error"]["message"], body
    assert data.count(b"HTTP/1.1 ") == 1, data  # nothing after the head was taken as a request


@pytest.mark.parametrize("te", ["xchunked", "gzip, chunked", "chunked, gzip", "identity"])
def test_a_transfer_coding_other_than_chunked_is_501_and_closes(server, te):
    raw = head("POST", "/v1/completions", [("Content-Type", "application/json"),
                                           ("Transfer-Encoding", te)]) + chunked(SMUGGLED)
    assert_refused_and_closed(server, raw, 501, "is not supported (only chunked is)")


def test_a_coding_list_over_two_fields_is_read_whole(server):
    raw = head("POST", "/v1/completions", [("Transfer-Encoding", "gzip"),
                                           ("Transfer-Encoding", "chunked")]) + chunked(BODY)
    assert_refused_and_closed(server, raw, 501, "'gzip'")


@pytest.mark.parametrize("headers,version,words", [
    ([("Transfer-Encoding", "chunked")], "1.0", "HTTP/1.0"),
    ([("Transfer-Encoding", "chunked"), ("Content-Length", "5")], "1.1", "malformed HTTP request"),
    ([("Transfer-Encoding", "chunked, chunked")], "1.1", "more than once"),
])
def test_untrustworthy_framing_is_400_and_closes(server, headers, version, words):
    raw = head("POST", "/v1/completions", headers, version) + chunked(SMUGGLED)
    assert_refused_and_closed(server, raw, 400, words)


@pytest.mark.parametrize("size", [b"zz", b"1fffffffffffffffff", b"-1"])
def test_a_bad_chunk_size_is_400_and_closes(server, size):
    raw = (head("POST", "/v1/completions", [("Transfer-Encoding", "chunked")]) + size +
           b"\r\n" + BODY + b"\r\n0\r\n\r\n" + SMUGGLED)
    assert_refused_and_closed(server, raw, 400, "malformed HTTP request body")


def test_a_400_after_a_kept_alive_request_closes_too(server):
    good = head("GET", "/health", [])
    bad = head("POST", "/v1/completions", [("Transfer-Encoding", "chunked")]) + b"zz\r\n"
    _, _, _, data = exchange(server.port, good + bad + SMUGGLED)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"400"], data


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/v1/completions",
                                    "HTTP://127.0.0.1:{port}/v1/completions?x=1"])
def test_an_absolute_form_target_routes_by_its_path(server, target):
    raw = head("POST", target.format(port=server.port),
               [("Content-Type", "application/json"), ("Content-Length", str(len(BODY))),
                ("Connection", "close")]) + BODY
    status, _, body, _ = exchange(server.port, raw)
    assert status == 200, body
    assert json.loads(body)["choices"][0]["text"] is not None
    status, _, body, _ = exchange(server.port, head("GET", f"http://localhost:{server.port}",
                                                    [("Connection", "close")]))
    assert status == 200, body  # no path: "/", the chat page


def test_a_chunked_request_is_still_read(server):
    raw = head("POST", "/v1/completions", [("Content-Type", "application/json"),
                                           ("Transfer-Encoding", "Chunked"),
                                           ("Connection", "close")]) + chunked(BODY)
    status, _, body, _ = exchange(server.port, raw)
    assert status == 200, body
