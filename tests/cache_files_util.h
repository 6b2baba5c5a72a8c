// Helpers for the cache-file tests (cache_files_test.cpp, cache_files_session_test.cpp): a
// temporary directory, a capture of spdlog warnings, and ways to damage an LMDB data file
// (truncate, overwrite with garbage, flip bits inside its B-tree pages), all seeded.
#pragma once
#include <doctest/doctest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace cedar::cache::testing {

struct FilesTempDir {
  std::string path;
  FilesTempDir() {
    char name[] = "/tmp/cedar_cache_files_XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path = name;
  }
  ~FilesTempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path, ec);
  }
};

// Collects every message at warning level or above while alive (the default logger's sinks
// are swapped, then restored).
class WarningCapture {
 public:
  WarningCapture() : sink_(std::make_shared<Sink>()), previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~WarningCapture() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> warnings() const {
    std::lock_guard<std::mutex> lock(sink_->mu);
    return sink_->warnings;
  }
  std::string joined() const {
    std::string all;
    for (const auto& w : warnings()) all += w + "\n";
    return all;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    mutable std::mutex mu;
    std::vector<std::string> warnings;
    void sink_it_(const spdlog::details::log_msg& m) override {
      if (m.level < spdlog::level::warn) return;
      std::lock_guard<std::mutex> lock(mu);
      warnings.emplace_back(m.payload.data(), m.payload.size());
    }
    void flush_() override {}
  };
  std::shared_ptr<Sink> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Files in `dir` whose names start with `prefix`.
inline std::vector<std::string> FilesStartingWith(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) names.push_back(n);
  }
  return names;
}

inline unsigned ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// LMDB 0.9 layout, as much as the damage needs: the page size is in meta page 0 (byte 40), a
// page's type in its bytes 10..11 (0x01 branch, 0x02 leaf, 0x04 overflow).
inline uint32_t LmdbPageSize(const std::vector<uint8_t>& file) {
  uint32_t psize;
  std::memcpy(&psize, file.data() + 40, sizeof(psize));
  return psize;
}

// The main tree's root page, from the meta LMDB uses (the larger txnid): txnid at byte 144 of a
// meta page, the main database's root at byte 128.
inline uint64_t MainRootPage(const std::vector<uint8_t>& file) {
  const uint32_t psize = LmdbPageSize(file);
  uint64_t txn0, txn1, root;
  std::memcpy(&txn0, file.data() + 144, 8);
  std::memcpy(&txn1, file.data() + psize + 144, 8);
  std::memcpy(&root, file.data() + (txn0 < txn1 ? psize : 0) + 128, 8);
  return root;
}

// Writes `bytes` at `offset` of the file at `path` in place (under any map of it).
inline void PatchFile(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  REQUIRE(f.good());
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  f.flush();
  REQUIRE(f.good());
}

// Pages of `file` (beyond the two metas) whose type is branch or leaf.
inline std::vector<size_t> TreePages(const std::vector<uint8_t>& file) {
  const uint32_t psize = LmdbPageSize(file);
  std::vector<size_t> pages;
  for (size_t pg = 2; (pg + 1) * psize <= file.size(); ++pg) {
    uint16_t flags;
    std::memcpy(&flags, file.data() + pg * psize + 10, sizeof(flags));
    if ((flags & 0x7f) == 0x01 || (flags & 0x7f) == 0x02) pages.push_back(pg);
  }
  return pages;
}

// Flips `flips` random bits (seeded) inside the branch and leaf pages of the data file at
// `path`. Returns how many tree pages there were.
inline size_t FlipTreeBits(const std::string& path, int flips, uint64_t seed) {
  std::vector<uint8_t> file = ReadFile(path);
  const uint32_t psize = LmdbPageSize(file);
  const std::vector<size_t> pages = TreePages(file);
  REQUIRE(!pages.empty());
  std::mt19937_64 rng(seed);
  for (int i = 0; i < flips; ++i) {
    const size_t pg = pages[rng() % pages.size()];
    const size_t byte = pg * psize + rng() % psize;
    file[byte] ^= static_cast<uint8_t>(1u << (rng() % 8));
  }
  WriteFile(path, file);
  return pages.size();
}

// Flips `flips` random bits (seeded) anywhere past the two meta pages.
inline void FlipFileBits(const std::string& path, int flips, uint64_t seed) {
  std::vector<uint8_t> file = ReadFile(path);
  const size_t start = 2 * LmdbPageSize(file);
  REQUIRE(file.size() > start);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < flips; ++i) file[start + rng() % (file.size() - start)] ^= static_cast<uint8_t>(1u << (rng() % 8));
  WriteFile(path, file);
}

inline void FillWithGarbage(const std::string& path, size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> file(bytes);
  for (auto& b : file) b = static_cast<uint8_t>(rng());
  WriteFile(path, file);
}

}  // namespace cedar::cache::testing
