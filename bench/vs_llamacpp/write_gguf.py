#!/usr/bin/env python3
"""Write a LLaMA-architecture GGUF file with random weights, for timing llama.cpp's decode.

The model is sized to stream as many matmul parameters per decode token as a Cedar model
(`--matmul-params`, what `cedar info` prints as "per decode token ... matmul N params"), so the
two engines' decode rates compare at equal bytes per token. Only the shapes matter for speed;
the weights are N(0, 0.02^2) from a fixed seed and the norms are ones.

GGUF v3 as llama.cpp's gguf.h documents it: header, key/values, tensor infos (dims innermost
first), then the tensor data, each tensor at an offset aligned to 32 bytes. Tensor types: F32 (0),
F16 (1), Q8_0 (8: blocks of 32, an F16 scale amax / 127 then 32 int8), BF16 (30) and MXFP4 (39:
blocks of 32, an E8M0 exponent then 16 bytes of E2M1 codes).

`--type` names one type for every matrix, or `q8_0-mxfp4`: the released DeepSeek-V4.1-Flash
layout's analogue at equal bytes (Cedar's `--weights fp8-fp4`: FP8 dense weights, FP4 routed
experts, a BF16 head). Attention and the first `--q8-ffn-tensors` FFN matrices are Q8_0 (8.5
bits a weight against FP8's ~8), the other FFN matrices MXFP4 (4.25 bits, as the released FP4
experts), the output head BF16; run.py picks the count that matches Cedar's bytes a token.
"""
import argparse
import struct
import sys

import numpy as np

GGML_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30, "mxfp4": 39}
RELEASED = "q8_0-mxfp4"  # the mixed layout above
KINDS = ["f32", "f16", "bf16", "q8_0", RELEASED]  # what --type takes
ALIGN = 32
# GGUF value types
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        return out + struct.pack("<I", value)
    if vtype == T_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == T_STRING:
        return out + gguf_str(value)
    raise ValueError(vtype)


def kv_array(key, elem_type, values):
    out = gguf_str(key) + struct.pack("<IIQ", T_ARRAY, elem_type, len(values))
    for v in values:
        if elem_type == T_STRING:
            out += gguf_str(v)
        elif elem_type == T_FLOAT32:
            out += struct.pack("<f", v)
        elif elem_type == T_INT32:
            out += struct.pack("<i", v)
        else:
            raise ValueError(elem_type)
    return out


def to_bf16_bytes(w):
    """Round-to-nearest-even F32 -> BF16 (the weights are finite)."""
    u = w.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def quantize_q8_0(w):
    """[rows, cols] F32 -> Q8_0 blocks along cols: (scale amax / 127 as F16, 32 x int8)."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(raw, n):
    """The inverse of quantize_q8_0 (for the self-check)."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
    d = b[:, :2].copy().view(np.float16).astype(np.float32).reshape(-1)
    q = b[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d[:, None]).reshape(-1)[:n]


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)  # FP4 E2M1's magnitudes


def quantize_mxfp4(w):
    """[rows, cols] F32 -> MXFP4 blocks along cols, as ggml's block_mxfp4: the exponent byte e (the
    block's scale 2^(e - 127) = 2^(floor(log2 amax) - 2), as llama.cpp's own quantiser picks), then
    16 bytes of 4-bit codes (E2M1 magnitude index, sign in bit 3): element j in the low nibble of
    byte j, element j + 16 in its high nibble."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    ex = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127).astype(np.int32)
    scaled = np.abs(blocks) / np.exp2(ex.astype(np.float32))[:, None]
    idx = np.searchsorted((E2M1[1:] + E2M1[:-1]) / 2, scaled).astype(np.uint8)  # nearest magnitude
    codes = idx | ((blocks < 0).astype(np.uint8) << 3)
    out = np.empty((blocks.shape[0], 17), dtype=np.uint8)
    out[:, 0] = (ex + 127).astype(np.uint8)
    out[:, 1:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out.tobytes()


def dequantize_mxfp4(raw, n):
    """The inverse of quantize_mxfp4 (for the self-check)."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 17)
    codes = np.concatenate([b[:, 1:] & 15, b[:, 1:] >> 4], axis=1)
    mag = E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0).astype(np.float32)
    return (mag * np.exp2(b[:, :1].astype(np.float32) - 127)).reshape(-1)[:n]


