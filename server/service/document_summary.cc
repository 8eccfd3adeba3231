#include "server/service/document_summary.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "server/service/document_splitter.h"
#include "server/service/generation_service.h"
#include "server/service/input_processor.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::service {

namespace {

using Clock = std::chrono::steady_clock;

// Tokens a prompt may gain over its parts' separate counts (a chunk
// tokenized alone may split differently at its edges; separators).
constexpr std::int64_t kPromptMargin = 16;
// Default sizes: chunks of at most 2048 tokens (more chunks run in
// parallel; long prompts summarize worse), a final summary of at most 256.
constexpr std::int64_t kDefaultChunkTokens = 2048;
constexpr std::int64_t kDefaultMaxTokens = 256;
constexpr std::int64_t kMinChunkTokens = 16;

// One request of a summary (a chunk's, a reduce round's or the final
// one), for the input processor: every generation enters the same way.
GenerationRequest SummaryRequest(std::vector<std::int64_t> ids, const GenerationFields& fields, double timeout,
                                 const TraceContext& trace) {
  GenerationRequest r;
  r.prompts.push_back(Prompt{std::nullopt, std::move(ids)});
  r.fields = fields;
  r.endpoint = Endpoint::kSummarize;
  r.timeout_seconds = timeout;
  r.trace = trace;
  r.prompt_param = "text";
  return r;
}

StatusOr<SummaryStrategy> ParseStrategy(const std::optional<std::string>& s) {
  if (!s || *s == "auto") return SummaryStrategy::kAuto;
  if (*s == "truncate") return SummaryStrategy::kTruncate;
  if (*s == "map_reduce") return SummaryStrategy::kMapReduce;
  if (*s == "refine") return SummaryStrategy::kRefine;
  return InvalidArgument("'strategy' must be one of auto, truncate, map_reduce, refine").WithParam("strategy");
}

StatusOr<SummaryStyle> ParseStyle(const std::optional<std::string>& s) {
  if (!s || *s == "paragraph") return SummaryStyle::kParagraph;
  if (*s == "bullets") return SummaryStyle::kBullets;
  if (*s == "headline") return SummaryStyle::kHeadline;
  return InvalidArgument("'style' must be one of paragraph, bullets, headline").WithParam("style");
}

std::string FocusSentence(const std::string& focus) {
  if (focus.empty()) return "";
  const char last = focus.back();
  return " Focus on: " + focus + (last == '.' || last == '?' || last == '!' ? "" : ".");
}

// The document's token spans in bytes (the tokenizer reports code points).
std::vector<TokenSpan> ByteSpans(const std::string& text, const tok::Encoding& e) {
  const std::vector<std::size_t> byte_of = tok::CodePointStarts(text);
  auto at = [&](std::size_t cp) { return byte_of[std::min(cp, byte_of.size() - 1)]; };
  std::vector<TokenSpan> out;
  out.reserve(e.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (i < e.special_tokens_mask.size() && e.special_tokens_mask[i]) continue;
    const std::size_t b = at(e.offsets[i].start), en = at(e.offsets[i].end);
    if (!out.empty() && b < out.back().begin) continue;  // keep spans ordered
    out.push_back({b, std::max(b, en)});
  }
  return out;
}

Status TooLong(std::int64_t value, std::int64_t max, const char* param, const std::string& why) {
  return InvalidArgument("'" + std::string(param) + "' is " + std::to_string(value) + "; at most " +
                         std::to_string(max) + " " + why)
      .WithParam(param);
}

}  // namespace

std::string StyleInstruction(SummaryStyle style, const std::string& instruction, const std::string& focus,
                             const std::string& language) {
  std::string out = instruction;
  if (out.empty()) {
    switch (style) {
      case SummaryStyle::kParagraph:
        out = GenerationService::kDefaultSummaryInstruction;
        break;
      case SummaryStyle::kBullets:
        out = "Summarize the following text as a list of bullet points, one per line, each starting with \"- \".";
        break;
      case SummaryStyle::kHeadline:
        out = "Write one headline for the following text: a single line of at most 15 words.";
        break;
    }
  }
  out += FocusSentence(focus);
  if (!language.empty()) out += " Write the summary in " + language + ".";
  return out;
}

