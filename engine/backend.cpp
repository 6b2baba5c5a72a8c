// The CPU backend (the engine of engine/engine.h behind the Backend interface) and the
// device choice (backend.h).
#include "engine/backend.h"

#include <spdlog/spdlog.h>

#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "engine/batch_prefill.h"
#include "engine/kv_precision.h"

namespace cedar {

namespace {

using CpuSequence = StateSequence<SequenceState>;

CpuSequence& Cpu(Sequence& s) { return static_cast<CpuSequence&>(s); }  // a backend only sees its own

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Model& m) : m_(m) {}
  const char* name() const override { return "cpu"; }
  std::string Describe() const override { return "cpu (F32)"; }
  const Model& model() const override { return m_; }
  std::unique_ptr<Sequence> NewSequence() const override { return std::make_unique<CpuSequence>(SequenceState(m_.config())); }
  PrefillResult Prefill(Sequence& s, std::span<const int32_t> t, const PrefillOptions& o) const override {
    return cedar::Prefill(m_, Cpu(s).st, t, o);
  }
  std::vector<float> DecodeStep(Sequence& s, int32_t token, StepStats* stats) const override {
    return cedar::DecodeStep(m_, Cpu(s).st, token, stats);
  }
  std::vector<std::vector<float>> DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                                              std::vector<StepStats>* stats) const override {
    std::vector<SequenceState*> states;
    for (Sequence* s : seqs) states.push_back(&Cpu(*s).st);
    return cedar::DecodeBatch(m_, states, tokens, stats);
  }
  bool SupportsChunkedPrefill() const override { return true; }
  StepStats PrefillEncode(Sequence& s, std::span<const int32_t> t) const override {
    return cedar::PrefillEncode(m_, Cpu(s).st, t);
  }
  PrefillResult PrefillFinish(Sequence& s, PrefillMode mode) const override {
    return cedar::PrefillFinish(m_, Cpu(s).st, mode);
  }
  bool SupportsBatchedPrefill() const override { return true; }
  std::vector<StepStats> PrefillEncodeBatch(std::span<Sequence* const> seqs,
                                            std::span<const std::span<const int32_t>> chunks) const override {
    if (chunks.size() != seqs.size()) throw std::invalid_argument("PrefillEncodeBatch: one chunk per sequence");
    std::vector<EncodeChunk> jobs;
    for (size_t i = 0; i < seqs.size(); ++i) jobs.push_back(EncodeChunk{&Cpu(*seqs[i]).st, chunks[i]});
    return cedar::PrefillEncodeBatch(m_, jobs);
  }
  std::vector<StepStats> EncodeDecodeBatch(std::span<Sequence* const> seqs, std::span<const std::span<const int32_t>> chunks,
                                           std::span<Sequence* const> dec, std::span<const int32_t> tokens,
                                           std::vector<std::vector<float>>* logits,
                                           std::vector<StepStats>* dec_stats) const override {
    if (chunks.size() != seqs.size() || tokens.size() != dec.size())
      throw std::invalid_argument("EncodeDecodeBatch: one chunk per sequence and one token per decode row");
    std::vector<EncodeChunk> jobs;
    for (size_t i = 0; i < seqs.size(); ++i) jobs.push_back(EncodeChunk{&Cpu(*seqs[i]).st, chunks[i]});
    std::vector<DecodeRow> rows;
    for (size_t i = 0; i < dec.size(); ++i) rows.push_back(DecodeRow{&Cpu(*dec[i]).st, tokens[i]});
    EncodeDecodeResult r = cedar::EncodeDecodeBatch(m_, jobs, rows);
    *logits = std::move(r.logits);
    if (dec_stats) *dec_stats = std::move(r.decode);
    return std::move(r.encode);
  }
  std::vector<PrefillResult> PrefillFinishBatch(std::span<Sequence* const> seqs,
                                                std::span<const PrefillMode> modes) const override {
    if (modes.size() != seqs.size()) throw std::invalid_argument("PrefillFinishBatch: one mode per sequence");
    std::vector<FinishJob> jobs;
    for (size_t i = 0; i < seqs.size(); ++i) jobs.push_back(FinishJob{&Cpu(*seqs[i]).st, modes[i]});
    return cedar::PrefillFinishBatch(m_, jobs);
  }
  void Reserve(Sequence& s, int64_t tokens) const override { Cpu(s).st.Reserve(m_.config(), tokens); }
  bool SupportsFinishLayers() const override { return true; }
  std::vector<std::optional<PrefillResult>> PrefillFinishLayers(std::span<Sequence* const> seqs, std::span<const PrefillMode> modes,
                                                                std::span<const int> max_layers) const override {
    if (modes.size() != seqs.size() || max_layers.size() != seqs.size())
      throw std::invalid_argument("PrefillFinishLayers: one mode and one layer count per sequence");
    std::vector<FinishJob> jobs;
    for (size_t i = 0; i < seqs.size(); ++i) jobs.push_back(FinishJob{&Cpu(*seqs[i]).st, modes[i], max_layers[i]});
    return cedar::PrefillFinishLayers(m_, jobs);
  }
  StepStats EncoderReplay(Sequence& s) const override { return cedar::EncoderReplay(m_, Cpu(s).st); }
  StepStats ExactEncoderRestore(Sequence& s) const override { return cedar::ExactEncoderRestore(m_, Cpu(s).st); }
  void RebuildLayerEWindow(Sequence& s) const override { cedar::RebuildLayerEWindow(m_, Cpu(s).st); }
  SequenceState Download(const Sequence& s) const override {
    return CopyState(static_cast<const CpuSequence&>(s).st, m_.config());
  }
  std::unique_ptr<Sequence> Upload(const SequenceState& st) const override {
    return std::make_unique<CpuSequence>(CopyState(st, m_.config()));
  }
  std::unique_ptr<Sequence> Adopt(SequenceState&& st) const override { return std::make_unique<CpuSequence>(std::move(st)); }
  const SequenceState* HostState(const Sequence& s) const override { return &static_cast<const CpuSequence&>(s).st; }
  SequenceState* MutableHostState(Sequence& s) const override { return &Cpu(s).st; }

 private:
  const Model& m_;
};

}  // namespace

