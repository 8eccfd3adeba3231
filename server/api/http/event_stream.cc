#include "server/api/http/event_stream.h"

#include "server/api/error_mapping.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

std::string Event(const nlohmann::json& j) { return "data: " + Dump(j) + "\n\n"; }

std::string NamedEvent(const char* name, const nlohmann::ordered_json& j) {
  return std::string("event: ") + name + "\ndata: " + DumpOrdered(j) + "\n\n";
}

GenerationStream::GenerationStream(std::vector<std::unique_ptr<service::OutputSource>> sources, OnDelta on_delta,
                                   OnEnd on_end)
    : sources_(std::move(sources)),
      on_delta_(std::move(on_delta)),
      on_end_(std::move(on_end)),
      signal_(std::make_shared<ReadySignal>()) {
  for (auto& g : sources_) g->SetNotify([s = signal_] { s->Set(); });
}

GenerationStream::~GenerationStream() {
  for (auto& g : sources_) g->SetNotify(nullptr);
}

bool GenerationStream::Poll(std::string& out, std::chrono::milliseconds wait) {
  if (done_) return true;
  const std::size_t before = out.size();  // a prelude counts as an event: no wait after it
  if (!started_) {
    started_ = true;
    out += format_.prelude;
  }
  signal_->Clear();
  bool all_finished = true;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    service::OutputSource& g = *sources_[i];
    if (g.finished()) continue;
    auto d = g.Next(std::chrono::milliseconds(0));
    if (!d.ok()) {
      out += format_.error ? format_.error(d.status()) : "data: " + ErrorJson(d.status()) + "\n\n";
      out += format_.done;
      Cancel();
      done_ = true;
      return true;
    }
    if (!d->ids.empty() || !d->text.empty() || d->finished || !d->prompt_logprobs.empty() || d->progress)
      on_delta_(i, *d, out);
    if (!g.finished()) all_finished = false;
  }
  if (all_finished) {
    on_end_(out);
    out += format_.done;
    done_ = true;
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (out.size() != before) {
    last_event_ = now;
  } else if (heartbeat_.count() > 0 && now - last_event_ >= heartbeat_) {
    out += ": keep-alive\n\n";
    last_event_ = now;
  } else {
    signal_->WaitFor(wait);
  }
  return false;
}

void GenerationStream::Cancel() {
  for (auto& g : sources_) g->Cancel();
}

}  // namespace ropeserve::api