const char* StrategyName(const SummaryPlan& plan) {
  if (plan.chunks.size() <= 1) return plan.truncated ? "truncate" : "single";
  return plan.strategy == SummaryStrategy::kRefine ? "refine" : "map_reduce";
}

std::string MapInstruction(const std::string& focus) {
  return "Summarize the following part of a longer document concisely, keeping the facts a summary of the whole "
         "document needs." +
         FocusSentence(focus);
}

std::string ReduceInstruction(const std::string& focus) {
  return "The following are summaries of consecutive parts of a longer document. Combine them into one concise "
         "summary that keeps the facts a summary of the whole document needs." +
         FocusSentence(focus);
}

std::string CombineInstruction(const std::string& final_instruction) {
  return "The following are summaries of consecutive parts of one document; together they stand for the whole "
         "document. " +
         final_instruction;
}

std::string RefineInstruction(const std::string& final_instruction, bool last) {
  std::string out =
      "Below are a summary of the beginning of a document and the next part of the document. Rewrite the summary "
      "so that it also covers the new part.";
  if (last) out += " " + final_instruction;
  return out;
}

// The text of a refine step's prompt (after its instruction).
static std::string RefineText(const std::string& summary, const std::string& chunk) {
  return "Summary so far:\n" + summary + "\n\nNext part of the document:\n" + chunk;
}

