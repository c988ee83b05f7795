//! The DLRM generator: FLOPs, all-to-all and all-reduce sizes against formulas computed here from
//! the config, the program's shape, and config validation.

use llmsim_compute::{DType, OpClass};
use llmsim_core::CollectiveOp;
use llmsim_workload::WorkloadError;
use llmsim_workload::dag::{DagNodeKind, Group, Phase, Stream, Workload};
use llmsim_workload::dlrm::{DlrmConfig, generate};
use llmsim_workload::{OpSpecKind, Pass};

/// (in, out) pairs of an MLP, computed independently of the generator.
fn pairs(input: u64, widths: &[u64]) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut prev = input;
    for &w in widths {
        v.push((prev, w));
        prev = w;
    }
    v
}

fn segment<'a>(w: &'a Workload, name: &str) -> &'a llmsim_workload::dag::Segment {
    w.segments
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no segment {name}"))
}

/// GEMM FLOPs of one segment, optionally restricted to one pass.
fn gemm_flops(w: &Workload, name: &str, pass: Option<Pass>) -> f64 {
    segment(w, name)
        .ops
        .iter()
        .filter(|o| pass.is_none_or(|p| o.pass == p))
        .filter_map(|o| match o.kind {
            OpSpecKind::Compute {
                class: OpClass::Gemm,
                flops,
                ..
            } => Some(flops),
            _ => None,
        })
        .sum()
}

fn colls(w: &Workload) -> Vec<(CollectiveOp, Group, u64, Stream, Phase)> {
    w.stages[0]
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            DagNodeKind::CommColl { op, group, bytes } => Some((op, group, bytes, n.stream, n.phase)),
            _ => None,
        })
        .collect()
}

#[test]
fn default_is_the_mlperf_dlrm() {
    let c = DlrmConfig::default();
    assert_eq!(c.dense_features, 13);
    assert_eq!(c.bottom_mlp, vec![512, 256, 128]);
    assert_eq!(c.top_mlp, vec![1024, 1024, 512, 256, 1]);
    assert_eq!(c.num_tables, 26);
    assert_eq!(c.embedding_dim, 128);
    // 27 features: 351 dot products + the 128-wide bottom output = 479 (dlrm_s_pytorch's num_int).
    assert_eq!(c.top_input(), 479);
    c.validate().unwrap();
    DlrmConfig::astrasim_ns3().validate().unwrap();
}

#[test]
fn mlp_forward_flops_are_2_b_sum_in_out() {
    for c in [DlrmConfig::default(), DlrmConfig::astrasim_ns3()] {
        let w = generate(&c, 8).unwrap();
        let b = c.batch_size_per_gpu as f64;
        let f = c.num_tables + 1;
        let top_in = c.embedding_dim + f * (f - 1) / 2;
        let bottom: f64 = pairs(c.dense_features, &c.bottom_mlp).iter().map(|(i, o)| (i * o) as f64).sum();
        let top: f64 = pairs(top_in, &c.top_mlp).iter().map(|(i, o)| (i * o) as f64).sum();
        assert_eq!(gemm_flops(&w, "bottom_mlp.fwd", None), 2.0 * b * bottom);
        assert_eq!(gemm_flops(&w, "top_mlp.fwd", None), 2.0 * b * top);
        // Backward: the weight gradients equal the forward; the input gradients too, except the
        // bottom MLP's first layer (the dense features need no gradient).
        assert_eq!(gemm_flops(&w, "top_mlp.bwd", Some(Pass::BackwardWeight)), 2.0 * b * top);
        assert_eq!(gemm_flops(&w, "top_mlp.bwd", Some(Pass::BackwardInput)), 2.0 * b * top);
        assert_eq!(gemm_flops(&w, "bottom_mlp.bwd", Some(Pass::BackwardWeight)), 2.0 * b * bottom);
        let first = (c.dense_features * c.bottom_mlp[0]) as f64;
        assert_eq!(
            gemm_flops(&w, "bottom_mlp.bwd", Some(Pass::BackwardInput)),
            2.0 * b * (bottom - first)
        );
        // Interaction: one batched GEMM over the F x F products.
        let d = c.embedding_dim as f64;
        let ff = (f * f) as f64;
        assert_eq!(gemm_flops(&w, "interaction.fwd", None), 2.0 * b * ff * d);
        assert_eq!(gemm_flops(&w, "interaction.bwd", None), 4.0 * b * ff * d);
    }
}

