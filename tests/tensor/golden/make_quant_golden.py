#!/usr/bin/env python3
"""Regenerates quant_golden.txt: block bytes decoded by gguf-py (llama.cpp's Python package), an
implementation independent of ember's, so the tests pin ember's block layouts to ggml's.

Format, one record per line:
  dequant <TYPE> <hex bytes> <floats...>   bytes of 2 blocks and what gguf-py decodes them to
  quant <TYPE> <floats...> | <hex bytes>   floats and gguf-py's reference quantization of them
Run: python3 tests/tensor/golden/make_quant_golden.py > tests/tensor/golden/quant_golden.txt
"""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

rng = np.random.default_rng(1234)

# byte offsets of the fp16 scale fields in each block, which random bytes must not make huge/NaN
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def fmt_floats(a):
    return " ".join(repr(float(v)) for v in a)


for qt, fields in HALF_FIELDS.items():
    block_elems, block_bytes = quants.GGML_QUANT_SIZES[qt]
    for _ in range(3):
        raw = bytearray(rng.integers(0, 256, size=2 * block_bytes, dtype=np.uint8).tobytes())
        for b in range(2):
            for off in fields:
                h = np.float16(rng.uniform(-0.5, 0.5)).tobytes()
                raw[b * block_bytes + off:b * block_bytes + off + 2] = h
        data = np.frombuffer(bytes(raw), dtype=np.uint8)
        out = quants.dequantize(data, qt).astype(np.float32)
        print("dequant", qt.name, bytes(raw).hex(), fmt_floats(out))

for qt in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
    block_elems, _ = quants.GGML_QUANT_SIZES[qt]
    for _ in range(3):
        x = rng.standard_normal(2 * block_elems).astype(np.float32)
        try:
            qb = quants.quantize(x, qt)
        except NotImplementedError:
            break
        print("quant", qt.name, fmt_floats(x), "|", qb.tobytes().hex())
