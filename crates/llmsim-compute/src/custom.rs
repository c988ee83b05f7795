//! A GPU that is not in the catalog, declared in a scenario:
//!
//! ```yaml
//! cluster:
//!   gpu: { name: H100-96, base: H100, memory: 96GiB, hbm_bandwidth: 3.9TB/s }
//! ```
//!
//! With `base`, every field left out is the base catalog GPU's, and the base's efficiency rows
//! (`data/efficiency.csv`) apply to the custom GPU. Without `base`, the fields marked *required*
//! must all be given; the others default as documented on [`CustomGpu`].
//!
//! [`CustomGpu::build`] returns a `&'static GpuSpec`, like the catalog: the model keeps
//! `&'static` specs so that lookups and reports never copy one. Custom specs are interned in a
//! process-wide registry, deduplicated by content, and never freed: a sweep that declares N
//! distinct custom GPUs keeps N small structs alive, and re-declaring the same GPU (every point
//! of a sweep, every thread) returns the same reference.

use std::sync::Mutex;

use llmsim_core::GpuArch;
use llmsim_core::{Bandwidth, Bytes, Power};
use serde::{Deserialize, Serialize};

use crate::error::ComputeError;
use crate::gpu::{self, GpuSpec, PeakTflops};

/// The fields of a custom GPU. Rates in dense TFLOP/s (10^12 FLOP/s, no 2:4 sparsity).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomGpu {
    /// Name in reports. Required; must not be a catalog name (use `base` to start from one).
    #[serde(default)]
    pub name: Option<String>,
    /// Catalog GPU whose figures fill the fields left out, and whose efficiency rows apply.
    #[serde(default)]
    pub base: Option<String>,
    /// Non-tensor FP32 peak. Required without `base`.
    #[serde(default)]
    pub fp32_tflops: Option<f64>,
    /// Tensor-core TF32 peak. Default: the base's, else half of `bf16_tflops`.
    #[serde(default)]
    pub tf32_tflops: Option<f64>,
    /// Tensor-core BF16 peak. Required without `base`.
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    /// Tensor-core FP16 peak. Default: the base's, else `bf16_tflops`.
    #[serde(default)]
    pub fp16_tflops: Option<f64>,
    /// Tensor-core FP8 peak. Default: the base's, else none (FP8 ops run at the BF16 peak).
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// Tensor-core FP4 (NVFP4) peak. Default: the base's, else none (`training.dtype: fp4` is
    /// then rejected).
    #[serde(default)]
    pub fp4_tflops: Option<f64>,
    /// Peak HBM bandwidth, e.g. `4TB/s`. Required without `base`.
    #[serde(default)]
    pub hbm_bandwidth: Option<Bandwidth>,
    /// Memory capacity the framework can allocate into (`nvidia-smi` memory.total), e.g.
    /// `96GiB`. Required without `base`.
    #[serde(default)]
    pub memory: Option<Bytes>,
    /// NVLink (scale-up) bandwidth per GPU per direction, e.g. `450GB/s`. Required without `base`.
    #[serde(default)]
    pub nvlink_bandwidth: Option<Bandwidth>,
    /// Host link (PCIe / NVLink-C2C) bandwidth per direction, e.g. `64GB/s`: the copies of
    /// activation CPU offloading. Default: the base's; needed only when offloading.
    #[serde(default)]
    pub host_bandwidth: Option<Bandwidth>,
    /// Streaming multiprocessors (the GEMM wave model). Required without `base`.
    #[serde(default)]
    pub sm_count: Option<u32>,
    /// Maximum SM clock in MHz (`nvidia-smi -q`, "Max Clocks: SM"): the Mamba-2 SSD scan runs at
    /// a rate per SM and cycle ([`crate::ssd`]). Default: the base's, else none (the scan is then
    /// timed by its HBM bandwidth fraction alone).
    #[serde(default)]
    pub sm_clock_mhz: Option<u32>,
    /// NCCL tuning / GEMM tile architecture: ampere | hopper | blackwell. Required without `base`.
    #[serde(default)]
    pub arch: Option<String>,
    /// Board power the peaks and efficiencies stand for (the datasheet's default power limit),
    /// e.g. `700W`. Default: the base's; needed only with `power_limit`.
    #[serde(default)]
    pub tdp: Option<Power>,
    /// Power limit set on the board (`nvidia-smi -pl`), e.g. `500W`. Default: `tdp` (no cap).
    /// Below `tdp`, compute-bound kernels (GEMM, attention, other compute roofs) run slower by
    /// the kernel-calibrated curve of [`crate::power`]; memory-bound ones are unchanged.
    #[serde(default)]
    pub power_limit: Option<Power>,
}

