//! Shared reading of the crate's small CSV formats: `#` comment lines, a header naming the
//! columns, whitespace-trimmed fields, errors with 1-based line numbers and column names.

use crate::error::ComputeError;

/// A parsed CSV text: the position of each named column, and the records with their lines.
pub(crate) struct CsvText {
    what: String,
    /// For each requested column, its index in the header (`None`: optional and absent).
    columns: Vec<Option<usize>>,
    names: Vec<&'static str>,
    records: Vec<(u64, csv::StringRecord)>,
}

impl CsvText {
    /// Parses `text`. `required` columns must be in the header, `optional` ones may be; any
    /// other header name is an error (a typo must not become a silent default).
    pub(crate) fn parse(what: &str, text: &str, required: &[&'static str], optional: &[&'static str]) -> Result<CsvText, ComputeError> {
        // Comment lines become empty lines, which the reader skips; each line of `blanked` is the
        // line of `text` with the same number. Line numbers come from byte offsets, since the
        // csv crate does not count the lines it skips.
        let mut blanked = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            if line.trim_start().starts_with('#') {
                blanked.push_str(if line.ends_with("\r\n") {
                    "\r\n"
                } else if line.ends_with('\n') {
                    "\n"
                } else {
                    ""
                });
            } else {
                blanked.push_str(line);
            }
        }
        let newlines: Vec<u64> = blanked
            .bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i as u64)
            .collect();
        // A record's position is where the reader resumed, before the empty lines it skipped.
        let bytes = blanked.as_bytes();
        let line_of = |pos: Option<&csv::Position>| {
            pos.map_or(0, |p| {
                let mut b = usize::try_from(p.byte()).unwrap_or(usize::MAX).min(bytes.len());
                while b < bytes.len() && (bytes[b] == b'\n' || bytes[b] == b'\r') {
                    b += 1;
                }
                1 + newlines.partition_point(|&nl| nl < b as u64) as u64
            })
        };
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .has_headers(true)
            .from_reader(blanked.as_bytes());
        let err = |line: u64, column: Option<&str>, message: String| ComputeError::Csv {
            what: what.to_string(),
            line,
            column: column.map(str::to_string),
            message,
        };
        let header = rdr.headers().map_err(|e| csv_error(what, &e, line_of(e.position())))?.clone();
        let header_line = line_of(header.position()).max(1);
        if header.is_empty() || header.iter().all(str::is_empty) {
            return Err(err(
                header_line,
                None,
                format!("missing header; expected: {}", expected(required, optional)),
            ));
        }
        let mut names: Vec<&'static str> = required.to_vec();
        names.extend_from_slice(optional);
        let mut columns = vec![None; names.len()];
        for (i, h) in header.iter().enumerate() {
            let Some(k) = names.iter().position(|n| n.eq_ignore_ascii_case(h)) else {
                return Err(err(
                    header_line,
                    Some(h),
                    format!("unknown column `{h}`; expected: {}", expected(required, optional)),
                ));
            };
            if columns[k].is_some() {
                return Err(err(header_line, Some(h), format!("column `{h}` appears twice")));
            }
            columns[k] = Some(i);
        }
        if let Some(k) = (0..required.len()).find(|&k| columns[k].is_none()) {
            return Err(err(
                header_line,
                Some(required[k]),
                format!("missing column `{}`; expected: {}", required[k], expected(required, optional)),
            ));
        }
        let mut records = Vec::new();
        for rec in rdr.records() {
            let rec = rec.map_err(|e| csv_error(what, &e, line_of(e.position())))?;
            let line = line_of(rec.position());
            records.push((line, rec));
        }
        Ok(CsvText {
            what: what.to_string(),
            columns,
            names,
            records,
        })
    }

    pub(crate) fn records(&self) -> impl Iterator<Item = Row<'_>> {
        self.records.iter().map(move |(line, rec)| Row {
            text: self,
            line: *line,
            rec,
        })
    }
}

/// One record, addressed by column name.
pub(crate) struct Row<'a> {
    text: &'a CsvText,
    pub(crate) line: u64,
    rec: &'a csv::StringRecord,
}

impl Row<'_> {
    /// The field of column `name`; `None` if the column is optional and absent.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        let k = self.text.names.iter().position(|n| *n == name)?;
        self.text.columns[k].and_then(|i| self.rec.get(i))
    }

    /// The field of a required column (empty string if somehow absent).
    pub(crate) fn field(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    /// An error about this row's `column`.
    pub(crate) fn error(&self, column: &str, message: impl Into<String>) -> ComputeError {
        ComputeError::Csv {
            what: self.text.what.clone(),
            line: self.line,
            column: Some(column.to_string()),
            message: message.into(),
        }
    }

    /// Parses a finite number in `[lo, hi]` (`lo` excluded when `lo_open`).
    pub(crate) fn number(&self, column: &str, lo: f64, lo_open: bool, hi: f64) -> Result<f64, ComputeError> {
        let s = self.field(column);
        let v: f64 = s.parse().map_err(|_| self.error(column, format!("`{s}` is not a number")))?;
        let above = if lo_open { v > lo } else { v >= lo };
        if !(v.is_finite() && above && v <= hi) {
            let range = match (lo_open, hi.is_finite()) {
                (true, true) => format!("in ({lo}, {hi}]"),
                (false, true) => format!("in [{lo}, {hi}]"),
                (true, false) => format!("> {lo}"),
                (false, false) => format!(">= {lo} and finite"),
            };
            return Err(self.error(column, format!("{s} is out of range; valid: {range}")));
        }
        Ok(v)
    }
}

fn expected(required: &[&str], optional: &[&str]) -> String {
    let mut s = required.join(",");
    for o in optional {
        s.push_str(&format!("[,{o}]"));
    }
    s
}

fn csv_error(what: &str, e: &csv::Error, line: u64) -> ComputeError {
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => format!("{len} fields, expected {expected_len} as in the header"),
        csv::ErrorKind::Utf8 { .. } => "invalid UTF-8".to_string(),
        _ => e.to_string(),
    };
    ComputeError::Csv {
        what: what.to_string(),
        line,
        column: None,
        message,
    }
}
