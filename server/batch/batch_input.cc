#include "server/batch/batch_input.h"

#include <nlohmann/json.hpp>

#include <map>

#include "server/common/json_text.h"

namespace ropeserve::batch {

namespace {

using ojson = nlohmann::ordered_json;

bool KnownEndpoint(const std::string& url) {
  for (const char* e : kBatchEndpoints)
    if (url == e) return true;
  return false;
}

// The line's problem, or Ok.
Status CheckLine(const std::string& text, const BatchInputLimits& limits, const BodyCheck& check_body,
                 std::map<std::string, std::size_t>& seen, std::size_t number, BatchLine& out) {
  if (text.size() > limits.max_line_bytes)
    return InvalidArgument("the line has " + std::to_string(text.size()) + " bytes, more than the " +
                           std::to_string(limits.max_line_bytes) + " a request body may have");
  auto parsed = ParseJsonObject(text);
  if (!parsed.ok()) return InvalidArgument(parsed.status().message());
  const ojson& line = *parsed;
  for (const auto& [key, value] : line.items())
    if (key != "custom_id" && key != "method" && key != "url" && key != "body")
      return InvalidArgument("unknown field '" + key.substr(0, 100) + "' (custom_id, method, url, body)");
  auto custom_id = line.find("custom_id");
  if (custom_id == line.end() || !custom_id->is_string() || custom_id->get<std::string>().empty())
    return InvalidArgument("'custom_id' must be a non-empty string");
  if (custom_id->get<std::string>().size() > 512) return InvalidArgument("'custom_id' is longer than 512 bytes");
  auto method = line.find("method");
  if (method == line.end() || *method != "POST") return InvalidArgument("'method' must be \"POST\"");
  auto url = line.find("url");
  if (url == line.end() || !url->is_string() || !KnownEndpoint(url->get<std::string>())) {
    std::string known;
    for (const char* e : kBatchEndpoints) known += (known.empty() ? "" : ", ") + std::string(e);
    return InvalidArgument("'url' must be one of " + known);
  }
  auto body = line.find("body");
  if (body == line.end() || !body->is_object()) return InvalidArgument("'body' must be an object");
  out.number = number;
  out.custom_id = custom_id->get<std::string>();
  out.url = url->get<std::string>();
  out.body = DumpOrdered(*body);
  if (auto [it, inserted] = seen.emplace(out.custom_id, number); !inserted)
    return InvalidArgument("custom_id '" + out.custom_id.substr(0, 100) + "' is already used by line " +
                           std::to_string(it->second));
  if (Status s = check_body(out.url, out.body); !s.ok())
    return InvalidArgument("body" + (s.param().empty() ? std::string() : "." + s.param()) + ": " + s.message());
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<BatchLine>> ReadBatchInput(std::string_view content, const BatchInputLimits& limits,
                                                const BodyCheck& check_body) {
  std::vector<BatchLine> lines;
  std::map<std::string, std::size_t> seen;
  std::string errors;
  std::size_t bad = 0, number = 0;
  for (std::size_t pos = 0; pos < content.size();) {
    std::size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string text(content.substr(pos, end - pos));
    pos = end + 1;
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are skipped
    if (lines.size() + bad >= limits.max_lines)
      return Status(InvalidArgument("the file has more than " + std::to_string(limits.max_lines) +
                                    " requests (at most " + std::to_string(limits.max_lines) + " per batch)"))
          .WithParam("file");
    BatchLine line;
    Status s = CheckLine(text, limits, check_body, seen, number, line);
    if (s.ok()) {
      lines.push_back(std::move(line));
      continue;
    }
    if (++bad <= 10) errors += (errors.empty() ? "" : "; ") + ("line " + std::to_string(number) + ": " + s.message());
  }
  if (bad > 0) {
    if (bad > 10) errors += "; and " + std::to_string(bad - 10) + " more bad lines";
    return Status(InvalidArgument("the batch input file has " + std::to_string(bad) + " bad line" +
                                  (bad == 1 ? "" : "s") + ": " + errors))
        .WithParam("file");
  }
  if (lines.empty()) return Status(InvalidArgument("the batch input file holds no request")).WithParam("file");
  return lines;
}

}  // namespace ropeserve::batch
