#include "server/stop_matcher.h"

#include <algorithm>

namespace ember::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Step StopMatcher::push(std::string_view text) {
  Step out;
  if (stopped_) return out;
  held_.append(text);
  if (stops_.empty()) {
    out.emit.swap(held_);
    return out;
  }
  // The earliest complete match wins (the answer ends before it).
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    size_t at = held_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    out.emit = held_.substr(0, first);
    out.stopped = stopped_ = true;
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  out.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string rest;
  if (!stopped_) rest.swap(held_);
  return rest;
}

}  // namespace ember::server
