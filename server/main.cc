// ropeserve: an inference server for RoPE transformer models.
// main() only parses flags and dispatches to a subcommand (server/cli/).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/kernel_config.h"
#include "server/cli/commands.h"
#include "server/serving/threads.h"

namespace {

// An option's environment variable that is set but gave the option no value
// ("" when none). CLI11 2.3 (Debian 12) fails the parse when an environment
// value fails the option's check; 2.4 (Debian 13) drops it silently and the
// command runs as if it were unset (ROPESERVE_MODEL=/wrong/path would serve
// the demo model, or refuse with an unrelated message). Refused on both.
std::string DroppedEnvironmentValue(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    const std::string env = o->get_envname();
    if (env.empty() || o->count() > 0) continue;
    const char* v = std::getenv(env.c_str());
    if (v != nullptr && *v != '\0')
      return env + "=" + std::string(v).substr(0, 500) + " is not a valid value for " + o->get_name();
  }
  for (const CLI::App* sub : app.get_subcommands())
    if (std::string bad = DroppedEnvironmentValue(*sub); !bad.empty()) return bad;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  ropeserve::TuneAllocator();
  CLI::App app{
      "ropeserve: serves RoPE decoder (Llama, Qwen2, Qwen3) and span (ModernBERT QA) checkpoints in Hugging Face "
      "layout.\n"
      "Run `ropeserve <command> --help` for a command's flags."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ropeserve 0.1.0");
  int threads = 0;
  app.add_option("--threads", threads,
                 "CPU compute threads (the kernels' pool and LibTorch's); 0 = the CPUs this process may use: its "
                 "affinity mask and cgroup CPU quota, not the machine's core count")
      ->envname("ROPESERVE_THREADS")
      ->check(CLI::Range(0, 4096));
  // The CPU kernels' configuration (kernels/cpu/kernel_config.h): flags,
  // whose defaults are the ROPESERVE_KERNEL_* environment variables.
  std::string env_error;
  auto env_kernels = ropeserve::cpu::KernelConfigFromEnvironment(env_error);
  if (!env_kernels) {
    std::fprintf(stderr, "error: %s\n", env_error.c_str());
    return 2;
  }
  ropeserve::cpu::KernelConfig kernels = *env_kernels;
  std::string isa = kernels.isa ? ropeserve::cpu::IsaName(*kernels.isa) : "auto";
  app.add_option("--kernel-isa", isa,
                 "CPU kernels: the instruction set whose kernel variants run: auto (the best this CPU runs), amx, "
                 "avx512, avx2, neon or generic (the scalar reference variants); one this CPU cannot run is an error "
                 "(env ROPESERVE_KERNEL_ISA)")
      ->check([](const std::string& v) {
        ropeserve::cpu::KernelConfig probe;
        return ropeserve::cpu::SetKernelIsa(probe, v);
      })
      ->capture_default_str();
  std::string avx512 = "on";
  app.add_option("--kernel-avx512", avx512,
                 "CPU kernels: off caps --kernel-isa at avx2 (the older switch; on changes nothing; env "
                 "ROPESERVE_KERNEL_AVX512)")
      ->check([](const std::string& v) {
        return ropeserve::cpu::ParseSwitch(v) ? std::string() : std::string("expected 1/on/true or 0/off/false");
      });
  app.add_option("--kernel-pool-spin-us", kernels.pool_spin_us,
                 "CPU kernels: microseconds an idle thread-pool worker spins before it sleeps (env "
                 "ROPESERVE_KERNEL_POOL_SPIN_US)")
      ->check(CLI::Range(std::int64_t{0}, ropeserve::cpu::kMaxPoolSpinUs))
      ->capture_default_str();
  std::string int8_rows =
      kernels.int8_vnni_max_rows ? std::to_string(*kernels.int8_vnni_max_rows) : std::string("auto");
  app.add_option("--kernel-int8-vnni-max-rows", int8_rows,
                 "CPU kernels: int8 linears of up to this many rows run the matrix-vector kernel (VNNI, AVX2's "
                 "vpmaddwd, NEON), larger ones the packed GEMM over widened panels; auto: where the two cross on "
                 "the ISA (16 with VNNI, every count on AVX2), /v1/info says which (env "
                 "ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS)")
      ->check([](const std::string& v) {
        ropeserve::cpu::KernelConfig probe;
        return ropeserve::cpu::SetInt8VnniMaxRows(probe, v);
      })
      ->capture_default_str();
  app.add_option("--kernel-amx-min-rows", kernels.amx_min_rows,
                 "CPU kernels: bf16 linears (and int8 / int4 ones past their matrix-vector kernels) of at least "
                 "this many rows run on AMX tiles when the ISA is amx; 0: never (env ROPESERVE_KERNEL_AMX_MIN_ROWS)")
      ->check(CLI::Range(std::int64_t{0}, ropeserve::cpu::kMaxAmxMinRows))
      ->capture_default_str();

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
  if (const std::string bad = DroppedEnvironmentValue(app); !bad.empty()) {
    std::fprintf(stderr, "error: %s\n", bad.c_str());
    return 2;
  }
  // Flags over the environment's values: the ISA given (or the
  // environment's), then the older switch.
  ropeserve::cpu::SetInt8VnniMaxRows(kernels, int8_rows);  // checked above
  std::string kernel_error = ropeserve::cpu::SetKernelIsa(kernels, isa);
  if (kernel_error.empty())
    kernel_error = ropeserve::cpu::ApplyAvx512Switch(kernels, *ropeserve::cpu::ParseSwitch(avx512));
  if (!kernel_error.empty()) {
    std::fprintf(stderr, "error: --kernel-isa %s / --kernel-avx512 %s: %s\n", isa.c_str(), avx512.c_str(),
                 kernel_error.c_str());
    return 2;
  }
  ropeserve::cpu::SetKernelConfig(kernels);
  ropeserve::SetComputeThreads(threads);
  for (auto& [sub, run] : commands)
    if (sub->parsed()) return run();
  return 2;
}
