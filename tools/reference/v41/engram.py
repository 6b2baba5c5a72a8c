"""Engram (conditional n-gram memory) of DeepSeek-V4.1-Flash, float64: hashing and the gated
projection into the residual streams. The token-to-class normalisation table (built from the
tokenizer) and the table rows themselves are inputs here.

From ../shared/spec/v41-released-notes.md §2.1 and Appendix A [C:REF, CFG]: modules at
engram_layer_ids (1, 14), applied to X before the block; orders 2..engram_max_ngram_size,
engram_n_heads heads, 24 rows of engram_head_dim per token per layer; multipliers from NumPy's PCG64
seeded with 10007 * layer_id, forced odd; prime-sized bucket ranges drawn in order; pad id 2; image
tokens break n-grams. Facts the notes leave open, taken (facts, not code) from public transcriptions
of the released inference/engram.py and model.py (a serving engine's "V4.1 conditional memory" module
with HashLayout / hash_token_run; jayleaton/deepseek-v41-tensorfold-spark's reference port M:350-365;
a vllm-gaudi test whose config, layers [1, 14] with 72 and 204 rows for vocab 5, 2 heads, max order
4, matches the prime rule below):
  * primes: for each layer in order, for each order 2..N, start from engram_vocab_size - 1 and take
    engram_n_heads times the next prime, skipping primes already used by an earlier (layer, order);
    the sum of a layer's primes is its table's row count (engram_num_embeddings); the row offset of
    each (order, head) range is the running sum of the primes before it within the layer;
  * multipliers: NumPy default_rng(10007 * layer_id).integers(0, B, size=N, dtype=int64) * 2 + 1 with
    B = max(1, (2^63 - 1) // engram_compressed_vocab_size // 2) (so no int64 product overflows);
  * lookback: token i's shift-s token is the class of token i - s; once a shift reaches before the
    sequence start or an image token, that shift and all larger ones read the class of pad id
    (the block latches); image tokens are replaced by pad id before the class map;
  * hash of order n, head h: (XOR over s < n of class_s * mult_s) mod prime + offset;
  * rows (FP8 E4M3 with a UE8M0 scale per 32) are concatenated in (order, head) order, projected by
    wkv to hc_mult keys of d and one value of d; gate_i = sigmoid(signed sqrt(max(|dot_i|, 1e-6)))
    with dot_i = sum(X_i * q_weight_i * k_weight_i * key_i) * rsqrt(mean X_i^2 + eps) *
    rsqrt(mean key_i^2 + eps) * d^-1/2 (eps = rms_norm_eps); X_i += gate_i * value; the gate is 0
    for image tokens.
"""
import json
import os
import re
import sys
import unicodedata

import numpy as np

INT64_MAX = (1 << 63) - 1

# Unicode White_Space (what the released normaliser's Strip removes; Python's str.strip also removes
# U+001C..U+001F, which are not White_Space)
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + \
    "\u2028\u2029\u202f\u205f\u3000"
_SENTINEL = "\ue000"


def normalise_token_text(text):
    """The released normaliser sequence of one token's decoded text, as a public transcription of
    engram.py gives it (HF tokenizers normalizers): NFKC, NFD, strip accents (drop every
    General_Category=Mark character, Mn, Mc and Me: HF's StripAccents filters with
    unicode_normalization's is_combining_mark, documented as General_Category=Mark), lowercase, runs of [ \\t\\r\\n] -> one space, a text that is exactly one space kept
    (through a private-use sentinel) while every other text is stripped of White_Space at both ends.
    Lowercase is per character (HF's NormalizedString::lowercase maps each char with Rust's
    char::to_lowercase: full mappings, no context, so a final capital sigma becomes σ, not the ς
    that Python's str.lower gives); Python's str.lower on one character applies the same mappings."""
    t = unicodedata.normalize("NFKC", text)
    t = unicodedata.normalize("NFD", t)
    t = "".join(ch for ch in t if not unicodedata.category(ch).startswith("M"))
    t = "".join(ch.lower() for ch in t)  # per character, as Rust's char::to_lowercase: no final-sigma rule
    t = re.sub(r"[ \t\r\n]+", " ", t)
    t = _SENTINEL if t == " " else t
    t = t.strip(WHITE_SPACE)
    return t.replace(_SENTINEL, " ")


def class_map(decoded, raw):
    """[V] class of every token id: tokens whose keys agree share a class, classes numbered by first
    appearance in id order. The key is the raw token string when the decoded text holds U+FFFD (a
    partial UTF-8 byte token), else the normalised text, or the text itself when that is empty."""
    keys, out = {}, []
    for text, tok in zip(decoded, raw):
        key = tok if "\ufffd" in text else (normalise_token_text(text) or text)
        out.append(keys.setdefault(key, len(keys)))
    return out