#[test]
fn embedding_lookup_covers_the_global_batch_of_the_local_tables() {
    let c = DlrmConfig::default();
    let gpus = 8; // 26 tables on 8 GPUs: the most loaded holds 4.
    let w = generate(&c, gpus).unwrap();
    let seg = segment(&w, "embedding.fwd");
    assert_eq!(seg.ops.len(), 1);
    let OpSpecKind::Compute { class, flops, bytes } = seg.ops[0].kind else {
        panic!("lookup is not a compute op")
    };
    assert_eq!(class, OpClass::Embedding);
    let (global, l, p, d, e) = (c.batch_size_per_gpu * gpus, 4, c.lookups_per_table, c.embedding_dim, 4);
    assert_eq!(flops, (global * l * p * d) as f64);
    assert_eq!(bytes, (global * l * (p * d * e + p * 8 + d * e)) as f64);
    let upd = &segment(&w, "embedding.bwd").ops[0];
    assert!(matches!(
        upd.kind,
        OpSpecKind::Compute {
            class: OpClass::Embedding,
            ..
        }
    ));
}

#[test]
fn all_to_all_bytes_follow_the_send_buffer_formula() {
    // (config, gpus, local tables)
    let cases = [
        (DlrmConfig::default(), 8, 4),  // ceil(26 / 8)
        (DlrmConfig::default(), 26, 1), // one table each
        (DlrmConfig::default(), 64, 1), // more GPUs than tables
        (DlrmConfig::astrasim_ns3(), 128, 1),
        (DlrmConfig::astrasim_ns3(), 16, 4),
    ];
    for (c, gpus, l) in cases {
        let w = generate(&c, gpus).unwrap();
        let e = if c.dtype == DType::Fp32 { 4 } else { 2 };
        let expect = l * c.batch_size_per_gpu * gpus * c.embedding_dim * e;
        assert_eq!(c.all_to_all_bytes(gpus), expect);
        let a2a: Vec<_> = colls(&w).into_iter().filter(|x| x.0 == CollectiveOp::AllToAll).collect();
        assert_eq!(a2a.len(), 2, "one forward and one backward all-to-all");
        assert_eq!(a2a[0].4, Phase::Forward);
        assert_eq!(a2a[1].4, Phase::Backward);
        for (_, group, bytes, _, _) in a2a {
            assert_eq!(group, Group::Dp);
            assert_eq!(bytes, expect);
        }
    }
}

#[test]
fn one_mlp_all_reduce_per_bucket_of_params_times_grad_bytes() {
    for (dtype, g) in [(DType::Fp32, 4), (DType::Bf16, 4), (DType::Fp16, 2)] {
        let c = DlrmConfig {
            dtype,
            ..DlrmConfig::default()
        };
        let w = generate(&c, 16).unwrap();
        let f = c.num_tables + 1;
        let top_in = c.embedding_dim + f * (f - 1) / 2;
        let params = |v: Vec<(u64, u64)>| -> u64 { v.iter().map(|(i, o)| i * o + o).sum() };
        let bottom = params(pairs(c.dense_features, &c.bottom_mlp));
        let top = params(pairs(top_in, &c.top_mlp));
        let ar: Vec<_> = colls(&w).into_iter().filter(|x| x.0 == CollectiveOp::AllReduce).collect();
        assert_eq!(ar.len(), 2, "one bucket per MLP");
        let mut sizes: Vec<u64> = ar.iter().map(|x| x.2).collect();
        sizes.sort_unstable();
        let mut expect = vec![top * g, bottom * g];
        expect.sort_unstable();
        assert_eq!(sizes, expect);
        assert_eq!(sizes.iter().sum::<u64>(), (top + bottom) * g);
        for x in &ar {
            assert_eq!(x.1, Group::Dp);
            assert_eq!(x.3, Stream::Dp);
            assert_eq!(x.4, Phase::GradSync);
        }
    }
}

