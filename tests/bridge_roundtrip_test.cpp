// Properties over random conversations and random model outputs:
//   - prefix stability: Render(m[0..k)) is a prefix of Render(m[0..k+1)), with and without
//     tools, and the generation prompt + the generated ids is a prefix of the next rendering;
//   - round trip: a canonically rendered assistant turn parses back to the same message and
//     re-renders to the same ids;
//   - streaming: the accumulated deltas equal the whole-output parse, for every prefix.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

bool StartsWith(const TokenIds& ids, const TokenIds& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// Random messages, JSON values and model outputs from a seeded generator.
class Random {
 public:
  Random(uint32_t seed, const ChatTemplate& tmpl)
      : rng_(seed), tok_(tmpl.tokenizer()), t_(tmpl.tokens()) {}

  int Below(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }
  bool Chance(double p) { return Below(1000) < static_cast<int>(p * 1000); }

  // Unicode, empty strings, JSON-ish text and strings that spell special tokens; with
  // `valid_utf8` false also ill-formed bytes.
  std::string Text(bool valid_utf8 = true) {
    // clang-format off
    static const std::string kValid[] = {
        "",        "hello",         " ",          "\n",       "héllo wörld", "日本語",
        "🙂",      "<|user|>",      "<|end|>",    "<|eos|>",  "<|tool_call|>", "<|/tool_call|>",
        "<|assistant|>", "<|tools|>", "\"",       "\\",       "\t",          "call_0\n",
        std::string(1, '\0'), R"({"name":"f","arguments":{}})", "{", "}"};
    // clang-format on
    static const std::string kInvalid[] = {"\xC3", "\xFF", "\xED\xA0\x80", "\xF0\x9F\x99"};
    std::string s;
    for (int n = Below(5); n > 0; --n) {
      s += !valid_utf8 && Chance(0.2) ? kInvalid[Below(std::size(kInvalid))]
                                      : kValid[Below(std::size(kValid))];
    }
    return s;
  }

  std::string Name() {
    static const char* kNames[] = {"get_weather", "search", "f", "tool-1", "naïve", "日本"};
    return kNames[Below(std::size(kNames))];
  }

  json Value(int depth) {
    switch (Below(depth > 0 ? 8 : 6)) {
      case 0: return Text();
      case 1: return static_cast<int64_t>(rng_()) - (1ll << 31);
      case 2: return std::vector<double>{0.5, -2.25, 1e10, 3.141592653589793}[Below(4)];
      case 3: return Chance(0.5);
      case 4: return nullptr;
      case 5: return Text();
      case 6: {
        json a = json::array();
        for (int n = Below(4); n > 0; --n) a.push_back(Value(depth - 1));
        return a;
      }
      default: return Object(depth - 1);
    }
  }

  json Object(int depth) {
    json o = json::object();
    for (int n = Below(4); n > 0; --n) {
      std::string key = Text();  // named first: keeps the draw order the same on every compiler
      o[key] = Value(depth);
    }
    return o;
  }

  // The request's `tools`: null, [] or 1..3 function schemas.
  json Tools() {
    const int kind = Below(4);
    if (kind == 0) return nullptr;
    json tools = json::array();
    for (int n = kind == 1 ? 0 : 1 + Below(3); n > 0; --n) {
      json fn = json::object();  // one draw per statement: the same order on every compiler
      fn["name"] = Name();
      fn["description"] = Text();
      fn["parameters"] = Object(2);
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return tools;
  }

  // A tool call as a client sends it back: arguments JSON, canonical or not.
  ToolCall Call(uint64_t& next_id) {
    const json args = Object(2);
    std::string name = Name();
    return {"call_" + std::to_string(next_id++), name, Chance(0.5) ? args.dump() : args.dump(1)};
  }

  TokenIds Encode(std::string_view text) { return tok_.Encode(text); }

  // What a model might emit after <|assistant|>: text, calls (well-formed or not), stray
  // specials, unused ids; usually ending in a stop id. `out_of_vocab` adds ids no model emits.
  TokenIds Generated(bool out_of_vocab = false) {
    TokenIds g;
    auto add = [&g](const TokenIds& ids) { g.insert(g.end(), ids.begin(), ids.end()); };
    for (int n = Below(6); n > 0; --n) {
      switch (Below(out_of_vocab ? 8 : 7)) {
        case 0:
        case 1: add(Encode(Text(false))); break;
        case 2: {  // a well-formed call, canonical or spaced
          const json args = Object(2);
          const std::string name = Name();
          const std::string text = Chance(0.7) ? ToolCallJson(name, args)
                                               : json{{"name", name}, {"arguments", args}}.dump(1);
          g.push_back(t_.tool_call);
          add(Encode(text));
          g.push_back(t_.tool_call_end);
          break;
        }
        case 3: {  // a call cut anywhere, closed or not
          const std::string name = Name();
          const std::string text = ToolCallJson(name, Object(1));
          g.push_back(t_.tool_call);
          add(Encode(text.substr(0, Below(static_cast<int>(text.size()) + 1))));
          if (Chance(0.5)) g.push_back(t_.tool_call_end);
          break;
        }
        case 4: {
          static const std::string kJunk[] = {R"({"arguments":{}})", R"({"name":"f"})", "[]",
                                              R"({"name":"","arguments":{}})", "nope"};
          g.push_back(t_.tool_call);
          add(Encode(kJunk[Below(std::size(kJunk))]));
          g.push_back(t_.tool_call_end);
          break;
        }
        case 5: {  // a stray special (stop ids included: what follows is ignored)
          const TokenId specials[] = {t_.bos,  t_.system,    t_.user,          t_.assistant,
                                      t_.tool, t_.tool_call, t_.tool_call_end, t_.tools,
                                      t_.end,  t_.eos};
          g.push_back(specials[Below(std::size(specials))]);
          break;
        }
        case 6: g.push_back(266 + Below(tok_.vocab_size() - 266)); break;  // unused id
        default: g.push_back(Chance(0.5) ? -1 - Below(5) : tok_.vocab_size() + Below(5)); break;
      }
    }
    const int end = Below(8);
    if (end < 5)
      g.push_back(t_.end);
    else if (end < 6)
      g.push_back(t_.eos);
    return g;
  }

  // A valid conversation of n messages (after an optional system message). Tool results
  // answer earlier calls; some assistant turns carry the raw ids they were generated as.
  std::vector<Message> Conversation(int n) {
    std::vector<Message> conv;
    std::vector<std::string> call_ids;
    uint64_t next_id = 0;
    if (Chance(0.5)) conv.push_back(Msg(Role::kSystem, Text(false)));
    for (int i = 0; i < n; ++i) {
      const int r = Below(10);
      if (r < 3) {
        conv.push_back(Msg(Role::kUser, Text(false)));
      } else if (r < 5) {
        Message m = Msg(Role::kAssistant, Text(false));
        for (int c = Below(3); c > 0; --c) m.tool_calls.push_back(Call(next_id));
        conv.push_back(m);
      } else if (r < 7) {
        const TokenIds g = Generated();
        const AssistantOutput out = ParseAssistantOutput(tok_, g, {"call_", next_id});
        next_id += out.tool_calls.size();
        conv.push_back(ToMessage(out, g));
      } else if (r < 9 && !call_ids.empty()) {
        Message m = Msg(Role::kTool, Text(false));
        m.tool_call_id = call_ids[Below(static_cast<int>(call_ids.size()))];
        conv.push_back(m);
      } else {
        conv.push_back(Msg(r < 9 ? Role::kUser : Role::kSystem, Text(false)));
      }
      for (const ToolCall& c : conv.back().tool_calls) call_ids.push_back(c.id);
    }
    return conv;
  }

  static Message Msg(Role role, std::string content) {
    Message m;
    m.role = role;
    m.content = std::move(content);
    return m;
  }

 private:
  std::mt19937 rng_;
  const Tokenizer& tok_;
  const ChatTokens& t_;
};

TEST_CASE("Property: every rendering extends the previous one (with and without tools)") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  for (uint32_t seed = 0; seed < 500; ++seed) {
    CAPTURE(seed);
    Random r(seed, tmpl);
    const json tools = r.Tools();
    const std::vector<Message> conv = r.Conversation(r.Below(12));
    const std::span<const Message> all(conv);
    TokenIds prev = tmpl.Render(all.first(0), tools);
    for (size_t k = 0; k < conv.size(); ++k) {
      CAPTURE(k);
      const TokenIds next = tmpl.Render(all.first(k + 1), tools);
      REQUIRE(StartsWith(next, prev));
      REQUIRE(next.size() > prev.size());
      if (conv[k].role == Role::kAssistant) {
        // The generation prompt is shared too, and a generated turn continues it verbatim.
        TokenIds gen = tmpl.RenderGenerationPrompt(all.first(k), tools);
        REQUIRE(StartsWith(next, gen));
        if (conv[k].generated) {
          gen.insert(gen.end(), conv[k].generated->begin(), conv[k].generated->end());
          if (gen.back() != tmpl.tokens().end) gen.push_back(tmpl.tokens().end);
          REQUIRE(next == gen);
        }
      }
      prev = next;
    }
    // Message text never creates special ids: without generated turns the number of <|end|>
    // ids is exactly one per message (plus the tools block).
    if (std::none_of(conv.begin(), conv.end(), [](const Message& m) { return m.generated; })) {
      const bool has_tools = tools.is_array() && !tools.empty();
      CHECK(std::count(prev.begin(), prev.end(), tmpl.tokens().end) ==
            static_cast<long>(conv.size() + has_tools));
    }
  }
}

TEST_CASE("Property: a canonically rendered assistant turn parses back and re-renders equal") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  for (uint32_t seed = 0; seed < 500; ++seed) {
    CAPTURE(seed);
    Random r(1000 + seed, tmpl);
    const json tools = r.Tools();
    std::vector<Message> conv = r.Conversation(r.Below(6));
    uint64_t next_id = 1000;  // above any id the conversation used
    Message turn = Random::Msg(Role::kAssistant, r.Text());
    for (int c = r.Below(4); c > 0; --c) turn.tool_calls.push_back(r.Call(next_id));

    const TokenIds prompt = tmpl.RenderGenerationPrompt(conv, tools);
    conv.push_back(turn);
    const TokenIds full = tmpl.Render(conv, tools);
    REQUIRE(StartsWith(full, prompt));
    const TokenIds generated(full.begin() + prompt.size(), full.end());

    const AssistantOutput out = ParseAssistantOutput(tok, generated, {"call_", 1000});
    CHECK(out.stopped);
    CHECK(out.content == turn.content);
    REQUIRE(out.tool_calls.size() == turn.tool_calls.size());
    for (size_t c = 0; c < out.tool_calls.size(); ++c) {
      const ToolCall& want = turn.tool_calls[c];
      CHECK(out.tool_calls[c] ==
            ToolCall{want.id, want.name, CanonicalJson(json::parse(want.arguments))});
    }
    conv.back() = ToMessage(out);
    CHECK(tmpl.Render(conv, tools) == full);
    conv.back() = ToMessage(out, generated);
    CHECK(tmpl.Render(conv, tools) == full);
  }
}

TEST_CASE("Property: streaming deltas add up to the whole-output parse, for every prefix") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  for (uint32_t seed = 0; seed < 400; ++seed) {
    CAPTURE(seed);
    Random r(5000 + seed, tmpl);
    const TokenIds g = r.Generated(/*out_of_vocab=*/true);
    const ToolCallIds ids{"call_" + std::to_string(seed) + "_", seed};
    for (size_t len = 0; len <= g.size(); ++len) {
      CAPTURE(len);
      const std::span<const TokenId> prefix(g.data(), len);
      const AssistantOutput whole = ParseAssistantOutput(tok, prefix, ids);
      ToolCallStreamParser parser(tok, ids);
      AssistantOutput streamed;
      for (TokenId id : prefix) {
        for (const StreamDelta& d : parser.Push(id)) ApplyDelta(d, streamed);
      }
      for (const StreamDelta& d : parser.Finish()) ApplyDelta(d, streamed);
      streamed.stopped = parser.stopped();
      REQUIRE(streamed == whole);
      REQUIRE(RepairUtf8(whole.content) == whole.content);
    }
  }
}

}  // namespace
}  // namespace cedar::bridge