def tensor_bytes(n, kind):
    """Bytes of n values stored as kind."""
    return {"f32": 4 * n, "f16": 2 * n, "bf16": 2 * n, "q8_0": n // 32 * 34, "mxfp4": n // 32 * 17}[kind]


def encode(w, kind):
    if kind == "f32":
        return w.astype(np.float32).tobytes()
    if kind == "f16":
        return w.astype(np.float16).tobytes()
    if kind == "bf16":
        return to_bf16_bytes(w)
    if kind == "q8_0":
        return quantize_q8_0(w)
    if kind == "mxfp4":
        return quantize_mxfp4(w)
    raise ValueError(kind)


def plan(args):
    """Tensors as (name, [rows, cols], tensor type): llama.cpp's names, its dims reversed on write."""
    d, f, hd = args.dim, args.ffn, args.dim // args.heads
    kvd = hd * args.kv_heads
    mixed = args.type == RELEASED
    dense = "q8_0" if mixed else args.type
    t = [("token_embd.weight", [args.vocab, d], dense),
         ("output_norm.weight", [1, d], "f32"),
         ("output.weight", [args.vocab, d], "bf16" if mixed else args.type)]
    n_ffn = 0  # FFN matrices so far (q8_0-mxfp4: the first q8_ffn_tensors are Q8_0)

    def ffn():
        nonlocal n_ffn
        n_ffn += 1
        return dense if not mixed or n_ffn <= getattr(args, "q8_ffn_tensors", 0) else "mxfp4"
    for i in range(args.layers):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", [1, d], "f32"),
              (p + "attn_q.weight", [d, d], dense),
              (p + "attn_k.weight", [kvd, d], dense),
              (p + "attn_v.weight", [kvd, d], dense),
              (p + "attn_output.weight", [d, d], dense),
              (p + "ffn_norm.weight", [1, d], "f32"),
              (p + "ffn_gate.weight", [f, d], ffn()),
              (p + "ffn_up.weight", [f, d], ffn()),
              (p + "ffn_down.weight", [d, f], ffn())]
    return t


def matmul_params(args):
    d, f, kvd = args.dim, args.ffn, args.dim // args.heads * args.kv_heads
    return args.layers * (2 * d * d + 2 * kvd * d + 3 * d * f) + args.vocab * d


