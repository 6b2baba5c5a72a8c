"""V4.1 self-tests: number formats (E2M1, E4M3, UE8M0, the three stored KV formats) and the released
checkpoint layout. Run by test_v41.py."""
import json
import math
import os
import struct
import tempfile

import numpy as np
import torch

from selfcheck import F64, check

import checkpoint  # noqa: E402
import quant  # noqa: E402

# ---------------------------------------------------------------- quantisation

E2M1_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]   # codes 0..7; 8..15 the negatives (8 = -0)


def test_e2m1_codes():
    ok = all(quant.decode_e2m1(c) == E2M1_TABLE[c] for c in range(8)) and \
        all(quant.decode_e2m1(8 + c) == -E2M1_TABLE[c] and math.copysign(1, quant.decode_e2m1(8 + c)) < 0
            for c in range(8))
    ok = ok and all(quant.encode_e2m1(quant.decode_e2m1(c)) == c for c in range(16))
    # ties to even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2, 3.5 -> 4, 5 -> 4
    ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0, 7.0: 6.0, 100.0: 6.0}
    ok_t = all(quant.decode_e2m1(quant.encode_e2m1(v)) == w for v, w in ties.items()) and \
        all(quant.decode_e2m1(quant.encode_e2m1(-v)) == -w for v, w in ties.items())
    vals = torch.tensor([v * sgn for v in list(ties)[:-2] + [0.3, 2.2, 4.9, 5.1] for sgn in (1, -1)], dtype=F64)
    ok_v = all(float(quant.round_e2m1(vals)[i]) == quant.decode_e2m1(quant.encode_e2m1(float(vals[i])))
               for i in range(len(vals)))
    check("E2M1: all 16 codes = hand table, round trip, ties to even, saturation, vector = scalar", ok and ok_t and ok_v)


def _e4m3_by_hand(code):
    """From the E4M3 definition, written out differently: integer mantissa arithmetic."""
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return math.nan
    v = math.ldexp(m, -9) if e == 0 else math.ldexp(8 + m, e - 10)
    return -v if s else v


def test_e4m3_codes():
    ok = all((math.isnan(quant.decode_e4m3(c)) and math.isnan(_e4m3_by_hand(c))) or
             quant.decode_e4m3(c) == _e4m3_by_hand(c) for c in range(256))
    spots = {0x00: 0.0, 0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0x39: 1.125,
             0x7E: 448.0, 0xB8: -1.0, 0xFE: -448.0}
    ok_s = all(quant.decode_e4m3(c) == v for c, v in spots.items()) and math.isnan(quant.decode_e4m3(0x7F)) \
        and math.isnan(quant.decode_e4m3(0xFF))
    pos = [quant.decode_e4m3(c) for c in range(127)]
    ok_m = all(a < b for a, b in zip(pos, pos[1:]))
    ok_rt = all(quant.encode_e4m3(quant.decode_e4m3(c)) == c for c in range(256) if c not in (0x7F, 0xFF))
    # every midpoint between neighbours goes to the even code; just off the midpoint goes to the nearer one
    ok_tie = True
    mids = []
    for c in range(126):
        lo, hi = pos[c], pos[c + 1]
        mid = (lo + hi) / 2
        mids.append(mid)
        even = c if c % 2 == 0 else c + 1
        ok_tie &= quant.encode_e4m3(mid) == even and quant.encode_e4m3(-mid) == 0x80 | even
        ok_tie &= quant.encode_e4m3(mid - (hi - lo) / 8) == c and quant.encode_e4m3(mid + (hi - lo) / 8) == c + 1
    ok_sat = quant.encode_e4m3(1000.0) == 0x7E and quant.encode_e4m3(-460.0) == 0xFE
    g = torch.Generator().manual_seed(4)
    vals = torch.cat([torch.tensor(mids, dtype=F64), -torch.tensor(mids, dtype=F64),
                      torch.exp(torch.empty(400, dtype=F64).uniform_(-9 * math.log(2), math.log(440), generator=g))])
    rv = quant.round_e4m3(vals)
    ok_v = all(float(rv[i]) == quant.decode_e4m3(quant.encode_e4m3(float(vals[i]))) for i in range(len(vals)))
    check("E4M3: all 256 codes = integer-mantissa hand decode, spot values, monotone, round trip",
          ok and ok_s and ok_m and ok_rt)
    check("E4M3: midpoints to even code, saturation at 448, vector rounding = scalar encoder",
          ok_tie and ok_sat and ok_v, f"{len(vals)} values")
    if hasattr(torch, "float8_e4m3fn"):
        tv = vals.to(torch.float32).to(torch.float8_e4m3fn).to(F64)
        check("E4M3 rounding = torch.float8_e4m3fn cast", bool((tv == rv).all()))
    else:
        print(f"skip E4M3 vs torch.float8_e4m3fn: torch {torch.__version__} has no float8 dtype")


