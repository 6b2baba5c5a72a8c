#!/usr/bin/env python3
"""Writes py_json_vectors.json: JSON text -> json.dumps(json.loads(text), ensure_ascii=False),
computed by CPython's json module itself (the reference the released encoder uses). Seeded."""
import json, random, struct

rng = random.Random(13)
def rand_float():
    kind = rng.randrange(5)
    if kind == 0:
        return struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
    if kind == 1:
        return rng.uniform(-1, 1) * 10 ** rng.randint(-8, 22)
    if kind == 2:
        return float(rng.randint(-10**6, 10**6)) * 10 ** rng.randint(-6, 18)
    if kind == 3:
        return round(rng.uniform(-1000, 1000), rng.randint(0, 6))
    return 10.0 ** rng.randint(-7, 20)
def rand_str():
    alphabet = ['a', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\r', '\b', '\f', '\x00', '\x01', '\x1f', '\x7f', '<', '>', '&', "'",
                '\u00e9', '\u4e2d', '\u2028', '\U0001f600', '\uff5c']
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
def rand_value(depth=0):
    k = rng.randrange(8 if depth < 3 else 5)
    if k == 0: return rng.randint(-2**63, 2**64 - 1) if rng.random() < 0.3 else rng.randint(-1000, 1000)
    if k == 1:
        f = rand_float()
        return f if f == f and abs(f) != float("inf") else 0.5
    if k == 2: return rand_str()
    if k == 3: return rng.choice([True, False, None])
    if k == 4: return rand_str()
    if k in (5, 6): return {rand_str(): rand_value(depth + 1) for _ in range(rng.randint(0, 4))}
    return [rand_value(depth + 1) for _ in range(rng.randint(0, 4))]
cases = []
for _ in range(400):
    v = rand_value()
    text = json.dumps(v, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
    cases.append({"input": text, "expected": json.dumps(json.loads(text), ensure_ascii=False)})
for text in ["1e20", "2.50", "1e15", "1e16", "0.0001", "0.00001", "-0.0", "-0", "100", "1E5", "1.5e-7", "123456789.125",
             "9007199254740993", "5e-324", "1.7976931348623157e308", "[]", "{}", "\"\\u0000\\u001f\\u007f\"", "{\"b\":1,\"a\":2,\"b\":3}"]:
    cases.append({"input": text, "expected": json.dumps(json.loads(text), ensure_ascii=False)})
print(json.dumps({"note": "see make_py_json_vectors.py", "cases": cases}, ensure_ascii=False, indent=0))
