// Cache budgets as people write them: "16G", "512MiB", "1.5T", "4096", "0".
#pragma once
#include <cstdint>
#include <string>

namespace cedar::cache {

// Bytes for a size with an optional binary unit K, M, G or T (also KiB.., KB..: all powers of
// 1024). Throws std::invalid_argument naming the input on anything else or a negative size.
uint64_t ParseByteSize(const std::string& s);

}  // namespace cedar::cache