StatusOr<SummaryPlan> DocumentSummarizer::Plan(const SummaryFields& f, const GenerationFields& g) const {
  SummaryPlan plan;
  if (f.text.empty()) return InvalidArgument("'text' must not be empty").WithParam("text");
  if (f.text.size() > service_.limits().max_document_bytes)
    return PayloadTooLarge("the document has " + std::to_string(f.text.size()) +
                           " bytes; this server summarizes at most " +
                           std::to_string(service_.limits().max_document_bytes) + " (serve --max-document-bytes)")
        .WithParam("text");
  RS_ASSIGN_OR_RETURN(plan.strategy, ParseStrategy(f.strategy));
  RS_ASSIGN_OR_RETURN(plan.style, ParseStyle(f.style));
  for (auto [value, name] : {std::pair{&f.focus, "focus"}, std::pair{&f.language, "language"}})
    if (value->size() > kMaxSummaryFieldBytes)
      return InvalidArgument("'" + std::string(name) + "' is longer than " + std::to_string(kMaxSummaryFieldBytes) +
                             " bytes")
          .WithParam(name);
  const tok::Tokenizer* tokenizer = service_.tokenizer();
  if (tokenizer == nullptr)
    return FailedPrecondition("summarization needs the model's tokenizer.json, which this server has not loaded");
  plan.focus = f.focus;
  plan.final_instruction = StyleInstruction(plan.style, f.instruction, f.focus, f.language);
  const std::int64_t L = service_.limits().max_model_len;

  // The longest instruction and framing any prompt of this request has.
  std::int64_t overhead = 0;
  for (const std::string& ins :
       {plan.final_instruction, MapInstruction(f.focus), ReduceInstruction(f.focus),
        CombineInstruction(plan.final_instruction), RefineInstruction(plan.final_instruction, true)}) {
    RS_ASSIGN_OR_RETURN(auto ids, service_.SummaryPrompt(RefineText("", "x"), ins));
    overhead = std::max<std::int64_t>(overhead, static_cast<std::int64_t>(ids.size()));
  }
  overhead += kPromptMargin;

  RS_ASSIGN_OR_RETURN(tok::Encoding doc, tokenizer->Encode(f.text, /*add_special_tokens=*/false));
  plan.document_tokens = static_cast<std::int64_t>(doc.size());
  const std::int64_t requested = g.max_tokens.value_or(0);
  plan.max_tokens = requested > 0 ? requested : std::min<std::int64_t>(kDefaultMaxTokens, L / 4);
  const bool fits = plan.document_tokens + overhead + plan.max_tokens <= L;
  // A max_tokens no prompt leaves room for: one pass too, and the validator
  // answers it as for any request (400 context_length_exceeded).
  const bool hopeless = requested > 0 && requested + overhead + kMinChunkTokens > L;
  // auto and truncate need to cut only what does not fit; map_reduce and
  // refine asked explicitly chunk any text longer than a chunk (long
  // prompts are slow to prefill and summarize worse).
  const bool chunk_anyway = plan.strategy == SummaryStrategy::kMapReduce || plan.strategy == SummaryStrategy::kRefine;
  if (hopeless || (fits && !chunk_anyway)) {
    // One pass over the whole text, exactly as a short request (the
    // validator gives max_tokens its usual default).
    plan.chunks = {f.text};
    return plan;
  }

  if (plan.strategy == SummaryStrategy::kAuto) plan.strategy = SummaryStrategy::kMapReduce;
  // Sizes of the multi-pass strategies.
  std::int64_t m = f.chunk_max_tokens.value_or(0);
  if (m <= 0) m = std::max<std::int64_t>(16, std::min(plan.max_tokens, L / 8));
  if (3 * (m + 2) + overhead > L)
    return TooLong(m, (L - overhead) / 3 - 2, "chunk_max_tokens",
                   "for this model's context (three intermediate summaries must fit one prompt)");
  if (plan.max_tokens + overhead + m > L)
    return TooLong(plan.max_tokens, L - overhead - m, "max_tokens",
                   "for a summary of a document longer than the context (the combined summaries need room)");
  plan.chunk_max_tokens = m;
  std::int64_t room = L - overhead;
  if (plan.strategy == SummaryStrategy::kTruncate)
    room -= plan.max_tokens;
  else if (plan.strategy == SummaryStrategy::kMapReduce)
    room -= m;
  else
    room -= m + std::max(m, plan.max_tokens);  // refine: the summary so far and the next one
  if (room < kMinChunkTokens)
    return InvalidArgument("this model's context (" + std::to_string(L) +
                           " tokens) leaves no room for a chunk of the document")
        .WithParam("max_tokens");
  std::int64_t c = f.chunk_tokens.value_or(0);
  if (c == 0) c = std::min(kDefaultChunkTokens, room);
  if (c < kMinChunkTokens || c > room)
    return InvalidArgument("'chunk_tokens' must be between " + std::to_string(kMinChunkTokens) + " and " +
                           std::to_string(room) + " for this request")
        .WithParam("chunk_tokens");
  std::int64_t overlap = f.chunk_overlap.value_or(std::min<std::int64_t>(c / 8, 256));
  if (overlap < 0 || overlap > c / 4)
    return InvalidArgument("'chunk_overlap' must be between 0 and chunk_tokens / 4 (" + std::to_string(c / 4) + ")")
        .WithParam("chunk_overlap");
  plan.chunk_tokens = c;
  plan.chunk_overlap = overlap;

  const auto spans = ByteSpans(f.text, doc);
  const auto chunks = SplitDocument(f.text, spans, {static_cast<std::size_t>(c), static_cast<std::size_t>(overlap)});
  if (plan.strategy == SummaryStrategy::kTruncate) {
    if (!chunks.empty()) plan.chunks = {f.text.substr(chunks[0].begin, chunks[0].end - chunks[0].begin)};
    plan.truncated = true;
  } else {
    if (chunks.size() > static_cast<std::size_t>(kMaxDocumentChunks))
      return PayloadTooLarge("the document needs " + std::to_string(chunks.size()) + " chunks of " + std::to_string(c) +
                             " tokens; at most " + std::to_string(kMaxDocumentChunks) + " per request")
          .WithParam("text");
    for (const auto& ch : chunks) plan.chunks.push_back(f.text.substr(ch.begin, ch.end - ch.begin));
  }
  if (plan.chunks.empty()) return InvalidArgument("'text' has nothing but whitespace").WithParam("text");
  return plan;
}

