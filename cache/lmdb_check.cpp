#include "cache/lmdb_check.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace cedar::cache::detail {
namespace {

static_assert(std::endian::native == std::endian::little && sizeof(void*) == 8,
              "the layout below is LMDB's on-disk format on 64-bit little-endian hosts");

// LMDB 0.9 on-disk layout (mdb.c): a page starts with a 16-byte header
//   uint64 pgno | uint16 pad | uint16 flags | uint16 lower | uint16 upper   (overflow pages:
//   uint32 page count in place of lower/upper), then uint16 node offsets (branch, leaf).
constexpr uint32_t kPageHeader = 16;
constexpr uint16_t kBranch = 0x01, kLeaf = 0x02, kOverflow = 0x04, kMeta = 0x08, kLeaf2 = 0x20, kSubPage = 0x40;
constexpr uint16_t kTypeBits = kBranch | kLeaf | kOverflow | kMeta | kLeaf2 | kSubPage;
// A node: uint16 lo | uint16 hi | uint16 flags | uint16 key size | key | data. Leaf: data size
// = lo | hi << 16; branch: child page = lo | hi << 16 | flags << 32.
constexpr uint32_t kNodeHeader = 8;
constexpr uint16_t kBigData = 0x01;             // data is the page number of an overflow run
constexpr uint32_t kMaxKeyBytes = 511;          // mdb_env_get_maxkeysize() of default builds
// The meta, after the page header: uint32 magic | uint32 version | uint64 address | uint64
// mapsize | two 48-byte database records (free, main) | uint64 last page | uint64 txnid.
constexpr uint32_t kMagic = 0xBEEFC0DE;
constexpr uint32_t kDataVersion = 1;
constexpr uint64_t kInvalidPage = ~uint64_t{0};  // root of an empty tree
constexpr int kMaxDepth = 32;                    // LMDB's cursor stack

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One database record of a meta page (MDB_db, 48 bytes).
struct DbRecord {
  uint32_t pad;  // the free record's holds the page size
  uint16_t flags;
  uint16_t depth;
  uint64_t branch_pages, leaf_pages, overflow_pages, entries, root;
};
static_assert(sizeof(DbRecord) == 48);

struct Meta {
  uint16_t page_flags;
  uint32_t magic, version;
  DbRecord dbs[2];
  uint64_t last_page, txnid;
};

Meta ReadMeta(const uint8_t* page) {
  Meta m{};
  m.page_flags = Load<uint16_t>(page + 10);
  const uint8_t* p = page + kPageHeader;
  m.magic = Load<uint32_t>(p);
  m.version = Load<uint32_t>(p + 4);
  std::memcpy(&m.dbs, p + 24, sizeof(m.dbs));
  m.last_page = Load<uint64_t>(p + 120);
  m.txnid = Load<uint64_t>(p + 128);
  return m;
}

// Walks one tree of a mapped file. Every failure is returned as the first error found.
class Walker {
 public:
  Walker(const uint8_t* map, uint64_t file_pages, uint32_t psize, uint64_t last_page)
      : map_(map), file_pages_(file_pages), psize_(psize), last_page_(last_page), used_(file_pages, false) {}

  // Walks the tree of `db` (0: freelist, 1: main) and checks its record's counts.
  Status WalkTree(int db, const DbRecord& rec, LmdbFileStats* stats) {
    const char* name = db == 0 ? "freelist" : "main";
    Counts counts;
    prev_key_.clear();
    have_prev_ = false;
    if (rec.root == kInvalidPage) {
      if (rec.depth != 0 || rec.entries != 0) return Bad("{} tree: no root but depth {} and {} entries", name, rec.depth, rec.entries);
    } else {
      if (rec.depth == 0 || rec.depth > kMaxDepth) return Bad("{} tree: depth {}", name, rec.depth);
      if (Status s = WalkPage(db, rec.root, 0, rec.depth, &counts); !s.ok()) {
        return Status::Corruption(fmt::format("{} tree: {}", name, s.message()));
      }
    }
    if (counts.branch != rec.branch_pages || counts.leaf != rec.leaf_pages || counts.overflow != rec.overflow_pages ||
        counts.entries != rec.entries) {
      return Bad("{} tree: found {} branch, {} leaf, {} overflow pages and {} entries; the meta says {}, {}, {} and {}",
                 name, counts.branch, counts.leaf, counts.overflow, counts.entries, rec.branch_pages, rec.leaf_pages,
                 rec.overflow_pages, rec.entries);
    }
    if (stats) {
      stats->pages_walked += counts.branch + counts.leaf;
      stats->overflow_pages += counts.overflow;
      if (db == 1) stats->entries = counts.entries;
    }
    return Status::Ok();
  }

