//! The flex (DeepEP / HybridEP) dispatcher with its EP group over servers: each all-to-all runs
//! as a network phase among the GPUs with the same local index (one per server) and an NVLink
//! phase inside each server.

use std::path::Path;

use llmsim_sim::{Outcome, Scenario, simulate};

/// A 4-layer Mixtral-shaped model (8 experts, top 2) on two servers of two GPUs, EP 4.
const MOE: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 4 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 1, ep: 4, moe_token_dispatcher: flex }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 2, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";

fn run(sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(MOE, &sets, Path::new(".")).expect("scenario");
    simulate(&s, &Default::default(), &mut |_, _| {}).expect("runs")
}

fn by_group(o: &Outcome, g: &str) -> (u64, u64) {
    o.report
        .collectives_by_group
        .iter()
        .find(|c| c.group == g)
        .map_or((0, 0), |c| (c.collectives, c.on_network))
}

#[test]
fn the_network_phase_crosses_servers_and_the_nvlink_phase_does_not() {
    let o = run(&[]);
    let (inter, inter_net) = by_group(&o, "ep_inter");
    let (intra, intra_net) = by_group(&o, "ep_intra");
    assert_eq!(by_group(&o, "ep"), (0, 0), "no single EP all-to-all over servers");
    assert!(inter > 0 && inter == inter_net, "ep_inter {inter} ({inter_net} on the network)");
    assert!(intra == inter && intra_net == 0, "ep_intra {intra} ({intra_net} on the network)");
    assert!(o.report.mean.exposed_ep_s > 0.0);
    // Inside one server (four GPUs per node) the single all-to-all of today.
    let one = run(&["cluster.gpus_per_node=4"]);
    assert_eq!(by_group(&one, "ep_inter"), (0, 0));
    assert!(by_group(&one, "ep").0 > 0);
}

#[test]
fn the_all_to_all_overlap_keeps_both_phases_beside_the_other_micro_batch() {
    let off = run(&[]);
    let on = run(&["parallel.moe_a2a_overlap=true"]);
    assert_eq!(by_group(&off, "ep_inter"), by_group(&on, "ep_inter"));
    assert_eq!(by_group(&off, "ep_intra"), by_group(&on, "ep_intra"));
    let (e_off, e_on) = (off.report.mean.exposed_ep_s, on.report.mean.exposed_ep_s);
    assert!(e_on < e_off, "exposed EP {e_on} s with overlap, {e_off} s without");
}
