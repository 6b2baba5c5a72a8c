"""The released DeepSeek-V4.1-Flash config.json, read and validated, and each layer's role.

Keys and values from ../shared/spec/v41-released-notes.md §1 [C:CFG] and public fixtures that quote
the released config (nested `text_config` beside `vision_config` and `quantization_config`; a config
without `text_config` is read flat with the same key names). Roles [C:R41 §4.2.1, CFG]: a layer with
ratio > 0 reads the pool of kv_source = max{s in kv_source_layer_ids : s <= l} and the top-k of
max{s in index_source_layer_ids : s <= l}; it is Full if it is a KV source, Reindex if it is an index
source only, Reuse otherwise; Reindex layers after candidate_source_layer_id score inside its
candidate blocks; compress_ratios has one entry per backbone layer and per DSpark stage (layers
num_hidden_layers ..). Open [?]: `rope_scaling` may omit beta_fast / beta_slow (one fixture does);
they then take the released ModelArgs defaults 32 / 1, as DeepSeek-V3's did. The flat
`inference/config.json` spelling (ModelArgs names) is not read yet.
"""
import json
from dataclasses import dataclass

REQUIRED = ("vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
            "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window",
            "rms_norm_eps", "rope_theta", "compress_rope_theta", "rope_scaling", "compress_ratios",
            "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "routed_scaling_factor",
            "swiglu_limit", "norm_topk_prob", "hc_mult", "hc_sinkhorn_iters", "hc_eps")
OPTIONAL = {"scoring_func": "sqrtsoftplus", "kv_source_layer_ids": [], "index_source_layer_ids": [],
            "candidate_source_layer_id": -1, "candidate_topk_blocks": 0, "candidate_block_size": 1,
            "index_n_heads": 0, "index_head_dim": 0, "index_topk": 0, "num_nextn_predict_layers": 0,
            "engram_layer_ids": [], "engram_num_embeddings": [], "engram_max_ngram_size": 0,
            "engram_vocab_size": 0, "engram_n_heads": 0, "engram_head_dim": 0, "engram_pad_token_id": 2,
            "engram_compressed_vocab_size": 0, "gate_temp": 1.0}
ROPE_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Role:
    ratio: int            # tokens per pool entry; 0: sliding window only
    mode: str             # swa, full, reuse, reindex, dspark
    kv_source: int        # layer whose pool it reads (-1: none)
    index_source: int     # layer whose top-k it uses (-1: none)
    candidate_source: bool
    uses_candidates: bool
    engram: bool          # Engram applied to X before this block
    yarn: bool            # YaRN table over compress_rope_theta (ratio > 0), else plain over rope_theta


def _need(block, key, where):
    if key not in block or block[key] is None:
        raise ConfigError(f"config {where}: expected key {key!r}, not found")
    return block[key]


def load(path):
    with open(path, encoding="utf-8") as f:
        return from_dict(json.load(f))


def from_dict(d):
    """(text config dict with defaults filled in, roles [num_hidden_layers + stages])."""
    nested = "text_config" in d
    t = dict(d["text_config"] if nested else d)
    where = "text_config" if nested else "(flat)"
    for k in REQUIRED:
        _need(t, k, where)
    for k, v in OPTIONAL.items():
        t.setdefault(k, v)
    rs = dict(t["rope_scaling"])
    for k in ("factor", "original_max_position_embeddings"):
        _need(rs, k, where + ".rope_scaling")
    for k, v in ROPE_DEFAULTS.items():
        rs.setdefault(k, v)
    t["rope_scaling"] = rs
    L, S = int(t["num_hidden_layers"]), int(t["num_nextn_predict_layers"])
    ratios = [int(r) for r in t["compress_ratios"]]
    if len(ratios) != L + S:
        raise ConfigError(f"config {where}: compress_ratios: expected {L + S} entries (num_hidden_layers {L} + "
                          f"num_nextn_predict_layers {S}), found {len(ratios)}")
    for k in ("kv_source_layer_ids", "index_source_layer_ids", "engram_layer_ids"):
        for i in t[k]:
            if not 0 <= int(i) < L:
                raise ConfigError(f"config {where}: {k}: expected layer ids in [0, {L}), found {i}")
    for i in t["kv_source_layer_ids"]:
        if ratios[i] == 0:
            raise ConfigError(f"config {where}: kv_source_layer_ids: layer {i} has compress ratio 0")
    if t["scoring_func"] not in ("sqrtsoftplus", "sigmoid", "softmax"):
        raise ConfigError(f"config {where}: scoring_func: expected sqrtsoftplus, sigmoid or softmax, "
                          f"found {t['scoring_func']!r}")
    if len(t["engram_num_embeddings"]) != len(t["engram_layer_ids"]):
        raise ConfigError(f"config {where}: engram_num_embeddings: expected one per engram layer "
                          f"({len(t['engram_layer_ids'])}), found {len(t['engram_num_embeddings'])}")
    return t, roles(t, ratios, L)


def roles(t, ratios, L):
    kv, idx, cand = list(t["kv_source_layer_ids"]), list(t["index_source_layer_ids"]), int(t["candidate_source_layer_id"])
    out = []
    for l, m in enumerate(ratios):
        if l >= L:
            out.append(Role(m, "dspark", -1, -1, False, False, False, m > 0))
            continue
        if m == 0:
            out.append(Role(0, "swa", -1, -1, False, False, l in t["engram_layer_ids"], False))
            continue
        ks = max((s for s in kv if s <= l), default=-1)
        ix = max((s for s in idx if s <= l), default=-1)
        if ks < 0 or ix < 0:
            raise ConfigError(f"config: layer {l} has compress ratio {m} but no KV source or index source "
                              f"at or before it (kv_source_layer_ids {kv}, index_source_layer_ids {idx})")
        if ratios[ks] != m:
            raise ConfigError(f"config: layer {l} (ratio {m}) reads KV source {ks} of ratio {ratios[ks]}")
        mode = "full" if l in kv else "reindex" if l in idx else "reuse"
        out.append(Role(m, mode, ks, ix, l == cand, mode == "reindex" and 0 <= cand < l,
                        l in t["engram_layer_ids"], True))
    return out
