#!/usr/bin/env python3
"""Write a LLaMA-architecture GGUF file with random weights, for timing llama.cpp's decode.

The model is sized to stream as many matmul parameters per decode token as a Cedar model
(`--matmul-params`, what `cedar info` prints as "per decode token ... matmul N params"), so the
two engines' decode rates compare at equal bytes per token. Only the shapes matter for speed;
the weights are N(0, 0.02^2) from a fixed seed and the norms are ones.

GGUF v3 as llama.cpp's gguf.h documents it: header, key/values, tensor infos (dims innermost
first), then the tensor data, each tensor at an offset aligned to 32 bytes. Tensor types: F32 (0),
F16 (1), Q8_0 (8: blocks of 32, an F16 scale amax / 127 then 32 int8) and BF16 (30).
"""
import argparse
import struct
import sys

import numpy as np

GGML_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30}
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


def encode(w, kind):
    if kind == "f32":
        return w.astype(np.float32).tobytes()
    if kind == "f16":
        return w.astype(np.float16).tobytes()
    if kind == "bf16":
        return to_bf16_bytes(w)
    if kind == "q8_0":
        return quantize_q8_0(w)
    raise ValueError(kind)


def plan(args):
    """Tensors as (name, [rows, cols], kind): llama.cpp's names, its dims reversed on write."""
    d, f, hd = args.dim, args.ffn, args.dim // args.heads
    kvd = hd * args.kv_heads
    t = [("token_embd.weight", [args.vocab, d], args.type),
         ("output_norm.weight", [1, d], "f32"),
         ("output.weight", [args.vocab, d], args.type)]
    for i in range(args.layers):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", [1, d], "f32"),
              (p + "attn_q.weight", [d, d], args.type),
              (p + "attn_k.weight", [kvd, d], args.type),
              (p + "attn_v.weight", [kvd, d], args.type),
              (p + "attn_output.weight", [d, d], args.type),
              (p + "ffn_norm.weight", [1, d], "f32"),
              (p + "ffn_gate.weight", [f, d], args.type),
              (p + "ffn_up.weight", [f, d], args.type),
              (p + "ffn_down.weight", [d, f], args.type)]
    return t


def matmul_params(args):
    d, f, kvd = args.dim, args.ffn, args.dim // args.heads * args.kv_heads
    return args.layers * (2 * d * d + 2 * kvd * d + 3 * d * f) + args.vocab * d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--type", choices=sorted(GGML_TYPES))
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
        size = n * 4 if kind == "f32" else n * 2 if kind in ("f16", "bf16") else n // 32 * 34
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
            f.write(raw)
            f.write(b"\0" * (-size % ALIGN))
    print(f"write_gguf: {args.out}: {args.type}, {len(tensors)} tensors, {matmul_params(args) / 1e6:.1f}M matmul params a decode token")


if __name__ == "__main__":
    main()