  // Free pages: none used by a tree, none listed twice, and every page past the file's end (up
  // to the last page) listed.
  Status CheckFreePages() {
    std::vector<bool> seen(file_pages_, false);
    std::vector<uint64_t> past_end;
    for (uint64_t pg : free_pages_) {
      if (pg < 2 || pg > last_page_) return Bad("free page {} outside [2, {}]", pg, last_page_);
      if (pg >= file_pages_) {
        past_end.push_back(pg);
        continue;
      }
      if (used_[pg]) return Bad("page {} is both in a tree and free", pg);
      if (seen[pg]) return Bad("page {} is listed free twice", pg);
      seen[pg] = true;
    }
    std::sort(past_end.begin(), past_end.end());
    if (std::adjacent_find(past_end.begin(), past_end.end()) != past_end.end()) return Bad("a page past the end is listed free twice");
    const uint64_t want = last_page_ + 1 > file_pages_ ? last_page_ + 1 - file_pages_ : 0;
    if (past_end.size() != want) {
      return Bad("the file holds {} pages but the last page is {} ({} of the pages past the end are free)", file_pages_,
                 last_page_, past_end.size());
    }
    return Status::Ok();
  }

 private:
  struct Counts {
    uint64_t branch = 0, leaf = 0, overflow = 0, entries = 0;
  };

  template <class... A>
  static Status Bad(fmt::format_string<A...> f, A&&... a) {
    return Status::Corruption(fmt::format(f, std::forward<A>(a)...));
  }

  const uint8_t* Page(uint64_t pg) const { return map_ + pg * psize_; }

  // Marks pages [pg, pg + n) used; fails when one is outside the file, a meta page or in use.
  Status Claim(uint64_t pg, uint64_t n) {
    const uint64_t end = std::min(file_pages_, last_page_ + 1);  // pages a tree may use
    if (pg < 2 || n == 0 || pg >= end || n > end - pg) {
      return Bad("page run {}+{} outside the pages [2, {}) that the file holds and the meta uses", pg, n, end);
    }
    for (uint64_t i = pg; i < pg + n; ++i) {
      if (used_[i]) return Bad("page {} is reached twice", i);
      used_[i] = true;
    }
    return Status::Ok();
  }

