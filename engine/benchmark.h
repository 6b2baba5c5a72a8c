// The engine benchmark (issue: prefill/decode tokens/s against this machine's own sgemm
// rate and memory bandwidth, measured in the same run). Prints one JSON object per result.
#pragma once

namespace cedar {
// argv: [--model DIR | --preset NAME] [--lengths 512,4096,16384] [--decode N] [--decode-batch 1,8] [--threads N]
// (--help lists them all). A bad command line throws UsageError (engine/flag_values.h): exit 2.
int RunEngineBenchMain(int argc, char** argv);
}  // namespace cedar
