// ChooseDevice (engine/backend.h), the rule by which `cedar serve --device` picks the backend
// once the model is loaded, tested without a GPU: "auto" falls back to the CPU (with a note
// naming the switches) when the CUDA engine refuses the model, an explicit "cuda" keeps the
// clear error; and CudaRefusal names the released switches of a config.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "engine/backend.h"
#include "engine/config.h"

using cedar::ChooseDevice;
using cedar::DeviceChoice;

namespace {

// The refusal of a config with one released switch on (mHC with 4 streams).
std::string MhcRefusal() {
  cedar::ModelConfig c;
  c.hc_mult = 4;
  return cedar::CudaRefusal(c);
}

}  // namespace

TEST_CASE("CudaRefusal: empty for today's models, names each released switch otherwise") {
  CHECK(cedar::CudaRefusal(cedar::ModelConfig{}).empty());
  const std::string why = MhcRefusal();
  CHECK(why.find("hc_mult 4") != std::string::npos);
  CHECK(why.find("use --device cpu") != std::string::npos);
}

TEST_CASE("auto: cuda when usable and accepted, else the cpu; a refusal is noted") {
  const std::string refusal = MhcRefusal();
  DeviceChoice c = ChooseDevice("auto", true, "", "");
  CHECK(c.device == "cuda");
  CHECK(c.note.empty());
  CHECK(c.error.empty());

  c = ChooseDevice("auto", true, "", refusal);  // a GPU host, a model with released switches
  CHECK(c.device == "cpu");
  CHECK(c.error.empty());
  CHECK(c.note.find("--device auto") != std::string::npos);
  CHECK(c.note.find("hc_mult 4") != std::string::npos);

  c = ChooseDevice("auto", false, "no CUDA device", refusal);  // no GPU: nothing to note
  CHECK(c.device == "cpu");
  CHECK(c.note.empty());
  c = ChooseDevice("auto", false, "no CUDA device", "");
  CHECK(c.device == "cpu");
}

TEST_CASE("cuda: explicit, keeps the clear errors") {
  const std::string refusal = MhcRefusal();
  DeviceChoice c = ChooseDevice("cuda", true, "", refusal);
  CHECK(c.device.empty());
  CHECK(c.error == "--device cuda: " + refusal);

  c = ChooseDevice("cuda", false, "this build has no CUDA backend", "");
  CHECK(c.device.empty());
  CHECK(c.error == "--device cuda: this build has no CUDA backend");

  c = ChooseDevice("cuda", true, "", "");
  CHECK(c.device == "cuda");
  CHECK(c.error.empty());
}

TEST_CASE("cpu is the cpu, whatever CUDA says; other names are refused by name") {
  const DeviceChoice c = ChooseDevice("cpu", true, "", MhcRefusal());
  CHECK(c.device == "cpu");
  CHECK(c.note.empty());
  CHECK(c.error.empty());
  CHECK_THROWS_WITH_AS(ChooseDevice("gpu", true, "", ""), "--device: expected cpu, cuda or auto, found gpu",
                       std::invalid_argument);
}
