// The live part of the report (internal to profile/): the "live" object of report.json, the
// per-request live fields, its plot data and figures, its HTML section and summary line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/live.h"
#include "profile/simulator.h"

namespace cedar::profile {

// report["live"]: the server, the options, totals, measured TTFT and latency, errors, and the
// agreement with the simulated Cedar design.
nlohmann::json LiveJson(const LiveDriver& live, const Simulation& sim);
// requests[i]["live"].
nlohmann::json LiveRequestJson(const LiveOutcome& o, const Outcome& simulated);

// A figure of the report: PNG and script base name, how to read it, the gnuplot script.
struct LiveFigure {
  std::string name, caption, script;
};
// Writes data/live_hits.dat and data/live_ttft.dat; returns the figures that plot them.
std::vector<LiveFigure> WriteLiveData(const std::filesystem::path& dir, const LiveDriver& live, const Simulation& sim);

// The "Live replay" section of index.html (escaped with `html`).
std::string LiveHtml(const nlohmann::json& live, std::string (*html)(const std::string&));
// Two lines for the terminal summary.
std::string LiveSummary(const nlohmann::json& live);

// Nearest-rank percentile of sorted values (0 for none); shared with report.cpp.
double Percentile(const std::vector<double>& sorted, double q);

}  // namespace cedar::profile
