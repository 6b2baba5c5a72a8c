// Engram table lookups per second (engine/engram.h EngramGatherRows: pread + dequantise), with
// the batch's reads issued serially (1 thread) and in parallel, from a table file larger than
// memory. Prints one JSON object. Never asserts a timing.
//
//   bench_engram [--file PATH] [--gib 32] [--lookups 60000] [--threads 1,4,16,32]
//
// Without --file it makes a sparse file of --gib GiB in /tmp (no disk blocks: reads of its holes
// cost the syscall and a zero-filled page, not a device access) laid out as a released table:
// codes [rows, 256] then scales [rows, 8]. With --file (e.g. a released shard) the rows are read
// from the real device. Before each run the file's cached pages are dropped (POSIX_FADV_DONTNEED).
// Batches: 24 rows (one decode token) and 6144 rows (a 256-token prefill group).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "engine/engram.h"

using namespace cedar;
namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::string file;
  double gib = 32;
  int64_t lookups = 60000;
  std::vector<int> threads = {1, 4, 16, 32};
  auto desc = bench::Options("bench_engram: Engram table lookups per second, serial and parallel reads, as JSON");
  desc.add_options()("file", po::value(&file), "table file to read (default: a sparse file of --gib GiB in /tmp)")(
      "gib", cli::RealOption("--gib", &gib, 0.0, 65536.0, true), "size of the sparse file made without --file")(
      "lookups", cli::IntOption<int64_t>("--lookups", &lookups, 1, int64_t(1) << 40), "rows looked up per run")(
      "threads", bench::IntListOption("--threads", &threads, 1, 4096), "reader threads to run (comma-separated)");
  if (const int rc = bench::ParseFlags("bench_engram", desc, argc, argv); rc >= 0) return rc;
  const bool made = file.empty();
  if (made) {
    file = "/tmp/cedar_bench_engram_" + std::to_string(::getpid()) + ".bin";
    const int fd = ::open(file.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0 || ::ftruncate(fd, off_t(gib * (1ull << 30))) != 0) {
      std::fprintf(stderr, "bench_engram: cannot make the sparse file %s\n", file.c_str());
      return 1;
    }
    ::close(fd);
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    std::fprintf(stderr, "bench_engram: %s: cannot stat\n", file.c_str());
    return 1;
  }
  EngramWeights w;
  w.layer = 0;
  w.table.path = file;
  w.table.head_dim = 256;
  w.table.scale_cols = 8;
  w.table.rows = int64_t(uint64_t(st.st_size) / 264);
  w.table.weight_offset = 0;
  w.table.scale_offset = uint64_t(w.table.rows) * 256;
  w.reader = OpenPreadReader(file);
  const int drop_fd = ::open(file.c_str(), O_RDONLY);

  nlohmann::json out = {{"bench", "engram_lookup"},
                        {"file", made ? "sparse (holes: syscall + zero page, no device read)" : file},
                        {"file_bytes", int64_t(st.st_size)},
                        {"table_rows", w.table.rows},
                        {"row_bytes", 256 + 8},
                        {"lookups_per_run", lookups},
                        {"cpus", int(std::thread::hardware_concurrency())}};
  std::mt19937_64 rng(42);
  std::vector<float> rows;
  for (int batch : {24, 6144}) {
    for (int t : threads) {
      w.io = MakeEngramIoPool(t);
      (void)::posix_fadvise(drop_fd, 0, 0, POSIX_FADV_DONTNEED);
      std::vector<int64_t> ids(static_cast<size_t>(batch));
      rows.resize(size_t(batch) * 256);
      int64_t done = 0;
      const auto t0 = std::chrono::steady_clock::now();
      while (done < lookups) {
        for (auto& r : ids) r = int64_t(rng() % uint64_t(w.table.rows));
        EngramGatherRows(w, ids.data(), batch, rows.data());
        done += batch;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out["results"].push_back({{"batch_rows", batch},
                                {"threads", t},
                                {"lookups_per_s", double(done) / s},
                                {"us_per_batch", 1e6 * s / double(done / batch)}});
    }
  }
  (void)::posix_fadvise(drop_fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(drop_fd);
  if (made) std::remove(file.c_str());
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
