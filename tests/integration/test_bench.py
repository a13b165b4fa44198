"""`ember bench --simd-level`: the kernels of a named level run (for A/B of levels on one host),
and a level this CPU lacks or that does not exist is refused with a message naming it."""
import json
import subprocess


def _fixture(ember, tmp_path):
    model = str(tmp_path / "llama.gguf")
    subprocess.run([ember, "fixture", "--arch", "llama", "--layers", "2", "--out", model],
                   check=True, capture_output=True)
    return model


def test_bench_runs_the_named_simd_level(ember, tmp_path):
    model = _fixture(ember, tmp_path)
    for level in ("scalar", None):
        args = [ember, "bench", "-m", model, "-t", "1", "-p", "8", "-n", "4", "-c", "", "-r", "1",
                "--no-bandwidth", "--json"]
        if level:
            args += ["--simd-level", level]
        r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True,
                                      timeout=120).stdout)
        if level:
            assert r["simd_level"] == level
        else:
            assert r["simd_level"] != "scalar"  # every host of this project has AVX2
        assert r["decode"]["tok_s"]["median"] > 0


def test_bench_refuses_an_unknown_simd_level_naming_it_and_the_levels_it_has(ember, tmp_path):
    model = _fixture(ember, tmp_path)
    p = subprocess.run([ember, "bench", "-m", model, "--simd-level", "avx9000", "-c", ""],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "avx9000" in p.stderr and "scalar" in p.stderr and "avx2" in p.stderr
    assert p.stdout == ""
