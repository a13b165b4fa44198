// A byte-level grammar for JSON values, compiled from a JSON schema (structured output, tool
// arguments), and the pushdown machine that recognizes it one byte at a time. The machine is
// what grammar-constrained decoding asks "may this byte come next?" (grammar_mask.h turns that
// into a mask over the vocabulary).
//
// Invariants:
// - Deterministic: at every point each byte leads to at most one next state (anyOf
//   alternatives must start with different bytes; the compiler refuses those that do not), so
//   the state is one stack of frames, cheap to copy and usable as a cache key.
// - Output is compact JSON: no whitespace between tokens (strings may contain any text).
//   Object properties come in schema order; every required property appears; an object with
//   listed properties gets no others (valid for any schema, strict or not).
// - Schema features the machine cannot enforce (pattern, format, numeric bounds but a
//   non-negative minimum, ...) are a compile error naming the feature and where it is.
// - A Grammar is immutable once compiled and may be shared between threads; a Machine belongs
//   to one user.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace ember::text {

inline constexpr uint32_t kNoNode = 0xFFFFFFFFu;

enum class NodeKind : uint8_t { Object, Array, String, Number, Literals, AnyOf, Seq };

struct GrammarNode {
  NodeKind kind = NodeKind::Literals;
  // Object: properties in order; free (no properties listed): any string keys with values of
  // `items` (kNoNode: any value).
  struct Property {
    std::string name;
    uint32_t value = kNoNode;
    bool required = false;
  };
  std::vector<Property> props;
  bool free_object = false;
  // keys: one Literals node matching `"name":` of every property (tags: property indexes),
  // shared by all positions in the object: when properties [0, i) are done, only those from i
  // up to next_required[i] (the first required one at or after i; props.size() if none) may
  // come, which the recognizer enforces as it matches (Literals::object_keys). Linear in the
  // properties, where a key set per position would be quadratic.
  uint32_t keys = kNoNode;
  std::vector<uint32_t> next_required;  // [props.size() + 1]
  // Array items / free-object values; Seq parts in `parts`; AnyOf alternatives in `parts`.
  uint32_t items = kNoNode;
  std::vector<uint32_t> parts;
  int32_t min_count = 0, max_count = -1;       // array items; string characters (-1: no maximum)
  bool integer = false, non_negative = false;  // Number
  // Literals: sorted byte strings, each with a tag (reported to the parent) and the node that
  // follows it (kNoNode: the literal is the whole value).
  std::vector<std::string> lits;
  std::vector<uint32_t> lit_tags, lit_next;
  bool object_keys = false;         // an Object's `keys`: only the tags the object allows now match
  std::array<uint64_t, 4> first{};  // bytes that may start this node (AnyOf dispatch)
};

class Grammar {
 public:
  // Any JSON object (response_format json_object).
  static Grammar any_object();
  // A JSON schema (response_format json_schema, tool parameters), within SchemaLimits
  // (json_limits.h; the error names a limit it passes). Time and memory linear in the schema.
  static Result<Grammar> from_schema(const nlohmann::ordered_json& schema);
  // Building blocks for callers that wrap values in fixed text (tool-call formats).
  uint32_t add_literals(std::vector<std::pair<std::string, uint32_t>> lits_and_next);
  uint32_t add_seq(std::vector<uint32_t> parts);
  Result<uint32_t> add_schema(const nlohmann::ordered_json& schema);
  void set_root(uint32_t root) { root_ = root; }

  const GrammarNode& node(uint32_t i) const { return nodes_[i]; }
  size_t node_count() const { return nodes_.size(); }
  uint32_t root() const { return root_; }

 private:
  friend class SchemaCompiler;
  uint32_t add(GrammarNode n);
  std::vector<GrammarNode> nodes_;
  uint32_t root_ = kNoNode;
};

// The recognizer: a stack of frames over a Grammar. Copyable (a fixed array), so a caller can
// try bytes on a copy.
class Machine {
 public:
  // Deeper nesting is refused (the model must close). Room for a schema nested to
  // SchemaLimits::kMaxDepth (one frame a step at most) and a tool call's wrapping frames.
  static constexpr int kMaxDepth = 40;
  struct Frame {
    uint8_t kind = 0, state = 0;
    uint16_t a = 0;
    uint32_t node = 0;
    uint32_t b = 0, c = 0;  // objects: b is the index of the next property that may come
  };

  explicit Machine(const Grammar& g);
  // Consumes one byte; false (and the state unchanged in meaning: discard it) if not allowed.
  bool step(uint8_t byte);
  bool step(std::string_view bytes);
  // The input may end here (a number or literal that could go on counts as ended).
  bool can_end() const;
  // Nothing more can follow: the value is complete.
  bool done() const { return depth_ == 0; }
  // Inside a string with no length limits, at a character boundary: any bytes without '"',
  // '\\' or control characters that form whole UTF-8 characters are accepted here, whatever the
  // frames below (the mask's fast path).
  bool in_plain_string() const;
  // The state as bytes, for caching masks by state.
  std::string_view key() const {
    return {reinterpret_cast<const char*>(frames_.data()), size_t(depth_) * sizeof(Frame)};
  }
  Machine& operator=(const Machine& o) {
    g_ = o.g_;
    depth_ = o.depth_;
    std::copy(o.frames_.begin(), o.frames_.begin() + depth_, frames_.begin());
    return *this;
  }
  Machine(const Machine& o) { *this = o; }

 private:
  bool push(uint8_t kind, uint32_t node);
  void child_done(uint32_t tag);
  bool finish_pending();  // ends a number/literal waiting for lookahead; false if it cannot
  const Grammar* g_;
  int depth_ = 0;
  std::array<Frame, kMaxDepth> frames_;
};

}  // namespace ember::text
