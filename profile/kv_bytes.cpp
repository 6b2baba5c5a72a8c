#include "profile/kv_bytes.h"

namespace cedar::profile {

namespace {
// Scale bytes: one per `group` values, a partial group included.
double Scales(int width, int group) { return double((width + group - 1) / group); }
}  // namespace

const char* KvDtypeName(KvDtype d) {
  switch (d) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kFp8: return "fp8";
    case KvDtype::kReleased: return "released";
  }
  return "?";
}

bool ParseKvDtype(const std::string& s, KvDtype* out) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kFp8, KvDtype::kReleased}) {
    if (s == KvDtypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

double MainEntryBytes(KvDtype d, int w) {
  switch (d) {
    case KvDtype::kF32: return 4.0 * w;
    case KvDtype::kBf16: return 2.0 * w;
    case KvDtype::kFp8: return w + Scales(w, 32);
    case KvDtype::kReleased: return w / 2.0 + Scales(w, 16);  // FP4 E2M1 + E4M3 per 16
  }
  return 0;
}

double IndexKeyBytes(KvDtype d, int w) {
  if (d == KvDtype::kReleased) return w / 2.0 + Scales(w, 32);  // MXFP4
  return MainEntryBytes(d, w);
}

double WindowRowBytes(KvDtype d, int w) {
  if (d == KvDtype::kReleased) return w + Scales(w, 32);  // FP8 + UE8M0 per 32
  return MainEntryBytes(d, w);
}

double ActivationRowBytes(KvDtype d, int w) {
  if (d == KvDtype::kReleased) return 2.0 * w;  // BF16
  return MainEntryBytes(d, w);
}

double CedarBytesPerToken(const ModelConfig& c, KvDtype d) {
  double b = 0;
  for (int s : c.kv_source_layers) {
    b += (MainEntryBytes(d, c.head_dim) + IndexKeyBytes(d, c.index_head_dim)) / c.RatioOf(s);
  }
  return b;
}

double DecoderOnlyBytesPerToken(const ModelConfig& c, KvDtype d) { return c.n_layers * MainEntryBytes(d, c.head_dim); }

double SnapshotRowBytes(const ModelConfig& c, KvDtype d) {
  return c.n_encoder_layers * WindowRowBytes(d, c.head_dim) + ActivationRowBytes(d, c.dim);
}

}  // namespace cedar::profile
