#!/usr/bin/env python3
"""Prints NumPy's draws for tests/v41_python_parity_test.cpp (run at test time).

Each line: a label, then the values. The C++ test reproduces the same calls with engine/pcg64.h and
compares bit for bit. Calls on one generator are made in the order listed, so the 32-bit buffer
NumPy keeps between calls is exercised too.
"""
import numpy as np

SEEDS = [0, 1, 42, 10007, 140098, 2**32 + 5, 12345678901234567890]
INT64_MAX = np.iinfo(np.int64).max

for seed in SEEDS:
    g = np.random.default_rng(seed)
    print("raw", seed, *[int(v) for v in g.bit_generator.random_raw(5)])
    g = np.random.default_rng(seed)
    calls = [(0, 10, 5), (0, 2**40, 3), (-100, 100, 4), (0, 2**32, 3), (0, 2**32 - 1, 3), (7, 8, 2),
             (0, max(1, (INT64_MAX // 99092) // 2), 4), (-(2**62), 2**62, 3), (0, INT64_MAX, 2), (0, 3, 7)]
    for low, high, n in calls:
        v = g.integers(low=low, high=high, size=(n,), dtype=np.int64)
        print("int", seed, low, high, n, *[int(x) for x in v])
for layer in (1, 14):
    bound = max(1, (INT64_MAX // 99092) // 2)
    v = np.random.default_rng(10007 * layer).integers(low=0, high=bound, size=(4,), dtype=np.int64)
    print("engram", layer, *[int(x) * 2 + 1 for x in v])
