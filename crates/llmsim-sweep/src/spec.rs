//! The sweep spec: a base scenario and the axes to vary.
//!
//! ```yaml
//! name: tp-pp                         # default: the spec file's name
//! base: gpt3-13b-128gpu.yaml          # a scenario file (relative to this file) or an inline map
//! set: [network.backend=flow]         # fixed overrides, as --set
//! grid:                               # every combination (the last key varies fastest)
//!   parallel.tp: [1, 2, 4, 8]
//!   parallel.pp: [1, 2, 4]
//! zip:                                # lists of one length, taken together
//!   cluster.topology.nic.bandwidth: [100Gbps, 400Gbps]
//!   collectives.channels: [8, 16]
//! random:                             # `samples` draws (seeded) of each axis
//!   samples: 10
//!   seed: 1
//!   axes:
//!     training.micro_batch_size: { choice: [1, 2, 4] }
//!     compute.overlap_slowdown: { uniform: [1.0, 1.2] }
//!     cluster.nvlink_bandwidth: { int: [300, 900], suffix: GBps }
//! filter:                             # keep a point only where every expression holds
//!   - parallel.tp * parallel.pp <= 32
//! ```
//!
//! Points are the product grid x zip x random (blocks left out count as one empty row), at most
//! [`MAX_POINTS`] of them: the count is checked before anything is built.

use std::path::{Path, PathBuf};

use llmsim_core::SimRng;
use llmsim_sim::Scenario;
use llmsim_sim::SimError;
use llmsim_sim::scenario::{apply_sets, set_path};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use crate::SweepError;
use crate::filter::{self, Expr, Val};
use llmsim_sim::yaml::YamlError;

/// One random axis: exactly one of `choice`, `uniform`, `log_uniform`, `int`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dist {
    /// Values drawn with equal probability, e.g. `[1, 2, 4]`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<serde_json::Value>>")]
    pub choice: Option<Vec<Value>>,
    /// `[low, high]`, drawn uniformly.
    #[serde(default)]
    pub uniform: Option<[f64; 2]>,
    /// `[low, high]`, both positive, drawn uniformly in log space.
    #[serde(default)]
    pub log_uniform: Option<[f64; 2]>,
    /// `[low, high]`, an integer drawn uniformly, both ends included.
    #[serde(default)]
    pub int: Option<[i64; 2]>,
    /// Appended to a drawn number to make a unit string, e.g. `Gbps`.
    #[serde(default)]
    pub suffix: Option<String>,
}

/// `random:`: `samples` seeded draws of each axis.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomSpec {
    /// Points drawn.
    pub samples: u32,
    /// Seed of the draws. Default 1.
    #[serde(default = "one")]
    pub seed: u64,
    /// Dotted scenario key (as in `--set`) -> its distribution.
    #[schemars(with = "std::collections::BTreeMap<String, Dist>")]
    pub axes: Mapping,
}

fn one() -> u64 {
    1
}

/// One filter expression, or a list that must all hold.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Filters {
    /// One expression.
    One(String),
    /// Expressions that must all hold.
    Many(Vec<String>),
}

/// The sweep file.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Name of the sweep (results go to `runs/<name>/` by default). Default: the file name.
    #[serde(default)]
    pub name: String,
    /// The base scenario: a scenario file (relative to this file) or an inline scenario map.
    #[schemars(with = "BaseSchema")]
    pub base: Value,
    /// Directory an inline base's relative paths resolve against. Default: the spec's directory.
    #[serde(default)]
    pub base_dir: Option<PathBuf>,
    /// Fixed overrides of the base, as `--set`: `key.path=value`.
    #[serde(default)]
    pub set: Vec<String>,
    /// Every combination of these axes (the last key varies fastest): dotted scenario key ->
    /// list of values.
    #[serde(default)]
    #[schemars(with = "AxisLists")]
    pub grid: Mapping,
    /// Lists of one length, taken together: dotted scenario key -> list of values.
    #[serde(default)]
    #[schemars(with = "AxisLists")]
    pub zip: Mapping,
    /// Points drawn at random from per-key distributions, besides the grid.
    #[serde(default)]
    pub random: Option<RandomSpec>,
    /// Keep a point only where every expression holds, e.g. `parallel.tp * parallel.pp <= 16`,
    /// `cluster.gpu != "A100"`; keys are resolved scenario keys, and `gpus` the GPU count.
    #[serde(default)]
    pub filter: Option<Filters>,
}

