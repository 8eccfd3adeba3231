#include "server/api/observability/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <random>

namespace ropeserve::api {

namespace {

std::atomic<bool> g_json{false};
// Marks a message whose rest is a JSON object of extra fields (only
// LogAccess writes it; format strings elsewhere start with plain text).
constexpr char kFieldsMarker = '\x1e';

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json line;
    const auto t = std::chrono::system_clock::to_time_t(msg.time);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[80];  // room for any int the fields could hold (-Wformat-truncation)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
    line["time"] = buf;
    line["level"] =
        std::string(spdlog::level::to_string_view(msg.level).data(), spdlog::level::to_string_view(msg.level).size());
    std::string text(msg.payload.data(), msg.payload.size());
    if (!text.empty() && text[0] == kFieldsMarker) {
      auto nl = text.find('\n');
      line["msg"] = text.substr(1, nl == std::string::npos ? std::string::npos : nl - 1);
      auto fields = nlohmann::ordered_json::parse(nl == std::string::npos ? "{}" : text.substr(nl + 1), nullptr, false);
      if (fields.is_object())
        for (auto it = fields.begin(); it != fields.end(); ++it) line[it.key()] = it.value();
    } else {
      line["msg"] = std::move(text);
    }
    const std::string out = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

std::string RequestIdOrNew(const std::string& given) {
  bool ok = !given.empty() && given.size() <= 128;
  for (unsigned char c : given) ok = ok && (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':');
  if (ok) return given;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

Status ConfigureLogging(const std::string& format) {
  if (format == "text") {
    g_json = false;
    return Status::Ok();
  }
  if (format != "json") return InvalidArgument("--log-format must be 'text' or 'json'");
  g_json = true;
  spdlog::set_formatter(std::make_unique<JsonFormatter>());
  return Status::Ok();
}

void LogAccess(const std::string& message, const nlohmann::ordered_json& fields) {
  if (g_json) {
    spdlog::info("{}{}\n{}", kFieldsMarker, message,
                 fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  std::string line = message;
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    line += " " + it.key() + "=";
    // Plain tokens stay bare; anything with spaces or control characters
    // (paths and ids come from clients) is quoted and escaped.
    bool bare = it->is_string() && !it->get<std::string>().empty();
    if (bare)
      for (unsigned char c : it->get<std::string>()) bare = bare && c > 0x20 && c < 0x7f && c != '"';
    line += bare ? it->get<std::string>() : it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  spdlog::info("{}", line);
}

}  // namespace ropeserve::api
