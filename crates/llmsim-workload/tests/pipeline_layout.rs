//! Uneven pipeline stages: every layout conserves the layers, and each option gives Megatron's split.

use llmsim_workload::{ModelConfig, ParallelConfig, TrainingConfig, ops};

fn model(layers: u64) -> ModelConfig {
    ModelConfig {
        num_hidden_layers: layers,
        ..llmsim_workload::model::preset("llama3-8b").unwrap()
    }
}

fn resolve(p: ParallelConfig, layers: u64) -> Result<ParallelConfig, String> {
    let t = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let gpus = p.pp * p.tp.max(1) * 2;
    p.resolve(gpus, &model(layers), &t).map_err(|e| e.to_string())
}

/// Every layer appears exactly once over all (stage, chunk), in order of virtual stage.
fn assert_conserved(p: &ParallelConfig, layers: u64) {
    let m = model(layers);
    let mut seen = Vec::new();
    for c in 0..p.vpp.max(1) {
        for s in 0..p.pp {
            seen.extend(ops::layers_of_chunk(&m, p, s, c));
        }
    }
    assert_eq!(seen, (0..layers).collect::<Vec<_>>(), "{:?}", p.pipeline_layers);
    let total: usize = (0..p.pp).map(|s| ops::stage_layers(&m, p, s).len()).sum();
    assert_eq!(total as u64, layers);
}

#[test]
fn uneven_layouts_conserve_layers() {
    for (layers, pp, vpp) in [(126u64, 16u64, 8u64), (126, 8, 8), (30, 4, 1), (62, 8, 1), (94, 4, 3)] {
        for (e, l) in [(true, true), (true, false), (false, true)] {
            let p = ParallelConfig {
                pp,
                vpp,
                account_for_embedding_in_pipeline_split: e,
                account_for_loss_in_pipeline_split: l,
                ..ParallelConfig::default()
            };
            if let Ok(p) = resolve(p, layers) {
                assert_conserved(&p, layers);
                if e {
                    assert_eq!(p.pipeline_layers[0] + 1, p.pipeline_layers[1]);
                }
            }
        }
    }
    // Llama 3 405B (Dubey et al. 2024, 3.3.2): 126 layers + embedding + loss over PP16 x V8.
    let p = resolve(
        ParallelConfig {
            pp: 16,
            vpp: 8,
            account_for_embedding_in_pipeline_split: true,
            account_for_loss_in_pipeline_split: true,
            ..ParallelConfig::default()
        },
        126,
    )
    .unwrap();
    assert_eq!(p.pipeline_layers.first(), Some(&0));
    assert_eq!(p.pipeline_layers.last(), Some(&0));
    assert!(p.pipeline_layers[1..127].iter().all(|&n| n == 1));
}

#[test]
fn first_and_last_stage_layers_split_the_rest_evenly() {
    for (layers, pp, vpp, first, last) in [
        (62u64, 8u64, 1u64, 8u64, 12u64),
        (126, 8, 2, 14, 16),
        (80, 4, 1, 0, 14),
        (40, 2, 1, 18, 22),
    ] {
        let p = resolve(
            ParallelConfig {
                pp,
                vpp,
                first_stage_layers: first,
                last_stage_layers: last,
                ..ParallelConfig::default()
            },
            layers,
        )
        .unwrap_or_else(|e| panic!("{layers} {pp} {vpp} {first} {last}: {e}"));
        assert_conserved(&p, layers);
        let m = model(layers);
        if first > 0 {
            assert_eq!(ops::stage_layers(&m, &p, 0).len() as u64, first);
        }
        if last > 0 {
            assert_eq!(ops::stage_layers(&m, &p, pp - 1).len() as u64, last);
        }
    }
}

#[test]
fn bad_layouts_name_the_field() {
    let e = resolve(
        ParallelConfig {
            pp: 4,
            pipeline_layers: vec![8, 8, 8],
            ..ParallelConfig::default()
        },
        32,
    )
    .unwrap_err();
    assert!(e.contains("parallel.pipeline_layers"), "{e}");
    let e = resolve(
        ParallelConfig {
            pp: 4,
            first_stage_layers: 6,
            ..ParallelConfig::default()
        },
        32,
    )
    .unwrap_err();
    assert!(e.contains("parallel.first_stage_layers"), "{e}");
    let e = resolve(
        ParallelConfig {
            pp: 4,
            first_stage_layers: 4,
            account_for_loss_in_pipeline_split: true,
            ..ParallelConfig::default()
        },
        32,
    )
    .unwrap_err();
    assert!(e.contains("cannot be combined"), "{e}");
}

/// A plan resolved from uneven-stage options resolves again (to another pp, as the out-of-memory
/// suggestions do) from the options, not as if its derived layout had been given by the user.
#[test]
fn layouts_from_options_resolve_again() {
    let p = resolve(
        ParallelConfig {
            pp: 16,
            vpp: 8,
            account_for_embedding_in_pipeline_split: true,
            account_for_loss_in_pipeline_split: true,
            ..ParallelConfig::default()
        },
        126,
    )
    .unwrap();
    let again = resolve(p.clone(), 126).unwrap();
    assert_eq!(again.pipeline_layers, p.pipeline_layers);
    let half = resolve(ParallelConfig { pp: 8, dp: 0, ..p }, 126).unwrap();
    assert_eq!(half.pipeline_layers.len(), 64);
    assert_conserved(&half, 126);
    // A layout the user gave stays an error next to an option.
    let e = resolve(
        ParallelConfig {
            pp: 2,
            pipeline_layers: vec![15, 15],
            account_for_loss_in_pipeline_split: true,
            ..ParallelConfig::default()
        },
        30,
    )
    .unwrap_err();
    assert!(e.contains("not both"), "{e}");
}
