//! Activation CPU offloading (`training.cpu_offload_layers`, Megatron-Core
//! `cpu_offloading_num_layers`): what stays in HBM, the copy nodes, and the configurations
//! Megatron-Core refuses.

use llmsim_workload::dag::{DagNodeKind, Phase, Stream};
use llmsim_workload::memory::{footprint, layer_activation_bytes};
use llmsim_workload::model::preset;
use llmsim_workload::{ModelConfig, OpSpecKind, ParallelConfig, Recompute, TrainingConfig, WorkloadError, megatron};

fn setup(offload: u64) -> (ModelConfig, TrainingConfig, ParallelConfig) {
    let m = ModelConfig {
        num_hidden_layers: 8,
        ..preset("llama3-8b").unwrap()
    };
    let t = TrainingConfig {
        seq_length: 4096,
        global_batch_size: 4,
        cpu_offload_layers: offload,
        ..TrainingConfig::default()
    };
    let p = ParallelConfig::default().resolve(1, &m, &t).expect("valid plan");
    (m, t, p)
}

#[test]
fn offloaded_layers_leave_hbm_exactly() {
    for n in [1u64, 3, 7] {
        let (m, t0, p) = setup(0);
        let (_, t, _) = setup(n);
        let freed: u64 = (0..n).map(|l| layer_activation_bytes(&m, &t0, &p, l)).sum();
        assert!(freed > 0);
        assert_eq!(
            footprint(&m, &t0, &p).activations - footprint(&m, &t, &p).activations,
            freed,
            "{n} layers"
        );
    }
}

#[test]
fn each_offloaded_layer_is_copied_out_and_back_once_per_micro_batch() {
    let n = 3;
    let (m, t, p) = setup(n);
    let wl = megatron::generate(&m, &t, &p).unwrap();
    let prog = &wl.stages[0];
    let copies: Vec<(usize, &llmsim_workload::dag::Node)> =
        prog.nodes.iter().enumerate().filter(|(_, x)| x.stream == Stream::Offload).collect();
    let mb = p.micro_batches(&t);
    assert_eq!(copies.len() as u64, 2 * n * mb);
    for (_, node) in &copies {
        let DagNodeKind::Comp { segment } = node.kind else {
            panic!("a copy is a Comp node")
        };
        let seg = &wl.segments[segment as usize];
        let OpSpecKind::HostCopy { bytes } = seg.ops[0].kind else {
            panic!("a copy segment holds a HostCopy")
        };
        assert_eq!(bytes, layer_activation_bytes(&m, &t, &p, u64::from(node.layer)));
        assert!(u64::from(node.layer) < n);
    }
    // Forward of layer L - N + i waits for layer i's copy out (Transformer Engine's default
    // schedule); the backward of an offloaded layer waits for its reload.
    let l = m.num_hidden_layers;
    for (id, node) in &copies {
        let dependents: Vec<&llmsim_workload::dag::Node> = (0..prog.nodes.len())
            .filter(|&k| prog.deps(k as u32).contains(&(*id as u32)))
            .map(|k| &prog.nodes[k])
            .collect();
        let want = match node.phase {
            Phase::Forward => (u64::from(node.layer) + l - n, Phase::Forward),
            _ => (u64::from(node.layer), Phase::Backward),
        };
        assert!(
            dependents
                .iter()
                .any(|d| d.stream == Stream::Compute && (u64::from(d.layer), d.phase) == want && d.microbatch == node.microbatch),
            "copy {node:?} gates layer {want:?}"
        );
    }
}

fn refused(t: TrainingConfig, m: &ModelConfig, yaml: &str, gpus: u64) -> String {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    match p.resolve(gpus, m, &t) {
        Err(WorkloadError::Invalid { field, message }) => {
            assert_eq!(field, "training.cpu_offload_layers", "{message}");
            message
        }
        other => panic!("expected a refusal naming training.cpu_offload_layers, got {other:?}"),
    }
}

#[test]
fn configurations_megatron_refuses_are_refused() {
    let (m, t, _) = setup(2);
    assert!(refused(t.clone(), &m, "{pp: 2}", 2).contains("pp: 1"));
    let all = TrainingConfig {
        cpu_offload_layers: 8,
        ..t.clone()
    };
    assert!(refused(all, &m, "{}", 1).contains("at most 7"));
    let rc = TrainingConfig {
        recompute: Recompute::Full,
        ..t
    };
    assert!(refused(rc, &m, "{}", 1).contains("recomputation"));
}
