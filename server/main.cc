// ropeserve: an inference server for RoPE transformer models.
// main() only parses flags and dispatches to a subcommand (server/cli/).
#include <utility>
#include <vector>

#include "server/cli/commands.h"
#include "server/runner/threads.h"

int main(int argc, char** argv) {
  ropeserve::TuneAllocator();
  CLI::App app{
      "ropeserve: serves RoPE decoder (Llama, Qwen2, Qwen3) and span (ModernBERT QA) checkpoints in Hugging Face "
      "layout.\n"
      "Run `ropeserve <command> --help` for a command's flags."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ropeserve 0.1.0");
  int threads = 0;
  app.add_option("--threads", threads, "CPU compute threads for LibTorch (0 = all cores)")
      ->envname("ROPESERVE_THREADS")
      ->check(CLI::Range(0, 4096));

  std::vector<std::pair<CLI::App*, ropeserve::cli::Runner>> commands;
  auto add = [&](ropeserve::cli::Runner (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    ropeserve::cli::Runner run = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(&ropeserve::cli::AddGenerate);
  add(&ropeserve::cli::AddMakeModel);
  add(&ropeserve::cli::AddBench);
  add(&ropeserve::cli::AddBenchQa);
  add(&ropeserve::cli::AddTokenize);
  add(&ropeserve::cli::AddChatTemplate);
  add(&ropeserve::cli::AddQa);
  add(&ropeserve::cli::AddEncode);
#ifdef ROPESERVE_HAVE_NETWORK
  add(&ropeserve::cli::AddServe);
  add(&ropeserve::cli::AddLoadgen);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ropeserve::SetComputeThreads(threads);
  for (auto& [sub, run] : commands)
    if (sub->parsed()) return run();
  return 2;
}
