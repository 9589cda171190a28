// `geotrain bench server`: push+pull round trips against a real ParamServer, against raw ZeroMQ
// DEALER/ROUTER request/reply moving the same bytes, both measured in the same run.
//
// For each transport (tcp loopback, inproc), codec and shard size: one ParamServer owning one
// shard of that many fp32 bytes runs on its own thread; one region client pushes a delta
// encoded with the codec and pulls the change back (downlink with the same codec and server-side
// error feedback), one request at a time. The raw reference is a ROUTER thread that answers each
// DEALER request with a reply of the size the server's reply has: the same frames, the same
// bytes, the same socket types, but no protocol, no decode, no optimizer and no encode. The two
// are timed in alternating turns of a few round trips, so that load from other processes on the
// machine falls on both alike.
// With `curve`, tcp rows also time a third session, the same server with CURVE on (keys made
// for the run in a temporary folder), alternating with the plain one: curve_ratio is CURVE's
// throughput over plain's, measured side by side. Process RSS is read at start and end; with
// `duration` > 0 a soak of push+pull round trips against one server (tcp, the first codec, the
// largest size) runs that long with RSS read at its start and end (server memory under load:
// client and server share the process, so the figure bounds the server's growth).
// Blocks until done; prints to stdout. Writes nothing to disk but the temporary CURVE keys
// (metrics and checkpoints off).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace geotrain::bench {

struct ServerBenchOptions {
  // fp32 bytes of the shard (the size of an uncompressed delta): 4 KiB to 16 MiB.
  std::vector<std::size_t> sizes{std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20,
                                 std::size_t{16} << 20};
  std::vector<std::string> codecs{"fp32", "onebit"};
  std::vector<std::string> transports{"tcp", "inproc"};
  double seconds = 0.3;  // timed per measurement, after a warm-up; at least 5 round trips
  bool json = false;
  bool curve = false;   // also time tcp rows with CURVE on (curve_ratio)
  double duration = 0;  // seconds of soak load with RSS at its start and end; 0 = none
};

struct ServerSoakResult {
  std::string transport, codec;
  std::size_t bytes = 0;
  bool curve = false;
  double seconds = 0;
  std::size_t round_trips = 0;
  std::size_t rss_start_kib = 0;  // after set-up and a warm-up
  std::size_t rss_end_kib = 0;
  std::size_t rss_max_kib = 0;  // largest reading (every second)
};

struct ServerBenchResult {
  std::string transport;  // "tcp" (127.0.0.1) or "inproc"
  std::string codec;
  std::size_t bytes = 0;       // fp32 bytes of the shard
  std::size_t wire_bytes = 0;  // payload bytes of one push plus its pull reply
  double server_mbps = 0;    // wire_bytes per round trip / median round-trip time, in 10^6 bytes/s
  double raw_zmq_mbps = 0;   // the same for the raw ZeroMQ echo
  double ratio = 0;          // server_mbps / raw_zmq_mbps (1.0 = as fast as raw ZeroMQ)
  double server_rtt_us = 0;  // median push+pull round trip
  double raw_rtt_us = 0;
  std::size_t server_round_trips = 0, raw_round_trips = 0;
  // --curve, tcp rows: the same server with CURVE on, timed alternately with the plain one.
  bool has_curve = false;
  double curve_mbps = 0, curve_rtt_us = 0;
  double curve_ratio = 0;  // curve_mbps / the plain server's MB/s in the same comparison
  // Whether the target (ratio >= 0.8) applies to this row, and if not, why not:
  // "target >= 0.8" (tcp, fp32, payload of 1 MB and up), or the reason it does not apply.
  std::string note;
};

// The note of a row (see ServerBenchResult::note). push_payload: bytes of one push's payload.
std::string server_bench_note(const std::string& transport, const std::string& codec,
                              std::size_t shard_bytes, std::size_t push_payload);

int run_server_bench(const ServerBenchOptions& options);
std::vector<ServerBenchResult> measure_server(const ServerBenchOptions& options);
ServerSoakResult soak_server(const ServerBenchOptions& options);
// This process's resident set size (VmRSS), KiB.
std::size_t rss_kib();

}  // namespace geotrain::bench
