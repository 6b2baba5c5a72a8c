// The CUDA backend behind engine/backend.h: a DeviceModel (weights uploaded once) and
// DeviceState sequences, run by engine/cuda/device_engine.h.
#include "engine/backend.h"
#include "engine/cuda/device_engine.h"

namespace cedar::gpu {

namespace {

using CudaSequence = StateSequence<DeviceState>;

DeviceState& Dev(Sequence& s) { return static_cast<CudaSequence&>(s).st; }

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& m, bool f32) : dm_(DeviceModel::Create(m, f32 ? DType::kF32 : DType::kBF16)) {
    cu::DeviceInfo info;
    if (cu::GetDeviceInfo(0, &info).ok()) device_ = info.name;
  }
  const char* name() const override { return "cuda"; }
  std::string Describe() const override {
    return "cuda " + device_ + " (" + cu::Name(dm_->weight_type()) + " weights, " +
           std::to_string(dm_->weight_bytes() >> 20) + " MiB)";
  }
  const Model& model() const override { return dm_->host(); }
  std::unique_ptr<Sequence> NewSequence() const override { return std::make_unique<CudaSequence>(DeviceState(dm_->config())); }
  PrefillResult Prefill(Sequence& s, std::span<const int32_t> t, const PrefillOptions& o) const override {
    return gpu::Prefill(*dm_, Dev(s), t, o);
  }
  std::vector<float> DecodeStep(Sequence& s, int32_t token, StepStats* stats) const override {
    return gpu::DecodeStep(*dm_, Dev(s), token, stats);
  }
  std::vector<std::vector<float>> DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                                              std::vector<StepStats>* stats) const override {
    std::vector<DeviceState*> states;
    for (Sequence* s : seqs) states.push_back(&Dev(*s));
    return gpu::DecodeBatch(*dm_, states, tokens, stats);
  }
  StepStats EncoderReplay(Sequence& s) const override { return gpu::EncoderReplay(*dm_, Dev(s)); }
  StepStats ExactEncoderRestore(Sequence& s) const override { return gpu::ExactEncoderRestore(*dm_, Dev(s)); }
  void RebuildLayerEWindow(Sequence& s) const override { gpu::RebuildLayerEWindow(*dm_, Dev(s)); }
  SequenceState Download(const Sequence& s) const override {
    return gpu::Download(static_cast<const CudaSequence&>(s).st, dm_->config());
  }
  std::unique_ptr<Sequence> Upload(const SequenceState& st) const override {
    return std::make_unique<CudaSequence>(gpu::Upload(st, dm_->config()));
  }

 private:
  std::unique_ptr<DeviceModel> dm_;
  std::string device_ = "?";
};

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(const Model& m, bool f32_weights) {
  if (const std::string why = CudaRefusal(m.config()); !why.empty()) throw std::runtime_error(why);
  return std::make_unique<CudaBackend>(m, f32_weights);
}

bool CudaDevicePresent(std::string* why) {
  int count = 0;
  const cu::Status st = cu::DeviceCount(&count);
  if (st.ok() && count > 0) return true;
  if (why) *why = "no CUDA device (cudaGetDeviceCount: " + st.ToString() + ", " + std::to_string(count) + " devices)";
  return false;
}

}  // namespace cedar::gpu
