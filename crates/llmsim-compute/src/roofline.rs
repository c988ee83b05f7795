//! Roofline time of an op, with per-(GPU, op class) efficiencies kept as data
//! (`data/efficiency.csv`, embedded; see its comments for where each number comes from).
//!
//! `time = max(flops / (peak(dtype) * compute_eff), bytes / (hbm_bw * memory_eff)) + launch`.
//! `peak` is the tensor-core peak of the op's dtype for classes that use tensor cores
//! ([`OpClass::uses_tensor_cores`]) and the FP32 CUDA-core peak for the others.
//! A board power limit below the TDP lowers the compute roof of every class by
//! [`GpuSpec::compute_rate_fraction`] (the SM clock drops); the memory roof is unchanged.

use std::sync::OnceLock;

use llmsim_core::SimTime;
use serde::{Deserialize, Serialize};

use crate::attention::{self, AttentionKernel};
use crate::csvtext::CsvText;
use crate::error::ComputeError;
use crate::gemm;
use crate::gpu::{self, GpuSpec};
use crate::op::{DType, KernelShape, OpClass, OpQuery};

/// The shipped efficiency table.
pub const DEFAULT_EFFICIENCY_CSV: &str = include_str!("../data/efficiency.csv");

/// Fixed cost per op when an efficiency CSV has no `launch_us` column or leaves it empty, in
/// microseconds. The shipped table states 2 us explicitly on every row (see its comments).
pub const DEFAULT_LAUNCH_US: f64 = 2.0;

const N_CLASSES: usize = OpClass::ALL.len();

/// Which roof an op hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// FLOPs over achievable FLOP/s dominate (ties go here).
    Compute,
    /// Bytes over achievable HBM bandwidth dominate.
    Memory,
}

/// The efficiencies of one op class on one GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassEfficiency {
    /// Fraction of the peak FLOP/s, in (0, 1].
    pub compute_eff: f64,
    /// Fraction of the peak HBM bandwidth, in (0, 1].
    pub memory_eff: f64,
    /// Fixed cost added to every op of the class.
    pub launch: SimTime,
}

/// Last resort for a class that neither a table nor the shipped defaults cover. The shipped
/// table covers every class (a test checks it), so this is never reached in practice.
const FALLBACK: ClassEfficiency = ClassEfficiency {
    compute_eff: 0.5,
    memory_eff: 0.5,
    launch: SimTime::from_us(2),
};

type ClassRow = [Option<ClassEfficiency>; N_CLASSES];

/// A table of efficiencies: rows for every GPU (`*`) and per-GPU rows that override them, each
/// for every dtype (`*`) or for one.
#[derive(Clone, Debug, PartialEq)]
pub struct Efficiencies {
    /// (GPU or `*`, dtype or `*`) -> the classes that row set names.
    rows: Vec<(Option<&'static str>, Option<DType>, ClassRow)>,
    /// Classes missing from this table come from the shipped table.
    layered_on_default: bool,
}

impl Default for Efficiencies {
    fn default() -> Self {
        Efficiencies::default_table()
    }
}

impl Efficiencies {
    /// The shipped table ([`DEFAULT_EFFICIENCY_CSV`]).
    pub fn default_table() -> Efficiencies {
        static TABLE: OnceLock<Efficiencies> = OnceLock::new();
        TABLE
            .get_or_init(|| {
                Efficiencies::parse(DEFAULT_EFFICIENCY_CSV, "built-in efficiency CSV", false)
                    .expect("data/efficiency.csv is valid: the tests parse it")
            })
            .clone()
    }

    /// A user table, columns `gpu,class,compute_eff,memory_eff[,launch_us][,dtype]`, `#` comment
    /// lines. Precedence for a (GPU, class, dtype): this table's (GPU, dtype) row, its (GPU, `*`)
    /// row, its (`*`, dtype) row, its (`*`, `*`) row, then the shipped table in the same order. So
    /// a partial table overrides only what it names. A dtype with an
    /// [`DType::efficiency_fallback`] (`mxfp8`: `fp8`; `fp8_block`: `mxfp8`, then `fp8`) tries
    /// those dtypes' rows right after its own at each step: (GPU, `mxfp8`), (GPU, `fp8`), (GPU,
    /// `*`), then the same for `*`.
    ///
    /// # Errors
    /// [`ComputeError::Csv`] naming the line and column: unknown column, unknown GPU, class or
    /// dtype, an efficiency outside (0, 1], a negative `launch_us`, a duplicate row.
    pub fn from_csv_str(text: &str) -> Result<Efficiencies, ComputeError> {
        Efficiencies::parse(text, "efficiency CSV", true)
    }

