// WorkerConfig: what a worker process needs, read from the deployment's shared YAML config.
//
//   regions: [us-east, eu-west]
//   model:  { arch: "784-256-128-10", critical: ["fc3.*"] }   or {kind: gpt, preset: gpt-tiny}
//   server: { endpoints: {us-east: "tcp://10.0.0.1:7101", ...}, staleness_bound: 2, ... }
//   worker: { workers_per_region: 2, batch_size: 64, local_steps: 4, rounds: 200, ... }
//
// The worker reads `regions`, `model` (models/model_spec.hpp), `server.endpoints`, the protocol
// settings it shares with the servers (core/deployment_keys.hpp, read_shared_protocol: the
// staleness bound, server.optimizer, worker.fragments and stream_critical, read by the same
// function the servers use), and all of `worker` (keys and defaults: docs/training.md). Unknown
// keys under `worker` and `model` are errors naming the key and what is allowed. Plain struct;
// parsing only reads the text.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "core/deployment_keys.hpp"
#include "core/region_workers.hpp"
#include "models/model_spec.hpp"
#include "wire/security_config.hpp"
#include "worker/data/idx_dataset.hpp"
#include "worker/leader/overlap_merge.hpp"
#include "worker/training/anomaly_guard.hpp"
#include "worker/training/emulated_step.hpp"
#include "worker/training/optimizer.hpp"

namespace geotrain::worker {

// worker.data: what the model trains on.
//   {kind: fashion-mnist, path: DIR}   the IDX files of Fashion-MNIST (classifiers)
//   {kind: text, path: FILE_OR_DIR}    a byte-level text corpus (language models)
struct DataConfig {
  std::string kind = "fashion-mnist";  // fashion-mnist | text
  std::filesystem::path path = kFashionMnistDir;
  double validation_fraction = 0.05;  // text: the last fraction of the bytes
  uint32_t eval_windows = 64;         // text: validation windows per evaluation
  static constexpr const char* kKjvFile = "/usr/local/share/geotrain/kjv.txt";
};

// worker.checkpoint: snapshots of each worker's own state (worker/run/worker_checkpoint.hpp), at
// round boundaries; a worker started with --resume continues from them (docs/run.md).
struct WorkerCheckpointConfig {
  uint64_t every = 0;                                // rounds between snapshots; 0 = none
  uint32_t keep = 2;                                 // newest snapshots kept per worker
  std::filesystem::path dir = "worker-checkpoints";  // relative paths are under run_dir
};

struct WorkerConfig {
  std::vector<std::string> regions;
  models::ModelSpec model;  // model: kind, arch or preset and sizes, critical globs
  std::map<std::string, std::string> server_endpoints;  // region -> its server
  // How one region reaches another region's server, when not at server_endpoints (e.g. through
  // netsim): routes[from_region][to_region] = endpoint.
  std::map<std::string, std::map<std::string, std::string>> routes;
  uint32_t staleness_bound = 0;
  StandbySettings standby;  // server.standby (core/deployment_keys.hpp): leaders ask the standby

