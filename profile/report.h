// The report of a profile run: one folder with report.json (per request and aggregated), the
// plot data (data/*.dat), gnuplot scripts (plots/*.gp), the images, and index.html.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/arrival.h"
#include "profile/cluster.h"
#include "profile/ideal.h"
#include "profile/live.h"
#include "profile/simulator.h"
#include "profile/trace.h"

namespace cedar::profile {

struct ReportInput {
  const Trace* trace = nullptr;
  const Simulation* sim = nullptr;
  std::string model_name;    // "preset flash" or the model directory
  std::string command_line;  // as typed, for the report header
  double load_s = 0;         // wall time reading traces
  double simulate_s = 0;     // wall time of the simulation
  double calibrate_s = 0;    // wall time of the calibration (0 = none)
  const LiveDriver* live = nullptr;  // live mode: what the server answered (else null)
  const IdealDriver* ideal = nullptr;  // the ideal of the trace (required)
  std::string arrival = "recorded";    // the arrival model, as ArrivalName gives it
  const std::vector<ConversationSpan>* spans = nullptr;  // where the arrival model placed each conversation
  bool sweep_auto = false;             // the sweep budgets came from --sweep-ram auto
  const ClusterSim* cluster = nullptr; // --servers N: the cluster topology (else null)
};

// A RAM budget as people read it: below 1 GiB in MiB ("512 MiB"), else GiB ("16 GiB", "1.5 GiB").
std::string FormatBudget(uint64_t bytes);

// How close to the ideal hit rate counts as reaching it (the knee of the working-set sweep).
inline constexpr double kIdealReachedWithin = 0.005;

// The whole report as JSON. Everything but the "run" object (wall times, command line) is a
// pure function of the traces and options: the same run twice gives the same JSON.
nlohmann::json BuildReportJson(const ReportInput& in);

// Key numbers per design, as a text table for the terminal.
std::string SummaryTable(const nlohmann::json& report);

struct ReportFiles {
  std::string json_path;
  std::string html_path;
  std::vector<std::string> images;  // written PNGs, relative to the folder
  std::string plot_note;            // why images are missing, when they are
};

// Writes the folder (created if missing). With `plots`, draws the figures with gnuplot when it
// is installed; otherwise writes the data and scripts and says so in plot_note and index.html.
// Throws std::runtime_error when the folder cannot be written.
ReportFiles WriteReport(const std::string& dir, const nlohmann::json& report, const ReportInput& in, bool plots);

}  // namespace cedar::profile
