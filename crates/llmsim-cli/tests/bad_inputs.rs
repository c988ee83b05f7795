//! The bad-input catalogue (issue 30): each case runs the built `llmsim` binary on a tiny hostile
//! input and asserts a clean failure: a non-zero exit that is not a panic's 101, no "panicked"
//! on stderr, and a message naming the field or key (and the line, for line formats).
//!
//! Grow it whenever a bad input is found. A case is a set of files written to its own folder,
//! the arguments (`{dir}` is that folder), and the substrings its stderr must hold.
//! `BAD_INPUTS_VERBOSE=1 cargo test -p llmsim-cli --test bad_inputs -- --nocapture` prints
//! every case's message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_llmsim");

/// A scenario that runs in milliseconds: the base of the `--set` and file cases.
const SCENARIO: &str = "\
model: gpt3-13b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 8, pp: 1 }
cluster: { gpus: 16, gpus_per_node: 8 }
network: { backend: analytical }
";

/// A scenario whose model comes from `config.json` next to it.
const HF_SCENARIO: &str = "\
model: { config: config.json }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 1 }
cluster: { gpus: 8, gpus_per_node: 8 }
network: { backend: analytical }
";

/// A valid HF config; the cases replace one of its lines.
const HF_CONFIG: &str = r#"{
  "hidden_size": 1024,
  "num_hidden_layers": 4,
  "num_attention_heads": 16,
  "num_key_value_heads": 16,
  "intermediate_size": 4096,
  "vocab_size": 32000
}"#;

/// A valid ns-3 experiment: two hosts under one switch, one flow.
const NS3_CONFIG: &str = "CC_MODE 1\nTOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n";
const NS3_TOPO: &str = "3 1 2\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n";
const NS3_FLOW: &str = "1\n0 1 3 100 1000 0.000001\n";

/// An ASTRA-sim network file.
const ASTRA: &str = "topology: [ Switch, Switch ]\nnpus_count: [ 8, 2 ]\nbandwidth: [ 419.1, 46.57 ]\nlatency: [ 250.0, 500.0 ]\n";

/// Nine levels of nine aliases after a padding list that raises serde_yaml_ng's own alias limit
/// (100 jumps per event): unguarded, this built 22 GB of values.
fn laughs(padding: usize) -> String {
    let mut s = format!("pad: [{}]\n", vec!["1"; padding].join(","));
    s += "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
    let mut prev = 'a';
    for c in "bcdefghi".chars() {
        s += &format!("{c}: &{c} [{}]\n", vec![format!("*{prev}"); 9].join(", "));
        prev = c;
    }
    s + "model: *i\n"
}

/// `llmsim sweep` on this spec (its `base: s.yaml` is [`SCENARIO`]).
fn sweep(name: &str, spec: &str, expect: &[&str]) -> Case {
    case(
        name,
        &[("s.yaml", SCENARIO), ("sweep.yaml", spec)],
        &["sweep", "{dir}/sweep.yaml", "--out", "{dir}/out", "--dry-run"],
        expect,
    )
}