def matmul_bytes(args):
    """Bytes of the matrices one decode token reads (all but the embedding and the norms)."""
    return sum(tensor_bytes(rows * cols, kind) for name, (rows, cols), kind in plan(args)
               if rows > 1 and name != "token_embd.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--type", choices=KINDS)
    ap.add_argument("--q8-ffn-tensors", type=int, default=0,
                    help="q8_0-mxfp4: how many FFN matrices (gate, up, down of layer 0, then layer 1, ...) stay Q8_0")
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=9696)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--print-params", action="store_true", help="print the matmul parameters a decode token reads and exit")
    args = ap.parse_args()
    for name, v in (("--dim", args.dim), ("--ffn", args.ffn)):
        if v % 32:
            sys.exit(f"write_gguf: {name} must be a multiple of 32 (Q8_0 blocks), got {v}")
    if args.dim % args.heads or args.heads % args.kv_heads:
        sys.exit(f"write_gguf: --dim {args.dim} / --heads {args.heads} / --kv-heads {args.kv_heads} do not divide")
    if args.q8_ffn_tensors < 0 or args.q8_ffn_tensors > 3 * args.layers:
        sys.exit(f"write_gguf: --q8-ffn-tensors must be 0..{3 * args.layers} (3 FFN matrices a layer), got {args.q8_ffn_tensors}")
    if args.print_params:
        print(matmul_params(args))
        return
    if not args.out or not args.type:
        sys.exit("write_gguf: --out and --type are required")

    # llama.cpp's SPM vocabulary looks up byte tokens (the line feed's "<0x0A>") at load.
    if args.vocab < 3 + 256 + 1:
        sys.exit(f"write_gguf: --vocab must be at least 260 (3 control and 256 byte tokens), got {args.vocab}")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), args.vocab)]
    types = [2, 3, 3] + [6] * 256 + [1] * (args.vocab - 259)  # unknown, control, byte, normal
    meta = [kv("general.architecture", T_STRING, "llama"),
            kv("general.name", T_STRING, "cedar-vs-llamacpp random"),
            kv("general.alignment", T_UINT32, ALIGN),
            kv("llama.context_length", T_UINT32, 4096),
            kv("llama.embedding_length", T_UINT32, args.dim),
            kv("llama.block_count", T_UINT32, args.layers),
            kv("llama.feed_forward_length", T_UINT32, args.ffn),
            kv("llama.attention.head_count", T_UINT32, args.heads),
            kv("llama.attention.head_count_kv", T_UINT32, args.kv_heads),
            kv("llama.rope.dimension_count", T_UINT32, args.dim // args.heads),
            kv("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-6),
            kv("tokenizer.ggml.model", T_STRING, "llama"),
            kv_array("tokenizer.ggml.tokens", T_STRING, tokens),
            kv_array("tokenizer.ggml.scores", T_FLOAT32, [0.0] * args.vocab),
            kv_array("tokenizer.ggml.token_type", T_INT32, types),
            kv("tokenizer.ggml.unknown_token_id", T_UINT32, 0),
            kv("tokenizer.ggml.bos_token_id", T_UINT32, 1),
            kv("tokenizer.ggml.eos_token_id", T_UINT32, 2)]
    rng = np.random.default_rng(args.seed)
    tensors = plan(args)
    infos, offset, sizes = [], 0, []
    for name, (rows, cols), kind in tensors:
        n = rows * cols
        size = tensor_bytes(n, kind)
        dims = [cols] if rows == 1 else [cols, rows]
        infos.append(gguf_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
                     + struct.pack("<IQ", GGML_TYPES[kind], offset))
        sizes.append(size)
        offset += (size + ALIGN - 1) // ALIGN * ALIGN
    with open(args.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))
        for m in meta:
            f.write(m)
        for i in infos:
            f.write(i)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for (name, (rows, cols), kind), size in zip(tensors, sizes):
            w = np.ones(cols, np.float32) if rows == 1 else rng.standard_normal((rows, cols), np.float32) * 0.02
            raw = encode(w, kind)
            assert len(raw) == size, (name, len(raw), size)
            if kind == "q8_0" and name == "blk.0.attn_q.weight":  # the writer's own check
                err = np.abs(dequantize_q8_0(raw, w.size) - w.reshape(-1)).max()
                assert err <= np.abs(w).max() / 254 * 1.01, err
            if kind == "mxfp4" and name.endswith("ffn_down.weight"):  # at most half a block's amax off
                err = np.abs(dequantize_mxfp4(raw, w.size) - w.reshape(-1)).reshape(-1, 32).max(axis=1)
                assert (err <= np.abs(w).reshape(-1, 32).max(axis=1) / 2).all(), err.max()
            f.write(raw)
            f.write(b"\0" * (-size % ALIGN))
    print(f"write_gguf: {args.out}: {args.type}, {len(tensors)} tensors, {matmul_params(args) / 1e6:.1f}M matmul params "
          f"({matmul_bytes(args) / 1e6:.1f} MB) a decode token")


if __name__ == "__main__":
    main()
