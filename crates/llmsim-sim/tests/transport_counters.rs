//! flows.csv's per-transfer TCP counters (`FlowRecord::recovered`) add up to the packet
//! engine's totals, and each transfer's retransmissions cover its RTOs and fast retransmits.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};

#[test]
fn per_transfer_tcp_counters_add_up_to_the_engine_totals() {
    // A small DLRM on 8 NICs of one switch with an 8 KB share of buffer per port: the
    // all-to-alls and all-reduces overflow it, and TCP recovers.
    let yaml = "
dlrm: { batch_size_per_gpu: 64, bottom_mlp: [64, 32, 16], top_mlp: [64, 1], num_tables: 8, embedding_dim: 16, rows_per_table: 1000 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 1, topology: { kind: flat, nic: { bandwidth: 100Gbps } } }
network: { backend: packet, transport: tcp, switch_buffer: 64KB, tcp: { min_rto: 1ms } }
collectives: { chunks: 4, chunks_in_flight: 2 }
";
    let s = Scenario::from_yaml(yaml, &[], Path::new(".")).expect("valid scenario");
    let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("simulates");
    let n = &o.report.net;
    assert!(
        n.drops > 0 && n.tcp_rtos + n.tcp_fast_retransmits > 0,
        "the buffer overflows: {n:?}"
    );
    let sum = |f: fn(&llmsim_net::TransportCounters) -> u32| o.engine.flows.iter().map(|x| u64::from(f(&x.recovered))).sum::<u64>();
    assert_eq!(sum(|r| r.rtos), n.tcp_rtos);
    assert_eq!(sum(|r| r.fast_retransmits), n.tcp_fast_retransmits);
    for f in &o.engine.flows {
        let r = &f.recovered;
        // Every RTO and every fast retransmit resends at least one segment.
        assert!(r.retransmitted_packets >= r.rtos + r.fast_retransmits, "{f:?}");
        assert_eq!(r.trimmed, 0, "TCP trims nothing");
    }
    assert_eq!(o.engine.flows.len() as u64, n.completed, "one record per transfer");
}
