"""`ember serve --simd-level` and `ember run --simd-level`: the engine runs the kernels of the
named level (so the code an AVX2-only host runs can be served and measured on a host with more),
and a level this CPU lacks is refused before the server listens (or the model loads), naming it
and the levels the CPU has."""
import json
import subprocess

from conftest import request


def test_serve_runs_the_named_simd_level_and_answers(start_server, models):
    # scalar exists on every host, and is never the best level of one: the log line shows
    # the setting reached the process that computes (the engine worker).
    s = start_server(models["small"], "--simd-level", "scalar")
    status, _, body = request(s.port, "POST", "/v1/completions",
                              {"model": "default", "prompt": "hello", "max_tokens": 4,
                               "temperature": 0})
    assert status == 200, body
    assert json.loads(body)["usage"]["completion_tokens"] == 4
    log = "".join(s.lines)
    assert "engine: scalar kernels" in log, log


def test_serve_refuses_a_simd_level_this_cpu_lacks_before_listening(ember, models):
    p = subprocess.run([ember, "serve", "--model", models["small"], "--port", "0",
                        "--simd-level", "avx9000"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "--simd-level: 'avx9000' is not a level this CPU has" in p.stderr, p.stderr
    assert "scalar" in p.stderr and "avx2" in p.stderr
    assert "listening on" not in p.stderr


def test_run_runs_the_named_simd_level(ember, models):
    # `ember run` selects the level before it loads (so the weights take that level's layout)
    # and names the level it ran in its summary line.
    p = subprocess.run([ember, "run", "--model", models["small"], "-p", "hello", "-n", "4",
                        "--temp", "0", "--simd-level", "scalar"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "generated 4 tokens" in p.stderr and "scalar kernels" in p.stderr, p.stderr


def test_run_refuses_a_simd_level_this_cpu_lacks_before_loading(ember, models):
    p = subprocess.run([ember, "run", "--model", models["small"], "-p", "hello",
                        "--simd-level", "avx9000"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "ember run: --simd-level: 'avx9000' is not a level this CPU has" in p.stderr, p.stderr
    assert p.stdout == ""  # nothing generated, not even the prompt's echo
