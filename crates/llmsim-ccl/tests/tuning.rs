//! Integration tests of the NCCL 2.30.7 tuning model. Expected values are derived here from
//! NCCL's formulas (tuning.cc / enqueue.cc) and the graph the search finds, not copied from runs.

use llmsim_ccl::tuning::{Algo, CollKind, Proto, TuningError, TuningInput, busbw_factor, chunk_size, decide};
use llmsim_core::Bytes;
use proptest::prelude::*;

fn cell(d: &llmsim_ccl::tuning::TuningDecision, a: Algo, p: Proto) -> llmsim_ccl::tuning::AlgoCost {
    d.table.iter().find(|c| c.algo == a && c.proto == p).unwrap().clone()
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} != {b}");
}

/// Ring/Simple AllReduce, 4 nodes x 8 H100 (32 ranks), 1 GiB.
#[test]
fn ring_simple_allreduce_by_hand() {
    let (nranks, nnodes) = (32u32, 4u32);
    let bytes = Bytes::gib(1);
    let d = decide(&TuningInput::h100(CollKind::AllReduce, bytes, nranks)).unwrap();
    // Search: one 48 GB/s channel per 50 GB/s NIC -> 8 channels (> 2 nodes: bwInter).
    let (nch, bw_ch) = (8.0, 48.0);
    let nsteps = 2.0 * (f64::from(nranks) - 1.0);
    let algbw = nch * bw_ch * f64::from(nranks) / nsteps;
    // lat = base 8.4 + (nsteps - nInter) * max(NVLink 3.4, 1 us Intel x3 Simple) + nInter * NET 14.
    let ninter = 2.0 * (f64::from(nnodes) - 1.0);
    let lat = 8.4 + (nsteps - ninter) * 3.4_f64.max(3.0) + ninter * 14.0;
    // Multi-node ring plateau: nBytes / (16 comm channels * 32 ranks) >= 64 -> x1.4.
    let lat = lat * 1.4;
    let c = cell(&d, Algo::Ring, Proto::Simple);
    close(c.bw_gbps, algbw);
    close(c.lat_us, lat);
    close(c.time_us, lat + bytes.as_f64() / (1000.0 * algbw));
    assert_eq!(d.graph.comm_channels, 16);
}

/// Tree/LL AllReduce, 2 nodes x 8 H100, 64 KiB.
#[test]
fn tree_ll_allreduce_by_hand() {
    let bytes = Bytes::kib(64);
    let d = decide(&TuningInput::h100(CollKind::AllReduce, bytes, 16)).unwrap();
    // Tree graph = 8 ch x 48 (2 nodes: bwIntra). busBw = 8*48, Tree AllReduce cap
    // min(x0.92, 8 * perChMaxTree[Hopper][N2]=41.4), LL: min(/3.8, llMaxBw[Intel][N2]=39).
    let mut bus: f64 = 8.0 * 48.0;
    bus = (bus * 0.92).min(8.0 * 41.4);
    bus = (bus / 3.8).min(39.0);
    let algbw = bus * 0.5;
    // Correction: log2(65536 >> 6) = 10 -> LL factor 0.6.
    let bw = algbw * 0.6;
    // lat = 6.8 + 2 * ((ppn-1) * NVLink LL 0.6 + log2(2) * NET LL 5.0).
    let lat = 6.8 + 2.0 * (7.0 * 0.6 + 1.0 * 5.0);
    let c = cell(&d, Algo::Tree, Proto::LL);
    close(c.bw_gbps, bw);
    close(c.lat_us, lat);
    close(c.time_us, lat + bytes.as_f64() / (1000.0 * bw));
}

