#include "grammar/token_vocab.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace cedar::grammar {

TokenVocab::TokenVocab(const std::vector<std::string>& token_bytes,
                       const std::vector<std::pair<int32_t, std::string>>& specials)
    : vocab_size_(int32_t(token_bytes.size())), bytes_(token_bytes), specials_(specials) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id)
    if (!bytes_[size_t(id)].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  // Sorted insertion builds the trie in preorder: each string shares its longest common prefix
  // with the previous one, and only the rest becomes new nodes, appended.
  std::vector<int32_t> path;  // path[d] = node at depth d + 1 of the previous string
  std::string prev;
  std::vector<std::vector<int32_t>> ids_at;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      parent_.push_back(d == 0 ? -1 : path[d - 1]);
      path.push_back(int32_t(node_byte_.size()));
      node_byte_.push_back(uint8_t(s[d]));
      node_depth_.push_back(uint16_t(std::min<size_t>(d + 1, std::numeric_limits<uint16_t>::max())));
      ids_at.emplace_back();
    }
    ids_at[size_t(path.back())].push_back(id);
    max_depth_ = std::max(max_depth_, int(s.size()));
    prev = s;
  }
  const int32_t n = int32_t(node_byte_.size());
  subtree_end_.assign(size_t(n), n);
  std::vector<int32_t> open;  // nodes whose subtree is still open, by depth
  for (int32_t i = 0; i < n; ++i) {
    while (!open.empty() && node_depth_[size_t(open.back())] >= node_depth_[size_t(i)]) {
      subtree_end_[size_t(open.back())] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  token_begin_.reserve(size_t(n) + 1);
  for (int32_t i = 0; i < n; ++i) {
    token_begin_.push_back(int32_t(token_ids_.size()));
    token_ids_.insert(token_ids_.end(), ids_at[size_t(i)].begin(), ids_at[size_t(i)].end());
  }
  token_begin_.push_back(int32_t(token_ids_.size()));
}

int32_t TokenVocab::SpecialId(std::string_view name) const {
  for (const auto& [id, n] : specials_)
    if (n == name) return id;
  return -1;
}

int64_t TokenMask::Count() const {
  int64_t c = 0;
  for (uint64_t w : words) c += std::popcount(w);
  return c;
}

}  // namespace cedar::grammar
