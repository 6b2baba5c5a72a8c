// Field-by-field comparison of two sequence states, shared by the CPU engine tests and the GPU
// parity tests (a device state is compared after Download).
#pragma once
#include <doctest/doctest.h>

#include <cmath>

#include "engine/state.h"
#include "tests/test_models.h"

namespace cedar::test {

// Relative error of two row stores; infinite when their position ranges differ.
inline double StoreError(const RowStore& a, const RowStore& b) {
  if (a.lo() != b.lo() || a.hi() != b.hi()) return INFINITY;
  return RelError(a.raw(), b.raw());
}

// Positions, tokens, every window store's range and rows, every pool (entries, index keys,
// pending half group) and H_E, each within `tol` (relative).
inline void ExpectStatesMatch(const ModelConfig& c, const SequenceState& a, const SequenceState& b, double tol) {
  CHECK(a.pos == b.pos);
  CHECK(a.decoder_pos == b.decoder_pos);
  CHECK(a.tokens == b.tokens);
  for (int l = 0; l < c.n_layers; ++l) {
    INFO("window of layer " << l << " [" << a.windows[size_t(l)].lo() << "," << a.windows[size_t(l)].hi() << ") vs ["
                            << b.windows[size_t(l)].lo() << "," << b.windows[size_t(l)].hi() << ")");
    CHECK(StoreError(a.windows[size_t(l)], b.windows[size_t(l)]) <= tol);
  }
  for (size_t p = 0; p < a.pools.size(); ++p) {
    INFO("pool of layer " << a.pools[p].layer);
    CHECK(a.pools[p].rows_seen == b.pools[p].rows_seen);
    CHECK(a.pools[p].has_pending == b.pools[p].has_pending);
    CHECK(a.pools[p].entries.size() == b.pools[p].entries.size());
    CHECK(RelError(a.pools[p].entries, b.pools[p].entries) <= tol);
    CHECK(RelError(a.pools[p].keys, b.pools[p].keys) <= tol);
    if (a.pools[p].has_pending && b.pools[p].has_pending) {
      CHECK(RelError(a.pools[p].pending_c, b.pools[p].pending_c) <= tol);
      CHECK(RelError(a.pools[p].pending_z, b.pools[p].pending_z) <= tol);
    }
  }
  CHECK(StoreError(a.h_e, b.h_e) <= tol);
}

}  // namespace cedar::test
