//! ns-3 `config.txt` keys beyond the reference runs (issue 32):
//! - `LINK_DOWN time_us a b` (§2): the cable between nodes `a` and `b` fails at 2 s +
//!   `time_us`, as HPCC's `third.cc` schedules `TakeDownLink`. The routing tables are computed
//!   again without it, the packets on it are lost, and RoCE recovers them: every flow finishes
//!   with its bytes, and nothing crosses the cable afterwards.
//! - `LOAD_BALANCE ecmp | spray | adaptive | flowlet [gap_us]` (§1, an llmsim extension):
//!   spraying spreads each flow's packets over both spines.

use std::path::{Path, PathBuf};

use llmsim_net::packet::ns3::Ns3Experiment;

/// 4 hosts (0-3), leaves 4 and 5, spines 6 and 7, 100 Gb/s, 1 us links.
const TOPOLOGY: &str = "8 4 8
4 5 6 7
0 4 100Gbps 1000ns 0
1 4 100Gbps 1000ns 0
2 5 100Gbps 1000ns 0
3 5 100Gbps 1000ns 0
4 6 100Gbps 1000ns 0
4 7 100Gbps 1000ns 0
5 6 100Gbps 1000ns 0
5 7 100Gbps 1000ns 0
";

/// Every host of leaf 4 to every host of leaf 5, 4 MB each, from 2 s: the flows cross both
/// spines (ECMP), so some cross the 4-6 cable.
const FLOWS: &str = "4
0 2 3 100 4000000 2.000000000
0 3 3 101 4000000 2.000000000
1 2 3 102 4000000 2.000000000
1 3 3 103 4000000 2.000000000
";

fn config(link_down: &str) -> String {
    format!(
        "CC_MODE 1
ENABLE_QCN 1
PACKET_PAYLOAD_SIZE 1000
TOPOLOGY_FILE topology.txt
FLOW_FILE flows.txt
SIMULATOR_STOP_TIME 4.00
KMAX_MAP 1 100000000000 1600
KMIN_MAP 1 100000000000 400
PMAX_MAP 1 100000000000 0.20
BUFFER_SIZE 32
{link_down}
"
    )
}

fn experiment_dir(tag: &str, link_down: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llmsim-ns3-link-down-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("topology.txt"), TOPOLOGY).expect("write");
    std::fs::write(dir.join("flows.txt"), FLOWS).expect("write");
    std::fs::write(dir.join("config.txt"), config(link_down)).expect("write");
    dir
}

fn run(dir: &Path) -> Ns3Experiment {
    let mut x = Ns3Experiment::load(&dir.join("config.txt"), 1).expect("loads");
    x.run();
    x
}

/// The two directions of the 4-6 cable, by link index.
fn cable_4_6(x: &Ns3Experiment) -> Vec<u32> {
    let e = &x.engine;
    let id = |n: u32| (0..8).find(|&i| e.ns3_id(i) == Some(n)).expect("node");
    let (a, b) = (id(4), id(6));
    e.topology()
        .links()
        .iter()
        .enumerate()
        .filter(|(_, l)| (l.src.0, l.dst.0) == (a, b) || (l.src.0, l.dst.0) == (b, a))
        .map(|(i, _)| i as u32)
        .collect()
}

#[test]
fn link_down_with_a_time_fails_the_cable_and_every_flow_finishes() {
    let base_dir = experiment_dir("base", "LINK_DOWN 0 0 0");
    let base = run(&base_dir);
    let cable = cable_4_6(&base);
    assert_eq!(cable.len(), 2);
    let before: u64 = cable.iter().map(|&l| base.engine.link_tx_bytes(l).unwrap()).sum();
    assert!(before > 0, "ECMP sends some flow over spine 6 in the plain run");
    let bs = base.engine.stats();
    assert_eq!((bs.flows_done, bs.drops_error), (4, 0));

    // 20 us after the flows start, while all four are sending (each takes >= 320 us alone).
    let dir = experiment_dir("down", "LINK_DOWN 20 4 6");
    let x = run(&dir);
    let s = x.engine.stats();
    assert_eq!(s.flows_done, 4, "every flow finishes: {s:?}");
    assert_eq!(s.payload_delivered, bs.payload_delivered, "every byte arrives once");
    assert!(s.drops_error > 0, "packets on the failed cable were lost: {s:?}");
    assert!(s.retransmitted_bytes > 0, "and sent again: {s:?}");
    let after: u64 = cable.iter().map(|&l| x.engine.link_tx_bytes(l).unwrap()).sum();
    // 20 us at 100 Gb/s is 250 KB per direction at most; the cable carried far more without
    // the failure.
    assert!(after <= 2 * 250_000 + 2 * 1100, "the cable carried {after} B after failing");
    assert!(after < before);
    for &l in &cable {
        assert!(x.engine.topology().is_link_down(llmsim_core::LinkId(l)));
    }
    let _ = std::fs::remove_dir_all(base_dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn link_down_naming_no_cable_is_refused() {
    let dir = experiment_dir("bad", "LINK_DOWN 20 0 7");
    let e = Ns3Experiment::load(&dir.join("config.txt"), 1).err().expect("refused");
    assert!(e.to_string().contains("LINK_DOWN: nodes 0 and 7"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The bytes leaf 4 sent up to spine 6 and to spine 7.
fn uplink_bytes(x: &Ns3Experiment) -> (u64, u64) {
    let e = &x.engine;
    let id = |n: u32| (0..8).find(|&i| e.ns3_id(i) == Some(n)).expect("node");
    let up = |s: u32| {
        e.topology()
            .links()
            .iter()
            .position(|l| (l.src.0, l.dst.0) == (id(4), id(s)))
            .map(|i| e.link_tx_bytes(i as u32).unwrap())
            .unwrap()
    };
    (up(6), up(7))
}

#[test]
fn load_balance_spray_spreads_every_flow_over_both_spines() {
    let dir = experiment_dir("spray", "LINK_DOWN 0 0 0\nLOAD_BALANCE spray");
    let x = run(&dir);
    let s = x.engine.stats();
    assert_eq!(s.flows_done, 4, "{s:?}");
    assert_eq!(s.payload_delivered, 16_000_000);
    let (a, b) = uplink_bytes(&x);
    // Round robin per packet over the two spines: each carries half of the 16 MB (and of what
    // go-back-N resent) within a packet per flow.
    let diff = a.abs_diff(b) as f64 / (a + b) as f64;
    assert!(diff < 0.05, "spine 6 {a} B, spine 7 {b} B");
    for bad in ["LOAD_BALANCE fastest", "LOAD_BALANCE flowlet -3", "LOAD_BALANCE spray 3"] {
        let d = experiment_dir("lb-bad", bad);
        let e = Ns3Experiment::load(&d.join("config.txt"), 1).err().expect("refused");
        assert!(e.to_string().contains("LOAD_BALANCE"), "{bad}: {e}");
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_dir_all(dir);
}
