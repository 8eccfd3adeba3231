// Server-Sent Events over running requests: the REST handlers' streaming
// replies (rest_handlers.cc, rest_summarize.cc).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/api/rest/rest_handlers.h"
#include "server/common/ready_signal.h"
#include "server/service/generation.h"

namespace ropeserve::api {

// "data: <json>\n\n".
std::string Event(const nlohmann::json& j);
// "event: <name>\ndata: <json>\n\n" (Anthropic's and the Responses API's
// typed events).
std::string NamedEvent(const char* name, const nlohmann::ordered_json& j);

// Multiplexes several output sources (the choices of one request, or one
// document summary) into one event stream: callbacks turn each delta into
// events. A failure mid-stream becomes one error event, the other sources
// are cancelled, and the stream ends.
class GenerationStream : public EventSource {
 public:
  using OnDelta = std::function<void(std::size_t index, const service::OutputDelta& d, std::string& out)>;
  using OnEnd = std::function<void(std::string& out)>;

  GenerationStream(std::vector<std::unique_ptr<service::OutputSource>> sources, OnDelta on_delta, OnEnd on_end);
  template <typename T>
  GenerationStream(std::vector<std::unique_ptr<T>> sources, OnDelta on_delta, OnEnd on_end)
      : GenerationStream(Upcast(std::move(sources)), std::move(on_delta), std::move(on_end)) {}
  ~GenerationStream() override;

  // How the stream starts, fails and ends. The default is OpenAI's: no
  // prelude, a failure as one {"error": ...} data event, "data: [DONE]"
  // last (also after a failure).
  struct Format {
    std::string prelude;                              // written before anything else
    std::function<std::string(const Status&)> error;  // a failure's events (null: OpenAI's)
    std::string done = "data: [DONE]\n\n";
  };
  void SetFormat(Format format) { format_ = std::move(format); }

  bool Poll(std::string& out, std::chrono::milliseconds wait) override;
  void Cancel() override;
  // After `every` without an event, an SSE comment (": keep-alive"): a
  // long document's map phase can be silent for minutes, and only a write
  // finds out that the client left (it also keeps proxies from timing the
  // stream out). Clients ignore comments. Zero (the default): none.
  void SetHeartbeat(std::chrono::milliseconds every) { heartbeat_ = every; }

 private:
  template <typename T>
  static std::vector<std::unique_ptr<service::OutputSource>> Upcast(std::vector<std::unique_ptr<T>> in) {
    std::vector<std::unique_ptr<service::OutputSource>> out;
    for (auto& p : in) out.push_back(std::move(p));
    return out;
  }
  std::vector<std::unique_ptr<service::OutputSource>> sources_;
  OnDelta on_delta_;
  OnEnd on_end_;
  std::shared_ptr<ReadySignal> signal_;
  Format format_;
  bool started_ = false;
  bool done_ = false;
  std::chrono::milliseconds heartbeat_{0};
  std::chrono::steady_clock::time_point last_event_ = std::chrono::steady_clock::now();
};

}  // namespace ropeserve::api
