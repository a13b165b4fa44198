// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
// Invariants: utf8_seq_len follows llama.cpp's lead-byte table (so SPM symbol splitting matches
// it byte for byte); sanitize_utf8 returns valid UTF-8 in which each invalid input byte became
// one U+FFFD, as llama.cpp's BPE path does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::text {

// Length of the UTF-8 sequence a lead byte announces (1 for ASCII and for stray bytes).
inline size_t utf8_seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

void append_utf8(std::string& out, uint32_t cp);

// At s[pos]: > 0 the length of a complete, valid character; 0 a valid but incomplete prefix that
// runs to the end of s; -1 an invalid byte (never valid whatever follows).
int utf8_char_at(std::string_view s, size_t pos);

// Replaces every invalid byte with U+FFFD. Returns s unchanged when it is already valid.
std::string sanitize_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);

// GPT-2's reversible byte -> printable-character mapping (e.g. ' ' -> U+0120 'Ġ').
std::string_view byte_to_unicode(uint8_t b);
// The byte a mapped character stands for, or -1 if cp is not in the mapping.
int unicode_to_byte(uint32_t cp);

}  // namespace ember::text
