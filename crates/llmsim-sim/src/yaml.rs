//! Bounded YAML reading for every YAML input (scenario files, `--set` values, sweep specs,
//! ASTRA-sim network files).
//!
//! Two hostile shapes are refused before they cost time or memory:
//! - Deep flow nesting (`[[[[...`): libyaml's scanner revisits every open flow level on each
//!   token, so 200k nested `[` take minutes. A linear pre-scan refuses more than
//!   [`MAX_DEPTH`] levels, the same depth serde_yaml_ng's deserializer allows.
//! - Alias expansion ("billion laughs"): serde_yaml_ng replays an alias's events each time it is
//!   used, up to 100 jumps per event of the document, so a 400 kB file with a padding list
//!   expanded to 22 GB of `Value`s. Values are built here by a visitor that counts nodes and
//!   stops at [`MAX_NODES`].
//!
//! Type errors of typed sections name the key path ([`serde_path_to_error`]).

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_yaml_ng::value::{Tag, TaggedValue};
use serde_yaml_ng::{Mapping, Value};
use thiserror::Error;

/// Most levels of nested collections a YAML input may have (serde_yaml_ng's own limit).
pub const MAX_DEPTH: usize = 128;

/// Most nodes (scalars, lists, maps), aliases expanded, one YAML input may produce. A scenario
/// has a few hundred; a sweep of [`MAX_DEPTH`]-free lists of 100k points fits.
pub const MAX_NODES: usize = 1_000_000;

/// Why a YAML text was refused.
#[derive(Debug, Error)]
pub enum YamlError {
    /// A syntax or type error from the YAML reader (with its line and column where known).
    #[error("{0}")]
    Syntax(String),
    /// Brackets nest deeper than [`MAX_DEPTH`] levels.
    #[error(
        "nested more than {MAX_DEPTH} levels deep at line {line} (`[` or `{{` brackets); \
         llmsim inputs nest a few levels: close the brackets"
    )]
    TooDeep {
        /// The line where the nesting went too deep, from 1.
        line: usize,
    },
    /// Aliases expand to more than [`MAX_NODES`] values.
    #[error(
        "expands to more than {MAX_NODES} values (aliases `*name` repeat their anchor's contents); \
         remove the repeated aliases"
    )]
    TooLarge,
    /// A typed section's error, with the key path inside the text (`parallel.tp`).
    #[error("{path}: {message}")]
    Typed {
        /// The key path, as in `parallel.tp`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Parses YAML (or JSON) text into a tree, refusing deep nesting and alias bombs.
///
/// # Errors
/// [`YamlError::Syntax`], [`YamlError::TooDeep`], [`YamlError::TooLarge`].
pub fn parse(text: &str) -> Result<Value, YamlError> {
    check_depth(text)?;
    let budget = Budget {
        left: Cell::new(MAX_NODES),
    };
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Node(&budget).deserialize(de) {
        Ok(v) => Ok(v),
        Err(_) if budget.left.get() == 0 => Err(YamlError::TooLarge),
        Err(e) => Err(YamlError::Syntax(repetition_hint(e.to_string()))),
    }
}

/// Parses YAML text straight into `T`: first as a bounded tree (see [`parse`]), then typed, so a
/// type error names its key path and line.
///
/// # Errors
/// As [`parse`], and [`YamlError::Typed`].
pub fn parse_typed<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    parse(text)?;
    serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text)).map_err(typed)
}

/// Deserializes `T` from a tree, naming the key path of an error (`tp` inside `parallel`).
///
/// # Errors
/// [`YamlError::Typed`].
pub fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, YamlError> {
    serde_path_to_error::deserialize(v).map_err(typed)
}

fn typed(e: serde_path_to_error::Error<serde_yaml_ng::Error>) -> YamlError {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    // Read from text, serde_yaml_ng names the path itself; from a tree it does not.
    let message = e.into_inner().to_string();
    let message = match message.strip_prefix(&format!("{path}: ")) {
        Some(m) if !path.is_empty() => m.to_string(),
        _ => message,
    };
    YamlError::Typed { path, message }
}

/// serde_yaml_ng's own alias guard says only "repetition limit exceeded".
fn repetition_hint(m: String) -> String {
    if m.contains("repetition limit exceeded") {
        format!("{m} (aliases `*name` expand too far; remove the repeated aliases)")
    } else {
        m
    }
}