def test_ue8m0_and_packing():
    ok = all(quant.decode_ue8m0(b) == 2.0 ** (b - 127) and quant.encode_ue8m0(2.0 ** (b - 127)) == b
             for b in range(255)) and math.isnan(quant.decode_ue8m0(255))
    try:
        quant.encode_ue8m0(3.0)
        ok = False
    except ValueError:
        pass
    codes = list(range(16)) * 2
    packed = quant.pack_e2m1(codes)
    ok_p = quant.unpack_e2m1(packed) == codes and packed[0] == 0x10 and len(packed) == 16
    check("UE8M0: 255 codes = 2^(b-127), NaN at 255, non-powers refused; E2M1 packing round trip", ok and ok_p)


def test_qdq_hand_cases():
    # FP8 per 32, amax 1: s = 2^ceil(log2(1/448)) = 2^-8; 0.3 / s = 76.8, E4M3 step 8 in [64, 128) -> 80 -> 0.3125
    x = torch.zeros(32, dtype=F64)
    x[0], x[1], x[2] = 1.0, 0.3, -0.01
    q = quant.qdq_fp8_ue8m0(x)
    # -0.01 / 2^-8 = -2.56: step 0.25 in [2, 4) -> -2.5 -> -2.5 / 256
    ok8 = float(q[0]) == 1.0 and float(q[1]) == 0.3125 and float(q[2]) == -2.5 / 256 and \
        float(quant.fp8_ue8m0_scales(x)[0]) == 2.0 ** -8
    # MXFP4 per 32, amax 1: s = 2^ceil(log2(1/6)) = 1/4; 0.3 -> 1.2 -> 1 -> 0.25; 0.55 -> 2.2 -> 2 -> 0.5;
    # 0.9 -> 3.6 -> 4 -> 1.0; -1 -> -4 -> -1
    y = torch.zeros(32, dtype=F64)
    y[0], y[1], y[2], y[3] = -1.0, 0.3, 0.55, 0.9
    qy = quant.qdq_mxfp4(y)
    ok4 = [float(v) for v in qy[:4]] == [-1.0, 0.25, 0.5, 1.0]
    # FP4 per 16 with E4M3 scale, amax 3: s = e4m3(0.5) = 0.5; 1.3 -> 2.6 -> 3 -> 1.5; 0.2 -> 0.4 -> 0.5 -> 0.25
    z = torch.zeros(16, dtype=F64)
    z[0], z[1], z[2] = 3.0, 1.3, 0.2
    qz = quant.qdq_fp4_e4m3(z)
    # amax 1.1: 1.1 / 6 = 0.18333 -> E4M3 step 2^-6 / 8... in [0.125, 0.25) step 2^-6: 11.73 steps -> 12 -> 0.1875
    w = torch.zeros(16, dtype=F64)
    w[0] = 1.1
    okf = [float(v) for v in qz[:3]] == [3.0, 1.5, 0.25] and float(quant.fp4_e4m3_scales(w)[0]) == 0.1875
    check("quantise-dequantise hand cases: FP8/UE8M0 per 32, MXFP4 per 32, FP4/E4M3 per 16", ok8 and ok4 and okf,
          f"fp8 {[float(v) for v in q[:3]]}, mxfp4 {[float(v) for v in qy[:4]]}, fp4 {[float(v) for v in qz[:3]]}")
    # exact powers of two: amax 3.5 = 448 * 2^-7 and amax 1.5 = 6 * 2^-2 (both products exact in
    # float32) keep the power (2^ceil(log2 t) = t), so the largest value lands on the top code
    p8, p4 = torch.zeros(32, dtype=F64), torch.zeros(32, dtype=F64)
    p8[0], p4[0] = 3.5, 1.5
    okp = float(quant.fp8_ue8m0_scales(p8)[0]) == 2.0 ** -7 and float(quant.qdq_fp8_ue8m0(p8)[0]) == 3.5 and \
        float(quant.mxfp4_scales(p4)[0]) == 0.25 and float(quant.qdq_mxfp4(p4)[0]) == 1.5
    check("power-of-two scales: amax at an exact power keeps it (448 * 2^-7 -> 2^-7, 6 * 2^-2 -> 2^-2)", okp)
    # a zero block gets the floor scale and stays zero
    zero = torch.zeros(1, 64, dtype=F64)
    check("zero blocks: floor scales, zero values", bool((quant.qdq_fp4_e4m3(zero) == 0).all()) and
          float(quant.fp4_e4m3_scales(zero)[0, 0]) == 2.0 ** -9 and bool((quant.qdq_mxfp4(zero) == 0).all()) and
          bool((quant.qdq_fp8_ue8m0(zero) == 0).all()))
    try:
        quant.qdq_fp4_e4m3(torch.full((16,), 3000.0, dtype=F64))
        check("FP4 per-16 scale past 448 is refused", False)
    except ValueError as ex:
        check("FP4 per-16 scale past 448 is refused with a message", "amax" in str(ex))


