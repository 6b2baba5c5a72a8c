// The remembered-generation lookup (server/generation_memory.h): on a conversation of tens of
// thousands of assistant messages it stays linear and reattaches exactly the remembered turns;
// on random conversations it agrees with the plain reference (render every prefix, compare).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "server/generation_memory.h"
#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::test {
namespace {

using bridge::Message;
using bridge::Role;

Message Said(Role role, const std::string& content) {
  Message m;
  m.role = role;
  m.content = content;
  return m;
}
Message Assistant(const std::string& content) { return Said(Role::kAssistant, content); }
Message User(const std::string& content) { return Said(Role::kUser, content); }

struct Remembered {
  bridge::TokenIds gen_prompt;
  Message shown;
  bridge::TokenIds generated;
};

// The reference: for each assistant message, render its whole prefix and look for the newest
// remembered turn with that exact prompt and shown message.
int ReferenceReattach(const bridge::ChatTemplate& t, const std::vector<Remembered>& memory, std::vector<Message>& messages) {
  int attached = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    Message& m = messages[i];
    if (m.role != Role::kAssistant || m.generated) continue;
    const bridge::TokenIds gp = t.RenderGenerationPrompt(std::span<const Message>(messages.data(), i));
    for (auto it = memory.rbegin(); it != memory.rend(); ++it) {
      if (it->gen_prompt == gp && it->shown.content == m.content && it->shown.tool_calls == m.tool_calls) {
        m.generated = it->generated;
        attached++;
        break;
      }
    }
  }
  return attached;
}

TEST_CASE("generation memory: [user, assistant x 40000] reattaches exactly the remembered turns, linearly") {
  bridge::ByteTokenizer tok(512);
  bridge::ChatTemplate t(tok);
  server::GenerationMemory memory(256);
  const std::string reply = "<an earlier reply>";
  // A real conversation of K turns, each turn's output remembered with ids that differ from
  // the canonical rendering (so a reattachment is visible).
  constexpr int kTurns = 40;
  std::vector<Message> context = {User("start")};
  std::vector<bridge::TokenIds> generated;
  for (int k = 0; k < kTurns; ++k) {
    bridge::TokenIds g = tok.Encode(" odd spacing " + std::to_string(k));
    g.push_back(t.tokens().end);
    memory.Remember("s", t.RenderGenerationPrompt(context), Assistant(reply), g);
    Message m = Assistant(reply);
    m.generated = g;
    context.push_back(m);
    generated.push_back(g);
  }
  constexpr int kN = 40000;
  std::vector<Message> request = {User("start")};
  for (int i = 0; i < kN; ++i) request.push_back(Assistant(reply));
  const auto t0 = std::chrono::steady_clock::now();
  const int attached = memory.Reattach("s", t, request, nullptr);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Reattach over %d assistant messages (%zu bytes of content): %.1f ms\n", kN, size_t(kN) * reply.size(), ms);
  CHECK(attached == kTurns);
  for (int i = 1; i <= kN; ++i) {
    if (i <= kTurns) {
      REQUIRE(request[size_t(i)].generated);
      CHECK(*request[size_t(i)].generated == generated[size_t(i - 1)]);
    } else if (request[size_t(i)].generated) {
      FAIL("message ", i, " got ids no turn generated there");
    }
  }
  // Another scope sees none of it.
  std::vector<Message> other = {User("start"), Assistant(reply)};
  CHECK(memory.Reattach("other", t, other, nullptr) == 0);
  CHECK(!other[1].generated);
}

TEST_CASE("generation memory: random conversations agree with rendering every prefix") {
  bridge::ByteTokenizer tok(512);
  bridge::ChatTemplate t(tok);
  std::mt19937 rng(7);
  const std::vector<std::string> replies = {"a", "b", "ab", ""};
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    server::GenerationMemory memory(1000);
    std::vector<Remembered> reference;
    std::vector<Message> context = {User("u" + std::to_string(trial % 3))};
    // Remember turns along a conversation, sometimes with a user message between them.
    for (int k = 0; k < 12; ++k) {
      if (rng() % 3 == 0) context.push_back(User(std::to_string(rng() % 2)));
      const Message shown = Assistant(replies[rng() % replies.size()]);
      bridge::TokenIds g = tok.Encode("g" + std::to_string(rng() % 3));
      if (rng() % 2) g.push_back(t.tokens().end);
      const bridge::TokenIds gp = t.RenderGenerationPrompt(context);
      memory.Remember("s", gp, shown, g);
      reference.push_back({gp, shown, g});
      Message m = shown;
      if (rng() % 4 != 0) m.generated = g;  // the client usually replays what it was shown
      context.push_back(m);
    }
    // The request: the conversation as a client sends it back (no ids), sometimes edited.
    std::vector<Message> request;
    for (const Message& m : context) {
      Message c = m;
      c.generated.reset();
      if (c.role == Role::kAssistant && rng() % 6 == 0) c.content = replies[rng() % replies.size()];
      request.push_back(c);
    }
    std::vector<Message> expected = request;
    const int want = ReferenceReattach(t, reference, expected);
    const int got = memory.Reattach("s", t, request, nullptr);
    CHECK(got == want);
    CHECK(request == expected);
  }
}

}  // namespace
}  // namespace cedar::test
