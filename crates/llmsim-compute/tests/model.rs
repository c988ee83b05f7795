//! ComputeModel end to end: roofline against the table values, database precedence, overlap.

use llmsim_compute::{
    Bound, ComputeError, ComputeModel, DType, Efficiencies, OpClass, OpDatabase, OpQuery, OverlapModel, TimeSource, catalog, gpu,
};
use llmsim_core::SimTime;
use proptest::prelude::*;

fn op(name: &str, class: OpClass, dtype: DType, flops: f64, bytes: f64) -> OpQuery {
    OpQuery {
        name: name.into(),
        class,
        dtype,
        flops,
        bytes,
        shape: "s".into(),
        kernel: None,
    }
}

/// A bf16 GEMM m x n x k: 2mnk FLOPs, reads A and B, writes C.
fn gemm(m: f64, n: f64, k: f64) -> OpQuery {
    op("gemm", OpClass::Gemm, DType::Bf16, 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n))
}

#[test]
fn big_h100_bf16_gemm_is_compute_bound_at_peak_times_efficiency() {
    let h100 = gpu("H100").unwrap();
    let model = ComputeModel::new(h100);
    let q = gemm(8192.0, 8192.0, 8192.0);
    let t = model.time(&q);
    assert_eq!(t.source, TimeSource::Roofline);
    assert_eq!(t.bound, Bound::Compute);

    let e = Efficiencies::default_table().get(h100, OpClass::Gemm);
    assert_eq!(model.efficiency(OpClass::Gemm), e);
    assert_eq!(h100.peak_flops(DType::Bf16), 989.4e12);
    let expected_s = q.flops / (989.4e12 * e.compute_eff);
    let expected_ps = expected_s * 1e12 + e.launch.as_ps() as f64;
    assert!(
        (t.time.as_ps() as f64 - expected_ps).abs() <= 1.0,
        "{} vs {expected_ps}",
        t.time.as_ps()
    );
    // A sanity range for the shipped table: 1.1 TFLOP at 60-80% of 989 TFLOP/s.
    assert!(t.time > SimTime::from_us(1300) && t.time < SimTime::from_us(1900), "{}", t.time);
}

#[test]
fn layernorm_is_memory_bound_at_hbm_bandwidth_times_efficiency() {
    let h100 = gpu("H100").unwrap();
    let model = ComputeModel::new(h100);
    // LayerNorm over 4096 tokens x 8192 hidden in bf16: read x, write y; ~8 FLOPs per element.
    let elems = 4096.0 * 8192.0;
    let q = op("layernorm", OpClass::Norm, DType::Bf16, 8.0 * elems, 2.0 * 2.0 * elems);
    let t = model.time(&q);
    assert_eq!(t.bound, Bound::Memory);
    let e = model.efficiency(OpClass::Norm);
    let expected = SimTime::from_secs_f64(q.bytes / (h100.hbm_bandwidth_bytes_per_s * e.memory_eff)) + e.launch;
    assert_eq!(t.time, expected);
}

#[test]
fn h200_memory_bound_op_is_faster_by_the_hbm_ratio() {
    let (h100, h200) = (gpu("H100").unwrap(), gpu("H200").unwrap());
    let q = op("add", OpClass::Elementwise, DType::Bf16, 1e8, 3.0 * 2.0 * 1e8);
    let (m100, m200) = (ComputeModel::new(h100), ComputeModel::new(h200));
    let (t100, t200) = (m100.time(&q), m200.time(&q));
    assert_eq!((t100.bound, t200.bound), (Bound::Memory, Bound::Memory));
    assert_eq!(m100.efficiency(OpClass::Elementwise), m200.efficiency(OpClass::Elementwise));
    let launch = m100.efficiency(OpClass::Elementwise).launch;
    let ratio = (t100.time - launch).as_ps() as f64 / (t200.time - launch).as_ps() as f64;
    let want = h200.hbm_bandwidth_bytes_per_s / h100.hbm_bandwidth_bytes_per_s;
    assert!((ratio - want).abs() < 1e-6, "{ratio} vs {want}");
    // Same silicon: a compute-bound GEMM takes as long on both.
    let g = gemm(8192.0, 8192.0, 8192.0);
    assert_eq!(m100.time(&g), m200.time(&g));
}

