// The engine's backend seam: one interface over the CPU engine (engine/engine.h) and the CUDA
// engine (engine/cuda/, built with CEDAR_CUDA), so callers (the CLI, the benchmark, later the
// session layer) choose a device with one flag and run the same calls.
//
// A Sequence is a backend's own per-sequence state (a SequenceState on the CPU, a device
// state on the GPU); Download/Upload turn it into and from a host SequenceState, which is
// what the prefix cache (cache/state_codec.h) stores. Every call has engine/engine.h's
// semantics. A Sequence keeps its tokens and positions on the host on every backend (the
// session layer matches prompts against them without touching the device). Thread contract: calls on one Backend must not overlap (the CUDA backend owns
// one stream and one cuBLAS handle); the Model must outlive the Backend.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace cedar {

class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual int64_t pos() const = 0;
  virtual int64_t decoder_pos() const = 0;                  // SequenceState::decoder_pos
  virtual int64_t exact_until() const = 0;                  // SequenceState::ExactUntil()
  virtual const std::vector<int32_t>& tokens() const = 0;   // every token consumed, [pos]
  virtual size_t Bytes() const = 0;                         // state bytes held (host or device)
  // SequenceState::keep_h_e_rows / keep_extra_rows: history the next calls keep.
  virtual void SetKeepRows(int64_t keep_h_e_rows, int64_t keep_extra_rows) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;         // "cpu" or "cuda"
  virtual std::string Describe() const = 0;     // device and weight dtype, for logs and JSON
  virtual const Model& model() const = 0;
  virtual std::unique_ptr<Sequence> NewSequence() const = 0;
  virtual PrefillResult Prefill(Sequence& s, std::span<const int32_t> tokens, const PrefillOptions& opt) const = 0;
  virtual std::vector<float> DecodeStep(Sequence& s, int32_t token, StepStats* stats = nullptr) const = 0;
  // REQUIRES: distinct sequences of this backend.
  virtual std::vector<std::vector<float>> DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                                                      std::vector<StepStats>* stats = nullptr) const = 0;
  // Chunked prefill (engine.h's PrefillEncode / PrefillFinish) for the mixed scheduler of
  // session/. A backend without it keeps the defaults: SupportsChunkedPrefill() false, and the
  // session layer then runs every prefill whole (the serial scheduler).
  virtual bool SupportsChunkedPrefill() const { return false; }
  virtual StepStats PrefillEncode(Sequence&, std::span<const int32_t>) const {
    throw std::logic_error(std::string(name()) + " backend: no chunked prefill");
  }
  virtual PrefillResult PrefillFinish(Sequence&, PrefillMode) const {
    throw std::logic_error(std::string(name()) + " backend: no chunked prefill");
  }
  // Several sequences' chunks (seqs[i] gets chunks[i]) or decoder phases (modes[i]) in one
  // pass (engine/batch_prefill.h): the weight products run once over all their rows. Bit for
  // bit the separate calls when kernels::RowInvariantMatmul() is on. REQUIRES: distinct
  // sequences. The defaults make the separate calls (a backend without a batched path).
  virtual bool SupportsBatchedPrefill() const { return false; }
  virtual std::vector<StepStats> PrefillEncodeBatch(std::span<Sequence* const> seqs,
                                                    std::span<const std::span<const int32_t>> chunks) const {
    std::vector<StepStats> out;
    for (size_t i = 0; i < seqs.size(); ++i) out.push_back(PrefillEncode(*seqs[i], chunks[i]));
    return out;
  }
  virtual std::vector<PrefillResult> PrefillFinishBatch(std::span<Sequence* const> seqs,
                                                        std::span<const PrefillMode> modes) const {
    std::vector<PrefillResult> out;
    for (size_t i = 0; i < seqs.size(); ++i) out.push_back(PrefillFinish(*seqs[i], modes[i]));
    return out;
  }
  // The decoder phases in parts (engine/batch_prefill.h PrefillFinishLayers): seqs[i] runs at
  // most max_layers[i] more decoder layers; a result once its phase has ended, the same bits as
  // PrefillFinish. A backend without it keeps SupportsFinishLayers() false: then the session
  // layer runs every phase whole.
  virtual bool SupportsFinishLayers() const { return false; }
  virtual std::vector<std::optional<PrefillResult>> PrefillFinishLayers(std::span<Sequence* const>, std::span<const PrefillMode>,
                                                                        std::span<const int>) const {
    throw std::logic_error(std::string(name()) + " backend: no decoder phase in parts");
  }
  // PrefillEncodeBatch(seqs, chunks) and DecodeBatch(dec, tokens) in one pass (engine/batch_prefill.h
  // EncodeDecodeBatch): the decode rows share the encoder layers' products with the chunks.
  // Returns the chunks' stats; `logits` and `dec_stats` get the decode rows' results.
  virtual std::vector<StepStats> EncodeDecodeBatch(std::span<Sequence* const> seqs,
                                                   std::span<const std::span<const int32_t>> chunks,
                                                   std::span<Sequence* const> dec, std::span<const int32_t> tokens,
                                                   std::vector<std::vector<float>>* logits,
                                                   std::vector<StepStats>* dec_stats) const {
    std::vector<StepStats> out = PrefillEncodeBatch(seqs, chunks);
    *logits = DecodeBatch(dec, tokens, dec_stats);
    return out;
  }
  // Room for `tokens` more positions in the sequence's state (SequenceState::Reserve): a
  // scheduler that knows a prompt's length calls it before the prompt's first chunk, so the
  // state never reallocates mid-prompt. Changes no value; the default does nothing.
  virtual void Reserve(Sequence&, int64_t /*tokens*/) const {}
  virtual StepStats EncoderReplay(Sequence& s) const = 0;
  virtual StepStats ExactEncoderRestore(Sequence& s) const = 0;
  virtual void RebuildLayerEWindow(Sequence& s) const = 0;
  virtual SequenceState Download(const Sequence& s) const = 0;                     // a host copy
  virtual std::unique_ptr<Sequence> Upload(const SequenceState& st) const = 0;    // a copy on this backend
  // Upload that may take the host state over: the CPU keeps it as is (no copy).
  virtual std::unique_ptr<Sequence> Adopt(SequenceState&& st) const { return Upload(st); }
  // The sequence's own host state when it lives on the host (the CPU), so a reader needs no
  // Download copy; nullptr on a device.
  virtual const SequenceState* HostState(const Sequence&) const { return nullptr; }
  // The same, writable: host-only engine calls (speculative decoding, engine/speculative.h) run on it.
  virtual SequenceState* MutableHostState(Sequence&) const { return nullptr; }
};

