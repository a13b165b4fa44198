// The web chat page served at / (src/server/web/: index.html, app.js, style.css), compiled into
// the binary by cmake/embed_web.cmake, so `ember serve` needs no files and no network for it.
// index.html is served at "/", every other file at "/<name>".
#pragma once

#include <span>
#include <string_view>

namespace ember::server {

struct WebAsset {
  std::string_view path;          // "/", "/app.js", ...
  std::string_view content_type;  // with charset
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace ember::server