namespace {

// A map-reduce or refine summary in flight. See the header.
class DocumentSummary final : public OutputSource {
 public:
  DocumentSummary(GenerationService& service, const SummaryPlan& plan, const GenerationFields& fields,
                  double timeout_seconds, const TraceContext& trace)
      : service_(service), plan_(plan), fields_(fields), trace_(trace), signal_(std::make_shared<Signal>()) {
    if (timeout_seconds > 0)
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(std::min(timeout_seconds, 1e7)));
  }

  Status Begin() {
    if (plan_.strategy == SummaryStrategy::kRefine) {
      phase_ = Phase::kRefine;
      return StartStep(plan_.chunks[0], MapInstruction(plan_.focus), false);
    }
    phase_ = Phase::kMap;
    for (const std::string& chunk : plan_.chunks)
      RS_RETURN_IF_ERROR(StartStep(chunk, MapInstruction(plan_.focus), false));
    return Status::Ok();
  }

  StatusOr<OutputDelta> Next(std::optional<std::chrono::milliseconds> timeout) override {
    const auto until = Clock::now() + timeout.value_or(std::chrono::milliseconds(0));
    while (!finished_) {
      {
        std::lock_guard<std::mutex> lock(signal_->mu);
        signal_->pending = false;
      }
      OutputDelta out;
      auto r = Advance(out);
      if (!r.ok()) {
        Fail();
        return r.status();
      }
      if (*r == Progress::kOutput) return out;
      if (*r == Progress::kAgain) continue;
      std::unique_lock<std::mutex> lock(signal_->mu);
      if (!timeout) {
        signal_->cv.wait(lock, [&] { return signal_->pending; });
      } else if (!signal_->cv.wait_until(lock, until, [&] { return signal_->pending; })) {
        break;
      }
    }
    return OutputDelta{};
  }

  void SetNotify(std::function<void()> fn, bool call_if_ready) override {
    {
      std::lock_guard<std::mutex> lock(signal_->mu);
      signal_->fn = fn;
    }
    if (call_if_ready && fn) fn();
  }

  void Cancel() override {
    for (auto& s : steps_)
      if (s.gen) s.gen->Cancel();
  }
  bool finished() const override { return finished_; }
  std::int64_t prompt_tokens() const override { return 0; }

