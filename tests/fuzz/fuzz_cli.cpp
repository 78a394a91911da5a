// libFuzzer target: `tessera train`'s argument parsing and validation (parse only, nothing
// runs), and the --resume reconciliation of a checkpoint's settings JSON. The input is split
// at newlines into argv; the same bytes are offered as the stored settings.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/error.h"
#include "train_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {"train"};
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      args.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  CLI::App app{"fuzz"};
  auto* cmd = app.add_subcommand("train");
  tessera::tools::TrainArgs a;
  tessera::tools::add_train_options(*cmd, a);
  std::vector<const char*> argv = {"tessera"};
  for (const auto& s : args) argv.push_back(s.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    tessera::tools::validate_train_args(a);
  } catch (const CLI::Error&) {
  } catch (const tessera::Error&) {
  }
  try {
    tessera::tools::TrainArgs b;
    (void)tessera::tools::reconcile_resume(b, text, [&](const std::string& flag) { return text.find(flag) != std::string::npos; });
  } catch (const tessera::Error&) {
  }
  return 0;
}
