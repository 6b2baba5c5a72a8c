"""CED model configuration (spec §2): load, derived helpers, validation."""
import json
from dataclasses import dataclass, field, asdict
from typing import List

FIELDS = [
    "vocab_size", "dim", "n_layers", "n_encoder_layers", "n_heads", "head_dim", "rope_dim",
    "q_lora_rank", "o_groups", "o_group_rank", "window", "compress_ratios", "kv_source_layers",
    "index_source_layers", "index_heads", "index_head_dim", "index_topk",
    "candidate_source_layer", "candidate_blocks", "candidate_block_size",
    "n_routed_experts", "n_shared_experts", "experts_per_token", "moe_inter_dim",
    "route_scale", "swiglu_limit", "rope_theta", "compress_rope_theta", "norm_eps",
]
# fields that may be absent (0 = off)
OPTIONAL = {"candidate_source_layer": 0, "candidate_blocks": 0, "candidate_block_size": 0}

# The released DeepSeek-V4.1 switches (issue 21), with the JSON keys of the engine's ModelConfig
# (engine/config.h). The defaults are our own family: with them the reference computes exactly what
# it computed before these switches existed. Written to config.json only when not the default.
RELEASED = {
    "weight_layout": "cedar",       # "cedar" (our names, one model.safetensors) | "deepseek_v41" (released files)
    "hc_mult": 1,                   # mHC residual streams per token; 1 = one plain residual stream
    "hc_sinkhorn_iters": 20,        # Sinkhorn rounds of the comb matrix (hc_mult > 1)
    "hc_eps": 1e-6,                 # mHC epsilon: added to pre and inside Sinkhorn (hc_mult > 1)
    "rope_factor": 1.0,             # YaRN factor on compressed layers; 1 = plain RoPE
    "rope_original_seq_len": 0,     # YaRN original_max_position_embeddings (rope_factor > 1)
    "rope_beta_fast": 32.0,         # YaRN beta_fast
    "rope_beta_slow": 1.0,          # YaRN beta_slow
    "score_func": "sqrtsoftplus",   # router score: sqrtsoftplus | sigmoid | softmax
    "norm_topk_prob": True,         # routed weights divided by the sum of the chosen scores
    "kv_dtype": "f32",              # stored KV: "f32" | "released" (FP8 window, FP4 main, MXFP4 index K/Q)
    "engram_layers": [],            # Engram before these layers (all < E); empty = none
    "engram_table_rows": [],        # per Engram layer: rows of its hashed table (= sum of its primes)
    "engram_max_ngram": 0,          # n-gram orders 2..this
    "engram_n_heads": 0,            # hash heads per order
    "engram_head_dim": 0,           # width of one table row
    "engram_vocab_size": 0,         # the bucket primes are drawn above this - 1
    "engram_compressed_vocab": 0,   # classes of the token table (= vocab_size: identity, no tokenizer)
    "engram_pad_id": 0,             # token whose class pads the look-back before position 0
    "n_mtp_layers": 0,              # DSpark draft blocks (ignored: they never change the logits)
}


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    vocab_size: int
    dim: int
    n_layers: int
    n_encoder_layers: int
    n_heads: int
    head_dim: int
    rope_dim: int
    q_lora_rank: int
    o_groups: int
    o_group_rank: int
    window: int
    compress_ratios: List[int]
    kv_source_layers: List[int]
    index_source_layers: List[int]
    index_heads: int
    index_head_dim: int
    index_topk: int
    candidate_source_layer: int
    candidate_blocks: int
    candidate_block_size: int
    n_routed_experts: int
    n_shared_experts: int
    experts_per_token: int
    moe_inter_dim: int
    route_scale: float
    swiglu_limit: float
    rope_theta: float
    compress_rope_theta: float
    norm_eps: float
    released: dict = field(default_factory=lambda: dict(RELEASED))  # the switches above, by key
    extra: dict = field(default_factory=dict)  # unknown fields (e.g. max_seq_len), kept for writing

    # ---- loading / writing ----
    @staticmethod
    def from_dict(d, validate=True):
        d = dict(d)
        kw = {}
        for f in FIELDS:
            if f in d:
                kw[f] = d.pop(f)
            elif f in OPTIONAL:
                kw[f] = OPTIONAL[f]
            else:
                raise ConfigError(f"config: missing field '{f}'")
            if kw[f] is None and f in OPTIONAL:
                kw[f] = OPTIONAL[f]
        for f in ("compress_ratios", "kv_source_layers", "index_source_layers"):
            kw[f] = [int(x) for x in kw[f]]
        for f in ("route_scale", "swiglu_limit", "rope_theta", "compress_rope_theta", "norm_eps"):
            kw[f] = float(kw[f])
        rel = dict(RELEASED)
        for k in RELEASED:
            if k in d:
                rel[k] = d.pop(k)
        for k in ("hc_mult", "hc_sinkhorn_iters", "rope_original_seq_len", "engram_max_ngram", "engram_n_heads",
                  "engram_head_dim", "engram_vocab_size", "engram_compressed_vocab", "engram_pad_id", "n_mtp_layers"):
            rel[k] = int(rel[k])
        for k in ("hc_eps", "rope_factor", "rope_beta_fast", "rope_beta_slow"):
            rel[k] = float(rel[k])
        rel["norm_topk_prob"] = bool(rel["norm_topk_prob"])
        cfg = Config(**kw, released=rel, extra=d)
        if validate:
            cfg.validate()
        return cfg

    @staticmethod
    def load(path, validate=True):
        with open(path) as f:
            return Config.from_dict(json.load(f), validate)

    def to_dict(self):
        d = {f: getattr(self, f) for f in FIELDS}
        d.update({k: v for k, v in self.released.items() if v != RELEASED[k]})
        d.update(self.extra)
        return d

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    # ---- the released switches ----
    @property
    def hc(self):
        return self.released["hc_mult"]

    @property
    def kv_released(self):
        return self.released["kv_dtype"] == "released"

    def yarn(self, l):
        """YaRN applies on compressed layers (ratio > 0) when rope_factor > 1 (notes §1.1, contract §7.2)."""
        return self.compress_ratios[l] > 0 and self.released["rope_factor"] > 1

    def residual_width(self):
        """Floats per row of H_E / a replay input: d, or X [hc, d] then the pre-mix a [hc]."""
        return self.dim if self.hc == 1 else self.hc * self.dim + self.hc

    # ---- derived ----
    @property
    def L(self):
        return self.n_layers

    @property
    def E(self):
        return self.n_encoder_layers

    @property
    def W(self):
        return self.window

    def ratio(self, l):
        return self.compress_ratios[l]

    def is_kv_source(self, l):
        return l in self.kv_source_layers

    def is_index_source(self, l):
        return l in self.index_source_layers

    def kv_source_of(self, l):
        """The pool a layer reads: the latest kv source <= l (None for ratio-0 layers; reading 3)."""
        if self.compress_ratios[l] == 0:
            return None
        src = [s for s in self.kv_source_layers if s <= l]
        return src[-1] if src else None

    def index_source_of(self, l):
        """The layer whose top-k this layer uses: the latest index source <= l (None for ratio 0)."""
        if self.compress_ratios[l] == 0:
            return None
        src = [s for s in self.index_source_layers if s <= l]
        return src[-1] if src else None

    def is_reindex(self, l):
        """Re-index layer: an index source after E (scores the decoder pool)."""
        return self.is_index_source(l) and l > self.E

    def uses_candidates(self, l):
        """Reading 1: re-index layers after the candidate source score only candidate blocks."""
        cs = self.candidate_source_layer
        return cs > 0 and self.is_reindex(l) and l > cs

    def rope_base(self, l):
        """Reading 4: ratio-0 layers use rope_theta, compressed layers compress_rope_theta."""
        return self.rope_theta if self.compress_ratios[l] == 0 else self.compress_rope_theta

    def staircase(self):
        return self.W + (self.L - self.E - 1) * (self.W - 1)

    def exact_rows(self, l, n):
        """Rows (count, the last ones) that pass decoder layer l in `exact` mode (reading 6)."""
        return min(n, self.W + (self.L - 1 - l) * (self.W - 1))

    # ---- validation (spec §2) ----
    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ConfigError("config: " + msg)
        L, E = self.n_layers, self.n_encoder_layers
        R = self.compress_ratios
        need(L >= 1, "n_layers must be >= 1")
        need(0 <= E < L, f"n_encoder_layers ({E}) must be in [0, n_layers)")
        need(len(R) == L, f"compress_ratios has {len(R)} entries, n_layers is {L}")
        need(all(r in (0, 1, 2) for r in R), "compress_ratios must be 0, 1 or 2")
        for name in ("kv_source_layers", "index_source_layers"):
            v = getattr(self, name)
            need(v == sorted(set(v)), f"{name} must be strictly increasing")
            need(all(0 <= x < L for x in v), f"{name} out of range")
        kv, ix = self.kv_source_layers, self.index_source_layers
        need(R[E] == 1 and E in kv, f"layer E={E} must have ratio 1 and be a kv source")
        need(all(s <= E for s in kv), "no kv source may come after layer E")
        for l in range(L):
            if R[l] > 0:
                src = [s for s in kv if s <= l]
                need(src and R[src[-1]] == R[l],
                     f"layer {l} (ratio {R[l]}) needs a kv source <= it of the same ratio")
        first = kv[0]
        need(all(R[l] == 0 for l in range(first)), "layers before the first kv source must have ratio 0")
        need(all(s in ix for s in kv), "every kv source must be an index source")
        need(all(R[s] > 0 for s in ix), "index sources must have ratio > 0")
        cs = self.candidate_source_layer
        if cs:
            need(cs in ix, "candidate_source_layer must be an index source")
            need(all(s <= cs for s in kv), "no kv source may come after candidate_source_layer")
            need(self.candidate_blocks >= 1 and self.candidate_block_size >= 1,
                 "candidate_blocks and candidate_block_size must be >= 1")
            need((self.candidate_blocks - 1) * self.candidate_block_size >= self.index_topk,
                 "(candidate_blocks - 1) * candidate_block_size must be >= index_topk")
        need(self.o_groups >= 1 and self.n_heads % self.o_groups == 0, "n_heads must be divisible by o_groups")
        need(self.rope_dim % 2 == 0, "rope_dim must be even")
        need(self.rope_dim < self.head_dim, "rope_dim must be < head_dim")
        need(self.rope_dim <= self.index_head_dim, "rope_dim must be <= index_head_dim")
        need(self.n_shared_experts in (0, 1), "n_shared_experts must be 0 or 1")
        need(self.window >= 1, "window must be >= 1")
        need(self.index_topk >= 1, "index_topk must be >= 1")
        self._validate_released(need)
        if self.n_routed_experts > 0:
            need(1 <= self.experts_per_token <= self.n_routed_experts,
                 "experts_per_token must be in [1, n_routed_experts]")
        return self

    def _validate_released(self, need):
        r = self.released
        need(r["weight_layout"] in ("cedar", "deepseek_v41"),
             f"weight_layout: expected \"cedar\" or \"deepseek_v41\", found {r['weight_layout']!r}")
        need(r["hc_mult"] >= 1, f"hc_mult: expected >= 1, found {r['hc_mult']}")
        if r["hc_mult"] > 1:
            need(r["hc_sinkhorn_iters"] >= 1, f"hc_sinkhorn_iters: expected >= 1, found {r['hc_sinkhorn_iters']}")
            need(r["hc_eps"] >= 0, f"hc_eps: expected >= 0, found {r['hc_eps']}")
        need(r["rope_factor"] >= 1, f"rope_factor: expected >= 1 (1 = plain RoPE), found {r['rope_factor']}")
        if r["rope_factor"] > 1:
            need(r["rope_original_seq_len"] > 0,
                 f"rope_original_seq_len: expected > 0 when rope_factor > 1, found {r['rope_original_seq_len']}")
        need(r["score_func"] in ("sqrtsoftplus", "sigmoid", "softmax"),
             f"score_func: expected sqrtsoftplus, sigmoid or softmax, found {r['score_func']!r}")
        need(r["kv_dtype"] in ("f32", "released"), f"kv_dtype: expected \"f32\" or \"released\", found {r['kv_dtype']!r}")
        if r["kv_dtype"] == "released":
            # FP8 / MXFP4 blocks of 32 along the entry, FP4 blocks of 16
            need(self.head_dim % 32 == 0, f"head_dim: expected a multiple of 32 with kv_dtype released, found {self.head_dim}")
            need(self.index_head_dim % 32 == 0,
                 f"index_head_dim: expected a multiple of 32 with kv_dtype released, found {self.index_head_dim}")
        need(len(r["engram_layers"]) == len(r["engram_table_rows"]),
             f"engram_table_rows: expected {len(r['engram_layers'])} entries, found {len(r['engram_table_rows'])}")
        need(all(0 <= l < self.n_encoder_layers for l in r["engram_layers"]),
             f"engram_layers: expected layers before E={self.n_encoder_layers}, found {r['engram_layers']}")
        if r["engram_layers"]:
            need(r["engram_max_ngram"] >= 2 and r["engram_n_heads"] >= 1 and r["engram_head_dim"] >= 1,
                 f"engram_max_ngram/engram_n_heads/engram_head_dim: expected >= 2 / >= 1 / >= 1, found "
                 f"{r['engram_max_ngram']}/{r['engram_n_heads']}/{r['engram_head_dim']}")
            need(0 <= r["engram_pad_id"] < self.vocab_size,
                 f"engram_pad_id: expected a token id below {self.vocab_size}, found {r['engram_pad_id']}")
        need(r["n_mtp_layers"] >= 0, f"n_mtp_layers: expected >= 0, found {r['n_mtp_layers']}")
