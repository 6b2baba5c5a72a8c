// Matmul weights at the precision chosen at load (`--weights`, issue 20): BF16 files kept as
// BF16, F32 rounded to BF16 or quantised to INT8 (block 32 along the input, bfloat16 scales), or
// converted to the released checkpoint's FP8 / FP4 / BF16 (fp8-fp4).
#include <cstdint>
#include <cstring>
#include <vector>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "engine/model.h"
#include "engine/int8_file.h"
#include "engine/v41_held.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_quantize.h"
#include "kernels/weight_view.h"

namespace cedar {

const char* WeightPrecisionName(WeightPrecision p) {
  switch (p) {
    case WeightPrecision::kF32: return "f32";
    case WeightPrecision::kBF16: return "bf16";
    case WeightPrecision::kI8: return "int8";
    case WeightPrecision::kAsStored: return "as-stored";
    case WeightPrecision::kFp8Fp4: return "fp8-fp4";
  }
  return "?";
}

WeightPrecision ParseWeightPrecision(const std::string& s) {
  for (WeightPrecision p : {WeightPrecision::kF32, WeightPrecision::kBF16, WeightPrecision::kI8, WeightPrecision::kAsStored,
                            WeightPrecision::kFp8Fp4})
    if (s == WeightPrecisionName(p)) return p;
  throw std::invalid_argument("--weights: expected f32, bf16, int8, as-stored or fp8-fp4, found '" + s + "'");
}

bool IsMatmulTensor(const std::string& name) {
  static const char* const kSuffixes[] = {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
                                          "attn.wo_b.weight", "compressor.wkv.weight", "compressor.wz.weight",
                                          "compressor.wgate.weight", "indexer.wk.weight", "indexer.wq_b.weight",
                                          "indexer.weights_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight",
                                          "engram.wkv.weight"};
  if (name == "head.weight") return true;
  for (const char* s : kSuffixes) {
    const size_t n = std::strlen(s);
    if (name.size() >= n && name.compare(name.size() - n, n, s) == 0) return true;
  }
  return false;
}

void* Model::AllocateBytes(size_t bytes) {
  const size_t floats = (bytes + 3) / 4;
  if (arena_) return arena_->Allocate(floats);
  owned_.push_back(std::make_unique<std::vector<float>>(floats));
  return owned_.back()->data();
}

namespace {

// The [rows, cols] a matmul weight of `shape` is held as: the first dim by the rest, except
// wo_a [groups, rows per group, cols], whose groups stack along the rows.
Weight MatmulShape(const std::vector<int64_t>& shape) {
  Weight w;
  w.rows = shape[0];
  w.cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) w.cols *= shape[i];
  if (shape.size() == 3) {
    w.rows = shape[0] * shape[1];
    w.cols = shape[2];
  }
  return w;
}

}  // namespace

kernels::WeightType ReleasedTypeOf(const std::string& name, int64_t cols) {
  if (name == "head.weight") return kernels::WeightType::kBF16;
  if (name.find("ffn.experts.") != std::string::npos && cols % kernels::kQuantBlock == 0) return kernels::WeightType::kFP4;
  return kernels::WeightType::kFP8;
}

// fp8-fp4: w's values f ([rows, cols] F32) converted to ReleasedTypeOf(name) in the arena.
void Model::HoldReleased(const std::string& name, std::span<const float> f, Weight& w) {
  w.type = ReleasedTypeOf(name, w.cols);
  HoldConverted(f, &w, [this](size_t bytes) { return AllocateBytes(bytes); });
}

void Model::CountMatmul(const std::string& name, int64_t rows, int64_t cols, kernels::WeightType held) {
  const double params = double(rows) * double(cols), bytes = double(rows) * kernels::WeightRowBytes(held, cols);
  matmul_params_ += params;
  matmul_bytes_ += bytes;
  if (name.find("ffn.experts.") != std::string::npos) {  // routed (the shared expert is ffn.shared_experts.)
    routed_params_ += params;
    routed_bytes_ += bytes;
  }
}

