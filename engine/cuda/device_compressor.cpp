// The compressed branch of a kv-source layer on the device (spec §3.3), as
// engine/compressor.cpp: new entries and index keys are written straight into the pool.
#include <stdexcept>

#include "engine/cuda/device_forward.h"

namespace cedar::gpu {

void CompressRows(const DeviceModel& m, int l, DevicePool& pool, const float* u, int64_t first, int n) {
  const ModelConfig& c = m.config();
  const DevLayer& w = m.layer(l);
  Workspace& ws = m.ws();
  const cu::Stream s = m.stream();
  const int cd = c.head_dim, ihd = c.index_head_dim, d = c.dim;
  // Rows already consumed are skipped: the compressor sees every position exactly once.
  const int64_t start = std::max(first, pool.rows_seen);
  if (start >= first + n) return;
  if (start > pool.rows_seen) throw std::logic_error("compressor: gap before position " + std::to_string(start));
  const int rows = int(first + n - start);
  const float* us = u + size_t(start - first) * d;
  const int64_t first_entry = pool.Count();
  int n_new = 0;
  float* fresh = nullptr;  // [n_new, c] in the pool
  if (pool.ratio == 1) {
    n_new = rows;
    fresh = pool.entries.AppendRange(first_entry, n_new);
    CEDAR_GPU(cu::Matmul(ws.blas, us, DType::kF32, w.comp_wkv.p, w.comp_wkv.type, fresh, DType::kF32, rows, d, cd, 0.0f, s));
    CEDAR_GPU(cu::CompressSingle(fresh, DType::kF32, w.comp_norm.p, DType::kF32, fresh, DType::kF32, n_new, cd,
                                 c.norm_eps, s));
  } else {
    // C and Z of [the pending first half, if any; the new rows]: [total, c] each.
    if (pool.has_pending != (start % 2 == 1)) throw std::logic_error("compressor: pending half group out of step");
    const int pend = pool.has_pending ? 1 : 0, total = rows + pend;
    float* C = ws.comp_c.Ensure(size_t(total) * cd);
    float* Z = ws.comp_z.Ensure(size_t(total) * cd);
    const float* pc = pool.pending.as<float>();
    if (pend) {
      CEDAR_GPU(cu::CopyOnDeviceAsync(C, pc, size_t(cd) * sizeof(float), s));
      CEDAR_GPU(cu::CopyOnDeviceAsync(Z, pc + cd, size_t(cd) * sizeof(float), s));
    }
    CEDAR_GPU(cu::Matmul(ws.blas, us, DType::kF32, w.comp_wkv.p, w.comp_wkv.type, C + size_t(pend) * cd, DType::kF32,
                         rows, d, cd, 0.0f, s));
    CEDAR_GPU(cu::Matmul(ws.blas, us, DType::kF32, w.comp_wz.p, w.comp_wz.type, Z + size_t(pend) * cd, DType::kF32,
                         rows, d, cd, 0.0f, s));
    n_new = total / 2;
    if (n_new > 0) {
      fresh = pool.entries.AppendRange(first_entry, n_new);
      CEDAR_GPU(cu::CompressPairs(C, Z, DType::kF32, w.comp_norm.p, DType::kF32, fresh, DType::kF32, n_new, cd,
                                  c.norm_eps, s));
    }
    pool.has_pending = total % 2 == 1;
    if (pool.has_pending) {  // the last row opens a group: keep its C and Z
      CEDAR_GPU(cu::CopyOnDeviceAsync(pool.pending.get(), C + size_t(total - 1) * cd, size_t(cd) * sizeof(float), s));
      CEDAR_GPU(cu::CopyOnDeviceAsync(pool.pending.as<float>() + cd, Z + size_t(total - 1) * cd, size_t(cd) * sizeof(float), s));
    }
  }
  pool.rows_seen = first + n;
  if (n_new == 0) return;
  // Index keys from the un-rotated entries, then both rotated at the entries' positions j·m.
  float* keys = pool.keys.AppendRange(first_entry, n_new);  // [n_new, ihd]
  CEDAR_GPU(cu::Matmul(ws.blas, fresh, DType::kF32, w.idx_wk.p, w.idx_wk.type, keys, DType::kF32, n_new, cd, ihd, 0.0f, s));
  CEDAR_GPU(cu::RmsNorm(keys, DType::kF32, w.idx_k_norm.p, DType::kF32, keys, DType::kF32, n_new, ihd, c.norm_eps, s));
  const float base = c.compress_rope_theta;
  CEDAR_GPU(cu::Rope(keys, DType::kF32, n_new, 1, ihd, c.rope_dim, nullptr, first_entry * pool.ratio, pool.ratio, base, 1, s));
  CEDAR_GPU(cu::Rope(fresh, DType::kF32, n_new, 1, cd, c.rope_dim, nullptr, first_entry * pool.ratio, pool.ratio, base, 1, s));
}

}  // namespace cedar::gpu
