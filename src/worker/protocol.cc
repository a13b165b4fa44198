#include "worker/protocol.h"

#include <cstring>
#include <type_traits>

namespace ember::worker::proto {
namespace {

// Writes fields in order (little-endian; this code assumes a little-endian host, as ember's
// kernels already do).
struct Writer {
  std::vector<uint8_t>& out;
  template <typename T>
  void raw(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void operator()(const T& v) {
    if constexpr (std::is_enum_v<T>) {
      raw(static_cast<uint8_t>(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      raw(static_cast<uint8_t>(v));
    } else if constexpr (std::is_arithmetic_v<T>) {
      raw(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      raw(static_cast<uint32_t>(v.size()));
      out.insert(out.end(), v.begin(), v.end());
    } else {  // vectors and pairs
      put_compound(v);
    }
  }
  template <typename A, typename B>
  void put_compound(const std::pair<A, B>& p) {
    (*this)(p.first);
    (*this)(p.second);
  }
  template <typename E>
  void put_compound(const std::vector<E>& v) {
    raw(static_cast<uint32_t>(v.size()));
    for (const auto& e : v) (*this)(e);
  }
};

// Reads fields in order; any overrun or bad enum value sets `bad` and stops consuming.
struct Reader {
  std::span<const uint8_t> in;
  size_t pos = 0;
  bool bad = false;
  std::string why;

  void fail_with(std::string w) {
    if (!bad) why = std::move(w);
    bad = true;
  }
  template <typename T>
  bool raw(T& v) {
    if (bad || in.size() - pos < sizeof(T)) {
      fail_with(fmt::format("truncated at byte {}", pos));
      return false;
    }
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  // A count of elements each at least `min_size` bytes: never more than the bytes left.
  bool count(uint32_t& n, size_t min_size) {
    if (!raw(n)) return false;
    if (uint64_t{n} * min_size > in.size() - pos) {
      fail_with(fmt::format("count {} at byte {} exceeds the payload", n, pos));
      return false;
    }
    return true;
  }
  template <typename T>
  void operator()(T& v) {
    if constexpr (std::is_enum_v<T>) {
      uint8_t b = 0;
      if (raw(b)) v = static_cast<T>(b);  // range-checked by the message's check()
    } else if constexpr (std::is_same_v<T, bool>) {
      uint8_t b = 0;
      if (raw(b)) v = b != 0;
    } else if constexpr (std::is_arithmetic_v<T>) {
      raw(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      uint32_t n = 0;
      if (!count(n, 1)) return;
      v.assign(reinterpret_cast<const char*>(in.data() + pos), n);
      pos += n;
    } else {
      get_compound(v);
    }
  }
  template <typename A, typename B>
  void get_compound(std::pair<A, B>& p) {
    (*this)(p.first);
    (*this)(p.second);
  }
  template <typename E>
  void get_compound(std::vector<E>& v) {
    uint32_t n = 0;
    if (!count(n, std::is_arithmetic_v<E> ? sizeof(E) : 1)) return;
    v.clear();
    v.reserve(n);
    for (uint32_t i = 0; i < n && !bad; ++i) (*this)(v.emplace_back());
  }
};

// Each message's fields, listed once for both directions.
template <typename V, typename M>
void fields(V& v, M& m);

template <typename V>
void sampling_fields(V& v, SamplingParams& s) {
  v(s.temperature), v(s.top_k), v(s.top_p), v(s.min_p), v(s.repeat_penalty), v(s.repeat_last_n);
  v(s.presence_penalty), v(s.frequency_penalty), v(s.seed), v(s.top_logprobs);
  v(s.logprobs), v(s.logit_bias);
}

template <typename V>
void stats_fields(V& v, EngineStats& s) {
  v(s.active), v(s.queued), v(s.steps), v(s.tokens_generated), v(s.prompt_tokens), v(s.kv_bytes);
  v(s.cache_hits), v(s.cache_misses), v(s.cache_evictions), v(s.cached_tokens), v(s.cache_blocks);
  v(s.cache_bytes), v(s.warm_blocks_loaded), v(s.warm_load_seconds), v(s.warm_bytes_written);
  v(s.warm_save_seconds);
}

template <typename V>
void fields(V& v, Configure& m) {
  v(m.settings), v(m.eog_tokens);
}
template <typename V>
void fields(V& v, Submit& m) {
  v(m.id), v(m.prompt);
  sampling_fields(v, m.sampling);
  v(m.max_tokens), v(m.deadline_ms), v(m.n), v(m.constraint);
}
template <typename V>
void fields(V& v, Cancel& m) {
  v(m.id), v(m.cause);
}
template <typename V>
void fields(V&, Stop&) {}
template <typename V>
void fields(V&, SaveWarm&) {}
template <typename V>
void fields(V& v, WarmSaved& m) {
  v(m.report.ok), v(m.report.blocks), v(m.report.bytes), v(m.report.seconds), v(m.report.message);
}
template <typename V>
void fields(V& v, Hello& m) {
  v(m.model.arch_name), v(m.model.name), v(m.model.n_ctx), v(m.pid);
  stats_fields(v, m.stats);
}
template <typename V>
void fields(V& v, LoadFailed& m) {
  v(m.message);
}
template <typename V>
void fields(V& v, Accepted& m) {
  v(m.id);
}
template <typename V>
void fields(V& v, Rejected& m) {
  v(m.id), v(m.error.kind), v(m.error.message);
}
template <typename V>
void fields(V& v, Token& m) {
  v(m.id), v(m.token.id), v(m.token.logprob), v(m.token.top);
}
template <typename V>
void fields(V& v, Done& m) {
  v(m.id), v(m.done.reason), v(m.done.cause), v(m.done.usage.prompt_tokens);
  v(m.done.usage.completion_tokens), v(m.done.usage.cached_tokens), v(m.done.timings.queued_ms),
      v(m.done.timings.prefill_ms);
  v(m.done.timings.decode_ms), v(m.done.timings.cancel_ms), v(m.done.timings.cancel_phase);
  v(m.done.message), v(m.done.retryable);
}
template <typename V>
void fields(V& v, Stats& m) {
  stats_fields(v, m.stats);
}
template <typename V>
void fields(V& v, ProtocolError& m) {
  v(m.message);
}

// Enum ranges: a value outside them is a malformed frame, never a cast to garbage.
bool check(const Cancel& m) {
  return m.cause <= CancelCause::SlowConsumer;
}
bool check(const Rejected& m) {
  return m.error.kind <= SubmitError::Kind::BadConstraint;
}
bool check(const Done& m) {
  return m.done.reason <= FinishReason::Error && m.done.cause <= CancelCause::SlowConsumer &&
         m.done.timings.cancel_phase <= engine::CancelPhase::Decode;
}
bool check(const Submit& m) {
  return m.n >= 1;
}
template <typename M>
bool check(const M&) {
  return true;
}

template <typename M>
void append_frame(std::vector<uint8_t>& out, const M& m) {
  const size_t start = out.size();
  Writer w{out};
  w.raw(kMagic);
  w.raw(kVersion);
  w.raw(static_cast<uint16_t>(M::kType));
  w.raw(uint32_t{0});  // length, patched below
  fields(w, const_cast<M&>(m));
  auto len = static_cast<uint32_t>(out.size() - start - kHeaderSize);
  std::memcpy(out.data() + start + 8, &len, sizeof len);
}

}  // namespace

const char* type_name(Type t) {
  switch (t) {
    case Type::Configure:
      return "configure";
    case Type::Submit:
      return "submit";
    case Type::Cancel:
      return "cancel";
    case Type::Stop:
      return "stop";
    case Type::SaveWarm:
      return "save-warm";
    case Type::WarmSaved:
      return "warm-saved";
    case Type::Hello:
      return "hello";
    case Type::LoadFailed:
      return "load-failed";
    case Type::Accepted:
      return "accepted";
    case Type::Rejected:
      return "rejected";
    case Type::Token:
      return "token";
    case Type::Done:
      return "done";
    case Type::Stats:
      return "stats";
    case Type::ProtocolError:
      return "protocol-error";
  }
  return nullptr;
}

#define EMBER_PROTO_MESSAGE(M)                                                    \
  void append(std::vector<uint8_t>& out, const M& m) {                            \
    append_frame(out, m);                                                         \
  }                                                                               \
  template <>                                                                     \
  Result<M> decode<M>(std::span<const uint8_t> payload) {                         \
    M m;                                                                          \
    Reader r{payload};                                                            \
    fields(r, m);                                                                 \
    if (!r.bad && r.pos != payload.size()) {                                      \
      r.fail_with(fmt::format("{} trailing bytes", payload.size() - r.pos));      \
    }                                                                             \
    if (!r.bad && !check(m)) r.fail_with("a value out of range");                 \
    if (r.bad) return fail("malformed {} frame: {}", type_name(M::kType), r.why); \
    return m;                                                                     \
  }
EMBER_PROTO_MESSAGE(Configure)
EMBER_PROTO_MESSAGE(Submit)
EMBER_PROTO_MESSAGE(Cancel)
EMBER_PROTO_MESSAGE(Stop)
EMBER_PROTO_MESSAGE(SaveWarm)
EMBER_PROTO_MESSAGE(WarmSaved)
EMBER_PROTO_MESSAGE(Hello)
EMBER_PROTO_MESSAGE(LoadFailed)
EMBER_PROTO_MESSAGE(Accepted)
EMBER_PROTO_MESSAGE(Rejected)
EMBER_PROTO_MESSAGE(Token)
EMBER_PROTO_MESSAGE(Done)
EMBER_PROTO_MESSAGE(Stats)
EMBER_PROTO_MESSAGE(ProtocolError)
#undef EMBER_PROTO_MESSAGE

void FrameDecoder::feed(std::span<const uint8_t> bytes) {
  if (fatal_) return;
  // Discard what an oversized frame still owes before buffering anything.
  size_t drop = static_cast<size_t>(std::min<uint64_t>(skip_, bytes.size()));
  skip_ -= drop;
  bytes = bytes.subspan(drop);
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<Frame>> FrameDecoder::next() {
  if (fatal_) return fail("the worker protocol stream is unusable after an earlier error");
  if (skip_ > 0 || buf_.size() - pos_ < kHeaderSize) return std::optional<Frame>();
  const uint8_t* h = buf_.data() + pos_;
  uint32_t magic, len;
  uint16_t version, type;
  std::memcpy(&magic, h, 4);
  std::memcpy(&version, h + 4, 2);
  std::memcpy(&type, h + 6, 2);
  std::memcpy(&len, h + 8, 4);
  if (magic != kMagic) {
    fatal_ = true;
    return fail("bad frame magic {:#010x} (expected {:#010x}): not a worker protocol stream", magic,
                kMagic);
  }
  if (version != kVersion) {
    fatal_ = true;
    return fail("worker protocol version {} (this ember speaks {})", version, kVersion);
  }
  if (len > kMaxPayload) {
    pos_ += kHeaderSize;
    size_t have = std::min<size_t>(buf_.size() - pos_, len);
    pos_ += have;
    skip_ = len - have;
    return fail("frame of {} bytes exceeds the limit of {} bytes; skipped", len, kMaxPayload);
  }
  if (buf_.size() - pos_ - kHeaderSize < len) return std::optional<Frame>();
  Frame f;
  f.type = static_cast<Type>(type);
  const uint8_t* p = h + kHeaderSize;
  f.payload.assign(p, p + len);
  pos_ += kHeaderSize + len;
  if (type_name(f.type) == nullptr) return fail("unknown frame type {}; skipped", type);
  return std::optional<Frame>(std::move(f));
}

}  // namespace ember::worker::proto