fn err(field: &'static str, message: impl Into<String>) -> ComputeError {
    ComputeError::CustomGpu {
        field,
        message: message.into(),
    }
}

/// `value`, else the base's, else an error naming `field`.
fn required<T>(field: &'static str, value: Option<T>, base: Option<T>) -> Result<T, ComputeError> {
    value.or(base).ok_or_else(|| {
        err(
            field,
            "required for a custom GPU without `base` (give it, or `base: <catalog GPU>` to take the missing fields from one)",
        )
    })
}

fn tflops(field: &'static str, v: Option<f64>) -> Result<Option<f64>, ComputeError> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(err(field, format!("must be a positive number of TFLOP/s, got {x}"))),
        _ => Ok(v),
    }
}

/// A power above zero and at most [`crate::power::MAX_POWER`].
fn check_power(field: &'static str, p: Power) -> Result<(), ComputeError> {
    let max = crate::power::MAX_POWER;
    if p.is_zero() || p > max {
        return Err(err(field, format!("must be above 0 W and at most {max}, e.g. `500W`; got {p}")));
    }
    Ok(())
}

fn parse_arch(s: &str) -> Result<GpuArch, ComputeError> {
    match s.to_ascii_lowercase().as_str() {
        "ampere" => Ok(GpuArch::Ampere),
        "hopper" => Ok(GpuArch::Hopper),
        "blackwell" => Ok(GpuArch::Blackwell),
        _ => Err(err("arch", format!("unknown architecture `{s}`; valid: ampere, hopper, blackwell"))),
    }
}

