// safetensors files: a memory-mapped reader and a small writer. Format: u64 little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cedar {

// The released V4.1 checkpoint adds F8_E4M3 (FP8 weights), F8_E8M0 (their power-of-two block
// scales) and I8 (packed FP4 experts, two E2M1 values per byte); U8 and I8 are raw bytes. Those
// are kept as raw bytes + dtype here; kernels/quant_formats.h decodes them.
enum class DType { F32, BF16, I32, I64, F8_E4M3, F8_E8M0, I8, U8 };
const char* DTypeName(DType t);
size_t DTypeSize(DType t);

struct TensorInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping
  size_t nbytes = 0;
  int64_t NumElements() const;
};

// Read-only view of a mapped file. Throws std::runtime_error naming the file on any defect
// (truncated, bad header JSON, offsets outside the file, unknown dtype, size mismatch).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const TensorInfo* Find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, TensorInfo>& Tensors() const { return tensors_; }
  const std::map<std::string, std::string>& Metadata() const { return metadata_; }
  const std::string& Path() const { return path_; }
  // Copies a tensor to float (F32 or BF16 source). Throws if the dtype is not a float type.
  std::vector<float> ReadFloats(const std::string& name) const;
  // The same into `out` (room for the tensor's element count).
  void ReadFloatsInto(const std::string& name, float* out) const;
  // The tensor's floats in place in the mapping when it is F32 and 4-byte aligned there (valid
  // while this file is open), else ReadFloats' copy, kept in `scratch`. For a conversion that
  // reads each value once: a copy would first touch as many fresh pages as it reads.
  std::span<const float> FloatsView(const std::string& name, std::vector<float>& scratch) const;
  std::vector<int32_t> ReadInts(const std::string& name) const;
  // Drops this process's copies of the file's pages (they stay valid: a later read faults
  // them in again from the file). For callers that copied what they need, so the mapping no
  // longer counts in the process's resident memory.
  void ReleasePages() const;

 private:
  void Unmap();
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Accumulates tensors, then writes them (data 8-byte aligned). Tensors are copied.
class SafetensorsWriter {
 public:
  void AddF32(const std::string& name, std::vector<int64_t> shape, const float* data);
  void AddBF16(const std::string& name, std::vector<int64_t> shape, const float* data);  // rounds
  void AddI32(const std::string& name, std::vector<int64_t> shape, const int32_t* data);
  // Raw bytes of any dtype (F8_E4M3, F8_E8M0, I8, U8, ...); throws if the byte count does not match
  // the shape (an I8 tensor of packed FP4 has shape [rows, cols/2]: one element per byte).
  void AddRaw(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void Write(const std::string& path) const;  // throws on I/O failure

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

float BF16ToFloat(uint16_t v);
// An F32 or BF16 tensor's values as floats into `out` (its element count), on the thread pool.
void FloatsInto(const TensorInfo& t, float* out);
uint16_t FloatToBF16(float f);  // round to nearest even

}  // namespace cedar