  Status WalkPage(int db, uint64_t pg, int depth, int tree_depth, Counts* counts) {
    if (Status s = Claim(pg, 1); !s.ok()) return s;
    const uint8_t* p = Page(pg);
    if (Load<uint64_t>(p) != pg) return Bad("page {} says it is page {}", pg, Load<uint64_t>(p));
    const uint16_t type = Load<uint16_t>(p + 10) & kTypeBits;
    const bool leaf = depth == tree_depth - 1;
    if (type != (leaf ? kLeaf : kBranch)) return Bad("page {} at depth {} of {} has type {:#x}", pg, depth, tree_depth, type);
    const uint16_t lower = Load<uint16_t>(p + 12), upper = Load<uint16_t>(p + 14);
    if (lower < kPageHeader || (lower - kPageHeader) % 2 != 0 || lower > upper || upper > psize_) {
      return Bad("page {}: free space bounds {}..{}", pg, lower, upper);
    }
    const uint32_t keys = (lower - kPageHeader) / 2;
    if (keys == 0) return Bad("page {} is empty", pg);
    (leaf ? counts->leaf : counts->branch) += 1;
    for (uint32_t i = 0; i < keys; ++i) {
      const uint16_t off = Load<uint16_t>(p + kPageHeader + 2 * i);
      if (off < upper || off % 2 != 0 || uint32_t{off} + kNodeHeader > psize_) return Bad("page {} node {}: offset {}", pg, i, off);
      const uint8_t* node = p + off;
      const uint16_t lo = Load<uint16_t>(node), hi = Load<uint16_t>(node + 2), flags = Load<uint16_t>(node + 4);
      const uint16_t ksize = Load<uint16_t>(node + 6);
      if (ksize > kMaxKeyBytes || uint32_t{off} + kNodeHeader + ksize > psize_) return Bad("page {} node {}: key of {} bytes", pg, i, ksize);
      const uint8_t* key = node + kNodeHeader;
      if (!leaf) {
        // Branch: the first key is empty (below everything); the rest ascend.
        const uint64_t child = lo | uint64_t{hi} << 16 | uint64_t{flags} << 32;
        if (Status s = WalkPage(db, child, depth + 1, tree_depth, counts); !s.ok()) return s;
        continue;
      }
      if (Status s = CheckKeyOrder(db, key, ksize); !s.ok()) return Bad("page {} node {}: {}", pg, i, s.message());
      const uint64_t dsize = lo | uint64_t{hi} << 16;
      const uint8_t* data = nullptr;
      if (flags == kBigData) {
        if (uint32_t{off} + kNodeHeader + ksize + 8 > psize_) return Bad("page {} node {}: overflow page number cut off", pg, i);
        const uint64_t ov = Load<uint64_t>(key + ksize);
        const uint64_t need = (kPageHeader - 1 + dsize) / psize_ + 1;
        if (ov < 2 || ov >= file_pages_) return Bad("page {} node {}: overflow page {} outside the file", pg, i, ov);
        const uint8_t* op = Page(ov);
        const uint32_t run = Load<uint32_t>(op + 12);
        if (Load<uint64_t>(op) != ov || (Load<uint16_t>(op + 10) & kTypeBits) != kOverflow || run < need) {
          return Bad("page {} node {}: page {} is not an overflow run of {} pages", pg, i, ov, need);
        }
        if (Status s = Claim(ov, run); !s.ok()) return s;
        counts->overflow += run;
        data = op + kPageHeader;
      } else if (flags == 0) {
        if (uint32_t{off} + kNodeHeader + ksize + dsize > psize_) return Bad("page {} node {}: {} data bytes overrun the page", pg, i, dsize);
        data = key + ksize;
      } else {
        return Bad("page {} node {}: flags {:#x} (this store writes no sub-databases or duplicates)", pg, i, flags);
      }
      ++counts->entries;
      if (db == 0) {
        if (Status s = ReadFreeList(data, dsize); !s.ok()) return Bad("page {} node {}: {}", pg, i, s.message());
      }
    }
    return Status::Ok();
  }

  // Main keys ascend bytewise (then by length); freelist keys are 8-byte txnids, ascending.
  Status CheckKeyOrder(int db, const uint8_t* key, uint16_t ksize) {
    if (db == 0 && ksize != 8) return Bad("freelist key of {} bytes", ksize);
    bool ascending = true;
    if (have_prev_) {
      if (db == 0) {
        ascending = Load<uint64_t>(key) > Load<uint64_t>(prev_key_.data());
      } else {
        const int c = std::memcmp(prev_key_.data(), key, std::min<size_t>(prev_key_.size(), ksize));
        ascending = c < 0 || (c == 0 && prev_key_.size() < ksize);
      }
    }
    if (!ascending) return Bad("keys out of order");
    prev_key_.assign(key, key + ksize);
    have_prev_ = true;
    return Status::Ok();
  }