struct Case {
    name: String,
    files: Vec<(&'static str, String)>,
    args: Vec<String>,
    expect: Vec<String>,
}

fn case(name: &str, files: &[(&'static str, &str)], args: &[&str], expect: &[&str]) -> Case {
    Case {
        name: name.to_string(),
        files: files.iter().map(|(p, t)| (*p, t.to_string())).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        expect: expect.iter().map(|s| s.to_string()).collect(),
    }
}

/// `llmsim run s.yaml` on this scenario text.
fn yaml(name: &str, text: &str, expect: &[&str]) -> Case {
    case(name, &[("s.yaml", text)], &["run", "{dir}/s.yaml"], expect)
}

/// `llmsim run` on [`SCENARIO`] with these `--set`s.
fn set(name: &str, sets: &[&str], expect: &[&str]) -> Case {
    let mut args = vec!["run", "{dir}/s.yaml"];
    for s in sets {
        args.extend(["--set", s]);
    }
    case(name, &[("s.yaml", SCENARIO)], &args, expect)
}

/// [`HF_SCENARIO`] with this `config.json`.
fn hf(name: &str, json: &str, expect: &[&str]) -> Case {
    case(
        name,
        &[("s.yaml", HF_SCENARIO), ("config.json", json)],
        &["run", "{dir}/s.yaml"],
        expect,
    )
}

/// [`HF_CONFIG`] with one field set to a raw JSON value.
fn hf_field(name: &str, field: &str, value: &str, expect: &[&str]) -> Case {
    let mut v: serde_json::Value = serde_json::from_str(HF_CONFIG).unwrap();
    v[field] = serde_json::from_str(value).unwrap();
    hf(name, &v.to_string(), expect)
}

/// `llmsim ns3 run` on these three files.
fn ns3(name: &str, config: &str, topo: &str, flow: &str, expect: &[&str]) -> Case {
    case(
        name,
        &[("config.txt", config), ("topo.txt", topo), ("flow.txt", flow)],
        &["ns3", "run", "{dir}/config.txt"],
        expect,
    )
}

/// [`NS3_CONFIG`] with one more line.
fn ns3_key(name: &str, line: &str, expect: &[&str]) -> Case {
    ns3(name, &format!("{NS3_CONFIG}{line}\n"), NS3_TOPO, NS3_FLOW, expect)
}

/// [`SCENARIO`] with `compute.efficiency` (or `database`) pointing at this CSV.
fn csv(name: &str, key: &str, text: &str, expect: &[&str]) -> Case {
    let sc = format!("{SCENARIO}compute: {{ {key}: t.csv }}\n");
    case(name, &[("s.yaml", &sc), ("t.csv", text)], &["run", "{dir}/s.yaml"], expect)
}

/// `llmsim run --workload simai:wl.txt astra.yaml` on this ASTRA-sim network file.
fn astra(name: &str, text: &str, expect: &[&str]) -> Case {
    case(
        name,
        &[("astra.yaml", text), ("wl.txt", "")],
        &["run", "--workload", "simai:{dir}/wl.txt", "{dir}/astra.yaml"],
        expect,
    )
}

fn catalogue() -> Vec<Case> {
    let mut c = vec![
        // --- Scenario YAML ---
        yaml("yaml-not-a-map", "- 1\n- 2\n", &["scenario", "expected a map"]),
        yaml("yaml-syntax", "model: [gpt3-13b\n", &["scenario", "line"]),
        yaml("yaml-empty", "", &["scenario"]),
        yaml(
            "yaml-unknown-section",
            &format!("{SCENARIO}clsuter: {{}}\n"),
            &["clsuter", "unknown section"],
        ),
        yaml(
            "yaml-unknown-key",
            &SCENARIO.replace("gpus: 16", "gpus: 16, gpu_count: 3"),
            &["cluster", "gpu_count"],
        ),
        yaml("yaml-no-model", &SCENARIO.replace("model: gpt3-13b\n", ""), &["model"]),
        yaml("yaml-unknown-preset", &SCENARIO.replace("gpt3-13b", "gpt5-13b"), &["gpt5-13b"]),
        yaml("yaml-tp-string", &SCENARIO.replace("tp: 8", "tp: two"), &["parallel", "two"]),
        yaml(
            "yaml-type-error-names-key-path",
            &SCENARIO.replace("tp: 8", "tp: x"),
            &["parallel.tp: invalid type: string \"x\""],
        ),
        yaml(
            "yaml-nested-type-error-names-key-path",
            &SCENARIO.replace("gpus_per_node: 8 }", "gpus_per_node: 8, topology: { kind: rail-fat-tree, nic: { bandwidth: [1] } } }"),
            &["cluster.topology"],
        ),
        yaml(
            "yaml-deep-flow-nesting",
            &format!("model: {}{}\n", "[".repeat(200_000), "]".repeat(200_000)),
            &["scenario", "nested more than 128 levels deep at line 1"],
        ),
        yaml("yaml-billion-laughs", &laughs(200_000), &["scenario", "expands to more than 1000000 values"]),
        yaml("yaml-tp-zero", &SCENARIO.replace("tp: 8", "tp: 0"), &["parallel.tp", "at least 1"]),
        yaml("yaml-tp-negative", &SCENARIO.replace("tp: 8", "tp: -8"), &["parallel", "-8"]),
        yaml(
            "yaml-tp-not-dividing-heads",
            &SCENARIO.replace("tp: 8", "tp: 16"),
            &["parallel.tp", "valid"],
        ),
        yaml(
            "yaml-tp-huge",
            &SCENARIO.replace("tp: 8", "tp: 18446744073709551615"),
            &["parallel.tp", "16 GPUs"],
        ),
        yaml(
            "yaml-tp-cp-pp-product-wraps",
            &SCENARIO.replace("tp: 8, pp: 1", "tp: 4294967296, cp: 4294967296, pp: 1"),
            &["parallel.tp", "GPUs"],
        ),
        yaml("yaml-pp-not-dividing-layers", &SCENARIO.replace("tp: 8, pp: 1", "tp: 1, pp: 16"), &["parallel.pp", "40"]),
        yaml(
            "yaml-nodes-product-overflows",
            &SCENARIO.replace("gpus: 16, gpus_per_node: 8", "nodes: 536870913, gpus_per_node: 8"),
            &["cluster.nodes", "overflows", "at most 2097152 nodes"],
        ),
        yaml(
            "yaml-nodes-beyond-max-hosts",
            &SCENARIO.replace("gpus: 16, gpus_per_node: 8", "nodes: 536870911, gpus_per_node: 8"),
            &["cluster.gpus", "at most 16777216"],
        ),
        yaml(
            "yaml-gpus-per-node-zero",
            &SCENARIO.replace("gpus_per_node: 8", "gpus_per_node: 0"),
            &["cluster.gpus_per_node", "at least 1"],
        ),
        yaml(
            "yaml-gpus-and-nodes-disagree",
            &SCENARIO.replace("gpus: 16", "gpus: 16, nodes: 3"),
            &["cluster.gpus", "nodes x gpus_per_node"],
        ),
        yaml("yaml-gpus-zero", &SCENARIO.replace("gpus: 16", "gpus: 0"), &["cluster.gpus"]),
        yaml(
            "yaml-gpus-u32-overflow",
            &SCENARIO.replace("gpus: 16", "gpus: 4294967296"),
            &["cluster", "4294967296"],
        ),
        // A type error names the key path and where the value was written: its line, or the --set.
        yaml(
            "yaml-type-error-line",
            "name: t\nmodel: gpt3-13b\nparallel:\n  pp: 1\n  tp: two\ncluster: { gpu: H100, gpus: 16 }\n",
            &["parallel.tp", "\"two\"", "(line 5)"],
        ),
        set("set-type-error-names-the-set", &["parallel.pp=x"], &["parallel.pp", "(from --set parallel.pp=x)"]),
        yaml(
            "yaml-unknown-gpu",
            &SCENARIO.replace("gpus: 16", "gpus: 16, gpu: H900"),
            &["H900", "H100"],
        ),
        yaml(
            "yaml-seq-zero",
            &SCENARIO.replace("seq_length: 2048", "seq_length: 0"),
            &["training.seq_length"],
        ),
        yaml(
            "yaml-mbs-zero",
            &SCENARIO.replace("micro_batch_size: 1", "micro_batch_size: 0"),
            &["training.micro_batch_size"],
        ),
        yaml(
            "yaml-gbs-not-divisible",
            &SCENARIO.replace("global_batch_size: 16", "global_batch_size: 3"),
            &["training.global_batch_size"],
        ),
        yaml(
            "yaml-unknown-backend",
            &SCENARIO.replace("analytical", "quantum"),
            &["network", "quantum"],
        ),
        yaml(
            "yaml-nic-unit-typo",
            &SCENARIO.replace(
                "gpus_per_node: 8 }",
                "gpus_per_node: 8, topology: { kind: rail-fat-tree, nic: { bandwidth: 400Gbs } } }",
            ),
            &["cluster", "400Gbs"],
        ),
        yaml(
            "yaml-nic-zero-rate",
            &SCENARIO.replace(
                "gpus_per_node: 8 }",
                "gpus_per_node: 8, topology: { kind: rail-fat-tree, nic: { bandwidth: 0Gbps } } }",
            ),
            &["bandwidth"],
        ),
        yaml(
            "yaml-unknown-topology",
            &SCENARIO.replace("gpus_per_node: 8 }", "gpus_per_node: 8, topology: { kind: hypercube } }"),
            &["cluster", "hypercube"],
        ),
        yaml("yaml-dlrm-and-model", &format!("{SCENARIO}dlrm: {{}}\n"), &["model"]),
        yaml(
            "yaml-model-zero-layers",
            &SCENARIO.replace("model: gpt3-13b", "model: { preset: gpt3-13b, num_hidden_layers: 0 }"),
            &["model.num_hidden_layers", "at least 1"],
        ),
        yaml(
            "yaml-model-billion-layers",
            &SCENARIO.replace("model: gpt3-13b", "model: { preset: gpt3-13b, num_hidden_layers: 1000000000 }"),
            &["model.num_hidden_layers", "at most 16384"],
        ),
        yaml(
            "yaml-model-huge-vocab",
            &SCENARIO.replace("model: gpt3-13b", "model: { preset: gpt3-13b, vocab_size: 18446744073709551615 }"),
            &["model.vocab_size", "at most"],
        ),
        yaml(
            "yaml-model-too-many-params",
            &SCENARIO.replace(
                "model: gpt3-13b",
                "model: { preset: gpt3-13b, hidden_size: 1048576, num_attention_heads: 64, num_key_value_heads: 64, intermediate_size: 4194304, num_hidden_layers: 16384 }",
            ),
            &["model", "parameters"],
        ),
        yaml(
            "yaml-efficiency-missing",
            &format!("{SCENARIO}compute: {{ efficiency: nope.csv }}\n"),
            &["nope.csv"],
        ),
        yaml(
            "yaml-overlap-negative",
            &format!("{SCENARIO}compute: {{ overlap_slowdown: -1 }}\n"),
            &["overlap_slowdown"],
        ),
        yaml(
            "yaml-output-unknown",
            &format!("{SCENARIO}output: {{ traces: true }}\n"),
            &["output", "traces"],
        ),
        yaml(
            "yaml-fast-forward-theta",
            &SCENARIO.replace("backend: analytical", "backend: packet, fast_forward: { theta: 2 }"),
            &["theta"],
        ),
        case("yaml-file-missing", &[], &["run", "{dir}/absent.yaml"], &["absent.yaml"]),
        // --- --set ---
        set("set-no-equals", &["parallel.tp"], &["--set", "key.path=value"]),
        set("set-bad-yaml-value", &["parallel.tp=[1"], &["--set parallel.tp"]),
        set("set-unknown-section", &["paralel.tp=2"], &["paralel", "unknown section"]),
        set("set-unknown-key", &["parallel.tq=2"], &["parallel", "tq"]),
        set("set-tp-string", &["parallel.tp=two"], &["parallel", "two"]),
        set("set-tp-float", &["parallel.tp=2.5"], &["parallel", "2.5"]),
        set(
            "set-nodes-overflow",
            &["cluster.gpus=null", "cluster.nodes=536870913"],
            &["cluster.nodes", "overflows"],
        ),
        set(
            "set-layers-huge",
            &["model={preset: gpt3-13b, num_hidden_layers: 1000000000}"],
            &["model.num_hidden_layers"],
        ),
        set("set-backend-unknown", &["network.backend=ns3"], &["network", "ns3"]),
        set("set-gpu-unknown", &["cluster.gpu=B300X"], &["B300X"]),
        set("set-seq-huge", &["training.seq_length=-1"], &["training", "-1"]),
        set(
            "set-through-a-preset-name",
            &["model.num_hidden_layers=4"],
            &["--set model.num_hidden_layers", "`model` is a scalar (gpt3-13b)", "not a map"],
        ),
        set("set-through-a-scalar", &["parallel.tp.x=1"], &["--set parallel.tp.x", "`parallel.tp` is a scalar"]),
        set(
            "set-section-to-scalar",
            &["parallel=4"],
            &["parallel", "is a section", "--set parallel.<key>=value"],
        ),
        set("set-empty-key", &["cluster..gpu=H100"], &["--set cluster..gpu", "empty key"]),
        // Subcommands of the Python package's `llmsim`: the cargo binary says where they are.
        case("cli-plot-python-only", &[], &["plot", "runs/x"], &["unrecognized subcommand 'plot'", "pip install ."]),
        case("cli-search-python-only", &[], &["search", "s.yaml"], &["`llmsim search` comes with the Python package"]),
        set("set-type-error-names-key-path", &["parallel={tp: 2, pp: two}"], &["parallel.pp", "two"]),
        set(
            "set-deep-flow-value",
            &[&format!("parallel.tp={}", "[".repeat(100_000))],
            &["--set parallel.tp", "nested more than 128 levels"],
        ),
        case(
            "set-backend-flag-unknown",
            &[("s.yaml", SCENARIO)],
            &["run", "{dir}/s.yaml", "--backend", "ns3"],
            &["--backend", "ns3"],
        ),
        // --- Sweep spec ---
        sweep(
            "sweep-samples-type",
            "base: s.yaml\nrandom: { samples: many, axes: {} }\n",
            &["random.samples", "many", "line 2"],
        ),
        sweep(
            "sweep-random-axis-type",
            "base: s.yaml\nrandom: { samples: 2, axes: { parallel.tp: { int: [1, x] } } }\n",
            &["random.axes.parallel.tp.int", "x"],
        ),
        // Fuzzing regression (sweep target): zero draws panicked with an index out of bounds.
        sweep(
            "sweep-random-zero-samples",
            "base: s.yaml\nrandom: { samples: 0, axes: { parallel.tp: { choice: [1, 2] } } }\n",
            &["random.samples", "at least 1"],
        ),
        sweep("sweep-grid-not-a-list", "base: s.yaml\ngrid: { parallel.tp: 4 }\n", &["grid.parallel.tp", "list"]),
        sweep(
            "sweep-axis-through-a-scalar",
            "base: s.yaml\ngrid: { model.num_hidden_layers: [4, 8] }\n",
            &["model.num_hidden_layers", "`model` is a scalar"],
        ),
        sweep("sweep-unknown-key", "base: s.yaml\ngird: {}\n", &["gird", "unknown field"]),
        sweep(
            "sweep-deep-flow-nesting",
            &format!("base: s.yaml\ngrid: {}\n", "{a: ".repeat(100_000)),
            &["nested more than 128 levels deep at line 2"],
        ),
        sweep("sweep-billion-laughs", &format!("base: s.yaml\n{}", laughs(200_000)), &["expands to more than"]),
        // --- Hugging Face config.json ---
        hf("hf-not-json", "{ hidden_size: 1 ", &["config"]),
        hf("hf-not-object", "[1, 2]", &["object"]),
        hf(
            "hf-missing-hidden",
            &HF_CONFIG.replace("\"hidden_size\": 1024,", ""),
            &["hidden_size"],
        ),
        hf(
            "hf-missing-vocab",
            &HF_CONFIG.replace(",\n  \"vocab_size\": 32000", ""),
            &["vocab_size"],
        ),
        hf_field("hf-vocab-u64-max", "vocab_size", "18446744073709551615", &["vocab_size", "at most"]),
        hf_field("hf-vocab-negative", "vocab_size", "-1", &["vocab_size"]),
        hf_field("hf-vocab-float", "vocab_size", "3.5", &["vocab_size"]),
        hf_field("hf-vocab-string", "vocab_size", "\"32000\"", &["vocab_size"]),
        hf_field("hf-vocab-beyond-u64", "vocab_size", "18446744073709551616", &["vocab_size"]),
        hf_field(
            "hf-layers-billion",
            "num_hidden_layers",
            "1000000000",
            &["num_hidden_layers", "at most 16384"],
        ),
        hf_field("hf-layers-zero", "num_hidden_layers", "0", &["num_hidden_layers", "at least 1"]),
        hf_field("hf-hidden-huge", "hidden_size", "1099511627776", &["hidden_size", "at most"]),
        hf_field(
            "hf-heads-not-dividing",
            "num_attention_heads",
            "7",
            &["num_attention_heads", "hidden_size"],
        ),
        hf_field("hf-kv-not-dividing", "num_key_value_heads", "3", &["num_key_value_heads"]),
        hf_field(
            "hf-ffn-huge",
            "intermediate_size",
            "18446744073709551615",
            &["intermediate_size", "at most"],
        ),
        hf_field("hf-experts-topk-missing", "num_local_experts", "8", &["num_experts_per_tok"]),
        hf_field("hf-layer-types-unknown", "layer_types", "[\"linear_attention\"]", &["layer_types"]),
        hf_field(
            "hf-mamba-expand-overflow",
            "hybrid_override_pattern",
            "\"M*M*\"",
            &["ssm_state_size"],
        ),
        hf(
            "hf-mamba-expand-huge",
            &HF_CONFIG.replace(
                "\"vocab_size\": 32000",
                "\"vocab_size\": 32000, \"hybrid_override_pattern\": \"M*M*\", \"ssm_state_size\": 128, \"expand\": 18446744073709551615",
            ),
            &["model.mamba.num_heads", "at most"],
        ),
        case(
            "hf-file-missing",
            &[("s.yaml", HF_SCENARIO)],
            &["run", "{dir}/s.yaml"],
            &["config.json"],
        ),
        // --- ns-3 config.txt ---
        ns3_key(
            "ns3-stop-time-wraps",
            "SIMULATOR_STOP_TIME 18446744.0745",
            &["SIMULATOR_STOP_TIME", "config.txt:4:", "longest simulated time"],
        ),
        ns3_key(
            "ns3-stop-time-1e300",
            "SIMULATOR_STOP_TIME 1e300",
            &["SIMULATOR_STOP_TIME", "config.txt:4:"],
        ),
        ns3_key(
            "ns3-stop-time-negative",
            "SIMULATOR_STOP_TIME -1",
            &["SIMULATOR_STOP_TIME", "config.txt:4:"],
        ),
        ns3_key("ns3-stop-time-nan", "SIMULATOR_STOP_TIME NaN", &["SIMULATOR_STOP_TIME", "config.txt:4:"]),
        ns3_key("ns3-buffer-zero", "BUFFER_SIZE 0", &["BUFFER_SIZE", "config.txt:4:", "1..="]),
        ns3_key(
            "ns3-buffer-shift-overflow",
            "BUFFER_SIZE 17592186044416",
            &["BUFFER_SIZE", "config.txt:4:"],
        ),
        ns3_key("ns3-rp-timer-huge", "RP_TIMER 1e300", &["RP_TIMER", "config.txt:4:"]),
        ns3_key("ns3-unknown-key", "RATE_AY 5Mb/s", &["RATE_AY", "config.txt:4:"]),
        ns3_key("ns3-missing-value", "RATE_AI", &["RATE_AI", "config.txt:4:", "needs a value"]),
        ns3_key("ns3-rate-typo", "RATE_AI fast", &["RATE_AI", "config.txt:4:"]),
        ns3_key("ns3-payload-zero", "PACKET_PAYLOAD_SIZE 0", &["PACKET_PAYLOAD_SIZE", "config.txt:4:"]),
        ns3_key("ns3-flag-two", "ENABLE_QCN 2", &["ENABLE_QCN", "config.txt:4:"]),
        ns3_key("ns3-mi-thresh-wraps", "MI_THRESH 4294967297", &["MI_THRESH", "config.txt:4:", "too large"]),
        ns3_key("ns3-int-multi-wraps", "INT_MULTI 4294967296", &["INT_MULTI", "config.txt:4:"]),
        ns3_key(
            "ns3-error-rate-above-one",
            "ERROR_RATE_PER_LINK 1.5",
            &["ERROR_RATE_PER_LINK", "config.txt:4:"],
        ),
        ns3_key(
            "ns3-kmax-map-count-overflow",
            "KMAX_MAP 9223372036854775808 1 1",
            &["KMAX_MAP", "config.txt:4:"],
        ),
        ns3_key(
            "ns3-kmax-kb-overflow",
            "KMAX_MAP 1 100000000000 18446744073709552",
            &["KMAX_MAP", "config.txt:4:", "KB"],
        ),
        ns3(
            "ns3-cc-mode-wraps-to-dcqcn",
            "CC_MODE 4294967297\nTOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n",
            NS3_TOPO,
            NS3_FLOW,
            &["CC_MODE 4294967297", "config.txt:1:"],
        ),
        ns3(
            "ns3-cc-mode-missing",
            "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n",
            NS3_TOPO,
            NS3_FLOW,
            &["CC_MODE"],
        ),
        ns3(
            "ns3-topology-file-missing",
            "CC_MODE 1\nTOPOLOGY_FILE nope.txt\nFLOW_FILE flow.txt\n",
            NS3_TOPO,
            NS3_FLOW,
            &["TOPOLOGY_FILE", "nope.txt"],
        ),
        // --- ns-3 topology ---
        ns3(
            "ns3-topo-links-u32-max",
            NS3_CONFIG,
            "3 1 4294967295\n2\n0 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt", "4294967295 links"],
        ),
        ns3("ns3-topo-empty", NS3_CONFIG, "", NS3_FLOW, &["topo.txt", "empty"]),
        ns3(
            "ns3-topo-header-fields",
            NS3_CONFIG,
            "3 1\n2\n",
            NS3_FLOW,
            &["topo.txt:1:", "header"],
        ),
        ns3(
            "ns3-topo-node-count-huge",
            NS3_CONFIG,
            "4294967295 1 2\n2\n",
            NS3_FLOW,
            &["topo.txt:1:", "nodes"],
        ),
        ns3(
            "ns3-topo-switch-id-range",
            NS3_CONFIG,
            "3 1 2\n7\n0 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:2:", "switch id 7"],
        ),
        ns3(
            "ns3-topo-link-node-range",
            NS3_CONFIG,
            "3 1 2\n2\n0 9 100Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:3:", "node \"9\""],
        ),
        ns3(
            "ns3-topo-zero-rate",
            NS3_CONFIG,
            "3 1 2\n2\n0 2 0Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:3:", "rate"],
        ),
        ns3(
            "ns3-topo-bad-delay",
            NS3_CONFIG,
            "3 1 2\n2\n0 2 100Gbps 1 0\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:3:", "delay"],
        ),
        ns3(
            "ns3-topo-error-rate",
            NS3_CONFIG,
            "3 1 2\n2\n0 2 100Gbps 1us 2\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:3:", "error rate"],
        ),
        ns3(
            "ns3-topo-self-link",
            NS3_CONFIG,
            "3 1 2\n2\n2 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt:3:", "itself"],
        ),
        ns3(
            "ns3-topo-link-count-short",
            NS3_CONFIG,
            "3 1 3\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            NS3_FLOW,
            &["topo.txt", "3 links"],
        ),
        // --- ns-3 flow file ---
        ns3(
            "ns3-flow-count-1e15",
            NS3_CONFIG,
            NS3_TOPO,
            "1000000000000000\n0 1 3 100 1000 0.000001\n",
            &["flow.txt:1:", "1000000000000000 flows"],
        ),
        ns3(
            "ns3-flow-count-usize-max",
            NS3_CONFIG,
            NS3_TOPO,
            "18446744073709551615\n",
            &["flow.txt:1:"],
        ),
        ns3(
            "ns3-flow-src-2pow32",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n4294967296 1 3 100 1000 0.000001\n",
            &["flow.txt:2:", "src 4294967296"],
        ),
        ns3(
            "ns3-flow-dst-2pow32",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 4294967297 3 100 1000 0.000001\n",
            &["flow.txt:2:", "dst 4294967297"],
        ),
        ns3(
            "ns3-flow-src-not-host",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n2 1 3 100 1000 0.000001\n",
            &["flow.txt:2:", "hosts"],
        ),
        ns3(
            "ns3-flow-start-wraps",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 1 3 100 1000 18446744.0745\n",
            &["flow.txt:2:", "start"],
        ),
        ns3(
            "ns3-flow-pg-zero",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 1 0 100 1000 0.000001\n",
            &["flow.txt:2:", "pg"],
        ),
        ns3(
            "ns3-flow-dport-range",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 1 3 65536 1000 0.000001\n",
            &["flow.txt:2:", "dport"],
        ),
        ns3(
            "ns3-flow-size-zero",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 1 3 100 0 0.000001\n",
            &["flow.txt:2:", "size"],
        ),
        ns3(
            "ns3-flow-fields",
            NS3_CONFIG,
            NS3_TOPO,
            "1\n0 1 3 100 1000\n",
            &["flow.txt:2:", "6 fields"],
        ),
        ns3(
            "ns3-flow-unsorted",
            NS3_CONFIG,
            NS3_TOPO,
            "2\n0 1 3 100 1000 0.5\n1 0 3 100 1000 0.1\n",
            &["flow.txt:3:", "sorted"],
        ),
        ns3(
            "ns3-flow-count-not-number",
            NS3_CONFIG,
            NS3_TOPO,
            "many\n",
            &["flow.txt:1:", "number of flows"],
        ),
        // --- Efficiency and op-time database CSVs ---
        csv("eff-empty", "efficiency", "", &["compute.efficiency: t.csv", "header"]),
        csv("eff-bad-header", "efficiency", "gpu,klass\n*,gemm\n", &["compute.efficiency: t.csv", "klass"]),
        csv(
            "eff-not-number",
            "efficiency",
            "gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemm,fast,0.8,2.0,\n",
            &["compute.efficiency: t.csv", "compute_eff"],
        ),
        csv(
            "eff-above-one",
            "efficiency",
            "gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemm,7,0.8,2.0,\n",
            &["compute.efficiency: t.csv", "compute_eff"],
        ),
        csv(
            "eff-unknown-class",
            "efficiency",
            "gpu,class,compute_eff,memory_eff,launch_us,dtype\n*,gemmm,0.8,0.8,2.0,\n",
            &["compute.efficiency: t.csv", "gemmm"],
        ),
        csv(
            "eff-unknown-gpu",
            "efficiency",
            "gpu,class,compute_eff,memory_eff,launch_us,dtype\nH900,gemm,0.8,0.8,2.0,\n",
            &["compute.efficiency: t.csv", "H900"],
        ),
        csv("db-bad-header", "database", "gpu,op,time_us\nH100,x,1\n", &["compute.database: op database"]),
        csv(
            "db-negative-time",
            "database",
            "gpu,op,shape,time_us\nH100,attn_qkv,\"b=1\",-4\n",
            &["compute.database: op database", "time_us"],
        ),
        csv(
            "db-not-number",
            "database",
            "gpu,op,shape,time_us\nH100,attn_qkv,\"b=1\",soon\n",
            &["compute.database: op database", "time_us"],
        ),
        csv(
            "db-unknown-gpu",
            "database",
            "gpu,op,shape,time_us\nH900,attn_qkv,\"b=1\",4\n",
            &["compute.database: op database", "H900"],
        ),
        // --- ASTRA-sim network YAML ---
        astra(
            "astra-lengths-differ",
            &ASTRA.replace("npus_count: [ 8, 2 ]", "npus_count: [ 8 ]"),
            &["npus_count"],
        ),
        astra(
            "astra-zero-npus",
            &ASTRA.replace("npus_count: [ 8, 2 ]", "npus_count: [ 8, 0 ]"),
            &["npus_count"],
        ),
        astra(
            "astra-npus-product-overflow",
            &ASTRA.replace("npus_count: [ 8, 2 ]", "npus_count: [ 65536, 65536 ]"),
            &["npus_count"],
        ),
        astra("astra-zero-bandwidth", &ASTRA.replace("46.57", "0"), &["bandwidth"]),
        astra("astra-negative-latency", &ASTRA.replace("500.0", "-5"), &["latency"]),
        astra(
            "astra-unknown-topology",
            &ASTRA.replace("Switch, Switch", "Switch, Hypercube"),
            &["topology", "Hypercube"],
        ),
        // --- SimAI workload files and Chakra groups ---
        case(
            "simai-empty",
            &[("c.yaml", "cluster: { gpus: 16 }\n"), ("wl.txt", "")],
            &["run", "--workload", "simai:{dir}/wl.txt", "{dir}/c.yaml"],
            &["wl.txt"],
        ),
        case(
            "simai-bad-count",
            &[
                ("c.yaml", "cluster: { gpus: 16 }\n"),
                (
                    "wl.txt",
                    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n18446744073709551615\n",
                ),
            ],
            &["run", "--workload", "simai:{dir}/wl.txt", "{dir}/c.yaml"],
            &["wl.txt:2:"],
        ),
        case(
            "workload-unknown-format",
            &[("c.yaml", "cluster: { gpus: 16 }\n")],
            &["run", "--workload", "astra:{dir}/x", "{dir}/c.yaml"],
            &["--workload", "chakra"],
        ),
        case(
            "chakra-groups-not-json",
            &[("c.yaml", "cluster: { gpus: 16 }\n"), ("g.json", "{ \"0\": [0, 1 ")],
            &[
                "run",
                "--workload",
                "chakra:{dir}/t",
                "--comm-groups",
                "{dir}/g.json",
                "{dir}/c.yaml",
            ],
            &["g.json"],
        ),
        // --- Other commands' flags ---
        case(
            "topo-unknown-kind",
            &[],
            &["topo", "--topology", "hypercube", "--gpus", "16", "--describe"],
            &["hypercube"],
        ),
        case(
            "topo-nic-typo",
            &[],
            &["topo", "--gpus", "16", "--nic", "400Gbs", "--describe"],
            &["400Gbs"],
        ),
        case(
            "topo-nic-zero",
            &[],
            &["topo", "--gpus", "16", "--nic", "0Gbps", "--describe"],
            &["bandwidth"],
        ),
        case(
            "topo-gpus-beyond-max",
            &[],
            &["topo", "--gpus", "4294967288", "--describe"],
            &["GPUs"],
        ),
        case(
            "collective-size-typo",
            &[],
            &["collective", "--gpus", "16", "--size", "1GiBB"],
            &["1GiBB"],
        ),
        case(
            "collective-unknown-op",
            &[],
            &["collective", "--gpus", "16", "--op", "all-scatter"],
            &["all-scatter"],
        ),
    ];
    // The same overflow through every spelling of the GPU count.
    for (n, gpn) in [("4294967295", "8"), ("2147483648", "2"), ("65537", "65536")] {
        c.push(yaml(
            &format!("yaml-nodes-{n}-x-{gpn}"),
            &SCENARIO.replace("gpus: 16, gpus_per_node: 8", &format!("nodes: {n}, gpus_per_node: {gpn}")),
            &["cluster.nodes", "overflows"],
        ));
    }
    c
}

