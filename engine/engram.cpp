// Engram: hashing, on-demand table reads, the gated stream update. See engine/engram.h.
#include "engine/engram.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/checkpoint_index.h"
#include "engine/engram_classes.h"
#include "engine/model.h"
#include "engine/pcg64.h"
#include "engine/v41_held.h"
#include "kernels/ops.h"
#include "kernels/quant_formats.h"

namespace cedar {

// ---------------------------------------------------------------- file reads

namespace {

constexpr int kMaxEngramHeadDim = 1024;  // row buffers live on the IO threads' stacks (released: 256)

class PreadReader final : public EngramFileReader {
 public:
  explicit PreadReader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot open for Engram row reads: " + std::strerror(errno));
    // Random 256-byte rows: readahead would only waste page cache (and IO) on neighbours.
    (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
  }
  ~PreadReader() override { ::close(fd_); }
  void Read(void* dst, size_t nbytes, uint64_t offset) const override {
    auto* p = static_cast<uint8_t*>(dst);
    size_t done = 0;
    while (done < nbytes) {
      const ssize_t r = ::pread(fd_, p + done, nbytes - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw std::runtime_error(path_ + ": Engram row read of " + std::to_string(nbytes) + " bytes at offset " + std::to_string(offset) +
                                 " failed: " + (r < 0 ? std::string(std::strerror(errno)) : std::string("end of file")));
      done += size_t(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

std::unique_ptr<EngramFileReader> OpenPreadReader(const std::string& path) { return std::make_unique<PreadReader>(path); }

// Persistent threads for one batch of reads at a time. Reads block on the disk, not the CPU, so
// the pool is separate from (and larger than) the compute pool of kernels/thread_pool.h.
class EngramIoPool {
 public:
  explicit EngramIoPool(int threads) {
    for (int i = 0; i + 1 < threads; ++i) threads_.emplace_back([this] { Worker(); });
  }
  ~EngramIoPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // Runs fn(i) for i in [0, count) on the pool and the caller; rethrows the first exception.
  void Run(int64_t count, const std::function<void(int64_t)>& fn) {
    std::lock_guard<std::mutex> batch(run_mu_);  // one batch at a time (callers on other sequences wait)
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      count_ = count;
      next_.store(0);
      finished_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    Drain();
    std::unique_lock<std::mutex> lock(mu_);
    // Every item done and no worker still inside Drain: the next batch may reset the state.
    done_cv_.wait(lock, [&] { return finished_ == count_ && active_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Worker() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
      lock.unlock();
      Drain();
      lock.lock();
      --active_;
      done_cv_.notify_all();
    }
  }
  void Drain() {
    for (;;) {
      const int64_t i = next_.fetch_add(1);
      if (i >= count_) return;
      std::exception_ptr err;
      try {
        (*fn_)(i);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (++finished_ == count_) done_cv_.notify_all();
    }
  }

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;  // the batch's item function (under mu_ to set)
  int64_t count_ = 0;                                 // items of the batch
  std::atomic<int64_t> next_{0};                      // next unclaimed item
  int64_t finished_ = 0;                              // items done (under mu_)
  int active_ = 0;                                    // workers inside Drain (under mu_)
  uint64_t generation_ = 0;                           // batches started
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

std::shared_ptr<EngramIoPool> MakeEngramIoPool(int threads) { return std::make_shared<EngramIoPool>(std::max(1, threads)); }

// ---------------------------------------------------------------- hashing

std::vector<int64_t> EngramRowIds(const EngramHash& h, const int32_t* tokens, int64_t first_pos, int n, const int32_t* prev,
                                  const uint8_t* image) {
  const int N = h.max_ngram, K = h.Lookups();
  const int64_t n_prev = std::min<int64_t>(first_pos, N - 1);
  if (n_prev > 0 && prev == nullptr)
    throw std::invalid_argument("EngramRowIds: expected the " + std::to_string(n_prev) + " tokens before position " + std::to_string(first_pos) +
                                ", found none");
  const int64_t vocab = int64_t(h.token_class.size());
  auto token_at = [&](int64_t q) -> int32_t { return q >= first_pos ? tokens[q - first_pos] : prev[q - (first_pos - n_prev)]; };
  std::vector<int64_t> out(size_t(n) * size_t(K));
  std::vector<int64_t> cls(static_cast<size_t>(N));
  for (int i = 0; i < n; ++i) {
    const int64_t p = first_pos + i;
    bool blocked = false;
    for (int s = 0; s < N; ++s) {
      const int64_t q = p - s;
      blocked = blocked || q < 0 || (image && q >= first_pos && image[q - first_pos]);
      if (blocked) {
        cls[size_t(s)] = h.pad_class;
        continue;
      }
      const int32_t t = token_at(q);
      if (t < 0 || t >= vocab)
        throw std::invalid_argument("EngramRowIds: token id at position " + std::to_string(q) + ": expected 0.." + std::to_string(vocab - 1) +
                                    ", found " + std::to_string(t));
      cls[size_t(s)] = h.token_class[size_t(t)];
    }
    // class < compressed vocab and multiplier < INT64_MAX / compressed vocab: no product overflows,
    // every product is >= 0, so the XOR is >= 0 and % is the mathematical modulus.
    int64_t rolling = cls[0] * h.multipliers[0];
    int64_t* row = &out[size_t(i) * size_t(K)];
    for (int s = 1; s < N; ++s) {
      rolling ^= cls[size_t(s)] * h.multipliers[size_t(s)];
      for (int hd = 0; hd < h.n_heads; ++hd) {
        const int k = (s - 1) * h.n_heads + hd;
        row[k] = rolling % h.primes[size_t(k)] + h.offsets[size_t(k)];
      }
    }
  }
  return out;
}

std::vector<int32_t> IdentityEngramClasses(int vocab_size) {
  std::vector<int32_t> c(size_t(std::max(vocab_size, 0)));
  for (size_t i = 0; i < c.size(); ++i) c[i] = int32_t(i);
  return c;
}

// ---------------------------------------------------------------- loading

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// File offsets of tensors' data from a safetensors header (u64 length, JSON, data): what the
// pread reader needs, without mapping or reading the data.
std::vector<uint64_t> DataOffsets(const std::string& path, const std::vector<std::string>& names) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open to read the safetensors header");
  uint8_t len_bytes[8];
  if (!f.read(reinterpret_cast<char*>(len_bytes), 8)) throw std::runtime_error(path + ": expected an 8-byte header length, found a shorter file");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len > (uint64_t(1) << 30)) throw std::runtime_error(path + ": header length " + std::to_string(len) + " is implausible");
  std::string header(size_t(len), '\0');
  if (!f.read(header.data(), std::streamsize(len))) throw std::runtime_error(path + ": header shorter than its length " + std::to_string(len));
  nlohmann::json j = nlohmann::json::parse(header);
  std::vector<uint64_t> out;
  for (const std::string& name : names) {
    if (!j.contains(name) || !j[name].contains("data_offsets"))
      throw std::runtime_error(path + ": expected tensor '" + name + "' in the header, found none");
    out.push_back(8 + len + j[name]["data_offsets"][0].get<uint64_t>());
  }
  return out;
}

}  // namespace

EngramWeights LoadEngram(const Checkpoint& ck, const std::string& dir, const ModelConfig& cfg, int layer, std::vector<int32_t> token_class,
                         const EngramOptions& opt) {
  const auto it = std::find(cfg.engram_layers.begin(), cfg.engram_layers.end(), layer);
  if (it == cfg.engram_layers.end()) throw std::runtime_error("LoadEngram: layer " + std::to_string(layer) + " is not in engram_layers");
  const size_t j = size_t(it - cfg.engram_layers.begin());
  const int N = cfg.engram_max_ngram, H = cfg.engram_n_heads, hd = cfg.engram_head_dim, d = cfg.dim, hc = cfg.hc_mult;
  const std::string p = "layers." + std::to_string(layer) + ".engram.";
  if (hd > kMaxEngramHeadDim) throw std::runtime_error("engram_head_dim: expected at most " + std::to_string(kMaxEngramHeadDim) + ", found " + std::to_string(hd));
  if (hd % 32 != 0) throw std::runtime_error("engram_head_dim: expected a multiple of 32 (one E8M0 scale per 32 channels), found " + std::to_string(hd));
  if (cfg.engram_compressed_vocab < 1) throw std::runtime_error("engram_compressed_vocab: expected >= 1, found " + std::to_string(cfg.engram_compressed_vocab));

  EngramWeights w;
  w.layer = layer;
  w.hc = hc;
  w.dim = d;
  w.eps = cfg.norm_eps;

  // Hash constants for all Engram layers (a layer's primes skip those drawn before it).
  const EngramHashConstants k = ComputeEngramHashConstants(cfg.engram_layers, N, H, cfg.engram_vocab_size, cfg.engram_compressed_vocab);
  if (j < cfg.engram_table_rows.size() && k.table_rows[j] != cfg.engram_table_rows[j])
    throw std::runtime_error("engram_table_rows[" + std::to_string(j) + "]: expected the sum of the layer's bucket primes " +
                             std::to_string(k.table_rows[j]) + ", found " + std::to_string(cfg.engram_table_rows[j]));
  w.hash.max_ngram = N;
  w.hash.n_heads = H;
  w.hash.multipliers = k.multipliers[j];
  int64_t acc = 0;
  for (const auto& per_order : k.primes[j])
    for (int64_t prime : per_order) {
      w.hash.primes.push_back(prime);
      w.hash.offsets.push_back(acc);
      acc += prime;
    }

  // The class table: one class per token id, classes 0..compressed_vocab-1 all used (the
  // multipliers' bound assumes no class reaches compressed_vocab).
  if (int64_t(token_class.size()) != cfg.vocab_size)
    throw std::runtime_error("Engram class table: expected " + std::to_string(cfg.vocab_size) + " entries (vocab_size), found " +
                             std::to_string(token_class.size()));
  std::vector<uint8_t> used(size_t(cfg.engram_compressed_vocab), 0);
  int64_t n_used = 0;
  for (size_t t = 0; t < token_class.size(); ++t) {
    const int32_t c = token_class[t];
    if (c < 0 || c >= cfg.engram_compressed_vocab)
      throw std::runtime_error("Engram class table: token " + std::to_string(t) + ": expected a class in 0.." +
                               std::to_string(cfg.engram_compressed_vocab - 1) + " (engram_compressed_vocab), found " + std::to_string(c));
    if (!used[size_t(c)]) used[size_t(c)] = 1, ++n_used;
  }
  if (n_used != cfg.engram_compressed_vocab)
    throw std::runtime_error("Engram class table: expected " + std::to_string(cfg.engram_compressed_vocab) +
                             " classes (engram_compressed_vocab; the hash multipliers derive from it), found " + std::to_string(n_used));
  if (cfg.engram_pad_id < 0 || cfg.engram_pad_id >= cfg.vocab_size)
    throw std::runtime_error("engram_pad_id: expected a token id below " + std::to_string(cfg.vocab_size) + ", found " + std::to_string(cfg.engram_pad_id));
  w.hash.pad_class = token_class[size_t(cfg.engram_pad_id)];
  w.hash.token_class = std::move(token_class);

  // The table: headers only (its data stays in the file).
  const int64_t rows = acc;
  const TensorInfo& tw = ck.Get(p + "embed.weight");
  const TensorInfo& ts = ck.Get(p + "embed.scale");
  if (tw.dtype != DType::F8_E4M3 || tw.shape != std::vector<int64_t>{rows, hd})
    throw std::runtime_error(dir + ": " + p + "embed.weight: expected F8_E4M3 [" + std::to_string(rows) + ", " + std::to_string(hd) + "], found " +
                             DTypeName(tw.dtype) + " " + ShapeStr(tw.shape));
  if ((ts.dtype != DType::F8_E8M0 && ts.dtype != DType::U8) || ts.shape != std::vector<int64_t>{rows, hd / 32})
    throw std::runtime_error(dir + ": " + p + "embed.scale: expected F8_E8M0 [" + std::to_string(rows) + ", " + std::to_string(hd / 32) + "], found " +
                             DTypeName(ts.dtype) + " " + ShapeStr(ts.shape));
  const std::string wfile = ck.ShardOf(p + "embed.weight"), sfile = ck.ShardOf(p + "embed.scale");
  if (wfile != sfile)
    throw std::runtime_error(dir + ": " + p + "embed.weight and embed.scale: expected one shard, found " + wfile + " and " + sfile);
  w.table.path = dir + "/" + wfile;
  const std::vector<uint64_t> offs = DataOffsets(w.table.path, {p + "embed.weight", p + "embed.scale"});
  w.table.weight_offset = offs[0];
  w.table.scale_offset = offs[1];
  w.table.rows = rows;
  w.table.head_dim = hd;
  w.table.scale_cols = hd / 32;
  w.reader = opt.open_reader ? std::shared_ptr<const EngramFileReader>(opt.open_reader(w.table.path))
                             : std::shared_ptr<const EngramFileReader>(OpenPreadReader(w.table.path));
  w.io = MakeEngramIoPool(opt.io_threads);

  // The small tensors, dequantised once.
  auto expect_shape = [&](const std::string& name, std::vector<int64_t> want) {
    const TensorInfo& t = ck.Get(name);
    if (t.shape != want) throw std::runtime_error(dir + ": " + name + ": expected shape " + ShapeStr(want) + ", found " + ShapeStr(t.shape));
  };
  expect_shape(p + "q_weight", {hc, d});
  expect_shape(p + "k_weight", {hc, d});
  const int64_t in = int64_t(N - 1) * H * hd;
  expect_shape(p + "wkv.weight", {int64_t(hc + 1) * d, in});
  const std::vector<float> q = ck.DequantizeWeight(p + "q_weight"), kw = ck.DequantizeWeight(p + "k_weight");
  w.qk.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) w.qk[i] = q[i] * kw[i];  // BF16 x BF16: exact in float
  // wkv at the load's precision, through the loader's own rule and conversion (engine/v41_held.h).
  Weight held;
  held.rows = int64_t(hc + 1) * d;
  held.cols = in;
  HoldWeight(ck, p + "wkv.weight", HeldType(ck, p + "wkv.weight", held.rows, held.cols, opt.weights), &held, [&](size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* part = std::aligned_alloc(64, rounded);
    if (!part) throw std::bad_alloc();
    w.wkv_parts.emplace_back(part, std::free);
    return part;
  });
  w.wkv = held.view();
  spdlog::debug("engram layer {}: table {} rows x {} in {} (codes at {}, scales at {}), wkv [{}, {}], {} io threads", layer, rows, hd,
                w.table.path, w.table.weight_offset, w.table.scale_offset, (hc + 1) * d, in, opt.io_threads);
  return w;
}

std::vector<EngramWeights> LoadAllEngrams(const Checkpoint& ck, const std::string& dir, const ModelConfig& cfg, const EngramOptions& opt) {
  std::vector<EngramWeights> out;
  if (cfg.engram_layers.empty()) return out;
  const std::string tok = dir + "/tokenizer.json";
  std::vector<int32_t> classes;
  if (std::ifstream(tok).good()) {
    int64_t n = 0;
    classes = EngramClassesFromTokenizerJson(tok, cfg.vocab_size, cfg.engram_pad_id, &n);
    spdlog::debug("engram: {} classes from {}", n, tok);
  } else if (cfg.engram_compressed_vocab == cfg.vocab_size) {
    classes = IdentityEngramClasses(cfg.vocab_size);
  } else {
    throw std::runtime_error(dir + ": expected tokenizer.json (the Engram class table is built from it: engram_compressed_vocab " +
                             std::to_string(cfg.engram_compressed_vocab) + " != vocab_size " + std::to_string(cfg.vocab_size) + "), found none");
  }
  for (int layer : cfg.engram_layers) out.push_back(LoadEngram(ck, dir, cfg, layer, classes, opt));
  return out;
}

// ---------------------------------------------------------------- lookup and update

void EngramGatherRows(const EngramWeights& w, const int64_t* row_ids, int64_t count, float* out) {
  const int hd = w.table.head_dim, sc = w.table.scale_cols;
  std::vector<int64_t> uniq(row_ids, row_ids + count);
  std::sort(uniq.begin(), uniq.end());  // ascending offsets: neighbouring rows share pages
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  for (int64_t r : uniq)
    if (r < 0 || r >= w.table.rows)
      throw std::out_of_range("Engram layer " + std::to_string(w.layer) + ": row " + std::to_string(r) + " outside the table's " +
                              std::to_string(w.table.rows) + " rows");
  std::vector<float> rows(uniq.size() * size_t(hd));
  w.io->Run(int64_t(uniq.size()), [&](int64_t u) {
    uint8_t codes[kMaxEngramHeadDim], scales[kMaxEngramHeadDim / 32];
    const int64_t r = uniq[size_t(u)];
    w.reader->Read(codes, size_t(hd), w.table.weight_offset + uint64_t(r) * uint64_t(hd));
    w.reader->Read(scales, size_t(sc), w.table.scale_offset + uint64_t(r) * uint64_t(sc));
    float* dst = &rows[size_t(u) * size_t(hd)];
    for (int c = 0; c < hd; ++c) dst[c] = kernels::DecodeE4M3(codes[c]) * kernels::DecodeE8M0(scales[c / 32]);
  });
  for (int64_t i = 0; i < count; ++i) {
    const size_t u = size_t(std::lower_bound(uniq.begin(), uniq.end(), row_ids[i]) - uniq.begin());
    std::memcpy(out + size_t(i) * size_t(hd), &rows[u * size_t(hd)], sizeof(float) * size_t(hd));
  }
}

void EngramAdd(const EngramWeights& w, const ModelConfig& cfg, const int32_t* tokens, int64_t first_pos, int n, const int32_t* prev_tokens_ctx,
               float* x) {
  if (n <= 0) return;
  if (first_pos < 0) throw std::invalid_argument("EngramAdd: first_pos: expected >= 0, found " + std::to_string(first_pos));
  const int hc = w.hc, d = w.dim, K = w.hash.Lookups(), hd = w.table.head_dim, stride = cfg.ResidualWidth();
  if (cfg.hc_mult != hc || cfg.dim != d)
    throw std::invalid_argument("EngramAdd: config hc_mult/dim " + std::to_string(cfg.hc_mult) + "/" + std::to_string(cfg.dim) +
                                " differ from the loaded Engram's " + std::to_string(hc) + "/" + std::to_string(d));
  const std::vector<int64_t> ids = EngramRowIds(w.hash, tokens, first_pos, n, prev_tokens_ctx);
  const int in = K * hd, out_w = (hc + 1) * d;
  // Tokens in groups: bounded buffers (the released rows are 6144 wide, kv 25600) and one IO
  // batch of up to kGroup * K rows in flight.
  constexpr int kGroup = 256;
  std::vector<float> rows(size_t(std::min(n, kGroup)) * size_t(in)), kv(size_t(std::min(n, kGroup)) * size_t(out_w));
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  for (int t0 = 0; t0 < n; t0 += kGroup) {
    const int m = std::min(kGroup, n - t0);
    EngramGatherRows(w, &ids[size_t(t0) * size_t(K)], int64_t(m) * K, rows.data());
    kernels::MatmulW(rows.data(), w.wkv, kv.data(), m);  // [m, in] x [out_w, in]^T (F32: kernels::Matmul)
    for (int t = 0; t < m; ++t) {
      float* X = x + size_t(t0 + t) * size_t(stride);
      const float* key = &kv[size_t(t) * size_t(out_w)];
      const float* v = key + size_t(hc) * size_t(d);
      for (int i = 0; i < hc; ++i) {
        float* Xi = X + size_t(i) * size_t(d);
        const float* ki = key + size_t(i) * size_t(d);
        const float* wi = &w.qk[size_t(i) * size_t(d)];
        double sx = 0, sk = 0, dot = 0;  // double sums: the only rounding left is kv's (float matmul)
        for (int c = 0; c < d; ++c) {
          sx += double(Xi[c]) * Xi[c];
          sk += double(ki[c]) * ki[c];
          dot += double(Xi[c]) * wi[c] * ki[c];
        }
        dot *= inv_sqrt_d / std::sqrt(sx / d + w.eps) / std::sqrt(sk / d + w.eps);
        const double gate = 1.0 / (1.0 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
        const float g = float(gate);
        for (int c = 0; c < d; ++c) Xi[c] += g * v[c];
      }
    }
  }
}

}  // namespace cedar