impl CustomGpu {
    /// Builds (and interns) the spec.
    ///
    /// # Errors
    /// [`ComputeError::CustomGpu`] naming the field: a missing required field, a `name` that is
    /// empty or a catalog GPU, an unknown `base` or `arch`, a non-positive rate, capacity or SM
    /// count, a `tdp` or `power_limit` of 0 or above 3 kW, a `power_limit` without a known `tdp`
    /// or below a quarter of it.
    pub fn build(&self) -> Result<&'static GpuSpec, ComputeError> {
        let name = match self.name.as_deref().map(str::trim) {
            None | Some("") => return Err(err("name", "required for a custom GPU (the name reports use)")),
            Some(n) => n,
        };
        if let Some(g) = gpu::find(name) {
            return Err(err(
                "name",
                format!(
                    "`{name}` is the catalog's {}; give a custom GPU its own name and `base: {}`",
                    g.name, g.name
                ),
            ));
        }
        let base = match &self.base {
            None => None,
            Some(b) => Some(gpu::gpu(b).map_err(|e| match e {
                ComputeError::UnknownGpu { valid, .. } => err("base", format!("unknown GPU `{b}`; valid: {valid}")),
                other => other,
            })?),
        };
        let bp = base.map(|b| b.peak_tflops);
        let fp32 = required("fp32_tflops", tflops("fp32_tflops", self.fp32_tflops)?, bp.map(|p| p.fp32))?;
        let bf16_given = tflops("bf16_tflops", self.bf16_tflops)?;
        let bf16 = match (bf16_given, bp) {
            (Some(x), _) => Some(x),
            (None, Some(p)) => p.bf16,
            (None, None) => Some(required("bf16_tflops", None, None)?),
        };
        // Each given field overrides only itself; without a base FP16 defaults to BF16.
        let fp16 = tflops("fp16_tflops", self.fp16_tflops)?
            .or(bp.map(|p| p.fp16))
            .or(bf16)
            .ok_or_else(|| err("fp16_tflops", "required where neither `bf16_tflops` nor `base` is given"))?;
        let tf32 = match (tflops("tf32_tflops", self.tf32_tflops)?, bp) {
            (Some(x), _) => Some(x),
            (None, Some(p)) => p.tf32,
            (None, None) => bf16.map(|b| b / 2.0),
        };
        let fp8 = tflops("fp8_tflops", self.fp8_tflops)?.or(bp.and_then(|p| p.fp8));
        let fp4 = tflops("fp4_tflops", self.fp4_tflops)?.or(bp.and_then(|p| p.fp4));
        let hbm = required("hbm_bandwidth", self.hbm_bandwidth, base.map(|b| b.hbm_bandwidth()))?;
        if hbm.is_zero() {
            return Err(err("hbm_bandwidth", "must be positive, e.g. `3.35TB/s`"));
        }
        let memory = required("memory", self.memory, base.map(|b| Bytes::new(b.memory_bytes)))?;
        if memory.get() == 0 {
            return Err(err("memory", "must be positive, e.g. `80GiB`"));
        }
        let nvlink = required("nvlink_bandwidth", self.nvlink_bandwidth, base.map(|b| b.nvlink_bandwidth))?;
        let host = self.host_bandwidth.or(base.and_then(|b| b.host_bandwidth));
        if host.is_some_and(|h| h.is_zero()) {
            return Err(err(
                "host_bandwidth",
                "must be positive, e.g. `64GB/s` (PCIe Gen5 x16, per direction)",
            ));
        }
        let sm_count = required("sm_count", self.sm_count, base.map(|b| b.sm_count))?;
        if sm_count == 0 {
            return Err(err("sm_count", "must be at least 1"));
        }
        let sm_clock_mhz = self.sm_clock_mhz.or(base.and_then(|b| b.sm_clock_mhz));
        if sm_clock_mhz == Some(0) {
            return Err(err("sm_clock_mhz", "must be at least 1 (MHz), e.g. `1980`"));
        }
        let arch = match &self.arch {
            Some(a) => parse_arch(a)?,
            None => required("arch", None, base.map(|b| b.arch))?,
        };
        let tdp = self.tdp.or(base.and_then(|b| b.tdp));
        if let Some(t) = self.tdp {
            check_power("tdp", t)?;
        }
        let power_limit = match self.power_limit {
            None => None,
            Some(p) => {
                check_power("power_limit", p)?;
                let Some(t) = tdp else {
                    return Err(err(
                        "power_limit",
                        "needs the board's `tdp` (e.g. `tdp: 700W`), which neither this GPU nor its `base` gives",
                    ));
                };
                if p.watts_f64() < crate::power::MIN_LIMIT_FRACTION * t.watts_f64() {
                    return Err(err(
                        "power_limit",
                        format!(
                            "{p} is below a quarter of the TDP ({t}): outside what boards accept and the calibrated range; give at least {}",
                            Power::from_milliwatts(t.milliwatts().div_ceil(4))
                        ),
                    ));
                }
                Some(p)
            }
        };
        let (variant, source) = match base {
            Some(b) => (
                format!("custom, from {} {}", b.name, b.variant),
                format!("declared in the scenario; fields not given are the catalog {}'s", b.name),
            ),
            None => ("custom".to_string(), "declared in the scenario".to_string()),
        };
        Ok(intern(GpuSpec {
            name: intern_str(name),
            variant: intern_str(&variant),
            peak_tflops: PeakTflops {
                fp32,
                tf32,
                bf16,
                fp16,
                fp8,
                fp4,
            },
            hbm_bandwidth_bytes_per_s: hbm.bps_f64() / 8.0,
            memory_bytes: memory.get(),
            nvlink_bandwidth: nvlink,
            host_bandwidth: host,
            arch,
            sm_count,
            sm_clock_mhz,
            memory_tokens: &[],
            source: intern_str(&source),
            base: base.map(|b| b.name),
            tdp,
            power_limit,
        }))
    }
}

static STRINGS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
static SPECS: Mutex<Vec<&'static GpuSpec>> = Mutex::new(Vec::new());

fn intern_str(s: &str) -> &'static str {
    let mut v = STRINGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(x) = v.iter().find(|x| **x == s) {
        return x;
    }
    let x: &'static str = Box::leak(s.to_owned().into_boxed_str());
    v.push(x);
    x
}

