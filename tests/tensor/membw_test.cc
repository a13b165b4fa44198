// The read-bandwidth probe's window: threads "reading at once" are timed from their common
// start to the last one's end, so threads that in fact ran one after another (a vCPU held
// back by the hypervisor) cannot add up to more than the rate they achieved together.
#include "tensor/membw.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ember::tensor {
namespace {

std::atomic<bool> g_first_read_done{false};

uint64_t instant_read(const uint8_t* p, size_t) {
  g_first_read_done.store(true);
  return p[0];
}

// Thread 1 is held until thread 0 has read, then for 40 ms more: the two reads do not overlap.
void hold_thread_1(int t) {
  if (t != 1) return;
  while (!g_first_read_done.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
}

TEST(ReadBandwidthProbe, a_thread_held_back_at_the_start_counts_its_delay) {
  const size_t bytes = 1 << 20;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 1);
  g_first_read_done.store(false);
  const double gbps =
      detail::read_together({a.data(), b.data()}, bytes, 1, &instant_read, &hold_thread_1);
  // 2 MiB over at least 40 ms is at most 0.0525 GB/s. Timing each thread from its own start
  // (after the hold) reads it as two instant reads: far above.
  EXPECT_GT(gbps, 0.0);
  EXPECT_LE(gbps, 2.0 * bytes / 0.040 / 1e9);
}

TEST(ReadBandwidthProbe, the_real_probe_reads_a_positive_rate_at_one_and_two_threads) {
  const ReadBandwidth r = measure_read_bandwidth(2, 8 << 20, 2);
  EXPECT_EQ(r.threads, 2);
  EXPECT_GT(r.single_gbps, 0.0);
  EXPECT_GT(r.all_gbps, 0.0);
}

// A decode that ran 10 ms while the host gave 60 GB/s and 30 ms while it gave 30 is read
// against 37.5 GB/s, the bandwidth over its own time, not against the best sample (60) nor the
// samples' plain mean (45).
TEST(BandwidthSamples, the_probe_is_weighted_by_the_time_of_the_work_it_brackets) {
  const std::vector<SampledStretch> s = {
      {.seconds = 0.010, .bytes = 0.4e9, .gbps_before = 60, .gbps_after = 60},
      {.seconds = 0.030, .bytes = 0.8e9, .gbps_before = 30, .gbps_after = 30}};
  const SampledRate r = combine_samples(s);
  EXPECT_DOUBLE_EQ(r.gbps, 1.2e9 / 0.040 / 1e9);  // 30 GB/s
  EXPECT_DOUBLE_EQ(r.probe_gbps, 37.5);
  EXPECT_DOUBLE_EQ(r.fraction, 30 / 37.5);
}

// Each stretch is read against both its neighbours: the sample before it and the one after.
TEST(BandwidthSamples, a_stretch_takes_the_mean_of_the_samples_on_either_side) {
  const std::vector<SampledStretch> s = {
      {.seconds = 0.020, .bytes = 0.6e9, .gbps_before = 40, .gbps_after = 60}};
  const SampledRate r = combine_samples(s);
  EXPECT_DOUBLE_EQ(r.probe_gbps, 50);
  EXPECT_DOUBLE_EQ(r.fraction, 30.0 / 50);
}

TEST(BandwidthSamples, no_stretch_no_rate) {
  const SampledRate r = combine_samples({});
  EXPECT_EQ(r.gbps, 0);
  EXPECT_EQ(r.probe_gbps, 0);
  EXPECT_EQ(r.fraction, 0);
}

TEST(BandwidthSamples, the_sampler_reads_a_positive_rate_at_each_sample) {
  BandwidthSampler sampler(2, 2 << 20);
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 3; ++i) EXPECT_GT(sampler.sample(), 0.0);
}

}  // namespace
}  // namespace ember::tensor
