"""`ember serve --reuse-port`: a successor binds the same port while the old server drains, and a
client hammering the port across the switch sees no refused connection and no failed request.

The switch here is done by hand (start the successor, wait for its ready line, SIGTERM the old
one), which is what `ember restart` automates. Every request opens a new connection, so the
kernel's choice of listener is exercised on each one; half of them stream.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading

import pytest
from conftest import Server, connect, free_port, parse_response, send_request, wait_for


def one_request(port, i):
    """One completion on a new connection; returns None when it completed, else what failed."""
    stream = i % 2 == 1
    body = {"model": "default", "prompt": f"hammer {i}", "max_tokens": 6, "temperature": 0,
            "stream": stream}
    try:
        with connect(port, timeout=30) as s:
            send_request(s, "POST", "/v1/completions", body)
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
    except OSError as e:  # refused, reset, timed out
        return f"request {i}: {type(e).__name__}: {e}"
    raw = b"".join(chunks)
    if not raw:
        return f"request {i}: connection closed with no response"
    status, _, payload = parse_response(raw)
    if status != 200:
        return f"request {i}: HTTP {status}: {payload[:200]!r}"
    if stream:
        if not payload.rstrip().endswith(b"data: [DONE]"):
            return f"request {i}: truncated stream: {payload[-200:]!r}"
    else:
        try:
            json.loads(payload)["choices"][0]["text"]
        except (ValueError, KeyError, IndexError) as e:
            return f"request {i}: bad body ({e}): {payload[:200]!r}"
    return None


class Hammer:
    """Clients sending requests back to back until stopped; counts completed and failed."""

    def __init__(self, port, clients=3):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.failures = []
        self.threads = [threading.Thread(target=self._run, args=(k, clients), daemon=True)
                        for k in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self, k, n):
        i = k
        while not self.stop.is_set():
            err = one_request(self.port, i)
            with self.lock:
                self.sent += 1
                if err:
                    self.failures.append(err)
            i += n

    def count(self):
        with self.lock:
            return self.sent

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
        return self.sent, self.failures


def wait_line(server, text, timeout=60):
    wait_for(lambda: any(text in l for l in server.lines) or server.proc.poll() is not None,
             timeout, what=repr(text))
    assert any(text in l for l in server.lines), "".join(server.lines)


@pytest.mark.heavy  # thousands of requests across three handovers
def test_successors_take_the_port_without_a_refused_connection_or_a_failed_request(ember, models):
    # Three switches in a row: the steering program stays on the port's socket group after each
    # old server leaves, so the second and third switches check it still picks the newcomer.
    port = free_port()
    args = ("--reuse-port", "--handover", "1")
    servers = [Server(ember, models["small"], *args, port=port)]
    late = []
    try:
        wait_line(servers[0], "model loaded; ready")  # before that the port has no listener
        hammer = Hammer(port, clients=4)
        wait_for(lambda: hammer.count() >= 20, 60, what="traffic before the first switch")
        for switch in range(3):
            old = servers[-1]
            new = Server(ember, models["small"], *args, port=port)
            servers.append(new)
            wait_line(new, "model loaded; ready")
            old.signal(signal.SIGTERM)
            assert old.wait_exit(60) == 0, "".join(old.lines)
            log = "".join(old.lines)
            # Steered: over the whole second of handover the old server takes only connections
            # whose handshake had begun (unsteered, it would take about half of the traffic).
            m = re.search(r"listener closed after taking (\d+) connection", log)
            assert m, log
            late.append(int(m.group(1)))
            assert int(m.group(1)) <= 8, log
            # The old server is gone: what is sent now can only reach the successor.
            gone_at = hammer.count()
            wait_for(lambda: hammer.count() >= gone_at + 20, 60, what="traffic after a switch")
            assert new.proc.poll() is None
        sent, failures = hammer.finish()
        print(f"sent {sent} requests across 3 switches; {len(failures)} failed; connections "
              f"the old servers took during their handovers: {late}")
        assert failures == [], "\n".join(failures[:10])
    finally:
        for s in servers:
            s.stop()


def test_without_reuse_port_a_second_server_is_refused_the_port_with_a_clear_error(ember,
                                                                                   models):
    port = free_port()
    first = Server(ember, models["small"], "--reuse-port", port=port)
    try:
        wait_line(first, "model loaded; ready")
        r = subprocess.run(
            [ember, "serve", "--model", models["small"], "--port", str(port)],
            capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
        assert "in use" in r.stderr, r.stderr
    finally:
        first.stop()


def test_a_reuse_port_server_takes_no_connection_until_its_model_is_loaded(ember, tmp_path):
    # The model is a FIFO: loading blocks in open(2) until the test writes to it, so the
    # "still loading" state lasts exactly as long as the test needs.
    fifo = tmp_path / "slow.gguf"
    os.mkfifo(fifo)
    port = free_port()
    s = Server(ember, str(fifo), "--reuse-port", port=port)
    try:
        # Loading: the port is bound but has no listener, so a predecessor on the port would
        # keep every connection; alone, a client is refused rather than queued or answered 503.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        try:  # opening unblocks the server's open(2); it may give up on the FIFO before the
            with open(fifo, "wb") as f:  # write (it cannot map a FIFO): then EPIPE here
                f.write(b"not a gguf file")
        except BrokenPipeError:
            pass
        assert s.wait_exit(30) == 1
        assert "model loaded" not in "".join(s.lines)
    finally:
        s.stop()