/// Refuses flow nesting past [`MAX_DEPTH`] in linear time. Two counts, so that a quote this scan
/// misreads cannot hide a deep nest: one skips quoted scalars and comments (exact for ordinary
/// files), one counts every bracket. Either past the limit refuses; a legitimate file is far
/// below it on both.
fn check_depth(text: &str) -> Result<(), YamlError> {
    let b = text.as_bytes();
    let (mut exact, mut blind, mut line) = (0usize, 0usize, 1usize);
    let mut i = 0;
    // Whether a quote here starts a quoted scalar: at a line's start or after `[`, `{`, `,`,
    // `: `, `- `, `? ` (a tag or anchor before it ends in a space too).
    let starts_scalar = |i: usize| {
        let mut j = i;
        while j > 0 && b[j - 1] == b' ' {
            j -= 1;
        }
        j == 0 || matches!(b[j - 1], b'\n' | b'[' | b'{' | b',') || (j < i && matches!(b[j - 1], b':' | b'-' | b'?'))
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => line += 1,
            b'[' | b'{' => {
                exact += 1;
                blind += 1;
                if exact.max(blind) > MAX_DEPTH {
                    return Err(YamlError::TooDeep { line });
                }
            }
            b']' | b'}' => {
                exact = exact.saturating_sub(1);
                blind = blind.saturating_sub(1);
            }
            b'#' if i == 0 || b[i - 1].is_ascii_whitespace() => {
                while i + 1 < b.len() && b[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' if starts_scalar(i) => {
                // Skip to the closing quote (`\"` escapes in double quotes, `''` in single).
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\n' => line += 1,
                        b'\\' if c == b'"' => i += 1,
                        b'[' | b'{' => {
                            blind += 1;
                            if blind > MAX_DEPTH {
                                return Err(YamlError::TooDeep { line });
                            }
                        }
                        b']' | b'}' => blind = blind.saturating_sub(1),
                        q if q == c => {
                            if c == b'\'' && b.get(i + 1) == Some(&b'\'') {
                                i += 1;
                            } else {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Nodes left to build.
struct Budget {
    left: Cell<usize>,
}

impl Budget {
    fn take<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom("too many values")),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }
}

/// Builds a [`Value`] as serde_yaml_ng's own visitor does, one budget unit per node.
#[derive(Clone, Copy)]
struct Node<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.take()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.take()?;
        let mut v = Vec::new();
        while let Some(x) = seq.next_element_seed(self)? {
            v.push(x);
        }
        Ok(Value::Sequence(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.take()?;
        let mut m = Mapping::new();
        while let Some(k) = map.next_key_seed(self)? {
            if m.contains_key(&k) {
                let shown = serde_yaml_ng::to_string(&k).unwrap_or_default();
                return Err(de::Error::custom(format!("duplicate entry with key {}", shown.trim_end())));
            }
            let v = map.next_value_seed(self)?;
            m.insert(k, v);
        }
        Ok(Value::Mapping(m))
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        self.0.take()?;
        let (tag, contents): (String, _) = data.variant()?;
        let value = contents.newtype_variant_seed(self)?;
        Ok(Value::Tagged(Box::new(TaggedValue { tag: Tag::new(tag), value })))
    }
}

/// The 1-based line of the key at dotted `path` (`parallel.tp`, `cluster.topology.nic`) in
/// block-style YAML `text`, following indentation; a key inside a flow map (`parallel: { tp: 2 }`)
/// is given as its parent's line. `None` when the path is not written in the text (a default, an
/// override, an alias). A list index (`layers[3]`) ends the path at its parent.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let is_key = |content: &str, key: &str| {
        content.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with(':'))
            || content
                .strip_prefix('"')
                .and_then(|c| c.strip_prefix(key))
                .is_some_and(|rest| rest.starts_with("\":"))
    };
    let (mut from, mut to, mut parent_indent): (usize, usize, Option<usize>) = (0, lines.len(), None);
    let mut found: Option<usize> = None;
    for key in path.split('.') {
        let key = key.split('[').next().unwrap_or(key);
        if key.is_empty() {
            break;
        }
        // A parent written as a flow map (`nic: { bandwidth: ... }`): the rest of the path is
        // on its line (or it is not written, and the parent's line is the nearest place).
        if let Some(f) = found
            && lines[f].contains('{')
        {
            return Some(f + 1);
        }
        let hit = (from..to).find(|&i| {
            let l = lines[i];
            let content = l.trim_start();
            !content.is_empty() && !content.starts_with('#') && parent_indent.is_none_or(|p| indent(l) > p) && is_key(content, key)
        })?;
        let ind = indent(lines[hit]);
        // The key's block: the lines after it, up to the next at its own indentation or less.
        let end = (hit + 1..to)
            .find(|&i| {
                let c = lines[i].trim_start();
                !c.is_empty() && !c.starts_with('#') && indent(lines[i]) <= ind
            })
            .unwrap_or(to);
        (from, to, parent_indent, found) = (hit + 1, end, Some(ind), Some(hit));
    }
    found.map(|f| f + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_of_follows_indentation_and_flow_maps() {
        let text = "name: x\n# parallel: comment\nmodel: gpt3-13b\nparallel:\n  pp: 2\n  tp: two\ncluster:\n  gpus: 16\n  topology:\n    kind: fat-tree\n    nic: { bandwidth: fast, latency: 1us }\ntraining: { seq_length: 2048, micro_batch_size: x }\n";
        assert_eq!(line_of(text, "parallel.tp"), Some(6));
        assert_eq!(line_of(text, "parallel"), Some(4));
        assert_eq!(line_of(text, "cluster.topology.kind"), Some(10));
        assert_eq!(line_of(text, "cluster.topology.nic.bandwidth"), Some(11));
        assert_eq!(line_of(text, "training.micro_batch_size"), Some(12));
        // Not written: a default or an override.
        assert_eq!(line_of(text, "parallel.dp"), None);
        assert_eq!(line_of(text, "network.cc"), None);
        // `gpus` under cluster, not a `gpus` elsewhere at the wrong depth.
        assert_eq!(line_of("gpus: 1\ncluster:\n  gpus: 2\n", "cluster.gpus"), Some(3));
        assert_eq!(line_of("cluster:\n  nodes: 2\ngpus: 1\n", "cluster.gpus"), None);
    }

    /// Nine levels of nine aliases, after a padding list that raises serde_yaml_ng's own jump
    /// limit (100 per event): without the node budget this built 22 GB of values.
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

    #[test]
    fn billion_laughs_is_refused_quickly() {
        let t = std::time::Instant::now();
        for padding in [0, 200_000] {
            let e = parse(&laughs(padding)).unwrap_err();
            assert!(
                matches!(e, YamlError::TooLarge) || e.to_string().contains("aliases"),
                "padding {padding}: {e}"
            );
        }
        // Generous for debug builds on a busy machine; the unguarded run never finished.
        assert!(t.elapsed().as_secs() < 60, "{:?}", t.elapsed());
    }

    #[test]
    fn deep_flow_nesting_is_refused_in_linear_time() {
        let n = 200_000;
        for text in [
            format!("model: {}{}", "[".repeat(n), "]".repeat(n)),
            format!("model: {}1{}", "{a: ".repeat(n), "}".repeat(n)),
            // Quoted closers do not hide the nest from the blind count.
            format!("model: {}", "[ \"]\" ".repeat(n)),
        ] {
            let t = std::time::Instant::now();
            let e = parse(&text).unwrap_err();
            assert!(matches!(e, YamlError::TooDeep { line: 1 }), "{e}");
            assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
        }
    }

    #[test]
    fn ordinary_yaml_parses_as_serde_yaml_ng_does() {
        let text = "a: [1, -2, 3.5, x, \"[[[\", '{{', null, true]\nb: { c: ~, 'd': \"e\" }  # [[[\nt: !tag 4\nr: &r [1]\ns: *r\n";
        let ours = parse(text).unwrap();
        let theirs: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        let depth = format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1));
        assert!(parse(&depth).is_ok());
    }

    #[test]
    fn duplicate_keys_and_typed_errors_name_the_key() {
        let e = parse("a: 1\na: 2\n").unwrap_err().to_string();
        assert!(e.contains("duplicate entry with key a"), "{e}");
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct P {
            inner: Q,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Q {
            tp: u32,
        }
        let e = parse_typed::<P>("inner:\n  tp: x\n").unwrap_err().to_string();
        assert!(e.starts_with("inner.tp: invalid type: string \"x\", expected u32"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }
}
