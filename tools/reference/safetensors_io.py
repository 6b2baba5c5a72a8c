"""Minimal safetensors reader/writer (no dependency on the `safetensors` package).

Format: 8-byte little-endian header length n, then n bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {str: str}},
then the raw little-endian data (offsets relative to the start of the data section).
The header is padded with spaces so that the data starts at an 8-byte-aligned offset.
"""
import json
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
       "F16": np.float16, "U8": np.uint8, "I8": np.int8, "I16": np.int16}
_TORCH_TO_ST = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32",
                torch.int64: "I64", torch.bfloat16: "BF16", torch.float16: "F16",
                torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16"}


def _bf16_bytes_to_f32(raw):
    u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
    return (u16 << 16).view(np.float32)


def _f32_to_bf16_bytes(a):
    """Round-to-nearest-even float32 -> bfloat16 bit pattern."""
    u32 = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.ascontiguousarray(a, dtype=np.float32))
    rounded = (u32 + 0x7FFF + ((u32 >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out.astype("<u2").tobytes()


def load(path):
    """Returns (dict name -> torch tensor, metadata dict). BF16 tensors come back as float32."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = blob[base + b:base + e]
        dt = info["dtype"]
        shape = list(info["shape"])
        if dt == "BF16":
            arr = _bf16_bytes_to_f32(raw)
        elif dt in _NP:
            arr = np.frombuffer(raw, dtype=np.dtype(_NP[dt]).newbyteorder("<")).astype(_NP[dt])
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: tensor {name}: {arr.size} values for shape {shape}")
        tensors[name] = torch.from_numpy(arr.copy().reshape(shape))
    return tensors, dict(meta)


def save(path, tensors, metadata=None, bf16=()):
    """Write tensors (name -> torch tensor). Names listed in `bf16` are stored as BF16.
    Float64 tensors are stored as F64 unless converted by the caller."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if name in bf16:
            dt = "BF16"
            raw = _f32_to_bf16_bytes(t.to(torch.float32).numpy())
        else:
            if t.dtype not in _TORCH_TO_ST or t.dtype == torch.bfloat16:
                raise ValueError(f"tensor {name}: unsupported dtype {t.dtype}")
            dt = _TORCH_TO_ST[t.dtype]
            raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)  # contiguous, no holes (as the official format requires)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-(8 + len(hjson))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for c in chunks:
            f.write(c)
