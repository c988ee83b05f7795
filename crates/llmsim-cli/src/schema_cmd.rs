//! `llmsim schema`: the JSON Schema of scenario and sweep files, derived from the serde types
//! (schemars), and the scenario reference page rendered from it (`--markdown`).
//!
//! Editors with the YAML language server complete and validate a file that starts with
//! `# yaml-language-server: $schema=<path to scenario.schema.json>`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use serde_json::{Map, Value};

#[derive(Args, Debug)]
/// `llmsim schema`: where the schemas go, or which one to print.
pub struct SchemaArgs {
    /// The sweep file's schema instead of the scenario file's.
    #[arg(long)]
    pub sweep: bool,
    /// The reference page (Markdown) of both files instead of a JSON Schema.
    #[arg(long, conflicts_with = "sweep")]
    pub markdown: bool,
    /// Write scenario.schema.json, sweep.schema.json and scenario.md into this directory (the
    /// committed copies: `--out docs/reference`).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["sweep", "markdown"])]
    pub out: Option<PathBuf>,
}

/// The files `--out` writes, with their contents.
pub fn files() -> Vec<(&'static str, String)> {
    let json = |v: Value| serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
    vec![
        ("scenario.schema.json", json(scenario_schema())),
        ("sweep.schema.json", json(sweep_schema())),
        ("scenario.md", markdown()),
    ]
}

/// `llmsim schema`: writes the JSON Schemas and the Markdown reference to `--out`, or prints the
/// scenario schema.
///
/// # Errors
/// A file or directory that cannot be written (with `--out`).
pub fn run(a: &SchemaArgs) -> Result<()> {
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, text) in files() {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            outln!("wrote {}", path.display());
        }
    } else if a.markdown {
        out!("{}", markdown());
    } else {
        let s = if a.sweep { sweep_schema() } else { scenario_schema() };
        outln!("{}", serde_json::to_string_pretty(&s)?);
    }
    Ok(())
}

/// The scenario file's JSON Schema, as JSON.
pub fn scenario_schema() -> Value {
    llmsim_sim::schema::scenario_schema().to_value()
}

/// The sweep file's JSON Schema, as JSON.
pub fn sweep_schema() -> Value {
    llmsim_sweep::spec::sweep_schema().to_value()
}

/// The command that writes the committed schemas and reference page.
pub const REGENERATE: &str = "cargo run -p llmsim-cli -- schema --out docs/reference";

/// The reference page: every section and key of a scenario file and a sweep file, with type,
/// default and description, rendered from the two schemas.
pub fn markdown() -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Scenario and sweep file reference\n");
    let _ = writeln!(
        o,
        "<!-- Generated from the Rust types by `llmsim schema --markdown`; do not edit. Regenerate:\n     {REGENERATE} -->\n"
    );
    let _ = writeln!(
        o,
        "Scenario and sweep files are YAML. Keys are strict: an unknown key is an error that names \
         its section and the valid keys. `--set a.b=value` overrides any key. Sizes, times and \
         rates are strings with a unit ([Size](#size), [Time](#time), [Bandwidth](#bandwidth), [Power](#power)).\n"
    );
    let _ = writeln!(
        o,
        "JSON Schemas for editors, next to this page: [scenario.schema.json](scenario.schema.json) \
         and [sweep.schema.json](sweep.schema.json) (`llmsim schema`, `llmsim schema --sweep`). With \
         the YAML language server (VS Code's YAML extension and others), a first line \
         `# yaml-language-server: $schema=<path to>/docs/reference/scenario.schema.json` turns on \
         completion and validation.\n"
    );
    let scenario = scenario_schema();
    let sweep = sweep_schema();
    let _ = writeln!(o, "## Scenario file\n");
    render_object(&mut o, &scenario);
    let mut defs = definitions(&scenario);
    for (name, def) in definitions(&sweep) {
        if !defs.iter().any(|(n, _)| *n == name) {
            defs.push((name, def));
        }
    }
    let sweep_names: BTreeSet<String> = definitions(&sweep)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !definitions(&scenario).iter().any(|(m, _)| m == n))
        .collect();
    let _ = writeln!(o, "## Sweep file\n");
    render_object(&mut o, &sweep);
    let _ = writeln!(o, "## Types\n");
    defs.sort_by(|a, b| a.0.cmp(&b.0));
    // The scenario (a sweep's inline base) is the first section.
    for (name, def) in defs.iter().filter(|(n, _)| n != "Scenario") {
        let used_by = if sweep_names.contains(name) { " (sweep files)" } else { "" };
        let _ = writeln!(o, "### {name}{used_by}\n");
        render_definition(&mut o, def);
    }
    o
}