/// Schema of `base`: a path or an inline scenario.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum BaseSchema {
    /// Path to a scenario file, relative to the sweep file.
    Path(String),
    /// An inline scenario.
    Inline(Box<Scenario>),
}

/// Schema of `grid` / `zip`: dotted scenario key -> a non-empty list of values.
struct AxisLists;

impl JsonSchema for AxisLists {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AxisLists".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "Dotted scenario key (as in `--set`, e.g. `parallel.tp`) -> a non-empty list of its values.",
            "additionalProperties": { "type": "array", "minItems": 1 },
        })
    }
}

/// The JSON Schema of a sweep file (`llmsim schema --sweep`); draft-07, as the scenario's.
pub fn sweep_schema() -> schemars::Schema {
    let mut s = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<SweepSpec>();
    s.insert("title".into(), "llmsim sweep".into());
    s
}

/// One experiment of a sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// Position in the full expansion (before filtering): stable across re-runs.
    pub index: u64,
    /// The axis values of this point, in axis order.
    pub axes: Vec<(String, Value)>,
    /// Hash of the resolved scenario (its identity in the results).
    pub key: String,
    /// The scenario tree with the point's overrides (what a remote worker needs).
    pub tree: Value,
    /// Where the scenario's relative paths resolve.
    pub base_dir: PathBuf,
    /// The parsed scenario, or why this point is invalid.
    pub scenario: Result<Scenario, String>,
}

/// Most points one sweep expands to (before filtering): each point holds its scenario in memory.
pub const MAX_POINTS: u64 = 100_000;

/// An expanded sweep.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The sweep's name.
    pub name: String,
    /// Hash of the spec as resolved (name, base after `set`, axes, random draws, filters): the
    /// results directory records it, so a different spec is not mixed into it by mistake.
    pub fingerprint: String,
    /// The swept keys, in the spec's order.
    pub axes: Vec<String>,
    /// The points to run, after filtering and de-duplication.
    pub points: Vec<Point>,
    /// Points the filter dropped.
    pub filtered: u64,
    /// Points whose resolved scenario equals an earlier point's (kept once).
    pub duplicates: u64,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> SweepError {
    SweepError::Spec {
        field: field.into(),
        message: message.into(),
    }
}

/// FNV-1a, 64 bits: a stable hash (std's hasher may change between Rust versions).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The identity of a scenario: a hash of its resolved form (defaults filled in, name left out).
pub fn scenario_key(s: &Scenario) -> String {
    let mut s = s.clone();
    s.name.clear();
    let text = serde_json::to_string(&s).unwrap_or_default();
    format!("{:016x}", fnv1a(text.as_bytes()))
}

fn tree_key(v: &Value) -> String {
    format!("{:016x}", fnv1a(serde_json::to_string(v).unwrap_or_default().as_bytes()))
}

fn axis_lists(m: &Mapping, block: &str) -> Result<Vec<(String, Vec<Value>)>, SweepError> {
    m.iter()
        .map(|(k, v)| {
            let key = k
                .as_str()
                .ok_or_else(|| err(block, "axis names are dotted scenario keys, e.g. parallel.tp"))?;
            let Value::Sequence(vals) = v else {
                return Err(err(format!("{block}.{key}"), "expected a list of values"));
            };
            if vals.is_empty() {
                return Err(err(format!("{block}.{key}"), "empty list"));
            }
            Ok((key.to_string(), vals.clone()))
        })
        .collect()
}

