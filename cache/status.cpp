#include "cache/status.h"

namespace cedar::cache {

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: name = "InvalidArgument"; break;
    case StatusCode::kNotFound: name = "NotFound"; break;
    case StatusCode::kResourceExhausted: name = "ResourceExhausted"; break;
    case StatusCode::kIOError: name = "IOError"; break;
    case StatusCode::kCorruption: name = "Corruption"; break;
    case StatusCode::kFailedPrecondition: name = "FailedPrecondition"; break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace cedar::cache
