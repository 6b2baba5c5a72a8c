"""Reading a checkpoint in the released DeepSeek-V4.1-Flash layout, in float64.

From ../shared/spec/v41-released-notes.md Appendix A [gathered from engines that load the released
files]: sharded safetensors with `model.safetensors.index.json` (`weight_map`: tensor name -> shard
file); names without a `model.` prefix; dense weights F8_E4M3 `<x>.weight` with F8_E8M0 `<x>.scale`
per 32x32 block (`quantization_config.weight_block_size` [32, 32]); routed experts FP4 E2M1 packed two
per byte in I8 `<x>.weight` [out, in/2] with one F8_E8M0 `<x>.scale` per 32 inputs [out, in/32];
BF16 and F32 for the rest. Packed nibble order (element 2i in the low nibble) as in a public
transcription of the released Engram FP4 table reader (`weights & 15`, then `weights >> 4`).
Tensors are memory-mapped (numpy.memmap) and read one at a time: nothing loads a whole shard.
"""
import json
import os
import struct

import numpy as np
import torch

import quant

# value of every code, from the bit-level decoders (float64)
E4M3_VALUES = np.array([quant.decode_e4m3(c) for c in range(256)], dtype=np.float64)
E8M0_VALUES = np.array([quant.decode_ue8m0(c) for c in range(256)], dtype=np.float64)
E2M1_VALUES = np.array([quant.decode_e2m1(c) for c in range(16)], dtype=np.float64)