  // A freelist record: uint64 count, then that many page numbers (records may be reserved
  // larger than their count).
  Status ReadFreeList(const uint8_t* data, uint64_t bytes) {
    if (bytes < 8 || bytes % 8 != 0) return Bad("freelist record of {} bytes", bytes);
    const uint64_t n = Load<uint64_t>(data);
    if (n > bytes / 8 - 1) return Bad("freelist record of {} bytes claims {} pages", bytes, n);
    for (uint64_t i = 1; i <= n; ++i) free_pages_.push_back(Load<uint64_t>(data + 8 * i));
    return Status::Ok();
  }

  const uint8_t* map_;
  uint64_t file_pages_;
  uint32_t psize_;
  uint64_t last_page_;
  std::vector<bool> used_;          // pages reached from a tree (meta pages excluded)
  std::vector<uint64_t> free_pages_;
  std::vector<uint8_t> prev_key_;
  bool have_prev_ = false;
};

// Unmaps and closes on scope exit.
struct MappedFile {
  int fd = -1;
  void* map = MAP_FAILED;
  size_t bytes = 0;
  ~MappedFile() {
    if (map != MAP_FAILED) ::munmap(map, bytes);
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Status CheckLmdbFile(const std::string& path, LmdbFileStats* stats) {
  MappedFile f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Status::IOError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Status::IOError(fmt::format("cannot stat '{}': {}", path, std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 2 * 512) return Status::Corruption(fmt::format("{} bytes, fewer than two meta pages", size));
  f.bytes = size;
  f.map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (f.map == MAP_FAILED) return Status::IOError(fmt::format("cannot map '{}': {}", path, std::strerror(errno)));
  const auto* map = static_cast<const uint8_t*>(f.map);

  // Meta 0 gives the page size; meta 1 sits one page in.
  const Meta m0 = ReadMeta(map);
  const uint32_t psize = m0.dbs[0].pad;
  if (psize < 512 || psize > 65536 || !std::has_single_bit(psize)) return Status::Corruption(fmt::format("page size {}", psize));
  if (size % psize != 0) return Status::Corruption(fmt::format("{} bytes, not a whole number of {}-byte pages", size, psize));
  const uint64_t file_pages = size / psize;
  if (file_pages < 2) return Status::Corruption(fmt::format("{} bytes, fewer than two meta pages", size));
  const Meta metas[2] = {m0, ReadMeta(map + psize)};
  for (int i = 0; i < 2; ++i) {
    const Meta& m = metas[i];
    if ((m.page_flags & kTypeBits) != kMeta || m.magic != kMagic || m.version != kDataVersion) {
      return Status::Corruption(fmt::format("meta page {}: flags {:#x}, magic {:#x}, version {}", i, m.page_flags, m.magic, m.version));
    }
    if (m.dbs[0].pad != psize) return Status::Corruption(fmt::format("meta page {}: page size {}, meta 0 says {}", i, m.dbs[0].pad, psize));
    if (m.last_page < 1) return Status::Corruption(fmt::format("meta page {}: last page {}", i, m.last_page));
    for (const DbRecord& db : m.dbs) {
      if (db.root != kInvalidPage && (db.root < 2 || db.root > m.last_page)) {
        return Status::Corruption(fmt::format("meta page {}: tree root {} outside [2, {}]", i, db.root, m.last_page));
      }
    }
  }
  if (metas[1].dbs[1].flags != 0 || metas[0].dbs[1].flags != 0) {
    return Status::Corruption("main database flags are not this store's (no flags)");
  }
  // LMDB reads the meta with the larger txnid (the first on a tie).
  const Meta& m = metas[metas[0].txnid < metas[1].txnid ? 1 : 0];
  Walker walker(map, file_pages, psize, m.last_page);
  for (int db = 0; db < 2; ++db) {
    if (Status s = walker.WalkTree(db, m.dbs[db], stats); !s.ok()) return s;
  }
  if (Status s = walker.CheckFreePages(); !s.ok()) return s;
  if (stats) {
    stats->file_bytes = size;
    stats->page_bytes = psize;
  }
  return Status::Ok();
}

}  // namespace cedar::cache::detail