#[test]
fn dependencies_order_the_iteration() {
    let c = DlrmConfig::default();
    let w = generate(&c, 8).unwrap();
    let prog = &w.stages[0];
    let name = |i: u32| match prog.nodes[i as usize].kind {
        DagNodeKind::Comp { segment } => w.segments[segment as usize].name.clone(),
        DagNodeKind::CommColl { op, .. } => format!("{op:?}"),
        _ => "p2p".into(),
    };
    let idx = |n: &str| (0..prog.len() as u32).find(|&i| name(i) == n).unwrap();
    // The interaction waits for the forward all-to-all; the embedding update for the backward one.
    let a2a: Vec<u32> = (0..prog.len() as u32).filter(|&i| name(i) == "AllToAll").collect();
    assert_eq!(prog.deps(idx("interaction.fwd")), &[a2a[0]]);
    assert_eq!(prog.deps(idx("embedding.bwd")), &[a2a[1]]);
    assert_eq!(prog.deps(a2a[0]), &[idx("embedding.fwd")]);
    assert_eq!(prog.deps(a2a[1]), &[idx("interaction.bwd")]);
    // The optimizer waits for both all-reduces, each started after its MLP's backward.
    let ar: Vec<u32> = (0..prog.len() as u32).filter(|&i| name(i) == "AllReduce").collect();
    let opt = idx("optimizer");
    for a in &ar {
        assert!(prog.deps(opt).contains(a));
    }
    let mlp_bwd: Vec<u32> = ar.iter().map(|&a| prog.deps(a)[0]).collect();
    let mut names: Vec<String> = mlp_bwd.iter().map(|&i| name(i)).collect();
    names.sort();
    assert_eq!(names, ["bottom_mlp.bwd", "top_mlp.bwd"]);
    assert_eq!(w.microbatches, 1);
    assert_eq!(w.vpp, 1);
    assert_eq!(w.stages.len(), 1);
    // Every compute node runs on the compute stream, every collective on the dp stream.
    for n in &prog.nodes {
        match n.kind {
            DagNodeKind::Comp { .. } => assert_eq!(n.stream, Stream::Compute),
            _ => assert_eq!(n.stream, Stream::Dp),
        }
    }
}

#[test]
fn one_gpu_has_no_communication() {
    let w = generate(&DlrmConfig::default(), 1).unwrap();
    assert!(colls(&w).is_empty());
    // The compute is all there: the lookup covers the (one-GPU) global batch of all 26 tables.
    let OpSpecKind::Compute { flops, .. } = segment(&w, "embedding.fwd").ops[0].kind else {
        panic!("lookup is not a compute op")
    };
    assert_eq!(flops, (2048 * 26 * 128) as f64);
}

