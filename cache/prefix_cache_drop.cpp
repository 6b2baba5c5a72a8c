// PrefixCache::DropPartition: the server's tenant-scoped cache flush (POST /v1/cache/flush).
#include <spdlog/spdlog.h>

#include "cache/prefix_cache.h"
#include "cache/prefix_node.h"

namespace cedar::cache {

size_t PrefixCache::DropPartition(TenantSalt salt) {
  Node* root = RootFor(salt);
  if (root == nullptr) return 0;
  size_t dropped = 0;
  // A pin holds its whole path, so an unpinned node has no pinned descendant: drop it whole;
  // descend into pinned ones to drop their unpinned branches.
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    std::vector<Node*> children;
    for (auto& [key, child] : node->children) children.push_back(child.get());
    for (Node* child : children) {
      if (child->pinned()) {
        stack.push_back(child);
        continue;
      }
      std::vector<Node*> sub{child};
      for (size_t i = 0; i < sub.size(); ++i)
        for (auto& [k, c] : sub[i]->children) sub.push_back(c.get());
      for (Node* n : sub) dropped += n->tokens.size();
      DropSubtree(child);
    }
  }
  spdlog::debug("prefix cache: partition {:016x} flushed, {} tokens dropped", salt, dropped);
  return dropped;
}

}  // namespace cedar::cache
