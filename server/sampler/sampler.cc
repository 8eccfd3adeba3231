#include "server/sampler/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "server/sampler/device_sampling.h"
#include "server/sampler/logits_summary.h"
#include "server/sampler/step_sampling.h"

namespace ropeserve {

namespace {

// A step's logits as the host sampler reads them (alive while it samples).
struct StepRows {
  at::Tensor logits, reduced, argmax, prompt;
  std::vector<std::int64_t> row_index;
};

// The rows' reduction (sampler.h says what comes back when): fills `out`
// with the per-row numbers and the rows the host sampler reads, kept alive
// by `rows`.
Status ReduceRows(const HostSampler& sampler, const StepPlan& plan, const at::Tensor& logits,
                  const ReducedRows* reduced, StepRows& rows, StepLogits& out, DeviceSampling* device,
                  SamplerStats& stats) {
  if (logits.dim() != 2 || logits.size(0) != out.rows || logits.size(1) != out.vocab)
    return Internal("the forward returned logits of the wrong shape");
  if (reduced != nullptr && (reduced->rows < out.rows || reduced->host == nullptr || !reduced->wait))
    return Internal("the forward's reduction does not cover the step's rows");
  // max, argmax and logsumexp: one kernel on the CPU (kernels/cpu/logits_summary.h
  // says why) and on a GPU, LibTorch's ops elsewhere; or what the forward
  // already computed (its first rows are the plan's).
  const LogitsSummary summary = reduced == nullptr ? SummarizeLogits(logits)
                                                   : LogitsSummary{reduced->summary.logsumexp.narrow(0, 0, out.rows),
                                                                   reduced->summary.max.narrow(0, 0, out.rows),
                                                                   reduced->summary.argmax.narrow(0, 0, out.rows),
                                                                   {}};
  const at::Tensor& max = summary.max;
  at::Tensor chosen = summary.argmax, chosen_logit = max;
  // Rows the host sampler would not read (greedy, nothing to process or
  // report) take the summary's argmax and max wherever they lie: a step of
  // such rows alone draws nothing on the device (no upload, no gather) and
  // comes back in the summary's packed copy.
  bool draws_needed = false;
  for (const auto& s : plan.sequences)
    draws_needed = draws_needed || (s.logits_rows() > 0 && sampler.NeedsRow(s.request_id));
  DeviceSampling::Draws draws;
  if (device != nullptr && draws_needed) {
    RS_ASSIGN_OR_RETURN(draws, device->Draw(sampler, plan, logits, logits.is_cuda(), summary.argmax));
    const auto n = std::count(draws.drawn.begin(), draws.drawn.end(), 1);
    stats.device_draws += static_cast<std::uint64_t>(n);
    if (n > 0) {
      chosen = draws.token;
      chosen_logit = logits.gather(1, chosen.unsqueeze(1)).squeeze(1);
    } else {
      draws.drawn.clear();
    }
  }
  // logsumexp, max, the chosen tokens' logits, the top logits and the ids
  // in one transfer: the floats' bits and the ids (every vocabulary fits
  // int32) as one int32 tensor, so the copy moves bits, never values. For
  // greedy rows alone on a GPU the summary kernel wrote exactly that
  // (LogitsSummary::packed): the step's reduction is one kernel and one
  // copy; else the pieces are put together here (a few small kernels).
  const std::int64_t top_k = draws.top_logits.defined() ? draws.top_logits.size(1) : 0;
  const bool packed = (summary.packed.defined() || reduced != nullptr) && draws.drawn.empty() && top_k == 0;
  at::Tensor back;
  std::int64_t nf = 3 * out.rows;
  if (packed && reduced != nullptr) {
    // The forward's copy, laid out for its `rows` rows: each quarter's
    // first out.rows values.
    reduced->wait();
    back = at::empty({4 * out.rows}, at::kInt);
    std::int32_t* to = back.data_ptr<std::int32_t>();
    for (std::int64_t q = 0; q < 4; ++q) std::copy_n(reduced->host + q * reduced->rows, out.rows, to + q * out.rows);
    ++stats.reduced_with_forward;
  } else if (packed) {
    back = summary.packed.to(at::kCPU).contiguous();
  } else {
    std::vector<at::Tensor> floats = {at::stack({summary.logsumexp, max, chosen_logit}).flatten()};  // [3R]
    if (top_k > 0) floats.push_back(draws.top_logits.flatten());
    const at::Tensor float_bits = at::cat(floats).contiguous().view(at::kInt);
    std::vector<at::Tensor> ids = {chosen};
    if (top_k > 0) ids.push_back(draws.top_ids.flatten());
    back = at::cat({float_bits, at::cat(ids).to(at::kInt)}).to(at::kCPU).contiguous();
    nf = float_bits.numel();
  }
  rows.reduced = back.narrow(0, 0, nf).view(at::kFloat);
  rows.argmax = back.narrow(0, nf, back.numel() - nf).to(at::kLong);
  out.logsumexp = rows.reduced.data_ptr<float>();
  const float* row_max = out.logsumexp + out.rows;
  out.max = out.logsumexp + 2 * out.rows;
  out.argmax = rows.argmax.data_ptr<std::int64_t>();
  if (top_k > 0) {
    out.top_k = top_k;
    out.top_logits = out.logsumexp + 3 * out.rows;
    out.top_ids = out.argmax + out.rows;
  }
  // On the CPU no row is copied: data is every row, and the index says
  // which are meant; elsewhere data holds the needed rows only, in order.
  const bool in_place = logits.is_cpu();
  std::vector<std::int64_t> whole;
  rows.row_index.reserve(static_cast<std::size_t>(out.rows));
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    for (std::int64_t i = 0; i < s.logits_rows(); ++i, ++row) {
      const bool on_device = !draws.drawn.empty() && draws.drawn[static_cast<std::size_t>(row)] != 0;
      const bool need = (!on_device && sampler.NeedsRow(s.request_id)) || std::isnan(row_max[row]);
      rows.row_index.push_back(!need ? -1 : in_place ? row : static_cast<std::int64_t>(whole.size()));
      if (need) whole.push_back(row);
    }
  }
  out.row_index = rows.row_index.data();
  if (whole.empty()) return Status::Ok();
  if (in_place) {
    rows.logits = logits.contiguous();
  } else if (static_cast<std::int64_t>(whole.size()) == out.rows) {
    rows.logits = logits.to(at::kCPU).contiguous();
  } else {
    rows.logits = logits.index_select(0, at::tensor(whole, at::kLong).to(logits.device())).to(at::kCPU).contiguous();
  }
  out.data = rows.logits.data_ptr<float>();
  return Status::Ok();
}

}  // namespace

