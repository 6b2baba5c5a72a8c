#include "tools_bridge/lib/dsml_encoding.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "tools_bridge/lib/py_json.h"

namespace cedar::bridge::dsml {
namespace {

using ojson = nlohmann::ordered_json;

// The tools block, split around the schemas (one JSON object per line). Text from the released
// encoder's TOOLS_TEMPLATE with the V4.1 spaced tag names (docs/chat-encoding.md §Tools).
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

[[noreturn]] void Fail(const std::string& what) { throw ChatTemplateError(what); }

// The name a tool is shown under: "namespace::name" when the tool (or its function) names a
// namespace, as a string or as {"name", "description"}; a name already "a::b" keeps its form.
// Returns the namespace description (empty if none) through `ns_description`.
std::string QualifiedName(const ojson& function, const ojson& tool, size_t i,
                          std::string* ns_description) {
  auto name_it = function.find("name");
  if (name_it == function.end() || !name_it->is_string()) {
    Fail("tools[" + std::to_string(i) + "].function.name: expected a string");
  }
  std::string name = name_it->get<std::string>();
  const ojson* ns = nullptr;
  if (auto it = tool.find("namespace"); it != tool.end() && !it->is_null()) ns = &*it;
  if (auto it = function.find("namespace"); !ns && it != function.end() && !it->is_null()) {
    ns = &*it;
  }
  std::string ns_name;
  if (ns != nullptr && ns->is_string()) ns_name = ns->get<std::string>();
  if (ns != nullptr && ns->is_object()) {
    ns_name = ns->value("name", "");
    *ns_description = ns->value("description", "");
  }
  if (ns_name.empty() || name.find("::") != std::string::npos) return name;
  return ns_name + "::" + name;
}

void AppendInvoke(const ToolCall& call, std::string& out) {
  out += "<｜DSML｜ invoke name=\"";
  out += call.name;
  out += "\">\n";
  // arguments: JSON text of an object; a JSON string that holds JSON is decoded once more
  // (clients that double-encode); anything else is one string parameter "arguments".
  ojson args = ojson::parse(call.arguments, nullptr, false);
  if (!args.is_discarded() && args.is_string()) {
    ojson inner = ojson::parse(args.get<std::string>(), nullptr, false);
    if (!inner.is_discarded()) args = std::move(inner);
  }
  if (args.is_discarded() || !args.is_object()) args = ojson{{"arguments", call.arguments}};
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = it.value().is_string();
    out += "<｜DSML｜ parameter name=\"";
    out += it.key();
    out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    out += is_string ? it.value().get_ref<const std::string&>() : PyJsonDumps(it.value());
    out += kParamClose;
  }
  out += "\n";
  out += kInvokeClose;
}

// One block of a merged user turn: text, or the result of the call `id`.
struct Block {
  bool tool = false;
  std::string id;
  std::string text;
};

// A message after merging: system, user (merged user/tool run) or assistant.
struct Item {
  Role role = Role::kUser;
  std::string text;               // system content; user: the joined blocks
  const Message* msg = nullptr;   // assistant
  int src = -1;                   // assistant: index into the caller's messages
  bool tools = false;             // system item that carries the tools block
};

// merge_tool_messages + sort_tool_results_by_call_order of the released encoder.
std::vector<Item> Merge(std::span<const Message> messages, bool has_tools) {
  std::vector<Item> items;
  if (has_tools && (messages.empty() || messages.front().role != Role::kSystem)) {
    items.push_back({Role::kSystem, "", nullptr, -1, true});
  }
  std::map<std::string, int> call_order;  // id -> position in the latest assistant's calls
  std::vector<Block> blocks;
  auto flush_user = [&] {
    if (blocks.empty()) return;
    // Tool results take the slots tool results had, sorted by call order (stable; unknown ids
    // sort as position 0), only when there are several and the latest calls had ids.
    std::vector<Block*> results;
    for (Block& b : blocks) {
      if (b.tool) results.push_back(&b);
    }
    if (results.size() > 1 && !call_order.empty()) {
      std::vector<Block> sorted;
      for (Block* b : results) sorted.push_back(*b);
      auto key = [&](const Block& b) {
        auto it = call_order.find(b.id);
        return it == call_order.end() ? 0 : it->second;
      };
      std::stable_sort(sorted.begin(), sorted.end(),
                       [&](const Block& a, const Block& b) { return key(a) < key(b); });
      for (size_t k = 0; k < results.size(); ++k) *results[k] = std::move(sorted[k]);
    }
    Item item;
    item.role = Role::kUser;
    for (size_t k = 0; k < blocks.size(); ++k) {
      if (k > 0) item.text += "\n\n";
      if (blocks[k].tool) item.text += "<tool_result>";
      item.text += blocks[k].text;
      if (blocks[k].tool) item.text += "</tool_result>";
    }
    items.push_back(std::move(item));
    blocks.clear();
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    switch (m.role) {
      case Role::kUser: blocks.push_back({false, "", m.content}); break;
      case Role::kTool: blocks.push_back({true, m.tool_call_id, m.content}); break;
      case Role::kSystem:
        flush_user();
        items.push_back({Role::kSystem, m.content, nullptr, -1, has_tools && i == 0});
        break;
      case Role::kAssistant:
        flush_user();
        if (!m.tool_calls.empty()) {
          call_order.clear();
          for (size_t k = 0; k < m.tool_calls.size(); ++k) {
            if (!m.tool_calls[k].id.empty()) call_order[m.tool_calls[k].id] = static_cast<int>(k);
          }
        }
        items.push_back({Role::kAssistant, "", &m, static_cast<int>(i), false});
        break;
    }
  }
  flush_user();
  return items;
}

// find_last_user_index: the last user turn, or a system message past index 0.
int LastUserIndex(const std::vector<Item>& items) {
  for (int i = static_cast<int>(items.size()) - 1; i >= 0; --i) {
    if (items[i].role == Role::kUser || (items[i].role == Role::kSystem && i > 0)) return i;
  }
  return -1;
}

// Appends template text, merging with a preceding template segment.
void Emit(Rendered& r, std::string_view text) {
  if (text.empty()) return;
  if (r.segments.empty() || r.segments.back().message != -1) r.segments.push_back({});
  r.segments.back().text += text;
}

void EmitAssistant(const Item& item, bool keep_reasoning, const Options& options, Rendered& r) {
  const Message& m = *item.msg;
  if (m.raw.has_value()) {
    // Replay: the generated text itself. When this turn's reasoning is dropped the prompt
    // already has "</think>", so what follows the model's "</think>" is rendered.
    const std::string& raw = *m.raw;
    size_t offset = 0;
    bool usable = true;
    if (options.thinking && !keep_reasoning) {
      const size_t end = raw.find(kThinkEnd);
      usable = end != std::string::npos;
      offset = usable ? end + kThinkEnd.size() : 0;
    }
    if (usable) {
      ++r.raw_turns;
      if (offset < raw.size()) r.segments.push_back({raw.substr(offset), item.src, offset});
      Emit(r, kEos);
      return;
    }
  }
  if (!m.tool_calls.empty()) ++r.canonical_tool_call_turns;
  std::string text;
  if (options.thinking && keep_reasoning) {
    text += m.reasoning;
    text += kThinkEnd;
  }
  text += m.content;
  if (!m.tool_calls.empty()) {
    text += "\n\n";
    text += RenderCalls(m.tool_calls);
  }
  text += kEos;
  Emit(r, text);
}

}  // namespace

