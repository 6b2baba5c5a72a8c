"""The training corpus: the Python standard library shipped with Debian's python3
(/usr/lib/python3.11/*.py), byte-level tokens plus the chat template's special tokens.

Token ids (tools_bridge/lib/tokenizer.h, ByteTokenizer): 0-255 bytes, then <|bos|> 256,
<|eos|> 257, <|system|> 258, <|user|> 259, <|assistant|> 260, <|tool|> 261, <|tool_call|> 262,
<|/tool_call|> 263, <|end|> 264, <|tools|> 265; vocab 512.

Held-out files (never trained on): HELDOUT below. Everything else in the folder except
symlinks and the machine-specific _sysconfigdata*.py is training data.

Training documents: each file is cut at blank lines into pieces of about 1-2.5 KB; each piece is
rendered, by a deterministic hash of (file, piece index), in one of three shapes that follow the
chat template's grammar (tools_bridge/lib/chat_template.h):
  plain (1/2): <|bos|> piece <|eos|>
  chat  (1/4): <|bos|><|system|>You are a Python coding assistant.<|end|>
               <|user|>Continue NAME.py after this line:\\nLAST LINE OF THE PREVIOUS PIECE<|end|>
               <|assistant|>piece<|end|><|eos|>
  tool  (1/4): <|bos|><|tools|>[read_file schema]<|end|><|user|>Which functions and classes does
               NAME.py define near line N?<|end|><|assistant|><|tool_call|>{"name":"read_file",
               "arguments":{"line":N,"path":"NAME.py"}}<|/tool_call|><|end|><|tool|>call_0\\n
               piece<|end|><|assistant|>It defines a, b, c.<|end|><|eos|>
The answer of the tool shape lists the def/class names of the piece (copied from up to ~2 KB
back: a task for the compressed pools, not only the window).

Held-out evaluation text: for each held-out file, <|bos|> + its bytes + <|eos|>, concatenated
in HELDOUT order; cut into consecutive windows of T+1 tokens with stride T, each window
evaluated as a fresh sequence (T predictions: 2 of ~19 600 targets per file are specials).
"""
import glob
import hashlib
import json
import os
import re
import zlib

import numpy as np

BOS, EOS, SYSTEM, USER, ASSISTANT, TOOL, TOOL_CALL, TOOL_CALL_END, END, TOOLS = range(256, 266)
VOCAB = 512

CORPUS_DIR = "/usr/lib/python3.11"
HELDOUT = ["bisect.py", "calendar.py", "csv.py", "fractions.py", "heapq.py", "shlex.py",
           "textwrap.py", "uuid.py"]

TOOLS_JSON = json.dumps([{"function": {"description": "Read a Python source file", "name": "read_file",
                                       "parameters": {"properties": {"line": {"type": "integer"},
                                                                     "path": {"type": "string"}},
                                                      "required": ["path"], "type": "object"}},
                          "type": "function"}], separators=(",", ":"), sort_keys=True)
SYSTEM_TEXT = "You are a Python coding assistant."
DEF_RE = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z_0-9]*)", re.M)


def enc(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return list(b)


def train_files(corpus_dir=CORPUS_DIR):
    out = []
    for p in sorted(glob.glob(os.path.join(corpus_dir, "*.py"))):
        name = os.path.basename(p)
        if os.path.islink(p) or name.startswith("_sysconfigdata") or name in HELDOUT:
            continue
        out.append(p)
    return out


def split_pieces(data, lo=1000, hi=2500):
    """Cut at blank lines: pieces of at least `lo` bytes where possible, at most ~`hi`."""
    lines = data.split(b"\n")
    pieces, cur, size = [], [], 0
    for ln in lines:
        cur.append(ln)
        size += len(ln) + 1
        if (size >= lo and ln.strip() == b"") or size >= hi:
            pieces.append(b"\n".join(cur) + b"\n")
            cur, size = [], 0
    if cur and any(x.strip() for x in cur):
        pieces.append(b"\n".join(cur) + b"\n")
    return pieces


def render_piece(name, k, piece, prev, first_line):
    h = zlib.crc32(f"{name}:{k}".encode()) % 4
    if h in (0, 1):
        return [BOS] + enc(piece) + [EOS]
    stem = name[:-3] if name.endswith(".py") else name
    if h == 2:
        last = [x for x in prev.split(b"\n") if x.strip()]
        last = last[-1] if last else b""
        return ([BOS, SYSTEM] + enc(SYSTEM_TEXT) + [END, USER] + enc(f"Continue {stem}.py after this line:\n")
                + enc(last) + [END, ASSISTANT] + enc(piece) + [END, EOS])
    names = []
    for m in DEF_RE.finditer(piece):
        n = m.group(1).decode()
        if n not in names:
            names.append(n)
    answer = ("It defines " + ", ".join(names) + ".") if names else "That part defines no function or class."
    call = '{"name":"read_file","arguments":' + json.dumps({"line": first_line, "path": f"{stem}.py"},
                                                          separators=(",", ":"), sort_keys=True) + "}"
    return ([BOS, TOOLS] + enc(TOOLS_JSON) + [END, USER]
            + enc(f"Which functions and classes does {stem}.py define near line {first_line}?")
            + [END, ASSISTANT, TOOL_CALL] + enc(call) + [TOOL_CALL_END, END, TOOL] + enc("call_0\n")
            + enc(piece) + [END, ASSISTANT] + enc(answer) + [END, EOS])


def training_stream(corpus_dir=CORPUS_DIR):
    """All training documents concatenated: np.int16 array of token ids, and a summary."""
    toks = []
    nfiles = nbytes = 0
    for p in train_files(corpus_dir):
        with open(p, "rb") as f:
            data = f.read()
        nfiles += 1
        nbytes += len(data)
        name = os.path.basename(p)
        prev, line = b"", 1
        for k, piece in enumerate(split_pieces(data)):
            toks.extend(render_piece(name, k, piece, prev, line))
            line += piece.count(b"\n")
            prev = piece
    arr = np.asarray(toks, dtype=np.int16)
    return arr, {"files": nfiles, "bytes": nbytes, "tokens": int(arr.size),
                 "sha256": hashlib.sha256(arr.tobytes()).hexdigest()}


def heldout_stream(corpus_dir=CORPUS_DIR):
    toks = []
    for name in HELDOUT:
        with open(os.path.join(corpus_dir, name), "rb") as f:
            toks += [BOS] + enc(f.read()) + [EOS]
    return np.asarray(toks, dtype=np.int16)


def heldout_windows(T, n=None, corpus_dir=CORPUS_DIR):
    """Consecutive windows [k*T, k*T + T + 1) of the held-out stream: int64 array [n, T+1]."""
    s = heldout_stream(corpus_dir)
    count = (len(s) - 1) // T
    if n is not None:
        count = min(count, n)
    return np.stack([s[k * T:k * T + T + 1] for k in range(count)]).astype(np.int64)


def windows_sha256(w):
    return hashlib.sha256(np.ascontiguousarray(w, dtype=np.int64).tobytes()).hexdigest()