/// Checks that the sweep's point count (grid x zip x random) is at most [`MAX_POINTS`], before
/// any point is built.
fn check_size(grid: &[(String, Vec<Value>)], zip: &[(String, Vec<Value>)], samples: Option<u32>) -> Result<(), SweepError> {
    let fix = "split the sweep into several (e.g. one per value of an axis) or give the axes fewer values";
    // Zero draws would leave no row to take the axis names from (fuzzing found the panic).
    if samples == Some(0) {
        return Err(err(
            "random.samples",
            "must be at least 1 (the number of draws of the random axes); leave `random` out for none",
        ));
    }
    if let Some(n) = samples
        && u64::from(n) > MAX_POINTS
    {
        return Err(err(
            "random.samples",
            format!("{n} samples are over the limit of {MAX_POINTS} points per sweep; {fix}"),
        ));
    }
    let sizes: Vec<String> = grid.iter().map(|(k, v)| format!("{k}: {}", v.len())).collect();
    let g = grid.iter().try_fold(1u64, |acc, (_, v)| acc.checked_mul(v.len() as u64));
    if g.is_none_or(|g| g > MAX_POINTS) {
        return Err(err(
            "grid",
            format!(
                "{} points ({}) are over the limit of {MAX_POINTS} points per sweep; {fix}",
                g.map_or_else(|| "more than 2^64".to_string(), |g| g.to_string()),
                sizes.join(" x ")
            ),
        ));
    }
    let z = zip.first().map_or(1, |(_, v)| v.len() as u64);
    let total = g
        .unwrap_or(u64::MAX)
        .saturating_mul(z)
        .saturating_mul(u64::from(samples.unwrap_or(1)));
    if total > MAX_POINTS {
        return Err(err(
            "grid x zip x random",
            format!("{total} points are over the limit of {MAX_POINTS} points per sweep; {fix}"),
        ));
    }
    Ok(())
}

/// Checks that a sweep's name is one plain path component: it names the results directory
/// (`runs/<name>/`), which must stay under the output root.
fn check_name(name: &str) -> Result<(), SweepError> {
    use std::path::Component;
    let mut parts = Path::new(name).components();
    let plain = matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None));
    if !plain || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(err(
            "name",
            format!(
                "{name:?} is not a plain directory name (the results go to runs/<name>/); \
                 use letters, digits, '-' and '_', without '/', '\\' or a leading '.'"
            ),
        ));
    }
    Ok(())
}

fn number_value(x: f64, suffix: &Option<String>, integer: bool) -> Value {
    match suffix {
        Some(s) if integer => Value::String(format!("{}{s}", x as i64)),
        Some(s) => Value::String(format!("{x}{s}")),
        None if integer => Value::Number((x as i64).into()),
        None => Value::Number(x.into()),
    }
}

fn draw(d: &Dist, rng: &mut SimRng, key: &str) -> Result<Value, SweepError> {
    let field = format!("random.axes.{key}");
    let given = [d.choice.is_some(), d.uniform.is_some(), d.log_uniform.is_some(), d.int.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(err(field, "give exactly one of choice, uniform, log_uniform, int"));
    }
    if let Some(c) = &d.choice {
        if c.is_empty() {
            return Err(err(field, "empty choice"));
        }
        return Ok(c[rng.below(c.len() as u64) as usize].clone());
    }
    if let Some([lo, hi]) = d.uniform {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(err(field, format!("uniform [{lo}, {hi}]: low must be <= high")));
        }
        return Ok(number_value(lo + (hi - lo) * rng.unit_f64(), &d.suffix, false));
    }
    if let Some([lo, hi]) = d.log_uniform {
        if !(lo > 0.0 && lo <= hi) {
            return Err(err(field, format!("log_uniform [{lo}, {hi}]: need 0 < low <= high")));
        }
        let x = (lo.ln() + (hi.ln() - lo.ln()) * rng.unit_f64()).exp();
        return Ok(number_value(x, &d.suffix, false));
    }
    let [lo, hi] = d.int.expect("one is given");
    if lo > hi {
        return Err(err(field, format!("int [{lo}, {hi}]: low must be <= high")));
    }
    let x = lo + rng.below((hi - lo + 1) as u64) as i64;
    Ok(number_value(x as f64, &d.suffix, true))
}

impl SweepSpec {
    /// Reads a sweep file.
    ///
    /// # Errors
    /// Unreadable file, YAML errors, unknown keys.
    pub fn load(path: &Path) -> Result<(SweepSpec, PathBuf), SweepError> {
        let text = std::fs::read_to_string(path).map_err(|e| err(path.display().to_string(), e.to_string()))?;
        let mut spec = Self::from_yaml(&text)?;
        if spec.name.is_empty() {
            spec.name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("sweep").to_string();
        }
        Ok((spec, path.parent().map(Path::to_path_buf).unwrap_or_default()))
    }

