// `ropeserve tokenize`: runs a tokenizer.json over JSON Lines on stdin, in
// either direction. Used by tests and by anyone checking ids and offsets
// against another implementation.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "server/cli/commands.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::cli {

namespace {

struct TokenizeFlags {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool decode = false;
  bool skip_special_tokens = false;
};

std::string Dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

StatusOr<std::string> ProcessLine(const tok::Tokenizer& t, const TokenizeFlags& f, const std::string& line) {
  nlohmann::json in = nlohmann::json::parse(line, nullptr, false);
  if (in.is_discarded()) return InvalidArgument("line is not valid JSON (or not valid UTF-8)");
  nlohmann::json out;
  if (f.decode) {
    RS_ASSIGN_OR_RETURN(const std::vector<TokenId> ids, ReadJsonIdList(in, "ids"));
    RS_ASSIGN_OR_RETURN(std::string text, t.Decode(ids, f.skip_special_tokens));
    out["text"] = text;
  } else {
    if (!in.is_string()) return InvalidArgument("expected a JSON string");
    RS_ASSIGN_OR_RETURN(tok::Encoding e, t.Encode(in.get<std::string>(), f.add_special_tokens));
    out["ids"] = e.ids;
    nlohmann::json offs = nlohmann::json::array();
    for (const auto& o : e.offsets) offs.push_back({o.start, o.end});
    out["offsets"] = std::move(offs);
  }
  return Dump(out);
}

int RunTokenize(const TokenizeFlags& f) {
  auto t = tok::Tokenizer::FromPath(f.tokenizer);
  if (!t.ok()) return Fail(t.status().message());
  std::ios::sync_with_stdio(false);
  std::string line;
  size_t lineno = 0;
  int rc = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto out = ProcessLine(**t, f, line);
    if (out.ok()) {
      std::cout << *out << '\n';
    } else {
      // One output line per input line, so a bad line does not shift the
      // rest; the exit status reports it.
      std::cerr << "error: line " << lineno << ": " << out.status().message() << '\n';
      std::cout << Dump({{"error", out.status().message()}}) << '\n';
      rc = 1;
    }
  }
  std::cout.flush();
  return rc;
}

}  // namespace

Runner AddTokenize(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Tokenize JSON Lines from stdin: each line a JSON string -> {\"ids\":[...],\"offsets\":[[s,e],...]}\n"
      "(offsets are code-point indices into the line's string, half-open). With --decode, each line\n"
      "{\"ids\":[...]} -> {\"text\":\"...\"}. A bad line yields {\"error\":...} and exit status 1.");
  cmd->add_option("--tokenizer", f->tokenizer, "tokenizer.json, or a directory holding one")->required();
  cmd->add_flag("--add-special-tokens", f->add_special_tokens,
                "Apply the post-processor's special tokens (e.g. BOS), as add_special_tokens=True");
  cmd->add_flag("--decode", f->decode, "Decode ids to text instead of encoding");
  cmd->add_flag("--skip-special-tokens", f->skip_special_tokens, "With --decode: drop special tokens");
  return [f] { return RunTokenize(*f); };
}

}  // namespace ropeserve::cli
