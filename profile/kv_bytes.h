// Bytes of cached state per token and per snapshot row at a chosen KV precision, for the
// simulated payloads of `cedar profile` (--kv-dtype, --baseline-kv-dtype). engine/info.h counts
// F32 (what this engine stores); a deployment stores less, and the budgets a report gives are
// only meaningful at the deployed precision. Released V4.1 layouts
// (../shared/spec/v41-released-notes.md §1.3):
//   main KV entry (width c)    FP4 E2M1 + one E4M3 scale per 16:  c/2 + c/16 B (512 -> 288 B)
//   index key (width i)        MXFP4, one UE8M0 scale per 32:      i/2 + i/32 B (128 -> 68 B)
//   SWA window row (width c)   FP8 E4M3 + one UE8M0 scale per 32:  c + c/32 B   (512 -> 528 B)
//   H_E row (width d)          BF16 (an activation, not KV):       2d B
// so the Flash preset caches 3·½·(288 + 68) + (288 + 68) = 890 B per token of global KV.
// `fp8` stores every entry as FP8 with UE8M0 scales per 32, `bf16` and `f32` plainly.
#pragma once

#include <string>

#include "engine/config.h"

namespace cedar::profile {

enum class KvDtype { kF32, kBf16, kFp8, kReleased };
const char* KvDtypeName(KvDtype d);                   // "f32", "bf16", "fp8", "released"
bool ParseKvDtype(const std::string& s, KvDtype* out);

// Which precision each cache design stores.
struct KvPrecision {
  KvDtype cedar = KvDtype::kF32;         // the CED model's pools and snapshot windows
  KvDtype decoder_only = KvDtype::kF32;  // the decoder-only baseline's K=V per layer
};

// Bytes of one stored row of each kind at dtype `d`.
double MainEntryBytes(KvDtype d, int width);
double IndexKeyBytes(KvDtype d, int width);
double WindowRowBytes(KvDtype d, int width);
double ActivationRowBytes(KvDtype d, int width);

// Cedar's pools: sum over pools of (main entry + index key) / compression ratio.
double CedarBytesPerToken(const ModelConfig& c, KvDtype d);
// A decoder-only model of the same shape caching K=V (width head_dim) in all L layers; a
// deployment would keep it as one main entry per layer, so released = FP4 entries.
double DecoderOnlyBytesPerToken(const ModelConfig& c, KvDtype d);
// One row of a boundary snapshot: E encoder window rows (width head_dim) + one H_E row (dim).
double SnapshotRowBytes(const ModelConfig& c, KvDtype d);

}  // namespace cedar::profile
