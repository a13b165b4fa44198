// The connection loop (read a request head under the header timeout, the body under the body
// timeout, answer, repeat while keep-alive) and the routes other than completions
// (/tokenize and /detokenize answer from server/tokenize.h).
#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/anthropic_writers.h"
#include "server/http_framing.h"
#include "server/server_impl.h"
#include "server/sse.h"
#include "server/tokenize.h"
#include "server/web_assets.h"

namespace ember::server {

Reply error_reply(const ApiError& e) {
  ErrorInfo info = error_info(e.kind);
  return {static_cast<http::status>(info.status), "application/json", error_body(e),
          info.retry_after_s};
}

namespace {

using json = nlohmann::json;

const WebAsset* find_web_asset(const Server::Impl& s, std::string_view path) {
  if (!s.opts.web_ui) return nullptr;
  for (const WebAsset& a : web_assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

// Route label for metrics: a known path, "web" for the chat page's files, or "other" (unknown
// paths must not grow the label set).
std::string_view route_label(const Server::Impl& s, std::string_view path) {
  if (find_web_asset(s, path)) return "web";
  for (std::string_view known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                                 "/ready", "/metrics", "/admin/shutdown", "/tokenize",
                                 "/detokenize", "/v1/messages", "/v1/messages/count_tokens"}) {
    if (path == known) return known;
  }
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  return "other";
}

// The methods a route accepts (the Allow header), or empty for an unknown path.
std::string_view allowed_methods(std::string_view path) {
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/admin/shutdown" ||
      path == "/tokenize" || path == "/detokenize" || path == "/v1/messages" ||
      path == "/v1/messages/count_tokens") {
    return "POST, OPTIONS";
  }
  if (path == "/health" || path == "/ready" || path == "/metrics" || path == "/v1/models" ||
      path.starts_with("/v1/models/")) {
    return "GET, HEAD, OPTIONS";
  }
  return {};
}

// JSON is built outside coroutines: GCC 12 miscompiles braced string-literal initializers in
// coroutine bodies ("array used as initializer").
std::string status_body(const std::string& status) {
  return dump_json(json{{"status", status}});
}

json model_object(const ServedModel& m, const std::string& name) {
  return {{"id", name}, {"object", "model"}, {"created", m.created}, {"owned_by", "ember"}};
}

std::string models_body(const ServedModel& m) {
  json data = json::array();
  for (const auto& name : m.names) data.push_back(model_object(m, name));
  return dump_json(json{{"object", "list"}, {"data", data}});
}

// GET /v1/models/{id}: the id is the rest of the path, percent-decoded (names may hold '/').
Reply model_reply(const ServedModel& m, std::string_view encoded) {
  std::string id;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] == '%' && i + 2 < encoded.size() &&
        std::isxdigit(static_cast<unsigned char>(encoded[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(encoded[i + 2]))) {
      id += static_cast<char>(std::stoi(std::string(encoded.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      id += encoded[i];
    }
  }
  if (std::find(m.names.begin(), m.names.end(), id) == m.names.end()) {
    return error_reply(
        {ErrorKind::ModelNotFound, fmt::format("model '{}' does not exist", id), "model"});
  }
  return {http::status::ok, "application/json", dump_json(model_object(m, id)), 0, {}};
}

bool origin_allowed(const Server::Impl& s, std::string_view origin) {
  if (origin.empty()) return false;
  for (const auto& o : s.opts.cors_origins) {
    if (o == "*" || o == origin) return true;
  }
  return false;
}

// OPTIONS: a CORS preflight (or a plain OPTIONS). Answered before authentication, since a
// browser never sends credentials on a preflight.
Reply preflight_reply(std::string_view path) {
  std::string_view allow = allowed_methods(path);
  if (allow.empty()) {
    return error_reply({ErrorKind::NotFound, fmt::format("no route for {}", path), {}});
  }
  return {http::status::no_content, "", "", 0, std::string(allow)};
}

bool bearer_matches(const Request& req, const std::string& key) {
  auto it = req.find(http::field::authorization);
  std::string_view v = it == req.end() ? std::string_view() : std::string_view(it->value());
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view given = v.starts_with(kBearer) ? v.substr(kBearer.size()) : std::string_view();
  return constant_time_equal(given, key);
}

// The API key as Anthropic's clients send it.
bool x_api_key_matches(const Request& req, const std::string& key) {
  auto it = req.find("x-api-key");
  return it != req.end() && constant_time_equal(std::string_view(it->value()), key);
}

// `Authorization: Bearer KEY` or `x-api-key: KEY`, on every route that needs the key.
bool authorized(const Server::Impl& s, const Request& req) {
  return s.opts.api_key.empty() || bearer_matches(req, s.opts.api_key) ||
         x_api_key_matches(req, s.opts.api_key);
}

bool is_messages_path(std::string_view path) {
  return path == "/v1/messages" || path == "/v1/messages/count_tokens";
}

// An error in the shape of the route's API: Anthropic's on the Messages routes, else OpenAI's.
Reply route_error_reply(std::string_view path, const ApiError& e) {
  return is_messages_path(path) ? anthropic_error_reply(e) : error_reply(e);
}

Reply method_not_allowed(std::string_view path, const Request& req);

// POST /admin/shutdown: the same graceful drain as SIGTERM, for operators without a shell on
// the host. Exists only when --admin-key is set.
Reply admin_shutdown(Server::Impl& s, const Request& req, std::string_view path) {
  if (s.opts.admin_key.empty()) {
    return error_reply(
        {ErrorKind::NotFound, "no route for /admin/shutdown (enable it with --admin-key)", {}});
  }
  if (req.method() == http::verb::options) return preflight_reply(path);
  if (req.method() != http::verb::post) return method_not_allowed(path, req);
  if (!bearer_matches(req, s.opts.admin_key)) {
    return error_reply({ErrorKind::Unauthorized,
                        "missing or wrong admin key (send 'Authorization: Bearer ADMIN_KEY')",
                        {}});
  }
  log::info("ember: shutdown requested through /admin/shutdown");
  s.request_drain();
  return {http::status::accepted, "application/json", status_body("draining"), 0};
}

// GCC 12 coroutines may destroy temporaries inside a co_await expression twice, so every
// answer is computed by a plain function into a named Reply, and only then written.
Reply method_not_allowed(std::string_view path, const Request& req) {
  Reply r = route_error_reply(
      path, {ErrorKind::MethodNotAllowed,
             fmt::format("{} does not accept {}", path, std::string_view(req.method_string())),
             {}});
  r.allow = allowed_methods(path);
  return r;
}

bool is_get(const Request& req) {
  return req.method() == http::verb::get || req.method() == http::verb::head;
}

// Every route but the completions: no engine work, nothing to await.
Reply simple_route(Server::Impl& s, const Request& req, std::string_view path) {
  // Before OPTIONS: the route does not exist at all without --admin-key.
  if (path == "/admin/shutdown") return admin_shutdown(s, req, path);
  if (req.method() == http::verb::options) return preflight_reply(path);
  if (path == "/health") {
    if (!is_get(req)) return method_not_allowed(path, req);
    bool loaded = s.current_model() != nullptr;
    bool healthy = s.engine_healthy();
    std::string status = s.is_draining ? "draining" : !loaded ? "loading" : "ok";
    if (!healthy) status = "unhealthy";
    return {healthy ? http::status::ok : http::status::service_unavailable,
            "application/json",
            status_body(status),
            0,
            {}};
  }
  if (path == "/ready") {
    if (!is_get(req)) return method_not_allowed(path, req);
    bool ready = s.serving_ready();
    std::string status = s.is_draining ? "draining"
                         : !s.is_ready ? "loading"
                         : ready       ? "ready"
                                       : "engine_restarting";
    return {ready ? http::status::ok : http::status::service_unavailable,
            "application/json",
            status_body(status),
            ready ? 0 : 5,
            {}};
  }
  if (path == "/metrics") {
    if (!is_get(req)) return method_not_allowed(path, req);
    MetricsSnapshot snap;
    if (auto m = s.current_model()) {
      auto st = m->engine->stats();
      snap.queue_depth = st.queued;
      snap.active_sequences = st.active;
      snap.kv_bytes = st.kv_bytes;
      snap.engine_steps = st.steps;
      snap.engine_up = st.available;
      snap.worker_restarts = st.worker_restarts;
      snap.cache_hits = st.cache_hits;
      snap.cache_misses = st.cache_misses;
      snap.cache_evictions = st.cache_evictions;
      snap.cached_tokens = st.cached_tokens;
      snap.cache_blocks = st.cache_blocks;
      snap.cache_bytes = st.cache_bytes;
      snap.warm_blocks_loaded = st.warm_blocks_loaded;
      snap.warm_bytes_written = st.warm_bytes_written;
      snap.warm_load_seconds = st.warm_load_seconds;
      snap.warm_save_seconds = st.warm_save_seconds;
    }
    snap.in_flight_requests = s.in_flight.load();
    snap.draining = s.is_draining;
    snap.ready = s.serving_ready();
    return {http::status::ok,
            "text/plain; version=0.0.4; charset=utf-8",
            s.metrics.render(snap),
            0,
            {}};
  }
  const bool model_path = path.starts_with("/v1/models/");
  const bool tokenize_path = path == "/tokenize" || path == "/detokenize";
  bool needs_key = path == "/v1/models" || path == "/v1/chat/completions" ||
                   path == "/v1/completions" || model_path || tokenize_path ||
                   is_messages_path(path);
  if (needs_key && !authorized(s, req)) {
    ApiError e{ErrorKind::Unauthorized,
               "missing or wrong API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')",
               {}};
    return route_error_reply(path, e);
  }
  if (path == "/v1/models") {
    if (!is_get(req)) return method_not_allowed(path, req);
    auto m = s.current_model();
    if (!m) return error_reply({ErrorKind::NotReady, "the model is still loading", {}});
    return {http::status::ok, "application/json", models_body(*m), 0, {}};
  }
  if (model_path) {
    if (!is_get(req)) return method_not_allowed(path, req);
    auto m = s.current_model();
    if (!m) return error_reply({ErrorKind::NotReady, "the model is still loading", {}});
    return model_reply(*m, path.substr(std::string_view("/v1/models/").size()));
  }
  if (tokenize_path) {
    if (req.method() != http::verb::post) return method_not_allowed(path, req);
    auto m = s.current_model();
    if (!m) return error_reply({ErrorKind::NotReady, "the model is still loading", {}});
    return path == "/tokenize" ? tokenize_reply(*m->text, req.body())
                               : detokenize_reply(*m->text, req.body());
  }
  if (needs_key) return method_not_allowed(path, req);  // a completion route, not POSTed
  if (const WebAsset* a = find_web_asset(s, path)) {
    if (!is_get(req)) return method_not_allowed(path, req);
    return {http::status::ok, std::string(a->content_type), std::string(a->body), 0};
  }
  return error_reply({ErrorKind::NotFound, fmt::format("no route for {}", path), {}});
}

asio::awaitable<bool> dispatch(Server::Impl& s, std::shared_ptr<Conn> c, const Request& req) {
  std::string_view path = request_path(req.target());
  std::string_view route = route_label(s, path);
  bool completion = path == "/v1/chat/completions" || path == "/v1/completions";
  if (completion && req.method() == http::verb::post && authorized(s, req)) {
    Endpoint e = path == "/v1/chat/completions" ? Endpoint::Chat : Endpoint::Completion;
    co_return co_await handle_completion(s, c, req, e, route);
  }
  if (is_messages_path(path) && req.method() == http::verb::post && authorized(s, req)) {
    co_return co_await handle_messages(s, c, req, path != "/v1/messages", route);
  }
  Reply reply = simple_route(s, req, path);
  co_return co_await send_reply(s, *c, req, route, reply);
}

// A Beast parse error that means the client sent a malformed message (answered 400), not the
// end of the stream, a timeout, a reset or a close for the drain.
bool malformed(const boost::system::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// An oversized or malformed request: answer, then read and discard briefly so the client sees
// the answer instead of a reset. The connection closes: what follows was never framed.
// `path`: the request's, when its head was read (the error then takes the route's shape).
asio::awaitable<void> reject_and_close(Server::Impl& s, Conn& c, const ApiError& e,
                                       std::string_view path = {}) {
  Request dummy;
  dummy.version(11);
  dummy.keep_alive(false);
  Reply reply = route_error_reply(path, e);
  co_await send_reply(s, c, dummy, "other", reply);
  boost::system::error_code ec;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  c.stream.expires_after(std::chrono::seconds(1));
  std::array<char, 4096> sink;
  for (int i = 0; i < 1024; ++i) {
    auto [rec, n] =
        co_await c.stream.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
    if (rec) break;
  }
}

}  // namespace

void add_cors_headers(const Server::Impl& s, const Request& req, http::fields& out) {
  auto it = req.find(http::field::origin);
  if (it == req.end()) return;
  std::string_view origin = it->value();
  if (!origin_allowed(s, origin)) return;
  bool any = std::find(s.opts.cors_origins.begin(), s.opts.cors_origins.end(), "*") !=
             s.opts.cors_origins.end();
  out.set(http::field::access_control_allow_origin, any ? std::string_view("*") : origin);
  if (!any) out.set(http::field::vary, "Origin");
  if (req.method() == http::verb::options) {
    out.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
    auto h = req.find(http::field::access_control_request_headers);
    out.set(http::field::access_control_allow_headers,
            h != req.end() ? std::string_view(h->value())
                           : std::string_view("Authorization, Content-Type"));
    out.set(http::field::access_control_max_age, "86400");
  }
}

asio::awaitable<bool> send_reply(Server::Impl& s, Conn& c, const Request& req,
                                 std::string_view route, const Reply& reply) {
  http::response<http::string_body> res{reply.status, req.version()};
  res.set(http::field::server, "ember");
  if (!reply.content_type.empty()) res.set(http::field::content_type, reply.content_type);
  if (!reply.allow.empty()) res.set(http::field::allow, reply.allow);
  add_cors_headers(s, req, res.base());
  if (reply.retry_after_s > 0) {
    res.set(http::field::retry_after, std::to_string(reply.retry_after_s));
  }
  bool keep = s.keeps_connection(req);
  res.keep_alive(keep);
  if (req.method() != http::verb::head) res.body() = reply.body;
  res.prepare_payload();
  s.metrics.count_request(route, static_cast<int>(reply.status));
  c.stream.expires_after(s.opts.write_timeout);  // a client that never reads its answer
  auto [ec, n] = co_await http::async_write(c.stream, res, asio::as_tuple(asio::use_awaitable));
  c.stream.expires_never();
  co_return keep && !ec;
}

asio::awaitable<void> run_session(Server::Impl& s, std::shared_ptr<Conn> c, uint64_t conn_id) {
  const ApiError too_large{
      ErrorKind::BodyTooLarge,
      fmt::format("request body is larger than the limit of {} bytes", s.opts.max_body_bytes),
      {}};
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(s.opts.max_body_bytes);
    c->idle = true;
    // One deadline for the whole head: a client trickling bytes (slow-loris) cannot extend it.
    c->stream.expires_after(s.opts.header_timeout);
    auto [ec, n] = co_await http::async_read_header(c->stream, c->buf, parser,
                                                    asio::as_tuple(asio::use_awaitable));
    c->idle = false;
    if (ec == http::error::body_limit) {
      std::string path(request_path(parser.get().target()));
      co_await reject_and_close(s, *c, too_large, path);
      break;
    }
    if (ec) {
      // A malformed head gets a 400; end of stream, timeouts, resets and drain closes do not.
      if (malformed(ec)) {
        const ApiError bad_head{
            ErrorKind::InvalidRequest, "malformed HTTP request: " + ec.message(), {}};
        co_await reject_and_close(s, *c, bad_head);
      }
      break;  // end of stream, timeout, reset, or closed for the drain
    }
    // A transfer coding other than chunked (501), or framing that cannot be trusted (400): the
    // body is not read, so the connection cannot carry another request.
    if (auto bad_framing = check_transfer_encoding(parser.get())) {
      co_await reject_and_close(s, *c, *bad_framing);
      break;
    }
    if (!parser.is_done()) {
      // A client that sent `Expect: 100-continue` waits for this before sending the body.
      auto expect = parser.get().find(http::field::expect);
      if (expect != parser.get().end() && beast::iequals(expect->value(), "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        c->stream.expires_after(s.opts.body_timeout);
        auto [cec, cn] = co_await asio::async_write(c->stream, asio::buffer(kContinue),
                                                    asio::as_tuple(asio::use_awaitable));
        if (cec) break;
      }
      c->stream.expires_after(s.opts.body_timeout);
      auto [bec, bn] =
          co_await http::async_read(c->stream, c->buf, parser, asio::as_tuple(asio::use_awaitable));
      if (bec == http::error::body_limit) {
        std::string path(request_path(parser.get().target()));
        co_await reject_and_close(s, *c, too_large, path);
        break;
      }
      if (malformed(bec)) {  // e.g. a bad chunk size
        const ApiError bad_body{
            ErrorKind::InvalidRequest, "malformed HTTP request body: " + bec.message(), {}};
        co_await reject_and_close(s, *c, bad_body);
      }
      if (bec) break;
    }
    c->stream.expires_never();
    Request req = parser.release();
    bool keep = false;
    try {
      keep = co_await dispatch(s, c, req);
    } catch (const std::exception& e) {  // a bug; keep the server up and the client informed
      log::error("ember: internal error on {}: {}", std::string_view(req.target()), e.what());
      keep = false;
    }
    c->served++;
    if (!keep || s.is_draining) break;
  }
  boost::system::error_code ec;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  c->stream.close();
  {
    std::lock_guard lock(s.reg_mu);
    s.conns.erase(conn_id);
  }
  s.on_connection_closed();
}

}  // namespace ember::server
