"""The two-process `ember serve`: the worker in its own process group, the stop
ladder, crash recovery, `ember stop`, pid files, /admin/shutdown. Real processes, real signals.
See docs/architecture.md, "Processes and shutdown".

Windows are kept small with test-only settings (--engine-drain, --engine-term-wait) so that every
test is bounded; the bounds asserted are generous lifecycle promises, not timings.
"""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import SEED, connect, parse_response, read_all, request, send_request, wait_for

LONG = 3000


def children(pid):
    kids = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:
            pass
    return kids


def worker_pid(s):
    kids = children(s.pid)
    return kids[0] if kids else None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def own_group(monkeypatch):
    """Servers started as leaders of their own process group, as a terminal's job is."""
    real = subprocess.Popen

    def popen(*a, **kw):
        kw["start_new_session"] = True
        return real(*a, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)


def stream_raw(port, body, out, key):
    with connect(port, timeout=120) as sock:
        send_request(sock, "POST", "/v1/chat/completions", body)
        out[key] = parse_response(read_all(sock))


def sse(raw):
    return [e[6:] for e in raw.split(b"\n\n") if e]


def start_streams(s, n, max_tokens):
    out = {}
    body = {"model": "default", "stream": True, "max_tokens": max_tokens, "seed": SEED,
            "messages": [{"role": "user", "content": "go"}]}
    threads = [threading.Thread(target=stream_raw, args=(s.port, body, out, i)) for i in range(n)]
    for t in threads:
        t.start()
    wait_for(lambda: s.metric("ember_active_sequences") == n, what=f"{n} streams generating")
    return out, threads


def assert_finished(out, n, reason="length"):
    for i in range(n):
        status, _, raw = out[i]
        assert status == 200
        p = sse(raw)
        assert p[-1] == b"[DONE]"
        assert json.loads(p[-2])["choices"][0]["finish_reason"] == reason


def log(s):
    return "".join(s.lines)


def test_the_worker_runs_in_its_own_process_group(start_server, models):
    s = start_server(models["small"])
    w = worker_pid(s)
    assert w is not None, "no engine worker process"
    assert os.getpgid(w) == w
    assert os.getpgid(w) != os.getpgid(s.pid)
    with open(f"/proc/{w}/cmdline") as f:
        assert f.read().split("\0")[1] == "engine"


def test_in_process_engine_has_no_worker(start_server, models):
    s = start_server(models["small"], "--engine", "in-process")
    status, _, body = request(s.port, "POST", "/v1/completions",
                              {"model": "default", "prompt": "hi", "max_tokens": 4, "seed": SEED})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 4
    assert children(s.pid) == []


def test_the_worker_obeys_eof_and_exits_0_inside_the_window(start_server, models):
    s = start_server(models["small"], "--engine-drain", "20")
    w = worker_pid(s)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.wait_exit(30) == 0
    assert time.monotonic() - t0 < 10
    assert "stopped at rung eof (exit 0)" in log(s)
    assert not alive(w)


def test_a_worker_ignoring_eof_is_stopped_by_sigterm(start_server, models):
    s = start_server(models["small"], "--engine-drain", "1", "--engine-term-wait", "20",
                     "--test-worker-flag=--test-ignore-eof")
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.wait_exit(30) == 0
    assert time.monotonic() - t0 < 15
    text = log(s)
    assert "EOF on stdin ignored" in text
    assert "stop rung sigterm" in text
    assert "stopped at rung sigterm" in text


def test_a_worker_ignoring_sigterm_is_stopped_by_sigkill(start_server, models):
    s = start_server(models["small"], "--engine-drain", "1", "--engine-term-wait", "1",
                     "--test-worker-flag=--test-ignore-eof", "--test-worker-flag=--test-ignore-term")
    w = worker_pid(s)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.wait_exit(30) == 0
    assert time.monotonic() - t0 < 15
    assert "stopped at rung sigkill (killed by signal 9 (SIGKILL))" in log(s)
    assert not alive(w)