fn invalid_field(c: &DlrmConfig, gpus: u64) -> String {
    match generate(c, gpus) {
        Err(WorkloadError::Invalid { field, .. }) => field,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn invalid_configs_name_the_field() {
    let d = DlrmConfig::default();
    let cases: Vec<(DlrmConfig, &str)> = vec![
        (
            DlrmConfig {
                bottom_mlp: vec![],
                ..d.clone()
            },
            "dlrm.bottom_mlp",
        ),
        (
            DlrmConfig {
                top_mlp: vec![],
                ..d.clone()
            },
            "dlrm.top_mlp",
        ),
        (
            DlrmConfig {
                top_mlp: vec![1024, 0, 1],
                ..d.clone()
            },
            "dlrm.top_mlp",
        ),
        (
            DlrmConfig {
                bottom_mlp: vec![512, 256, 64],
                ..d.clone()
            },
            "dlrm.bottom_mlp",
        ),
        (
            DlrmConfig {
                batch_size_per_gpu: 0,
                ..d.clone()
            },
            "dlrm.batch_size_per_gpu",
        ),
        (
            DlrmConfig {
                num_tables: 0,
                ..d.clone()
            },
            "dlrm.num_tables",
        ),
        (
            DlrmConfig {
                embedding_dim: 0,
                ..d.clone()
            },
            "dlrm.embedding_dim",
        ),
        (
            DlrmConfig {
                lookups_per_table: 0,
                ..d.clone()
            },
            "dlrm.lookups_per_table",
        ),
        (
            DlrmConfig {
                dense_features: 0,
                ..d.clone()
            },
            "dlrm.dense_features",
        ),
        (
            DlrmConfig {
                rows_per_table: 0,
                ..d.clone()
            },
            "dlrm.rows_per_table",
        ),
    ];
    for (c, field) in cases {
        assert_eq!(invalid_field(&c, 8), field);
    }
    assert_eq!(invalid_field(&d, 0), "gpus");
}

#[test]
fn config_deserializes_with_defaults_and_rejects_unknown_fields() {
    let c: DlrmConfig = serde_yaml_ng::from_str("num_tables: 8\ndtype: bf16\n").unwrap();
    assert_eq!(c.num_tables, 8);
    assert_eq!(c.dtype, DType::Bf16);
    assert_eq!(c.bottom_mlp, DlrmConfig::default().bottom_mlp);
    assert!(serde_yaml_ng::from_str::<DlrmConfig>("tables: 8\n").is_err());
}

/// Each all-reduce of a bucketed iteration with the compute segment it waits on.
fn bucketed_reduces(w: &Workload) -> Vec<(u64, String)> {
    let prog = &w.stages[0];
    prog.nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match n.kind {
            DagNodeKind::CommColl {
                op: CollectiveOp::AllReduce,
                bytes,
                ..
            } => {
                assert_eq!(n.stream, Stream::Dp);
                let dep = prog.deps(i as u32);
                assert_eq!(dep.len(), 1);
                let DagNodeKind::Comp { segment } = prog.nodes[dep[0] as usize].kind else {
                    panic!("an all-reduce waits on a compute node")
                };
                Some((bytes, w.segments[segment as usize].name.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Layer indices whose weight gradient a segment computes ("top.3,b=..." -> 3 for prefix "top").
fn wgrad_layers(w: &Workload, seg: &str, prefix: &str) -> Vec<usize> {
    segment(w, seg)
        .ops
        .iter()
        .filter(|o| o.name == "mlp_gemm_wgrad")
        .map(|o| {
            let shape = o.shape.strip_prefix(&format!("{prefix}.")).expect("layer shape");
            shape.split(',').next().unwrap().parse().unwrap()
        })
        .collect()
}

#[test]
fn a_bucket_of_one_parameter_reduces_every_layer_after_its_weight_gradient() {
    let mut c = DlrmConfig::astrasim_ns3();
    c.grad_bucket_size = Some(1);
    let w = generate(&c, 128).unwrap();
    let g = 2; // fp16 gradients
    let top = pairs(c.top_input(), &c.top_mlp);
    let bottom = pairs(c.dense_features, &c.bottom_mlp);
    // One all-reduce per layer, in backward order: the top MLP last layer first, then the bottom.
    let mut want = Vec::new();
    for (l, (i, o)) in top.iter().enumerate().rev() {
        want.push(((i * o + o) * g, "top", l));
    }
    for (l, (i, o)) in bottom.iter().enumerate().rev() {
        want.push(((i * o + o) * g, "bottom", l));
    }
    let got = bucketed_reduces(&w);
    assert_eq!(got.len(), top.len() + bottom.len());
    for ((bytes, seg), (wb, prefix, l)) in got.iter().zip(&want) {
        assert_eq!(bytes, wb, "{seg}");
        // The segment it waits on ends with that layer's weight gradient and holds no other.
        assert_eq!(wgrad_layers(&w, seg, prefix), [*l], "{seg}");
    }
    // The same bytes and backward FLOPs as one bucket per MLP: splitting loses nothing.
    let one = generate(&DlrmConfig::astrasim_ns3(), 128).unwrap();
    let total = |w: &Workload| colls(w).iter().filter(|c| c.0 == CollectiveOp::AllReduce).map(|c| c.2).sum::<u64>();
    assert_eq!(total(&w), total(&one));
    let bwd = |w: &Workload, p: &str| -> f64 {
        w.segments
            .iter()
            .filter(|s| s.name.starts_with(p))
            .map(|s| gemm_flops(w, &s.name, None))
            .sum()
    };
    for p in ["top_mlp.bwd", "bottom_mlp.bwd"] {
        assert_eq!(bwd(&w, p), bwd(&one, p), "{p}");
    }
    // The backward all-to-all does not queue behind the top MLP's all-reduces.
    let a2a: Vec<Stream> = colls(&w).iter().filter(|c| c.0 == CollectiveOp::AllToAll).map(|c| c.3).collect();
    assert_eq!(a2a, [Stream::Dp, Stream::Free]);
}

#[test]
fn buckets_close_at_the_first_layer_that_fills_them() {
    let c0 = DlrmConfig::astrasim_ns3();
    let top = pairs(c0.top_input(), &c0.top_mlp);
    let bottom = pairs(c0.dense_features, &c0.bottom_mlp);
    let params = |ls: &[(u64, u64)], r: std::ops::Range<usize>| -> u64 { ls[r].iter().map(|(i, o)| i * o + o).sum() };
    for cap in [1, 2_000_000, 4_196_352, 8_392_704, 25_000_000, u64::MAX] {
        let mut c = c0.clone();
        c.grad_bucket_size = Some(cap);
        let w = generate(&c, 16).unwrap();
        let got: Vec<u64> = bucketed_reduces(&w).iter().map(|r| r.0 / 2).collect();
        // Rebuild the expected buckets from the rule: in backward order, a bucket is the
        // shortest run of layers holding at least `cap` parameters, or what is left.
        let mut want = Vec::new();
        for ls in [&top, &bottom] {
            let mut hi = ls.len();
            while hi > 0 {
                let lo = (0..hi).rev().find(|&lo| params(ls, lo..hi) >= cap).unwrap_or(0);
                want.push(params(ls, lo..hi));
                hi = lo;
            }
        }
        assert_eq!(got, want, "cap {cap}");
    }
    // A cap over the whole MLP is one bucket per MLP, the default's sizes.
    let mut c = c0.clone();
    c.grad_bucket_size = Some(u64::MAX);
    let got: Vec<u64> = bucketed_reduces(&generate(&c, 16).unwrap()).iter().map(|r| r.0).collect();
    assert_eq!(got, [c0.top_params() * 2, c0.bottom_params() * 2]);
    // Zero is refused, naming the field.
    c.grad_bucket_size = Some(0);
    assert!(invalid_field(&c, 16).contains("dlrm.grad_bucket_size"));
}

/// The segment name of node `i` of the program, or the collective's kind.
fn node_name(w: &Workload, i: u32) -> String {
    match w.stages[0].nodes[i as usize].kind {
        DagNodeKind::Comp { segment } => w.segments[segment as usize].name.clone(),
        DagNodeKind::CommColl { op, .. } => format!("{op:?}"),
        _ => "p2p".into(),
    }
}

/// (FLOPs, HBM bytes) of every compute op, and all-reduce and all-to-all bytes, of a workload.
fn totals(w: &Workload) -> (f64, f64, u64, u64) {
    let (mut flops, mut hbm) = (0.0, 0.0);
    for n in &w.stages[0].nodes {
        if let DagNodeKind::Comp { segment } = n.kind {
            for o in &w.segments[segment as usize].ops {
                if let OpSpecKind::Compute { flops: f, bytes: b, .. } = o.kind {
                    flops += f;
                    hbm += b;
                }
            }
        }
    }
    let sum = |op| colls(w).iter().filter(|c| c.0 == op).map(|c| c.2).sum::<u64>();
    (flops, hbm, sum(CollectiveOp::AllReduce), sum(CollectiveOp::AllToAll))
}

#[test]
fn two_iterations_wait_per_layer_on_the_previous_all_reduce() {
    let mut c = DlrmConfig::astrasim_ns3();
    c.grad_bucket_size = Some(1);
    let one = generate(&c, 128).unwrap();
    c.iterations = 2;
    let w = generate(&c, 128).unwrap();
    let prog = &w.stages[0];
    assert_eq!(prog.iterations(), 2);
    let second = prog.iteration_starts[1];
    assert_eq!(prog.iteration_starts[0], 0);
    // Iteration 1 is the one-iteration program without its optimizer step.
    let p1 = &one.stages[0];
    assert_eq!(node_name(&one, p1.len() as u32 - 1), "optimizer");
    assert_eq!(second as usize, p1.len() - 1);
    for i in 0..second {
        assert_eq!(prog.nodes[i as usize], p1.nodes[i as usize], "node {i}");
        assert_eq!(prog.deps(i), p1.deps(i), "node {i}");
        assert_eq!(node_name(&w, i), node_name(&one, i), "node {i}");
    }
    // Every MLP layer's forward in iteration 2 runs right after an SGD update of that layer,
    // which waits for exactly iteration 1's all-reduce of that layer's gradients.
    let g = 2; // fp16 gradients
    let mut seen = 0;
    for (prefix, mlp, layers) in [
        ("top", "top_mlp", pairs(c.top_input(), &c.top_mlp)),
        ("bottom", "bottom_mlp", pairs(c.dense_features, &c.bottom_mlp)),
    ] {
        for (l, (i, o)) in layers.iter().enumerate() {
            let shape = format!("{prefix}.{l},");
            let fwd = (second..prog.len() as u32)
                .find(|&n| {
                    let name = node_name(&w, n);
                    name.starts_with(&format!("{mlp}.fwd.")) && {
                        let DagNodeKind::Comp { segment } = prog.nodes[n as usize].kind else {
                            unreachable!()
                        };
                        w.segments[segment as usize]
                            .ops
                            .iter()
                            .any(|op| op.name == "mlp_gemm" && op.shape.starts_with(&shape))
                    }
                })
                .unwrap_or_else(|| panic!("no iteration-2 forward of {prefix} layer {l}"));
            assert!(prog.deps(fwd).is_empty());
            let upd = fwd - 1;
            let k = node_name(&w, fwd).rsplit('.').next().unwrap().to_string();
            assert_eq!(node_name(&w, upd), format!("{mlp}.update.{k}"));
            assert_eq!(prog.nodes[upd as usize].stream, Stream::Compute);
            assert_eq!(prog.nodes[upd as usize].phase, Phase::Optimizer);
            let DagNodeKind::Comp { segment } = prog.nodes[upd as usize].kind else {
                unreachable!()
            };
            let OpSpecKind::Compute { flops, .. } = w.segments[segment as usize].ops[0].kind else {
                unreachable!()
            };
            assert_eq!(flops, (2 * (i * o + o)) as f64, "{prefix} layer {l}: SGD on its weights and biases");
            let deps = prog.deps(upd);
            assert_eq!(deps.len(), 1, "{prefix} layer {l}");
            let ar = deps[0];
            assert!(ar < second, "the update waits on iteration 1");
            let DagNodeKind::CommColl {
                op: CollectiveOp::AllReduce,
                bytes,
                ..
            } = prog.nodes[ar as usize].kind
            else {
                panic!("{prefix} layer {l}: the update waits on an all-reduce")
            };
            assert_eq!(bytes, (i * o + o) * g);
            // That all-reduce is the one after layer l's weight gradient.
            let bwd = node_name(&w, prog.deps(ar)[0]);
            assert_eq!(wgrad_layers(&w, &bwd, prefix), [l], "{prefix} layer {l}");
            seen += 1;
        }
    }
    assert_eq!(seen, c.top_mlp.len() + c.bottom_mlp.len());
    // No optimizer step in iteration 1; iteration 2's waits for all of its own all-reduces.
    let opts: Vec<u32> = (0..prog.len() as u32).filter(|&i| node_name(&w, i) == "optimizer").collect();
    assert_eq!(opts, [prog.len() as u32 - 1]);
    let ars2: Vec<u32> = (second..prog.len() as u32).filter(|&i| node_name(&w, i) == "AllReduce").collect();
    assert_eq!(ars2.len(), seen);
    for a in ars2 {
        assert!(prog.deps(opts[0]).contains(&a));
    }
}

#[test]
fn one_bucket_per_mlp_waits_per_mlp_in_the_next_iteration() {
    let c = DlrmConfig {
        iterations: 2,
        ..DlrmConfig::astrasim_ns3()
    };
    let w = generate(&c, 16).unwrap();
    let prog = &w.stages[0];
    let second = prog.iteration_starts[1];
    for mlp in ["bottom_mlp", "top_mlp"] {
        let upd = (second..prog.len() as u32)
            .find(|&i| node_name(&w, i) == format!("{mlp}.update.0"))
            .unwrap();
        assert_eq!(node_name(&w, upd + 1), format!("{mlp}.fwd.0"));
        let ar = prog.deps(upd)[0];
        assert_eq!(node_name(&w, prog.deps(ar)[0]), format!("{mlp}.bwd"));
    }
}

#[test]
fn n_iterations_compute_and_move_n_times_one() {
    for cap in [None, Some(1), Some(5_000_000)] {
        for gpus in [1, 128] {
            let mut c = DlrmConfig::astrasim_ns3();
            c.grad_bucket_size = cap;
            let (f1, b1, ar1, a2a1) = totals(&generate(&c, gpus).unwrap());
            c.iterations = 3;
            let (f3, b3, ar3, a2a3) = totals(&generate(&c, gpus).unwrap());
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
            assert!(close(f3, 3.0 * f1), "{cap:?} {gpus}: FLOPs {f3} vs 3 x {f1}");
            assert!(close(b3, 3.0 * b1), "{cap:?} {gpus}: bytes {b3} vs 3 x {b1}");
            assert_eq!(ar3, 3 * ar1, "{cap:?} {gpus}");
            assert_eq!(a2a3, 3 * a2a1, "{cap:?} {gpus}");
            assert_eq!(gpus == 1, ar1 == 0);
        }
    }
}

#[test]
fn scheduling_policy_orders_the_dp_stream_and_iterations_parse() {
    use llmsim_workload::dag::SchedulingPolicy;
    let c: DlrmConfig = serde_yaml_ng::from_str("iterations: 2\nscheduling_policy: lifo\ngrad_bucket_size: 1\n").unwrap();
    assert_eq!((c.iterations, c.scheduling_policy), (2, SchedulingPolicy::Lifo));
    let w = generate(&c, 8).unwrap();
    let order = w.stages[0].stream_order;
    assert_eq!(order[Stream::Dp as usize], SchedulingPolicy::Lifo);
    assert_eq!(order[Stream::Compute as usize], SchedulingPolicy::Fifo);
    // The default keeps every stream in program order and one iteration.
    let d = generate(&DlrmConfig::default(), 8).unwrap();
    assert_eq!(d.stages[0].stream_order, [SchedulingPolicy::Fifo; Stream::COUNT]);
    assert!(d.stages[0].iteration_starts.is_empty());
    assert!(serde_yaml_ng::from_str::<DlrmConfig>("scheduling_policy: random\n").is_err());
    let zero = DlrmConfig {
        iterations: 0,
        ..DlrmConfig::default()
    };
    assert_eq!(invalid_field(&zero, 8), "dlrm.iterations");
}