    fn parse(text: &str, what: &str, layered_on_default: bool) -> Result<Efficiencies, ComputeError> {
        let csv = CsvText::parse(what, text, &["gpu", "class", "compute_eff", "memory_eff"], &["launch_us", "dtype"])?;
        let mut table = Efficiencies {
            rows: Vec::new(),
            layered_on_default,
        };
        type Key = (Option<&'static str>, Option<DType>, OpClass);
        let mut first_line: Vec<(Key, u64)> = Vec::new();
        for row in csv.records() {
            let g = row.field("gpu");
            let gpu_name = if g == "*" {
                None
            } else {
                let spec = gpu::find(g).ok_or_else(|| row.error("gpu", format!("unknown GPU `{g}`; valid: * or {}", catalog_names())))?;
                Some(spec.name)
            };
            let c = row.field("class");
            let class =
                OpClass::from_name(c).ok_or_else(|| row.error("class", format!("unknown op class `{c}`; valid: {}", class_names())))?;
            let dtype = match row.get("dtype") {
                None | Some("") | Some("*") => None,
                Some(d) => Some(
                    DType::ALL
                        .into_iter()
                        .find(|x| x.to_string().eq_ignore_ascii_case(d))
                        .ok_or_else(|| row.error("dtype", format!("unknown dtype `{d}`; valid: *, {}", dtype_names())))?,
                ),
            };
            let compute_eff = row.number("compute_eff", 0.0, true, 1.0)?;
            let memory_eff = row.number("memory_eff", 0.0, true, 1.0)?;
            let launch_us = match row.get("launch_us") {
                None | Some("") => DEFAULT_LAUNCH_US,
                Some(_) => row.number("launch_us", 0.0, false, f64::INFINITY)?,
            };
            let key = (gpu_name, dtype, class);
            if let Some((_, l)) = first_line.iter().find(|(k, _)| *k == key) {
                return Err(row.error("class", format!("duplicate row for ({g}, {c}); first at line {l}")));
            }
            first_line.push((key, row.line));
            let e = ClassEfficiency {
                compute_eff,
                memory_eff,
                launch: SimTime::from_us_f64(launch_us),
            };
            let i = match table.rows.iter().position(|(n, d, _)| *n == gpu_name && *d == dtype) {
                Some(i) => i,
                None => {
                    table.rows.push((gpu_name, dtype, [None; N_CLASSES]));
                    table.rows.len() - 1
                }
            };
            table.rows[i].2[class.index()] = Some(e);
        }
        Ok(table)
    }

    fn row(&self, gpu: Option<&str>, dtype: Option<DType>, class: OpClass) -> Option<ClassEfficiency> {
        self.rows
            .iter()
            .find(|(n, d, _)| {
                *d == dtype
                    && match (n, gpu) {
                        (None, None) => true,
                        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                        _ => false,
                    }
            })
            .and_then(|(_, _, r)| r[class.index()])
    }

    /// This table's own entry for (GPU, class, dtype), without the shipped fallback. The GPU's
    /// own rows first, then its [`GpuSpec::base`]'s (same silicon, or the catalog GPU a custom
    /// one starts from), then the `*` rows; for each, the dtype's row, its
    /// [`DType::efficiency_fallback`]'s (and its fallback's), then the row without a dtype.
    fn own(&self, gpu: &GpuSpec, class: OpClass, dtype: Option<DType>) -> Option<ClassEfficiency> {
        let fallback = dtype.and_then(DType::efficiency_fallback);
        let dtypes = [dtype, fallback, fallback.and_then(DType::efficiency_fallback)];
        let typed = |g: Option<&str>| dtypes.into_iter().flatten().find_map(|d| self.row(g, Some(d), class));
        let named = |g: &str| typed(Some(g)).or_else(|| self.row(Some(g), None, class));
        gpu.lineage()
            .find_map(named)
            .or_else(|| typed(None))
            .or_else(|| self.row(None, None, class))
    }

    /// The efficiencies of `class` on `gpu` for any dtype (the `*` dtype rows), after the
    /// precedence described at [`Efficiencies::from_csv_str`].
    pub fn get(&self, gpu: &GpuSpec, class: OpClass) -> ClassEfficiency {
        self.get_for(gpu, class, None)
    }

    /// The efficiencies of `class` on `gpu` in `dtype` (`None`: the `*` rows).
    pub fn get_for(&self, gpu: &GpuSpec, class: OpClass, dtype: Option<DType>) -> ClassEfficiency {
        match self.own(gpu, class, dtype) {
            Some(e) => e,
            None if self.layered_on_default => Efficiencies::default_table().own(gpu, class, dtype).unwrap_or(FALLBACK),
            None => FALLBACK,
        }
    }

    /// All classes for one GPU, indexed by [`OpClass::index`], for the `*` dtype rows.
    pub fn resolve(&self, gpu: &GpuSpec) -> [ClassEfficiency; N_CLASSES] {
        OpClass::ALL.map(|c| self.get(gpu, c))
    }

    /// All (dtype, class) pairs for one GPU, indexed by `DType::ALL` position then class: what a
    /// model caches.
    pub fn resolve_all(&self, gpu: &GpuSpec) -> [[ClassEfficiency; N_CLASSES]; N_DTYPES] {
        DType::ALL.map(|d| OpClass::ALL.map(|c| self.get_for(gpu, c, Some(d))))
    }
}

/// Number of dtypes, for per-dtype arrays.
pub const N_DTYPES: usize = DType::ALL.len();

/// Roofline time of `q` on `gpu` with efficiencies `e`: rounded to the nearest picosecond, plus
/// `e.launch`. Negative or NaN FLOPs/bytes count as zero; infinite ones saturate at `SimTime::MAX`.
/// Ties between the two roofs count as [`Bound::Compute`].
pub fn roofline_time(gpu: &GpuSpec, e: &ClassEfficiency, q: &OpQuery) -> (SimTime, Bound) {
    roofline_time_paced(gpu, e, q, 1.0)
}

/// [`roofline_time`] with the compute roof `pace` times longer (a job paced by its slowest
/// board, [`crate::variability`]); the memory roof is unchanged. `pace` 1 is [`roofline_time`].
pub fn roofline_time_paced(gpu: &GpuSpec, e: &ClassEfficiency, q: &OpQuery, pace: f64) -> (SimTime, Bound) {
    let peak = if q.class.uses_tensor_cores() {
        gpu.peak_flops(q.dtype)
    } else {
        gpu.peak_flops(crate::op::DType::Fp32)
    };
    let compute_s = match (q.class, q.kernel) {
        (OpClass::Gemm, Some(KernelShape::Gemm(shape))) => gemm::plan(gpu, q.dtype, e.compute_eff, &shape).secs,
        (OpClass::FlashAttention, Some(KernelShape::Attention(shape))) => {
            attention::seconds(gpu, shape.kernel.unwrap_or(AttentionKernel::default_for(gpu.arch)), &shape, q.flops)
                .unwrap_or_else(|| q.flops.max(0.0) / (peak * e.compute_eff))
        }
        _ => q.flops.max(0.0) / (peak * e.compute_eff),
    } / gpu.compute_rate_fraction()
        * pace;
    let memory_s = match q.kernel {
        // The SSD kernels' own traffic at their measured bandwidth fraction, or at their rate
        // per SM and cycle where that is slower (crate::ssd).
        Some(KernelShape::Ssd(shape)) => crate::ssd::seconds(&shape, gpu),
        _ => q.bytes.max(0.0) / (gpu.hbm_bandwidth_bytes_per_s * e.memory_eff),
    };
    let (secs, bound) = if compute_s >= memory_s {
        (compute_s, Bound::Compute)
    } else {
        (memory_s, Bound::Memory)
    };
    (SimTime::from_secs_f64(secs).saturating_add(e.launch), bound)
}

fn catalog_names() -> String {
    gpu::catalog().iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
}

fn dtype_names() -> String {
    DType::ALL.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

fn class_names() -> String {
    OpClass::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::gpu;

    #[test]
    fn an_attention_shape_naming_its_kernel_is_timed_from_that_kernels_table() {
        use crate::attention::{self, AttentionKernel, AttentionShape};
        use crate::op::{DType, KernelShape, OpQuery};
        let h100 = gpu("H100").unwrap();
        let e = Efficiencies::default_table().get(h100, OpClass::FlashAttention);
        let shape = |kernel| AttentionShape {
            batch_heads: 32,
            s_q: 8192,
            s_kv: 8192,
            head_dim: 128,
            causal: true,
            backward: false,
            kernel,
        };
        let time = |kernel| {
            let q = OpQuery {
                name: "core_attention".into(),
                class: OpClass::FlashAttention,
                dtype: DType::Bf16,
                flops: 1e13,
                bytes: 1e8,
                shape: String::new(),
                kernel: Some(KernelShape::Attention(shape(kernel))),
            };
            roofline_time(h100, &e, &q).0
        };
        // None: Transformer Engine's default, cuDNN on Hopper.
        assert_eq!(time(None), time(Some(AttentionKernel::Cudnn)));
        let fa2 = attention::seconds(h100, AttentionKernel::Fa2, &shape(None), 1e13).unwrap();
        assert_eq!(
            time(Some(AttentionKernel::Fa2)),
            SimTime::from_secs_f64(fa2).saturating_add(e.launch)
        );
        // FA2 on an H100: 333 against cuDNN's 529 TFLOP/s (causal, 8k, head dim 128).
        assert!(time(Some(AttentionKernel::Fa2)) > time(None));
    }

    #[test]
    fn shipped_table_covers_every_class_on_every_gpu() {
        let t = Efficiencies::default_table();
        for g in gpu::catalog() {
            for c in OpClass::ALL {
                assert!(t.own(g, c, None).is_some(), "{} {c}", g.name);
            }
        }
    }

    #[test]
    fn per_gpu_row_overrides_star_row() {
        let t = Efficiencies::from_csv_str("gpu,class,compute_eff,memory_eff\n*,gemm,0.5,0.6\nh100-sxm,gemm,0.9,0.8\n").unwrap();
        let h100 = gpu("H100").unwrap();
        let a100 = gpu("A100").unwrap();
        assert_eq!(t.get(h100, OpClass::Gemm).compute_eff, 0.9);
        assert_eq!(t.get(a100, OpClass::Gemm).compute_eff, 0.5);
        // No launch_us column: the documented default.
        assert_eq!(t.get(a100, OpClass::Gemm).launch, SimTime::from_us_f64(DEFAULT_LAUNCH_US));
        // Classes the user table does not name come from the shipped table.
        assert_eq!(t.get(h100, OpClass::Norm), Efficiencies::default_table().get(h100, OpClass::Norm));
    }

    #[test]
    fn shipped_per_gpu_rows_override_shipped_star_rows() {
        let t = Efficiencies::default_table();
        let star = t.row(None, None, OpClass::Gemm).unwrap();
        let h100 = t.get(gpu("H100").unwrap(), OpClass::Gemm);
        assert_ne!(star, h100);
        // A class with no per-GPU rows falls back to the `*` row (Blackwell has memory-bound
        // rows of its own; Hopper has none for norms).
        assert_eq!(
            t.get(gpu("H100").unwrap(), OpClass::Norm),
            t.row(None, None, OpClass::Norm).unwrap()
        );
        assert_ne!(
            t.get(gpu("B200").unwrap(), OpClass::Norm),
            t.row(None, None, OpClass::Norm).unwrap()
        );
    }

    #[test]
    fn a_gpu_without_rows_of_its_own_takes_its_bases_rows() {
        let t = Efficiencies::default_table();
        let (a40, a80) = (gpu("A100-40GB").unwrap(), gpu("A100").unwrap());
        assert_eq!(t.resolve_all(a40), t.resolve_all(a80));
        assert_ne!(t.get(a80, OpClass::Gemm), t.row(None, None, OpClass::Gemm).unwrap());
        // A user row for the GPU itself still wins over its base's.
        let u = Efficiencies::from_csv_str("gpu,class,compute_eff,memory_eff\nA100-40GB,gemm,0.5,0.6\n").unwrap();
        assert_eq!(u.get(a40, OpClass::Gemm).compute_eff, 0.5);
        assert_eq!(u.get(a80, OpClass::Gemm), t.get(a80, OpClass::Gemm));
        // A custom GPU from A100-40GB reaches A100's rows; one without a base gets the * rows.
        let c = crate::CustomGpu {
            name: Some("A100-40GB-OC".into()),
            base: Some("A100-40GB".into()),
            sm_count: Some(100),
            ..Default::default()
        }
        .build()
        .unwrap();
        assert_eq!(t.resolve_all(c), t.resolve_all(a80));
        let bare = crate::CustomGpu {
            name: Some("Bare".into()),
            fp32_tflops: Some(10.0),
            bf16_tflops: Some(100.0),
            hbm_bandwidth: Some("1TB/s".parse().unwrap()),
            memory: Some("16GiB".parse().unwrap()),
            nvlink_bandwidth: Some("100GB/s".parse().unwrap()),
            sm_count: Some(10),
            arch: Some("ampere".into()),
            ..Default::default()
        }
        .build()
        .unwrap();
        assert_eq!(t.get(bare, OpClass::Gemm), t.row(None, None, OpClass::Gemm).unwrap());
    }

    #[test]
    fn dtype_rows_override_rows_without_one() {
        let t = Efficiencies::from_csv_str("gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemm,0.5,0.6,2,\nH100,gemm,0.9,0.8,2,\nH100,gemm,0.7,0.8,2,fp8\n*,norm,0.5,0.5,2,fp8\n").unwrap();
        let h100 = gpu("H100").unwrap();
        let a100 = gpu("A100").unwrap();
        assert_eq!(t.get_for(h100, OpClass::Gemm, Some(DType::Fp8)).compute_eff, 0.7);
        assert_eq!(t.get_for(h100, OpClass::Gemm, Some(DType::Bf16)).compute_eff, 0.9);
        assert_eq!(t.get_for(a100, OpClass::Gemm, Some(DType::Fp8)).compute_eff, 0.5);
        // (*, fp8) applies where the GPU has no row of its own for the class.
        assert_eq!(t.get_for(h100, OpClass::Norm, Some(DType::Fp8)).compute_eff, 0.5);
        let (line, col, msg) = csv_err("gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemm,0.5,0.6,2,fp6\n");
        assert_eq!((line, col.as_deref()), (2, Some("dtype")), "{msg}");
        assert!(msg.contains("fp8, fp4, mxfp8"), "{msg}");
    }

    #[test]
    fn an_mxfp8_row_times_mxfp8_gemms_and_without_one_they_take_fp8s() {
        use crate::op::GemmShape;
        let t = Efficiencies::from_csv_str(
            "gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemm,0.5,0.6,2,\nH100,gemm,0.9,0.8,2,\n\
             B300,gemm,0.7,0.8,2,fp8\nGB300,gemm,0.75,0.8,2,fp8\nGB300,gemm,0.6,0.8,2,MXFP8\n\
             *,norm,0.4,0.5,2,fp8\n*,router,0.3,0.5,2,mxfp8\n",
        )
        .unwrap();
        let eff = |g: &str, c, d| t.get_for(gpu(g).unwrap(), c, Some(d)).compute_eff;
        // The GPU's mxfp8 row (any case in the CSV) for MXFP8 only.
        assert_eq!(eff("GB300", OpClass::Gemm, DType::Mxfp8), 0.6);
        assert_eq!(eff("GB300", OpClass::Gemm, DType::Fp8), 0.75);
        // No mxfp8 row: the GPU's fp8 row, then its row without a dtype, then the * rows.
        assert_eq!(eff("B300", OpClass::Gemm, DType::Mxfp8), 0.7);
        assert_eq!(eff("H100", OpClass::Gemm, DType::Mxfp8), 0.9);
        assert_eq!(eff("B200", OpClass::Gemm, DType::Mxfp8), 0.5);
        assert_eq!(eff("B200", OpClass::Norm, DType::Mxfp8), 0.4);
        assert_eq!(eff("B200", OpClass::Router, DType::Mxfp8), 0.3);
        assert_eq!(
            eff("B200", OpClass::Router, DType::Fp8),
            Efficiencies::default_table().get(gpu("B200").unwrap(), OpClass::Router).compute_eff
        );

        // Timed: an MXFP8 GEMM at the FP8 peak with its own efficiency, else exactly FP8's time.
        let s = GemmShape::new(16384, 4096, 16384);
        let time = |g: &str, d| {
            let q = OpQuery {
                name: "fc1".into(),
                class: OpClass::Gemm,
                dtype: d,
                flops: s.flops(),
                bytes: 2.0 * 16384.0 * 4096.0,
                shape: String::new(),
                kernel: Some(KernelShape::Gemm(s)),
            };
            crate::ComputeModel::new(gpu(g).unwrap()).with_efficiencies(t.clone()).time(&q).time
        };
        assert_eq!(time("B300", DType::Mxfp8), time("B300", DType::Fp8));
        assert!(time("GB300", DType::Mxfp8) > time("GB300", DType::Fp8));
        assert!(time("GB300", DType::Mxfp8) < time("GB300", DType::Bf16));
    }

    #[test]
    fn the_shipped_table_times_mxfp8_as_fp8_where_it_has_no_mxfp8_row() {
        let t = Efficiencies::default_table();
        let custom = crate::CustomGpu {
            name: Some("GB300-1000W".into()),
            base: Some("GB300".into()),
            power_limit: Some(llmsim_core::Power::from_watts(1000)),
            ..Default::default()
        }
        .build()
        .unwrap();
        for g in gpu::catalog().iter().chain([custom]) {
            let resolved = t.resolve_all(g);
            for c in OpClass::ALL {
                let has_own =
                    g.lineage().any(|n| t.row(Some(n), Some(DType::Mxfp8), c).is_some()) || t.row(None, Some(DType::Mxfp8), c).is_some();
                if !has_own {
                    assert_eq!(
                        resolved[DType::Mxfp8.index()][c.index()],
                        resolved[DType::Fp8.index()][c.index()],
                        "{} {c}",
                        g.name
                    );
                }
            }
        }
    }

    fn csv_err(text: &str) -> (u64, Option<String>, String) {
        match Efficiencies::from_csv_str(text) {
            Err(ComputeError::Csv { line, column, message, .. }) => (line, column, message),
            other => panic!("expected a CSV error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_tables_name_line_and_column() {
        let head = "# comment\ngpu,class,compute_eff,memory_eff\n";
        let (line, col, msg) = csv_err(&format!("{head}*,gemm,0.7,0.8\n*,norm,1.5,0.7\n"));
        assert_eq!((line, col.as_deref()), (4, Some("compute_eff")), "{msg}");
        let (line, col, msg) = csv_err(&format!("{head}*,gemm,0.7,0.8\n# c\n*,gemmm,0.7,0.8\n"));
        assert_eq!((line, col.as_deref()), (5, Some("class")), "{msg}");
        assert!(msg.contains("flash_attention"), "{msg}");
        let (line, col, _) = csv_err(&format!("{head}P100,gemm,0.7,0.8\n"));
        assert_eq!((line, col.as_deref()), (3, Some("gpu")));
        let (line, _, msg) = csv_err(&format!("{head}*,gemm,0.7\n"));
        assert_eq!(line, 3, "{msg}");
        let (line, col, msg) = csv_err(&format!("{head}*,gemm,0.7,0.8\nH100,gemm,0.7,0.8\nh100,gemm,0.6,0.8\n"));
        assert_eq!((line, col.as_deref()), (5, Some("class")));
        assert!(msg.contains("line 4"), "{msg}");
        let (line, col, _) = csv_err("gpu,class,compute_eff,memory_eff,launch_ms\n");
        assert_eq!((line, col.as_deref()), (1, Some("launch_ms")));
        let (_, col, _) = csv_err("gpu,class,compute_eff\n");
        assert_eq!(col.as_deref(), Some("memory_eff"));
        let (line, col, _) = csv_err(&format!("{head}*,gemm,abc,0.8\n"));
        assert_eq!((line, col.as_deref()), (3, Some("compute_eff")));
        let (line, col, _) = csv_err("gpu,class,compute_eff,memory_eff,launch_us\n*,gemm,0.7,0.8,-1\n");
        assert_eq!((line, col.as_deref()), (2, Some("launch_us")));
    }

    #[test]
    fn a_power_limit_slows_compute_bound_ops_only_and_never_past_the_roof() {
        use crate::op::{AttentionShape, GemmShape};
        let capped = |w: u64| {
            crate::CustomGpu {
                name: Some(format!("H100-{w}W")),
                base: Some("H100".into()),
                power_limit: Some(llmsim_core::Power::from_watts(w)),
                ..Default::default()
            }
            .build()
            .unwrap()
        };
        let h100 = gpu("H100").unwrap();
        let t = Efficiencies::default_table();
        let op = |class, flops: f64, bytes: f64, kernel| OpQuery {
            name: "x".into(),
            class,
            dtype: DType::Bf16,
            flops,
            bytes,
            shape: String::new(),
            kernel,
        };
        let gemm = GemmShape::new(8192, 8192, 8192);
        let attn = AttentionShape {
            batch_heads: 64,
            s_q: 8192,
            s_kv: 8192,
            head_dim: 128,
            causal: true,
            backward: false,
            kernel: None,
        };
        let ops = [
            op(
                OpClass::Gemm,
                gemm.flops(),
                3.0 * 2.0 * 8192.0 * 8192.0,
                Some(KernelShape::Gemm(gemm)),
            ),
            op(
                OpClass::FlashAttention,
                4.0 * 64.0 * 8192.0 * 8192.0 * 128.0,
                1e8,
                Some(KernelShape::Attention(attn)),
            ),
            op(OpClass::Elementwise, 1e12, 1e6, None),
        ];
        let memory_bound = op(OpClass::Elementwise, 1e6, 1e10, None);
        let time = |g: &GpuSpec, q: &OpQuery| {
            let e = t.get_for(g, q.class, Some(q.dtype));
            roofline_time(g, &e, q)
        };
        for q in &ops {
            let (uncapped, bound) = time(h100, q);
            assert_eq!(bound, Bound::Compute, "{:?}", q.class);
            let mut last = SimTime::MAX;
            for w in [175, 200, 250, 300, 400, 500, 600, 650, 699, 700, 701, 1000] {
                let g = capped(w);
                let (tc, _) = time(g, q);
                // Slower with a lower limit, never faster than the uncapped GPU or the peak.
                assert!(tc <= last, "{:?} {w}: {tc} > {last}", q.class);
                assert!(tc >= uncapped, "{:?} {w}", q.class);
                assert!(
                    tc.as_secs_f64() >= q.flops / g.peak_flops(DType::Bf16).max(g.peak_flops(DType::Fp32)),
                    "{:?} {w}",
                    q.class
                );
                if w >= 700 {
                    assert_eq!(tc, uncapped, "{:?} {w}", q.class);
                }
                last = tc;
            }
            // At 500 W the compute roof is the curve's fraction of the uncapped one.
            let (t500, _) = time(capped(500), q);
            let e = t.get_for(h100, q.class, Some(q.dtype));
            let compute = |t: SimTime| t.as_secs_f64() - e.launch.as_secs_f64();
            let f = capped(500).compute_rate_fraction();
            assert!((compute(uncapped) / compute(t500) / f - 1.0).abs() < 1e-6, "{:?}", q.class);
        }
        // HBM keeps its own clock: a memory-bound op takes the same time.
        assert_eq!(time(capped(300), &memory_bound), time(h100, &memory_bound));
        assert_eq!(time(h100, &memory_bound).1, Bound::Memory);
    }
}
