// What the parts of a mixed step cost in time, learned from the steps that ran (issue 14,
// --step-ms): the planner (chunk_plan.h) then stops adding prefill items to a step once its
// predicted length reaches the budget.
//
// Why time and not only rows: a prompt row's cost grows with its position (the encoder attends
// to a longer prefix: at 16K a 192-row step took ~560 ms against ~480 ms early in the same
// prompt), and a decoder phase costs more per row than its estimate in encoder rows. A row
// budget alone lets those steps run long, and the slowest steps are what every decoding session
// sees as its p99 inter-token latency. The rates are exponential moving averages of what the
// last steps measured, so they follow a prompt's slowly growing cost and the machine's load;
// until a part has been measured its rate is 0 and only the row budget binds.
//
// Exactness does not depend on this: chunk boundaries are fixed per turn (chunk_plan.h); time
// only decides how many of a turn's chunks run in a step.
#pragma once
#include <cstdint>

namespace cedar::session {

class StepCostModel {
 public:
  // After a step's parts ran: `rows` prompt rows of chunks in `ms`; decoder phases of
  // `finish_rows` estimated encoder rows (ChunkDemand::finish_rows) in `ms`; `rows` decode rows
  // in `ms`. Parts with no rows are ignored.
  void ObserveChunks(int64_t rows, double ms);
  // Chunk rows that ran with no decode rows beside them (a batched step's passes after the one
  // the decode rows ride in): the chunks' own rate, which FinishRowCost compares phases with.
  void ObservePureChunks(int64_t rows, double ms);
  void ObserveFinish(int64_t finish_rows, double ms);
  void ObserveDecode(int64_t rows, double ms);

  double ChunkMsPerRow() const { return chunk_ms_per_row_; }    // 0 until measured
  // A decoder phase's ms per estimated row (the chunks' rate until one was measured).
  double FinishMsPerRow() const { return finish_ms_per_row_ > 0 ? finish_ms_per_row_ : chunk_ms_per_row_; }
  // The decode rows' predicted ms: the last steps' ms per decode row times `rows` (0 until
  // measured). Per row, because the number of decoding turns changes from step to step.
  double DecodeMs(int64_t rows) const { return decode_ms_per_row_ * double(rows); }
  // What an estimated decoder-phase row costs in chunk rows, by the phases' recent rate or by a
  // given one (a turn's own, measured on its first part); 1 until the rates are known. Planning
  // prices a phase's layers with it, so the step's row budget bounds its time too. The cost of a
  // phase row grows with the prompt's length (every row scores the whole prefix at the
  // index-source layers: at 16K on `small` it was about twice a chunk row, at 3K about one).
  double FinishRowCost() const { return FinishRowCost(finish_ms_per_row_); }
  double FinishRowCost(double finish_ms_per_row) const {
    const double chunk = pure_chunk_ms_per_row_ > 0 ? pure_chunk_ms_per_row_ : chunk_ms_per_row_;
    return chunk > 0 && finish_ms_per_row > 0 ? finish_ms_per_row / chunk : 1.0;
  }

  // Weight of the newest observation in each average: large enough to follow a prompt's growing
  // cost within a few steps, small enough that one step slowed by the machine does not halve
  // the next step's budget.
  static constexpr double kNewest = 0.3;

 private:
  double chunk_ms_per_row_ = 0;   // ms per prompt row in chunks (decode rows riding included)
  double pure_chunk_ms_per_row_ = 0;  // the same without decode rows beside them
  double finish_ms_per_row_ = 0;  // ms per estimated encoder row of a decoder phase
  double decode_ms_per_row_ = 0;  // ms per decode row
};

}  // namespace cedar::session