  // worker.workers_per_region: a count for every region, or {region: count} (an uneven fleet).
  RegionWorkers workers;
  // worker.device: cpu | cuda for every region, or {region: device} (a mixed fleet). A region's
  // workers all train on its device.
  RegionDevices devices;
  const std::string& device_in(std::string_view region) const { return devices.in(region); }
  // worker.precision where it applies: the region's on a cuda region; a CPU region trains in
  // fp32 (a mixed fleet's bf16 is its GPU regions').
  std::string precision_in(std::string_view region) const {
    return device_in(region) == "cuda" ? precision : "fp32";
  }
  // fp32 | bf16 (bf16 mixed precision: a GPT on cuda only; models/gpt_cuda.hpp).
  std::string precision = "fp32";
  // device: cuda with overlap: the leader's parameters stay on the GPU at its exchanges, and the
  // overlap rule runs there (worker/leader/leader_params.hpp); false: on the host mirror.
  bool leader_on_device = true;
  // worker.elastic: a CPU region outlives a dead worker: the survivors re-form their Gloo group
  // and go on, and the restarted worker rejoins from a live peer (worker/region/region_group.hpp;
  // docs/run.md "When a worker dies"). false, or device cuda: the region's group restarts from
  // its snapshots.
  bool elastic = true;
  // Whether the region re-forms its group (worker.elastic, on the CPU).
  bool elastic_in(std::string_view region) const {
    return regions_re_form(elastic, device_in(region));
  }
  DataConfig data;
  // worker.batch_size: per worker, per micro-batch; one size, or {region: size}. A worker's is
  // batch_size.in(its region); the fleet's global micro-batch, batch_size.global(workers).
  RegionBatches batch_size;
  uint32_t accumulation_steps = 1;
  uint32_t local_steps = 1;  // H: local steps per round
  uint64_t rounds = 100;
  // worker.critical_codec / noncritical_codec: a codec spec, or a schedule of them by round
  // (compression/codec_schedule.hpp).
  compression::CodecSchedule critical_codec = "fp32";
  compression::CodecSchedule noncritical_codec = "fp32";
  // worker.error_feedback.decay: beta of both classes' uplink residuals, x = delta + beta e
  // (compression/error_feedback.hpp), in (0, 1]; 1 keeps the whole residual.
  float error_feedback_decay = 1.0f;
  // worker.chunk_align: segment (false, the default: a codec's chunks run on across the tensors
  // of one class inside a shard) | tensor (true: every tensor is a segment of its own, so chunks,
  // and their scales, restart at each tensor boundary; uplink only). SyncConfig::tensor_segments.
  bool tensor_segments = false;
  bool overlap = false;  // overlap_mode != off
  // worker.overlap: false | true (carry) | eager | delayed (worker/leader/overlap_merge.hpp).
  OverlapMode overlap_mode = OverlapMode::off;
  // Streaming (worker/leader/streaming_sync.hpp): P fragments, each merged fragment_delay steps
  // after its push (default: H with overlap and one fragment, H / P with fragments, 0 without
  // overlap).
  uint32_t fragments = 1;
  std::optional<uint32_t> fragment_delay;
  // false: the critical tensors (model.critical) stay out of the P fragments, in one of their
  // own exchanged at every round boundary without delay (only with fragments > 1).
  bool stream_critical = true;
  // Whether that critical fragment exists.
  bool critical_fragment() const { return fragments > 1 && !stream_critical; }
  // The servers' outer optimizer (server.optimizer), which eager and delayed merges predict.
  OuterStepConfig outer;
  OptimizerConfig optimizer;
  float lr = 0.05f;
  uint64_t warmup_steps = 0;
  LrDecay decay = LrDecay::kConstant;
  float min_lr = 0.0f;
  // worker.lr_cycle {period, multiplier}: lr_decay cyclic's first cycle (steps) and growth.
  uint64_t lr_cycle_steps = 0;
  uint32_t lr_cycle_mult = 1;
  // worker.lr_scaling (none | linear | sqrt; scale_lr: true is linear) by the fleet's global
  // batch over worker.lr_reference_batch.
  std::optional<LrScaling> lr_scaling;
  uint32_t lr_reference_batch = 64;
  double max_grad_norm = 0;
  AnomalyGuardConfig guard;
  uint64_t eval_every = 10;  // rounds between evaluations (leader)
  uint64_t seed = 0;
  std::string gloo_host = "127.0.0.1";
  // worker.metrics_port: `/metrics` in the Prometheus format (worker/run/worker_metrics.hpp). 0:
  // off; P: the worker of global rank g (RegionWorkers: region by region) serves on P + g
  // (unique among all workers of a run on one machine).
  uint16_t metrics_port = 0;
  bool metrics_port_auto = false;  // `auto`: any free port, logged and in a metrics_endpoint event
  std::string metrics_host = "0.0.0.0";
  uint32_t blas_threads = 1;  // OpenBLAS threads per worker
  double bucket_cap_mb = 25;  // AllReduce bucket size; 0: one AllReduce after backward
  // worker.zero_stage: ZeRO inside a region (worker/training/zero_shards.hpp): 0 (every worker
  // holds the whole optimizer state), 1 (the state sharded over the region's workers) or 2 (the
  // gradient's reduction too: a reduce-scatter). CPU only, and with worker.elastic false.
  uint32_t zero_stage = 0;
  std::filesystem::path run_dir = "runs/worker";
  WorkerCheckpointConfig checkpoint;
  std::chrono::milliseconds timeout{120'000};
  // worker.shard_wait_ms: an overlapped exchange waits this long for a server, then defers its
  // shards (worker/leader/region_sync.hpp, "Deferred shards"); 0: never. Blocking exchanges (no
  // overlap, fragment_delay 0) never defer, whatever it says: a config shared by overlapped and
  // synchronous runs (a sweep's base) keeps it.
  std::chrono::milliseconds shard_wait{0};
  // worker.shard_wait_ms: auto: the wait follows the region's healthy exchanges (twice their 90th
  // percentile, worker/leader/shard_wait.hpp), starting from kAutoShardWaitStart.
  bool shard_wait_auto = false;
  static constexpr std::chrono::milliseconds kAutoShardWaitStart{1'000};
  // worker.streams_per_server: TCP connections from a leader to each server, a message striped
  // over them (wire/striped_channel.hpp): one connection moves at most window / RTT over a long
  // link. 1..64 (1: one plain connection), or `auto` (0, the default): per server, from the
  // round trip the leader measures to it, worker.link_mbps and this host's TCP window
  // (wire::streams_for_link); `geotrain run` on a WAN profile sets it from the profile's links.
  uint32_t streams_per_server = 0;
  double link_mbps = 1000;  // worker.link_mbps: the bandwidth `auto` plans for
  // worker.socket_buffer_kib: SO_SNDBUF/SO_RCVBUF of the leader's server connections; 0: the OS
  // default (autotuned up to net.ipv4.tcp_rmem's maximum). The kernel caps a set value at
  // net.core.wmem_max / rmem_max (docs/deploy.md, "Streams and socket buffers").
  uint32_t socket_buffer_kib = 0;
  std::map<std::string, uint32_t> step_delay_ms;  // artificial slowness per region
  // worker.step_time_ms {region: ms}: each local step of the region lasts at least this long,
  // from its start (emulated compute speed: worker/training/emulated_step.hpp); worker.slowdowns:
  // windows of the run in which a region's step time is multiplied (brownouts).
  std::map<std::string, uint32_t> step_time_ms;
  std::vector<Slowdown> slowdowns;
  // worker.round_time_ms: time-budgeted rounds (worker/training/round_budget.hpp): each round a
  // region takes the local steps that fit in this many milliseconds at its measured pace, between
  // 1 and worker.max_local_steps (default 2 x local_steps); the learning-rate schedule follows the
  // rounds, and each push carries the tokens it stands for. `auto`: local_steps x the fastest
  // region's step_time_ms. 0: every round has local_steps steps.
  double round_time_ms = 0;
  uint32_t max_local_steps = 0;
  // The most local steps the run can take (the data it may read).
  uint64_t max_total_steps() const {
    return rounds * (round_time_ms > 0 ? max_local_steps : local_steps);
  }
  wire::SecurityConfig security;  // top-level `security:`: CURVE keys for every server link
  // worker.external: the workers are the user's own processes (Python leaders through
  // geotrain.torch.OuterSync, docs/python.md): `geotrain run` starts servers and netsim only, and
  // the model may be given by model.tensors alone.
  bool external = false;

  uint32_t region_index(std::string_view name) const;  // InputError naming the allowed names
  // The samples (a GPT's windows) one local step of `region` trains on: each of its workers'
  // micro-batches, accumulated.
  uint64_t samples_per_step(std::string_view region) const {
    return uint64_t{batch_size.in(region)} * accumulation_steps * workers.in(region);
  }
  // The endpoint region `from` uses for the server of region `to` (a route, or the server's own).
  std::string server_endpoint(const std::string& from, const std::string& to) const;
  uint64_t total_steps() const { return rounds * local_steps; }
  // Steps from a fragment's push to its merge (0: blocking), after the defaults above.
  uint32_t merge_delay() const;
};

WorkerConfig parse_worker_config(std::string_view yaml_text, std::string_view source = "<config>");
WorkerConfig load_worker_config(const std::filesystem::path& file);

}  // namespace geotrain::worker
