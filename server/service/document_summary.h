// Summaries of documents longer than the model's context, through the
// batching engine (docs/api.md, "Long documents"):
//  - map_reduce: the document is split at paragraph/sentence boundaries
//    with overlap (server/service/document_splitter.h); every chunk's
//    summary is submitted at once, so the engine batches them (their
//    prompts share the instruction prefix, which the prefix cache keeps
//    once). The chunk summaries are then combined: while they do not fit
//    one prompt, groups of them are summarized again, in parallel too
//    ("reduce" rounds), and the last prompt gives the final summary;
//  - refine: the chunks in order, each prompt holding the summary so far
//    and the next chunk (sequential: one request at a time);
//  - truncate: the document's first tokens that fit, cut at a boundary;
//  - auto: one pass when the document fits, else map_reduce.
// auto and truncate cut only a text that does not fit; map_reduce and
// refine, asked for, chunk any text longer than one chunk.
// Only the final summary gets the request's stop strings, constraint and
// style; the intermediate ones are plain text of at most chunk_max_tokens.
//
// A DocumentSummary is an OutputSource that never blocks its reader (Next
// with a zero timeout advances its phases; gRPC's reactors drive it from
// engine notifications). Phase changes tokenize the next prompts on the
// reading thread: a few thousand tokens at most per change.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/service/generation.h"
#include "server/service/generation_service.h"
#include "server/service/request_params.h"

namespace ropeserve::service {

enum class SummaryStrategy { kAuto, kTruncate, kMapReduce, kRefine };
enum class SummaryStyle { kParagraph, kBullets, kHeadline };

// How a document will be summarized: decided before anything runs, so bad
// parameters and oversized documents are refused up front.
struct SummaryPlan {
  // As asked, kAuto resolved to kMapReduce when the document does not fit
  // (one chunk is one pass whatever the strategy).
  SummaryStrategy strategy = SummaryStrategy::kAuto;
  SummaryStyle style = SummaryStyle::kParagraph;
  std::string final_instruction;  // the final prompt's instruction (style, focus, language)
  std::string focus;
  std::vector<std::string> chunks;    // the document's chunks (one for a single pass)
  std::int64_t max_tokens = 0;        // the final summary's
  std::int64_t chunk_max_tokens = 0;  // each intermediate summary's
  std::int64_t chunk_tokens = 0;
  std::int64_t chunk_overlap = 0;
  std::int64_t document_tokens = 0;
  bool truncated = false;  // truncate cut the text (chunks[0] is its kept start)
};

// How the plan runs: "single" (the whole text, one pass), "truncate",
// "map_reduce" or "refine".
const char* StrategyName(const SummaryPlan& plan);

// The instructions of each kind of prompt (exposed for tests and docs).
std::string StyleInstruction(SummaryStyle style, const std::string& instruction, const std::string& focus,
                             const std::string& language);
std::string MapInstruction(const std::string& focus);
std::string ReduceInstruction(const std::string& focus);
std::string CombineInstruction(const std::string& final_instruction);
std::string RefineInstruction(const std::string& final_instruction, bool last);

class DocumentSummarizer {
 public:
  // Texts over service.limits().max_document_bytes are refused
  // (PayloadTooLarge, 413).
  explicit DocumentSummarizer(GenerationService& service) : service_(service) {}

  // Validates and splits. InvalidArgument naming the field; PayloadTooLarge
  // for a document over the size limit or needing more than
  // kMaxDocumentChunks chunks.
  // `generation.max_tokens` is the final summary's.
  StatusOr<SummaryPlan> Plan(const SummaryFields& fields, const GenerationFields& generation) const;
  // Starts the plan: a single pass is one Generation (admission as
  // GenerationService::Start); the others a DocumentSummary (never waits).
  // `timeout_seconds` bounds the whole request, all phases together; every
  // request it starts is traced under `trace`.
  StatusOr<std::unique_ptr<OutputSource>> Start(const SummaryPlan& plan, const GenerationFields& fields,
                                                double timeout_seconds, GenerationService::Admission admission,
                                                const TraceContext& trace = {});

 private:
  GenerationService& service_;
};

}  // namespace ropeserve::service
