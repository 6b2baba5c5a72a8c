// The compressed branch of a kv-source layer (spec §3.3): pool entries and index keys.
#include <cmath>
#include <stdexcept>

#include "engine/kv_precision.h"
#include "engine/layer_parts.h"
#include "engine/rope.h"
#include "kernels/ops.h"

namespace cedar {

namespace k = kernels;

void CompressRows(const Model& m, int l, Pool& pool, const float* u, int64_t first, int n) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  const int cd = c.head_dim, ihd = c.index_head_dim, d = c.dim;
  // Rows already consumed are skipped: the compressor sees every position exactly once.
  const int64_t start = std::max(first, pool.rows_seen);
  if (start >= first + n) return;
  if (start > pool.rows_seen) throw std::logic_error("compressor: gap before position " + std::to_string(start));
  const int rows = int(first + n - start);
  const float* us = u + size_t(start - first) * d;
  std::vector<float> C(size_t(rows) * cd), Z;  // [rows, c]
  k::MatmulW(us, w.comp_wkv.view(), C.data(), rows);
  if (pool.ratio == 2) {
    Z.resize(size_t(rows) * cd);
    k::MatmulW(us, w.comp_wz.view(), Z.data(), rows);
  }
  // New entries, un-rotated and normalised: [n_new, c]
  std::vector<float> fresh;
  const int64_t first_entry = pool.Count(cd);
  for (int r = 0; r < rows; ++r) {
    const int64_t t = start + r;
    const float* Ct = C.data() + size_t(r) * cd;
    if (pool.ratio == 1) {
      fresh.insert(fresh.end(), Ct, Ct + cd);
    } else if (t % 2 == 0) {
      pool.pending_c.assign(Ct, Ct + cd);
      pool.pending_z.assign(Z.data() + size_t(r) * cd, Z.data() + size_t(r + 1) * cd);
      pool.has_pending = true;
      if (pool.log_pending) {
        pool.log_pos.push_back(t);
        pool.log_c.insert(pool.log_c.end(), pool.pending_c.begin(), pool.pending_c.end());
        pool.log_z.insert(pool.log_z.end(), pool.pending_z.begin(), pool.pending_z.end());
      }
    } else {
      if (!pool.has_pending) throw std::logic_error("compressor: second half of a group without its first");
      const float* Zt = Z.data() + size_t(r) * cd;
      size_t off = fresh.size();
      fresh.resize(off + size_t(cd));
      for (int i = 0; i < cd; ++i) {
        const float z0 = pool.pending_z[size_t(i)], z1 = Zt[i];
        const float mz = std::max(z0, z1);
        const float e0 = std::exp(z0 - mz), e1 = std::exp(z1 - mz);
        fresh[off + size_t(i)] = (e0 * pool.pending_c[size_t(i)] + e1 * Ct[i]) / (e0 + e1);
      }
      pool.has_pending = false;
      pool.pending_c.clear();
      pool.pending_z.clear();
    }
  }
  pool.rows_seen = first + n;
  const int n_new = int(fresh.size() / size_t(cd));
  if (n_new == 0) return;
  k::RmsNorm(fresh.data(), w.comp_norm.data, fresh.data(), n_new, cd, c.norm_eps);
  std::vector<float> keys(size_t(n_new) * ihd);  // [n_new, ihd]
  k::MatmulW(fresh.data(), w.idx_wk.view(), keys.data(), n_new);
  k::RmsNorm(keys.data(), w.idx_k_norm.data, keys.data(), n_new, ihd, c.norm_eps);
  std::vector<int64_t> pos(static_cast<size_t>(n_new));
  for (int j = 0; j < n_new; ++j) pos[size_t(j)] = (first_entry + j) * pool.ratio;
  // The kv source's table: compress_rope_theta (YaRN when rope_factor > 1).
  RopeLayer(c, l, keys.data(), n_new, 1, ihd, pos.data(), 1);
  RopeLayer(c, l, fresh.data(), n_new, 1, cd, pos.data(), 1);
  // kv_dtype "released": keys (from the unrounded latent above) MXFP4, entries FP4 + E4M3 scales.
  RoundIndexKeys(c, keys.data(), n_new);
  RoundPoolEntries(c, fresh.data(), n_new);
  pool.entries.insert(pool.entries.end(), fresh.begin(), fresh.end());
  pool.keys.insert(pool.keys.end(), keys.begin(), keys.end());
}

}  // namespace cedar