int ParseReasoningEffort(std::string_view value) {
  if (value == "low") return 50;
  if (value == "high") return 75;
  if (value == "max") return 100;
  int n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 100) {
    Fail("reasoning_effort: expected \"low\", \"high\", \"max\" or an integer 1..100, found \"" +
         std::string(value) + "\"");
  }
  return n;
}

std::string Rendered::Text() const {
  std::string out;
  for (const Segment& s : segments) out += s.text;
  return out;
}

std::string RenderCalls(std::span<const ToolCall> calls) {
  std::string out(kCallsOpen);
  out += '\n';
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += '\n';
    AppendInvoke(calls[i], out);
  }
  out += '\n';
  out += kCallsClose;
  return out;
}

std::string RenderTools(const ojson& tools) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    auto fn = tool.is_object() ? tool.find("function") : tool.end();
    if (!tool.is_object() || fn == tool.end() || !fn->is_object()) {
      Fail("tools[" + std::to_string(i) + "].function: expected an object");
    }
    ojson f = *fn;
    std::string ns_description;
    f["name"] = QualifiedName(f, tool, i, &ns_description);
    if (!ns_description.empty()) {
      const std::string desc = f.contains("description") && f["description"].is_string()
                                   ? f["description"].get<std::string>()
                                   : "";
      f["description"] = ns_description + "\n" + desc;
    }
    f.erase("namespace");
    if (i > 0) schemas += '\n';
    schemas += PyJsonDumps(f);
  }
  std::string out(kToolsHead);
  out += schemas;
  out += kToolsTail;
  return out;
}

Rendered RenderSegments(std::span<const Message> messages, const ojson& tools,
                        const Options& options) {
  if (!tools.is_null() && !tools.is_array()) Fail("tools: expected an array or null");
  if (options.reasoning_effort < 1 || options.reasoning_effort > 100) {
    Fail("reasoning_effort: expected 1..100, found " + std::to_string(options.reasoning_effort));
  }
  const bool has_tools = tools.is_array() && !tools.empty();
  std::vector<Item> items = Merge(messages, has_tools);
  // With tools, every turn keeps its reasoning (the released encoder's effective_drop_thinking).
  const bool drop = options.drop_thinking && !has_tools;
  const int last_user = LastUserIndex(items);

  Rendered r;
  if (options.add_bos) Emit(r, kBos);
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const Item& item = items[i];
    if (i == 0 && (options.thinking || item.role == Role::kSystem)) Emit(r, kSystem);
    if (i == 0 && options.thinking) {
      Emit(r, "Reasoning Effort: " + std::to_string(options.reasoning_effort) +
                  " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
    }
    switch (item.role) {
      case Role::kSystem:
        if (i > 0) Emit(r, kSystem);
        Emit(r, item.text);
        if (item.tools) Emit(r, "\n\n" + RenderTools(tools));
        break;
      case Role::kUser:
      case Role::kTool:
        Emit(r, kUser);
        Emit(r, item.text);
        break;
      case Role::kAssistant:
        EmitAssistant(item, !drop || i > last_user, options, r);
        break;
    }
    // The generation header: after a user turn (or a later system message) that is last or is
    // followed by an assistant turn.
    const bool next_is_assistant =
        i + 1 < static_cast<int>(items.size()) && items[i + 1].role == Role::kAssistant;
    const bool last = i + 1 == static_cast<int>(items.size());
    if ((next_is_assistant || last) &&
        (item.role == Role::kUser || (item.role == Role::kSystem && i > 0))) {
      Emit(r, kAssistant);
      Emit(r, options.thinking && (!drop || i >= last_user) ? kThinkStart : kThinkEnd);
    }
  }
  return r;
}

std::string Render(std::span<const Message> messages, const ojson& tools, const Options& options) {
  return RenderSegments(messages, tools, options).Text();
}

}  // namespace cedar::bridge::dsml
