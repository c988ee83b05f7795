//! Prints the "NCCL model check" table: NCCL 2.30.7's predicted busbw and its choice of
//! algorithm/protocol/channels for AllReduce, AllGather and ReduceScatter on H100 clusters
//! (8 GPUs/node, NVLink4 450 GB/s per direction, one 400 Gb/s NIC per GPU, NVLS on, CollNet off).
//!
//! Run: `cargo run -p llmsim-ccl --example nccl_model_table` (add `-- explain` for the full
//! cost table of each cell).

use llmsim_ccl::tuning::{CollKind, TuningInput, decide};
use llmsim_core::Bytes;

fn main() {
    let explain = std::env::args().any(|a| a == "explain");
    let sizes: [(&str, Bytes); 4] = [
        ("8 MB", Bytes(8_000_000)),
        ("64 MB", Bytes(64_000_000)),
        ("512 MB", Bytes(512_000_000)),
        ("8 GB", Bytes(8_000_000_000)),
    ];
    let gpus = [8u32, 16, 128, 1024];
    println!(
        "| collective | GPUs | size | NCCL choice (algo/proto/channels) | predicted busbw (GB/s) | \
         predicted time (us) |"
    );
    println!("|---|---:|---:|---|---:|---:|");
    for kind in [CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter] {
        for &n in &gpus {
            for (label, bytes) in sizes {
                let d = decide(&TuningInput::h100(kind, bytes, n)).expect("valid H100 input");
                println!(
                    "| {kind} | {n} | {label} | {}/{}/{} | {:.1} | {:.1} |",
                    d.algo, d.proto, d.nchannels, d.predicted_busbw_gbps, d.time_us
                );
                if explain {
                    eprintln!("{}\n", d.explain());
                }
            }
        }
    }
}
