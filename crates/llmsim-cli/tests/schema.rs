//! `llmsim schema` (issue 35): the JSON Schema derived from the scenario and sweep types accepts
//! every file llmsim ships (examples/, bench/, the golden scenarios) and rejects what llmsim rejects; the committed reference page and
//! schemas under docs/reference/ are up to date with the code.
//!
//! Validation runs in Python's `jsonschema` (a pure-Python package; the Rust `jsonschema` crate
//! would add a minute of compilation to every CI run). The interpreter is `$LLMSIM_PYTHON`
//! (`scripts/test.sh` points it at its venv, where it installs `jsonschema`); with the variable
//! unset the validation tests fall back to `python3` and skip, saying why, when `jsonschema` is
//! not importable there. With the variable set, a missing package is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use llmsim_cli::schema_cmd;
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const VALIDATE: &str = r#"
import json, sys
import jsonschema
req = json.load(sys.stdin)
out = []
for name, schema in req["schemas"].items():
    jsonschema.Draft7Validator.check_schema(schema)
validators = {n: jsonschema.Draft7Validator(s) for n, s in req["schemas"].items()}
for item in req["instances"]:
    errs = validators[item["schema"]].iter_errors(item["instance"])
    out.append(sorted("/".join(map(str, e.absolute_path)) + ": " + e.message for e in errs))
json.dump(out, sys.stdout)
"#;

