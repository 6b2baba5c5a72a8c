#include "session/step_cost.h"

namespace cedar::session {

namespace {
void Update(double* avg, double sample) {
  *avg = *avg > 0 ? *avg + StepCostModel::kNewest * (sample - *avg) : sample;
}
}  // namespace

void StepCostModel::ObserveChunks(int64_t rows, double ms) {
  if (rows > 0 && ms >= 0) Update(&chunk_ms_per_row_, ms / double(rows));
}

void StepCostModel::ObservePureChunks(int64_t rows, double ms) {
  if (rows > 0 && ms >= 0) Update(&pure_chunk_ms_per_row_, ms / double(rows));
}

void StepCostModel::ObserveFinish(int64_t finish_rows, double ms) {
  if (finish_rows > 0 && ms >= 0) Update(&finish_ms_per_row_, ms / double(finish_rows));
}

void StepCostModel::ObserveDecode(int64_t rows, double ms) {
  if (rows > 0 && ms >= 0) Update(&decode_ms_per_row_, ms / double(rows));
}

}  // namespace cedar::session
