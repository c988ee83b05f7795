//! Errors of the workload importers ([`crate::chakra`], [`crate::simai`]). Each names the file,
//! the rank and the node (or line) at fault.

use thiserror::Error;

/// Largest communication size accepted (1 PiB), so that byte arithmetic cannot overflow.
pub const MAX_COMM_BYTES: u64 = 1 << 50;

/// A trace or workload file llmsim cannot use.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ImportError {
    /// A file that cannot be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file's path.
        path: String,
        /// The I/O error.
        message: String,
    },

    /// Bytes that are not a valid Chakra trace (truncated, corrupt).
    #[error("{file} (rank {rank}): {what}: {message}")]
    Decode {
        /// The file's path.
        file: String,
        /// The rank the file belongs to.
        rank: u32,
        /// The message that fails, e.g. `GlobalMetadata` or `node #3 (after node id 7)`.
        what: String,
        /// The protobuf decoder's error.
        message: String,
    },

    /// A node that decodes but cannot be simulated.
    #[error("{file} (rank {rank}) node id {node}: {message}")]
    Node {
        /// The file's path.
        file: String,
        /// The rank the file belongs to.
        rank: u32,
        /// The node's Chakra id.
        node: u64,
        /// What is wrong with it.
        message: String,
    },

    /// Collectives name process groups that the communicator-group JSON does not define.
    #[error("{}", missing_groups_message(.missing, .groups_file))]
    MissingGroups {
        /// (pg_name, ranks whose traces use it).
        missing: Vec<(String, Vec<u32>)>,
        /// The communicator-group JSON given, if any.
        groups_file: Option<String>,
    },

    /// A dependency cycle inside one rank's trace.
    #[error("{file} (rank {rank}): dependency cycle {}; a trace must be a DAG", cycle_text(.cycle))]
    Cycle {
        /// The file's path.
        file: String,
        /// The rank the file belongs to.
        rank: u32,
        /// Node ids around the cycle.
        cycle: Vec<u64>,
    },

    /// A bad communicator-group JSON.
    #[error("{file}: {message}; expected {{\"<pg_name>\": [rank, ...], ...}}")]
    CommGroups {
        /// The file's path.
        file: String,
        /// The JSON parser's error.
        message: String,
    },

    /// A SimAI/AICB workload line llmsim cannot use.
    #[error("{file}:{line}: {message}")]
    Line {
        /// The file's path.
        file: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },

    /// A `workload:` field of a scenario that names no readable workload.
    #[error("{field}: {message}")]
    Field {
        /// The dotted field, e.g. `workload.path`.
        field: String,
        /// What is wrong, and the fix.
        message: String,
    },

    /// Anything else about the whole input (no traces found, rank count mismatch, ...).
    #[error("{0}")]
    Invalid(String),
}

fn cycle_text(c: &[u64]) -> String {
    let mut s: Vec<String> = c.iter().map(|x| x.to_string()).collect();
    if let Some(f) = c.first() {
        s.push(f.to_string());
    }
    format!("through node ids {}", s.join(" -> "))
}

fn missing_groups_message(missing: &[(String, Vec<u32>)], file: &Option<String>) -> String {
    const SHOWN: usize = 8;
    let mut list: Vec<String> = missing
        .iter()
        .take(SHOWN)
        .map(|(pg, ranks)| format!("pg_name {pg:?} (used by ranks {})", rank_list(ranks)))
        .collect();
    if missing.len() > SHOWN {
        list.push(format!("and {} more", missing.len() - SHOWN));
    }
    match file {
        Some(f) => format!("{f} defines no {}; add them with their member ranks", list.join(", ")),
        None => format!(
            "the traces use process groups {} but no communicator-group JSON was given; pass --comm-groups groups.json",
            list.join(", ")
        ),
    }
}

/// `0-3, 8, 10-11` (or `0-126 step 2` for an evenly strided list): sorted ranks, compactly.
pub fn rank_list(ranks: &[u32]) -> String {
    if ranks.len() >= 3 {
        let step = ranks[1].wrapping_sub(ranks[0]);
        if step > 1 && ranks.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step) {
            return format!("{}-{} step {step}", ranks[0], ranks[ranks.len() - 1]);
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

pub(crate) fn io(path: &std::path::Path, e: std::io::Error) -> ImportError {
    ImportError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(rank_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3, 8, 10-11");
        assert_eq!(rank_list(&[0, 2, 4, 6]), "0-6 step 2");
        assert_eq!(rank_list(&[5]), "5");
        let many: Vec<(String, Vec<u32>)> = (0..10).map(|i| (i.to_string(), vec![i])).collect();
        let m = missing_groups_message(&many, &None);
        assert!(m.contains("pg_name \"7\" (used by ranks 7), and 2 more"), "{m}");
    }
}
