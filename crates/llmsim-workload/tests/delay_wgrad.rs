//! `parallel.delay_wgrad_compute` (Megatron-Core `--delay-wgrad-compute`, with the MoE
//! all-to-all overlap): an MoE layer's weight-gradient kernels between its backward combine and
//! its backward dispatch move after the dispatch, which runs beside them.

use llmsim_workload::model::preset;
use llmsim_workload::ops::{CommGroup, OpSpec, OpSpecKind, transformer_layer};
use llmsim_workload::{ModelConfig, ParallelConfig, Pass, TrainingConfig};

fn plan(m: &ModelConfig, t: &TrainingConfig, yaml: &str) -> ParallelConfig {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    p.resolve(16, m, t).unwrap()
}

fn training() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 64,
        ..TrainingConfig::default()
    }
}

fn is_ep(o: &OpSpec) -> bool {
    matches!(
        o.kind,
        OpSpecKind::Comm {
            group: CommGroup::Ep | CommGroup::EpInter | CommGroup::EpIntra,
            ..
        }
    )
}

fn key(o: &OpSpec) -> (String, String) {
    (o.name.to_string(), format!("{:?}", o.pass))
}

#[test]
fn expert_weight_gradients_run_beside_the_backward_dispatch() {
    let m = preset("mixtral-8x7b").unwrap();
    let t = training();
    for dispatcher in ["alltoall", "flex"] {
        let base = format!("{{ ep: 8, moe_a2a_overlap: true, moe_token_dispatcher: {dispatcher} }}");
        let plain = transformer_layer(&m, &t, &plan(&m, &t, &base), 0).backward;
        let on = format!("{{ ep: 8, moe_a2a_overlap: true, delay_wgrad_compute: true, moe_token_dispatcher: {dispatcher} }}");
        let delayed = transformer_layer(&m, &t, &plan(&m, &t, &on), 0).backward;
        // The same ops.
        let mut a: Vec<_> = plain.iter().map(key).collect();
        let mut b: Vec<_> = delayed.iter().map(key).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "{dispatcher}");
        // The expert GEMMs' weight gradients now follow the last all-to-all (the dispatch's
        // backward), which runs beside exactly the kernels moved after it.
        let last = delayed.iter().rposition(is_ep).unwrap();
        let first_wgrad = |ops: &[OpSpec]| {
            ops.iter()
                .position(|o| o.name.starts_with("expert_fc") && o.pass == Pass::BackwardWeight)
                .unwrap()
        };
        assert!(
            first_wgrad(&plain) < plain.iter().rposition(is_ep).unwrap(),
            "{dispatcher}: before, ahead of the dispatch"
        );
        assert!(first_wgrad(&delayed) > last, "{dispatcher}: after, behind it");
        let OpSpecKind::Comm { beside, .. } = delayed[last].kind else {
            unreachable!()
        };
        let moved = delayed[last + 1..].iter().take_while(|o| o.pass == Pass::BackwardWeight).count();
        assert!(
            beside > 0 && beside as usize == moved,
            "{dispatcher}: beside {beside}, moved {moved}"
        );
        // Nothing between the combine's backward and the dispatch's is a weight gradient now.
        let first = delayed.iter().position(is_ep).unwrap();
        assert!(delayed[first..last].iter().all(|o| o.pass != Pass::BackwardWeight || is_ep(o)));
    }
}

#[test]
fn only_the_overlap_with_the_flag_moves_anything() {
    let m = preset("mixtral-8x7b").unwrap();
    let t = training();
    let on = plan(&m, &t, "{ ep: 8, moe_a2a_overlap: true, delay_wgrad_compute: true }");
    let off = plan(&m, &t, "{ ep: 8 }");
    let names = |ops: Vec<OpSpec>| ops.iter().map(key).collect::<Vec<_>>();
    // The flag alone is refused (resolve), so compare the overlap without it to no overlap:
    // the backward order is the same.
    let overlap = plan(&m, &t, "{ ep: 8, moe_a2a_overlap: true }");
    assert_eq!(
        names(transformer_layer(&m, &t, &overlap, 0).backward),
        names(transformer_layer(&m, &t, &off, 0).backward)
    );
    assert_ne!(
        names(transformer_layer(&m, &t, &on, 0).backward),
        names(transformer_layer(&m, &t, &off, 0).backward)
    );
    let p: ParallelConfig = serde_yaml_ng::from_str("{ ep: 8, delay_wgrad_compute: true }").unwrap();
    let e = p.resolve(16, &m, &t).unwrap_err().to_string();
    assert!(e.contains("parallel.delay_wgrad_compute"), "{e}");
}
