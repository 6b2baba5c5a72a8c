#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/thread_pool.h"

namespace cedar {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
  }
  return "?";
}

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F8_E4M3:
    case DType::F8_E8M0:
    case DType::I8:
    case DType::U8: return 1;
  }
  return 0;
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

float BF16ToFloat(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& why) { throw std::runtime_error("safetensors: " + path + ": " + why); };
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open (" + std::string(std::strerror(errno)) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat");
  }
  map_size_ = size_t(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    fail("file is " + std::to_string(map_size_) + " bytes, too short for a header (truncated?)");
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("mmap failed");
  }
  const auto* base = static_cast<const uint8_t*>(map_);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > map_size_ - 8) {
    Unmap();
    fail("header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(map_size_) + " (truncated?)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(base + 8), header_len));
  } catch (const std::exception& e) {
    Unmap();
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  const uint8_t* data = base + 8 + header_len;
  const size_t data_size = map_size_ - 8 - header_len;
  try {
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        for (auto& [k, mv] : v.items()) metadata_[k] = mv.is_string() ? mv.get<std::string>() : mv.dump();
        continue;
      }
      TensorInfo t;
      const std::string dt = v.at("dtype").get<std::string>();
      if (dt == "F32") t.dtype = DType::F32;
      else if (dt == "BF16") t.dtype = DType::BF16;
      else if (dt == "I32") t.dtype = DType::I32;
      else if (dt == "I64") t.dtype = DType::I64;
      else if (dt == "F8_E4M3") t.dtype = DType::F8_E4M3;
      else if (dt == "F8_E8M0") t.dtype = DType::F8_E8M0;
      else if (dt == "I8") t.dtype = DType::I8;
      else if (dt == "U8") t.dtype = DType::U8;
      else throw std::runtime_error("tensor '" + name + "': unsupported dtype " + dt + " (expected F32, BF16, I32, I64, F8_E4M3, F8_E8M0, I8 or U8)");
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        throw std::runtime_error("tensor '" + name + "': data offsets outside the file (truncated?)");
      t.nbytes = off[1] - off[0];
      if (int64_t(t.nbytes) != t.NumElements() * int64_t(DTypeSize(t.dtype)))
        throw std::runtime_error("tensor '" + name + "': " + std::to_string(t.nbytes) + " bytes do not match its shape and dtype");
      t.data = data + off[0];
      tensors_[name] = t;
    }
  } catch (const std::exception& e) {
    Unmap();
    fail(e.what());
  }
}

void SafetensorsFile::Unmap() {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::ReleasePages() const {
  if (map_) ::madvise(map_, map_size_, MADV_DONTNEED);
}

void FloatsInto(const TensorInfo& t, float* out) {
  // On the pool's threads: a load is mostly first touches of fresh pages (the kernel zeroing each
  // one) and reads of the mapping (medium at f32 on this project's 2-core VM, alternating runs:
  // 5.3-6.3 -> 4.3-5.0 s).
  if (t.dtype == DType::F32) {
    kernels::ParallelCopy(out, t.data, t.nbytes);
    return;
  }
  kernels::ParallelFor(t.NumElements(), int64_t(1) << 20, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      uint16_t v;
      std::memcpy(&v, t.data + 2 * i, 2);
      out[i] = BF16ToFloat(v);
    }
  });
}

std::vector<float> SafetensorsFile::ReadFloats(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (!t) throw std::runtime_error("safetensors: " + path_ + ": missing tensor '" + name + "'");
  std::vector<float> out(size_t(t->NumElements()));
  ReadFloatsInto(name, out.data());
  return out;
}

void SafetensorsFile::ReadFloatsInto(const std::string& name, float* out) const {
  const TensorInfo* t = Find(name);
  if (!t) throw std::runtime_error("safetensors: " + path_ + ": missing tensor '" + name + "'");
  if (t->dtype == DType::F32 || t->dtype == DType::BF16) {
    FloatsInto(*t, out);
  } else {
    throw std::runtime_error("safetensors: " + path_ + ": tensor '" + name + "' has dtype " + DTypeName(t->dtype) + ", expected F32 or BF16");
  }
}

std::span<const float> SafetensorsFile::FloatsView(const std::string& name, std::vector<float>& scratch) const {
  const TensorInfo* t = Find(name);
  if (t && t->dtype == DType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
    return {reinterpret_cast<const float*>(t->data), size_t(t->NumElements())};
  scratch = ReadFloats(name);  // throws naming a missing tensor or another dtype
  return scratch;
}

std::vector<int32_t> SafetensorsFile::ReadInts(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (!t) throw std::runtime_error("safetensors: " + path_ + ": missing tensor '" + name + "'");
  std::vector<int32_t> out(size_t(t->NumElements()));
  if (t->dtype == DType::I32) {
    std::memcpy(out.data(), t->data, t->nbytes);
  } else if (t->dtype == DType::I64) {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, t->data + 8 * i, 8);
      out[i] = int32_t(v);
    }
  } else {
    throw std::runtime_error("safetensors: " + path_ + ": tensor '" + name + "' has dtype " + DTypeName(t->dtype) + ", expected I32 or I64");
  }
  return out;
}

namespace {
std::vector<uint8_t> Bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}
int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
}  // namespace

void SafetensorsWriter::AddF32(const std::string& name, std::vector<int64_t> shape, const float* data) {
  const size_t n = size_t(Count(shape));
  entries_[name] = Entry{DType::F32, std::move(shape), Bytes(data, n * 4)};
}

void SafetensorsWriter::AddBF16(const std::string& name, std::vector<int64_t> shape, const float* data) {
  const size_t n = size_t(Count(shape));
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = FloatToBF16(data[i]);
  entries_[name] = Entry{DType::BF16, std::move(shape), Bytes(v.data(), n * 2)};
}

void SafetensorsWriter::AddI32(const std::string& name, std::vector<int64_t> shape, const int32_t* data) {
  const size_t n = size_t(Count(shape));
  entries_[name] = Entry{DType::I32, std::move(shape), Bytes(data, n * 4)};
}

void SafetensorsWriter::AddRaw(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes) {
  const size_t want = size_t(Count(shape)) * DTypeSize(dtype);
  if (want != nbytes)
    throw std::invalid_argument("safetensors writer: tensor '" + name + "': expected " + std::to_string(want) + " bytes for its shape and dtype " +
                                DTypeName(dtype) + ", found " + std::to_string(nbytes));
  entries_[name] = Entry{dtype, std::move(shape), Bytes(data, nbytes)};
}

void SafetensorsWriter::Write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    header[name] = {{"dtype", DTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw std::runtime_error("safetensors: cannot write " + tmp);
    uint64_t len = h.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(h.data(), std::streamsize(h.size()));
    for (const auto& [name, e] : entries_) out.write(reinterpret_cast<const char*>(e.bytes.data()), std::streamsize(e.bytes.size()));
    if (!out) throw std::runtime_error("safetensors: write failed for " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("safetensors: cannot rename " + tmp + " to " + path);
}

}  // namespace cedar
