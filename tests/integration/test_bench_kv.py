"""`ember bench --kv-lengths`: KV bytes one sequence holds, measured where it fits and derived
beyond, on a gemma3 fixture (five sliding layers with a 128-token window, one global): the
measured figures follow the per-block accounting the derivation relies on, and stay far below
full history."""
import json
import subprocess


def test_kv_bytes_per_sequence_are_measured_then_derived_consistently(ember, tmp_path):
    model = str(tmp_path / "gemma3.gguf")
    subprocess.run([ember, "fixture", "--arch", "gemma3", "--layers", "6", "--out", model],
                   check=True, capture_output=True)
    out = subprocess.run([ember, "bench", "-m", model, "-t", "1", "--kv-lengths",
                          "512,1024,2048", "--kv-measure-up-to", "1024", "--json"],
                         check=True, capture_output=True, text=True, timeout=120)
    r = json.loads(out.stdout)
    rows = {row["length"]: row for row in r["lengths"]}
    g = r["bytes_per_position"]["global_layers"]
    s = r["bytes_per_position"]["sliding_layers"]
    assert r["kv_dtype"] == "f16"  # the default
    assert (g, s) == (2 * 2 * 16 * 2, 5 * 2 * 2 * 16 * 2)  # K+V, kv heads, head_dim, f16
    assert rows[512]["measured"] and rows[1024]["measured"] and not rows[2048]["measured"]
    assert rows[2048]["derived_from"] == 1024
    # Measured: every position's global layers plus the sliding layers' window (128 positions
    # after a decode step at a block boundary); the derivation adds global bytes only.
    for n in (512, 1024):
        assert rows[n]["bytes"] == n * g + 128 * s
    assert rows[2048]["bytes"] == rows[1024]["bytes"] + 1024 * g
    for row in rows.values():
        assert row["full_history_bytes"] == row["length"] * (g + s)
        assert row["bytes"] < row["full_history_bytes"] / 2
    # llama.cpp: global layers n_ctx cells, sliding layers pad(128 + 512, 256) = 768 cells, f16.
    assert rows[2048]["llama_cpp_cells_sliding"] == 768
    assert rows[2048]["llama_cpp_f16_bytes"] == (2048 * 1 + 768 * 5) * 2 * 2 * 16 * 2


def test_an_f32_kv_cache_holds_twice_the_bytes_and_a_bad_type_is_refused(ember, tmp_path):
    model = str(tmp_path / "gemma3.gguf")
    subprocess.run([ember, "fixture", "--arch", "gemma3", "--layers", "6", "--out", model],
                   check=True, capture_output=True)

    def kv(kv_type):
        out = subprocess.run([ember, "bench", "-m", model, "-t", "1", "--kv-lengths", "512",
                              "--kv-type", kv_type, "--json"],
                             check=True, capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout)

    half, full = kv("f16"), kv("f32")
    assert (half["kv_dtype"], full["kv_dtype"]) == ("f16", "f32")
    assert full["lengths"][0]["bytes"] == 2 * half["lengths"][0]["bytes"]
    bad = subprocess.run([ember, "bench", "-m", model, "--kv-type", "q8", "--kv-lengths", "512"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--kv-type" in bad.stderr and "q8" in bad.stderr
