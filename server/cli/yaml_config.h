// CLI11 reads `--config FILE` through this: a flat YAML mapping whose keys
// are the long flag names of one subcommand (without dashes), e.g.
//   http-port: 8080
//   api-key: [key1, key2]
// Precedence: command-line flags, then the file, then environment variables.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ropeserve::cli {

class YamlConfig : public CLI::Config {
 public:
  // Items are attributed to the subcommand `subcommand`.
  explicit YamlConfig(std::string subcommand) : subcommand_(std::move(subcommand)) {}
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  std::string subcommand_;
};

}  // namespace ropeserve::cli