// A backend's Sequence over its own state type (SequenceState on the CPU, gpu::DeviceState on
// the GPU): both keep positions and tokens on the host under the same names.
template <class State>
class StateSequence final : public Sequence {
 public:
  explicit StateSequence(State s) : st(std::move(s)) {}
  int64_t pos() const override { return st.pos; }
  int64_t decoder_pos() const override { return st.decoder_pos; }
  int64_t exact_until() const override { return st.ExactUntil(); }
  const std::vector<int32_t>& tokens() const override { return st.tokens; }
  size_t Bytes() const override { return st.Bytes(); }
  void SetKeepRows(int64_t keep_h_e_rows, int64_t keep_extra_rows) override {
    st.keep_h_e_rows = keep_h_e_rows;
    st.keep_extra_rows = keep_extra_rows;
  }
  State st;
};

struct BackendOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "auto"
  bool f32_weights = false;    // CUDA: keep F32 weights on the device (parity tests) instead of BF16
};

// True when this build has the CUDA backend and a CUDA device is present; else false and,
// when `why` is given, the reason.
bool CudaAvailable(std::string* why = nullptr);
// "auto" -> "cuda" when CudaAvailable(), else "cpu". Throws std::invalid_argument on anything
// but cpu, cuda or auto.
std::string ResolveDevice(const std::string& device);
// Which device a model runs on: ChooseDevice's decision, made once the model is loaded.
struct DeviceChoice {
  std::string device;  // "cpu" or "cuda" ("" when `error` is set)
  std::string note;    // "auto" fell back to the CPU although CUDA is usable: why (the refusal)
  std::string error;   // an explicit "cuda" that cannot run: the message to fail with
};
// The rule of MakeBackend as a pure function (tested without a GPU): "cpu" is the CPU; "cuda"
// is CUDA when `cuda_available` and the CUDA engine accepts the model (`refusal` empty, from
// CudaRefusal), else an error saying which (`cuda_why` is CudaAvailable's reason); "auto" is
// CUDA when both hold, else the CPU, with a note when only the refusal stood in the way.
// Throws std::invalid_argument on any other name.
DeviceChoice ChooseDevice(const std::string& requested, bool cuda_available, const std::string& cuda_why,
                          const std::string& refusal);
// The backend for opt.device, by ChooseDevice: an explicit "cuda" without a device (or in a
// build without CUDA), or for a model the CUDA engine cannot run, throws std::runtime_error
// saying which; "auto" then runs on the CPU (an info log names the refused switches).
std::unique_ptr<Backend> MakeBackend(const Model& m, const BackendOptions& opt);
// "" when the CUDA engine can run `c`, else why not, naming the config field(s): it does not
// implement the released parts of issue 21 yet (mHC, YaRN, other router scores, released KV
// precision, Engram, the released weight layout), and refuses them rather than compute them wrong.
std::string CudaRefusal(const ModelConfig& c);

namespace gpu {
// Defined in engine/cuda/cuda_backend.cpp (CEDAR_CUDA builds only).
std::unique_ptr<Backend> MakeCudaBackend(const Model& m, bool f32_weights);
bool CudaDevicePresent(std::string* why);
}  // namespace gpu

}  // namespace cedar