bool CudaAvailable(std::string* why) {
#ifdef CEDAR_HAVE_CUDA
  return gpu::CudaDevicePresent(why);
#else
  if (why) *why = "this build has no CUDA backend (configure with -DCEDAR_CUDA=ON where nvcc exists)";
  return false;
#endif
}

std::string ResolveDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return device;
  if (device == "auto") return CudaAvailable() ? "cuda" : "cpu";
  throw std::invalid_argument("--device: expected cpu, cuda or auto, found " + device);
}

std::string CudaRefusal(const ModelConfig& c) {
  const ModelConfig def;
  std::string why;
  auto no = [&](const std::string& field, const std::string& found, const std::string& runs) {
    why += (why.empty() ? "" : "; ") + field + " " + found + " (the CUDA engine runs only " + runs + ")";
  };
  if (c.hc_mult != 1) no("hc_mult", std::to_string(c.hc_mult), "hc_mult 1");
  if (c.rope_factor != 1.0f) {
    std::ostringstream f;
    f << c.rope_factor;
    no("rope_factor", f.str(), "plain RoPE, rope_factor 1");
  }
  if (c.score_func != def.score_func) no("score_func", "\"" + c.score_func + "\"", "\"" + def.score_func + "\"");
  if (c.norm_topk_prob != def.norm_topk_prob) no("norm_topk_prob", "false", "true");
  if (c.kv_dtype != def.kv_dtype) no("kv_dtype", "\"" + c.kv_dtype + "\"", "\"" + def.kv_dtype + "\"");
  if (!c.engram_layers.empty()) no("engram_layers", "non-empty", "models without Engram");
  if (c.weight_layout != def.weight_layout) no("weight_layout", "\"" + c.weight_layout + "\"", "\"" + def.weight_layout + "\"");
  return why.empty() ? "" : "the CUDA engine cannot run this model: " + why + "; use --device cpu";
}

DeviceChoice ChooseDevice(const std::string& requested, bool cuda_available, const std::string& cuda_why,
                          const std::string& refusal) {
  if (requested == "cpu") return {"cpu", "", ""};
  if (requested == "cuda") {
    if (!refusal.empty()) return {"", "", "--device cuda: " + refusal};
    if (!cuda_available) return {"", "", "--device cuda: " + cuda_why};
    return {"cuda", "", ""};
  }
  if (requested == "auto") {
    if (!cuda_available) return {"cpu", "", ""};
    if (!refusal.empty()) return {"cpu", "--device auto: running on the CPU because " + refusal, ""};
    return {"cuda", "", ""};
  }
  throw std::invalid_argument("--device: expected cpu, cuda or auto, found " + requested);
}

std::unique_ptr<Backend> MakeBackend(const Model& m, const BackendOptions& opt) {
  std::string why;
  const bool cuda = opt.device != "cpu" && CudaAvailable(&why);
  const DeviceChoice choice = ChooseDevice(opt.device, cuda, why, CudaRefusal(m.config()));
  if (!choice.error.empty()) throw std::runtime_error(choice.error);
  if (!choice.note.empty()) spdlog::info("{}", choice.note);
  spdlog::debug("--device {}: {}", opt.device, choice.device);
  if (choice.device == "cpu") return std::make_unique<CpuBackend>(m);
#ifdef CEDAR_HAVE_CUDA
  return gpu::MakeCudaBackend(m, opt.f32_weights);
#else
  throw std::logic_error("unreachable");
#endif
}

}  // namespace cedar