#[test]
fn small_picks_ll_large_picks_simple_multi_node() {
    for n in [16, 32, 128] {
        let small = decide(&TuningInput::h100(CollKind::AllReduce, Bytes(1024), n)).unwrap();
        assert_eq!(small.proto, Proto::LL, "{n} ranks 1 KiB: {small}");
        let big = decide(&TuningInput::h100(CollKind::AllReduce, Bytes::gib(4), n)).unwrap();
        assert_eq!(big.proto, Proto::Simple, "{n} ranks 4 GiB: {big}");
    }
}

#[test]
fn single_node_never_nvlstree_and_nvls_simple_only() {
    for kind in CollKind::ALL {
        for shift in [3u32, 10, 16, 20, 26, 33] {
            let d = decide(&TuningInput::h100(kind, Bytes(1 << shift), 8)).unwrap();
            assert_ne!(d.algo, Algo::NvlsTree);
            assert!(!cell(&d, Algo::NvlsTree, Proto::Simple).enabled);
            for c in &d.table {
                if matches!(c.algo, Algo::Nvls | Algo::NvlsTree) && c.proto != Proto::Simple {
                    assert!(!c.enabled);
                }
            }
        }
    }
}

#[test]
fn pat_only_with_one_gpu_per_node() {
    let mut one_ppn = TuningInput::h100(CollKind::AllGather, Bytes::mib(1), 16);
    one_ppn.nnodes = 16;
    let d = decide(&one_ppn).unwrap();
    assert!(cell(&d, Algo::Pat, Proto::Simple).enabled);
    assert!(!cell(&d, Algo::Pat, Proto::LL).enabled);
    let d = decide(&TuningInput::h100(CollKind::AllGather, Bytes::mib(1), 16)).unwrap();
    let pat = cell(&d, Algo::Pat, Proto::Simple);
    assert!(!pat.enabled && pat.reason_if_disabled.unwrap().contains("1 GPU per node"));
    // PAT is never an AllReduce algorithm.
    let d = decide(&{
        let mut i = TuningInput::h100(CollKind::AllReduce, Bytes::mib(1), 16);
        i.nnodes = 16;
        i
    })
    .unwrap();
    assert!(!cell(&d, Algo::Pat, Proto::Simple).enabled);
}

#[test]
fn overrides_restrict_and_bad_overrides_error() {
    let mut i = TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 16);
    i.algo_override = Some(vec![Algo::Ring]);
    i.proto_override = Some(vec![Proto::LL128]);
    let d = decide(&i).unwrap();
    assert_eq!((d.algo, d.proto), (Algo::Ring, Proto::LL128));
    assert_eq!(d.table.iter().filter(|c| c.enabled).count(), 1);

    let mut bad = TuningInput::h100(CollKind::AllGather, Bytes::gib(1), 16);
    bad.algo_override = Some(vec![Algo::Tree]);
    let e = decide(&bad).unwrap_err();
    assert!(matches!(e, TuningError::AlgoNotAllowed { algo: Algo::Tree, .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("algo_override") && msg.contains("Ring") && msg.contains("PAT"),
        "{msg}"
    );

    let mut bad = TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 16);
    bad.algo_override = Some(vec![Algo::NvlsTree]);
    bad.proto_override = Some(vec![Proto::LL]);
    let msg = decide(&bad).unwrap_err().to_string();
    assert!(msg.contains("proto_override") && msg.contains("Simple"), "{msg}");

    // Allowed by the collective but disabled on this system: NVLSTree on one node.
    let mut off = TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 8);
    off.algo_override = Some(vec![Algo::NvlsTree]);
    let msg = decide(&off).unwrap_err().to_string();
    assert!(msg.contains("single node"), "{msg}");
}

#[test]
fn invalid_fields_name_the_field() {
    let mut i = TuningInput::h100(CollKind::AllReduce, Bytes::mib(1), 12);
    i.nnodes = 5;
    assert!(decide(&i).unwrap_err().to_string().starts_with("nnodes"));
    let mut i = TuningInput::h100(CollKind::AllReduce, Bytes::mib(1), 16);
    i.max_channels = Some(65);
    assert!(decide(&i).unwrap_err().to_string().starts_with("max_channels"));
}

