// The CUDA kernel layer in one include (host-only: no CUDA header). See common.h for the
// conventions every launcher follows, and docs/GPU.md for what exists and what remains.
#pragma once
#include "kernels/cuda/candidate_blocks.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/compressor.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/index_scores.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/moe_rows.h"
#include "kernels/cuda/probe.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sink_attention.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/topk.h"
