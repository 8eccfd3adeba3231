#include "server/service/generation.h"

#include <algorithm>

namespace ropeserve::service {

Generation::Generation(Engine& engine, std::shared_ptr<RequestStream> stream, const GenerateOptions& options,
                       std::size_t prompt_size, std::shared_ptr<const tok::Tokenizer> tokenizer)
    : engine_(engine), stream_(std::move(stream)), options_(options), prompt_size_(prompt_size) {
  if (tokenizer) detok_.emplace(std::move(tokenizer), options.skip_special_tokens);
  for (const auto& st : options.stop) {
    StopMatcher m;
    m.stop = st;
    m.fail.assign(st.size(), 0);  // fail[i]: longest proper border of st[0..i]
    for (std::size_t i = 1, k = 0; i < st.size(); ++i) {
      while (k > 0 && st[i] != st[k]) k = m.fail[k - 1];
      if (st[i] == st[k]) ++k;
      m.fail[i] = k;
    }
    stops_.push_back(std::move(m));
  }
}

Generation::~Generation() {
  if (!finished_) engine_.Cancel(stream_->id());
}

void Generation::Cancel() {
  if (!finished_) engine_.Cancel(stream_->id());
}

void Generation::SetNotify(std::function<void()> fn, bool call_if_ready) {
  stream_->SetNotify(std::move(fn), call_if_ready);
}

void Generation::Release(Delta& out, bool all) {
  std::size_t end = text_.size();
  if (!all) {
    // Hold back the longest tail of the text that begins some stop string
    // (nothing when a stop string stays in the text: what comes before it
    // is output either way, and it is too).
    std::size_t hold = 0;
    if (!options_.include_stop_str_in_output)
      for (const auto& m : stops_) hold = std::max(hold, m.state);
    end -= std::min(hold, text_.size() - released_);
    // Never split a UTF-8 sequence (a stop string may start mid-character).
    while (end > released_ && end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
  }
  if (end > released_) {
    out.text.append(text_, released_, end - released_);
    released_ = end;
  }
}

StatusOr<bool> Generation::PushText(TokenId id) {
  const std::size_t before = text_.size();
  RS_ASSIGN_OR_RETURN(std::string piece, detok_->Push(id));
  text_ += piece;
  // Advance the stop automata over the new bytes; the earliest-starting
  // stop string completed in them (it may begin in earlier pieces) cuts
  // the text (after it with include_stop_str_in_output). Stop strings
  // count only from min_tokens on (as vLLM).
  std::size_t cut = std::string::npos, end = 0;
  for (auto& m : stops_) {
    for (std::size_t i = before; i < text_.size(); ++i) {
      while (m.state > 0 && text_[i] != m.stop[m.state]) m.state = m.fail[m.state - 1];
      if (text_[i] == m.stop[m.state]) ++m.state;
      if (m.state == m.stop.size()) {
        if (generated_ >= options_.min_tokens && i + 1 - m.stop.size() < cut) {
          cut = i + 1 - m.stop.size();
          end = i + 1;
          stop_string_ = m.stop;
        }
        m.state = m.fail[m.state - 1];
      }
    }
  }
  if (cut == std::string::npos) return false;
  text_.resize(std::max(options_.include_stop_str_in_output ? end : cut, released_));
  return true;
}

StatusOr<Generation::Delta> Generation::Next(std::optional<std::chrono::milliseconds> timeout) {
  Delta out;
  if (finished_) return out;
  StreamChunk c = stream_->Next(timeout ? std::optional<Clock::duration>(*timeout) : std::nullopt);
  for (auto& t : c.prompt_logprobs) {
    out.prompt_logprobs.push_back(t.logprob);
    out.prompt_ranks.push_back(t.rank);
    std::vector<TokenLogprob> top;
    for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
    out.prompt_top_logprobs.push_back(std::move(top));
  }
  for (auto& t : c.tokens) {
    if (stopped_) break;  // tokens already in flight when we cancelled
    ++generated_;
    out.ids.push_back(t.id);
    out.logprobs.push_back(t.logprob);
    if (options_.top_logprobs > 0) {
      std::vector<TokenLogprob> top;
      for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
      out.top_logprobs.push_back(std::move(top));
    }
    if (!detok_) continue;
    RS_ASSIGN_OR_RETURN(bool stop, PushText(t.id));
    if (stop) {
      stopped_ = true;
      engine_.Cancel(stream_->id());
    }
  }
  if (!c.finished) {
    Release(out, /*all=*/false);
    return out;
  }
  finished_ = true;
  out.prompt_tokens = c.prompt_tokens;
  out.cached_tokens = c.cached_tokens;
  out.completion_tokens = generated_;
  if (stopped_) {
    out.finish_reason = "stop";
    out.stop_string = stop_string_;
  } else {
    switch (c.finish_reason) {
      case FinishReason::kError:
      case FinishReason::kRejected:
        return c.error;
      case FinishReason::kDeadline:
        return Status(ErrorCode::kDeadlineExceeded, "request timed out");
      case FinishReason::kCancelled:
        return Status(ErrorCode::kCancelled, "request cancelled");
      case FinishReason::kStop:
      case FinishReason::kLength:
        break;
    }
    if (detok_) {
      RS_ASSIGN_OR_RETURN(std::string rest, detok_->Finish());
      text_ += rest;
    }
    out.finish_reason = c.finish_reason == FinishReason::kStop ? "stop" : "length";  // OpenAI's names
  }
  Release(out, /*all=*/true);
  out.finished = true;
  return out;
}

StatusOr<GenerateResult> OutputSource::Collect(OutputSource& g, bool (*abandoned)(), OutputDelta* last) {
  GenerateResult result;
  while (true) {
    if (abandoned != nullptr && abandoned()) {
      g.Cancel();
      return Status(ErrorCode::kCancelled, "the client disconnected");
    }
    RS_ASSIGN_OR_RETURN(OutputDelta d, abandoned != nullptr ? g.Next(std::chrono::milliseconds(200)) : g.Next());
    if (Generation::Append(result, d)) {
      if (last != nullptr) *last = std::move(d);
      return result;
    }
  }
}

bool Generation::Append(GenerateResult& r, Delta& d) {
  r.generated_ids.insert(r.generated_ids.end(), d.ids.begin(), d.ids.end());
  r.logprobs.insert(r.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  for (auto& t : d.top_logprobs) r.top_logprobs.push_back(std::move(t));
  r.text += d.text;
  r.prompt_logprobs.insert(r.prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
  r.prompt_ranks.insert(r.prompt_ranks.end(), d.prompt_ranks.begin(), d.prompt_ranks.end());
  for (auto& t : d.prompt_top_logprobs) r.prompt_top_logprobs.push_back(std::move(t));
  if (!d.finished) return false;
  r.finish_reason = d.finish_reason;
  r.stop_string = d.stop_string;
  r.cached_tokens = d.cached_tokens;
  return true;
}

StatusOr<std::vector<GenerateResult>> Generation::CollectAll(std::vector<std::unique_ptr<Generation>>& gens,
                                                             bool (*abandoned)()) {
  std::vector<GenerateResult> out;
  for (auto& g : gens) {
    // An error drops `gens` with the caller, which cancels the others.
    RS_ASSIGN_OR_RETURN(GenerateResult r, Collect(*g, abandoned));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ropeserve::service