def byte_level_symbols():
    """GPT-2's byte-level alphabet {symbol: byte}: printable bytes 33..126, 161..172, 174..255 as
    themselves, the other 68 bytes as chr(256 + k) in byte order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, k = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + k)] = b
            k += 1
    return out


def class_map_from_tokenizer_json(path, vocab_size, pad_id):
    """[vocab_size] classes of a byte-level tokenizer.json, as the released engram.py derives them
    from decode([id]): a token made only of byte symbols decodes to those bytes, any other token
    (added tokens) to itself; bytes decode with U+FFFD for invalid UTF-8; an id the file does not
    name decodes to ""; ids past the file's largest (padding rows) take pad_id's class."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    raw = {}
    for tok, i in j["model"]["vocab"].items():
        raw[i] = tok
    for a in j.get("added_tokens", []):
        raw[a["id"]] = a["content"]
    n = max(raw) + 1
    sym = byte_level_symbols()
    raws, decoded = [], []
    for i in range(n):
        tok = raw.get(i, "")
        b = bytes(sym[c] for c in tok) if all(c in sym for c in tok) else tok.encode("utf-8")
        raws.append(tok)
        decoded.append(b.decode("utf-8", errors="replace"))
    cls = class_map(decoded, raws)
    return cls + [cls[pad_id]] * (vocab_size - n), len(set(cls))


def is_prime(n):
    """Trial division (the primes here are ~1.6e7: at most ~4000 divisions)."""
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def next_prime(n):
    """The smallest prime > n."""
    n += 1
    while not is_prime(n):
        n += 1
    return n


def engram_primes(n_layers, max_ngram, heads, vocab_size):
    """[n_layers][(max_ngram - 1) * heads] bucket-range sizes, drawn in (layer, order, head) order."""
    used, out = set(), []
    for _ in range(n_layers):
        per_layer = []
        for _ in range(max_ngram - 1):
            cur = vocab_size - 1
            for _ in range(heads):
                cur = next_prime(cur)
                while cur in used:
                    cur = next_prime(cur)
                used.add(cur)
                per_layer.append(cur)
        out.append(per_layer)
    return out


def engram_offsets(primes_of_layer):
    """Row offset of each (order, head) range within its layer's table: exclusive running sum."""
    out, acc = [], 0
    for p in primes_of_layer:
        out.append(acc)
        acc += p
    return out


