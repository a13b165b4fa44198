"""A first run of ember: the default model answers a question and stops; named models; the
server-side --max-tokens cap and --system-prompt default."""
import json
import subprocess

from conftest import request

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def chat(server, messages, **extra):
    status, _, body = request(server.port, "POST", "/v1/chat/completions",
                              {"model": "default", "messages": messages, **extra})
    assert status == 200, body
    return json.loads(body)


def test_default_model_answers_the_readme_question_and_stops(start_server):
    s = start_server("default", ready=False)
    s.wait_ready(120)
    r = chat(s, QUESTION, temperature=0)
    choice = r["choices"][0]
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] < 30
    names = [m["id"] for m in json.loads(request(s.port, "GET", "/v1/models")[2])["data"]]
    assert "smollm2-135m" in names and "default" in names


def test_request_without_max_tokens_is_capped_by_the_server(start_server, models):
    s = start_server(models["small"], "--max-tokens", "7", "--ctx-size", "512")
    explicit = chat(s, QUESTION, temperature=0, max_tokens=40)
    # precondition: this model does not stop on its own within 40 tokens of this prompt
    assert explicit["choices"][0]["finish_reason"] == "length"
    assert explicit["usage"]["completion_tokens"] == 40
    capped = chat(s, QUESTION, temperature=0)
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 7


def test_the_cap_never_exceeds_the_context(start_server, models):
    s = start_server(models["small"], "--max-tokens", "100000", "--ctx-size", "64")
    r = chat(s, QUESTION, temperature=0)
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] == 64


def test_default_system_prompt_applies_only_without_a_system_message(start_server, models):
    default = start_server(models["small"], "--max-tokens", "1")
    none = start_server(models["small"], "--max-tokens", "1", "--system-prompt", "")
    own = [{"role": "system", "content": "Answer in French."}] + QUESTION
    spelled = [{"role": "system", "content": "You are a helpful assistant."}] + QUESTION

    def prompt_ids_len(server, messages):
        return chat(server, messages, temperature=0)["usage"]["prompt_tokens"]

    # With the default, a chat without a system message is prompted as if it had said it.
    assert prompt_ids_len(default, QUESTION) == prompt_ids_len(none, spelled)
    assert prompt_ids_len(default, QUESTION) > prompt_ids_len(none, QUESTION)
    # A chat's own system message replaces the default.
    assert prompt_ids_len(default, own) == prompt_ids_len(none, own)


def test_ember_models_lists_the_names_and_unknown_names_are_errors(ember):
    out = subprocess.run([ember, "models"], capture_output=True, text=True, check=True).stdout
    assert "smollm2-135m  (default; alias: default)" in out
    assert "gemma3-270m" in out
    assert "installed: yes" in out and "path: " in out
    r = subprocess.run([ember, "run", "--model", "smollm3", "-p", "hi"], capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert "'smollm3' is neither a model file nor a known model name" in r.stderr
    assert "smollm2-135m, gemma3-270m" in r.stderr
