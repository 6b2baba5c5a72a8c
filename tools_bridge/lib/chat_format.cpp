#include "tools_bridge/lib/chat_format.h"

#include <stdexcept>
#include <string>

namespace cedar::bridge {

std::optional<ChatFormat> ChatFormatFromName(std::string_view name) {
  if (name == "cedar") return ChatFormat::kCedar;
  if (name == "deepseek_v41") return ChatFormat::kDeepseekV41;
  return std::nullopt;
}

std::string_view ChatFormatName(ChatFormat format) {
  return format == ChatFormat::kCedar ? "cedar" : "deepseek_v41";
}

ChatFormat ChatFormatOf(const ModelConfig& config) {
  if (auto f = ChatFormatFromName(config.chat_format)) return *f;
  throw std::invalid_argument("chat_format: expected \"cedar\" or \"deepseek_v41\", found \"" +
                              config.chat_format + "\"");
}

}  // namespace cedar::bridge