 private:
  enum class Phase { kMap, kReduce, kRefine, kFinal };
  enum class Progress { kOutput, kIdle, kAgain };
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool pending = false;
    std::function<void()> fn;  // the reader's notification
  };
  struct Step {
    std::unique_ptr<Generation> gen;
    std::string text;
    bool done = false;
  };

  void Fail() {
    finished_ = true;
    Cancel();
  }

  // Starts one request of the current round (the final one with the
  // request's own options).
  Status StartStep(const std::string& text, const std::string& instruction, bool final) {
    RS_ASSIGN_OR_RETURN(auto ids, service_.SummaryPrompt(text, instruction));
    return StartPrompt(ids, final);
  }
  Status StartPrompt(const std::vector<std::int64_t>& ids, bool final) {
    GenerationFields f;
    if (final) {
      f = fields_;
      f.max_tokens = plan_.max_tokens;
    } else {
      // Intermediate summaries: the request's sampling, plain text.
      f.temperature = fields_.temperature;
      f.top_p = fields_.top_p;
      f.top_k = fields_.top_k;
      f.min_p = fields_.min_p;
      f.repetition_penalty = fields_.repetition_penalty;
      f.frequency_penalty = fields_.frequency_penalty;
      f.presence_penalty = fields_.presence_penalty;
      f.seed = fields_.seed;
      f.priority = fields_.priority;
      f.server_priority = fields_.server_priority;
      f.max_tokens = plan_.chunk_max_tokens;
    }
    double timeout = 0;
    if (deadline_) {
      timeout = std::chrono::duration<double>(*deadline_ - Clock::now()).count();
      if (timeout <= 0) return Status(ErrorCode::kDeadlineExceeded, "request timed out");
    }
    RS_ASSIGN_OR_RETURN(PreparedGeneration p, PrepareGeneration(service_, SummaryRequest(ids, f, timeout, trace_)));
    RS_ASSIGN_OR_RETURN(auto gen, service_.Start(p.prompts[0], p.generation, GenerationService::Admission::kDontWait));
    gen->SetNotify(
        [s = signal_] {
          std::function<void()> fn;
          {
            std::lock_guard<std::mutex> lock(s->mu);
            s->pending = true;
            s->cv.notify_all();
            fn = s->fn;
          }
          if (fn) fn();
        },
        /*call_if_ready=*/false);
    steps_.push_back({std::move(gen), "", false});
    return Status::Ok();
  }

  void Count(const OutputDelta& last) {
    prompt_ += last.prompt_tokens;
    completion_ += last.completion_tokens;
    cached_ += last.cached_tokens;
  }

  void Report(const char* phase, int done, int total) {
    OutputDelta d;
    d.progress = OutputDelta::Progress{phase, done, total};
    queued_.push_back(std::move(d));
  }

  // Reads what the current round's unfinished requests have; the number
  // of those now finished.
  StatusOr<int> Poll() {
    int done = 0;
    for (auto& s : steps_) {
      if (s.done) continue;
      RS_ASSIGN_OR_RETURN(OutputDelta d, s.gen->Next(std::chrono::milliseconds(0)));
      s.text += d.text;
      if (!d.finished) continue;
      s.done = true;
      Count(d);
      ++done;
    }
    return done;
  }

  int Done() const {
    return static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& s) { return s.done; }));
  }

  StatusOr<Progress> Advance(OutputDelta& out) {
    if (!queued_.empty()) {
      out = std::move(queued_.front());
      queued_.pop_front();
      return Progress::kOutput;
    }
    switch (phase_) {
      case Phase::kMap:
      case Phase::kReduce: {
        RS_ASSIGN_OR_RETURN(int newly, Poll());
        const int total = static_cast<int>(steps_.size()), done = Done();
        for (int k = done - newly + 1; k <= done; ++k) Report(phase_ == Phase::kMap ? "map" : "reduce", k, total);
        if (done == total) RS_RETURN_IF_ERROR(Combine());
        return queued_.empty() && newly == 0 ? Progress::kIdle : Progress::kAgain;
      }
      case Phase::kRefine: {
        RS_ASSIGN_OR_RETURN(int newly, Poll());
        if (newly == 0) return Progress::kIdle;
        const std::size_t next = steps_.size();  // chunks summarized so far
        Report("refine", static_cast<int>(next), static_cast<int>(plan_.chunks.size()));
        const std::string summary = Trimmed(steps_.back().text);
        const bool last = next + 1 == plan_.chunks.size();
        if (last) phase_ = Phase::kFinal;
        RS_RETURN_IF_ERROR(
            StartStep(RefineText(summary, plan_.chunks[next]), RefineInstruction(plan_.final_instruction, last), last));
        return Progress::kAgain;
      }
      case Phase::kFinal: {
        RS_ASSIGN_OR_RETURN(OutputDelta d, steps_.back().gen->Next(std::chrono::milliseconds(0)));
        if (!d.finished && d.ids.empty() && d.text.empty()) return Progress::kIdle;
        if (d.finished) {
          Count(d);
          d.prompt_tokens = prompt_;
          d.completion_tokens = completion_;
          d.cached_tokens = cached_;
          finished_ = true;
        }
        out = std::move(d);
        return Progress::kOutput;
      }
    }
    return Progress::kIdle;
  }

  static std::string Trimmed(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b);
  }

  // A round ended: the final prompt when the summaries fit one, else a
  // reduce round over groups of them.
  Status Combine() {
    std::vector<std::string> summaries;
    for (auto& s : steps_) summaries.push_back(Trimmed(s.text));
    steps_.clear();
    std::string all;
    for (const auto& s : summaries) all += (all.empty() ? "" : "\n\n") + s;
    const std::int64_t L = service_.limits().max_model_len;
    // The final prompt, built once: started as it is when it fits.
    RS_ASSIGN_OR_RETURN(auto ids, service_.SummaryPrompt(all.empty() ? std::string(" ") : all,
                                                         CombineInstruction(plan_.final_instruction)));
    if (static_cast<std::int64_t>(ids.size()) + plan_.max_tokens <= L || summaries.size() < 2) {
      phase_ = Phase::kFinal;
      return StartPrompt(ids, true);
    }
    // Groups of consecutive summaries, each fitting a reduce prompt; the
    // plan guarantees any two do, so every round at least halves them.
    const std::string reduce = ReduceInstruction(plan_.focus);
    RS_ASSIGN_OR_RETURN(auto frame, service_.SummaryPrompt("x", reduce));
    const std::int64_t room = L - plan_.chunk_max_tokens - static_cast<std::int64_t>(frame.size()) - kPromptMargin;
    phase_ = Phase::kReduce;
    std::string group;
    std::int64_t used = 0;
    for (const auto& s : summaries) {
      RS_ASSIGN_OR_RETURN(tok::Encoding e, service_.tokenizer()->Encode(s, false));
      const auto n = static_cast<std::int64_t>(e.size()) + 2;
      if (!group.empty() && used + n > room) {
        RS_RETURN_IF_ERROR(StartStep(group, reduce, false));
        group.clear();
        used = 0;
      }
      group += (group.empty() ? "" : "\n\n") + s;
      used += n;
    }
    if (!group.empty()) RS_RETURN_IF_ERROR(StartStep(group, reduce, false));
    return Status::Ok();
  }

  GenerationService& service_;
  SummaryPlan plan_;
  GenerationFields fields_;
  std::optional<Clock::time_point> deadline_;
  TraceContext trace_;
  std::shared_ptr<Signal> signal_;
  Phase phase_ = Phase::kMap;
  std::vector<Step> steps_;                                // the current round (refine: every step so far)
  std::deque<OutputDelta> queued_;                         // progress events not read yet
  std::int64_t prompt_ = 0, completion_ = 0, cached_ = 0;  // of the finished requests
  bool finished_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<OutputSource>> DocumentSummarizer::Start(const SummaryPlan& plan,
                                                                  const GenerationFields& fields,
                                                                  double timeout_seconds,
                                                                  GenerationService::Admission admission,
                                                                  const TraceContext& trace) {
  if (plan.chunks.size() == 1) {
    RS_ASSIGN_OR_RETURN(auto ids, service_.SummaryPrompt(plan.chunks[0], plan.final_instruction));
    GenerationFields f = fields;
    if (plan.truncated) f.max_tokens = plan.max_tokens;
    RS_ASSIGN_OR_RETURN(PreparedGeneration p,
                        PrepareGeneration(service_, SummaryRequest(std::move(ids), f, timeout_seconds, trace)));
    RS_ASSIGN_OR_RETURN(auto gen, service_.Start(p.prompts[0], p.generation, admission));
    return std::unique_ptr<OutputSource>(std::move(gen));
  }
  auto job = std::make_unique<DocumentSummary>(service_, plan, fields, timeout_seconds, trace);
  RS_RETURN_IF_ERROR(job->Begin());
  return std::unique_ptr<OutputSource>(std::move(job));
}

}  // namespace ropeserve::service
