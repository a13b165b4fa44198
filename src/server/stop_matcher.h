// Stop strings, checked on detokenized text (never on token ids): a stop string split across
// tokens still matches. Text that could be the start of a stop string is held back until it is
// either ruled out (then emitted) or completed (then it and everything after it are dropped).
// Invariant: the concatenation of everything emitted never contains a stop string, and, when
// the input is valid UTF-8, every emitted piece ends on a character boundary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ember::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Step {
    std::string emit;      // safe to send now
    bool stopped = false;  // a stop string was completed; generation should end
  };
  // Feeds newly detokenized text. After `stopped`, further pushes emit nothing.
  Step push(std::string_view text);
  // End of generation without a match: whatever was held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended the text (the earliest match), once stopped.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace ember::server
