#include "server/api/observability/otlp_exporter.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace ropeserve::api {

namespace {

using json = nlohmann::json;

json AttributeJson(const SpanAttribute& a) {
  json value;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          value["stringValue"] = v;
        else if constexpr (std::is_same_v<T, std::int64_t>)
          value["intValue"] = std::to_string(v);  // int64 as a string
        else if constexpr (std::is_same_v<T, double>)
          value["doubleValue"] = v;
        else
          value["boolValue"] = v;
      },
      a.second);
  return json{{"key", a.first}, {"value", value}};
}

}  // namespace

std::int64_t UnixNanos(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string OtlpTracesJson(const std::vector<SpanRecord>& spans, const std::string& service_name) {
  json list = json::array();
  for (const SpanRecord& s : spans) {
    json span = {{"traceId", s.context.TraceIdHex()},
                 {"spanId", s.context.SpanIdHex()},
                 {"name", s.name},
                 {"kind", static_cast<int>(s.kind)},
                 {"startTimeUnixNano", std::to_string(s.start_unix_nanos)},
                 {"endTimeUnixNano", std::to_string(s.end_unix_nanos)}};
    const bool has_parent = std::any_of(s.parent_id.begin(), s.parent_id.end(), [](std::uint8_t b) { return b != 0; });
    if (has_parent) span["parentSpanId"] = HexBytes(s.parent_id.data(), s.parent_id.size());
    json attrs = json::array();
    for (const auto& a : s.attributes) attrs.push_back(AttributeJson(a));
    span["attributes"] = std::move(attrs);
    if (s.error) span["status"] = {{"code", 2}, {"message", s.status_message}};
    list.push_back(std::move(span));
  }
  json resource = {{"attributes", json::array({AttributeJson({"service.name", service_name})})}};
  json body = {{"resourceSpans",
                json::array({{{"resource", resource},
                              {"scopeSpans", json::array({{{"scope", {{"name", "ropeserve"}}}, {"spans", list}}})}}})}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ParseOtlpHeaders(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return InvalidArgument("OTLP headers: '" + std::string(item) + "' is not key=value");
    const std::string_view key = trim(item.substr(0, eq)), raw = trim(item.substr(eq + 1));
    static const std::string kTokenChars = "!#$%&'*+-.^_`|~";
    if (key.empty() || !std::all_of(key.begin(), key.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || kTokenChars.find(c) != std::string::npos;
        }))
      return InvalidArgument("OTLP headers: '" + std::string(key) + "' is not a header name");
    std::string value;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        value.push_back(static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
        i += 2;
      } else {
        value.push_back(raw[i]);
      }
    }
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
      return InvalidArgument("OTLP headers: the value of '" + std::string(key) + "' holds control characters");
    out.emplace_back(std::string(key), std::move(value));
  }
  return out;
}

StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Start(OtlpExporterOptions options) {
  // scheme://host[:port][/path]: host names, IPv4 and bracketed IPv6.
  static const std::regex kUrl(R"(^(https?)://([A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(:([0-9]{1,5}))?(/[^\s?#]*)?$)");
  std::smatch m;
  if (!std::regex_match(options.endpoint, m, kUrl))
    return InvalidArgument(
        "--otlp-traces-endpoint must be an http:// or https:// URL (e.g. http://collector:4318/v1/traces), "
        "not '" +
        options.endpoint.substr(0, 200) + "'");
  if (m[4].matched && (std::stoi(m[4].str()) == 0 || std::stoi(m[4].str()) > 65535))
    return InvalidArgument("--otlp-traces-endpoint: port out of range");
  if (options.max_batch_spans == 0 || options.max_queue_spans == 0)
    return InvalidArgument("OTLP queue sizes must be positive");
  std::string path = m[5].matched ? m[5].str() : "";
  if (path.empty() || path == "/") path = "/v1/traces";
  std::string base = m[1].str() + "://" + m[2].str() + (m[3].matched ? m[3].str() : "");
  std::unique_ptr<OtlpExporter> e(new OtlpExporter(std::move(options), std::move(base), std::move(path)));
  e->thread_ = std::thread([p = e.get()] { p->Run(); });
  return e;
}

OtlpExporter::OtlpExporter(OtlpExporterOptions options, std::string scheme_host_port, std::string path)
    : options_(std::move(options)), scheme_host_port_(std::move(scheme_host_port)), path_(std::move(path)) {}

OtlpExporter::~OtlpExporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OtlpExporter::Export(SpanRecord span) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queue_spans) {
      dropped_.fetch_add(1);
      return;
    }
    queue_.push_back(std::move(span));
    if (queue_.size() < options_.max_batch_spans) return;
  }
  cv_.notify_one();
}

void OtlpExporter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait_for(lock, options_.flush_interval, [&] { return stop_ || queue_.size() >= options_.max_batch_spans; });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    const std::size_t n = std::min(queue_.size(), options_.max_batch_spans);
    std::vector<SpanRecord> batch(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
    queue_.erase(queue_.begin(), queue_.begin() + n);
    const bool stopping = stop_;
    lock.unlock();
    if (Post(batch))
      exported_.fetch_add(batch.size());
    else
      dropped_.fetch_add(batch.size());
    lock.lock();
    if (stopping) {  // one attempt at shutdown: what is left is dropped
      dropped_.fetch_add(queue_.size());
      queue_.clear();
      return;
    }
  }
}

bool OtlpExporter::Post(const std::vector<SpanRecord>& batch) {
  if (!client_) {
    client_ = std::make_unique<httplib::Client>(scheme_host_port_);
    client_->set_connection_timeout(std::min(options_.timeout, std::chrono::milliseconds(1000)));
    client_->set_read_timeout(options_.timeout);
    client_->set_write_timeout(options_.timeout);
    client_->set_keep_alive(true);
    client_->set_default_headers(httplib::Headers(options_.headers.begin(), options_.headers.end()));
  }
  auto res = client_->Post(path_.c_str(), OtlpTracesJson(batch, options_.service_name), "application/json");
  const bool ok = res && res->status >= 200 && res->status < 300;
  if (!ok) {
    // One warning a minute at most: a collector that is down must not flood the log.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_warning_ > std::chrono::minutes(1)) {
      last_warning_ = now;
      spdlog::warn("OTLP export to {}{} failed ({}): {} spans dropped", scheme_host_port_, path_,
                   res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error()), batch.size());
    }
  }
  return ok;
}

}  // namespace ropeserve::api
