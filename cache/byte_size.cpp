#include "cache/byte_size.h"

#include <cmath>
#include <stdexcept>

namespace cedar::cache {

uint64_t ParseByteSize(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + s + "' is not a size (expected e.g. 16G, 512M, 0)");
  }
  std::string unit = s.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();  // "GiB"
  double mult = 1;
  if (unit.size() == 1) {
    switch (unit[0]) {
      case 'k': case 'K': mult = 0x1p10; break;
      case 'm': case 'M': mult = 0x1p20; break;
      case 'g': case 'G': mult = 0x1p30; break;
      case 't': case 'T': mult = 0x1p40; break;
      default: throw std::invalid_argument("'" + s + "': unknown size unit (expected K, M, G or T)");
    }
  } else if (!unit.empty()) {
    throw std::invalid_argument("'" + s + "': unknown size unit (expected K, M, G or T)");
  }
  if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("'" + s + "': a size must be >= 0");
  // Beyond 2^63 the conversion below would wrap ("1e30" became a small number).
  if (v * mult >= 0x1p63) throw std::invalid_argument("'" + s + "': too large (at most 2^63 bytes)");
  return uint64_t(std::llround(v * mult));
}

}  // namespace cedar::cache
