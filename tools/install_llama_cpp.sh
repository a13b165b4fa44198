#!/usr/bin/env bash
# Installs llama.cpp, the reference implementation, on demand: llama-cpp-python from PyPI,
# which builds llama.cpp from its source distribution (a few minutes on 2 cores). Used only by
# tools/gen_goldens.py and bench/ comparisons; never vendored, never committed.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
if python3 -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
# pip 23's resolver trips over this package's metadata; install its few dependencies first and
# the package itself without dependency resolution.
python3 -m pip install -q numpy typing-extensions diskcache jinja2 scikit-build-core
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip install -q --no-deps --no-build-isolation \
  "llama-cpp-python==${VERSION}"
python3 -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"