Sampler::Sampler(std::int64_t vocab, at::Device device, SamplerPlacement placement) : vocab_(vocab) {
  const bool on_device =
      placement == SamplerPlacement::kDevice || (placement == SamplerPlacement::kAuto && !device.is_cpu());
  if (on_device) device_ = std::make_unique<DeviceSampling>(vocab, device);
}

Sampler::~Sampler() = default;

void Sampler::Apply(const StepPlan& plan) {
  host_.Apply(plan);
  if (device_) device_->Apply(plan);
}

StatusOr<StepOutput> Sampler::Sample(const StepPlan& plan, const at::Tensor& logits, const at::Tensor& prompt,
                                     const ReducedRows* reduced) {
  StepRows rows;
  StepLogits out;
  out.vocab = vocab_;
  for (const auto& s : plan.sequences) out.rows += s.logits_rows();
  if (prompt.defined() && prompt.size(0) > 0) {
    rows.prompt = prompt.to(at::kCPU).contiguous();
    out.prompt_data = rows.prompt.data_ptr<float>();
    out.prompt_rows = rows.prompt.size(0);
  }
  if (out.rows > 0) {
    if (!logits.defined()) return Internal("the forward returned no logits for a step that samples");
    RS_RETURN_IF_ERROR(ReduceRows(host_, plan, logits, reduced, rows, out, device_.get(), stats_));
  }
  return SampleStep(host_, plan, out);
}

}  // namespace ropeserve