#[test]
fn fp8_gemm_is_faster_on_h100_by_the_peak_and_efficiency_ratio_but_falls_back_to_bf16_on_a100() {
    let mut q = gemm(16384.0, 16384.0, 16384.0);
    let h100 = ComputeModel::new(gpu("H100").unwrap());
    // Peak ratio 2, times the FP8 over BF16 large-GEMM efficiency of the shipped table.
    let h100_want =
        2.0 * h100.efficiency_for(OpClass::Gemm, DType::Fp8).compute_eff / h100.efficiency_for(OpClass::Gemm, DType::Bf16).compute_eff;
    assert!(h100_want > 1.0 && h100_want < 2.0);
    for (name, want) in [("H100", h100_want), ("A100", 1.0)] {
        let m = ComputeModel::new(gpu(name).unwrap());
        q.dtype = DType::Bf16;
        let launch = m.efficiency(OpClass::Gemm).launch;
        let bf16 = (m.time(&q).time - launch).as_ps() as f64;
        q.dtype = DType::Fp8;
        let fp8 = (m.time(&q).time - launch).as_ps() as f64;
        assert!((bf16 / fp8 - want).abs() < 1e-3, "{name}: {}", bf16 / fp8);
    }
}

#[test]
fn database_entry_takes_precedence_over_roofline() {
    let h100 = gpu("H100").unwrap();
    let q = OpQuery {
        name: "attn_qkv".into(),
        shape: "b=1,s=4096,h=8192,tp=8".into(),
        kernel: None,
        ..gemm(4096.0, 3072.0, 8192.0)
    };
    let db =
        OpDatabase::from_csv_str("gpu,op,shape,time_us\n# measured\nH100-SXM5-80GB,attn_qkv,\"b=1,s=4096,h=8192,tp=8\",123.25\n").unwrap();
    let roof = ComputeModel::new(h100).time(&q);
    let model = ComputeModel::new(h100).with_database(db.clone());
    let t = model.time(&q);
    assert_eq!(t.source, TimeSource::Database);
    assert_eq!(t.time, SimTime::from_ps(123_250_000));
    assert_ne!(t.time, roof.time);
    assert_eq!(t.bound, roof.bound);
    // Another shape, or another GPU, falls back to the roofline.
    let other = OpQuery {
        shape: "b=1,s=4096,h=8192,tp=4".into(),
        kernel: None,
        ..q.clone()
    };
    assert_eq!(model.time(&other).source, TimeSource::Roofline);
    let h200 = ComputeModel::new(gpu("H200").unwrap()).with_database(db);
    assert_eq!(h200.time(&q).source, TimeSource::Roofline);
}

#[test]
fn user_efficiencies_per_gpu_row_overrides_star_row_in_the_model() {
    let eff = Efficiencies::from_csv_str("gpu,class,compute_eff,memory_eff,launch_us\n*,gemm,0.5,0.5,0\nH100,gemm,1.0,1.0,0\n").unwrap();
    let q = gemm(8192.0, 8192.0, 8192.0);
    let h100 = ComputeModel::new(gpu("H100").unwrap()).with_efficiencies(eff.clone());
    let h200 = ComputeModel::new(gpu("H200").unwrap()).with_efficiencies(eff);
    // H100 row: exactly the peak, no launch cost.
    assert_eq!(h100.time(&q).time, SimTime::from_secs_f64(q.flops / 989.4e12));
    // H200 (same peak) gets the * row: half the efficiency, twice the time.
    assert_eq!(h200.time(&q).time, SimTime::from_secs_f64(q.flops / (989.4e12 * 0.5)));
}

#[test]
fn unknown_gpu_lists_the_valid_names() {
    let err = gpu("P100-SXM2").unwrap_err();
    let ComputeError::UnknownGpu { ref name, ref valid } = err else {
        panic!("{err:?}")
    };
    assert_eq!(name, "P100-SXM2");
    for g in catalog() {
        assert!(valid.contains(g.name), "{valid}");
    }
    assert!(err.to_string().contains("H100"));
}