fn intern(spec: GpuSpec) -> &'static GpuSpec {
    let mut v = SPECS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(x) = v.iter().find(|x| ***x == spec) {
        return x;
    }
    let x: &'static GpuSpec = Box::leak(Box::new(spec));
    v.push(x);
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> CustomGpu {
        CustomGpu {
            name: Some("X1".into()),
            fp32_tflops: Some(60.0),
            bf16_tflops: Some(1000.0),
            hbm_bandwidth: Some("4TB/s".parse().unwrap()),
            memory: Some("96GiB".parse().unwrap()),
            nvlink_bandwidth: Some("450GB/s".parse().unwrap()),
            sm_count: Some(128),
            arch: Some("Hopper".into()),
            ..CustomGpu::default()
        }
    }

    #[test]
    fn a_copy_of_a_catalog_gpu_has_its_figures() {
        let h100 = gpu::gpu("H100").unwrap();
        let c = CustomGpu {
            name: Some("MyH100".into()),
            base: Some("h100-sxm".into()),
            ..CustomGpu::default()
        }
        .build()
        .unwrap();
        assert_eq!(
            GpuSpec {
                name: h100.name,
                variant: h100.variant,
                source: h100.source,
                memory_tokens: h100.memory_tokens,
                base: None,
                ..*c
            },
            *h100
        );
        assert_eq!((c.name, c.base), ("MyH100", Some("H100")));
    }

    #[test]
    fn fields_override_the_base_and_defaults_fill_the_rest() {
        let c = CustomGpu {
            name: Some("H100-96".into()),
            base: Some("H100".into()),
            memory: Some("96GiB".parse().unwrap()),
            fp8_tflops: Some(2500.0),
            ..CustomGpu::default()
        }
        .build()
        .unwrap();
        assert_eq!(c.memory_bytes, 96 << 30);
        assert_eq!(c.peak_tflops.fp8, Some(2500.0));
        assert_eq!(c.peak_tflops.bf16, Some(989.4));
        let x = full().build().unwrap();
        let p = x.peak_tflops;
        assert_eq!((p.tf32, p.bf16, p.fp16, p.fp8), (Some(500.0), Some(1000.0), 1000.0, None));
        assert_eq!(x.hbm_bandwidth_bytes_per_s, 4e12);
        assert_eq!((x.arch, x.base), (GpuArch::Hopper, None));
    }

    #[test]
    fn the_same_declaration_is_interned_once() {
        let a = full().build().unwrap();
        let b = full().build().unwrap();
        assert!(std::ptr::eq(a, b));
        let c = CustomGpu {
            sm_count: Some(64),
            ..full()
        }
        .build()
        .unwrap();
        assert!(!std::ptr::eq(a, c));
    }

    #[test]
    fn errors_name_the_field() {
        let field_of = |c: CustomGpu| match c.build() {
            Err(ComputeError::CustomGpu { field, message }) => (field, message),
            other => panic!("{other:?}"),
        };
        for (field, strip) in [
            ("name", (|c: &mut CustomGpu| c.name = None) as fn(&mut CustomGpu)),
            ("fp32_tflops", |c| c.fp32_tflops = None),
            ("bf16_tflops", |c| c.bf16_tflops = None),
            ("hbm_bandwidth", |c| c.hbm_bandwidth = None),
            ("memory", |c| c.memory = None),
            ("nvlink_bandwidth", |c| c.nvlink_bandwidth = None),
            ("sm_count", |c| c.sm_count = None),
            ("arch", |c| c.arch = None),
        ] {
            let mut c = full();
            strip(&mut c);
            let (f, m) = field_of(c);
            assert_eq!(f, field);
            assert!(m.contains("required"), "{m}");
        }
        let (f, m) = field_of(CustomGpu {
            name: Some("H100".into()),
            ..full()
        });
        assert_eq!(f, "name");
        assert!(m.contains("base: H100"), "{m}");
        let (f, m) = field_of(CustomGpu {
            base: Some("Z100".into()),
            ..full()
        });
        assert_eq!(f, "base");
        assert!(m.contains("A100-40GB"), "{m}");
        assert_eq!(
            field_of(CustomGpu {
                arch: Some("volta".into()),
                ..full()
            })
            .0,
            "arch"
        );
        assert_eq!(
            field_of(CustomGpu {
                sm_count: Some(0),
                ..full()
            })
            .0,
            "sm_count"
        );
        assert_eq!(
            field_of(CustomGpu {
                sm_clock_mhz: Some(0),
                ..full()
            })
            .0,
            "sm_clock_mhz"
        );
        assert_eq!(
            field_of(CustomGpu {
                bf16_tflops: Some(-1.0),
                ..full()
            })
            .0,
            "bf16_tflops"
        );
    }

    #[test]
    fn a_power_limit_below_the_base_tdp_slows_compute_only() {
        let capped = CustomGpu {
            name: Some("H100-500W".into()),
            base: Some("H100".into()),
            power_limit: Some("500W".parse().unwrap()),
            ..CustomGpu::default()
        }
        .build()
        .unwrap();
        let h100 = gpu::gpu("H100").unwrap();
        assert_eq!((capped.tdp, capped.power_limit), (h100.tdp, Some(Power::from_watts(500))));
        let f = capped.compute_rate_fraction();
        assert!((f - crate::power::compute_rate_fraction(Power::from_watts(500), Power::from_watts(700))).abs() < 1e-15);
        assert!(f > 0.75 && f < 0.85, "{f}");
        // Peaks and HBM as declared: the cap is applied to kernel rates, not to the datasheet.
        assert_eq!(capped.peak_tflops, h100.peak_tflops);
        assert_eq!(capped.hbm_bandwidth_bytes_per_s, h100.hbm_bandwidth_bytes_per_s);
        // At or above the TDP nothing changes.
        for w in ["700W", "0.7kW", "900W"] {
            let c = CustomGpu {
                name: Some("H100-uncapped".into()),
                base: Some("H100".into()),
                power_limit: Some(w.parse().unwrap()),
                ..CustomGpu::default()
            }
            .build()
            .unwrap();
            assert_eq!(c.compute_rate_fraction(), 1.0, "{w}");
        }
        // Without a base the TDP is declared.
        let own = CustomGpu {
            tdp: Some(Power::from_watts(1000)),
            power_limit: Some(Power::from_watts(500)),
            ..full()
        }
        .build()
        .unwrap();
        assert!(own.compute_rate_fraction() < f);
    }

    #[test]
    fn a_bad_power_limit_errors_naming_the_field() {
        let field_of = |c: CustomGpu| match c.build() {
            Err(ComputeError::CustomGpu { field, message }) => (field, message),
            other => panic!("{other:?}"),
        };
        let capped = |p: Power| CustomGpu {
            name: Some("H100-capped".into()),
            base: Some("H100".into()),
            power_limit: Some(p),
            ..CustomGpu::default()
        };
        for (p, want) in [
            (Power::ZERO, "above 0 W"),
            (Power::from_watts(5000), "at most 3000W"),
            (Power::from_watts(100), "at least 175W"),
        ] {
            let (f, m) = field_of(capped(p));
            assert_eq!(f, "power_limit", "{p}");
            assert!(m.contains(want), "{p}: {m}");
        }
        // No TDP to scale against: H20 has no public one, a bare GPU declares none.
        let (f, m) = field_of(CustomGpu {
            base: Some("H20".into()),
            ..capped(Power::from_watts(300))
        });
        assert_eq!(f, "power_limit");
        assert!(m.contains("tdp"), "{m}");
        let (f, _) = field_of(CustomGpu {
            power_limit: Some(Power::from_watts(300)),
            ..full()
        });
        assert_eq!(f, "power_limit");
        let (f, _) = field_of(CustomGpu {
            tdp: Some(Power::ZERO),
            ..full()
        });
        assert_eq!(f, "tdp");
        // A bare number (no unit) does not deserialize; the error names the expected unit.
        let e = serde_json::from_str::<CustomGpu>(r#"{"name": "X", "base": "H100", "power_limit": "500"}"#).unwrap_err();
        assert!(e.to_string().contains("watts"), "{e}");
    }
}
