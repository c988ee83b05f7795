//! [`ComputeModel`]: the op database first, the roofline otherwise; and the slowdown of compute
//! that overlaps communication ([`OverlapModel`]).

use llmsim_core::SimTime;
use serde::{Deserialize, Serialize};

use crate::db::{self, OpDatabase};
use crate::error::ComputeError;
use crate::gpu::GpuSpec;
use crate::op::{OpClass, OpQuery};
use crate::roofline::{self, Bound, ClassEfficiency, Efficiencies};

/// Where an [`OpTime`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeSource {
    /// A measured entry of the op database.
    Database,
    /// The roofline with the efficiency table.
    Roofline,
}

/// The duration of one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpTime {
    /// How long the op takes.
    pub time: SimTime,
    /// Where the time comes from: the op database or the roofline.
    pub source: TimeSource,
    /// The roof the roofline puts the op under; for a database time too (the database says
    /// how long, the roofline why).
    pub bound: Bound,
}

/// Slowdown of a compute op while communication runs beside it: NCCL kernels take SMs and HBM
/// bandwidth from it. Multiverse (NSDI '25, §4.1) starts from the op's duration without
/// overlap, computes the overlap ratio from the communication op's duration, and stretches the
/// computation by an empirically modeled factor (per model, op and GPU type). Here: the part of
/// the op that overlaps runs `compute_slowdown` times slower,
///
/// `slowed(t, f) = t * (1 + (compute_slowdown - 1) * f)`.
///
/// Default `compute_slowdown = 1.0` (no slowdown): the factor is an empirical, per-system
/// calibration the paper does not publish, so none is assumed until a user measures one
/// (e.g. a GEMM timed alone and beside an all-reduce).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OverlapModel {
    /// How many times slower the overlapped part of a compute op runs; >= 1. Default 1.0.
    pub compute_slowdown: f64,
}

impl Default for OverlapModel {
    fn default() -> Self {
        OverlapModel { compute_slowdown: 1.0 }
    }
}

impl OverlapModel {
    /// No slowdown.
    pub const NONE: OverlapModel = OverlapModel { compute_slowdown: 1.0 };

    /// A model with a checked factor.
    ///
    /// # Errors
    /// [`ComputeError::InvalidParameter`] unless `compute_slowdown` is finite and >= 1.
    pub fn new(compute_slowdown: f64) -> Result<OverlapModel, ComputeError> {
        let m = OverlapModel { compute_slowdown };
        m.validate()?;
        Ok(m)
    }

    /// Checks the factor (a deserialized model is not checked until this is called).
    ///
    /// # Errors
    /// [`ComputeError::InvalidParameter`] unless `compute_slowdown` is finite and >= 1.
    pub fn validate(&self) -> Result<(), ComputeError> {
        if self.compute_slowdown.is_finite() && self.compute_slowdown >= 1.0 {
            Ok(())
        } else {
            Err(ComputeError::InvalidParameter {
                field: "overlap.compute_slowdown",
                value: self.compute_slowdown.to_string(),
                message: "must be a finite number >= 1 (1 = no slowdown)".into(),
            })
        }
    }

    /// The duration of a compute op of stand-alone duration `t` when communication runs
    /// concurrently for `overlapped_fraction` of it (clamped to [0, 1]; NaN counts as 0).
    /// An invalid factor (< 1 or not finite) counts as 1. Rounded to the nearest picosecond;
    /// never shorter than `t`.
    pub fn slowed(&self, t: SimTime, overlapped_fraction: f64) -> SimTime {
        let f = if overlapped_fraction.is_nan() {
            0.0
        } else {
            overlapped_fraction.clamp(0.0, 1.0)
        };
        let s = if self.compute_slowdown.is_finite() {
            self.compute_slowdown.max(1.0)
        } else {
            1.0
        };
        let extra = (s - 1.0) * f;
        if extra == 0.0 {
            return t;
        }
        SimTime::from_ps_f64(t.as_ps() as f64 * extra).saturating_add(t)
    }
}

/// Op durations on one GPU type.
#[derive(Clone, Debug)]
pub struct ComputeModel {
    gpu: &'static GpuSpec,
    eff: Efficiencies,
    db: Option<OpDatabase>,
    overlap: OverlapModel,
    /// `eff` resolved for `gpu`, per dtype and class.
    resolved: [[ClassEfficiency; OpClass::ALL.len()]; roofline::N_DTYPES],
    /// Index of `gpu`'s table in `db`, if it has one.
    db_table: Option<usize>,
    /// Compute-bound kernels take this many times their median board's time: the job's slowest
    /// board ([`crate::variability`]); 1 by default.
    pace: f64,
}

