#include "profiler/torch_warnings.h"

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <mutex>
#include <string>
#include <unordered_set>

namespace tapp {
namespace {

// Past this many distinct messages every warning is printed (a message that
// embeds a number would otherwise grow the set without end).
constexpr size_t kMaxRemembered = 1024;

class OncePerMessage : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override {
    if (first_time(warning.msg())) printer_.process(warning);
  }
#else
  void process(const c10::SourceLocation& where, const std::string& msg, bool verbatim) override {
    if (first_time(msg)) printer_.process(where, msg, verbatim);
  }
#endif
  int64_t repeated() {
    std::lock_guard<std::mutex> lock(mu_);
    return repeated_;
  }

 private:
  bool first_time(const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    if (seen_.count(msg)) {
      ++repeated_;
      return false;
    }
    if (seen_.size() < kMaxRemembered) seen_.insert(msg);
    return true;
  }

  c10::WarningHandler printer_;  // LibTorch's own: prints to stderr
  std::mutex mu_;
  std::unordered_set<std::string> seen_;
  int64_t repeated_ = 0;
};

// Never destroyed: a thread may still warn while the process exits.
OncePerMessage& handler() {
  static auto* h = new OncePerMessage;
  return *h;
}

}  // namespace

void print_each_torch_warning_once() {
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(&handler());
#else
  c10::Warning::set_warning_handler(&handler());
#endif
}

int64_t torch_warnings_repeated() { return handler().repeated(); }

}  // namespace tapp
