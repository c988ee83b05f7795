//! Wormhole fast-forwarding is the packet backend's default where it applies, and the report
//! says which engine ran.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario};

const BASE: &str = "
model: { preset: gpt3-13b, num_hidden_layers: 1 }
training: { seq_length: 1024, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 8 }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: spine-leaf, hosts_per_leaf: 1 } }
network: { backend: packet }
output: { trace: false, flows: false }
";

fn scenario(sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(BASE, &sets, Path::new(".")).expect("valid scenario")
}

#[test]
fn absent_means_fast_forward_with_memo_where_it_applies() {
    let s = scenario(&[]);
    let ff = s.network.effective_fast_forward().expect("on by default");
    assert!(ff.memo);
    assert!(s.packet_engine().unwrap().starts_with("Wormhole fast-forward, the default"));
    assert!(s.packet_config_on().wormhole.fast_forward);
}

#[test]
fn off_and_the_cases_it_does_not_cover_run_the_exact_engine() {
    for (sets, says) in [
        (&["network.fast_forward=off"][..], "exact (network.fast_forward: off)"),
        (
            &["network.transport=tcp"][..],
            "exact (Wormhole fast-forward, the default, does not apply",
        ),
        (
            &["network.load_balance=spray"][..],
            "exact (Wormhole fast-forward, the default, does not apply",
        ),
        (
            &["network.transport=uet"][..],
            "exact (Wormhole fast-forward, the default, does not apply",
        ),
        (
            &["network.cc=swift"][..],
            "exact (Wormhole fast-forward, the default, does not apply",
        ),
    ] {
        let s = scenario(sets);
        assert!(s.network.effective_fast_forward().is_none(), "{sets:?}");
        assert!(
            s.packet_engine().unwrap().starts_with(says),
            "{sets:?}: {}",
            s.packet_engine().unwrap()
        );
        assert!(!s.packet_config_on().wormhole.fast_forward, "{sets:?}");
    }
    // A lossy link stops the default; links failing (from the start or during the run) do not,
    // nor does a straggler.
    for (fault, stops) in [
        ("{ link: leaf0-spine0, action: down, at: 1ms }", false),
        ("{ link: leaf0-spine0, loss: 1e-5 }", true),
        ("{ link: leaf0-spine0, loss: 1e-5, at: 1ms }", true),
        ("{ links: {random: 2, seed: 3}, action: down, at: 5ms }", false),
        ("{ link: leaf0-spine0, action: down }", false),
        ("{ switch: spine0, action: down }", false),
        ("{ gpu: 3, slowdown: 1.5, at: 1ms }", false),
    ] {
        let faults = format!("{BASE}faults: [{fault}]\n");
        let s = Scenario::from_yaml(&faults, &[], Path::new(".")).expect("valid scenario");
        assert_eq!(s.run_network().effective_fast_forward().is_none(), stops, "{fault}");
        assert_eq!(s.packet_engine().unwrap().contains("does not model lossy links"), stops, "{fault}");
    }
    // Written knobs are the user's: not silently dropped where they do not apply.
    let s = scenario(&["network.fast_forward={theta: 0.1}", "network.load_balance=spray"]);
    assert!(s.network.effective_fast_forward().is_some());
}

#[test]
fn the_setting_survives_a_round_trip_through_yaml() {
    for sets in [
        &[][..],
        &["network.fast_forward=off"][..],
        &["network.fast_forward={theta: 0.1}"][..],
    ] {
        let s = scenario(sets);
        let text = serde_yaml_ng::to_string(&s.network).unwrap();
        let back: llmsim_sim::scenario::NetworkSpec = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(
            back.effective_fast_forward().map(|f| (f.theta, f.memo)),
            s.network.effective_fast_forward().map(|f| (f.theta, f.memo)),
            "{sets:?}: {text}"
        );
    }
}

#[test]
fn the_report_names_the_engine() {
    let o = llmsim_sim::simulate(&scenario(&[]), &RunOptions::default(), &mut |_, _| {}).unwrap();
    let e = o.report.packet_engine.as_deref().expect("packet engine in the report");
    assert!(e.starts_with("Wormhole fast-forward"), "{e}");
    assert!(o.report.render().contains("packet engine: Wormhole"));
    let flow = llmsim_sim::simulate(&scenario(&["network.backend=flow"]), &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert!(flow.report.packet_engine.is_none());
}

trait PacketConfigOn {
    fn packet_config_on(&self) -> llmsim_net::packet::PacketConfig;
}

impl PacketConfigOn for Scenario {
    fn packet_config_on(&self) -> llmsim_net::packet::PacketConfig {
        self.run_network().packet_config(self.seed).expect("valid packet config")
    }
}
