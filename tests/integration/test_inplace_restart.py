"""`ember restart`: a server started with --reuse-port is replaced in place while a client hammers
its port. No connection is refused, no request fails, and the first request after the restart
still hits the prefix cache: the old server saved its warm state (SIGUSR1) before the new one
loaded it.
"""
import json
import os
import subprocess

import pytest
from conftest import Server, request, wait_for
from test_reuse_port import Hammer, free_port, wait_line

PROMPT = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(24))


def completion(port, prompt):
    status, _, body = request(port, "POST", "/v1/completions",
                              {"model": "default", "prompt": prompt, "max_tokens": 4,
                               "temperature": 0})
    assert status == 200, body
    return json.loads(body)


def cached_tokens(reply):
    return (reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)


@pytest.mark.parametrize("engine", ["subprocess", "in-process"])
def test_restart_keeps_the_port_and_the_warm_cache_under_load(ember, models, tmp_path, engine):
    port = free_port()
    pid_file = str(tmp_path / "ember.pid")
    args = ("--reuse-port", "--handover", "0.5", "--pid-file", pid_file,
            "--warm-cache-dir", str(tmp_path / "warm"), "--engine", engine)
    old = Server(ember, models["small"], *args, port=port)
    new_pid = None
    try:
        wait_line(old, "model loaded; ready")
        first = completion(port, PROMPT)
        assert cached_tokens(first) == 0
        assert cached_tokens(completion(port, PROMPT)) > 0  # in the old server's cache

        hammer = Hammer(port, clients=4)
        wait_for(lambda: hammer.count() >= 20, 60, what="traffic before the restart")
        r = subprocess.run([ember, "restart", "--pid-file", pid_file, "--log",
                            str(tmp_path / "new.log")],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr + "".join(old.lines)
        assert "warm state saved by pid" in r.stderr, r.stderr
        assert "replaced by pid" in r.stdout, r.stdout
        new_pid = int(open(pid_file).readline())
        assert new_pid != old.pid
        assert old.wait_exit(60) == 0  # it had drained by the time restart returned
        after = hammer.count()
        wait_for(lambda: hammer.count() >= after + 20, 60, what="traffic after the restart")
        sent, failures = hammer.finish()
        again = completion(port, PROMPT)
        print(f"sent {sent} requests across `ember restart`; {len(failures)} failed; the first "
              f"request after it had {cached_tokens(again)} of "
              f"{again['usage']['prompt_tokens']} prompt tokens cached")
        assert failures == [], "\n".join(failures[:10])
        # The successor started from the file the old server wrote on SIGUSR1.
        assert cached_tokens(again) >= cached_tokens(first) + 16, again["usage"]
        log = open(tmp_path / "new.log").read()
        assert "taking it over from pid" in log, log

        stop = subprocess.run([ember, "stop", "--pid-file", pid_file], capture_output=True,
                              text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        new_pid = None
    finally:
        old.stop()
        if new_pid:
            try:
                os.kill(new_pid, 9)
            except ProcessLookupError:
                pass


def test_restart_refuses_a_server_started_without_reuse_port(ember, models, tmp_path):
    pid_file = str(tmp_path / "ember.pid")
    s = Server(ember, models["small"], "--pid-file", pid_file)
    try:
        s.wait_ready()
        r = subprocess.run([ember, "restart", "--pid-file", pid_file], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1
        assert "was not started with --reuse-port" in r.stderr, r.stderr
        assert s.proc.poll() is None  # untouched
        assert request(s.port, "GET", "/ready")[0] == 200
    finally:
        s.stop()
