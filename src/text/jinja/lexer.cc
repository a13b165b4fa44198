#include "text/jinja/lexer.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "text/jinja/value.h"

namespace ember::text::jinja {

namespace {

enum class TagKind { kVar, kBlock, kComment };

// One piece of the template before expression tokenizing: literal text or a tag.
struct Piece {
  bool is_tag = false;
  std::string text;  // text: the literal; tag: the inner source between the delimiters
  TagKind kind = TagKind::kVar;
  char open_mod = 0;     // '-', '+' or 0
  char close_mod = 0;    // '-', '+' or 0
  size_t inner_pos = 0;  // offset of the inner source in the template (for line numbers)
  int line = 1;
};

int line_at(std::string_view src, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < src.size(); ++i) line += src[i] == '\n';
  return line;
}

// Finds the end of a tag's inner source starting at `pos`, honouring string literals so that
// "%}" inside a string does not end the tag. Returns the offset of the closing delimiter.
size_t find_tag_end(std::string_view src, size_t pos, TagKind kind, int line) {
  if (kind == TagKind::kComment) {
    size_t e = src.find("#}", pos);
    if (e == std::string_view::npos) throw TemplateError(line, "unclosed comment '{#'");
    return e;
  }
  const char* close = kind == TagKind::kVar ? "}}" : "%}";
  int depth = 0;
  for (size_t i = pos; i < src.size(); ++i) {
    char c = src[i];
    if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < src.size() && src[j] != c) j += src[j] == '\\' ? 2 : 1;
      if (j >= src.size()) throw TemplateError(line, "unterminated string literal");
      i = j;
      continue;
    }
    if (depth == 0 && src.compare(i, 2, close) == 0) return i;
    if (c == '{' || c == '[' || c == '(') ++depth;
    if ((c == '}' || c == ']' || c == ')') && depth > 0) --depth;
  }
  throw TemplateError(line, fmt::format("unclosed tag (missing '{}')", close));
}

std::vector<Piece> split_pieces(std::string_view src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  while (pos <= src.size()) {
    size_t open = std::string_view::npos;
    for (size_t i = pos; i + 1 < src.size(); ++i) {
      if (src[i] == '{' && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
        open = i;
        break;
      }
    }
    Piece text;
    text.text =
        std::string(src.substr(pos, open == std::string_view::npos ? src.npos : open - pos));
    text.line = line_at(src, pos);
    pieces.push_back(std::move(text));
    if (open == std::string_view::npos) break;

    Piece tag;
    tag.is_tag = true;
    tag.line = line_at(src, open);
    char k = src[open + 1];
    tag.kind = k == '{' ? TagKind::kVar : k == '%' ? TagKind::kBlock : TagKind::kComment;
    size_t inner = open + 2;
    if (inner < src.size() && (src[inner] == '-' || src[inner] == '+')) tag.open_mod = src[inner++];
    size_t close = find_tag_end(src, inner, tag.kind, tag.line);
    size_t inner_end = close;
    if (inner_end > inner && (src[inner_end - 1] == '-' || src[inner_end - 1] == '+')) {
      tag.close_mod = src[--inner_end];
    }
    tag.text = std::string(src.substr(inner, inner_end - inner));
    tag.inner_pos = inner;
    pieces.push_back(std::move(tag));
    pos = close + 2;
  }
  return pieces;
}

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Applies the whitespace-control rules to the text pieces, in order, as Jinja2's lexer does.
void apply_whitespace_rules(std::vector<Piece>& pieces) {
  bool line_starting = true;  // the text before the next tag begins at the start of a line
  for (size_t i = 0; i < pieces.size(); ++i) {
    Piece& p = pieces[i];
    if (!p.is_tag) continue;
    Piece& before = pieces[i - 1];  // split_pieces always puts a text piece before a tag
    bool lstrippable = p.kind != TagKind::kVar;
    if (p.open_mod == '-') {
      while (!before.text.empty() && is_ws(before.text.back())) before.text.pop_back();
    } else if (p.open_mod != '+' && lstrippable) {
      size_t nl = before.text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool only_blank = before.text.find_first_not_of(" \t", l_pos) == std::string::npos;
        if (only_blank) before.text.erase(l_pos);
      }
    }
    line_starting = false;
    if (i + 1 >= pieces.size()) continue;
    Piece& after = pieces[i + 1];
    if (p.close_mod == '-') {
      size_t n = 0;
      while (n < after.text.size() && is_ws(after.text[n])) ++n;
      line_starting = n > 0 && after.text[n - 1] == '\n';
      after.text.erase(0, n);
    } else if (p.close_mod != '+' && p.kind != TagKind::kVar) {
      if (after.text.rfind("\r\n", 0) == 0) {
        after.text.erase(0, 2);
        line_starting = true;
      } else if (!after.text.empty() && after.text[0] == '\n') {
        after.text.erase(0, 1);
        line_starting = true;
      }
    }
  }
}

