#include <doctest/doctest.h>

#include <numeric>

#include "core/error.hpp"
#include "wire/messages.hpp"
#include "wire/stripe.hpp"

using namespace geotrain;
using namespace geotrain::wire;

namespace {

std::vector<wire::Frame> message(std::initializer_list<size_t> sizes, uint8_t salt) {
  std::vector<wire::Frame> frames;
  for (size_t n : sizes) {
    wire::Frame m(n);
    auto* b = static_cast<uint8_t*>(m.data());
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + salt);
    frames.push_back(std::move(m));
  }
  return frames;
}

bool same(const std::vector<wire::Frame>& a, const std::vector<wire::Frame>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size()) != 0)
      return false;
  return true;
}

std::vector<wire::Frame> copy(const std::vector<wire::Frame>& frames) {
  std::vector<wire::Frame> out;
  for (const auto& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

void feed(Reassembler& r, Chunk&& c, std::deque<std::vector<wire::Frame>>& out) {
  auto h = decode_chunk_header(c.frames[0]);
  REQUIRE(h);
  wire::Frame piece;
  if (c.frames.size() == 2) piece = std::move(c.frames[1]);
  r.add(c.lane, *h, std::move(piece), out);
}

}  // namespace

TEST_CASE("a chunk header survives encoding, and a plain frame is not one") {
  ChunkHeader h{42, 7, 3, 9, 4, 3, ChunkKind::data, 1, 2, 1000, 256};
  auto m = encode_chunk_header(h);
  CHECK(m.size() == 64);
  auto d = decode_chunk_header(m);
  REQUIRE(d);
  CHECK(d->sender == 42);
  CHECK(d->seq == 7);
  CHECK(d->chunk == 3);
  CHECK(d->chunks == 9);
  CHECK(d->lanes == 4);
  CHECK(d->lane == 3);
  CHECK(d->frame == 1);
  CHECK(d->frame_bytes == 1000);
  CHECK(d->offset == 256);
  CHECK_FALSE(decode_chunk_header(wire::Frame("GTSTRIPE", 8)));
  h.lane = 4;  // beyond the lane count
  CHECK_THROWS_WITH_AS(decode_chunk_header(encode_chunk_header(h)),
                       doctest::Contains("lane 4 of 4"), WireError);
}

TEST_CASE("a striped message is cut evenly over the lanes and put back byte for byte") {
  Striper s(4, 99, 1000);
  auto msg = message({24, 100'000, 5, 0}, 1);
  const auto expected = copy(msg);
  auto chunks = s.cut(std::move(msg));
  CHECK(chunks.front().lane == 0);  // frame 0, chunk 0, lane 0
  std::vector<size_t> per_lane(4, 0);
  for (auto& c : chunks) per_lane[c.lane] += c.frames.size() == 2 ? c.frames[1].size() : 0;
  // 100,000 bytes in pieces of ceil(100000 / 32) = 3125: eight per lane.
  for (size_t l = 0; l < 4; ++l) CHECK(per_lane[l] >= 24'000);
  // Delivered in any interleaving of the lanes, each lane in its order: here lane 3's chunks
  // first and lane 0's (with frame 0) last.
  Reassembler r;
  std::deque<std::vector<wire::Frame>> out;
  for (int lane = 3; lane >= 0; --lane)
    for (auto& c : chunks)
      if (c.lane == lane) feed(r, std::move(c), out);
  REQUIRE(out.size() == 1);
  CHECK(same(out.front(), expected));
  CHECK(r.partial_messages() == 0);
}

TEST_CASE("messages are delivered in order even when a later one completes first") {
  Striper s(2, 5, 10);
  auto a = message({8, 40}, 1), b = message({8}, 2);
  const auto ea = copy(a), eb = copy(b);
  auto ca = s.cut(std::move(a));
  auto cb = s.cut(std::move(b));  // lane 1: a tick (after a's chunks there); lane 0: b whole
  Reassembler r;
  std::deque<std::vector<wire::Frame>> out;
  // Lane 0 is quick: a's lane-0 chunks and all of b arrive while a's lane-1 chunks are on their
  // way. b is complete but waits for a.
  for (auto* cs : {&ca, &cb})
    for (auto& c : *cs)
      if (c.lane == 0) feed(r, std::move(c), out);
  CHECK(out.empty());
  for (auto* cs : {&ca, &cb})
    for (auto& c : *cs)
      if (c.lane == 1) feed(r, std::move(c), out);
  REQUIRE(out.size() == 2);
  CHECK(same(out[0], ea));
  CHECK(same(out[1], eb));
}

TEST_CASE("a chunk lost with a lane's connection drops its message, and the next one flows") {
  Striper s(2, 5, 10);
  auto a = message({8, 40}, 1), b = message({8}, 2);
  const auto eb = copy(b);
  auto ca = s.cut(std::move(a));
  auto cb = s.cut(std::move(b));
  // b uses lane 0 only, so lane 1, which carried a's chunks, gets a tick ahead of b.
  REQUIRE(cb.front().lane == 1);
  REQUIRE(cb.front().frames.size() == 1);
  Reassembler r;
  std::deque<std::vector<wire::Frame>> out;
  bool skipped = false;
  for (auto& c : ca) {
    if (c.lane == 1 && !skipped) {  // lost in a reset
      skipped = true;
      continue;
    }
    feed(r, std::move(c), out);
  }
  CHECK(out.empty());  // a is incomplete: lane 1 may still deliver
  for (auto& c : cb) feed(r, std::move(c), out);
  REQUIRE(out.size() == 1);  // lane 1's tick says a's chunk is gone: a dropped, b delivered
  CHECK(same(out[0], eb));
  CHECK(r.dropped() == 1);
}

TEST_CASE("an abort drops an incomplete message; messages unknown to lane 0 are skipped") {
  Striper s(3, 8, 10);
  auto ca = s.cut(message({8, 60}, 1));
  auto cb = s.cut(message({8}, 2));
  auto cc = s.cut(message({8}, 3));
  Reassembler r;
  std::deque<std::vector<wire::Frame>> out;
  feed(r, std::move(ca[0]), out);  // a: only chunk 0
  feed(r, s.abort(1, 1), out);
  CHECK(r.dropped() == 1);
  // b is lost whole (lane 0 never carried it); c's chunk 0 on lane 0 says so.
  for (auto& c : cc)
    if (c.lane == 0) feed(r, std::move(c), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0][0].size() == 8);
  CHECK(static_cast<uint8_t*>(out[0][0].data())[0] == 3);
  CHECK(r.dropped() == 2);
}

TEST_CASE("a restarted sender starts its numbering afresh at the receiver") {
  Reassembler r;
  std::deque<std::vector<wire::Frame>> out;
  Striper old_sender(2, 1, 10);
  for (int i = 0; i < 5; ++i)
    for (auto& c : old_sender.cut(message({8}, 1))) feed(r, std::move(c), out);
  CHECK(out.size() == 5);
  Striper fresh(2, 2, 10);  // seq 1 again, another sender id
  for (auto& c : fresh.cut(message({8}, 9))) feed(r, std::move(c), out);
  CHECK(out.size() == 6);
}

TEST_CASE("chunks that contradict their message or the limits are refused, state kept clean") {
  Striper s(2, 5, 10);
  auto c = s.cut(message({8, 40}, 1));
  ReassemblyLimits small;
  small.max_frame_bytes = 16;
  Reassembler r(small);
  std::deque<std::vector<wire::Frame>> out;
  feed(r, std::move(c[0]), out);
  CHECK_THROWS_WITH_AS(feed(r, std::move(c[1]), out), doctest::Contains("over the limits"),
                       WireError);
  CHECK(r.partial_messages() == 0);

  // The same chunk twice, and a chunk on a lane other than its own.
  Striper t(2, 6, 10);
  auto d = t.cut(message({8, 40}, 1));
  Reassembler q;
  auto h = decode_chunk_header(d[1].frames[0]);
  REQUIRE(h);
  wire::Frame p1(d[1].frames[1].data(), d[1].frames[1].size());
  q.add(h->lane, *h, std::move(p1), out);
  wire::Frame p2(d[1].frames[1].data(), d[1].frames[1].size());
  CHECK_THROWS_WITH_AS(q.add(h->lane, *h, std::move(p2), out), doctest::Contains("twice"),
                       WireError);
  wire::Frame p3(d[2].frames[1].data(), d[2].frames[1].size());
  auto h2 = decode_chunk_header(d[2].frames[0]);
  CHECK_THROWS_WITH_AS(q.add(static_cast<uint16_t>(1 - h2->lane), *h2, std::move(p3), out),
                       doctest::Contains("came on lane"), WireError);
}
