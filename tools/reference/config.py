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
        cfg = Config(**kw, extra=d)
        if validate:
            cfg.validate()
        return cfg

    @staticmethod
    def load(path, validate=True):
        with open(path) as f:
            return Config.from_dict(json.load(f), validate)

    def to_dict(self):
        d = {f: getattr(self, f) for f in FIELDS}
        d.update(self.extra)
        return d

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

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
        if self.n_routed_experts > 0:
            need(1 <= self.experts_per_token <= self.n_routed_experts,
                 "experts_per_token must be in [1, n_routed_experts]")
        return self