Weight Model::TakeMatmul(const std::string& name, std::vector<int64_t> shape, WeightPrecision p) {
  namespace k = kernels;
  const TensorInfo* t = file_->Find(name);
  const bool bf16_file = t && t->dtype == DType::BF16;
  // An INT8 file's matmul weight (`cedar init --dtype int8`, engine/int8_file.h): `name` I8 [shape] +
  // its `.scale` BF16 [shape with the last dim ceil(in / 32)] (F32 in files written before session
  // 37: rounded to the nearest bfloat16 here, at most 2^-9 of each scale). Held as INT8 (int8,
  // as-stored: the file's bytes as they are, no F32 round trip), or decoded to F32 (q * scale, f32)
  // and rounded to BF16 (bf16).
  if (t && t->dtype == DType::I8) {
    if (t->shape != shape) return Take(name, shape);  // Take names the expected and found shapes
    Weight w = MatmulShape(shape);
    const int64_t n = w.rows * w.cols, nb = (w.cols + k::kQuantBlock - 1) / k::kQuantBlock;
    const std::string sname = Int8ScaleName(name);
    const TensorInfo* s = file_->Find(sname);
    std::vector<int64_t> sshape = shape;
    sshape.back() = (shape.back() + k::kQuantBlock - 1) / k::kQuantBlock;
    if (!s)
      throw std::runtime_error("model: " + file_->Path() + ": tensor '" + name + "' is I8 (INT8 weights), but its block scales '" + sname +
                               "' (BF16) are missing");
    if ((s->dtype != DType::BF16 && s->dtype != DType::F32) || s->shape != sshape) {
      std::string want = "[", found = "[";
      for (size_t i = 0; i < sshape.size(); ++i) want += (i ? ", " : "") + std::to_string(sshape[i]);
      for (size_t i = 0; i < s->shape.size(); ++i) found += (i ? ", " : "") + std::to_string(s->shape[i]);
      throw std::runtime_error("model: " + file_->Path() + ": tensor '" + sname + "': expected BF16 or F32 " + want + "] (one scale per 32 inputs of '" +
                               name + "'), found " + DTypeName(s->dtype) + " " + found + "]");
    }
    // The symmetric format holds -127..127 (QuantizeI8 writes no -128). The 8-bit- and BF16-activation
    // kernels negate a weight or take its magnitude, which -128 does not survive: refuse the file.
    if (const void* bad = std::memchr(t->data, 0x80, size_t(n))) {
      const int64_t at = static_cast<const uint8_t*>(bad) - static_cast<const uint8_t*>(t->data);
      throw std::runtime_error("model: " + file_->Path() + ": tensor '" + name + "': INT8 weights are symmetric, -127..127; found -128 at row " +
                               std::to_string(at / w.cols) + ", column " + std::to_string(at % w.cols));
    }
    // Copied out of the mapping (the arena is sized for F32 tensors, so at f32 / bf16 the scales are
    // a transient copy and only the decoded weights take arena room).
    std::vector<uint16_t> scales(size_t(w.rows * nb));  // bfloat16 bits
    if (s->dtype == DType::BF16) {
      std::memcpy(scales.data(), s->data, s->nbytes);
    } else {
      for (size_t i = 0; i < scales.size(); ++i) {
        float f;  // the mapping need not be 4-byte aligned
        std::memcpy(&f, s->data + 4 * i, 4);
        scales[i] = k::FloatToBf16(f);
      }
      spdlog::debug("{}: F32 INT8 scales rounded to bfloat16", sname);
    }
    k::WeightView v;
    v.type = k::WeightType::kI8;
    v.data = t->data;
    v.scales = scales.data();
    v.rows = w.rows;
    v.cols = w.cols;
    if (p == WeightPrecision::kI8 || p == WeightPrecision::kAsStored) {
      auto* q = static_cast<int8_t*>(AllocateBytes(size_t(n)));
      auto* sc = static_cast<uint16_t*>(AllocateBytes(scales.size() * sizeof(uint16_t)));
      k::ParallelCopy(q, t->data, size_t(n));
      std::memcpy(sc, scales.data(), scales.size() * sizeof(uint16_t));
      w.type = k::WeightType::kI8;
      w.stored = q;
      w.scales = sc;
    } else if (p == WeightPrecision::kF32) {
      auto* f = static_cast<float*>(AllocateBytes(size_t(n) * sizeof(float)));
      k::DecodeRows(v, 0, w.rows, f);
      w.data = f;
    } else if (p == WeightPrecision::kFp8Fp4) {
      std::vector<float> f(static_cast<size_t>(n));
      k::DecodeRows(v, 0, w.rows, f.data());
      HoldReleased(name, f, w);
    } else {  // BF16 of the decoded values
      std::vector<float> f(size_t(w.cols));
      auto* b = static_cast<uint16_t*>(AllocateBytes(size_t(n) * 2));
      for (int64_t r = 0; r < w.rows; ++r) {
        k::DecodeRows(v, r, 1, f.data());
        for (int64_t c = 0; c < w.cols; ++c) b[r * w.cols + c] = k::FloatToBf16(f[size_t(c)]);
      }
      w.type = k::WeightType::kBF16;
      w.stored = b;
    }
    CountMatmul(name, w.rows, w.cols, w.type);
    return w;
  }
  const bool keep_f32 = p == WeightPrecision::kF32 || (p == WeightPrecision::kAsStored && !bf16_file);
  if (keep_f32) {
    Weight w = Take(name, shape);  // checks name, shape and dtype; F32 in the arena (or mapped)
    CountMatmul(name, w.rows, w.cols, w.type);
    return w;
  }
  if (!t) throw std::runtime_error("model: " + file_->Path() + ": missing tensor '" + name + "'");
  if (t->shape != shape) return Take(name, shape);  // Take names the expected and found shapes
  if (t->dtype != DType::F32 && t->dtype != DType::BF16) return Take(name, shape);  // and the dtype
  Weight w = MatmulShape(shape);
  std::vector<float> scratch;  // a transient F32 copy of this tensor only, if it is not F32 in the file
  if (p == WeightPrecision::kFp8Fp4) {
    HoldReleased(name, file_->FloatsView(name, scratch), w);  // BF16 files: exact floats, so the head keeps its bits
  } else if (p == WeightPrecision::kI8 || !bf16_file) {  // INT8, or BF16 from F32 rounded to nearest even
    w.type = p == WeightPrecision::kI8 ? k::WeightType::kI8 : k::WeightType::kBF16;
    HoldConverted(file_->FloatsView(name, scratch), &w, [this](size_t bytes) { return AllocateBytes(bytes); });
  } else {  // BF16: a BF16 file's bits as they are
    const size_t bytes = size_t(w.rows * w.cols) * 2;
    void* d = AllocateBytes(bytes);
    k::ParallelCopy(d, t->data, bytes);
    w.type = k::WeightType::kBF16;
    w.stored = d;
  }
  CountMatmul(name, w.rows, w.cols, w.type);
  return w;
}

}  // namespace cedar
