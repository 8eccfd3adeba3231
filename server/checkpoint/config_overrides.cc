#include "server/checkpoint/config_overrides.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "server/common/json_file.h"
#include "server/common/remove_tree.h"

namespace ropeserve {

namespace fs = std::filesystem;

StatusOr<ConfigOverlay> ConfigOverlay::Create(const std::string& dir, const nlohmann::json& overrides) {
  if (!overrides.is_object()) return InvalidArgument("hf_overrides must be a JSON object");
  RS_ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonObjectFile(dir + "/config.json"));
  for (const auto& [key, value] : overrides.items()) config[key] = value;
  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "ropeserve-overrides-XXXXXX").string();
  if (ec || mkdtemp(pattern.data()) == nullptr)
    return Internal("cannot create a directory for the config overrides of " + dir);
  ConfigOverlay overlay(pattern);
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() == "config.json") continue;
    const fs::path target = fs::absolute(e.path(), ec);
    if (!ec) fs::create_symlink(target, fs::path(pattern) / e.path().filename(), ec);
    if (ec) return Internal("cannot link " + e.path().string() + " for its config overrides: " + ec.message());
  }
  if (ec) return Internal("cannot list " + dir + ": " + ec.message());
  std::ofstream out(fs::path(pattern) / "config.json");
  out << config.dump(2) << "\n";
  if (!out) return Internal("cannot write the overridden config.json of " + dir);
  return overlay;
}

ConfigOverlay::~ConfigOverlay() {
  if (path_.empty()) return;
  RemoveTree(path_);  // the links, not what they point to
}

StatusOr<std::pair<std::string, nlohmann::json>> ParseNamedOverrides(const std::string& flag) {
  const std::size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0)
    return InvalidArgument("--hf-overrides takes NAME=JSON (NAME: an --encoder's model id)");
  nlohmann::json j = nlohmann::json::parse(flag.substr(eq + 1), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return InvalidArgument("--hf-overrides " + flag.substr(0, eq) + "=...: the value is not a JSON object");
  return std::make_pair(flag.substr(0, eq), std::move(j));
}

}  // namespace ropeserve
