// Engram (DeepSeek-V4.1-Flash's hashed n-gram memory), one self-contained component: the
// weights of one Engram layer, the n-gram hashing, the table lookup (rows read from the file
// on demand, never the whole table), and the gated update of the mHC streams. Facts and
// sources: docs/v41-contract.md section 8. Float64 reference: tools/reference/v41/engram.py.
//
// Per token t at absolute position p, for an Engram layer with index j in engram_layers:
//   c_s      = class[token at p - s] for s = 0..N-1 (N = engram_max_ngram); once p - s < 0 the
//              shift s and every larger one read class[engram_pad_id] (pad before position 0)
//   h_n      = XOR_{s<n} c_s * m_j[s]            (int64; m odd, bounded so no product overflows)
//   row(n,h) = h_n mod prime_j[n-2][h] + offset_j[n-2][h]      for n = 2..N, h < engram_n_heads
//   r        = concat over (n, h) of the dequantised rows   [K * head_dim], K = (N-1) * heads
//   [key_0 .. key_{hc-1}, v] = wkv r                     (hc + 1 vectors of d)
//   dot_i    = <X_i, q_w_i * k_w_i * key_i> * rsqrt(mean X_i^2 + eps) * rsqrt(mean key_i^2 + eps) / sqrt(d)
//   X_i     += sigmoid(sign(dot_i) sqrt(max(|dot_i|, 1e-6))) * v        (eps = norm_eps)
//
// HOW THE FORWARD MUST CALL IT (the call site is engine/forward.cpp's, wired by the lead):
//   At load (Model::LoadReleased): engram = LoadAllEngrams(checkpoint, dir, cfg) (one per entry of
//   cfg.engram_layers, in that order; the class table comes from dir/tokenizer.json).
//   For every Engram layer L (ModelConfig::engram_layers, all < E), immediately BEFORE block L
//   (before its attention sub-layer's mHC coefficients are computed, i.e. on the streams block
//   L-1 produced; for L = 0 on the embedded streams):
//     EngramAdd(engram[j], cfg, tokens, first_pos, n, prev, x);
//   tokens    = the n token ids of the rows being computed, at positions first_pos..first_pos+n-1
//               (one sequence, consecutive positions);
//   prev      = the min(first_pos, N - 1) token ids at positions first_pos - min(first_pos, N-1)
//               .. first_pos - 1 of the SAME sequence (nullptr when first_pos == 0). Never pads:
//               the pad id is only used before position 0;
//   x         = the n residual rows [n, cfg.ResidualWidth()] (X [hc, d] then the pre-mix a [hc]);
//               only X changes, a is left as it is.
//   * Prefill in chunks: each chunk passes its own tokens, its first position and the N-1
//     tokens before it; the rows read equal one whole prefill's exactly, and X equals it up to
//     the F32 rounding of the wkv product (sgemm for many rows, a dot product for one, wkv held
//     F32 or FP8; tested within a derived bound, worst 9.5e-7 on the test Engram), like the rest
//     of the forward.
//   * Decode: n = 1, first_pos = the token's position, prev = the N-1 tokens before it.
//   * Encoder replay ([max(0, P - W), P) re-run through layers 0..E-1): Engram layers are
//     encoder layers, so the replay calls EngramAdd exactly like prefill for those rows, with
//     prev = the N-1 tokens before the replay's first row (the token history holds them).
//   * Decoder replay and DSpark draft blocks never call it (no Engram at or after E; checked by
//     ModelConfig::ValidateReleasedParts).
//   * Image tokens never reach it (vision is refused with a 400); EngramRowIds takes a mask for
//     parity with the released rule (an image token breaks the n-gram and gets gate 0).
// Thread contract: EngramWeights is const after LoadEngram; EngramAdd may run concurrently for
// different sequences (the reader is thread-safe, the IO pool serialises its batches).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/weight_precision.h"
#include "kernels/weight_view.h"