def test_stored_rows():
    g = torch.Generator().manual_seed(8)
    main = torch.randn(512, generator=g, dtype=F64)
    codes, scodes = quant.codes_fp4_e4m3(main)
    back = quant.decode_row(codes, scodes, 16, quant.decode_e2m1, quant.decode_e4m3)
    nbytes = len(quant.pack_e2m1(codes)) + len(scodes)
    ok_main = bool((back == quant.qdq_fp4_e4m3(main)).all()) and nbytes == 288
    idx = torch.randn(128, generator=g, dtype=F64)
    c2, s2 = quant.codes_mxfp4(idx)
    ok_idx = bool((quant.decode_row(c2, s2, 32, quant.decode_e2m1, quant.decode_ue8m0) == quant.qdq_mxfp4(idx)).all()) \
        and len(quant.pack_e2m1(c2)) + len(s2) == 68
    swa = torch.randn(512, generator=g, dtype=F64)
    c3, s3 = quant.codes_fp8_ue8m0(swa)
    ok_swa = bool((quant.decode_row(c3, s3, 32, quant.decode_e4m3, quant.decode_ue8m0) == quant.qdq_fp8_ue8m0(swa)).all()) \
        and len(c3) + len(s3) == 528
    err = float((quant.qdq_fp4_e4m3(main) - main).abs().max() / main.abs().max())
    check("stored rows decode to the quantise-dequantise values; 288 B main, 68 B index, 528 B SWA",
          ok_main and ok_idx and ok_swa, f"FP4 main-KV max error {err:.3f} of amax")


# ---------------------------------------------------------------- checkpoint reading