#[test]
fn malformed_csv_names_the_line() {
    let text = "# header next\ngpu,op,shape,time_us\nH100,a,s,1\n\n# gap\nH100,b,b=1,s=2,1\n";
    let err = OpDatabase::from_csv_str(text).unwrap_err();
    assert!(matches!(err, ComputeError::Csv { line: 6, .. }), "{err:?}");
    assert!(err.to_string().contains("line 6"), "{err}");
    let err = Efficiencies::from_csv_str("gpu,class,compute_eff,memory_eff\n*,gemm,0.7,0.8\n*,norm,0.7,0\n").unwrap_err();
    assert!(
        matches!(err, ComputeError::Csv { line: 3, ref column, .. } if column.as_deref() == Some("memory_eff")),
        "{err:?}"
    );
    assert!(err.to_string().contains("column `memory_eff`"), "{err}");
}

#[test]
fn overlap_stretches_only_the_overlapped_part() {
    let m = OverlapModel::new(1.2).unwrap();
    let t = SimTime::from_us(100);
    assert_eq!(m.slowed(t, 0.0), t);
    assert_eq!(m.slowed(t, 1.0), SimTime::from_us(120));
    assert_eq!(m.slowed(t, 0.5), SimTime::from_us(110));
    assert_eq!(m.slowed(t, 7.0), SimTime::from_us(120));
    assert_eq!(m.slowed(t, f64::NAN), t);
    assert_eq!(OverlapModel::default().slowed(t, 1.0), t);
    assert!(OverlapModel::new(0.9).is_err());
    assert!(OverlapModel::new(f64::NAN).is_err());
    // An invalid factor set through the public field counts as no slowdown, without a panic.
    assert_eq!(OverlapModel { compute_slowdown: 0.5 }.slowed(t, 1.0), t);

    let model = ComputeModel::new(gpu("H100").unwrap()).with_overlap(m);
    let q = gemm(4096.0, 4096.0, 4096.0);
    let alone = model.time(&q).time;
    assert_eq!(model.time_overlapped(&q, 1.0).time, m.slowed(alone, 1.0));
}

#[test]
fn overlap_model_deserializes_strictly_with_defaults() {
    let m: OverlapModel = serde_json::from_str("{}").unwrap();
    assert_eq!(m, OverlapModel::NONE);
    let m: OverlapModel = serde_json::from_str(r#"{"compute_slowdown": 1.15}"#).unwrap();
    assert_eq!(m.compute_slowdown, 1.15);
    assert!(serde_json::from_str::<OverlapModel>(r#"{"compute_slowdwn": 1.15}"#).is_err());
}

#[test]
fn hostile_numbers_do_not_panic() {
    let model = ComputeModel::new(gpu("A100").unwrap());
    let launch = model.efficiency(OpClass::Gemm).launch;
    assert_eq!(model.time(&op("x", OpClass::Gemm, DType::Fp8, f64::NAN, -5.0)).time, launch);
    assert_eq!(
        model.time(&op("x", OpClass::Gemm, DType::Fp8, f64::INFINITY, 0.0)).time,
        SimTime::MAX
    );
}

fn classes() -> impl Strategy<Value = OpClass> {
    prop::sample::select(OpClass::ALL.to_vec())
}

fn dtypes() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

proptest! {
    #[test]
    fn time_is_monotone_in_flops_and_bytes(
        g in 0..catalog().len(),
        class in classes(),
        dtype in dtypes(),
        flops in 0.0..1e16f64,
        bytes in 0.0..1e12f64,
        dflops in 0.0..1e15f64,
        dbytes in 0.0..1e11f64,
    ) {
        let model = ComputeModel::new(&catalog()[g]);
        let t = model.time(&op("x", class, dtype, flops, bytes)).time;
        let more_flops = model.time(&op("x", class, dtype, flops + dflops, bytes)).time;
        let more_bytes = model.time(&op("x", class, dtype, flops, bytes + dbytes)).time;
        prop_assert!(more_flops >= t);
        prop_assert!(more_bytes >= t);
        prop_assert!(t >= model.efficiency(class).launch);
    }
}