fn run(args: &[String], dir: &Path) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.replace("{dir}", &dir.display().to_string())).collect();
    Command::new(BIN)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run llmsim")
}

fn case_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad_inputs").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn every_bad_input_gets_a_clean_error_naming_the_field() {
    let cases = catalogue();
    assert!(cases.len() >= 100, "the catalogue has {} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    let mut failures = Vec::new();
    for c in &cases {
        assert!(names.insert(c.name.clone()), "duplicate case name {}", c.name);
        let dir = case_dir(&c.name);
        for (path, text) in &c.files {
            std::fs::write(dir.join(path), text).unwrap();
        }
        let o = run(&c.args, &dir);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let code = o.status.code();
        if std::env::var_os("BAD_INPUTS_VERBOSE").is_some() {
            eprintln!("{}: exit {code:?}: {}", c.name, stderr.trim());
        }
        let mut why = Vec::new();
        if code == Some(0) || code == Some(101) || code.is_none() {
            why.push(format!("exit {code:?}"));
        }
        if stderr.contains("panicked") {
            why.push("panicked".into());
        }
        for e in &c.expect {
            if !stderr.contains(e.as_str()) {
                why.push(format!("stderr lacks {e:?}"));
            }
        }
        if let Some(r) = repeated_part(&stderr) {
            why.push(format!("the message says {r:?} twice"));
        }
        if !why.is_empty() {
            failures.push(format!("{}: {}\n    stderr: {}", c.name, why.join(", "), stderr.trim()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A part (between `: `) of the `error:` line, 20 characters or longer, that the line repeats:
/// an error that prints its cause in its own text and again as the cause.
fn repeated_part(stderr: &str) -> Option<String> {
    let line = stderr.lines().find(|l| l.starts_with("error:"))?;
    let parts: Vec<&str> = line.split(": ").collect();
    parts
        .iter()
        .enumerate()
        .find(|(i, p)| p.len() >= 20 && parts[i + 1..].contains(p))
        .map(|(_, p)| p.to_string())
}

#[test]
fn repeated_parts_are_found() {
    let gpu = "unknown GPU `MI355X`; valid: V100, A100, H100 (case-insensitive)";
    assert_eq!(
        repeated_part(&format!("error: cluster.gpu: {gpu}: {gpu}\n")).as_deref(),
        Some("unknown GPU `MI355X`; valid")
    );
    assert_eq!(repeated_part(&format!("error: cluster.gpu: {gpu}\n")), None);
}

/// `llmsim run X | head -1`: the reader goes away; the tool ends quietly with exit 0.
#[test]
fn a_closed_stdout_pipe_ends_quietly() {
    let dir = case_dir("closed-pipe");
    std::fs::write(dir.join("s.yaml"), SCENARIO).unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "s.yaml", "--json"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the tool prints (it parses and simulates first).
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

/// `llmsim run X > /dev/full`: a clean error, not a panic.
#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_a_clean_error() {
    let dir = case_dir("full-stdout");
    std::fs::write(dir.join("s.yaml"), SCENARIO).unwrap();
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = Command::new(BIN)
        .args(["run", "s.yaml"])
        .current_dir(&dir)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("writing to stdout"), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

/// A legal but costly combination runs, with a warning naming the consequence, from `llmsim run`
/// as from `llmsim collective` (issue 33: spray over go-back-N RoCE).
#[test]
fn run_warns_of_spray_over_go_back_n() {
    let dir = case_dir("warn-spray");
    std::fs::write(dir.join("s.yaml"), SCENARIO).unwrap();
    let args: Vec<String> = [
        "run",
        "s.yaml",
        "--ideal-comm",
        "--set",
        "network.backend=packet",
        "--set",
        "network.load_balance=spray",
    ]
    .map(String::from)
    .to_vec();
    let o = run(&args, &dir);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("warning: load_balance spray with RoCE go-back-N"),
        "stderr: {stderr}"
    );
    // The same plan on ECMP says nothing.
    let o = run(&args[..5], &dir);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning:"));
}