def _write_shard(path, tensors):
    """A safetensors file from (name -> (dtype string, raw bytes, shape)), written here by hand."""
    header, off, blobs = {}, 0, []
    for name, (dt, raw, shape) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_checkpoint_reading():
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as d:
        # dense FP8 [40, 70] with 32x32 block scales [2, 3]; codes avoid NaN (0x7F, 0xFF)
        wc = rng.integers(0, 127, size=(40, 70), dtype=np.uint8) | (rng.integers(0, 2, size=(40, 70), dtype=np.uint8) << 7)
        sc = np.array([[120, 127, 130], [125, 128, 131]], dtype=np.uint8)
        # FP4 expert [3, 64]: packed [3, 32], scales [3, 2]
        codes = rng.integers(0, 16, size=(3, 64), dtype=np.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        esc = np.array([[126, 127], [128, 129], [100, 140]], dtype=np.uint8)
        # Engram-style table [5, 64] with per-row scales [5, 2]; a BF16 vector
        tc = rng.integers(0, 127, size=(5, 64), dtype=np.uint8)
        tsc = rng.integers(110, 140, size=(5, 2), dtype=np.uint8)
        bf = np.array([0x3F80, 0xC000, 0x3E20], dtype="<u2")     # 1.0, -2.0, 0.15625
        _write_shard(os.path.join(d, "a.safetensors"), {
            "layers.0.attn.wq_a.weight": ("F8_E4M3", wc.tobytes(), [40, 70]),
            "layers.0.attn.wq_a.scale": ("F8_E8M0", sc.tobytes(), [2, 3]),
            "layers.0.attn.attn_sink": ("BF16", bf.tobytes(), [3])})
        _write_shard(os.path.join(d, "b.safetensors"), {
            "layers.0.ffn.experts.1.w1.weight": ("I8", packed.tobytes(), [3, 32]),
            "layers.0.ffn.experts.1.w1.scale": ("F8_E8M0", esc.tobytes(), [3, 2]),
            "layers.1.engram.embed.weight": ("F8_E4M3", tc.tobytes(), [5, 64]),
            "layers.1.engram.embed.scale": ("F8_E8M0", tsc.tobytes(), [5, 2])})
        wm = {n: "a.safetensors" for n in ("layers.0.attn.wq_a.weight", "layers.0.attn.wq_a.scale",
                                           "layers.0.attn.attn_sink")}
        wm.update({n: "b.safetensors" for n in ("layers.0.ffn.experts.1.w1.weight", "layers.0.ffn.experts.1.w1.scale",
                                                "layers.1.engram.embed.weight", "layers.1.engram.embed.scale")})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
        ck = checkpoint.Checkpoint(d)
        w = ck.tensor("layers.0.attn.wq_a.weight")
        ok_w = all(float(w[i, j]) == quant.decode_e4m3(int(wc[i, j])) * 2.0 ** (int(sc[i // 32, j // 32]) - 127)
                   for i in range(40) for j in range(70))
        e = ck.tensor("layers.0.ffn.experts.1.w1.weight")
        ok_e = all(float(e[i, j]) == E2M1_TABLE[codes[i, j] & 7] * (-1 if codes[i, j] & 8 else 1) *
                   2.0 ** (int(esc[i, j // 32]) - 127) for i in range(3) for j in range(64))
        r = ck.rows("layers.1.engram.embed.weight", [4, 0, 4])
        ok_r = all(float(r[k, j]) == quant.decode_e4m3(int(tc[i, j])) * 2.0 ** (int(tsc[i, j // 32]) - 127)
                   for k, i in enumerate([4, 0, 4]) for j in range(64))
        ok_t = bool((ck.tensor("layers.1.engram.embed.weight")[[4, 0, 4]] == r).all())
        ok_b = ck.tensor("layers.0.attn.attn_sink").tolist() == [1.0, -2.0, 0.15625]
        try:
            ck.rows("layers.1.engram.embed.weight", [5])
            ok_err = False
        except ValueError as ex:
            ok_err = "[0, 5)" in str(ex)
    check("checkpoint: sharded index, FP8 32x32 block scales, packed FP4 experts (low nibble first) with "
          "E8M0 per 32, Engram rows with per-row scales, BF16; out-of-range rows refused",
          ok_w and ok_e and ok_r and ok_t and ok_b and ok_err, f"{ok_w} {ok_e} {ok_r} {ok_t} {ok_b} {ok_err}")