impl ComputeModel {
    /// The shipped efficiency table, no database, no overlap slowdown.
    pub fn new(gpu: &'static GpuSpec) -> ComputeModel {
        let eff = Efficiencies::default_table();
        let resolved = eff.resolve_all(gpu);
        ComputeModel {
            gpu,
            eff,
            db: None,
            overlap: OverlapModel::default(),
            resolved,
            db_table: None,
            pace: 1.0,
        }
    }

    /// The roofline with `eff` instead of the shipped efficiency table.
    pub fn with_efficiencies(mut self, eff: Efficiencies) -> ComputeModel {
        self.resolved = eff.resolve_all(self.gpu);
        self.eff = eff;
        self
    }

    /// Measured times that take precedence over the roofline (only this GPU's entries are used).
    pub fn with_database(mut self, db: OpDatabase) -> ComputeModel {
        self.db_table = db.table_index(self.gpu.name);
        self.db = Some(db);
        self
    }

    /// How much slower kernels run while communication overlaps them.
    pub fn with_overlap(mut self, overlap: OverlapModel) -> ComputeModel {
        self.overlap = overlap;
        self
    }

    /// Compute-bound kernels (roofline and database) run `pace` times longer: the expected
    /// slowest board of the job ([`crate::variability::slowest_of`]). Values below 1 or not
    /// finite count as 1.
    pub fn with_pace(mut self, pace: f64) -> ComputeModel {
        self.pace = if pace.is_finite() && pace > 1.0 { pace } else { 1.0 };
        self
    }

    /// The factor of [`ComputeModel::with_pace`] in use (1: none).
    pub fn pace(&self) -> f64 {
        self.pace
    }

    /// The GPU this model times ops on.
    pub fn gpu(&self) -> &'static GpuSpec {
        self.gpu
    }

    /// The efficiency table in use.
    pub fn efficiencies(&self) -> &Efficiencies {
        &self.eff
    }

    /// The op database, when one was given.
    pub fn database(&self) -> Option<&OpDatabase> {
        self.db.as_ref()
    }

    /// The compute/communication overlap model.
    pub fn overlap(&self) -> &OverlapModel {
        &self.overlap
    }

    /// The efficiencies this model applies to `class` in BF16.
    pub fn efficiency(&self, class: OpClass) -> ClassEfficiency {
        self.efficiency_for(class, crate::op::DType::Bf16)
    }

    /// The efficiencies this model applies to `class` in `dtype`.
    pub fn efficiency_for(&self, class: OpClass, dtype: crate::op::DType) -> ClassEfficiency {
        self.resolved[dtype.index()][class.index()]
    }

    /// Duration of `q` run alone: its database entry for this GPU if there is one, else the
    /// roofline. Deterministic (rounded to the nearest picosecond) and allocation-free.
    pub fn time(&self, q: &OpQuery) -> OpTime {
        let (roof, bound) = roofline::roofline_time_paced(self.gpu, &self.resolved[q.dtype.index()][q.class.index()], q, self.pace);
        let measured = match (&self.db, self.db_table) {
            (Some(db), Some(i)) => db.table_at(i).and_then(|t| db::lookup_in(t, q)),
            _ => None,
        };
        match measured {
            Some(time) => OpTime {
                // A measured time is one board's; the job's slowest board paces compute-bound ops.
                time: if bound == Bound::Compute && self.pace > 1.0 {
                    SimTime::from_ps_f64(time.as_ps() as f64 * self.pace)
                } else {
                    time
                },
                source: TimeSource::Database,
                bound,
            },
            None => OpTime {
                time: roof,
                source: TimeSource::Roofline,
                bound,
            },
        }
    }

    /// [`ComputeModel::time`] stretched by the overlap model for the fraction of it that runs
    /// beside communication.
    pub fn time_overlapped(&self, q: &OpQuery, overlapped_fraction: f64) -> OpTime {
        let t = self.time(q);
        OpTime {
            time: self.overlap.slowed(t.time, overlapped_fraction),
            ..t
        }
    }
}