def test_sigint_to_the_whole_group_lets_streams_finish(own_group, start_server, models):
    s = start_server(models["big"], "--drain-timeout", "60")
    w = worker_pid(s)
    out, threads = start_streams(s, 2, 200)
    os.killpg(s.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the front's whole group
    for t in threads:
        t.join(120)
    assert s.wait_exit(60) == 0
    assert_finished(out, 2)
    assert "stopped at rung eof (exit 0)" in log(s)  # the worker saw no SIGINT
    assert not alive(w)


def test_killing_the_worker_costs_one_request_not_the_server(start_server, models):
    s = start_server(models["big"], "--restart-backoff", "1")
    out, threads = start_streams(s, 1, LONG)
    w = worker_pid(s)
    os.kill(w, signal.SIGKILL)
    for t in threads:
        t.join(60)
    status, _, raw = out[0]
    assert status == 200
    p = sse(raw)
    assert p[-1] == b"[DONE]"
    assert json.loads(p[-2])["error"]["code"] == "engine_restarting"
    assert json.loads(p[-3])["choices"][0]["finish_reason"] == "error"
    # Down until the new worker has loaded: /ready 503, completions 503 engine_restarting.
    status, _, body = request(s.port, "GET", "/ready")
    if status == 503:
        assert json.loads(body)["status"] == "engine_restarting"
        st, hdrs, b = request(s.port, "POST", "/v1/completions",
                              {"model": "default", "prompt": "hi", "max_tokens": 2})
        assert st == 503 or st == 200  # the worker may come back between the two requests
        if st == 503:
            assert json.loads(b)["error"]["code"] == "engine_restarting"
    wait_for(lambda: request(s.port, "GET", "/ready")[0] == 200, 30, what="a new worker")
    assert worker_pid(s) not in (None, w)
    status, _, body = request(s.port, "POST", "/v1/completions",
                              {"model": "default", "prompt": "hi", "max_tokens": 3, "seed": SEED})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3
    assert s.metric("ember_worker_restarts_total") == 1
    assert "exited unexpectedly (killed by signal 9 (SIGKILL))" in log(s)


def test_ready_is_503_while_the_worker_is_down(start_server, models):
    # A long backoff holds the window open, so the 503 is observed, not raced.
    s = start_server(models["small"], "--restart-backoff", "30")
    os.kill(worker_pid(s), signal.SIGKILL)
    wait_for(lambda: request(s.port, "GET", "/ready")[0] == 503, 10, what="/ready 503")
    status, hdrs, body = request(s.port, "POST", "/v1/completions",
                                 {"model": "default", "prompt": "hi", "max_tokens": 2})
    assert status == 503 and int(hdrs["retry-after"]) > 0
    assert json.loads(body)["error"]["code"] == "engine_restarting"
    assert s.metric("ember_engine_up") == 0


def test_killing_the_front_leaves_no_worker(start_server, models):
    s = start_server(models["big"])
    out, threads = start_streams(s, 1, LONG)
    w = worker_pid(s)
    s.proc.kill()  # SIGKILL: no drain, no ladder
    s.proc.wait()
    wait_for(lambda: not alive(w), 10, what=f"worker {w} gone")


def test_ember_stop_drains_streams_in_flight(ember, start_server, models, tmp_path):
    pid_file = str(tmp_path / "ember.pid")
    s = start_server(models["big"], "--pid-file", pid_file, "--drain-timeout", "60")
    with open(pid_file) as f:
        assert int(f.readline()) == s.pid  # the pid, then "key value" lines
    out, threads = start_streams(s, 2, 200)
    r = subprocess.run([ember, "stop", "--pid-file", pid_file], capture_output=True, text=True,
                       timeout=120)
    for t in threads:
        t.join(60)
    assert r.returncode == 0, r.stderr
    assert "exit 0; 2 request(s) in flight at the drain: 2 drained, 0 cancelled" in r.stdout
    assert "engine: rung eof (exit 0)" in r.stdout
    assert_finished(out, 2)
    assert s.wait_exit(5) == 0
    assert not os.path.exists(pid_file)


def test_ember_stop_reports_a_stale_pid_file(ember, start_server, models, tmp_path):
    pid_file = tmp_path / "ember.pid"
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file.write_text(f"{dead.pid}\n")
    r = subprocess.run([ember, "stop", "--pid-file", str(pid_file)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "stale pid file" in r.stderr and str(dead.pid) in r.stderr
    assert not pid_file.exists()
    # A pid that is alive but not ember (this test runner) is stale too; serve replaces it.
    pid_file.write_text(f"{os.getpid()}\n")
    s = start_server(models["small"], "--pid-file", str(pid_file))
    assert int(pid_file.read_text().splitlines()[0]) == s.pid
    assert "is not ember; replacing it" in log(s)


def test_a_second_serve_refuses_a_live_pid_file(ember, start_server, models, tmp_path):
    pid_file = str(tmp_path / "ember.pid")
    start_server(models["small"], "--pid-file", pid_file)
    r = subprocess.run([ember, "serve", "--model", models["small"], "--port", "0",
                        "--pid-file", pid_file], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "already running" in r.stderr


def test_a_second_signal_during_the_ladder_exits_at_once(start_server, models):
    s = start_server(models["small"], "--engine-drain", "60",
                     "--test-worker-flag=--test-ignore-eof")
    w = worker_pid(s)
    s.signal(signal.SIGTERM)
    wait_for(lambda: "stop rung eof" in log(s), 10, what="the ladder's first rung")
    t0 = time.monotonic()
    s.signal(signal.SIGINT)
    assert s.wait_exit(10) == 130
    assert time.monotonic() - t0 < 5
    wait_for(lambda: not alive(w), 10, what="the worker killed with the front")


def test_admin_shutdown_needs_the_admin_key(start_server, models):
    s = start_server(models["small"])
    status, _, _ = request(s.port, "POST", "/admin/shutdown")
    assert status == 404
    s2 = start_server(models["small"], "--admin-key", "sekrit")
    status, _, _ = request(s2.port, "POST", "/admin/shutdown",
                           headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, _, body = request(s2.port, "POST", "/admin/shutdown",
                              headers={"Authorization": "Bearer sekrit"})
    assert status == 202 and json.loads(body)["status"] == "draining"
    assert s2.wait_exit(30) == 0
    assert "stopped at rung eof (exit 0)" in log(s2)


PERSON = {"type": "object", "required": ["name", "age"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def openai_features(port):
    """n > 1, logit_bias with logprobs, and a json_schema response_format, from one server;
    returns what it answered, so two engines can be compared."""
    def post(path, body):
        status, _, raw = request(port, "POST", path, body, timeout=300)
        assert status == 200, raw
        return json.loads(raw)

    out = {}
    j = post("/v1/chat/completions", {
        "model": "default", "messages": [{"role": "user", "content": "Name a colour."}],
        "n": 3, "max_tokens": 6, "temperature": 1.0, "seed": 5})
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    out["n"] = [c["message"]["content"] for c in j["choices"]]
    assert len(set(out["n"])) > 1, "each choice samples with its own seed"
    assert j["usage"]["completion_tokens"] >= 3, j["usage"]  # summed over the choices

    j = post("/v1/completions", {"model": "default", "prompt": "Once upon a time", "max_tokens": 3,
                                 "temperature": 0, "logit_bias": {"33": 100}, "logprobs": 1})
    toks = j["choices"][0]["logprobs"]["tokens"]
    assert len(toks) == 3 and len(set(toks)) == 1, toks  # token 33, forced at every step
    out["bias"] = j["choices"][0]["text"]

    j = post("/v1/chat/completions", {
        "model": "default", "max_tokens": 120, "temperature": 0,
        "messages": [{"role": "user", "content": "Describe a person as JSON."}],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "person", "schema": PERSON}}})
    assert j["choices"][0]["finish_reason"] == "stop", j
    out["schema"] = j["choices"][0]["message"]["content"]
    person = json.loads(out["schema"])
    assert list(person) == ["name", "age"] and isinstance(person["age"], int), person
    return out


def test_n_choices_logit_bias_and_json_schema_work_through_the_worker(start_server):
    """The worker protocol carries n, logit_bias, logprobs and the output constraint (as its
    spec): the two-process server answers exactly what the in-process engine answers."""
    sub = start_server("smollm2-135m", "--ctx-size", "2048")
    assert worker_pid(sub), "the default engine runs in a worker"
    got = openai_features(sub.port)
    inproc = start_server("smollm2-135m", "--ctx-size", "2048", "--engine", "in-process")
    assert not children(inproc.pid)
    assert got == openai_features(inproc.port)
