// Every flag's default comes from its settings table: the options bind_settings and add_setting
// declare show the table's default and read its environment variable, and the options of the
// layers below that keep defaults of their own (the worker's supervision) agree with the table.
#include "cli/settings_cli.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/serve_settings.h"
#include "worker/engine_settings.h"

namespace ember::cli {
namespace {

// CLI11's default string of `opt`, in the table's notation (a list's "[a,b]" as "a,b").
std::string default_of(const CLI::Option& opt) {
  std::string d = opt.get_default_str();
  if (d.size() >= 2 && d.front() == '[' && d.back() == ']') d = d.substr(1, d.size() - 2);
  return d;
}

template <typename S>
void expect_bound_from_table(const settings::Table<S>& table) {
  CLI::App app;
  S s;
  bind_settings(app, table, s);
  const S defaults{};
  for (const auto& f : table.fields()) {
    SCOPED_TRACE(f.key);
    const CLI::Option* opt = app.get_option("--" + f.key);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->get_envname(), f.env);
    const bool is_flag = std::holds_alternative<bool S::*>(f.member);
    if (is_flag || f.secret) {
      EXPECT_EQ(default_of(*opt), "");  // a flag is off, a secret is never shown
      EXPECT_EQ(table.get(defaults, f), is_flag ? "false" : "");
    } else {
      EXPECT_EQ(default_of(*opt), table.get(defaults, f));
    }
  }
}

TEST(SettingsCli, every_serve_flag_shows_the_tables_default_and_environment_variable) {
  expect_bound_from_table(serve_settings_table());
}

TEST(SettingsCli, every_engine_flag_shows_the_tables_default_and_environment_variable) {
  expect_bound_from_table(worker::engine_settings_table());
}

TEST(SettingsCli, a_shared_option_takes_the_tables_default_whatever_the_variable_held) {
  CLI::App app;
  int32_t threads = 77;
  std::string kv = "not a type";
  const auto& t = worker::engine_settings_table();
  CLI::Option* o = add_setting(app, t, "threads", threads);
  add_setting(app, t, "kv-type", kv, "--kv", "help of its own");
  EXPECT_EQ(threads, worker::EngineSettings{}.threads);
  EXPECT_EQ(kv, worker::EngineSettings{}.kv_type);
  EXPECT_EQ(o->get_default_str(), "0");
  EXPECT_EQ(o->get_envname(), "EMBER_THREADS");
  EXPECT_EQ(app.get_option("--kv")->get_envname(), "EMBER_KV_TYPE");
  EXPECT_EQ(app.get_option("--kv")->get_default_str(), "f16");
}

TEST(SettingsCli, a_shared_option_reads_the_tables_variable_and_checks_its_range) {
  CLI::App app;
  int32_t threads = 0;
  std::string kv;
  add_setting(app, worker::engine_settings_table(), "threads", threads);
  add_setting(app, worker::engine_settings_table(), "kv-type", kv);
  ::setenv("EMBER_THREADS", "3", 1);
  std::vector<std::string> none;
  app.parse(none);
  ::unsetenv("EMBER_THREADS");
  EXPECT_EQ(threads, 3);
  std::vector<std::string> bad = {"5000"};  // CLI11 parses the vector from the back
  bad.push_back("--threads");
  EXPECT_THROW(app.parse(bad), CLI::ValidationError);
  std::vector<std::string> bad_kv = {"q8", "--kv-type"};
  EXPECT_THROW(app.parse(bad_kv), CLI::ValidationError);
}

TEST(SettingsCli, the_worker_supervision_defaults_are_the_serve_tables) {
  // SubprocessOptions keeps defaults for its own tests; they must be what `ember serve` passes.
  const worker::SubprocessOptions plain;
  worker::SubprocessOptions from_table;
  set_supervision(ServeSettings{}, from_table);
  EXPECT_EQ(from_table.ladder.eof_wait, plain.ladder.eof_wait);
  EXPECT_EQ(from_table.ladder.term_wait, plain.ladder.term_wait);
  EXPECT_EQ(from_table.backoff_initial, plain.backoff_initial);
}

TEST(SettingsCli, the_server_options_come_from_the_serve_settings) {
  ServeSettings s;
  const server::ServerOptions d = server_options(s);
  EXPECT_EQ(d.host, s.host);
  EXPECT_EQ(d.port, s.port);
  EXPECT_EQ(d.io_threads, s.io_threads);
  EXPECT_EQ(d.max_body_bytes, size_t(s.max_body_bytes));
  EXPECT_EQ(d.header_timeout.count(), int64_t(s.header_timeout_s * 1000));
  EXPECT_EQ(d.drain_timeout.count(), int64_t(s.drain_timeout_s * 1000));
  EXPECT_EQ(d.default_max_tokens, s.max_tokens);
  EXPECT_EQ(d.web_ui, !s.no_web_ui);
  s.restart_backoff_s = 0.5;
  s.handover_s = 2.5;
  s.no_web_ui = true;
  const server::ServerOptions o = server_options(s);
  EXPECT_EQ(o.handover.count(), 2500);
  EXPECT_FALSE(o.web_ui);
}

}  // namespace
}  // namespace ember::cli