void lex_inner(std::string_view src, const Piece& tag, std::string_view whole,
               std::vector<Token>& out) {
  int line = tag.line;
  size_t i = 0;
  // The tag's line plus the newlines inside the tag before `at`.
  size_t counted = 0;
  int cur_line = line_at(whole, tag.inner_pos);
  auto line_of = [&](size_t at) {
    for (; counted < at; ++counted) cur_line += src[counted] == '\n';
    return cur_line;
  };
  while (i < src.size()) {
    char c = src[i];
    if (is_ws(c)) {
      ++i;
      continue;
    }
    line = line_of(i);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({TokKind::kName, std::string(src.substr(i, j - i)), line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      if (j + 1 < src.size() && src[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E')) {
        size_t k = j + 1;
        if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
        if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
          is_float = true;
          j = k;
          while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k) {
        if (src[k] != '_') num += src[k];
      }
      out.push_back({is_float ? TokKind::kFloat : TokKind::kInt, num, line});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      for (; j < src.size() && src[j] != c; ++j) {
        if (src[j] != '\\' || j + 1 >= src.size()) {
          s += src[j];
          continue;
        }
        char e = src[++j];
        switch (e) {
          case 'n':
            s += '\n';
            break;
          case 't':
            s += '\t';
            break;
          case 'r':
            s += '\r';
            break;
          case '0':
            s += '\0';
            break;
          case 'b':
            s += '\b';
            break;
          case 'f':
            s += '\f';
            break;
          case 'v':
            s += '\v';
            break;
          case '\\':
            s += '\\';
            break;
          case '\'':
            s += '\'';
            break;
          case '"':
            s += '"';
            break;
          case '\n':
            break;  // line continuation
          case 'x':
          case 'u':
          case 'U': {
            size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (j + n >= src.size()) {
              throw TemplateError(line, "truncated escape in string literal");
            }
            uint32_t cp = 0;  // exactly n hex digits, as Python requires
            const char* first = src.data() + j + 1;
            auto [end, ec] = std::from_chars(first, first + n, cp, 16);
            if (ec != std::errc() || end != first + n) {
              throw TemplateError(line, fmt::format("invalid \\{} escape in string literal: {} "
                                                    "hex digits expected",
                                                    e, n));
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
              throw TemplateError(line, fmt::format("\\{} escape in string literal is not a "
                                                    "Unicode scalar value",
                                                    e));
            }
            s += utf8_encode(std::u32string(1, static_cast<char32_t>(cp)));
            j += n;
            break;
          }
          default:  // Python keeps unknown escapes as written
            s += '\\';
            s += e;
        }
      }
      if (j >= src.size()) throw TemplateError(line, "unterminated string literal");
      out.push_back({TokKind::kString, s, line});
      i = j + 1;
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* t : kTwo) {
        if (src.compare(i, 2, t) == 0) op = t;
      }
      if (op.size() == 1 &&
          std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
        throw TemplateError(line, fmt::format("unexpected character '{}'", c));
      }
      out.push_back({TokKind::kOp, op, line});
      i += op.size();
    }
  }
}

}  // namespace

std::vector<Token> lex(std::string_view source) {
  if (!source.empty() && source.back() == '\n') {
    source.remove_suffix(source.size() >= 2 && source[source.size() - 2] == '\r' ? 2 : 1);
  }
  std::vector<Piece> pieces = split_pieces(source);
  apply_whitespace_rules(pieces);
  std::vector<Token> out;
  for (const Piece& p : pieces) {
    if (!p.is_tag) {
      if (!p.text.empty()) out.push_back({TokKind::kText, p.text, p.line});
      continue;
    }
    if (p.kind == TagKind::kComment) continue;
    bool var = p.kind == TagKind::kVar;
    out.push_back({var ? TokKind::kVarBegin : TokKind::kBlockBegin, "", p.line});
    lex_inner(p.text, p, source, out);
    out.push_back({var ? TokKind::kVarEnd : TokKind::kBlockEnd, "", out.back().line});
  }
  out.push_back({TokKind::kEof, "", out.empty() ? 1 : out.back().line});
  return out;
}

}  // namespace ember::text::jinja
