#!/usr/bin/env python3
"""Prints float32 inputs and their E4M3 / E2M1 codes for tests/v41_python_parity_test.cpp.

The codes are computed here with exact rational arithmetic from the bit-field definitions (the
nearest representable value; a tie goes to the code whose lowest bit is 0; magnitudes above the
largest finite value saturate to it, as the released kernels clamp before casting), independently
of kernels/quant_formats.cpp.
"""
import bisect
import random
import struct
from fractions import Fraction as F


def e4m3_values():
    out = []
    for code in range(0x7F):  # 0x7F is NaN
        e, m = code >> 3, code & 7
        v = F(m, 8) * F(1, 2**6) if e == 0 else (1 + F(m, 8)) * F(2) ** (e - 7)
        out.append((v, code))
    return out


def e2m1_values():
    out = []
    for code in range(8):
        e, m = code >> 1, code & 1
        v = F(m, 2) if e == 0 else (1 + F(m, 2)) * F(2) ** (e - 1)
        out.append((v, code))
    return out


def nearest(table, x, sign_bit):
    # table: (value, code) ascending in value. The two neighbours of |x| decide; a tie goes to the
    # code whose lowest bit is 0; at or above the largest value, saturate to it.
    a = abs(x)
    values = [v for v, _ in table]
    i = bisect.bisect_left(values, a)
    if i >= len(table):
        code = table[-1][1]
    elif values[i] == a or i == 0:
        code = table[i][1]
    else:
        (lo, lo_code), (hi, hi_code) = table[i - 1], table[i]
        if a - lo < hi - a:
            code = lo_code
        elif a - lo > hi - a:
            code = hi_code
        else:
            code = lo_code if lo_code % 2 == 0 else hi_code
    return (sign_bit if x < 0 else 0) | code


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


random.seed(4141)
inputs = [0.0, 448.0, 449.0, 464.0, 480.0, 1e9, 0.001953125, 0.0009765625, 6.0, 5.0, 0.25, 0.75, 2.5, 3.5]
for _ in range(3000):
    inputs.append(f32(random.uniform(-1, 1) * 2.0 ** random.randint(-12, 10)))
for k in range(200):  # exact midpoints of the E4M3 grid, positive and negative
    vals = sorted(v for v, _ in e4m3_values())
    i = k % (len(vals) - 1)
    inputs.append(f32(float((vals[i] + vals[i + 1]) / 2)) * (1 if k % 2 else -1))
t8, t4 = e4m3_values(), e2m1_values()
for x in inputs:
    x = f32(x)
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    print("%08x %d %d" % (bits, nearest(t8, F(x), 0x80), nearest(t4, F(x), 0x8)))
