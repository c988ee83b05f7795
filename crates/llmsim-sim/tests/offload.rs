//! Activation CPU offloading in time: copies on a copy engine over the GPU's host link.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, SimError, simulate};

/// One H100 running an 8-layer Llama-3-8B-shaped model, four micro-batches.
const ONE_GPU: &str = "
model: { preset: llama3-8b, num_hidden_layers: 8 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 4 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 1, gpus_per_node: 1, topology: { kind: flat } }
output: { flows: false }
";

fn run(yaml: &str, sets: &[&str]) -> Result<llmsim_sim::Outcome, SimError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(yaml, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {})
}

#[test]
fn offloading_every_layer_but_one_exposes_each_reload() {
    // With N = L - 1, Transformer Engine starts layer i's reload at layer i's own backward step,
    // so every reload stalls the backward for its whole copy: the exposed time is at least
    // micro-batches x N x (bytes / host bandwidth).
    let base = run(ONE_GPU, &[]).unwrap();
    let o = run(ONE_GPU, &["training.cpu_offload_layers=7"]).unwrap();
    let host_bytes_per_s = llmsim_compute::gpu("H100").unwrap().host_bandwidth.unwrap().bps_f64() / 8.0;
    let copy_s: f64 = o
        .workload
        .segments
        .iter()
        .filter(|s| s.name.starts_with("cpu_offload_h2d"))
        .map(|s| match s.ops[0].kind {
            llmsim_workload::OpSpecKind::HostCopy { bytes } => bytes as f64 / host_bytes_per_s,
            _ => unreachable!(),
        })
        .sum::<f64>();
    assert!(copy_s > 0.0);
    let exposed = o.report.mean.exposed_offload_s;
    assert!(
        exposed >= 4.0 * 7.0 * copy_s * 0.999,
        "exposed {exposed} s, reloads alone {} s",
        4.0 * 7.0 * copy_s
    );
    assert!(o.report.iteration_time_s >= base.report.iteration_time_s + exposed * 0.999);
    assert!(o.report.memory.as_ref().unwrap().footprint.activations < base.report.memory.as_ref().unwrap().footprint.activations);
}

#[test]
fn a_fast_host_link_hides_the_copies() {
    // GB200's NVLink-C2C (225 GB/s each way per GPU) against a short offload: copies overlap
    // the remaining layers' compute, so the iteration barely moves.
    let gb = [&["cluster.gpu=GB200"][..], &["training.cpu_offload_layers=2"][..]].concat();
    let base = run(ONE_GPU, &["cluster.gpu=GB200"]).unwrap();
    let o = run(ONE_GPU, &gb).unwrap();
    let (a, b) = (base.report.iteration_time_s, o.report.iteration_time_s);
    assert!(b >= a && b < a * 1.01, "{a} s -> {b} s");
}

#[test]
fn a_custom_gpu_without_a_host_link_is_asked_for_one() {
    let yaml = ONE_GPU.replace(
        "gpu: H100,",
        "gpu: { name: X1, fp32_tflops: 60, bf16_tflops: 1000, hbm_bandwidth: 4TB/s, memory: 96GiB, nvlink_bandwidth: 450GB/s, sm_count: 128, arch: hopper },",
    );
    run(&yaml, &[]).expect("no offload, no host link needed");
    match run(&yaml, &["training.cpu_offload_layers=2"]) {
        Err(SimError::Scenario { field, message }) => {
            assert_eq!(field, "cluster.gpu.host_bandwidth");
            assert!(message.contains("host_bandwidth"), "{message}");
        }
        other => panic!("expected a scenario error, got {:?}", other.map(|o| o.report.iteration_time_s)),
    }
}