/// Validates each `(schema name, instance)`; the error messages of each, or `None` when the
/// validator is not available (and `$LLMSIM_PYTHON` is unset).
fn validate(schemas: &Value, instances: &[(&str, Value)]) -> Option<Vec<Vec<String>>> {
    let strict = std::env::var_os("LLMSIM_PYTHON").is_some();
    let python = std::env::var_os("LLMSIM_PYTHON").unwrap_or_else(|| "python3".into());
    let probe = Command::new(&python).args(["-c", "import jsonschema"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or_default().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                !strict,
                "LLMSIM_PYTHON={python:?} cannot import jsonschema ({why}); pip install jsonschema"
            );
            eprintln!("skipped: {python:?} cannot import jsonschema ({why}); pip install jsonschema");
            return None;
        }
    }
    let req = json!({
        "schemas": schemas,
        "instances": instances.iter().map(|(s, i)| json!({"schema": s, "instance": i})).collect::<Vec<_>>(),
    });
    let mut child = Command::new(&python)
        .args(["-c", VALIDATE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    serde_json::to_writer(child.stdin.take().expect("stdin"), &req).expect("request written");
    let out = child.wait_with_output().expect("python finishes");
    assert!(out.status.success(), "validator failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).expect("validator output is JSON"))
}

fn schemas() -> Value {
    json!({ "scenario": schema_cmd::scenario_schema(), "sweep": schema_cmd::sweep_schema() })
}

fn yaml_to_json(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("YAML parses")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("readable").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

/// Validation scenarios written from a publication that llmsim cannot express, with the field
/// they fail on (`bench/validation.sh` shows them as "not expressible").
const NOT_EXPRESSIBLE: &[(&str, &str)] = &[
    // None since 2026-11-27: NeMo Automodel's Nemotron V3 Super (LatentMoE,
    // bench/validation-fourth-set.md) was the last; `model.moe_latent_size` expresses it.
];

#[test]
fn every_shipped_yaml_validates_and_loads() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["examples", "bench", "tests", "crates/llmsim-sim/tests/golden"] {
        if root.join(dir).is_dir() {
            yaml_files(&root.join(dir), &mut files);
        }
    }
    let mut instances = Vec::new();
    let mut names = Vec::new();
    let mut astra = 0;
    let mut ns3_sweeps = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let v = yaml_to_json(&text);
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        // An ASTRA-sim network YAML is another tool's format (`llmsim run --workload ... FILE`),
        // not a scenario: llmsim converts it, and no llmsim schema describes it.
        if llmsim_sim::astra::to_scenario_yaml(&text).expect("astra check").is_some() {
            astra += 1;
            continue;
        }
        // A packet-level CC sweep (`ns3:` instead of `base:`) is read by the Python package's
        // batch engine (`llmsim.batch.sweep`, which checks its own fields: the bundled one is
        // planned in tests/python/test_batch_sweep.py), not by these schemas.
        if v.get("ns3").is_some() && v.get("base").is_none() {
            ns3_sweeps += 1;
            continue;
        }
        let kind = if v.get("base").is_some() { "sweep" } else { "scenario" };
        // Every file must also be accepted by llmsim itself, so a permissive schema cannot hide
        // a file that no longer loads.
        let loaded = match kind {
            "sweep" => llmsim_sweep::SweepSpec::load(f).map(drop).map_err(|e| e.to_string()),
            _ if v.get("model").is_some() || v.get("dlrm").is_some() => {
                llmsim_sim::Scenario::load(f, &[]).map(drop).map_err(|e| e.to_string())
            }
            _ => llmsim_sim::Scenario::load_cluster(f, &[]).map(drop).map_err(|e| e.to_string()),
        };
        // A validation row llmsim cannot express yet is kept as written from its source and
        // must fail on exactly the missing feature (remove it here once llmsim has it).
        if let Some((_, field)) = NOT_EXPRESSIBLE.iter().find(|(path, _)| rel == *path) {
            let err = loaded.expect_err("a not-expressible row loads: remove it from NOT_EXPRESSIBLE");
            assert!(err.contains(field), "{rel} fails on something else than `{field}`: {err}");
            continue;
        }
        assert!(loaded.is_ok(), "{rel} does not load: {}", loaded.unwrap_err());
        instances.push((kind, v));
        names.push(rel);
    }
    assert!(
        instances.len() >= 40,
        "found only {} YAML files under examples/ and bench/",
        instances.len()
    );
    assert_eq!(
        astra, 1,
        "expected one ASTRA-sim network file (examples/interop/astra-network-128npu.yaml)"
    );
    assert_eq!(
        ns3_sweeps, 1,
        "expected one packet-level sweep file (examples/ns3/sweep-dcqcn.yaml)"
    );
    let Some(results) = validate(&schemas(), &instances) else { return };
    let bad: Vec<String> = names
        .iter()
        .zip(&results)
        .filter(|(_, e)| !e.is_empty())
        .map(|(n, e)| format!("{n}:\n    {}", e.join("\n    ")))
        .collect();
    assert!(bad.is_empty(), "files the schema rejects:\n{}", bad.join("\n"));
}

/// The schema and the parser agree, both ways, on edits of a valid scenario: typos and bad
/// values are rejected by both; serde's aliases are accepted by both.
#[test]
fn schema_rejects_what_llmsim_rejects() {
    let base = "model: gpt3-13b\ncluster: { gpus: 16 }\n";
    let cases: &[(&str, bool)] = &[
        ("", true),
        ("parallel: { tpp: 2 }\n", false),
        ("parallel: { tensor_model_parallel_size: 2, seq_length: 1 }\n", false),
        ("parallel: { tensor_model_parallel_size: 2, schedule: 1F1B }\n", true),
        ("parallel: { tp: two }\n", false),
        ("training: { seq_len: 4096, dtype: bf16 }\n", true),
        ("training: { dtype: bf17 }\n", false),
        ("network: { backend: packet, cc: hpcc, fast_forward: { memo: true } }\n", true),
        ("network: { backend: ns3 }\n", false),
        ("network: { fast_forward: { thetaa: 0.1 } }\n", false),
        ("clutser: {}\n", false),
        ("collectives: { algo: ring, proto: LL128, channels: 8 }\n", true),
        ("collectives: { algo: rings }\n", false),
        ("output: { trace_ranks: all }\n", true),
        ("compute: { overlap_slowdown: fast }\n", false),
        ("dlrm: { dtype: fp16 }\n", true),
    ];
    let cluster_cases: &[(&str, bool)] = &[
        (
            "topology: { kind: rail-optimized, nic: { bandwidth: 200Gbps }, oversubscription: 2.0 }",
            true,
        ),
        ("topology: { kind: rail-fat-tree, nic: { bandwidth: 400Gbs } }", false),
        ("topology: { kind: fat-tree, k: 8, host_link: { latency: 1us } }", true),
        ("topology: { kind: fat-tree, host_link: { latency: 1 } }", false),
        ("topology: { kind: spine-leaf, spines: 4, servers_per_segment: 2 }", false),
        ("topology: { kind: torus }", true),
        ("topology: { kind: hypercube }", false),
        ("gpu: { name: X, base: H100, memory: 96GiB, hbm_bandwidth: 4TB/s }", true),
        ("gpu: { name: X, base: H100, memroy: 96GiB }", false),
        ("gpu: { name: X, base: H100, memory: 96 }", false),
        ("nvlink_bandwidth: 900GBps", true),
        ("nvlink_latency: 250ns", true),
        ("nvlink_latency: 250", false),
    ];
    let mut texts: Vec<(String, bool)> = cases.iter().map(|(e, ok)| (format!("{base}{e}"), *ok)).collect();
    for (e, ok) in cluster_cases {
        texts.push((format!("model: gpt3-13b\ncluster: {{ gpus: 16, {e} }}\n"), *ok));
    }
    // The dlrm case replaces the model.
    for (t, _) in texts.iter_mut() {
        if t.contains("dlrm:") {
            *t = t.replace("model: gpt3-13b\n", "");
        }
    }
    for (t, ok) in &texts {
        let parsed = llmsim_sim::Scenario::from_yaml(t, &[], Path::new(".")).is_ok();
        assert_eq!(parsed, *ok, "llmsim {} {t:?}", if parsed { "accepts" } else { "rejects" });
    }
    let instances: Vec<(&str, Value)> = texts.iter().map(|(t, _)| ("scenario", yaml_to_json(t))).collect();
    let Some(results) = validate(&schemas(), &instances) else { return };
    for ((t, ok), errs) in texts.iter().zip(&results) {
        assert_eq!(errs.is_empty(), *ok, "the schema disagrees with llmsim on {t:?}: {errs:?}");
    }
}

/// The unit patterns of the schema accept exactly what `FromStr` accepts, on samples.
#[test]
fn unit_patterns_match_the_parsers() {
    use llmsim_core::{Bandwidth, Bytes, Power, SimTime};
    let samples = [
        "400Gbps", "400 Gbps", "1.5Tbps", "100Mbps", "900GBps", "4TB/s", "50GB/s", "10Gb/s", "1Gibps", "400Gbs", "400", "Gbps", "4tb/s",
        "1us", "2.5ms", "10ps", "1s", "0.5 ns", "3µs", "1 sec", "us", "-1us", "1e3us", "32MiB", "32MB", "4096", "4096B", "1.5KiB", "1kB",
        "96GiB", "1GB", "32Mib", "32mb", "1_000us", "1GB ", "500W", "500 W", "1.2kW", "750mW", "500", "500w", "-500W", "W", "5e2W",
    ];
    let defs = schema_cmd::scenario_schema()["definitions"].clone();
    let mut schemas = serde_json::Map::new();
    for name in ["Time", "Size", "Bandwidth", "Power"] {
        schemas.insert(
            name.into(),
            json!({ "definitions": defs, "allOf": [{ "$ref": format!("#/definitions/{name}") }] }),
        );
    }
    type Parser = fn(&str) -> bool;
    let parsers: [(&str, Parser); 4] = [
        ("Time", |s| s.parse::<SimTime>().is_ok()),
        ("Size", |s| s.parse::<Bytes>().is_ok()),
        ("Bandwidth", |s| s.parse::<Bandwidth>().is_ok()),
        ("Power", |s| s.parse::<Power>().is_ok()),
    ];
    let mut instances = Vec::new();
    let mut expected = Vec::new();
    for (name, parse) in parsers {
        for s in samples {
            instances.push((name, json!(s)));
            expected.push((name, s, parse(s)));
        }
    }
    let accepted: usize = expected.iter().filter(|e| e.2).count();
    assert!(accepted >= 15, "the samples should hold valid values of each unit");
    let Some(results) = validate(&Value::Object(schemas), &instances) else {
        return;
    };
    let wrong: Vec<String> = expected
        .iter()
        .zip(&results)
        .filter(|((_, _, ok), errs)| errs.is_empty() != *ok)
        .map(|((name, s, ok), _)| format!("{name} {s:?}: parser {}", if *ok { "accepts" } else { "rejects" }))
        .collect();
    assert!(wrong.is_empty(), "schema pattern and parser disagree:\n{}", wrong.join("\n"));
}

/// schemars does not see serde's `alias` attributes; the types add them to their schemas by hand
/// (`llmsim_core::schema`). This keeps the two lists together: every alias in the sources of the
/// scenario and sweep types must be in the schema.
#[test]
fn every_serde_alias_is_in_the_schema() {
    let sources = [
        "crates/llmsim-sim/src/scenario.rs",
        "crates/llmsim-workload/src/config.rs",
        "crates/llmsim-workload/src/model.rs",
        "crates/llmsim-workload/src/dlrm.rs",
        "crates/llmsim-topo/src/spec.rs",
        "crates/llmsim-sweep/src/spec.rs",
        "crates/llmsim-compute/src/custom.rs",
    ];
    let schema_text = format!("{}{}", schema_cmd::scenario_schema(), schema_cmd::sweep_schema());
    let mut found = 0;
    for src in sources {
        let text = std::fs::read_to_string(root().join(src)).unwrap();
        for part in text.split("alias = \"").skip(1) {
            let alias = part.split('"').next().unwrap_or_default();
            found += 1;
            assert!(
                schema_text.contains(&format!("\"{alias}\"")),
                "serde alias {alias:?} of {src} is not in the schema: add it in the type's #[schemars(transform = ...)]"
            );
        }
    }
    assert!(found >= 15, "found only {found} aliases: did the sources move?");
}

#[test]
fn committed_reference_is_up_to_date() {
    let dir = root().join("docs/reference");
    let mut stale = Vec::new();
    for (name, text) in schema_cmd::files() {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(format!("docs/reference/{name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} out of date with the scenario and sweep types; regenerate with\n    {}",
        stale.join(", "),
        schema_cmd::REGENERATE
    );
}

#[test]
fn schema_command_prints_the_schemas() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llmsim")).args(args).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let scenario: Value = serde_json::from_str(&run(&["schema"])).unwrap();
    assert_eq!(scenario, schema_cmd::scenario_schema());
    assert!(scenario["properties"]["cluster"].is_object() && scenario["additionalProperties"] == false);
    let sweep: Value = serde_json::from_str(&run(&["schema", "--sweep"])).unwrap();
    assert!(sweep["properties"]["grid"].is_object());
    let md = run(&["schema", "--markdown"]);
    assert!(
        md.contains("| `oversubscription` |") && md.contains("`servers_per_segment`"),
        "{md}"
    );
}
