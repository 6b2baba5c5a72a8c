#include "profile/ideal.h"

#include <xxhash.h>

namespace cedar::profile {

namespace {

// Digests of the prefixes of `tokens` ending at every multiple of `page` up to `limit` tokens:
// out[k] is the digest of the first (k + 1)·page tokens (chained, so equal prefixes, equal digests).
void PrefixChain(std::span<const int32_t> tokens, size_t page, size_t limit, std::vector<uint64_t>* out) {
  out->clear();
  uint64_t h = 0;
  for (size_t end = page; end <= limit; end += page) {
    h = XXH3_64bits_withSeed(tokens.data() + end - page, page * sizeof(int32_t), h);
    out->push_back(h);
  }
}

}  // namespace

IdealDriver::IdealDriver(const SimConfig& config)
    : config_(config), bytes_(ComputeStateBytes(config.model, config.page_tokens, config.block_tokens, config.kv)) {}

void IdealDriver::Submit(const ReplayRequest& r) {
  const size_t n = r.prompt.size();
  const size_t P = config_.page_tokens, B = config_.block_tokens;
  const int64_t W = config_.model.window;
  std::vector<int32_t> full(r.prompt.begin(), r.prompt.end());
  full.insert(full.end(), r.output.begin(), r.output.end());

  // Cedar: an exact repeat first, else the n - 1 rule.
  PrefixChain(full, P, full.size(), &chain_);
  SimTail repeat = SimTail::kNone;
  if (n > 0 && n % P == 0 && pages_.count(chain_[n / P - 1])) {
    auto it = snapshots_.find(chain_[n / P - 1]);
    if (it != snapshots_.end() && it->second.first == int64_t(n)) {
      const SimTail tail = it->second.second;
      const bool usable = tail != SimTail::kNone &&
                          (config_.decoder == SimDecoder::kAuto || int64_t(n) <= W ||
                           (config_.decoder == SimDecoder::kExact) == (tail == SimTail::kExact));
      if (usable) repeat = tail;
    }
  }
  int64_t hit = 0;
  if (repeat != SimTail::kNone) {
    hit = int64_t(n);
  } else {
    const size_t pages = n > 0 ? (n - 1) / P : 0;
    while (size_t(hit) / P < pages && pages_.count(chain_[size_t(hit) / P])) hit += int64_t(P);
  }
  cedar_hits_.push_back(hit);
  // Cache the prompt and output: every page prefix, and the snapshots InsertTurn would cut.
  for (uint64_t h : chain_) pages_.insert(h);
  const SimTail prompt_tail =
      repeat != SimTail::kNone ? repeat
                               : (config_.decoder == SimDecoder::kExact || int64_t(n) <= W ? SimTail::kExact
                                                                                            : SimTail::kBounded);
  const SimTail output_tail = prompt_tail == SimTail::kExact ? SimTail::kExact : SimTail::kNone;
  size_t last = 0;
  for (size_t end : {n, full.size()}) {
    const size_t p = end / P * P;
    if (p == 0 || p == last) continue;
    last = p;
    if (repeat != SimTail::kNone && p == n) continue;  // the cached one it resumed from stays
    SimTail tail = SimTail::kNone;
    if (p == end) tail = end == n ? prompt_tail : output_tail;
    snapshots_[chain_[p / P - 1]] = {int64_t(p), tail};
  }

  // Decoder-only: the whole prompt, in blocks.
  PrefixChain(full, B, full.size(), &chain_);
  int64_t dhit = 0;
  while (size_t(dhit) + B <= n && blocks_.count(chain_[size_t(dhit) / B])) dhit += int64_t(B);
  dec_hits_.push_back(dhit);
  for (uint64_t h : chain_) blocks_.insert(h);
}

uint64_t IdealDriver::cedar_bytes() const {
  uint64_t b = uint64_t(pages_.size()) * bytes_.cedar_page;
  for (const auto& [key, s] : snapshots_) b += bytes_.Snapshot(config_.model, s.first);
  return b;
}

uint64_t IdealDriver::decoder_only_bytes() const { return uint64_t(blocks_.size()) * bytes_.decoder_only_page; }

}  // namespace cedar::profile