def engram_multipliers(layer_id, max_ngram, compressed_vocab):
    """[max_ngram] odd int64 multipliers from NumPy's PCG64 seeded with 10007 * layer_id."""
    bound = max(1, (INT64_MAX // compressed_vocab) // 2)
    draw = np.random.default_rng(10007 * layer_id).integers(0, bound, size=max_ngram, dtype=np.int64)
    return [int(v) * 2 + 1 for v in draw]


def lookback_classes(ids, image, token_map, pad_id, max_ngram):
    """[n][max_ngram] classes: row i, column s = class of token i - s, or class of pad_id once the
    look-back has passed the start or an image token (latching)."""
    pad_class = int(token_map[pad_id])
    out = []
    for i in range(len(ids)):
        row, blocked = [], False
        for s in range(max_ngram):
            src = i - s
            blocked = blocked or src < 0 or bool(image[src])
            row.append(pad_class if blocked else int(token_map[pad_id if image[src] else ids[src]]))
        out.append(row)
    return out


def engram_row_ids(ids, image, token_map, pad_id, max_ngram, heads, multipliers, primes, offsets):
    """[n][(max_ngram - 1) * heads] table rows of one layer for every token (Python ints, exact)."""
    rows = []
    for cls in lookback_classes(ids, image, token_map, pad_id, max_ngram):
        rolling = cls[0] * multipliers[0]
        r = []
        for s in range(1, max_ngram):            # order s + 1
            rolling ^= cls[s] * multipliers[s]
            for h in range(heads):
                k = (s - 1) * heads + h
                r.append(rolling % primes[k] + offsets[k])
        rows.append(r)
    return rows


def engram_gates(X, key, q_weight, k_weight, eps):
    """gate [hc]: sigmoid(sign(dot) sqrt(max(|dot|, 1e-6))), dot_i as in the header; X, key [hc, d]."""
    import torch  # here, not at the top: the class-table and hash entry points need no torch
    d = X.shape[-1]
    rstd = torch.rsqrt(X.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
    dot = (X * q_weight * k_weight * key).sum(-1) * rstd * d ** -0.5
    return torch.sigmoid(torch.copysign(torch.sqrt(torch.clamp(dot.abs(), min=1e-6)), dot))


def engram_apply(X, rows, wkv, q_weight, k_weight, eps, live=True):
    """X [hc, d] -> X + gate_i * value for one token; rows [(N - 1) * heads, head_dim] dequantised
    table rows; wkv [(hc + 1) * d, (N - 1) * heads * head_dim]; live False (image token): X unchanged."""
    if not live:
        return X
    hc, d = X.shape
    kv = wkv @ rows.reshape(-1)
    key, value = kv[:hc * d].reshape(hc, d), kv[hc * d:]
    g = engram_gates(X, key, q_weight, k_weight, eps)
    return X + g.unsqueeze(-1) * value.unsqueeze(0)


def run_cases(spec):
    """The reference on a checkpoint, for engine tests (tests/v41_engram_test.cpp). `spec`:
    {"checkpoint": dir, "layer": L, "config": {dim, hc_mult, norm_eps, engram_layers,
    engram_max_ngram, engram_n_heads, engram_head_dim, engram_vocab_size, engram_compressed_vocab,
    engram_pad_id}, "token_class": [V], "cases": [{"tokens": [n] from position 0, "image": [n] 0/1
    (optional), "x": [n][hc * d] streams before the Engram}]}; without "checkpoint" (and "x") only the
    hashes are computed. Per case: row_ids [n][K], x [n][hc * d]
    after it, and per token what an error bound needs: dot [hc] (before the signed sqrt), key_norm
    [hc] (||key_i||), kv_abs (max over wkv rows j of sum_k |wkv_jk r_k|), v_max (max |value|)."""
    c, L = spec["config"], spec["layer"]
    j = c["engram_layers"].index(L)
    N, H, hd = c["engram_max_ngram"], c["engram_n_heads"], c["engram_head_dim"]
    hc, d, eps = c["hc_mult"], c["dim"], c["norm_eps"]
    primes = engram_primes(len(c["engram_layers"]), N, H, c["engram_vocab_size"])[j]
    offsets = engram_offsets(primes)
    mult = engram_multipliers(L, N, c["engram_compressed_vocab"])
    ck = None  # without a checkpoint: hashes only (no torch needed)
    p = f"layers.{L}.engram."
    if spec.get("checkpoint"):
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import checkpoint  # noqa: E402 (needs this folder on the path)
        ck = checkpoint.Checkpoint(spec["checkpoint"])
        wkv, qw, kw = ck.tensor(p + "wkv.weight"), ck.tensor(p + "q_weight"), ck.tensor(p + "k_weight")
    out = {"primes": primes, "multipliers": mult, "cases": []}
    for case in spec["cases"]:
        ids = case["tokens"]
        image = case.get("image") or [0] * len(ids)
        row_ids = engram_row_ids(ids, image, spec["token_class"], c["engram_pad_id"], N, H, mult, primes, offsets)
        res = {"row_ids": row_ids, "x": [], "dot": [], "key_norm": [], "kv_abs": [], "v_max": []}
        for t, xs in enumerate(case.get("x", [])):
            X = torch.tensor(xs, dtype=torch.float64).reshape(hc, d)
            rows = ck.rows(p + "embed.weight", row_ids[t]).reshape(-1)
            kv = wkv @ rows
            key, value = kv[:hc * d].reshape(hc, d), kv[hc * d:]
            rstd = torch.rsqrt(X.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
            res["dot"].append(((X * qw * kw * key).sum(-1) * rstd * d ** -0.5).tolist())
            res["key_norm"].append(key.norm(dim=-1).tolist())
            res["kv_abs"].append(float((wkv.abs() @ rows.abs()).max()))
            res["v_max"].append(float(value.abs().max()))
            res["x"].append(engram_apply(X, rows.reshape(-1, hd), wkv, qw, kw, eps, live=not image[t]).reshape(-1).tolist())
        out["cases"].append(res)
    return out


if __name__ == "__main__":
    # python3 engram.py SPEC.json                          -> run_cases as JSON
    # python3 engram.py --normalise TEXTS.json             -> [normalise_token_text(t) for t in TEXTS]
    # python3 engram.py --classes TOKENIZER.json V PAD     -> {"classes": [V], "n_classes": n}
    a = sys.argv[1:]
    if len(a) == 1:
        with open(a[0], encoding="utf-8") as f:
            json.dump(run_cases(json.load(f)), sys.stdout)
    elif len(a) == 2 and a[0] == "--normalise":
        with open(a[1], encoding="utf-8") as f:
            json.dump([normalise_token_text(t) for t in json.load(f)], sys.stdout)
    elif len(a) == 4 and a[0] == "--classes":
        cls, n = class_map_from_tokenizer_json(a[1], int(a[2]), int(a[3]))
        json.dump({"classes": cls, "n_classes": n}, sys.stdout)
    else:
        sys.exit("usage: engram.py SPEC.json | --normalise TEXTS.json | --classes TOKENIZER.json VOCAB PAD_ID")