namespace cedar {

class Checkpoint;

// Byte ranges of one file. Read must be safe to call from several threads at once and throw
// std::runtime_error (naming the file) on a short read.
class EngramFileReader {
 public:
  virtual ~EngramFileReader() = default;
  virtual void Read(void* dst, size_t nbytes, uint64_t offset) const = 0;
};
// pread(2) on an O_RDONLY descriptor with POSIX_FADV_RANDOM (no readahead: a 256-byte row
// should fault one page, not 128 KiB). Throws naming the path when it cannot be opened.
std::unique_ptr<EngramFileReader> OpenPreadReader(const std::string& path);

// The hash constants of one Engram layer (engine/pcg64.h computes them for all layers at once:
// the primes of a layer depend on the ones drawn before it).
struct EngramHash {
  int max_ngram = 0;                  // N: orders 2..N
  int n_heads = 0;                    // heads per order
  std::vector<int64_t> multipliers;   // [N] odd, from NumPy's PCG64 (10007 * layer_id)
  std::vector<int64_t> primes;        // [(N-1) * heads] bucket range sizes, (order, head) order
  std::vector<int64_t> offsets;       // [(N-1) * heads] first row of each range (running sum)
  std::vector<int32_t> token_class;   // [vocab] token id -> normalised class
  int32_t pad_class = 0;              // token_class[engram_pad_id]
  int Lookups() const { return (max_ngram - 1) * n_heads; }  // K rows per token
};

// [n, K] table rows for tokens at positions first_pos..first_pos+n-1 (see the header comment
// for `prev`). `image` (optional, [n]) marks image tokens: the look-back stops at them (and
// before position 0) and reads pad_class from there on (latching), like the released hash.
// Throws std::invalid_argument naming the token when an id is outside the class table.
std::vector<int64_t> EngramRowIds(const EngramHash& h, const int32_t* tokens, int64_t first_pos, int n,
                                  const int32_t* prev, const uint8_t* image = nullptr);

// Where a table lives in its shard: F8_E4M3 codes [rows, head_dim] and F8_E8M0 scales
// [rows, head_dim / 32] (one power-of-two scale per 32 channels of a row).
struct EngramTableFile {
  std::string path;            // the shard file
  uint64_t weight_offset = 0;  // file offset of row 0's codes
  uint64_t scale_offset = 0;   // file offset of row 0's scales
  int64_t rows = 0;            // engram_table_rows of this layer
  int head_dim = 0;            // codes per row
  int scale_cols = 0;          // head_dim / 32
};

struct EngramOptions {
  int io_threads = 16;  // lookups of one batch in flight at once (IO-bound: more than cores)
  WeightPrecision weights = WeightPrecision::kF32;  // the load's --weights: how wkv is held
  // Opens the table's shard for row reads; default OpenPreadReader. Tests inject a counter.
  std::function<std::unique_ptr<EngramFileReader>(const std::string& path)> open_reader;
};

class EngramIoPool;  // engram.cpp: persistent threads that issue one batch's reads
// A pool of `threads` (the caller counts as one): LoadEngram makes one per layer; benches and
// tools that fill an EngramWeights by hand use this.
std::shared_ptr<EngramIoPool> MakeEngramIoPool(int threads);

// One Engram layer. The table stays in the file; everything else is small and in memory.
struct EngramWeights {
  int layer = -1;                 // backbone layer the Engram sits before
  int hc = 1, dim = 0;            // streams and their width d
  float eps = 1e-6f;              // RMS epsilon of the gate (rms_norm_eps)
  EngramHash hash;                // constants + class table
  EngramTableFile table;          // the FP8 rows, read on demand
  std::shared_ptr<const EngramFileReader> reader;  // reads `table.path`
  std::shared_ptr<EngramIoPool> io;                // issues a batch's row reads in parallel
  // [(hc + 1) * d, K * head_dim], held at EngramOptions::weights (engine/v41_held.h: F32 dequantised;
  // as-stored the released FP8 with its 32x32 E8M0 blocks; bf16 / int8 converted). Its bytes are
  // wkv_parts', each 64-byte aligned.
  kernels::WeightView wkv;
  std::vector<std::shared_ptr<const void>> wkv_parts;
  std::vector<float> qk;          // [hc, d] q_weight * k_weight (only ever used as a product)
};

// Loads layer `layer`'s Engram from a checkpoint opened from `dir` (tensors
// layers.L.engram.{embed.weight, embed.scale, q_weight, k_weight, wkv.weight, wkv.scale}).
// `token_class` [cfg.vocab_size] is the normalised class of every token id (engine/engram_classes.h
// builds it from the released tokenizer; the checkpoint does not store it); its class count must
// equal cfg.engram_compressed_vocab. Throws std::runtime_error naming the tensor or field and
// what was expected and found. Reads only headers and the small tensors, never the table.
EngramWeights LoadEngram(const Checkpoint& ck, const std::string& dir, const ModelConfig& cfg, int layer,
                         std::vector<int32_t> token_class, const EngramOptions& opt = {});

// Every Engram layer of cfg, in engram_layers order, with the class table built once from
// `dir`/tokenizer.json (the released tokenizer; engine/engram_classes.h). Without that file the
// identity table is used when engram_compressed_vocab == vocab_size (models of our own, tests);
// otherwise it throws naming the missing file.
std::vector<EngramWeights> LoadAllEngrams(const Checkpoint& ck, const std::string& dir, const ModelConfig& cfg,
                                          const EngramOptions& opt = {});

// Reads and dequantises table rows: out [count, head_dim] = E4M3(code) * 2^(scale - 127).
// Duplicate ids are read once; distinct rows are read in parallel on the IO pool.
void EngramGatherRows(const EngramWeights& w, const int64_t* row_ids, int64_t count, float* out);

// X_i += gate_i * v for n rows (see the header comment). x: [n, cfg.ResidualWidth()].
void EngramAdd(const EngramWeights& w, const ModelConfig& cfg, const int32_t* tokens, int64_t first_pos, int n,
               const int32_t* prev_tokens_ctx, float* x);

// Identity classes (token id = class) for models without a released tokenizer (tests, our own
// family); its class count is vocab_size.
std::vector<int32_t> IdentityEngramClasses(int vocab_size);

}  // namespace cedar