    /// Parses sweep YAML (or JSON) text.
    ///
    /// # Errors
    /// YAML errors, unknown keys.
    pub fn from_yaml(text: &str) -> Result<SweepSpec, SweepError> {
        llmsim_sim::yaml::parse_typed(text).map_err(|e| match e {
            YamlError::Typed { path, message } if !path.is_empty() => err(path, message),
            other => err("sweep", other.to_string()),
        })
    }

    /// Expands the spec into points; `dir` is the spec file's directory.
    ///
    /// # Errors
    /// A malformed spec (axes, filter syntax, an unreadable base). A point that does not make a
    /// valid scenario is not an error here: it is a point with `scenario: Err(..)`.
    pub fn expand(&self, dir: &Path) -> Result<Plan, SweepError> {
        let (mut base, base_dir, base_name) = match &self.base {
            Value::String(p) => {
                let path = dir.join(p);
                let text = std::fs::read_to_string(&path).map_err(|e| err("base", format!("{}: {e}", path.display())))?;
                let v: Value = llmsim_sim::yaml::parse(&text).map_err(|e| err("base", format!("{}: {e}", path.display())))?;
                let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
                (v, path.parent().map(Path::to_path_buf).unwrap_or_default(), name)
            }
            Value::Mapping(_) => (
                self.base.clone(),
                self.base_dir.clone().unwrap_or_else(|| dir.to_path_buf()),
                self.name.clone(),
            ),
            _ => return Err(err("base", "a scenario file path or an inline scenario map")),
        };
        apply_sets(&mut base, &self.set).map_err(|e| match e {
            // `--set parallel.tp` -> `set parallel.tp`: the spec's key.
            SimError::Scenario { field, message } => err(field.replacen("--set", "set", 1), message),
            other => err("set", other.to_string()),
        })?;
        let name = if self.name.is_empty() { base_name } else { self.name.clone() };
        if !name.is_empty() {
            check_name(&name)?;
        }
        let grid = axis_lists(&self.grid, "grid")?;
        let zip = axis_lists(&self.zip, "zip")?;
        if let Some((_, first)) = zip.first()
            && let Some((k, other)) = zip.iter().find(|(_, l)| l.len() != first.len())
        {
            return Err(err(
                format!("zip.{k}"),
                format!(
                    "has {} values but the first zip axis has {}; zip axes go together",
                    other.len(),
                    first.len()
                ),
            ));
        }
        let filters: Vec<(String, Expr)> = match &self.filter {
            None => Vec::new(),
            Some(Filters::One(s)) => vec![s.clone()],
            Some(Filters::Many(v)) => v.clone(),
        }
        .into_iter()
        .map(|s| {
            filter::parse(&s)
                .map(|e| (s.clone(), e))
                .map_err(|m| err("filter", format!("{s:?}: {m}")))
        })
        .collect::<Result<_, _>>()?;
        check_size(&grid, &zip, self.random.as_ref().map(|r| r.samples))?;
        let fingerprint = {
            let random = self.random.as_ref().map(|r| (r.samples, r.seed, &r.axes));
            let texts: Vec<&String> = filters.iter().map(|(t, _)| t).collect();
            let text = serde_json::to_string(&(&name, &base, &self.grid, &self.zip, random, texts)).unwrap_or_default();
            format!("{:016x}", fnv1a(text.as_bytes()))
        };

        // Rows of each block.
        let mut grid_rows: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        for (k, vals) in &grid {
            let mut next = Vec::with_capacity(grid_rows.len() * vals.len());
            for row in &grid_rows {
                for v in vals {
                    let mut r = row.clone();
                    r.push((k.clone(), v.clone()));
                    next.push(r);
                }
            }
            grid_rows = next;
        }
        let zip_rows: Vec<Vec<(String, Value)>> = match zip.first() {
            None => vec![Vec::new()],
            Some((_, first)) => (0..first.len())
                .map(|i| zip.iter().map(|(k, l)| (k.clone(), l[i].clone())).collect())
                .collect(),
        };
        let random_rows: Vec<Vec<(String, Value)>> = match &self.random {
            None => vec![Vec::new()],
            Some(r) => {
                let mut rng = SimRng::seed(r.seed);
                let axes: Vec<(String, Dist)> = r
                    .axes
                    .iter()
                    .map(|(k, v)| {
                        let key = k.as_str().unwrap_or("?").to_string();
                        let d: Dist = llmsim_sim::yaml::from_value(v.clone()).map_err(|e| match e {
                            YamlError::Typed { path, message } if !path.is_empty() => err(format!("random.axes.{key}.{path}"), message),
                            other => err(format!("random.axes.{key}"), other.to_string()),
                        })?;
                        Ok((key, d))
                    })
                    .collect::<Result<_, SweepError>>()?;
                (0..r.samples)
                    .map(|_| axes.iter().map(|(k, d)| Ok((k.clone(), draw(d, &mut rng, k)?))).collect())
                    .collect::<Result<_, SweepError>>()?
            }
        };
        let mut axes: Vec<String> = Vec::new();
        for row in [&grid_rows[0], &zip_rows[0], &random_rows[0]] {
            for (k, _) in row {
                if axes.contains(k) {
                    return Err(err(k.clone(), "appears in more than one axis block"));
                }
                // An axis through a scalar of the base (`model.layers` where `model` is a
                // preset name) fails every point alike: a spec error.
                set_path(&mut base.clone(), k, Value::Null).map_err(|e| err(k.clone(), e.to_string()))?;
                axes.push(k.clone());
            }
        }

        let mut plan = Plan {
            name: name.clone(),
            fingerprint,
            axes,
            points: Vec::new(),
            filtered: 0,
            duplicates: 0,
        };
        let mut seen = std::collections::HashSet::new();
        let mut index = 0u64;
        for g in &grid_rows {
            for z in &zip_rows {
                for r in &random_rows {
                    let values: Vec<(String, Value)> = g.iter().chain(z).chain(r).cloned().collect();
                    let i = index;
                    index += 1;
                    let mut tree = base.clone();
                    for (k, v) in &values {
                        // Checked on the base above: every axis key leads through maps.
                        set_path(&mut tree, k, v.clone()).map_err(|e| err(k.clone(), e.to_string()))?;
                    }
                    let scenario = Scenario::from_value(tree.clone(), &base_dir).map(|mut s| {
                        if s.name.is_empty() {
                            s.name.clone_from(&name);
                        }
                        s
                    });
                    // The filter sees the resolved scenario (defaults filled in) where it parses.
                    let (key, resolved) = match &scenario {
                        Ok(s) => (scenario_key(s), serde_yaml_ng::to_value(s).unwrap_or(Value::Null)),
                        Err(_) => (tree_key(&tree), tree.clone()),
                    };
                    let gpus = scenario.as_ref().ok().and_then(|s| s.gpus().ok());
                    let extra = |k: &str| match (k, gpus) {
                        ("gpus", Some(g)) => Some(Val::Num(f64::from(g))),
                        _ => None,
                    };
                    let mut scenario = scenario.map_err(|e| {
                        let m = e.to_string();
                        if m.contains("missing field") && !values.is_empty() {
                            format!("{m} (an axis sets a key inside a section the base leaves to its defaults: write that section out in the base)")
                        } else {
                            m
                        }
                    });
                    let mut keep = true;
                    for (text, e) in &filters {
                        match e.eval(&resolved, &extra).and_then(|v| filter::truth(&v)) {
                            Ok(true) => {}
                            Ok(false) => {
                                keep = false;
                                break;
                            }
                            Err(m) => {
                                if scenario.is_ok() {
                                    scenario = Err(format!("filter {text:?}: {m}"));
                                }
                            }
                        }
                    }
                    if !keep {
                        plan.filtered += 1;
                        continue;
                    }
                    if !seen.insert(key.clone()) {
                        plan.duplicates += 1;
                        continue;
                    }
                    plan.points.push(Point {
                        index: i,
                        axes: values,
                        key,
                        tree,
                        base_dir: base_dir.clone(),
                        scenario,
                    });
                }
            }
        }
        same_failure(&plan)?;
        Ok(plan)
    }
}

