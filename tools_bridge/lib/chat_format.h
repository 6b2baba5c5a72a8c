// Which prompt format a model uses, as its config.json says ("chat_format"), and the pieces
// of the bridge that implement each:
//   kCedar        our own template over the model's byte tokenizer: ChatTemplate (ids in and
//                 out, chat_template.h) and ToolCallStreamParser (tool_calls.h);
//   kDeepseekV41  the released DeepSeek-V4.1 encoding: dsml::RenderSegments (text, then the BPE
//                 tokenizer; dsml_encoding.h) and dsml::StreamParser over the detokenised output
//                 text (dsml_parser.h).
// The two differ in kind (ids vs text), so a caller switches on the format once per model.
#pragma once
#include <optional>
#include <string_view>

#include "engine/config.h"

namespace cedar::bridge {

enum class ChatFormat { kCedar, kDeepseekV41 };

// "cedar" / "deepseek_v41"; nullopt for anything else.
std::optional<ChatFormat> ChatFormatFromName(std::string_view name);
std::string_view ChatFormatName(ChatFormat format);
// The format `config` declares. Throws std::invalid_argument naming the value if unknown
// (ModelConfig::Validate reports it first for configs loaded from disk).
ChatFormat ChatFormatOf(const ModelConfig& config);

}  // namespace cedar::bridge