_PLAIN = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8", "I8": "i1", "U8": "u1"}
_BYTES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def read_header(path):
    """(header dict name -> {dtype, shape, data_offsets}, data start offset) of one shard."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: expected an 8-byte safetensors header length, found {len(head)} bytes")
        (n,) = struct.unpack("<Q", head)
        size = os.path.getsize(path)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file ({size} bytes)")
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return header, 8 + n


def raw_tensor(path, name, header=None, base=None):
    """(dtype string, numpy array of the stored elements, memory-mapped; raw bytes for 8-bit codes)."""
    if header is None:
        header, base = read_header(path)
    if name not in header:
        raise KeyError(f"{path}: no tensor {name}")
    info = header[name]
    dt, shape = info["dtype"], list(info["shape"])
    if dt not in _BYTES:
        raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
    b, e = info["data_offsets"]
    count = int(np.prod(shape)) if shape else 1
    if e - b != count * _BYTES[dt]:
        raise ValueError(f"{path}: tensor {name}: {e - b} bytes for {dt} {shape}")
    if base + e > os.path.getsize(path):
        raise ValueError(f"{path}: tensor {name} ends past the file")
    np_dt = "<u2" if dt == "BF16" else "u1" if dt.startswith("F8_") else _PLAIN[dt]
    arr = np.memmap(path, mode="r", dtype=np_dt, offset=base + b, shape=tuple(shape) if shape else (1,))
    return dt, arr


def to_float64(dt, arr):
    """float64 torch tensor of a stored array: F8 codes through their tables, BF16 by widening."""
    if dt == "F8_E4M3":
        return torch.from_numpy(E4M3_VALUES[np.asarray(arr)])
    if dt == "F8_E8M0":
        return torch.from_numpy(E8M0_VALUES[np.asarray(arr)])
    if dt == "BF16":
        return torch.from_numpy((np.asarray(arr).astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    return torch.from_numpy(np.asarray(arr).astype(np.float64))


def dequant_row_fp8(w, s, block=32):
    """W [rows, n] (E4M3 values) with one scale per row per 32 columns S [rows, n/32] (Engram tables)."""
    if s.shape[0] != w.shape[0] or s.shape[1] * block != w.shape[1]:
        raise ValueError(f"FP8 row scale: expected [{w.shape[0]}, {w.shape[1] // block}], found {list(s.shape)}")
    return w * s.repeat_interleave(block, dim=1)


def dequant_block_fp8(w, s, block=(32, 32)):
    """W [out, in] (E4M3 values) times its block scale S [ceil(out/32), ceil(in/32)] -> float64."""
    bo, bi = block
    rows = torch.arange(w.shape[0]) // bo
    cols = torch.arange(w.shape[1]) // bi
    if s.shape[0] <= int(rows[-1]) or s.shape[1] <= int(cols[-1]):
        raise ValueError(f"FP8 block scale: expected at least [{int(rows[-1]) + 1}, {int(cols[-1]) + 1}], "
                         f"found {list(s.shape)}")
    return w * s[rows][:, cols]


def unpack_fp4(packed):
    """uint8/int8 [out, in/2] -> E2M1 codes [out, in]: element 2i low nibble, 2i+1 high nibble."""
    b = np.asarray(packed).astype(np.uint8)
    return np.stack([b & 15, b >> 4], axis=-1).reshape(b.shape[0], b.shape[1] * 2)


def dequant_fp4(packed, s, block=32):
    """Packed FP4 [out, in/2] with UE8M0 scale values S [out, in/32] -> float64 [out, in]."""
    codes = unpack_fp4(packed)
    if s.shape[-1] * block != codes.shape[1] or s.shape[0] != codes.shape[0]:
        raise ValueError(f"FP4 scale: expected [{codes.shape[0]}, {codes.shape[1] // block}], found {list(s.shape)}")
    w = torch.from_numpy(E2M1_VALUES[codes])
    return w * s.repeat_interleave(block, dim=1)


class Checkpoint:
    """A folder with model.safetensors.index.json (or one model.safetensors); tensors by name."""

    def __init__(self, folder):
        self.folder = folder
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                self.weight_map = json.load(f)["weight_map"]
        elif os.path.isfile(os.path.join(folder, "model.safetensors")):
            header, _ = read_header(os.path.join(folder, "model.safetensors"))
            self.weight_map = {n: "model.safetensors" for n in header}
        else:
            raise ValueError(f"{folder}: expected model.safetensors.index.json or model.safetensors")
        self._headers = {}

    def raw(self, name):
        if name not in self.weight_map:
            raise KeyError(f"{self.folder}: no tensor {name} in the index")
        shard = os.path.join(self.folder, self.weight_map[name])
        if os.path.dirname(os.path.abspath(shard)) != os.path.abspath(self.folder):
            raise ValueError(f"{self.folder}: tensor {name} points outside the folder ({self.weight_map[name]})")
        if shard not in self._headers:
            self._headers[shard] = read_header(shard)
        header, base = self._headers[shard]
        return raw_tensor(shard, name, header, base)

    def tensor(self, name):
        """float64, dequantised: `<x>.weight` F8_E4M3 with `<x>.scale` (32x32 blocks); I8/U8 packed
        FP4 with `<x>.scale` (per 32 inputs); anything else as stored."""
        dt, arr = self.raw(name)
        scale_name = name[:-len(".weight")] + ".scale" if name.endswith(".weight") else None
        if dt == "F8_E4M3" and scale_name in self.weight_map:
            sdt, s = self.raw(scale_name)
            w, sv = to_float64(dt, arr), to_float64(sdt, s)
            # one scale row per weight row (Engram tables, [rows, n/32]) or 32x32 blocks (dense
            # weights, [ceil(out/32), ceil(in/32)]); the two shapes coincide only for one row
            if sv.shape[0] == w.shape[0] and w.shape[0] > 1:
                return dequant_row_fp8(w, sv)
            return dequant_block_fp8(w, sv)
        if dt in ("I8", "U8") and scale_name in self.weight_map:
            sdt, s = self.raw(scale_name)
            return dequant_fp4(arr, to_float64(sdt, s))
        return to_float64(dt, arr)

    def rows(self, name, ids):
        """float64 [len(ids), n]: rows `ids` of an FP8 table with per-row scales (`<x>.weight` and
        `<x>.scale`), read from the map without touching the other rows (Engram lookups)."""
        dt, arr = self.raw(name)
        sdt, s = self.raw(name[:-len(".weight")] + ".scale")
        if dt != "F8_E4M3" or sdt != "F8_E8M0":
            raise ValueError(f"{name}: expected F8_E4M3 rows with F8_E8M0 scales, found {dt} / {sdt}")
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= arr.shape[0]):
            raise ValueError(f"{name}: row ids must lie in [0, {arr.shape[0]}), found {int(ids.min())}..{int(ids.max())}")
        return dequant_row_fp8(to_float64(dt, arr[ids]), to_float64(sdt, s[ids]))