/// A spec-level error: every point is invalid, for one and the same reason (an axis or a filter
/// over an unknown key, a base that is not a scenario). Nothing could run, so the spec is wrong.
fn same_failure(plan: &Plan) -> Result<(), SweepError> {
    let mut errors = plan.points.iter().map(|p| p.scenario.as_ref().err());
    let Some(Some(first)) = errors.next() else { return Ok(()) };
    if errors.all(|e| e == Some(first)) {
        let n = plan.points.len();
        let what = if n == 1 {
            "the one point".to_string()
        } else {
            format!("all {n} points")
        };
        return Err(err(
            "points",
            format!("{what} fail for the same reason, so nothing can run: {first}; fix the base, the axis or the filter it names"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "base: { model: gpt3-13b, cluster: { gpus: 64 }, parallel: { tp: 2 } }\n";

    /// Fuzzing regression (sweep target): `samples: 0` panicked (index out of bounds).
    #[test]
    fn zero_random_samples_is_an_error_not_a_panic() {
        let spec = SweepSpec::from_yaml(&format!(
            "{BASE}grid: {{ parallel.tp: [1, 2] }}\nrandom: {{ samples: 0, axes: {{ training.micro_batch_size: {{ choice: [1, 2] }} }} }}\n"
        ))
        .unwrap();
        let e = spec.expand(Path::new(".")).unwrap_err().to_string();
        assert!(e.contains("random.samples") && e.contains("at least 1"), "{e}");
    }

    #[test]
    fn grid_zip_random_and_filter() {
        let spec = SweepSpec::from_yaml(&format!(
            "{BASE}grid: {{ parallel.tp: [1, 2, 4], parallel.pp: [1, 2] }}\nzip: {{ cluster.gpu: [H100, H200], seed: [1, 2] }}\nrandom: {{ samples: 3, axes: {{ training.micro_batch_size: {{ choice: [1, 2] }}, compute.overlap_slowdown: {{ uniform: [1.0, 1.5] }} }} }}\nfilter: 'parallel.tp * parallel.pp <= 4'\n"
        ))
        .unwrap();
        let p = spec.expand(Path::new(".")).unwrap();
        assert_eq!(p.axes.len(), 6);
        // 3 x 2 grid, 2 zip rows, 3 random rows; tp4 pp2 (2 x 3 points... per zip row) filtered.
        let total = 3 * 2 * 2 * 3;
        let dropped = 2 * 3;
        assert_eq!(p.filtered, dropped);
        assert_eq!(p.points.len() as u64 + p.duplicates, total - dropped);
        for pt in &p.points {
            let s = pt.scenario.as_ref().unwrap();
            assert!(s.parallel.tp * s.parallel.pp <= 4);
            assert!((1.0..=1.5).contains(&s.compute.overlap_slowdown));
            let gpu = &pt.axes.iter().find(|(k, _)| k == "cluster.gpu").unwrap().1;
            let seed = if gpu.as_str() == Some("H100") { 1 } else { 2 };
            assert_eq!(s.seed, seed, "zip axes go together");
        }
        // Same spec, same points and keys (seeded).
        let q = spec.expand(Path::new(".")).unwrap();
        let keys = |p: &Plan| p.points.iter().map(|x| x.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&p), keys(&q));
    }

    #[test]
    fn invalid_points_are_kept_with_their_error() {
        let spec = SweepSpec::from_yaml(&format!("{BASE}grid: {{ parallel.tp: [2, abc], parallel.tpp: [1] }}\n")).unwrap();
        let p = spec.expand(Path::new(".")).unwrap();
        assert_eq!(p.points.len(), 2);
        for pt in &p.points {
            let e = pt.scenario.as_ref().unwrap_err();
            assert!(e.contains("tpp") || e.contains("\"abc\""), "{e}");
        }
    }

    #[test]
    fn spec_errors_name_the_field() {
        let e = SweepSpec::from_yaml(&format!("{BASE}zip: {{ parallel.tp: [1, 2], parallel.pp: [1] }}\n"))
            .unwrap()
            .expand(Path::new("."))
            .unwrap_err();
        assert!(e.to_string().contains("zip.parallel.pp"), "{e}");
        let e = SweepSpec::from_yaml(&format!("{BASE}filter: 'parallel.tp <'\n"))
            .unwrap()
            .expand(Path::new("."))
            .unwrap_err();
        assert!(e.to_string().contains("filter"), "{e}");
        assert!(SweepSpec::from_yaml(&format!("{BASE}grids: {{}}\n")).is_err());
    }

    #[test]
    fn equal_scenarios_share_a_key() {
        // tp given as 2 in the base and as an axis value 2: one point.
        let spec = SweepSpec::from_yaml(&format!("{BASE}grid: {{ parallel.tp: [2, 2, 4] }}\n")).unwrap();
        let p = spec.expand(Path::new(".")).unwrap();
        assert_eq!((p.points.len(), p.duplicates), (2, 1));
    }

    fn expand_err(extra: &str) -> String {
        SweepSpec::from_yaml(&format!("{BASE}{extra}"))
            .unwrap()
            .expand(Path::new("."))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn spec_level_failures_are_errors() {
        // A filter that divides by zero fails on every point: an error, not an empty sweep.
        let e = expand_err("grid: { parallel.tp: [1, 2] }\nfilter: 'parallel.tp / 0 < 1'\n");
        assert!(e.contains("division by zero") && e.contains("all 2 points"), "{e}");
        // A filter or an axis over an unknown key.
        let e = expand_err("grid: { parallel.tp: [1, 2] }\nfilter: 'parallel.tpp > 1'\n");
        assert!(e.contains("parallel.tpp"), "{e}");
        let e = expand_err("grid: { parallel.tpp: [1, 2] }\n");
        assert!(e.contains("tpp") && e.contains("same reason"), "{e}");
        // 10,000 nested parentheses: a clear error, no stack overflow.
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        let e = expand_err(&format!("filter: '{deep} == 1'\n"));
        assert!(e.contains("filter") && e.contains("too deeply nested"), "{e}");
    }

    #[test]
    fn huge_sweeps_are_refused_before_they_are_built() {
        let e = expand_err("random: { samples: 4294967295, axes: { seed: { int: [1, 9] } } }\n");
        assert!(e.contains("random.samples") && e.contains(&MAX_POINTS.to_string()), "{e}");
        // 10^10 points: ten axes of ten values.
        let axes: Vec<String> = (0..10).map(|i| format!("k{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]")).collect();
        let e = expand_err(&format!("grid: {{ {} }}\n", axes.join(", ")));
        assert!(e.contains("grid") && e.contains("10000000000 points"), "{e}");
        // Past u64: named too.
        let axes: Vec<String> = (0..25).map(|i| format!("k{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]")).collect();
        assert!(expand_err(&format!("grid: {{ {} }}\n", axes.join(", "))).contains("more than 2^64"));
        // Each block small, the product large.
        let e = expand_err(
            "grid: { parallel.tp: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }\nrandom: { samples: 20000, axes: { seed: { int: [1, 9] } } }\n",
        );
        assert!(e.contains("grid x zip x random"), "{e}");
    }

    #[test]
    fn names_stay_one_directory() {
        for bad in ["../escape", "a/b", "..", "/abs", ".hidden", "a\\\\b"] {
            let e = expand_err(&format!("name: '{bad}'\n"));
            assert!(e.contains("name") && e.contains("plain directory name"), "{bad}: {e}");
        }
        let p = SweepSpec::from_yaml(&format!("{BASE}name: tp-sweep_1\n"))
            .unwrap()
            .expand(Path::new("."));
        assert_eq!(p.unwrap().name, "tp-sweep_1");
    }

    #[test]
    fn the_fingerprint_follows_the_spec() {
        let fp = |extra: &str| {
            SweepSpec::from_yaml(&format!("{BASE}{extra}"))
                .unwrap()
                .expand(Path::new("."))
                .unwrap()
                .fingerprint
        };
        let a = fp("grid: { parallel.tp: [1, 2] }\n");
        assert_eq!(a, fp("grid: { parallel.tp: [1, 2] }  # a comment\n"));
        assert_ne!(a, fp("grid: { parallel.tp: [1, 4] }\n"));
        assert_ne!(a, fp("grid: { parallel.tp: [1, 2] }\nset: [seed=3]\n"));
        assert_ne!(a, fp("grid: { parallel.tp: [1, 2] }\nfilter: 'parallel.tp > 0'\n"));
    }
}
