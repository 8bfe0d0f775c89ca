#pragma once
// store_bench's scenarios, one file each (scenario_*.cpp): each measures
// the store next to a baseline from the same run and prints a table, or
// one JSON object with --json. Progress goes to stderr.
#include "bench_args.hpp"

namespace meshstore::bench {

/// --scenario single: put / get_into / get of one tensor, cold and warm,
/// against memcpy, raw TCP and (cma) bare process_vm_readv/writev.
void run_single(const Args& a);

/// --scenario small: p50/p99 of a 4 KiB put + get_into, against the round
/// trip of a bare request.
void run_small(const Args& a);

/// --scenario reshard: a tensor put as 2 row shards, read as 4 column
/// shards, against memcpy.
void run_reshard(const Args& a);

/// --scenario weight-sync: a Qwen3-shaped state dict put and read, the
/// per-tensor overhead, and end to end into a reader process.
void run_weight_sync(const Args& a);

/// The reader process of weight-sync's end-to-end figures (--peer read).
int run_reader(const Args& a);

/// --scenario safetensors-load: a checkpoint from the page cache into the
/// store or into caller buffers, against read() of its files.
void run_safetensors_load(const Args& a);

/// --scenario python: the same calls from C++ and from Python
/// (benchmarks/python/py_bench.py) in one run, and their ratios.
void run_python(const Args& a);
/// --scenario control: the control plane at scale: commits per second
/// (single, pipelined, batched), exists and get p50/p99 as the index grows
/// to --keys, the server's memory per key, and --clients clients at once.
void run_control(const Args& a);

/// --scenario failover: kill -9 of the store's server, started again at its
/// address, to the first read, with 10k, 100k and 1M keys (--keys caps);
/// the rebuild rate, and the volume process's memory per key.
void run_failover(const Args& a);

/// --scenario replicas: put throughput keeping two copies of each key
/// against one (a 1 GiB tensor, 1,000 x 4 KiB), in one run.
void run_replicas(const Args& a);
void run_metrics(const Args& a);

/// --scenario soak: a publisher and readers killed and restarted at random
/// for --seconds; memory and /dev/shm over time, every version checked.
void run_soak(const Args& a);
/// A reader process of soak (--peer soak-read).
int run_soak_reader(const Args& a);
/// The loader process of safetensors-load (--peer load).
int run_loader(const Args& a);

}  // namespace meshstore::bench
