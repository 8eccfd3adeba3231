#include "server/sampler/device_sampling.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>

#ifdef ROPESERVE_HAVE_CUDA
#include "kernels/cuda/torch_glue.h"
#endif

namespace ropeserve {

namespace {

constexpr std::int64_t kFirstRows = 64;
// An added request's row in the Apply upload: slot, top_k, seed, the float
// parameters as int32 bits (temperature, top_p, min_p, repetition), the
// double ones as int64 bits (frequency, presence).
constexpr std::int64_t kAddedWidth = 9;

std::int32_t FloatBits(float f) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
std::int64_t DoubleBits(double v) {
  std::int64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// `t` with at least `rows` rows, the old ones kept (doubling).
at::Tensor Grown(const at::Tensor& t, std::int64_t rows) {
  if (t.size(0) >= rows) return t;
  std::vector<std::int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[0] = std::max(rows, 2 * t.size(0));
  at::Tensor g = at::zeros(shape, t.options());
  g.narrow(0, 0, t.size(0)).copy_(t);
  return g;
}

// Where a Draw's per-row data lies in its upload: a function of the counts.
struct DrawLayout {
  std::int64_t R = 0, penalized = 0, counted = 0, biased = 0, masked = 0, words = 0;
  std::int64_t slot() const { return 0; }                               // [R]
  std::int64_t offset() const { return R; }                             // [R]
  std::int64_t penalized_rows() const { return 2 * R; }                 // [penalized]
  std::int64_t penalty_rows() const { return 2 * R + penalized; }       // [penalized]
  std::int64_t count_rows() const { return 2 * R + 2 * penalized; }     // [counted]
  std::int64_t count_tokens() const { return count_rows() + counted; }  // [counted]
  std::int64_t bias_rows() const { return count_tokens() + counted; }   // [biased]
  std::int64_t bias_tokens() const { return bias_rows() + biased; }
  std::int64_t bias_values() const { return bias_tokens() + biased; }  // float bits
  std::int64_t mask_rows() const { return bias_values() + biased; }    // [masked]
  std::int64_t mask_words() const { return mask_rows() + masked; }     // [masked, words]
  std::int64_t size() const { return mask_words() + masked * words; }
};

}  // namespace

DeviceSampling::DeviceSampling(std::int64_t vocab, at::Device device)
    : vocab_(vocab), words_((vocab + 31) / 32), device_(device), added_(256, device), step_(1024, device) {
  const auto on = at::TensorOptions().device(device);
  ints_ = at::zeros({kFirstRows, 2}, on.dtype(at::kLong));
  floats_ = at::zeros({kFirstRows, 4}, on.dtype(at::kFloat));
  doubles_ = at::zeros({kFirstRows, 2}, on.dtype(at::kDouble));
  shifts_ = at::arange(32, on.dtype(at::kInt));
  for (std::int64_t r = kFirstRows - 1; r >= 0; --r) free_slots_.push_back(r);
}

std::int64_t DeviceSampling::TakeSlot() {
  if (free_slots_.empty()) {
    const std::int64_t old = ints_.size(0);
    ints_ = Grown(ints_, old + 1);
    floats_ = Grown(floats_, old + 1);
    doubles_ = Grown(doubles_, old + 1);
    for (std::int64_t r = ints_.size(0) - 1; r >= old; --r) free_slots_.push_back(r);
  }
  const std::int64_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

std::int64_t DeviceSampling::TakePenaltyRow() {
  if (free_penalty_rows_.empty()) {
    const std::int64_t old = penalty_rows();
    if (!counts_.defined()) {  // allocated with the first request that has penalties
      const auto on = at::TensorOptions().device(device_);
      counts_ = at::zeros({8, vocab_}, on.dtype(at::kInt));
      prompt_ = at::zeros({8, vocab_}, on.dtype(at::kBool));
    } else {
      counts_ = Grown(counts_, old + 1);
      prompt_ = Grown(prompt_, old + 1);
    }
    for (std::int64_t r = counts_.size(0) - 1; r >= old; --r) free_penalty_rows_.push_back(r);
  }
  const std::int64_t r = free_penalty_rows_.back();
  free_penalty_rows_.pop_back();
  counts_[r].zero_();
  prompt_[r].zero_();
  return r;
}

void DeviceSampling::Release(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  free_slots_.push_back(it->second.slot);
  if (it->second.penalty_row >= 0) free_penalty_rows_.push_back(it->second.penalty_row);
  requests_.erase(it);
}

void DeviceSampling::Apply(const StepPlan& plan) {
  for (RequestId id : plan.removed) Release(id);
  if (plan.added.empty()) return;
  // Rows first (growing the tensors), then one upload: the parameters, then
  // (penalty row, token) pairs of the prompts the repetition penalty reads.
  std::vector<Request> rows;
  std::int64_t marks = 0;
  for (const SamplingSpec& spec : plan.added) {
    Release(spec.id);  // re-added: its old rows go
    Request r;
    r.slot = TakeSlot();
    if (spec.params.has_penalties()) r.penalty_row = TakePenaltyRow();
    if (spec.params.repetition_penalty != 1.0) marks += static_cast<std::int64_t>(spec.prompt.size());
    rows.push_back(r);
  }
  const auto n = static_cast<std::int64_t>(plan.added.size());
  added_.Reserve(n * kAddedWidth + 2 * marks);
  std::int64_t* h = added_.host();
  std::int64_t* mark_rows = h + n * kAddedWidth;
  std::int64_t* mark_tokens = mark_rows + marks;
  std::int64_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const SamplingSpec& spec = plan.added[static_cast<std::size_t>(i)];
    const SamplingParams& p = spec.params;
    const Request& r = rows[static_cast<std::size_t>(i)];
    std::int64_t* row = h + i * kAddedWidth;
    row[0] = r.slot;
    row[1] = std::clamp<std::int64_t>(p.top_k, -1, INT32_MAX);
    row[2] = static_cast<std::int64_t>(spec.seed);  // the kernel reads the bits as uint64
    row[3] = FloatBits(static_cast<float>(p.temperature));
    row[4] = FloatBits(static_cast<float>(p.top_p));
    row[5] = FloatBits(static_cast<float>(p.min_p));
    row[6] = FloatBits(static_cast<float>(p.repetition_penalty));
    row[7] = DoubleBits(p.frequency_penalty);
    row[8] = DoubleBits(p.presence_penalty);
    if (p.repetition_penalty != 1.0)
      for (TokenId t : spec.prompt) {  // ids outside the vocabulary match no logit
        mark_rows[m] = r.penalty_row;
        mark_tokens[m++] = t >= 0 && t < vocab_ ? t : -1;
      }
    requests_[spec.id] = r;
  }
  const at::Tensor up = added_.Upload(n * kAddedWidth + 2 * marks);
  const at::Tensor params = up.narrow(0, 0, n * kAddedWidth).view({n, kAddedWidth});
  const at::Tensor slots = params.select(1, 0);
  ints_.index_put_({slots}, params.narrow(1, 1, 2));
  floats_.index_put_({slots}, params.narrow(1, 3, 4).to(at::kInt).view(at::kFloat));
  doubles_.index_put_({slots}, params.narrow(1, 7, 2).contiguous().view(at::kDouble));
  if (marks > 0) {
    const at::Tensor tokens = up.narrow(0, n * kAddedWidth + marks, marks);
    const at::Tensor valid = tokens.ge(0);
    prompt_.index_put_({up.narrow(0, n * kAddedWidth, marks).masked_select(valid), tokens.masked_select(valid)},
                       at::ones({1}, prompt_.options()));
  }
}

// The rows a step draws on the device, and what their processing needs.
struct DrawSelection {
  struct Row {
    std::int64_t row, slot, offset;
  };
  std::vector<Row> drawn;
  std::vector<std::pair<std::int64_t, std::int64_t>> penalized;      // (logits row, penalty row)
  std::vector<std::pair<std::int64_t, std::int64_t>> count_updates;  // (penalty row, token)
  std::vector<std::tuple<std::int64_t, TokenId, float>> biases;      // (logits row, token, bias)
  std::vector<std::pair<std::int64_t, LogitsEdit>> masks;            // (logits row, the edit holding the mask)
  std::size_t top_k = 0;
  bool any_random = false;
  DrawLayout at;  // where Stage put them in the step's upload
};

namespace {

// A bitmask row: an allow list sets its ids' bits, a forbid list clears them.
void WriteMask(const LogitsEdit& edit, std::int64_t vocab, std::int64_t words, std::uint32_t* w) {
  std::fill(w, w + words, edit.allow_list ? 0u : ~0u);
  for (TokenId id : edit.ids) {
    if (id < 0 || id >= vocab) continue;
    const std::uint32_t bit = 1u << (id % 32);
    if (edit.allow_list)
      w[id / 32] |= bit;
    else
      w[id / 32] &= ~bit;
  }
}

}  // namespace

Status DeviceSampling::Select(const HostSampler& sampler, const StepPlan& plan, bool random, DrawSelection& sel,
                              std::vector<char>& drawn) {
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    const std::int64_t n = s.logits_rows();
    if (n == 0) continue;
    const auto d = sampler.DeviceDrawOf(s.request_id);
    const bool here = d && (d->params.greedy() || random) && (s.num_draft == 0 || d->plain());
    if (!here) {
      row += n;
      continue;
    }
    auto it = requests_.find(s.request_id);
    if (it == requests_.end())
      return Internal("device sampling has no row for request " + std::to_string(s.request_id));
    Request& r = it->second;
    if (d->params.has_penalties()) {
      if (r.penalty_row < 0) return Internal("a request with penalties has no penalty row");
      for (; r.counted < d->generated.size(); ++r.counted)
        if (d->generated[r.counted] >= 0 && d->generated[r.counted] < vocab_)
          sel.count_updates.emplace_back(r.penalty_row, d->generated[r.counted]);
    }
    if (d->processor != nullptr) {  // no drafts here (not plain): one row
      LogitsEdit edit;
      d->processor->Describe(d->generated, edit);
      for (auto [id, b] : edit.bias)
        if (id >= 0 && id < vocab_) sel.biases.emplace_back(row, id, b);
      if (edit.masked) sel.masks.emplace_back(row, std::move(edit));
    }
    if (d->params.has_penalties()) sel.penalized.emplace_back(row, r.penalty_row);
    sel.top_k = std::max(sel.top_k, d->top_logprobs);
    sel.any_random = sel.any_random || !d->params.greedy();
    for (std::int64_t i = 0; i < n; ++i, ++row) {
      sel.drawn.push_back({row, r.slot, static_cast<std::int64_t>(d->offset) + i});
      drawn[static_cast<std::size_t>(row)] = 1;
    }
  }
  return Status::Ok();
}

at::Tensor DeviceSampling::Stage(std::int64_t R, DrawSelection& sel) {
  DrawLayout& at = sel.at;
  at.R = R;
  at.penalized = static_cast<std::int64_t>(sel.penalized.size());
  at.counted = static_cast<std::int64_t>(sel.count_updates.size());
  at.biased = static_cast<std::int64_t>(sel.biases.size());
  at.masked = static_cast<std::int64_t>(sel.masks.size());
  at.words = words_;
  step_.Reserve(at.size());
  std::int32_t* h = step_.host();
  std::fill(h, h + 2 * R, 0);  // rows not drawn here: slot 0, offset 0 (their results are not read)
  for (const DrawSelection::Row& d : sel.drawn) {
    h[at.slot() + d.row] = static_cast<std::int32_t>(d.slot);
    h[at.offset() + d.row] = static_cast<std::int32_t>(std::min<std::int64_t>(d.offset, INT32_MAX));
  }
  for (std::size_t i = 0; i < sel.penalized.size(); ++i) {
    h[at.penalized_rows() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(sel.penalized[i].first);
    h[at.penalty_rows() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(sel.penalized[i].second);
  }
  for (std::size_t i = 0; i < sel.count_updates.size(); ++i) {
    h[at.count_rows() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(sel.count_updates[i].first);
    h[at.count_tokens() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(sel.count_updates[i].second);
  }
  for (std::size_t i = 0; i < sel.biases.size(); ++i) {
    const auto& [r, id, b] = sel.biases[i];
    h[at.bias_rows() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(r);
    h[at.bias_tokens() + static_cast<std::int64_t>(i)] = id;
    h[at.bias_values() + static_cast<std::int64_t>(i)] = FloatBits(b);
  }
  for (std::size_t i = 0; i < sel.masks.size(); ++i) {
    h[at.mask_rows() + static_cast<std::int64_t>(i)] = static_cast<std::int32_t>(sel.masks[i].first);
    WriteMask(sel.masks[i].second, vocab_, words_,
              reinterpret_cast<std::uint32_t*>(h + at.mask_words() + static_cast<std::int64_t>(i) * words_));
  }
  return step_.Upload(at.size());
}

at::Tensor DeviceSampling::Process(const at::Tensor& logits, const DrawSelection& sel, const at::Tensor& up,
                                   const at::Tensor& slots) {
  const DrawLayout& at = sel.at;
  auto view = [&](std::int64_t offset, std::int64_t n) { return up.narrow(0, offset, n); };
  auto index = [&](std::int64_t offset, std::int64_t n) { return view(offset, n).to(at::kLong); };
  // On a copy when any row changes (the raw rows give the logprobs).
  at::Tensor x = logits;
  if (at.penalized > 0 || at.biased > 0 || at.masked > 0) x = logits.clone();
  if (at.counted > 0)
    counts_.index_put_({index(at.count_rows(), at.counted), index(at.count_tokens(), at.counted)},
                       at::ones({1}, counts_.options()), /*accumulate=*/true);
  if (at.biased > 0)  // ids distinct per row: one float add each, as the host's
    x.index_put_({index(at.bias_rows(), at.biased), index(at.bias_tokens(), at.biased)},
                 view(at.bias_values(), at.biased).view(at::kFloat), /*accumulate=*/true);
  if (at.masked > 0) {
    const at::Tensor rows = index(at.mask_rows(), at.masked);
    const at::Tensor bits = at::bitwise_and(
        at::bitwise_right_shift(view(at.mask_words(), at.masked * words_).view({at.masked, words_, 1}), shifts_), 1);
    const at::Tensor forbidden = bits.view({at.masked, words_ * 32}).narrow(1, 0, vocab_).eq(0);
    x.index_copy_(0, rows, x.index_select(0, rows).masked_fill_(forbidden, -std::numeric_limits<float>::infinity()));
  }
  if (at.penalized > 0) {
    // The host's ApplyPenalties, elementwise: a token generated or in the
    // prompt is divided (positive) or multiplied by the repetition penalty;
    // a generated one loses float(f * n + p), summed in double.
    const at::Tensor rows = index(at.penalized_rows(), at.penalized);
    const at::Tensor prows = index(at.penalty_rows(), at.penalized);
    const at::Tensor pslots = slots.index_select(0, rows);
    at::Tensor sub = x.index_select(0, rows);
    const at::Tensor counts = counts_.index_select(0, prows);
    const at::Tensor generated = counts.gt(0);
    const at::Tensor seen = generated.logical_or(prompt_.index_select(0, prows));
    const at::Tensor rep = floats_.index_select(0, pslots).narrow(1, 3, 1);
    sub = at::where(seen, at::where(sub.gt(0), sub / rep, sub * rep), sub);
    const at::Tensor fp = doubles_.index_select(0, pslots);
    const at::Tensor amount = at::where(generated, counts.to(at::kDouble) * fp.narrow(1, 0, 1) + fp.narrow(1, 1, 1),
                                        at::zeros({1}, fp.options()))
                                  .to(at::kFloat);
    x.index_copy_(0, rows, sub - amount);
  }
  return x;
}

StatusOr<DeviceSampling::Draws> DeviceSampling::Draw(const HostSampler& sampler, const StepPlan& plan,
                                                     const at::Tensor& logits, bool random,
                                                     const at::Tensor& logits_argmax) {
  if (logits.dim() != 2 || logits.size(1) != vocab_) return Internal("device sampling got logits of the wrong shape");
  const std::int64_t R = logits.size(0);
  Draws out;
  out.drawn.assign(static_cast<std::size_t>(R), 0);
  DrawSelection sel;
  RS_RETURN_IF_ERROR(Select(sampler, plan, random, sel, out.drawn));
  if (sel.drawn.empty()) return out;
  const at::Tensor up = Stage(R, sel);
  // Each row's parameter slot as indices: penalties and random draws read
  // the per-request tables by it.
  const at::Tensor slots =
      sel.at.penalized > 0 || sel.any_random ? up.narrow(0, sel.at.slot(), R).to(at::kLong) : at::Tensor();
  const at::Tensor x = Process(logits, sel, up, slots);

  // The draws.
#ifdef ROPESERVE_HAVE_CUDA
  if (sel.any_random && x.is_cuda()) {
    const at::Tensor f = floats_.index_select(0, slots);
    const at::Tensor i = ints_.index_select(0, slots);
    out.token = cuda::SampleRows(x, f.select(1, 0).contiguous(), i.select(1, 0).to(at::kInt),
                                 f.select(1, 1).contiguous(), f.select(1, 2).contiguous(), i.select(1, 1).contiguous(),
                                 up.narrow(0, sel.at.offset(), R).to(at::kLong));
  }
#endif
  if (!out.token.defined()) {
    if (sel.any_random) return Internal("random draws need a device with a sampling kernel");
    // The first maximal index: the lowest id among ties, as the host's.
    out.token = x.is_same(logits) && logits_argmax.defined() ? logits_argmax : x.argmax(1);
  }
  if (sel.top_k > 0) {
    auto [values, ids] = logits.topk(std::min<std::int64_t>(static_cast<std::int64_t>(sel.top_k), vocab_), 1);
    out.top_logits = values;
    out.top_ids = ids;
  }
  return out;
}

}  // namespace ropeserve
