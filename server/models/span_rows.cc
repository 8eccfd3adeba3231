#include "server/models/span_rows.h"

#include <ATen/ATen.h>

namespace ropeserve {

SpanLogits SpanRows(const at::Tensor& logits, std::int64_t begin, std::int64_t len, const at::Tensor& hidden) {
  SpanLogits out;
  if (logits.defined()) {
    const at::Tensor rows = logits.narrow(0, begin, len).to(at::kCPU, at::kFloat);  // read on the host
    const at::Tensor s = rows.select(1, 0).contiguous(), e = rows.select(1, 1).contiguous();
    out.start.assign(s.data_ptr<float>(), s.data_ptr<float>() + len);
    out.end.assign(e.data_ptr<float>(), e.data_ptr<float>() + len);
  }
  if (hidden.defined()) {
    const at::Tensor h = hidden.narrow(0, begin, len).to(at::kCPU, at::kFloat).contiguous();
    out.hidden.assign(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
  }
  return out;
}

void SetClasses(SpanLogits& out, const at::Tensor& logits) {
  const at::Tensor c = logits.to(at::kCPU, at::kFloat).contiguous();
  out.classes.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace ropeserve