fn definitions(root: &Value) -> Vec<(String, Value)> {
    root.get("definitions")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn description(s: &Value) -> Option<String> {
    s.get("description").and_then(Value::as_str).map(one_line)
}

/// A doc comment as one table cell: lines joined, pipes escaped, rustdoc links as plain code.
fn one_line(s: &str) -> String {
    unlink(
        &s.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|"),
    )
}

/// "[`Type::item`]" (a rustdoc link) -> "`Type::item`".
fn unlink(s: &str) -> String {
    s.replace("[`", "`").replace("`]", "`")
}

fn render_definition(o: &mut String, def: &Value) {
    if let Some(d) = def.get("description").and_then(Value::as_str) {
        let _ = writeln!(o, "{}\n", unlink(d.trim()));
    }
    if def.get("properties").is_some() {
        render_object(o, def);
        return;
    }
    let variants = def.get("oneOf").or_else(|| def.get("anyOf")).and_then(Value::as_array);
    if let Some(variants) = variants {
        // An internally tagged enum: one table per variant.
        if variants.iter().all(|v| v.get("properties").is_some()) {
            for v in variants {
                let tag = v
                    .get("properties")
                    .and_then(Value::as_object)
                    .and_then(|p| p.iter().find(|(_, s)| s.get("const").is_some() || s.get("enum").is_some()));
                let title = tag.map_or_else(String::new, |(k, s)| format!("{k}: {}", type_name(s)));
                let _ = writeln!(o, "#### {title}\n");
                if let Some(d) = description(v) {
                    let _ = writeln!(o, "{d}\n");
                }
                render_object(o, v);
            }
            return;
        }
        let _ = writeln!(o, "One of:\n");
        for v in variants {
            let d = description(v).map(|d| format!(": {d}")).unwrap_or_default();
            let _ = writeln!(o, "- {}{d}", type_name(v));
        }
        let _ = writeln!(o);
        return;
    }
    let _ = writeln!(o, "Type: {}\n", type_name(def));
    if let Some(p) = def.get("pattern").and_then(Value::as_str) {
        let _ = writeln!(o, "Pattern: `{p}`\n");
    }
    if let Some(e) = def.get("examples").and_then(Value::as_array) {
        let ex: Vec<String> = e.iter().map(|x| format!("`{}`", x.as_str().unwrap_or_default())).collect();
        let _ = writeln!(o, "Examples: {}\n", ex.join(", "));
    }
}

fn render_object(o: &mut String, s: &Value) {
    let empty = Map::new();
    let props = s.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: BTreeSet<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let _ = writeln!(o, "| key | type | default | description |");
    let _ = writeln!(o, "|---|---|---|---|");
    for (k, p) in props {
        // A section's defaults are in its own table.
        let default = match (p.get("default"), required.contains(k.as_str())) {
            (_, true) => "required".to_string(),
            (Some(Value::Null | Value::Object(_)), _) | (None, _) => String::new(),
            (Some(d), _) => format!("`{}`", serde_json::to_string(d).unwrap_or_default().replace('|', "\\|")),
        };
        let _ = writeln!(
            o,
            "| `{k}` | {} | {default} | {} |",
            type_name(p),
            description(p).unwrap_or_default()
        );
    }
    let _ = writeln!(o);
}

/// A short type name: a link for a reference, `a \| b` for alternatives, `null` dropped (an
/// optional key is simply left out).
fn type_name(s: &Value) -> String {
    if let Some([one]) = s.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        return type_name(one);
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        if name == "Scenario" {
            return "[Scenario](#scenario-file)".to_string();
        }
        return format!("[{name}](#{})", name.to_lowercase());
    }
    if let Some(c) = s.get("const") {
        return format!("`{}`", c.as_str().map_or_else(|| c.to_string(), str::to_string));
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = e
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| format!("`{}`", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        return names.join(" \\| ");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let names: Vec<String> = alts
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .map(type_name)
                .collect();
            return names.join(" \\| ");
        }
    }
    let base = match s.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" \\| "),
        _ => "any".to_string(),
    };
    match base.as_str() {
        "array" => match s.get("items") {
            Some(Value::Array(items)) => {
                let names: Vec<String> = items.iter().map(type_name).collect();
                format!("[{}]", names.join(", "))
            }
            Some(i) => format!("list of {}", type_name(i)),
            None => "list".to_string(),
        },
        "object" => match s.get("additionalProperties") {
            Some(v) if v.is_object() => format!("map of {}", type_name(v)),
            _ => "map".to_string(),
        },
        _ => base,
    }
}