#[test]
fn tiny_messages_reduce_channels() {
    // Ring/Tree channel reduction: while nBytes < nc * nthreads * threshold, nc--.
    let d = decide(&TuningInput::h100(CollKind::AllReduce, Bytes(4096), 16)).unwrap();
    assert_eq!(d.nchannels, 1, "{d}");
    let d = decide(&TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 32)).unwrap();
    assert_eq!(d.nchannels, d.graph.comm_channels);
    // Ring/LL128 single node, 64 KiB: threshold 8 B x 640 threads -> 5120 B per channel;
    // NCCL stops at the largest nc with nc * 5120 <= nBytes.
    let mut i = TuningInput::h100(CollKind::AllGather, Bytes::kib(64), 8);
    i.algo_override = Some(vec![Algo::Ring]);
    i.proto_override = Some(vec![Proto::LL128]);
    let d = decide(&i).unwrap();
    assert_eq!(u64::from(d.nchannels), 64 * 1024_u64 / (640 * 8));
}

#[test]
fn busbw_factors() {
    close(busbw_factor(CollKind::AllReduce, 8), 2.0 * 7.0 / 8.0);
    close(busbw_factor(CollKind::AllGather, 8), 7.0 / 8.0);
    close(busbw_factor(CollKind::ReduceScatter, 16), 15.0 / 16.0);
    close(busbw_factor(CollKind::Broadcast, 16), 1.0);
    let d = decide(&TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 16)).unwrap();
    close(d.algbw_gbps, Bytes::gib(1).as_f64() / (d.time_us * 1000.0));
    close(d.predicted_busbw_gbps, d.algbw_gbps * 2.0 * 15.0 / 16.0);
}

#[test]
fn chunk_sizes() {
    let d = decide(&TuningInput::h100(CollKind::AllReduce, Bytes::gib(8), 128)).unwrap();
    let g = &d.graph;
    // Simple: 4 MiB buffer / 8 steps x chunkSteps 4.
    let c = chunk_size(CollKind::AllReduce, Algo::Ring, Proto::Simple, Bytes::gib(8), 16, 128, g);
    assert_eq!(c, Bytes(4 * 1024 * 1024 / 8 * 4));
}

#[test]
fn explain_mentions_winner_and_disabled_reasons() {
    let d = decide(&TuningInput::h100(CollKind::AllReduce, Bytes::mib(64), 16)).unwrap();
    let s = d.explain();
    assert!(s.contains("<= chosen") && s.contains("why:") && s.contains("off:"), "{s}");
    assert_eq!(d.nccl_version, "2.30.7");
    assert_eq!(d.table.len(), 21);
}

proptest! {
    #[test]
    fn time_non_decreasing_in_bytes(
        nodes in prop::sample::select(vec![1u32, 2, 4, 16, 128]),
        kind in prop::sample::select(CollKind::ALL.to_vec()),
        a in 1u64..(1 << 34),
        b in 1u64..(1 << 34),
    ) {
        let (lo, hi) = (a.min(b), a.max(b));
        let dl = decide(&TuningInput::h100(kind, Bytes(lo), nodes * 8)).unwrap();
        let dh = decide(&TuningInput::h100(kind, Bytes(hi), nodes * 8)).unwrap();
        for (cl, ch) in dl.table.iter().zip(&dh.table) {
            if cl.enabled && ch.enabled {
                // Tree correction factors are not monotone; compare the uncorrected model.
                if cl.algo == Algo::Tree { continue; }
                // The ring plateau (x1.4 latency) switches on at a threshold size.
                if cl.lat_us == ch.lat_us {
                    prop_assert!(ch.time_us >= cl.time_us, "{:?}/{:?}", cl.algo, cl.proto);
                }
            }
        }
        prop_assert!(dh.time_us >= dl.time_us * (1.0 - 1e-9) || dl.algo != dh.algo);
    }
}
