// Fuzz target: the worker protocol's frame decoder and every payload decoder. Invariants under
// arbitrary bytes, fed in arbitrary splits: no crash, no allocation beyond the input's size, no
// endless loop; after a fatal error no further frame is produced.
#include <cstddef>
#include <cstdint>

#include "worker/protocol.h"

using namespace ember::worker::proto;

namespace {

void decode_payload(const Frame& f) {
  switch (f.type) {
    case Type::Configure:
      (void)decode<Configure>(f.payload);
      break;
    case Type::Submit:
      (void)decode<Submit>(f.payload);
      break;
    case Type::Cancel:
      (void)decode<Cancel>(f.payload);
      break;
    case Type::Stop:
      (void)decode<Stop>(f.payload);
      break;
    case Type::SaveWarm:
      (void)decode<SaveWarm>(f.payload);
      break;
    case Type::Hello:
      (void)decode<Hello>(f.payload);
      break;
    case Type::LoadFailed:
      (void)decode<LoadFailed>(f.payload);
      break;
    case Type::Accepted:
      (void)decode<Accepted>(f.payload);
      break;
    case Type::Rejected:
      (void)decode<Rejected>(f.payload);
      break;
    case Type::Token:
      (void)decode<Token>(f.payload);
      break;
    case Type::Done:
      (void)decode<Done>(f.payload);
      break;
    case Type::Stats:
      (void)decode<Stats>(f.payload);
      break;
    case Type::ProtocolError:
      (void)decode<ProtocolError>(f.payload);
      break;
    case Type::WarmSaved:
      (void)decode<WarmSaved>(f.payload);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the split size, so frames cross feed() boundaries.
  const size_t step = 1 + data[0] % 64;
  FrameDecoder d;
  for (size_t off = 1; off < size; off += step) {
    size_t n = off + step <= size ? step : size - off;
    d.feed({data + off, n});
    for (int guard = 0; guard < 100000; ++guard) {
      auto f = d.next();
      if (!f) {
        if (d.fatal()) return 0;
        continue;
      }
      if (!*f) break;
      decode_payload(**f);
    }
  }
  return 0;
}
