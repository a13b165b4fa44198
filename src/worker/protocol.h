// The worker protocol: frames between the front and `ember engine` over the
// worker's stdin (front → worker: Configure, Submit, Cancel, Stop) and stdout (worker → front:
// Hello, LoadFailed, Accepted, Rejected, Token, Done, Stats, ProtocolError).
// See docs/architecture.md, "Worker protocol".
//
// A frame is a 12-byte header — magic "EMBW", version (u16), type (u16), payload length
// (u32), all little-endian — then the payload: fields in a fixed order per message, integers
// little-endian, floats as IEEE bits, strings and vectors prefixed by a u32 count.
//
// Robustness (the decoder is fuzzed: tests/fuzz/worker_frame_fuzz.cc): a payload longer than
// kMaxPayload is an error and its bytes are skipped, so the stream stays in step; an unknown
// type or a payload that does not decode is an error for that frame only; a bad magic or
// version cannot be resynchronized and is fatal for the stream. No input makes the decoder
// allocate more than the bytes it was given, crash, or loop.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "worker/types.h"

namespace ember::worker::proto {

inline constexpr uint32_t kMagic = 0x57424D45;  // "EMBW" as little-endian bytes
inline constexpr uint16_t kVersion = 3;  // 2: n, logit_bias, constraint, cache stats; 3: save-warm
inline constexpr size_t kHeaderSize = 12;
inline constexpr uint32_t kMaxPayload = 64u << 20;  // a 16M-token prompt at most

enum class Type : uint16_t {
  // front -> worker
  Configure = 1,
  Submit = 2,
  Cancel = 3,
  Stop = 4,
  SaveWarm = 5,
  // worker -> front
  Hello = 16,
  LoadFailed = 17,
  Accepted = 18,
  Rejected = 19,
  Token = 20,
  Done = 21,
  Stats = 22,
  ProtocolError = 23,
  WarmSaved = 24,
};
const char* type_name(Type t);

struct Configure {  // the engine settings, as the settings table dumps them
  static constexpr Type kType = Type::Configure;
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<int32_t> eog_tokens;  // from the front's text codec
};
struct Submit {
  static constexpr Type kType = Type::Submit;
  uint64_t id = 0;  // assigned by the front; choice i of n > 1 is id + i
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // with logprobs and logit_bias
  int32_t max_tokens = 0;
  int64_t deadline_ms = -1;  // from receipt; -1: none
  int32_t n = 1;             // choices (ids id .. id + n - 1, each its own events)
  std::string constraint;    // TokenConstraint::spec() (worker/constraint.h); empty: none
};
struct Cancel {
  static constexpr Type kType = Type::Cancel;
  uint64_t id = 0;  // 0: every request
  CancelCause cause = CancelCause::Client;
};
struct Stop {  // same as EOF: drain and exit 0
  static constexpr Type kType = Type::Stop;
};
struct SaveWarm {  // write the warm-state file now (`ember restart`); answered by WarmSaved
  static constexpr Type kType = Type::SaveWarm;
};
struct Hello {
  static constexpr Type kType = Type::Hello;
  ModelInfo model;
  int64_t pid = 0;
  EngineStats stats;  // at load (warm blocks loaded), so the front has them once it is ready
};
struct LoadFailed {
  static constexpr Type kType = Type::LoadFailed;
  std::string message;
};
struct Accepted {
  static constexpr Type kType = Type::Accepted;
  uint64_t id = 0;
};
struct Rejected {
  static constexpr Type kType = Type::Rejected;
  uint64_t id = 0;
  SubmitError error;
};
struct Token {
  static constexpr Type kType = Type::Token;
  uint64_t id = 0;
  TokenEvent token;
};
struct Done {
  static constexpr Type kType = Type::Done;
  uint64_t id = 0;
  DoneEvent done;
};
struct Stats {
  static constexpr Type kType = Type::Stats;
  EngineStats stats;
};
struct ProtocolError {
  static constexpr Type kType = Type::ProtocolError;
  std::string message;
};

struct WarmSaved {
  static constexpr Type kType = Type::WarmSaved;
  engine::WarmReport report;
};

// Appends one whole frame (header + payload) to `out`.
void append(std::vector<uint8_t>& out, const Configure& m);
void append(std::vector<uint8_t>& out, const Submit& m);
void append(std::vector<uint8_t>& out, const Cancel& m);
void append(std::vector<uint8_t>& out, const Stop& m);
void append(std::vector<uint8_t>& out, const SaveWarm& m);
void append(std::vector<uint8_t>& out, const Hello& m);
void append(std::vector<uint8_t>& out, const LoadFailed& m);
void append(std::vector<uint8_t>& out, const Accepted& m);
void append(std::vector<uint8_t>& out, const Rejected& m);
void append(std::vector<uint8_t>& out, const Token& m);
void append(std::vector<uint8_t>& out, const Done& m);
void append(std::vector<uint8_t>& out, const Stats& m);
void append(std::vector<uint8_t>& out, const ProtocolError& m);
void append(std::vector<uint8_t>& out, const WarmSaved& m);

template <typename M>
std::vector<uint8_t> encode(const M& m) {
  std::vector<uint8_t> out;
  append(out, m);
  return out;
}

// A frame split from the byte stream; the payload is not decoded yet.
struct Frame {
  Type type{};
  std::vector<uint8_t> payload;
};

// Decodes a payload as message M: every byte must be used, enums must be in range.
template <typename M>
Result<M> decode(std::span<const uint8_t> payload);

// Splits a byte stream into frames. feed() appends bytes; next() returns the next whole frame,
// nullopt when more bytes are needed, or an error for a bad frame. After a fatal error
// (fatal() is true) the stream cannot continue; other errors skip the bad frame.
class FrameDecoder {
 public:
  void feed(std::span<const uint8_t> bytes);
  Result<std::optional<Frame>> next();
  bool fatal() const { return fatal_; }
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  uint64_t skip_ = 0;  // payload bytes of an oversized frame still to discard
  bool fatal_ = false;
};

}  // namespace ember::worker::proto
