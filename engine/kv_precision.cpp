#include "engine/kv_precision.h"

namespace cedar {

namespace k = kernels;

bool ReleasedKv(const ModelConfig& c) { return c.kv_dtype == "released"; }

size_t WindowRowBytes(const ModelConfig& c) {
  return ReleasedKv(c) ? k::KvRowBytes(kWindowRowFormat, c.head_dim) : size_t(c.head_dim) * sizeof(float);
}
size_t PoolEntryBytes(const ModelConfig& c) {
  return ReleasedKv(c) ? k::KvRowBytes(kPoolEntryFormat, c.head_dim) : size_t(c.head_dim) * sizeof(float);
}
size_t IndexKeyBytes(const ModelConfig& c) {
  return ReleasedKv(c) ? k::KvRowBytes(kIndexKeyFormat, c.index_head_dim) : size_t(c.index_head_dim) * sizeof(float);
}

void RoundWindowEntries(const ModelConfig& c, float* e, int64_t rows) {
  if (ReleasedKv(c) && rows > 0) k::QdqKvRows(kWindowRowFormat, e, rows, c.head_dim);
}
void RoundPoolEntries(const ModelConfig& c, float* e, int64_t rows) {
  if (ReleasedKv(c) && rows > 0) k::QdqKvRows(kPoolEntryFormat, e, rows, c.head_dim);
}
void RoundIndexKeys(const ModelConfig& c, float* key, int64_t rows) {
  if (ReleasedKv(c) && rows > 0) k::QdqKvRows(kIndexKeyFormat, key, rows, c.index_head_dim);
}
void RoundIndexQueries(const ModelConfig& c, float* q, int64_t rows) {
  // Each head's vector is quantised on its own (blocks never straddle heads: h % 32 == 0).
  if (ReleasedKv(c) && rows > 0) k::QdqKvRows(kIndexQueryFormat, q, rows * c.index_heads, c.index_head_dim);
}

}  // namespace cedar
