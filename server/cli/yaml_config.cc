#include "server/cli/yaml_config.h"

#include <yaml-cpp/yaml.h>

namespace ropeserve::cli {

std::string YamlConfig::to_config(const CLI::App*, bool, bool, std::string) const {
  return "";  // writing configs back is not offered
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  std::vector<CLI::ConfigItem> items;
  try {
    YAML::Node root = YAML::Load(input);
    if (root.IsNull()) return items;  // an empty file
    if (!root.IsMap()) throw CLI::ConfigError("the config file must be a YAML mapping of flag names to values");
    for (auto it = root.begin(); it != root.end(); ++it) {
      CLI::ConfigItem item;
      item.parents = {subcommand_};
      item.name = it->first.as<std::string>();
      if (!item.name.empty() && item.name[0] == '-') item.name.erase(0, item.name.find_first_not_of('-'));
      const YAML::Node v = it->second;  // a copy: the iterator yields a temporary pair
      if (v.IsSequence()) {
        for (const auto& e : v) {
          if (!e.IsScalar()) throw CLI::ConfigError("config key '" + item.name + "': list items must be scalars");
          item.inputs.push_back(e.as<std::string>());
        }
      } else if (v.IsScalar()) {
        item.inputs.push_back(v.as<std::string>());
      } else {
        throw CLI::ConfigError("config key '" + item.name + "' must be a scalar or a list of scalars");
      }
      items.push_back(std::move(item));
    }
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError(std::string("invalid YAML in the config file: ") + e.what());
  }
  return items;
}

}  // namespace ropeserve::cli
